package io.github.fencedlock.lock;

import com.google.protobuf.Any;
import com.google.rpc.ErrorInfo;
import io.grpc.Context;
import io.grpc.Contexts;
import io.grpc.Grpc;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.netty.shaded.io.netty.handler.ssl.SslContext;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.security.cert.Certificate;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.TreeSet;
import java.util.function.BiFunction;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicLong;
import javax.net.ssl.SSLPeerUnverifiedException;
import javax.net.ssl.SSLSession;
import lock.v1.LockGrpc;
import lock.v1.LockOuterClass.AcquireAllRequest;
import lock.v1.LockOuterClass.AcquireAllResponse;
import lock.v1.LockOuterClass.AcquireRequest;
import lock.v1.LockOuterClass.AcquireResponse;
import lock.v1.LockOuterClass.CloseSessionRequest;
import lock.v1.LockOuterClass.CloseSessionResponse;
import lock.v1.LockOuterClass.HoldMode;
import lock.v1.LockOuterClass.HoldRequest;
import lock.v1.LockOuterClass.HoldResponse;
import lock.v1.LockOuterClass.KeepAliveRequest;
import lock.v1.LockOuterClass.KeepAliveResponse;
import lock.v1.LockOuterClass.ObserveRequest;
import lock.v1.LockOuterClass.ObserveResponse;
import lock.v1.LockOuterClass.OpenSessionRequest;
import lock.v1.LockOuterClass.OpenSessionResponse;
import lock.v1.LockOuterClass.ReleaseAllRequest;
import lock.v1.LockOuterClass.ReleaseAllResponse;
import lock.v1.LockOuterClass.ReleaseRequest;
import lock.v1.LockOuterClass.ReleaseResponse;

/**
 * A lock.v1 server in the test JVM (plaintext on loopback, the mesh-sidecar path): sessions
 * with the TTL of the key's class (keys under "slow/": class "slow", 6 s; others: "fast", 3 s;
 * named in OpenSession and Acquire answers), exclusive holds,
 * waits, refusals with ErrorInfo details, and a log of what each call carried. Observe
 * answers from a script per call; AcquireAll grants a set under one token when every key is
 * free; SHARED acquires are granted at once, each with its own token. Keys under "sem/" are a
 * semaphore of {@link #PERMITS} permits (mode PERMIT only, one permit per session, HELD at once
 * when all are held); PERMIT elsewhere, or another mode there, is MALFORMED_REQUEST. Given a TLS context
 * (client certificates required), it is the edge instead: each call's client leaf is kept.
 */
final class FakeServer implements AutoCloseable {
    static final Context.Key<Metadata> HEADERS = Context.key("headers");

    final List<String> calls = new CopyOnWriteArrayList<>();
    final List<String> lockKeys = new CopyOnWriteArrayList<>();
    final List<String> instances = new CopyOnWriteArrayList<>();
    final Map<Long, Long> sessionTtl = new ConcurrentHashMap<>();
    final AtomicLong keepalives = new AtomicLong();
    /** Over TLS: the client leaf of each call, in order ("Method" then the certificate). */
    final List<Map.Entry<String, X509Certificate>> peers = new CopyOnWriteArrayList<>();
    volatile boolean keepAliveFails;
    /** A reason every Acquire is refused with (UNAVAILABLE), while set: a transient refusal. */
    volatile String refuseAcquires;
    private final Map<String, long[]> holders = new HashMap<>(); // key -> {session, token}
    /** The fake's semaphores' N. */
    static final int PERMITS = 3;
    /** Semaphores: key -> permit -> {session, token}. */
    private final Map<String, Map<Integer, long[]>> permits = new HashMap<>();
    /**
     * While set, the next PERMIT acquire is granted and then answered only once its caller has
     * gone (its answer is lost), as a grant racing the caller's cancellation.
     */
    volatile boolean lateGrant;

    /** What one Observe call answers before it ends: cleanly when error is null. */
    static final class Script {
        final List<ObserveResponse> answers;
        final RuntimeException error;

        Script(List<ObserveResponse> answers, RuntimeException error) {
            this.answers = answers;
            this.error = error;
        }
    }

    /** Observe: the requests seen, and per call (0, 1, ...) its script. */
    final List<ObserveRequest> observeReqs = new CopyOnWriteArrayList<>();
    volatile BiFunction<Integer, ObserveRequest, Script> observeScript = (i, r) -> new Script(List.of(), null);
    final List<AcquireAllRequest> acquireAllReqs = new CopyOnWriteArrayList<>();
    final List<ReleaseAllRequest> releaseAllReqs = new CopyOnWriteArrayList<>();
    /** The mode of every unary Acquire and Release, in order. */
    final List<HoldMode> modes = new CopyOnWriteArrayList<>();
    /** Every Hold stream's answers, to break them (breakHoldStreams). */
    private final List<StreamObserver<HoldResponse>> holdStreams = new CopyOnWriteArrayList<>();
    private final AtomicLong nextSession = new AtomicLong(100);
    private final AtomicLong revision = new AtomicLong(1000);
    private final Server server;
    private final boolean tls;

    FakeServer() throws IOException {
        this(null);
    }

    /** tls: the server's context, or null for plaintext. */
    FakeServer(SslContext tls) throws IOException {
        this.tls = tls != null;
        ServerInterceptor capture = new ServerInterceptor() {
            @Override
            public <Q, A> ServerCall.Listener<Q> interceptCall(ServerCall<Q, A> call, Metadata headers,
                                                                ServerCallHandler<Q, A> next) {
                String k = headers.get(Keys.KEY_HEADER);
                if (k != null) {
                    lockKeys.add(call.getMethodDescriptor().getBareMethodName() + " " + k);
                }
                String i = headers.get(Keys.INSTANCE_HEADER);
                if (i != null) {
                    instances.add(i);
                }
                SSLSession ssl = call.getAttributes().get(Grpc.TRANSPORT_ATTR_SSL_SESSION);
                if (ssl != null) {
                    try {
                        Certificate[] peer = ssl.getPeerCertificates();
                        peers.add(Map.entry(call.getMethodDescriptor().getBareMethodName(), (X509Certificate) peer[0]));
                    } catch (SSLPeerUnverifiedException e) {
                        // the server requires client certificates: not reached
                    }
                }
                return Contexts.interceptCall(Context.current().withValue(HEADERS, headers), call, headers, next);
            }
        };
        NettyServerBuilder b = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
                .addService(ServerInterceptors.intercept(new Service(), capture));
        if (tls != null) {
            b.sslContext(tls);
        }
        server = b.build().start();
    }

    String endpoint() {
        return (tls ? "https" : "http") + "://127.0.0.1:" + server.getPort();
    }

    static long ttlOf(String key) {
        return key.startsWith("slow/") ? 6 : 3;
    }

    /** The class covering key, as OpenSession, Acquire and WRONG_SESSION_TTL name it. */
    static String classOf(String key) {
        return key.startsWith("slow/") ? "slow" : "fast";
    }

    static RuntimeException refusal(Status.Code code, String reason, Map<String, String> md) {
        return StatusProto.toStatusRuntimeException(com.google.rpc.Status.newBuilder()
                .setCode(code.value())
                .setMessage("refused: " + reason.toLowerCase())
                .addDetails(Any.pack(ErrorInfo.newBuilder().setDomain("lock.v1").setReason(reason).putAllMetadata(md).build()))
                .build());
    }

    /** Grants key to session, waiting up to waitMillis; the token, or a refusal. */
    long take(AcquireRequest r) throws InterruptedException {
        String refuse = refuseAcquires;
        if (refuse != null) {
            throw refusal(Status.Code.UNAVAILABLE, refuse, Map.of());
        }
        if (!r.getKey().contains("/") || r.getKey().startsWith("bad/")) {
            throw refusal(Status.Code.INVALID_ARGUMENT, "INVALID_KEY", Map.of());
        }
        if (r.getKey().startsWith("archive/")) {
            throw refusal(Status.Code.PERMISSION_DENIED, "NOT_GRANTED", Map.of());
        }
        Long ttl = sessionTtl.get(r.getSessionId());
        if (ttl == null) {
            throw refusal(Status.Code.NOT_FOUND, "SESSION_EXPIRED", Map.of());
        }
        if (ttl != ttlOf(r.getKey())) {
            throw refusal(Status.Code.FAILED_PRECONDITION, "WRONG_SESSION_TTL",
                    Map.of("class", classOf(r.getKey()), "ttl_seconds", Long.toString(ttlOf(r.getKey()))));
        }
        boolean sem = r.getKey().startsWith("sem/");
        if (sem != (r.getMode() == HoldMode.HOLD_MODE_PERMIT)) {
            throw refusal(Status.Code.INVALID_ARGUMENT, "MALFORMED_REQUEST", Map.of());
        }
        if (sem) {
            return takePermit(r)[1];
        }
        if (r.getMode() == HoldMode.HOLD_MODE_SHARED) {
            return (1L << 48) | revision.incrementAndGet();
        }
        long until = System.nanoTime() + r.getWaitMillis() * 1_000_000L;
        synchronized (holders) {
            while (true) {
                long[] h = holders.get(r.getKey());
                if (h == null) {
                    long token = (1L << 48) | revision.incrementAndGet();
                    holders.put(r.getKey(), new long[] {r.getSessionId(), token});
                    return token;
                }
                if (h[0] == r.getSessionId()) {
                    return h[1];
                }
                long left = until - System.nanoTime();
                if (left <= 0) {
                    throw refusal(r.getWaitMillis() == 0 ? Status.Code.ABORTED : Status.Code.DEADLINE_EXCEEDED,
                            "HELD", Map.of());
                }
                holders.wait(Math.max(left / 1_000_000L, 1));
            }
        }
    }

    /** Hands r's session a permit of r's key: the one it holds, else a free one; {permit, token}. */
    long[] takePermit(AcquireRequest r) {
        synchronized (permits) {
            Map<Integer, long[]> held = permits.computeIfAbsent(r.getKey(), k -> new HashMap<>());
            for (Map.Entry<Integer, long[]> e : held.entrySet()) {
                if (e.getValue()[0] == r.getSessionId()) {
                    return new long[] {e.getKey(), e.getValue()[1]};
                }
            }
            for (int i = 0; i < PERMITS; i++) {
                if (!held.containsKey(i)) {
                    long token = (1L << 48) | revision.incrementAndGet();
                    held.put(i, new long[] {r.getSessionId(), token});
                    return new long[] {i, token};
                }
            }
        }
        throw refusal(Status.Code.ABORTED, "HELD", Map.of());
    }

    /** How many permits of key are held. */
    int permitHolders(String key) {
        synchronized (permits) {
            return permits.getOrDefault(key, Map.of()).size();
        }
    }

    void drop(ReleaseRequest r) {
        if (r.getMode() == HoldMode.HOLD_MODE_SHARED) {
            return;
        }
        if (r.getMode() == HoldMode.HOLD_MODE_PERMIT) {
            synchronized (permits) {
                Map<Integer, long[]> held = permits.getOrDefault(r.getKey(), new HashMap<>());
                if (!held.values().removeIf(g -> g[0] == r.getSessionId() && g[1] == r.getToken())) {
                    throw refusal(Status.Code.FAILED_PRECONDITION, "STALE_TOKEN", Map.of());
                }
            }
            return;
        }
        synchronized (holders) {
            long[] h = holders.get(r.getKey());
            if (h == null || h[1] != r.getToken()) {
                throw refusal(Status.Code.FAILED_PRECONDITION, "STALE_TOKEN", Map.of());
            }
            holders.remove(r.getKey());
            holders.notifyAll();
        }
    }

    /** Grants every key of the set at once under one token, waiting up to waitMillis until all are free. */
    AcquireAllResponse takeAll(AcquireAllRequest r) throws InterruptedException {
        if (!sessionTtl.containsKey(r.getSessionId())) {
            throw refusal(Status.Code.NOT_FOUND, "SESSION_EXPIRED", Map.of());
        }
        List<String> keys = new ArrayList<>(new TreeSet<>(r.getKeysList()));
        long until = System.nanoTime() + r.getWaitMillis() * 1_000_000L;
        synchronized (holders) {
            while (true) {
                if (keys.stream().noneMatch(holders::containsKey)) {
                    long token = (1L << 48) | revision.incrementAndGet();
                    for (String k : keys) {
                        holders.put(k, new long[] {r.getSessionId(), token});
                    }
                    return AcquireAllResponse.newBuilder().setToken(token).addAllKeys(keys).build();
                }
                long left = until - System.nanoTime();
                if (left <= 0) {
                    throw refusal(Status.Code.ABORTED, "HELD", Map.of());
                }
                holders.wait(Math.max(left / 1_000_000L, 1));
            }
        }
    }

    /**
     * Ends every open Hold stream with INTERNAL and no lock.v1 reason, as Envoy resets a
     * stream (RST_STREAM INTERNAL_ERROR) whose arbiter restarted. The holds stay.
     */
    void breakHoldStreams() {
        for (StreamObserver<HoldResponse> out : holdStreams) {
            try {
                out.onError(Status.INTERNAL.withDescription("RST_STREAM closed stream").asRuntimeException());
            } catch (RuntimeException e) {
                // ended already
            }
        }
        holdStreams.clear();
    }

    boolean held(String key) {
        synchronized (holders) {
            return holders.containsKey(key);
        }
    }

    private final class Service extends LockGrpc.LockImplBase {
        @Override
        public void openSession(OpenSessionRequest r, StreamObserver<OpenSessionResponse> out) {
            calls.add("OpenSession");
            long id = nextSession.incrementAndGet();
            long ttl = ttlOf(r.getKey());
            sessionTtl.put(id, ttl);
            out.onNext(OpenSessionResponse.newBuilder().setSessionId(id).setTtlSeconds((int) ttl).setClassName(classOf(r.getKey())).build());
            out.onCompleted();
        }

        @Override
        public StreamObserver<KeepAliveRequest> keepAlive(StreamObserver<KeepAliveResponse> out) {
            calls.add("KeepAlive");
            return new StreamObserver<>() {
                @Override
                public void onNext(KeepAliveRequest r) {
                    keepalives.incrementAndGet();
                    if (keepAliveFails) {
                        return; // no answer: the client's renewal times out
                    }
                    Long ttl = sessionTtl.get(r.getSessionId());
                    synchronized (out) {
                        out.onNext(KeepAliveResponse.newBuilder().setSessionId(r.getSessionId())
                                .setTtlSeconds(ttl == null ? 0 : ttl).build());
                    }
                }

                @Override
                public void onError(Throwable t) {}

                @Override
                public void onCompleted() {
                    out.onCompleted();
                }
            };
        }

        @Override
        public void closeSession(CloseSessionRequest r, StreamObserver<CloseSessionResponse> out) {
            calls.add("CloseSession");
            sessionTtl.remove(r.getSessionId());
            synchronized (holders) {
                holders.values().removeIf(h -> h[0] == r.getSessionId());
                holders.notifyAll();
            }
            synchronized (permits) {
                for (Map<Integer, long[]> held : permits.values()) {
                    held.values().removeIf(g -> g[0] == r.getSessionId());
                }
            }
            out.onNext(CloseSessionResponse.getDefaultInstance());
            out.onCompleted();
        }

        @Override
        public void acquire(AcquireRequest r, StreamObserver<AcquireResponse> out) {
            calls.add("Acquire");
            modes.add(r.getMode());
            try {
                if (r.getMode() == HoldMode.HOLD_MODE_PERMIT) {
                    take(r); // the checks, and the permit
                    long[] p = takePermit(r);
                    if (lateGrant) {
                        lateGrant = false;
                        while (!Context.current().isCancelled()) {
                            Thread.sleep(5);
                        }
                        return; // the caller has gone: no one to answer
                    }
                    out.onNext(AcquireResponse.newBuilder().setToken(p[1]).setPermit((int) p[0])
                            .setClassName(classOf(r.getKey())).build());
                    out.onCompleted();
                    return;
                }
                out.onNext(AcquireResponse.newBuilder().setToken(take(r)).setClassName(classOf(r.getKey())).build());
                out.onCompleted();
            } catch (RuntimeException e) {
                out.onError(e);
            } catch (InterruptedException e) {
                out.onError(Status.CANCELLED.asRuntimeException());
            }
        }

        @Override
        public void release(ReleaseRequest r, StreamObserver<ReleaseResponse> out) {
            calls.add("Release");
            modes.add(r.getMode());
            try {
                drop(r);
                out.onNext(ReleaseResponse.newBuilder().setReleasedAtRevision(revision.incrementAndGet()).build());
                out.onCompleted();
            } catch (RuntimeException e) {
                out.onError(e);
            }
        }

        @Override
        public void observe(ObserveRequest r, StreamObserver<ObserveResponse> out) {
            calls.add("Observe");
            int call;
            synchronized (observeReqs) {
                call = observeReqs.size();
                observeReqs.add(r);
            }
            Script s = observeScript.apply(call, r);
            for (ObserveResponse a : s.answers) {
                out.onNext(a);
            }
            if (s.error != null) {
                out.onError(s.error);
            } else {
                out.onCompleted();
            }
        }

        @Override
        public void acquireAll(AcquireAllRequest r, StreamObserver<AcquireAllResponse> out) {
            calls.add("AcquireAll");
            acquireAllReqs.add(r);
            try {
                out.onNext(takeAll(r));
                out.onCompleted();
            } catch (RuntimeException e) {
                out.onError(e);
            } catch (InterruptedException e) {
                out.onError(Status.CANCELLED.asRuntimeException());
            }
        }

        @Override
        public void releaseAll(ReleaseAllRequest r, StreamObserver<ReleaseAllResponse> out) {
            calls.add("ReleaseAll");
            releaseAllReqs.add(r);
            List<String> released = new ArrayList<>();
            synchronized (holders) {
                for (String k : new TreeSet<>(r.getKeysList())) {
                    long[] h = holders.get(k);
                    if (h != null && h[1] == r.getToken()) {
                        holders.remove(k);
                        released.add(k);
                    }
                }
                holders.notifyAll();
            }
            if (released.isEmpty()) {
                out.onError(refusal(Status.Code.FAILED_PRECONDITION, "STALE_TOKEN", Map.of()));
                return;
            }
            out.onNext(ReleaseAllResponse.newBuilder().setReleasedAtRevision(revision.incrementAndGet())
                    .addAllReleasedKeys(released).build());
            out.onCompleted();
        }

        @Override
        public StreamObserver<HoldRequest> hold(StreamObserver<HoldResponse> out) {
            calls.add("Hold");
            holdStreams.add(out);
            return new StreamObserver<>() {
                @Override
                public void onNext(HoldRequest r) {
                    try {
                        if (r.hasAcquire()) {
                            long token = take(r.getAcquire());
                            out.onNext(HoldResponse.newBuilder()
                                    .setAcquired(AcquireResponse.newBuilder().setToken(token)
                                            .setClassName(classOf(r.getAcquire().getKey()))).build());
                        } else {
                            drop(r.getRelease());
                            out.onNext(HoldResponse.newBuilder()
                                    .setReleased(ReleaseResponse.newBuilder().setReleasedAtRevision(1)).build());
                            out.onCompleted();
                        }
                    } catch (RuntimeException e) {
                        out.onError(e);
                    } catch (InterruptedException e) {
                        out.onError(Status.CANCELLED.asRuntimeException());
                    }
                }

                @Override
                public void onError(Throwable t) {}

                @Override
                public void onCompleted() {}
            };
        }
    }

    @Override
    public void close() {
        server.shutdownNow();
    }
}
