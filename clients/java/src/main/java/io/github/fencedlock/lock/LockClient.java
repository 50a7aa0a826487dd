package io.github.fencedlock.lock;

import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NegotiationType;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.MetadataUtils;
import io.opentelemetry.api.metrics.MeterProvider;
import java.nio.file.Path;
import java.security.cert.X509Certificate;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;
import java.util.function.Supplier;
import lock.v1.LockGrpc;
import lock.v1.LockOuterClass.AcquireAllRequest;
import lock.v1.LockOuterClass.AcquireAllResponse;
import lock.v1.LockOuterClass.AcquireRequest;
import lock.v1.LockOuterClass.AcquireResponse;
import lock.v1.LockOuterClass.CloseSessionRequest;
import lock.v1.LockOuterClass.HoldMode;
import lock.v1.LockOuterClass.HoldRequest;
import lock.v1.LockOuterClass.HoldResponse;
import lock.v1.LockOuterClass.OpenSessionRequest;
import lock.v1.LockOuterClass.OpenSessionResponse;
import lock.v1.LockOuterClass.ReleaseAllRequest;
import lock.v1.LockOuterClass.ReleaseRequest;

/**
 * A connection to the lock service and this process's contender for locks: its sessions
 * (one per TTL and cluster, renewed in the background), its holds and its instance. Safe for
 * concurrent use. Close it before exiting: its sessions end at once and waiters are granted
 * without waiting for the TTL.
 *
 * <pre>{@code
 * try (LockClient c = LockClient.builder("https://lock-edge:8443")
 *         .svidFiles(Path.of("/run/svid/svid.pem"), Path.of("/run/svid/svid.key"), Path.of("/run/svid/bundle.pem"))
 *         .serverId("spiffe://example.org/ns/edge/sa/envoy")
 *         .build();
 *      Hold h = c.acquire("pay/ledger/42", AcquireOptions.builder()
 *         .onFence(worker::stop).timeout(Duration.ofSeconds(5)).build())) {
 *     db.write(..., h.token());
 * }
 * }</pre>
 *
 * <p>With the SPIFFE Workload API instead of files, {@code .workloadApi(WorkloadApiSource.connect())}
 * in place of {@code .svidFiles(...)}.
 */
public final class LockClient implements AutoCloseable {
    /** How many holds per client keep their Hold stream open before acquires use the unary calls. */
    public static final int DEFAULT_MAX_HOLD_STREAMS = 1024;
    /** Bounds the attempts of one call (transient errors, session changes). */
    static final int MAX_TRIES = 32;
    /** Bounds the keys whose cluster the client remembers. */
    static final int MAX_PLACES = 4096;
    /** The longest wait one Acquire asks the service for (it grants at most 300 s). */
    static final Duration MAX_WAIT_PER_CALL = Duration.ofSeconds(300);
    /** Bounds a call beyond the wait it asked for. */
    static final Duration CALL_SLACK = Duration.ofSeconds(10);
    /** Bounds one CloseSession. */
    static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(5);
    /** HTTP/2 PINGs on the connection, idle or not (as the Rust and Go clients). */
    static final Duration PING_INTERVAL = Duration.ofSeconds(20);
    static final Duration PING_TIMEOUT = Duration.ofSeconds(5);

    private static final AtomicInteger THREADS = new AtomicInteger();

    private final ManagedChannel channel;
    /** The client's mutual TLS (null to a mesh sidecar): what the last handshake presented. */
    private final SpiffeTls tls;
    /** Stops the Workload API source's rotations from reaching the channel (a no-op without one). */
    private final AutoCloseable rotations;
    private final LockGrpc.LockBlockingStub blocking;
    private final LockGrpc.LockStub async;
    private final String instance;
    private final ExecutorService workers;
    private final ReentrantLock opening = new ReentrantLock();

    private final Object mu = new Object();
    private boolean closed;
    private final Map<Slot, Session> sessions = new HashMap<>();
    private final Map<String, Integer> places = new HashMap<>();
    private final Map<String, Integer> clusterTags = new HashMap<>();
    private final Map<String, Reentry> holds = new HashMap<>();
    /** Semaphore permits held, by key: the outermost grant and how many Permits nest on it. */
    private final Map<String, PermitEntry> permits = new HashMap<>();
    /**
     * Permit reclaims: how many decided to release a grant so far, and per key the one whose
     * release is under way (see {@link #reclaimPermit}).
     */
    private long reclaimEpoch;
    private final Map<String, CountDownLatch> reclaiming = new HashMap<>();
    private long nextHold;
    private final int maxStreams;
    private int openStreams;
    /** The class the service last named for each key: the metrics' class attribute. */
    private final Map<String, String> classes = new HashMap<>();
    private final Metrics metrics;

    LockClient(ManagedChannel channel, SpiffeTls tls, AutoCloseable rotations, String instance, int maxStreams,
               Metrics metrics) {
        this.channel = channel;
        this.tls = tls;
        this.rotations = rotations;
        this.metrics = metrics;
        this.blocking = LockGrpc.newBlockingStub(channel);
        this.async = LockGrpc.newStub(channel);
        this.instance = instance;
        this.maxStreams = maxStreams;
        this.workers = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "lock-client-" + THREADS.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
    }

    /** A builder for the service at endpoint ({@code https://lock-edge:8443}, or with meshSidecar {@code http://127.0.0.1:15001}). */
    public static Builder builder(String endpoint) {
        return new Builder(endpoint);
    }

    /** The {@code lock-instance} this client sends with OpenSession. */
    public String instance() {
        return instance;
    }

    /** The channel, for raw lock.v1 calls the client does not wrap (Inspect, ValidateToken): send the key as {@code lock-key}. */
    public ManagedChannel channel() {
        return channel;
    }

    /** The leaf certificate the client's last TLS handshake presented; null before one, or to a mesh sidecar. */
    X509Certificate presentedLeaf() {
        return tls == null ? null : tls.presented();
    }

    /** How many nested holds of key this client has (0: not held). */
    public int holdCount(String key) {
        synchronized (mu) {
            Reentry e = holds.get(key);
            return e == null ? 0 : e.count;
        }
    }

    /** How many holds keep their Hold stream open now. */
    public int openHoldStreams() {
        synchronized (mu) {
            return openStreams;
        }
    }

    // ---- acquiring ----

    /**
     * Takes key, waiting in the key's queue until it is granted or the options' timeout ends
     * (then {@link Reason#HELD}, or {@link Reason#TIMED_OUT} if the service had not answered).
     * Transient refusals (NO_QUORUM, UNAVAILABLE, DRAINING, MOVING, RATE_LIMITED) are retried
     * within the timeout, and the right session is opened for the key's class. A key this
     * client holds already is re-entered: the returned Hold shares the grant (and token),
     * nothing is sent, and the key stays held until every Hold of it is released. An
     * interrupted thread gets {@link Reason#CANCELLED} (its interrupt flag set again).
     *
     * @throws LockException {@link Reason#ON_FENCE_REQUIRED} without onFence, before anything is sent
     */
    public Hold acquire(String key, AcquireOptions opts) {
        return measured(key, w -> acquireInternal(key, true, opts, w));
    }

    /**
     * {@link #acquire} without waiting: empty at once when another session holds key (HELD).
     * One attempt: a transient refusal (NO_QUORUM, RATE_LIMITED, UNAVAILABLE, ...) is thrown
     * at once, not retried; the options' timeout bounds the calls.
     */
    public Optional<Hold> tryAcquire(String key, AcquireOptions opts) {
        try {
            return Optional.of(measured(key, w -> acquireInternal(key, false, opts, w)));
        } catch (LockException e) {
            if (e.reason() == Reason.HELD) {
                return Optional.empty();
            }
            throw e;
        }
    }

    /**
     * {@link #acquire} on a thread of the client's: the future completes with the hold or
     * the LockException. Cancelling the future interrupts the wait; a grant that arrives
     * after the future was cancelled is released at once, so no hold outlives its caller.
     */
    public CompletableFuture<Hold> acquireAsync(String key, AcquireOptions opts) {
        if (opts == null || opts.onFenceCallback() == null) {
            return CompletableFuture.failedFuture(onFenceRequired());
        }
        return runAsync(() -> acquire(key, opts), Hold::release);
    }

    /**
     * call on a thread of the client's: the future completes with its value or exception.
     * Cancelling the future interrupts the call; a value that arrives after the future was
     * cancelled is undone at once, so no hold outlives its caller.
     */
    private <T> CompletableFuture<T> runAsync(Supplier<T> call, Consumer<T> undo) {
        CompletableFuture<T> f = new CompletableFuture<>();
        AtomicReference<Thread> worker = new AtomicReference<>();
        try {
            workers.execute(() -> {
                synchronized (worker) {
                    if (f.isDone()) {
                        return;
                    }
                    worker.set(Thread.currentThread());
                }
                try {
                    T v = call.get();
                    if (!f.complete(v)) {
                        undo.accept(v);
                    }
                } catch (Throwable t) {
                    f.completeExceptionally(t);
                } finally {
                    synchronized (worker) {
                        worker.set(null);
                        Thread.interrupted(); // the pool's thread goes back clean
                    }
                }
            });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            f.completeExceptionally(LockException.client(Reason.CLOSED, ""));
            return f;
        }
        f.whenComplete((h, t) -> {
            if (f.isCancelled()) {
                synchronized (worker) {
                    Thread w = worker.get();
                    if (w != null) {
                        w.interrupt();
                    }
                }
            }
        });
        return f;
    }

    private static LockException onFenceRequired() {
        return LockException.client(Reason.ON_FENCE_REQUIRED, "");
    }

    /**
     * Runs one acquire call and records how long it waited for its answer, with the class the
     * service named for classKey (a set: its first key) and the outcome.
     */
    private <T> T measured(String classKey, java.util.function.Function<Metrics.Wait, T> call) {
        Metrics.Wait w = metrics.startWait();
        T v;
        try {
            v = call.apply(w);
        } catch (RuntimeException e) {
            w.failed(classOf(classKey), e);
            throw e;
        }
        w.granted(classOf(classKey));
        return v;
    }

    /**
     * The wait one Acquire asks the service for, in nanoseconds: 0 without waiting; else the
     * time the caller leaves, less a tenth (at most 1 s) so the service answers before the
     * caller's deadline, capped at what the service grants.
     */
    static long waitFor(boolean wait, boolean hasDeadline, long leftNanos) {
        if (!wait) {
            return 0;
        }
        long max = MAX_WAIT_PER_CALL.toNanos();
        if (!hasDeadline) {
            return max;
        }
        long left = leftNanos - Math.min(leftNanos / 10, TimeUnit.SECONDS.toNanos(1));
        return Math.max(Math.min(left, max), 0);
    }

    private Hold acquireInternal(String key, boolean wait, AcquireOptions opts, Metrics.Wait w) {
        if (opts == null || opts.onFenceCallback() == null) {
            throw onFenceRequired();
        }
        Objects.requireNonNull(key, "key");
        Runnable onFence = opts.onFenceCallback();
        Deadline dl = Deadline.after(opts.timeout());
        long id;
        synchronized (mu) {
            if (closed) {
                throw LockException.client(Reason.CLOSED, "");
            }
            id = ++nextHold;
        }
        Hold h = reenter(key, id, onFence);
        if (h != null) {
            return h;
        }
        w.called();
        try {
            while (true) {
                long[] asked = {0};
                try {
                    Placed<Grant> p = onSession(dl, key, wait, s -> {
                        asked[0] = waitFor(wait, !dl.isNone(), dl.remaining());
                        AcquireRequest req = AcquireRequest.newBuilder()
                                .setKey(key)
                                .setSessionId(s.id)
                                .setWaitMillis(TimeUnit.NANOSECONDS.toMillis(asked[0]))
                                .build();
                        return grant(dl, s, req);
                    });
                    return held(key, id, p.value, p.session, onFence);
                } catch (LockException e) {
                    // The service's wait ended before the caller's did (a timeout longer than
                    // 300 s, or none): queue again.
                    if (wait && asked[0] > 0 && e.reason() == Reason.HELD
                            && (dl.isNone() || dl.remaining() > TimeUnit.SECONDS.toNanos(1))) {
                        continue;
                    }
                    throw e;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw LockException.client(Reason.CANCELLED, "interrupted", e);
        }
    }

    /** A nested acquire of a key this client holds: counted, nothing sent. */
    private Hold reenter(String key, long id, Runnable onFence) {
        synchronized (mu) {
            Reentry e = holds.get(key);
            if (e == null) {
                return null;
            }
            if (e.session.fenced()) {
                holds.remove(key);
                if (e.link != null) {
                    dropLinkLocked(e.link);
                }
                e.timer.end(Metrics.End.FENCED); // its fence hook has recorded it, or is about to
                return null;
            }
            e.count++;
            e.session.attach(id, onFence);
            return new Hold(this, key, id, e.token, e.session);
        }
    }

    private Hold held(String key, long id, Grant g, Session s, Runnable onFence) {
        Metrics.HoldTimer timer = metrics.granted(classOf(key));
        long hook = fenceHook(s, timer);
        s.attach(id, onFence);
        synchronized (mu) {
            holds.put(key, new Reentry(g.token, s, g.link, timer, hook));
        }
        return new Hold(this, key, id, g.token, s);
    }

    /**
     * Attaches to s, beside the holds' own onFence, the callback that records timer's grant
     * as fenced (and lost) when s is fenced; its id, to detach it when the grant ends.
     */
    private long fenceHook(Session s, Metrics.HoldTimer timer) {
        long hook;
        synchronized (mu) {
            hook = ++nextHold;
        }
        s.attach(hook, () -> timer.end(Metrics.End.FENCED));
        return hook;
    }

    /** The class the service last named for key ({@link Metrics#UNKNOWN_CLASS} if none did). */
    private String classOf(String key) {
        synchronized (mu) {
            return classes.getOrDefault(key, Metrics.UNKNOWN_CLASS);
        }
    }

    /** Remembers the class an answer named for key (bounded as {@link #learnPlace}). */
    private void learnClass(String key, String cls) {
        if (cls == null || cls.isEmpty()) {
            return;
        }
        synchronized (mu) {
            if (!classes.containsKey(key) && classes.size() >= MAX_PLACES) {
                classes.clear();
            }
            classes.put(key, cls);
        }
    }

    /** The gRPC deadline of one call: timeout, within the caller's deadline. */
    private static long callNanos(Deadline dl, long timeoutNanos) {
        return Math.min(timeoutNanos, dl.remaining());
    }

    /**
     * One acquire on session s: on a Hold stream when the budget allows (the stream kept for
     * the release), else the unary call. If the caller gives up while the service may be
     * granting, the grant is reclaimed in the background so that no hold outlives its caller.
     */
    private Grant grant(Deadline dl, Session s, AcquireRequest req) throws InterruptedException {
        long timeout = TimeUnit.MILLISECONDS.toNanos(req.getWaitMillis()) + CALL_SLACK.toNanos();
        long callDeadline = System.nanoTime() + callNanos(dl, timeout);
        if (dl.expired()) {
            throw LockException.client(Reason.TIMED_OUT, "");
        }
        boolean stream;
        synchronized (mu) {
            stream = openStreams < maxStreams;
            if (stream) {
                openStreams++;
            }
        }
        if (!stream) {
            try {
                AcquireResponse r = blocking
                        .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(Keys.keyed(req.getKey())))
                        .withDeadlineAfter(Math.max(callDeadline - System.nanoTime(), 1), TimeUnit.NANOSECONDS)
                        .acquire(req);
                learnClass(req.getKey(), r.getClassName());
                return new Grant(r.getToken(), null);
            } catch (StatusRuntimeException e) {
                if (Thread.currentThread().isInterrupted() || dl.expired()) {
                    reclaimLater(req.getKey(), s);
                }
                throw wrap(dl, e);
            }
        }
        HoldLink link;
        try {
            link = HoldLink.open(async, req.getKey());
        } catch (LockException e) {
            releaseSlot();
            throw e;
        }
        LockException err;
        try {
            HoldResponse a = link.ask(HoldRequest.newBuilder().setAcquire(req).build(), callDeadline);
            if (a.hasAcquired()) {
                learnClass(req.getKey(), a.getAcquired().getClassName());
                return new Grant(a.getAcquired().getToken(), link);
            }
            err = LockException.client(Reason.UNAVAILABLE, "the hold stream ended without answering the acquire");
        } catch (LockException e) {
            err = e;
        } catch (InterruptedException e) {
            dropLink(link);
            reclaimLater(req.getKey(), s);
            throw e;
        }
        dropLink(link);
        if (dl.expired()) {
            reclaimLater(req.getKey(), s);
        }
        throw wrap(dl, err);
    }

    /**
     * Releases, in the background, a grant the service may have made to s for key after its
     * caller gave up: an acquire without waiting on the same session gets it back if there is one.
     */
    private void reclaimLater(String key, Session s) {
        try {
            workers.execute(() -> reclaim(key, s));
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // closed: CloseSession ends every hold of the session
        }
    }

    private void reclaim(String key, Session s) {
        LockGrpc.LockBlockingStub stub = blocking
                .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(Keys.keyed(key)))
                .withDeadlineAfter(CALL_SLACK.toNanos(), TimeUnit.NANOSECONDS);
        AcquireResponse r;
        try {
            r = stub.acquire(AcquireRequest.newBuilder().setKey(key).setSessionId(s.id).build());
        } catch (RuntimeException e) {
            return;
        }
        synchronized (mu) {
            Reentry e = holds.get(key);
            if (e != null && e.session == s) {
                return; // a later acquire of this client holds it now
            }
        }
        try {
            stub.release(ReleaseRequest.newBuilder().setKey(key).setToken(r.getToken()).setSessionId(s.id).build());
        } catch (RuntimeException e) {
            // the session's end releases it
        }
    }

    private void releaseSlot() {
        synchronized (mu) {
            openStreams--;
        }
    }

    private void dropLink(HoldLink l) {
        synchronized (mu) {
            dropLinkLocked(l);
        }
    }

    private void dropLinkLocked(HoldLink l) {
        if (l.close() && !closed) {
            openStreams--;
        }
    }

    // ---- observing ----

    /**
     * Watches key (lock.v1 Observe): its holder now, then every change (granted, released,
     * expired, closed, forced, revoked), until the Observation is closed. A hint, never a
     * grant (ADR-15): to act on a key, acquire it and write with its token. Nothing is sent
     * before the first {@link Observation#next(Duration)}. Answers about a hold of this
     * client's own session carry its token ({@link Observed#token()}); other observers, a
     * sibling replica of the same identity included, never see it.
     *
     * @param opts null: from the current holder
     */
    public Observation observe(String key, ObserveOptions opts) {
        Objects.requireNonNull(key, "key");
        synchronized (mu) {
            if (closed) {
                throw LockException.client(Reason.CLOSED, "");
            }
        }
        return new Observation(this, key, opts == null ? ObserveOptions.defaults() : opts);
    }

    boolean isClosed() {
        synchronized (mu) {
            return closed;
        }
    }

    LockGrpc.LockStub asyncStub() {
        return async;
    }

    /**
     * The session this client would hold key on: the one it holds it on, else its session for
     * the key's cluster (0: none). Sent with Observe so that answers about its own hold carry
     * the token.
     */
    long ownSession(String key) {
        synchronized (mu) {
            Reentry e = holds.get(key);
            if (e != null && !e.session.fenced()) {
                return e.session.id;
            }
        }
        Session s = sessionForKey(key);
        return s == null ? 0 : s.id;
    }

    // ---- electing ----

    /** A campaign round refused sooner than this is followed by a pause of as long. */
    static final Duration MIN_ROUND = Duration.ofSeconds(1);

    /**
     * Leader election on the lock: leadership is the hold of key, and the term is its fencing
     * token. Waits in key's FIFO queue until this client leads or the options' timeout ends
     * (then {@link Reason#HELD}), or a refusal waiting cannot cure (NOT_GRANTED,
     * INVALID_KEY...). onFence is required: it runs if the leadership is lost without a
     * resign; stop acting as leader there. Replicas campaign like any candidates (each client
     * is its own instance); followers learn who leads with {@link #observe}.
     *
     * @throws LockException {@link Reason#ON_FENCE_REQUIRED} without onFence, before anything is sent
     */
    public Leadership campaign(String key, CampaignOptions opts) {
        if (opts == null || opts.onFenceCallback() == null) {
            throw onFenceRequired();
        }
        // One wait for the whole campaign, however many rounds it takes.
        return measured(key, w -> campaignRounds(key, opts, w));
    }

    private Leadership campaignRounds(String key, CampaignOptions opts, Metrics.Wait w) {
        Deadline dl = Deadline.after(opts.timeout());
        while (true) {
            long started = System.nanoTime();
            AcquireOptions round = AcquireOptions.builder()
                    .onFence(opts.onFenceCallback())
                    .timeout(dl.isNone() ? null : Duration.ofNanos(dl.remaining()))
                    .build();
            try {
                return new Leadership(acquireInternal(key, true, round, w));
            } catch (LockException e) {
                if (e.reason() != Reason.HELD || dl.expired()) {
                    throw e;
                }
                // The round ended with the key still held: still a candidate, not in a spin.
                long pause = MIN_ROUND.toNanos() - (System.nanoTime() - started);
                if (pause > 0) {
                    if (dl.remaining() <= pause) {
                        throw e;
                    }
                    try {
                        TimeUnit.NANOSECONDS.sleep(pause);
                    } catch (InterruptedException x) {
                        Thread.currentThread().interrupt();
                        throw LockException.client(Reason.CANCELLED, "interrupted", x);
                    }
                }
            }
        }
    }

    /**
     * {@link #campaign} on a thread of the client's. Cancelling the future interrupts the
     * campaign; a leadership won after the future was cancelled is resigned at once.
     */
    public CompletableFuture<Leadership> campaignAsync(String key, CampaignOptions opts) {
        if (opts == null || opts.onFenceCallback() == null) {
            return CompletableFuture.failedFuture(onFenceRequired());
        }
        return runAsync(() -> campaign(key, opts), Leadership::resign);
    }

    // ---- sets and shared holds ----

    /** The most keys one acquireAll takes. */
    public static final int MAX_SET_KEYS = 16;

    private long newHoldId() {
        synchronized (mu) {
            if (closed) {
                throw LockException.client(Reason.CLOSED, "");
            }
            return ++nextHold;
        }
    }

    /**
     * Takes every key of keys together (lock.v1 AcquireAll), waiting until all are free at
     * once or the options' timeout ends: all or nothing, in one etcd transaction, one token
     * for every key. Waiting holds nothing, so callers asking for overlapping sets in any
     * order cannot deadlock. onFence is required, as for acquire.
     *
     * <p>The keys (1..={@link #MAX_SET_KEYS}, distinct) must be of classes with one TTL, on one
     * store, none of a {@code fairness: durable} or shared class, and not held by this client
     * already: {@link Reason#KEY_SET_REFUSED} otherwise (its metadata {@code why} says
     * which). Sets are not re-entrant.
     *
     * @throws LockException {@link Reason#ON_FENCE_REQUIRED} without onFence,
     *     {@link Reason#MALFORMED_REQUEST} for no or too many keys, before anything is sent
     */
    public HeldSet acquireAll(List<String> keys, AcquireOptions opts) {
        return acquireAllMeasured(keys, true, opts);
    }

    /**
     * {@link #acquireAll} without waiting: empty at once when a key of the set is held (HELD).
     * One attempt, as {@link #tryAcquire}: a transient refusal is thrown at once.
     */
    public Optional<HeldSet> tryAcquireAll(List<String> keys, AcquireOptions opts) {
        try {
            return Optional.of(acquireAllMeasured(keys, false, opts));
        } catch (LockException e) {
            if (e.reason() == Reason.HELD) {
                return Optional.empty();
            }
            throw e;
        }
    }

    private HeldSet acquireAllMeasured(List<String> keys, boolean wait, AcquireOptions opts) {
        if (opts == null || opts.onFenceCallback() == null) {
            throw onFenceRequired();
        }
        if (keys == null || keys.isEmpty() || keys.size() > MAX_SET_KEYS) {
            throw LockException.client(Reason.MALFORMED_REQUEST, "a key set has 1..=" + MAX_SET_KEYS + " keys");
        }
        List<String> ks = List.copyOf(keys);
        // The set's class: its first key's, the key its session is opened for.
        String first = java.util.Collections.min(ks);
        return measured(first, w -> acquireAllInternal(ks, first, wait, opts, w));
    }

    private HeldSet acquireAllInternal(List<String> ks, String first, boolean wait, AcquireOptions opts,
                                       Metrics.Wait w) {
        Deadline dl = Deadline.after(opts.timeout());
        long id = newHoldId();
        w.called();
        try {
            while (true) {
                long[] asked = {0};
                try {
                    Placed<AcquireAllResponse> p = onSession(dl, first, wait, s -> {
                        asked[0] = waitFor(wait, !dl.isNone(), dl.remaining());
                        if (dl.expired()) {
                            throw LockException.client(Reason.TIMED_OUT, "");
                        }
                        long timeout = callNanos(dl, asked[0] + CALL_SLACK.toNanos());
                        try {
                            // No lock-key metadata: the edge decides a set on every key of its body.
                            return blocking.withDeadlineAfter(Math.max(timeout, 1), TimeUnit.NANOSECONDS)
                                    .acquireAll(AcquireAllRequest.newBuilder()
                                            .addAllKeys(ks)
                                            .setSessionId(s.id)
                                            .setWaitMillis(TimeUnit.NANOSECONDS.toMillis(asked[0]))
                                            .build());
                        } catch (StatusRuntimeException e) {
                            throw wrap(dl, e);
                        }
                    });
                    for (String k : p.value.getKeysList()) {
                        learnPlace(k, Session.tagOf(p.session.id));
                    }
                    Metrics.HoldTimer timer = metrics.granted(classOf(first));
                    long hook = fenceHook(p.session, timer);
                    p.session.attach(id, opts.onFenceCallback());
                    return new HeldSet(this, p.value.getKeysList(), id, p.value.getToken(), p.session, timer, hook);
                } catch (LockException e) {
                    if (wait && asked[0] > 0 && e.reason() == Reason.HELD
                            && (dl.isNone() || dl.remaining() > TimeUnit.SECONDS.toNanos(1))) {
                        continue; // the service's wait ended before the caller's did
                    }
                    throw e;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw LockException.client(Reason.CANCELLED, "interrupted", e);
        }
    }

    void releaseAll(HeldSet h) {
        h.session.detach(h.id);
        h.session.detach(h.hook);
        if (h.session.fenced()) {
            h.timer.end(Metrics.End.FENCED);
            if (isClosed()) {
                return;
            }
            throw LockException.client(Reason.FENCED, "the set was fenced before its release");
        }
        try {
            blocking.withDeadlineAfter(CALL_SLACK.toNanos(), TimeUnit.NANOSECONDS)
                    .releaseAll(ReleaseAllRequest.newBuilder()
                            .addAllKeys(h.keys()).setToken(h.token()).setSessionId(h.session.id).build());
        } catch (StatusRuntimeException x) {
            throw wrap(Deadline.NONE, x);
        } finally {
            h.timer.end(Metrics.End.RELEASED);
        }
    }

    /**
     * Takes key shared (HOLD_MODE_SHARED), waiting until granted or the options' timeout
     * ends: many sessions (other identities, sibling replicas, this client's other shared
     * holds) hold it at once; an exclusive hold of it waits for all of them, and while one
     * waits, new shared holds wait behind it. The key's class must be {@code shared: true}
     * ({@link Reason#MALFORMED_REQUEST} otherwise). onFence is required. Shared holds are not
     * re-entrant: each is its own grant.
     *
     * @throws LockException {@link Reason#ON_FENCE_REQUIRED} without onFence, before anything is sent
     */
    public SharedHold acquireShared(String key, AcquireOptions opts) {
        return acquireSharedMeasured(key, true, opts);
    }

    /**
     * {@link #acquireShared} without waiting: empty at once when the key is held exclusively,
     * or an exclusive waiter is queued (HELD). One attempt, as {@link #tryAcquire}: a
     * transient refusal is thrown at once.
     */
    public Optional<SharedHold> tryAcquireShared(String key, AcquireOptions opts) {
        try {
            return Optional.of(acquireSharedMeasured(key, false, opts));
        } catch (LockException e) {
            if (e.reason() == Reason.HELD) {
                return Optional.empty();
            }
            throw e;
        }
    }

    private SharedHold acquireSharedMeasured(String key, boolean wait, AcquireOptions opts) {
        if (opts == null || opts.onFenceCallback() == null) {
            throw onFenceRequired();
        }
        Objects.requireNonNull(key, "key");
        return measured(key, w -> acquireSharedInternal(key, wait, opts, w));
    }

    private SharedHold acquireSharedInternal(String key, boolean wait, AcquireOptions opts, Metrics.Wait w) {
        Deadline dl = Deadline.after(opts.timeout());
        long id = newHoldId();
        w.called();
        try {
            while (true) {
                long[] asked = {0};
                try {
                    Placed<AcquireResponse> p = onSession(dl, key, wait, s -> {
                        asked[0] = waitFor(wait, !dl.isNone(), dl.remaining());
                        if (dl.expired()) {
                            throw LockException.client(Reason.TIMED_OUT, "");
                        }
                        long timeout = callNanos(dl, asked[0] + CALL_SLACK.toNanos());
                        try {
                            return blocking
                                    .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(Keys.keyed(key)))
                                    .withDeadlineAfter(Math.max(timeout, 1), TimeUnit.NANOSECONDS)
                                    .acquire(AcquireRequest.newBuilder()
                                            .setKey(key)
                                            .setSessionId(s.id)
                                            .setWaitMillis(TimeUnit.NANOSECONDS.toMillis(asked[0]))
                                            .setMode(HoldMode.HOLD_MODE_SHARED)
                                            .build());
                        } catch (StatusRuntimeException e) {
                            throw wrap(dl, e);
                        }
                    });
                    learnClass(key, p.value.getClassName());
                    Metrics.HoldTimer timer = metrics.granted(classOf(key));
                    long hook = fenceHook(p.session, timer);
                    p.session.attach(id, opts.onFenceCallback());
                    return new SharedHold(this, key, id, p.value.getToken(), p.session, timer, hook);
                } catch (LockException e) {
                    if (wait && asked[0] > 0 && e.reason() == Reason.HELD
                            && (dl.isNone() || dl.remaining() > TimeUnit.SECONDS.toNanos(1))) {
                        continue;
                    }
                    throw e;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw LockException.client(Reason.CANCELLED, "interrupted", e);
        }
    }

    void releaseShared(SharedHold h) {
        h.session.detach(h.id);
        h.session.detach(h.hook);
        if (h.session.fenced()) {
            h.timer.end(Metrics.End.FENCED);
            if (isClosed()) {
                return;
            }
            throw LockException.client(Reason.FENCED, "the shared hold was fenced before its release");
        }
        try {
            blocking.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(Keys.keyed(h.key)))
                    .withDeadlineAfter(CALL_SLACK.toNanos(), TimeUnit.NANOSECONDS)
                    .release(ReleaseRequest.newBuilder().setKey(h.key).setToken(h.token)
                            .setSessionId(h.session.id).setMode(HoldMode.HOLD_MODE_SHARED).build());
        } catch (StatusRuntimeException x) {
            throw wrap(Deadline.NONE, x);
        } finally {
            h.timer.end(Metrics.End.RELEASED);
        }
    }

    // ---- semaphores ----

    /**
     * Takes one permit of key, a key of a semaphore class ({@code permits: N}), waiting in the
     * key's FIFO queue while all N are held, until one is handed to it or the options' timeout
     * ends (then {@link Reason#HELD}, or {@link Reason#TIMED_OUT}). Up to N sessions hold the
     * key at once, each on its own permit ({@link Permit#permit()}) with its own token.
     * Transient refusals are retried within the timeout, as for {@link #acquire}. A key of which
     * this client holds a permit already is re-entered: the returned Permit shares that grant
     * (the same permit and token), nothing is sent, and the permit stays held until every
     * Permit of it is released. A key of any other class is {@link Reason#MALFORMED_REQUEST},
     * as is acquire or acquireShared on a semaphore's key. onFence is required.
     *
     * @throws LockException {@link Reason#ON_FENCE_REQUIRED} without onFence, before anything is sent
     */
    public Permit acquirePermit(String key, AcquireOptions opts) {
        return acquirePermitMeasured(key, true, opts);
    }

    /**
     * {@link #acquirePermit} without waiting: empty at once while all N permits are held (or
     * others wait for one) (HELD). One attempt, as {@link #tryAcquire}: a transient refusal is
     * thrown at once.
     */
    public Optional<Permit> tryAcquirePermit(String key, AcquireOptions opts) {
        try {
            return Optional.of(acquirePermitMeasured(key, false, opts));
        } catch (LockException e) {
            if (e.reason() == Reason.HELD) {
                return Optional.empty();
            }
            throw e;
        }
    }

    /**
     * {@link #acquirePermit} on a thread of the client's, as {@link #acquireAsync}: cancelling
     * the future interrupts the wait, and a permit granted after the future was cancelled is
     * released at once.
     */
    public CompletableFuture<Permit> acquirePermitAsync(String key, AcquireOptions opts) {
        if (opts == null || opts.onFenceCallback() == null) {
            return CompletableFuture.failedFuture(onFenceRequired());
        }
        return runAsync(() -> acquirePermit(key, opts), Permit::release);
    }

    private Permit acquirePermitMeasured(String key, boolean wait, AcquireOptions opts) {
        if (opts == null || opts.onFenceCallback() == null) {
            throw onFenceRequired();
        }
        Objects.requireNonNull(key, "key");
        return measured(key, w -> acquirePermitInternal(key, wait, opts, w));
    }

    private Permit acquirePermitInternal(String key, boolean wait, AcquireOptions opts, Metrics.Wait w) {
        Runnable onFence = opts.onFenceCallback();
        Deadline dl = Deadline.after(opts.timeout());
        long id = newHoldId();
        Permit nested = reenterPermit(key, id, onFence);
        if (nested != null) {
            return nested; // no call: nothing recorded
        }
        w.called();
        try {
            while (true) {
                long[] asked = {0};
                long[] epoch = {0};
                try {
                    Placed<AcquireResponse> p = onSession(dl, key, wait, s -> {
                        epoch[0] = reclaimSettled(dl, key);
                        asked[0] = waitFor(wait, !dl.isNone(), dl.remaining());
                        if (dl.expired()) {
                            throw LockException.client(Reason.TIMED_OUT, "");
                        }
                        long timeout = callNanos(dl, asked[0] + CALL_SLACK.toNanos());
                        try {
                            return blocking
                                    .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(Keys.keyed(key)))
                                    .withDeadlineAfter(Math.max(timeout, 1), TimeUnit.NANOSECONDS)
                                    .acquire(AcquireRequest.newBuilder()
                                            .setKey(key)
                                            .setSessionId(s.id)
                                            .setWaitMillis(TimeUnit.NANOSECONDS.toMillis(asked[0]))
                                            .setMode(HoldMode.HOLD_MODE_PERMIT)
                                            .build());
                        } catch (StatusRuntimeException e) {
                            if (Thread.currentThread().isInterrupted() || dl.expired()) {
                                // The caller gave up while the service may have been handing it
                                // a permit: one no Permit stands for would stay held as long as
                                // the session.
                                reclaimPermitLater(key, s);
                            }
                            throw wrap(dl, e);
                        }
                    });
                    learnClass(key, p.value.getClassName());
                    Permit held = heldPermit(key, id, p.value, p.session, onFence, epoch[0]);
                    if (held != null) {
                        return held;
                    }
                    // A reclaim overlapped the call: its answer may name the grant it released.
                } catch (LockException e) {
                    if (wait && asked[0] > 0 && e.reason() == Reason.HELD
                            && (dl.isNone() || dl.remaining() > TimeUnit.SECONDS.toNanos(1))) {
                        continue; // the service's wait ended before the caller's did
                    }
                    throw e;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw LockException.client(Reason.CANCELLED, "interrupted", e);
        }
    }

    /** A nested acquire on the permit this client holds of key (nothing sent); null if none, or fenced. */
    private Permit reenterPermit(String key, long id, Runnable onFence) {
        synchronized (mu) {
            PermitEntry e = permits.get(key);
            if (e == null) {
                return null;
            }
            if (e.session.fenced()) {
                // The grant is gone; its Permits still end by their own release (FENCED).
                permits.remove(key);
                e.timer.end(Metrics.End.FENCED); // its fence hook has recorded it, or is about to
                return null;
            }
            e.count++;
            e.session.attach(id, onFence);
            return new Permit(this, key, id, e.permit, e.token, e.session);
        }
    }

    /**
     * Records a permit the service granted to s as this client's outermost Permit of key, or
     * nests it on the entry of a concurrent acquire that got the same grant (the service
     * answers a session's second acquire with the permit it holds). Null when a reclaim
     * decided to release a grant since epoch (of any key: the epoch is the client's, and
     * reclaims are rare): this answer may name that grant.
     */
    private Permit heldPermit(String key, long id, AcquireResponse r, Session s, Runnable onFence, long epoch) {
        synchronized (mu) {
            if (reclaimEpoch != epoch) {
                return null;
            }
            PermitEntry e = permits.get(key);
            if (e != null && e.session == s && e.token == r.getToken()) {
                e.count++;
            } else {
                Metrics.HoldTimer timer = metrics.granted(classOf(key));
                e = new PermitEntry(r.getPermit(), r.getToken(), s, timer, fenceHook(s, timer));
                permits.put(key, e);
            }
            s.attach(id, onFence);
            return new Permit(this, key, id, e.permit, e.token, s);
        }
    }

    /**
     * Reclaiming a permit whose answer was lost. A caller that gives up while the service hands
     * it a permit leaves a grant no Permit stands for, held as long as the session (the client's
     * life): one of only N. The reclaim asks again on the same session without waiting (a
     * session holds at most one permit of a key, so the answer is that grant if there is one)
     * and releases it, in the background.
     *
     * <p>The grant is the session's, not the call's: every acquire of the key on that session
     * is answered the same grant, so the release must not take it from another acquire of this
     * client that the service answered meanwhile. Two rules keep them apart: an acquire is not
     * sent while a reclaim of its key is releasing ({@link #reclaimSettled}), and an acquire
     * whose call overlapped a reclaim's decision to release does not trust its answer and asks
     * again ({@link #heldPermit} compares the epoch), getting the grant back if it survived,
     * else a new one or a place in the queue.
     */
    private void reclaimPermitLater(String key, Session s) {
        try {
            workers.execute(() -> reclaimPermit(key, s));
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // closed: CloseSession ends every hold of the session
        }
    }

    private void reclaimPermit(String key, Session s) {
        LockGrpc.LockBlockingStub stub = blocking
                .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(Keys.keyed(key)))
                .withDeadlineAfter(CALL_SLACK.toNanos(), TimeUnit.NANOSECONDS);
        for (int i = 0; i < MAX_TRIES; i++) {
            AcquireResponse r;
            try {
                r = stub.acquire(AcquireRequest.newBuilder().setKey(key).setSessionId(s.id)
                        .setMode(HoldMode.HOLD_MODE_PERMIT).build());
            } catch (RuntimeException e) {
                return; // none to reclaim, or the session is gone (and its grants with it)
            }
            CountDownLatch done = new CountDownLatch(1);
            CountDownLatch other;
            synchronized (mu) {
                PermitEntry e = permits.get(key);
                if (e != null && e.session == s) {
                    return; // a later acquire of this client holds it now
                }
                other = reclaiming.get(key);
                if (other == null) {
                    reclaiming.put(key, done);
                    reclaimEpoch++;
                }
            }
            if (other != null) {
                // Another reclaim is releasing a grant of the key: ours may be a newer one.
                try {
                    if (!other.await(CALL_SLACK.toNanos(), TimeUnit.NANOSECONDS)) {
                        return;
                    }
                } catch (InterruptedException x) {
                    Thread.currentThread().interrupt();
                    return;
                }
                continue;
            }
            try {
                stub.release(ReleaseRequest.newBuilder().setKey(key).setToken(r.getToken()).setSessionId(s.id)
                        .setMode(HoldMode.HOLD_MODE_PERMIT).build());
            } catch (RuntimeException e) {
                // the session's end releases it
            } finally {
                synchronized (mu) {
                    reclaiming.remove(key);
                }
                done.countDown();
            }
            return;
        }
    }

    /**
     * Waits until no reclaim of key is releasing, and returns the reclaim epoch an acquire sent
     * now starts in.
     */
    private long reclaimSettled(Deadline dl, String key) throws InterruptedException {
        while (true) {
            CountDownLatch busy;
            synchronized (mu) {
                busy = reclaiming.get(key);
                if (busy == null) {
                    return reclaimEpoch;
                }
            }
            if (!busy.await(dl.remaining(), TimeUnit.NANOSECONDS)) {
                throw LockException.client(Reason.TIMED_OUT, "");
            }
        }
    }

    void releasePermit(Permit p) {
        p.session.detach(p.id);
        PermitEntry e;
        synchronized (mu) {
            e = permits.get(p.key);
            if (e == null || e.session != p.session || e.token != p.token) {
                // Not this grant's entry: the client was closed, or the grant was fenced and
                // another took its place.
                if (p.session.fenced() && !closed) {
                    throw LockException.client(Reason.FENCED, "the permit was fenced before its release");
                }
                return;
            }
            if (e.count > 1) {
                e.count--;
                if (p.session.fenced()) {
                    throw LockException.client(Reason.FENCED, "the permit was fenced before its release");
                }
                return;
            }
            permits.remove(p.key);
        }
        p.session.detach(e.hook);
        try {
            if (p.session.fenced()) {
                e.timer.end(Metrics.End.FENCED);
                throw LockException.client(Reason.FENCED, "the permit was fenced before its release");
            }
            blocking.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(Keys.keyed(p.key)))
                    .withDeadlineAfter(CALL_SLACK.toNanos(), TimeUnit.NANOSECONDS)
                    .release(ReleaseRequest.newBuilder().setKey(p.key).setToken(p.token)
                            .setSessionId(p.session.id).setMode(HoldMode.HOLD_MODE_PERMIT).build());
        } catch (StatusRuntimeException x) {
            throw wrap(Deadline.NONE, x);
        } finally {
            e.timer.end(Metrics.End.RELEASED); // nothing when it was fenced first
        }
    }

    // ---- releasing ----

    void release(Hold h) {
        h.session.detach(h.id);
        Reentry e;
        synchronized (mu) {
            e = holds.get(h.key);
            if (e == null || e.session != h.session || e.token != h.token) {
                // Not this grant's entry: the client was closed, or the grant was fenced and
                // another took its place.
                if (h.session.fenced() && !closed) {
                    throw LockException.client(Reason.FENCED, "the hold was fenced before its release");
                }
                return;
            }
            if (e.count > 1) {
                e.count--;
                return;
            }
            holds.remove(h.key);
        }
        h.session.detach(e.hook);
        HoldLink link = e.link;
        try {
            if (h.session.fenced()) {
                e.timer.end(Metrics.End.FENCED);
                throw LockException.client(Reason.FENCED, "the hold was fenced before its release");
            }
            ReleaseRequest req = ReleaseRequest.newBuilder()
                    .setKey(h.key).setToken(h.token).setSessionId(h.session.id).build();
            if (link != null) {
                try {
                    HoldResponse a = link.ask(HoldRequest.newBuilder().setRelease(req).build(),
                            System.nanoTime() + CALL_SLACK.toNanos());
                    if (a.hasReleased()) {
                        return;
                    }
                } catch (LockException x) {
                    // A refusal the service gave on the stream (STALE_TOKEN, ...) is the
                    // answer. A stream that broke or had ended could not carry the release:
                    // UNAVAILABLE, or a reset without a lock.v1 reason (the RST_STREAM
                    // INTERNAL_ERROR a proxy sends when the arbiter behind it restarts,
                    // found by the conformance suite's observe-resume).
                    if (!x.wireReason().isEmpty() && !x.is(Reason.UNAVAILABLE)) {
                        throw x;
                    }
                } catch (InterruptedException x) {
                    Thread.currentThread().interrupt();
                    throw LockException.client(Reason.CANCELLED, "interrupted", x);
                }
                // The stream ended or broke without releasing: the unary call.
            }
            try {
                blocking.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(Keys.keyed(h.key)))
                        .withDeadlineAfter(CALL_SLACK.toNanos(), TimeUnit.NANOSECONDS)
                        .release(req);
            } catch (StatusRuntimeException x) {
                throw wrap(Deadline.NONE, x);
            }
        } finally {
            e.timer.end(Metrics.End.RELEASED); // nothing when it was fenced first
            if (link != null) {
                dropLink(link);
            }
        }
    }

    // ---- sessions ----

    private Session liveSessionLocked(java.util.function.Predicate<Slot> ok) {
        for (Map.Entry<Slot, Session> e : sessions.entrySet()) {
            if (ok.test(e.getKey()) && !e.getValue().fenced()) {
                return e.getValue();
            }
        }
        return null;
    }

    /** A live session on the cluster key was last seen on, else any. */
    private Session sessionForKey(String key) {
        synchronized (mu) {
            Integer tag = places.get(key);
            if (tag != null) {
                Session s = liveSessionLocked(k -> k.tag == tag);
                if (s != null) {
                    return s;
                }
            }
            return liveSessionLocked(k -> true);
        }
    }

    private Session sessionForTtl(long ttl) {
        synchronized (mu) {
            return liveSessionLocked(k -> k.ttl == ttl);
        }
    }

    private Session sessionOnCluster(String cluster) {
        synchronized (mu) {
            Integer tag = clusterTags.get(cluster);
            return tag == null ? null : liveSessionLocked(k -> k.tag == tag);
        }
    }

    private void learnPlace(String key, int tag) {
        synchronized (mu) {
            if (!places.containsKey(key) && places.size() >= MAX_PLACES) {
                places.clear();
            }
            places.put(key, tag);
        }
    }

    private void forgetSession(Session s) {
        synchronized (mu) {
            sessions.values().removeIf(x -> x == s);
        }
    }

    /**
     * The session to use when none was at hand: one another acquire opened meanwhile, or a
     * new one. Opening is serialised per client, so acquires racing on a client without a
     * session share the one opened first (ADR-10: one session per TTL).
     */
    private Session sessionOrOpen(Deadline dl, String key, Supplier<Session> wanted, Consumer<Session> opened)
            throws InterruptedException {
        if (!opening.tryLock(dl.remaining(), TimeUnit.NANOSECONDS)) {
            throw LockException.client(Reason.TIMED_OUT, "");
        }
        try {
            Session found = wanted != null ? wanted.get() : sessionForKey(key);
            if (found != null) {
                return found;
            }
            Session s = openSession(dl, key);
            if (opened != null) {
                opened.accept(s);
            }
            return s;
        } finally {
            opening.unlock();
        }
    }

    /** Opens the session for key's class (its TTL) and starts renewing it. */
    private Session openSession(Deadline dl, String key) {
        long sent = System.nanoTime();
        if (dl.expired()) {
            throw LockException.client(Reason.TIMED_OUT, "");
        }
        Metadata md = Keys.keyed(key);
        md.put(Keys.INSTANCE_HEADER, instance);
        OpenSessionResponse r;
        try {
            r = blocking.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(md))
                    .withDeadlineAfter(Math.max(callNanos(dl, CALL_SLACK.toNanos()), 1), TimeUnit.NANOSECONDS)
                    .openSession(OpenSessionRequest.newBuilder().setKey(key).build());
        } catch (StatusRuntimeException e) {
            throw wrap(dl, e);
        }
        learnClass(key, r.getClassName());
        Session s = new Session(r.getSessionId(), Duration.ofSeconds(r.getTtlSeconds()), sent);
        Session old;
        synchronized (mu) {
            if (closed) {
                s.close();
                throw LockException.client(Reason.CLOSED, "");
            }
            Slot k = new Slot(Integer.toUnsignedLong(r.getTtlSeconds()), Session.tagOf(r.getSessionId()));
            old = sessions.put(k, s);
        }
        if (old != null && old.fenced()) {
            old.close();
        }
        s.start(async);
        return s;
    }

    @FunctionalInterface
    private interface SessionCall<T> {
        T call(Session s) throws InterruptedException;
    }

    private static long jitter(long nanos) {
        return (long) (nanos * (0.75 + ThreadLocalRandom.current().nextDouble() * 0.5));
    }

    /**
     * Runs call(session) for key until it answers, the deadline ends or a refusal no retry
     * cures: a session opened for the key's class when there is none, one of the TTL or on
     * the cluster the service asks for (WRONG_SESSION_TTL, WRONG_SESSION_PLACE), a new one
     * when it expired, and, when the caller waits, transient refusals waited out inside the
     * deadline. A call without a wait (the try forms) answers the first transient refusal as
     * it is (NO_QUORUM, RATE_LIMITED, UNAVAILABLE at once, as the Rust and Go clients do with
     * no wait), not after retrying for as long as the deadline allows.
     */
    private <T> Placed<T> onSession(Deadline dl, String key, boolean wait, SessionCall<T> call)
            throws InterruptedException {
        Session s = sessionForKey(key);
        Supplier<Session> wanted = null;
        Consumer<Session> opened = null;
        long backoff = TimeUnit.MILLISECONDS.toNanos(50);
        LockException last = null;
        for (int i = 0; i < MAX_TRIES; i++) {
            synchronized (mu) {
                if (closed) {
                    throw LockException.client(Reason.CLOSED, "");
                }
            }
            if (s == null) {
                try {
                    s = sessionOrOpen(dl, key, wanted, opened);
                } catch (LockException e) {
                    if (!wait || !e.isTransient()) {
                        throw e;
                    }
                    last = e;
                    long pause = jitter(backoff);
                    if (dl.remaining() < pause) {
                        throw last;
                    }
                    TimeUnit.NANOSECONDS.sleep(pause);
                    continue;
                }
            }
            LockException e;
            try {
                T answer = call.call(s);
                learnPlace(key, Session.tagOf(s.id));
                return new Placed<>(answer, s);
            } catch (LockException x) {
                e = x;
            }
            last = e;
            long pause;
            switch (e.reason()) {
                case WRONG_SESSION_TTL: {
                    learnClass(key, e.metadata().get("class"));
                    long ttl = ttlSeconds(e);
                    wanted = () -> sessionForTtl(ttl);
                    s = wanted.get();
                    continue;
                }
                case WRONG_SESSION_PLACE: {
                    String cluster = e.metadata().getOrDefault("cluster", "");
                    wanted = () -> sessionOnCluster(cluster);
                    opened = o -> {
                        synchronized (mu) {
                            clusterTags.put(cluster, Session.tagOf(o.id));
                        }
                    };
                    s = wanted.get();
                    continue;
                }
                case SESSION_EXPIRED:
                    forgetSession(s);
                    s = null;
                    continue;
                case RATE_LIMITED:
                    pause = e.retryAfter().toNanos();
                    break;
                default:
                    if (!e.isTransient()) {
                        throw e;
                    }
                    backoff = Math.min(backoff * 2, TimeUnit.SECONDS.toNanos(1));
                    pause = jitter(backoff);
            }
            if (!wait || dl.remaining() < pause) {
                throw e;
            }
            TimeUnit.NANOSECONDS.sleep(pause);
        }
        throw last;
    }

    private static long ttlSeconds(LockException e) {
        try {
            return Long.parseLong(e.metadata().getOrDefault("ttl_seconds", "0"));
        } catch (NumberFormatException x) {
            return 0;
        }
    }

    /**
     * A call's failure as the client's: the status's error, or when the caller's own
     * deadline ended (and the service gave no reason) TIMED_OUT, or when the thread was
     * interrupted CANCELLED.
     */
    private static LockException wrap(Deadline dl, Throwable t) {
        LockException e = LockException.from(t);
        if (e.wireReason().isEmpty()) {
            if (Thread.currentThread().isInterrupted()) {
                return LockException.client(Reason.CANCELLED, "interrupted", t);
            }
            if (dl.expired()) {
                return LockException.client(Reason.TIMED_OUT, e.statusMessage(), t);
            }
        }
        return e;
    }

    // ---- closing ----

    /**
     * Ends every hold of this client now and closes its sessions: one CloseSession per
     * session revokes its lease, so the next waiter of each key is granted at once instead of
     * when the TTL runs out. No onFence runs: the owner ended the holds. The client cannot be
     * used afterwards. A second call does nothing.
     *
     * @throws LockException the first CloseSession that failed (other than SESSION_EXPIRED)
     */
    @Override
    public void close() {
        List<Session> toClose;
        synchronized (mu) {
            if (closed) {
                return;
            }
            closed = true;
            toClose = new ArrayList<>(sessions.values());
            sessions.clear();
            for (Reentry h : holds.values()) {
                if (h.link != null) {
                    h.link.close();
                }
            }
            holds.clear();
            permits.clear();
            openStreams = 0;
        }
        // Every hold still live ends here (outcome shutdown), before the CloseSession calls.
        metrics.shutdown();
        LockException first = null;
        for (Session s : toClose) {
            boolean wasFenced = s.fenced();
            s.close();
            if (wasFenced) {
                continue; // its holds are dead already and its lease lapses within the margin
            }
            try {
                blocking.withDeadlineAfter(CLOSE_TIMEOUT.toNanos(), TimeUnit.NANOSECONDS)
                        .closeSession(CloseSessionRequest.newBuilder().setSessionId(s.id).build());
            } catch (StatusRuntimeException x) {
                LockException e = LockException.from(x);
                if (e.reason() != Reason.SESSION_EXPIRED && first == null) {
                    first = e;
                }
            }
        }
        workers.shutdownNow();
        try {
            rotations.close();
        } catch (Exception e) {
            // only unsubscribes
        }
        channel.shutdownNow();
        try {
            channel.awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (first != null) {
            throw first;
        }
    }

    // ---- small types ----

    /** A session's place: its TTL and the cluster tag of its id. */
    private static final class Slot {
        final long ttl;
        final int tag;

        Slot(long ttl, int tag) {
            this.ttl = ttl;
            this.tag = tag;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Slot && ((Slot) o).ttl == ttl && ((Slot) o).tag == tag;
        }

        @Override
        public int hashCode() {
            return Long.hashCode(ttl) * 31 + tag;
        }
    }

    /** The outermost hold of a key in this client; nested acquires only count. */
    private static final class Reentry {
        int count = 1;
        final long token;
        final Session session;
        final HoldLink link;
        /** The grant's hold time, ended by the last release, the fence or close. */
        final Metrics.HoldTimer timer;
        /** The id of the session's fence callback that records the grant as fenced. */
        final long hook;

        Reentry(long token, Session session, HoldLink link, Metrics.HoldTimer timer, long hook) {
            this.token = token;
            this.session = session;
            this.link = link;
            this.timer = timer;
            this.hook = hook;
        }
    }

    /** The outermost permit grant of a key in this client; nested acquires only count. */
    private static final class PermitEntry {
        int count = 1;
        final int permit;
        final long token;
        final Session session;
        /** The grant's hold time, ended by the last release, the fence or close. */
        final Metrics.HoldTimer timer;
        /** The id of the session's fence callback that records the grant as fenced. */
        final long hook;

        PermitEntry(int permit, long token, Session session, Metrics.HoldTimer timer, long hook) {
            this.permit = permit;
            this.token = token;
            this.session = session;
            this.timer = timer;
            this.hook = hook;
        }
    }

    private static final class Grant {
        final long token;
        final HoldLink link;

        Grant(long token, HoldLink link) {
            this.token = token;
            this.link = link;
        }
    }

    private static final class Placed<T> {
        final T value;
        final Session session;

        Placed(T value, Session session) {
            this.value = value;
            this.session = session;
        }
    }

    // ---- building ----

    /** Builds a {@link LockClient}. Credentials: exactly one of svidFiles, workloadApi or meshSidecar. */
    public static final class Builder {
        private final String endpoint;
        private Path cert;
        private Path key;
        private Path bundle;
        private WorkloadApiSource workloadApi;
        private String serverId;
        private boolean meshSidecar;
        private String instance;
        private int maxHoldStreams = DEFAULT_MAX_HOLD_STREAMS;
        private MeterProvider meterProvider;

        private Builder(String endpoint) {
            this.endpoint = Objects.requireNonNull(endpoint, "endpoint");
        }

        /**
         * Presents the workload's X.509-SVID from PEM files: the certificate chain, its
         * PKCS#8 key and the trust bundle that verifies the edge. Read again when they change
         * (a rotation), at the next TLS handshake.
         */
        public Builder svidFiles(Path cert, Path key, Path bundle) {
            this.cert = cert;
            this.key = key;
            this.bundle = bundle;
            return this;
        }

        /**
         * Presents the workload's X.509-SVID from the SPIFFE Workload API, and verifies the
         * edge with the bundle that came with it. A rotation the agent pushes makes the
         * channel start a new connection, so the next call presents the new SVID without a
         * failed one (calls and streams already open keep theirs). The source stays the
         * caller's: {@link #close()} of the client does not close it; close it after the
         * clients it serves.
         */
        public Builder workloadApi(WorkloadApiSource source) {
            this.workloadApi = Objects.requireNonNull(source, "source");
            return this;
        }

        /**
         * Authorises the edge by its exact SPIFFE ID ({@code spiffe://example.org/ns/edge/sa/envoy}).
         * Required with svidFiles or workloadApi.
         */
        public Builder serverId(String spiffeId) {
            this.serverId = spiffeId;
            return this;
        }

        /**
         * Speaks plaintext HTTP/2 to the workload's mesh sidecar, which presents the SVID.
         * Allowed only to a loopback endpoint ({@code http://127.0.0.1:PORT}): anything farther
         * would carry the calls, and the tokens in them, in the clear.
         */
        public Builder meshSidecar() {
            this.meshSidecar = true;
            return this;
        }

        /**
         * Sets the {@code lock-instance} exactly instead of {@link Instance#generate()}. Two
         * clients with one instance and identity are one contender: the second is told
         * LEAKED_HOLD for the first's hold.
         */
        public Builder instance(String instance) {
            this.instance = instance;
            return this;
        }

        /** Bounds the holds whose Hold stream stays open; 0: unary calls only. */
        public Builder maxHoldStreams(int n) {
            if (n < 0) {
                throw new IllegalArgumentException("maxHoldStreams < 0");
            }
            this.maxHoldStreams = n;
            return this;
        }

        /**
         * Records the client's metrics ({@code lock.client.wait.duration},
         * {@code lock.client.hold.duration}, {@code lock.client.holds.lost}) with this
         * provider's meter {@code io.github.fencedlock.lock}: {@code openTelemetry.getMeterProvider()},
         * or {@link MeterProvider#noop()} for none. Default (null): the global provider
         * ({@code GlobalOpenTelemetry}) once the application has set one, and nothing before;
         * the client never sets the global itself.
         */
        public Builder meterProvider(MeterProvider provider) {
            this.meterProvider = provider;
            return this;
        }

        /**
         * The client. It connects lazily.
         *
         * @throws IllegalArgumentException a bad endpoint, instance or server ID, or missing credentials
         * @throws LockException UNAUTHENTICATED when the SVID files cannot be read; CLOSED when the
         *     Workload API source is closed
         */
        public LockClient build() {
            Endpoint ep = Endpoint.parse(endpoint, meshSidecar);
            String inst = instance;
            if (inst == null) {
                inst = Instance.generate();
            } else if (!Instance.valid(inst)) {
                throw new IllegalArgumentException("lock: instance \"" + inst + "\": 1.."
                        + Instance.MAX_LEN + " characters of A-Z a-z 0-9 . _ : -");
            }
            NettyChannelBuilder b = NettyChannelBuilder.forAddress(ep.host, ep.port)
                    .keepAliveTime(PING_INTERVAL.toNanos(), TimeUnit.NANOSECONDS)
                    .keepAliveTimeout(PING_TIMEOUT.toNanos(), TimeUnit.NANOSECONDS)
                    .keepAliveWithoutCalls(true);
            SpiffeTls tls = null;
            if (meshSidecar) {
                if (cert != null || workloadApi != null) {
                    throw new IllegalArgumentException("lock: meshSidecar and " + (cert != null ? "svidFiles" : "workloadApi")
                            + ": choose one");
                }
                b.usePlaintext();
            } else {
                if (cert != null && workloadApi != null) {
                    throw new IllegalArgumentException("lock: svidFiles and workloadApi: choose one");
                }
                if (workloadApi == null && (cert == null || key == null || bundle == null)) {
                    throw new IllegalArgumentException(
                            "lock: no credentials: svidFiles(cert, key, bundle), workloadApi(source) or meshSidecar()");
                }
                if (serverId == null) {
                    throw new IllegalArgumentException("lock: serverId is required: the edge's SPIFFE ID to authorise");
                }
                SpiffeTls.checkSpiffeId(serverId);
                Supplier<SvidMaterial> source;
                if (workloadApi != null) {
                    workloadApi.material(); // a closed source fails here, not at the first handshake
                    source = workloadApi::material;
                } else {
                    source = new SvidFiles(cert, key, bundle)::material;
                }
                tls = new SpiffeTls(source, serverId);
                b.negotiationType(NegotiationType.TLS).sslContext(tls.sslContext());
            }
            ManagedChannel channel = b.build();
            // A rotation idles the channel: calls and streams open keep their connection, the
            // next call makes a new one, whose full handshake (no resumed session) presents the
            // new SVID.
            SpiffeTls rotated = tls;
            AutoCloseable rotations = workloadApi == null ? () -> { } : workloadApi.onUpdate(() -> {
                rotated.forgetSessions();
                channel.enterIdle();
            });
            return new LockClient(channel, tls, rotations, inst, maxHoldStreams, new Metrics(meterProvider));
        }
    }
}
