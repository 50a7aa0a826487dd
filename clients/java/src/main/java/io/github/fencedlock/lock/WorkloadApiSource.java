package io.github.fencedlock.lock;

import io.github.fencedlock.lock.spiffe.workload.SpiffeWorkloadAPIGrpc;
import io.github.fencedlock.lock.spiffe.workload.Workload.X509SVID;
import io.github.fencedlock.lock.spiffe.workload.Workload.X509SVIDRequest;
import io.github.fencedlock.lock.spiffe.workload.Workload.X509SVIDResponse;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.netty.channel.ChannelOption;
import io.grpc.netty.shaded.io.netty.channel.EventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.MultiThreadIoEventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.epoll.Epoll;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollDomainSocketChannel;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollIoHandler;
import io.grpc.netty.shaded.io.netty.channel.unix.DomainSocketAddress;
import io.grpc.netty.shaded.io.netty.util.concurrent.DefaultThreadFactory;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.MetadataUtils;
import java.net.URI;
import java.net.URISyntaxException;
import java.security.PrivateKey;
import java.security.cert.CertificateException;
import java.security.cert.X509Certificate;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The workload's X.509-SVID and trust bundle from the SPIFFE Workload API (a SPIRE agent's
 * unix socket): {@link #connect} returns once the first SVID has arrived, and the stream
 * stays open for every rotation the agent pushes after; a broken stream is opened again with
 * backoff, the last SVID staying in use meanwhile. Give it to
 * {@link LockClient.Builder#workloadApi}: a rotation is picked up by the client's next call,
 * on a new connection, without a failed one. One source can serve many clients; it is the
 * caller's to close, after them.
 *
 * <pre>{@code
 * try (WorkloadApiSource svid = WorkloadApiSource.connect(); // SPIFFE_ENDPOINT_SOCKET
 *      LockClient c = LockClient.builder("https://lock-edge:8443")
 *         .workloadApi(svid)
 *         .serverId("spiffe://example.org/ns/edge/sa/envoy")
 *         .build()) {
 *     ...
 * }
 * }</pre>
 *
 * <p>Needs netty's native epoll transport, which grpc-netty-shaded bundles for Linux x86_64
 * and aarch64: elsewhere {@code connect} fails and says so. The first SVID of the agent's
 * answer is the one used (the spec's default); federated bundles are not used, since the
 * edge is in the workload's own trust domain.
 */
public final class WorkloadApiSource implements AutoCloseable {
    /** The environment variable that names the Workload API's address, as in every SPIFFE library. */
    public static final String ENDPOINT_ENV = "SPIFFE_ENDPOINT_SOCKET";
    /** How long {@link #connect(String)} waits for the first SVID. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(10);
    /** The header every Workload API call must carry: the agent refuses calls without it (the spec's guard against SSRF). */
    static final Metadata.Key<String> SECURITY_HEADER =
            Metadata.Key.of("workload.spiffe.io", Metadata.ASCII_STRING_MARSHALLER);
    /** The first wait before the stream is opened again; doubled per failure, reset by an answer. */
    static final Duration MIN_BACKOFF = Duration.ofMillis(100);
    /** Bounds the wait between two attempts while the agent is away. */
    static final Duration MAX_BACKOFF = Duration.ofSeconds(5);

    private static final Logger LOG = Logger.getLogger(WorkloadApiSource.class.getName());

    private final String address;
    private final EventLoopGroup loop;
    private final ManagedChannel channel;
    private final SpiffeWorkloadAPIGrpc.SpiffeWorkloadAPIStub stub;
    private final CountDownLatch first = new CountDownLatch(1);
    /** Told after each new SVID or bundle: the clients' channels start new connections. */
    private final List<Runnable> listeners = new CopyOnWriteArrayList<>();
    private final AtomicLong updates = new AtomicLong();

    private final Object mu = new Object();
    /** The latest SVID and bundle accepted; null until the first. */
    private volatile SvidMaterial current;
    private volatile boolean closed;
    /** Why the last attempt failed, for connect's timeout message and the log. */
    private volatile String lastError = "";
    /** Guarded by mu. */
    private long backoffNanos = MIN_BACKOFF.toNanos();
    /** Set by a failure, cleared by an answer: only the first failure of a run is a warning. Guarded by mu. */
    private boolean failing;
    /** The open FetchX509SVID call, to cancel on close; guarded by mu. */
    private ClientCallStreamObserver<X509SVIDRequest> stream;

    private WorkloadApiSource(String address, String path) {
        this.address = address;
        this.loop = new MultiThreadIoEventLoopGroup(1, new DefaultThreadFactory("lock-workload-api", true),
                EpollIoHandler.newFactory());
        this.channel = NettyChannelBuilder.forAddress(new DomainSocketAddress(path))
                .eventLoopGroup(loop)
                .channelType(EpollDomainSocketChannel.class)
                // grpc sets SO_KEEPALIVE on every connection, and netty warns at each one that
                // a unix socket has no such option: null takes it off again.
                .withOption(ChannelOption.SO_KEEPALIVE, null)
                .overrideAuthority("localhost")
                .usePlaintext()
                .directExecutor()
                .build();
        Metadata md = new Metadata();
        md.put(SECURITY_HEADER, "true");
        this.stub = SpiffeWorkloadAPIGrpc.newStub(channel)
                .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(md));
    }

    /** {@link #connect(String)} at the address in {@code SPIFFE_ENDPOINT_SOCKET}. */
    public static WorkloadApiSource connect() {
        return connect(System.getenv(ENDPOINT_ENV));
    }

    /** {@link #connect(String, Duration)} waiting up to {@link #DEFAULT_TIMEOUT}. */
    public static WorkloadApiSource connect(String address) {
        return connect(address, DEFAULT_TIMEOUT);
    }

    /**
     * Connects to the Workload API at address ({@code unix:///run/spire/agent.sock}, or
     * {@code unix:/run/spire/agent.sock}) and waits up to timeout for the first SVID.
     *
     * @throws IllegalArgumentException a missing or malformed address (only {@code unix:} is supported)
     * @throws LockException UNAUTHENTICATED when no usable SVID arrived in time (the message
     *     says the last failure), or when netty's native epoll transport is unavailable;
     *     CANCELLED when the thread was interrupted
     */
    public static WorkloadApiSource connect(String address, Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        String path = socketPath(address);
        requireEpoll(Epoll.isAvailable(), Epoll.unavailabilityCause());
        WorkloadApiSource s = new WorkloadApiSource(address, path);
        s.fetch();
        try {
            if (!s.first.await(timeout.toNanos(), TimeUnit.NANOSECONDS)) {
                String why = s.lastError;
                s.close();
                throw LockException.client(Reason.UNAUTHENTICATED, "SPIFFE Workload API at " + address
                        + ": no X.509-SVID within " + timeout.toMillis() + " ms"
                        + (why.isEmpty() ? "" : " (last: " + why + ")"));
            }
        } catch (InterruptedException e) {
            s.close();
            Thread.currentThread().interrupt();
            throw LockException.client(Reason.CANCELLED, "interrupted waiting for the SPIFFE Workload API", e);
        }
        return s;
    }

    /**
     * The socket path of a Workload API address: {@code unix:///path} or {@code unix:/path},
     * absolute, no host, query or fragment (the SPIFFE Workload Endpoint spec's rules).
     */
    static String socketPath(String address) {
        if (address == null || address.isEmpty()) {
            throw new IllegalArgumentException("lock: no SPIFFE Workload API address: pass unix:///path/to/agent.sock or set "
                    + ENDPOINT_ENV);
        }
        String expected = "lock: SPIFFE Workload API address \"" + address + "\": expected unix:///path/to/agent.sock";
        URI u;
        try {
            u = new URI(address);
        } catch (URISyntaxException e) {
            throw new IllegalArgumentException(expected);
        }
        if ("tcp".equals(u.getScheme())) {
            throw new IllegalArgumentException(expected + " (tcp:// is not supported by the Java client)");
        }
        if (!"unix".equals(u.getScheme()) || u.isOpaque() || u.getRawAuthority() != null
                || u.getRawQuery() != null || u.getRawFragment() != null) {
            throw new IllegalArgumentException(expected);
        }
        String path = u.getPath();
        if (path == null || !path.startsWith("/") || path.length() < 2) {
            throw new IllegalArgumentException(expected);
        }
        return path;
    }

    /** Fails, saying what is missing, when netty's native epoll transport did not load. */
    static void requireEpoll(boolean available, Throwable cause) {
        if (available) {
            return;
        }
        throw LockException.client(Reason.UNAUTHENTICATED, "the SPIFFE Workload API client needs netty's native "
                + "epoll transport for its unix socket (bundled in grpc-netty-shaded for Linux x86_64 and aarch64), "
                + "and it is unavailable on " + System.getProperty("os.name") + " " + System.getProperty("os.arch")
                + (cause == null ? "" : " (" + cause + ")")
                + ": give the client SVID files (svidFiles) or use a mesh sidecar (meshSidecar)", cause);
    }

    /** The address this source reads from, as given. */
    public String address() {
        return address;
    }

    /**
     * The current SVID: the latest the agent pushed.
     *
     * @throws LockException CLOSED after {@link #close()}
     */
    public X509Svid svid() {
        return material().svid;
    }

    /**
     * The current trust bundle of the workload's trust domain (it verifies the edge);
     * unmodifiable.
     *
     * @throws LockException CLOSED after {@link #close()}
     */
    public List<X509Certificate> bundle() {
        return material().bundle;
    }

    /** How many SVIDs or bundles were taken: 1 after connect, one more per rotation. */
    public long updates() {
        return updates.get();
    }

    /** What one TLS handshake uses now. */
    SvidMaterial material() {
        if (closed) {
            throw LockException.client(Reason.CLOSED, "the SPIFFE Workload API source " + address + " is closed");
        }
        return current;
    }

    /** Runs onUpdate after each new SVID or bundle, on the source's thread, until the handle is closed. */
    AutoCloseable onUpdate(Runnable onUpdate) {
        listeners.add(onUpdate);
        return () -> listeners.remove(onUpdate);
    }

    /** Opens the FetchX509SVID stream; its answers are taken until it breaks. */
    private void fetch() {
        if (closed) {
            return;
        }
        stub.fetchX509SVID(X509SVIDRequest.getDefaultInstance(),
                new ClientResponseObserver<X509SVIDRequest, X509SVIDResponse>() {
                    @Override
                    public void beforeStart(ClientCallStreamObserver<X509SVIDRequest> call) {
                        synchronized (mu) {
                            stream = call;
                        }
                        if (closed) {
                            call.cancel("closed", null);
                        }
                    }

                    @Override
                    public void onNext(X509SVIDResponse r) {
                        take(r);
                    }

                    @Override
                    public void onError(Throwable t) {
                        broken(Status.fromThrowable(t).toString());
                    }

                    @Override
                    public void onCompleted() {
                        broken("the agent ended the stream");
                    }
                });
    }

    /** Takes one answer: the new SVID and bundle, or, if it is unusable, the last ones stay. */
    private void take(X509SVIDResponse r) {
        SvidMaterial m;
        synchronized (mu) {
            SvidMaterial last = current;
            try {
                m = parse(r, last == null ? 1 : last.generation + 1, "SPIFFE Workload API at " + address);
            } catch (LockException e) {
                lastError = e.getMessage();
                LOG.log(Level.WARNING, "{0}; the last SVID stays in use", lastError);
                return;
            }
            backoffNanos = MIN_BACKOFF.toNanos();
            failing = false;
            if (last != null && same(last, m)) {
                return; // the same SVID again (a reconnect): nothing to rotate
            }
            current = m;
        }
        // The clients hear of it before updates() shows it: a caller that saw the count
        // change and calls next is on a new connection.
        for (Runnable l : listeners) {
            l.run();
        }
        updates.incrementAndGet();
        first.countDown();
    }

    private static boolean same(SvidMaterial a, SvidMaterial b) {
        return a.svid.chain().equals(b.svid.chain()) && a.bundle.equals(b.bundle);
    }

    /**
     * One answer as material: the first SVID (the spec's default), its chain (DER
     * concatenated, leaf first), its PKCS#8 key and its trust domain's bundle. The leaf must
     * carry exactly the SPIFFE ID the answer names.
     *
     * @throws LockException UNAUTHENTICATED naming what is wrong
     */
    static SvidMaterial parse(X509SVIDResponse r, long generation, String where) {
        if (r.getSvidsCount() == 0) {
            throw LockException.client(Reason.UNAUTHENTICATED, where + ": the answer carries no SVID");
        }
        X509SVID s = r.getSvids(0);
        X509Certificate[] chain;
        X509Certificate[] bundle;
        try {
            chain = SvidMaterial.certificates(s.getX509Svid().toByteArray());
            bundle = SvidMaterial.certificates(s.getBundle().toByteArray());
        } catch (CertificateException e) {
            throw LockException.client(Reason.UNAUTHENTICATED, where + ": " + e, e);
        }
        if (chain.length == 0) {
            throw LockException.client(Reason.UNAUTHENTICATED, where + ": the SVID carries no certificate");
        }
        List<String> ids;
        try {
            ids = SpiffeTls.uriSans(chain[0]);
        } catch (CertificateException e) {
            throw LockException.client(Reason.UNAUTHENTICATED, where + ": " + e, e);
        }
        if (!ids.equals(List.of(s.getSpiffeId()))) {
            throw LockException.client(Reason.UNAUTHENTICATED, where + ": the SVID's certificate names "
                    + ids + ", not " + s.getSpiffeId());
        }
        PrivateKey key = SvidMaterial.pkcs8(s.getX509SvidKey().toByteArray());
        if (key == null) {
            throw LockException.client(Reason.UNAUTHENTICATED, where + ": the SVID's key is not an EC, RSA or Ed25519 PKCS#8 key");
        }
        return SvidMaterial.of(generation, s.getSpiffeId(), chain, key, bundle, where);
    }

    /** The stream broke (or a first attempt failed): open it again after the backoff. */
    private void broken(String why) {
        if (closed) {
            return;
        }
        lastError = why;
        long pause;
        boolean news;
        synchronized (mu) {
            stream = null;
            pause = (long) (backoffNanos * (0.75 + ThreadLocalRandom.current().nextDouble() * 0.5));
            backoffNanos = Math.min(backoffNanos * 2, MAX_BACKOFF.toNanos());
            news = !failing && current != null;
            failing = true;
        }
        LOG.log(news ? Level.WARNING : Level.FINE,
                "SPIFFE Workload API at {0}: {1}; again in {2} ms",
                new Object[] {address, why, TimeUnit.NANOSECONDS.toMillis(pause)});
        try {
            loop.schedule(this::fetch, pause, TimeUnit.NANOSECONDS);
        } catch (RejectedExecutionException e) {
            // closed meanwhile
        }
    }

    /** Ends the stream and the connection. A second call does nothing. */
    @Override
    public void close() {
        ClientCallStreamObserver<X509SVIDRequest> s;
        synchronized (mu) {
            if (closed) {
                return;
            }
            closed = true;
            s = stream;
            stream = null;
        }
        listeners.clear();
        if (s != null) {
            s.cancel("closed", null);
        }
        channel.shutdownNow();
        try {
            channel.awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        loop.shutdownGracefully(0, 5, TimeUnit.SECONDS);
    }
}
