package io.github.fencedlock.lock;

import com.google.protobuf.ByteString;
import io.github.fencedlock.lock.spiffe.workload.SpiffeWorkloadAPIGrpc;
import io.github.fencedlock.lock.spiffe.workload.Workload.X509SVID;
import io.github.fencedlock.lock.spiffe.workload.Workload.X509SVIDRequest;
import io.github.fencedlock.lock.spiffe.workload.Workload.X509SVIDResponse;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.netty.shaded.io.netty.channel.ChannelOption;
import io.grpc.netty.shaded.io.netty.channel.EventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.MultiThreadIoEventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollIoHandler;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollServerDomainSocketChannel;
import io.grpc.netty.shaded.io.netty.channel.unix.DomainSocketAddress;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.cert.CertificateException;
import java.security.cert.X509Certificate;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

/**
 * A SPIFFE Workload API server in the test JVM on a real unix socket (what a SPIRE agent
 * serves): FetchX509SVID answers the current response and every one pushed after, and
 * refuses a call without the security header as SPIRE does. It can be stopped and started
 * again on the same socket (an agent restarting).
 */
final class FakeWorkloadApi implements AutoCloseable {
    final Path socket;
    /** The security header's value on each call (null: absent). */
    final List<String> headers = new CopyOnWriteArrayList<>();
    private final List<StreamObserver<X509SVIDResponse>> open = new CopyOnWriteArrayList<>();
    private final EventLoopGroup loop = new MultiThreadIoEventLoopGroup(1, EpollIoHandler.newFactory());
    private volatile X509SVIDResponse current;
    private Server server;

    FakeWorkloadApi(Path socket, X509SVIDResponse first) throws IOException {
        this.socket = socket;
        this.current = first;
        start();
    }

    /** The address a client is given: unix:///path. */
    String endpoint() {
        return "unix://" + socket;
    }

    /** One SVID of spiffeId with the bundle, as the Workload API encodes it. */
    static X509SVIDResponse answer(String spiffeId, TestPki.Issued svid, X509Certificate... bundle)
            throws CertificateException {
        return X509SVIDResponse.newBuilder()
                .addSvids(X509SVID.newBuilder()
                        .setSpiffeId(spiffeId)
                        .setX509Svid(ByteString.copyFrom(TestPki.der(svid.cert)))
                        .setX509SvidKey(ByteString.copyFrom(svid.key.getEncoded()))
                        .setBundle(ByteString.copyFrom(TestPki.der(bundle))))
                .build();
    }

    synchronized void start() throws IOException {
        Files.deleteIfExists(socket);
        ServerInterceptor header = new ServerInterceptor() {
            @Override
            public <Q, A> ServerCall.Listener<Q> interceptCall(ServerCall<Q, A> call, Metadata md,
                                                                ServerCallHandler<Q, A> next) {
                String v = md.get(WorkloadApiSource.SECURITY_HEADER);
                headers.add(v);
                if (!"true".equals(v)) {
                    call.close(Status.INVALID_ARGUMENT.withDescription("security header missing from request"),
                            new Metadata());
                    return new ServerCall.Listener<Q>() { };
                }
                return next.startCall(call, md);
            }
        };
        server = NettyServerBuilder.forAddress(new DomainSocketAddress(socket.toString()))
                .channelType(EpollServerDomainSocketChannel.class)
                .bossEventLoopGroup(loop)
                .workerEventLoopGroup(loop)
                .withChildOption(ChannelOption.SO_KEEPALIVE, null) // no such option on a unix socket
                .addService(ServerInterceptors.intercept(new Service(), header))
                .build()
                .start();
    }

    /** Stops serving: every open stream breaks, and the socket is gone until start. */
    synchronized void stop() throws InterruptedException, IOException {
        server.shutdownNow();
        server.awaitTermination(5, TimeUnit.SECONDS);
        open.clear();
        Files.deleteIfExists(socket);
    }

    /** Makes r the current answer and sends it on every open stream (a rotation). */
    void push(X509SVIDResponse r) {
        current = r;
        for (StreamObserver<X509SVIDResponse> o : open) {
            synchronized (o) {
                o.onNext(r);
            }
        }
    }

    /** How many FetchX509SVID streams are open now. */
    int openStreams() {
        return open.size();
    }

    private final class Service extends SpiffeWorkloadAPIGrpc.SpiffeWorkloadAPIImplBase {
        @Override
        public void fetchX509SVID(X509SVIDRequest req, StreamObserver<X509SVIDResponse> out) {
            ((ServerCallStreamObserver<X509SVIDResponse>) out).setOnCancelHandler(() -> open.remove(out));
            // Registered before current is read, both under the stream's lock: a push racing
            // this call is sent after the answer read here, never lost nor overtaken.
            synchronized (out) {
                open.add(out);
                X509SVIDResponse r = current;
                if (r != null) {
                    out.onNext(r);
                }
            }
        }
    }

    @Override
    public void close() throws IOException {
        try {
            stop();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            loop.shutdownGracefully(0, 1, TimeUnit.SECONDS);
        }
    }
}
