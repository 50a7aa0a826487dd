package io.github.fencedlock.lock;

import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.MetadataUtils;
import java.time.Duration;
import java.time.Instant;
import java.util.Optional;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import lock.v1.LockOuterClass.ObserveRequest;
import lock.v1.LockOuterClass.ObserveResponse;

/**
 * A key being observed (lock.v1 Observe): call {@link #next(Duration)} for each change;
 * {@link #close()} when done (best in try-with-resources). The stream ends for reasons that
 * are not the caller's (a proxy's idle timeout, an arbiter restarting): next calls again
 * with the last revision and store epoch seen ({@code after_revision},
 * {@code after_store_epoch}, as the Go and Rust clients do), so the caller sees no gap;
 * when the store compacted that revision away, the next change is a {@link Change#CURRENT}
 * with {@link Observed#gap()} set. Not safe for concurrent use by several threads.
 */
public final class Observation implements AutoCloseable {
    /** Reconnects in a row without an answer before next gives up (about a minute with the back-off). */
    static final int MAX_RECONNECTS = 40;

    private final LockClient client;
    private final String key;
    private volatile long after;
    private volatile int storeEpoch;
    private boolean gap;
    private volatile boolean closed;
    private volatile Stream stream;

    Observation(LockClient client, String key, ObserveOptions opts) {
        this.client = client;
        this.key = key;
        this.after = opts.afterRevision();
        this.storeEpoch = opts.afterStoreEpoch();
    }

    /** The observed key. */
    public String key() {
        return key;
    }

    /** The last revision seen: the resume point (0 before any answer unless resumed). */
    public long revision() {
        return after;
    }

    /** The epoch of the store {@link #revision()} is of. */
    public int storeEpoch() {
        return storeEpoch;
    }

    /**
     * Ends the observation: its stream is cancelled, and next throws {@link Reason#CLOSED}
     * (a next waiting on another thread included). A second call does nothing.
     */
    @Override
    public void close() {
        closed = true;
        dropStream();
    }

    /** Cancels the stream at hand: the next call resumes on a new one (for tests: a broken stream). */
    void dropStream() {
        Stream s = stream;
        stream = null;
        if (s != null) {
            s.cancel();
        }
    }

    /** {@link #next(Duration)} without a time limit. */
    public Observed next() {
        return next(null).orElseThrow(); // without a deadline, next returns a change or throws
    }

    /**
     * The next change, reconnecting as needed; empty when timeout (null: none) passed
     * without one (the observation goes on: call again). Throws the refusals a new call gets
     * ({@link Reason#NOT_GRANTED}, {@link Reason#INVALID_KEY}...), {@link Reason#UNAVAILABLE}
     * when the service is unreachable for about a minute, {@link Reason#CLOSED} after close,
     * and {@link Reason#CANCELLED} when the thread is interrupted (its flag set again).
     */
    public synchronized Optional<Observed> next(Duration timeout) {
        Deadline dl = Deadline.after(timeout);
        int failures = 0;
        long backoff = TimeUnit.MILLISECONDS.toNanos(50);
        // Whether the stream at hand has answered: one that ends without a word is a failure
        // to back off from, not a reason to reconnect at once.
        boolean answered = true;
        try {
            while (true) {
                if (closed || client.isClosed()) {
                    throw LockException.client(Reason.CLOSED, "");
                }
                LockException err;
                Stream st = stream;
                if (st == null) {
                    stream = open();
                    if (closed) {
                        dropStream(); // a close that raced with the open
                    }
                    answered = false;
                    continue;
                }
                Session.Answer<ObserveResponse> a = dl.isNone()
                        ? st.answers.take()
                        : st.answers.poll(dl.remaining(), TimeUnit.NANOSECONDS);
                if (a == null) {
                    return Optional.empty();
                }
                if (a.value != null) {
                    failures = 0;
                    answered = true;
                    Optional<Observed> ev = take(a.value);
                    if (ev.isPresent()) {
                        return ev;
                    }
                    continue;
                }
                dropStream();
                if (closed) {
                    throw LockException.client(Reason.CLOSED, "");
                }
                if (a.error == null) {
                    // The stream ended cleanly (a proxy's timeout, an arbiter draining): resume.
                    if (answered) {
                        continue;
                    }
                    if (++failures > MAX_RECONNECTS) {
                        throw LockException.client(Reason.UNAVAILABLE, "observe streams end without an answer");
                    }
                    backoff = Math.min(backoff * 2, TimeUnit.SECONDS.toNanos(2));
                    if (!pause(dl, backoff)) {
                        return Optional.empty();
                    }
                    continue;
                }
                err = LockException.from(a.error);
                long pause;
                if (err.reason() == Reason.HISTORY_COMPACTED) {
                    // The gap cannot be replayed: start from the current state, and say so.
                    after = 0;
                    storeEpoch = 0;
                    gap = true;
                    continue;
                } else if (err.reason() == Reason.RATE_LIMITED) {
                    pause = err.retryAfter().toNanos();
                } else if (err.isTransient() || err.wireReason().isEmpty()) {
                    // A break without a lock.v1 reason is the stream's, not a refusal: the
                    // RST_STREAM INTERNAL_ERROR a proxy sends when the arbiter behind it
                    // restarts (found by the conformance suite's observe-resume). Resumed,
                    // within MAX_RECONNECTS.
                    backoff = Math.min(backoff * 2, TimeUnit.SECONDS.toNanos(2));
                    pause = backoff;
                } else {
                    throw err;
                }
                if (++failures > MAX_RECONNECTS) {
                    throw err;
                }
                if (!pause(dl, pause)) {
                    return Optional.empty();
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw LockException.client(Reason.CANCELLED, "interrupted", e);
        }
    }

    /** Sleeps pause within the deadline; false when the deadline ended first. */
    private static boolean pause(Deadline dl, long nanos) throws InterruptedException {
        if (dl.remaining() <= nanos) {
            TimeUnit.NANOSECONDS.sleep(dl.remaining());
            return false;
        }
        TimeUnit.NANOSECONDS.sleep(nanos);
        return true;
    }

    private Stream open() {
        ObserveRequest req = ObserveRequest.newBuilder()
                .setKey(key)
                .setAfterRevision(after)
                .setAfterStoreEpoch(storeEpoch)
                .setSessionId(client.ownSession(key))
                .build();
        Stream s = new Stream();
        client.asyncStub()
                .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(Keys.keyed(key)))
                .observe(req, s);
        return s;
    }

    /** Records a's revision as the resume point; the change it reports (empty for a progress mark). */
    private Optional<Observed> take(ObserveResponse a) {
        // A revision is a resume point only with its store's epoch.
        if (a.getStoreEpoch() != storeEpoch || a.getRevision() > after) {
            after = a.getRevision();
            storeEpoch = a.getStoreEpoch();
        }
        Optional<Change> change = Change.of(a.getEvent());
        if (change.isEmpty()) {
            return Optional.empty();
        }
        Observed.Holder holder = null;
        if (!a.getHolderSpiffeId().isEmpty()) {
            holder = new Observed.Holder(a.getHolderSpiffeId(), a.getHolderInstance(), a.getClassName(),
                    Instant.ofEpochMilli(a.getAcquiredAtUnixMs()), a.getEpoch(), a.getGrantRevision());
        }
        boolean g = false;
        if (change.get() == Change.CURRENT && gap) {
            g = true;
            gap = false;
        }
        return Optional.of(new Observed(change.get(), a.getRevision(), a.getHeld(), holder, g, a.getStoreEpoch(),
                a.getToken()));
    }

    @Override
    public String toString() {
        return "Observation{key: \"" + key + "\", after: " + after + "}";
    }

    /** One Observe call; its answers queue up so next can wait for one with a timeout. */
    private static final class Stream implements ClientResponseObserver<ObserveRequest, ObserveResponse> {
        final BlockingQueue<Session.Answer<ObserveResponse>> answers = new LinkedBlockingQueue<>();
        private volatile ClientCallStreamObserver<ObserveRequest> call;

        @Override
        public void beforeStart(ClientCallStreamObserver<ObserveRequest> call) {
            this.call = call;
        }

        @Override
        public void onNext(ObserveResponse r) {
            answers.add(new Session.Answer<>(r, null));
        }

        @Override
        public void onError(Throwable t) {
            answers.add(new Session.Answer<>(null, t));
        }

        @Override
        public void onCompleted() {
            answers.add(new Session.Answer<>(null, null));
        }

        void cancel() {
            ClientCallStreamObserver<ObserveRequest> c = call;
            if (c != null) {
                try {
                    c.cancel("observation closed", null);
                } catch (RuntimeException e) {
                    // already ended
                }
            }
        }
    }
}
