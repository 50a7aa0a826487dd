package io.github.fencedlock.lock;

import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.metrics.DoubleHistogram;
import io.opentelemetry.api.metrics.LongCounter;
import io.opentelemetry.api.metrics.Meter;
import io.opentelemetry.api.metrics.MeterProvider;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One client's OpenTelemetry metrics (the same three in every client): how long acquires
 * wait, how long holds last and how many holds were lost. Attributes are {@code class} and
 * {@code outcome} only: never a key, a token, an identity or an instance, which would be a
 * series per lock (and a token is a capability).
 */
final class Metrics {
    /** The instrumentation scope (the meter's name). */
    static final String SCOPE = "io.github.fencedlock.lock";
    static final String WAIT = "lock.client.wait.duration";
    static final String HOLD = "lock.client.hold.duration";
    static final String LOST = "lock.client.holds.lost";
    static final AttributeKey<String> CLASS = AttributeKey.stringKey("class");
    static final AttributeKey<String> OUTCOME = AttributeKey.stringKey("outcome");
    /** The class of a key no answer named yet. */
    static final String UNKNOWN_CLASS = "unknown";

    /** Waits run from milliseconds (a free key) to the service's longest wait (300 s). */
    static final List<Double> WAIT_BUCKETS = List.of(
            0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0);
    /** Holds run from a short critical section to a leader's term of hours. */
    static final List<Double> HOLD_BUCKETS = List.of(
            0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0);

    /** How a hold ended. */
    enum End {
        RELEASED, FENCED, SHUTDOWN;

        String label() {
            return name().toLowerCase(Locale.ROOT);
        }
    }

    private static final Instruments NOOP = new Instruments(MeterProvider.noop());

    /** The provider the application gave; null: the global one. */
    private final MeterProvider given;
    private volatile Instruments instruments;
    /** Holds granted and not ended yet: the ones a close() ends (outcome shutdown). */
    private final Set<HoldTimer> live = Collections.newSetFromMap(new IdentityHashMap<>());

    Metrics(MeterProvider given) {
        this.given = given;
        if (given != null) {
            this.instruments = new Instruments(given);
        }
    }

    /**
     * The instruments: the given provider's, else the global provider's once the application
     * has set one. Never GlobalOpenTelemetry.get() before that: it would install the no-op
     * as the global, and the application's own set() later would throw. An application that
     * installs its SDK after building the client still gets the client's metrics.
     */
    private Instruments instruments() {
        Instruments i = instruments;
        if (i != null) {
            return i;
        }
        if (!GlobalOpenTelemetry.isSet()) {
            return NOOP;
        }
        synchronized (this) {
            if (instruments == null) {
                instruments = new Instruments(GlobalOpenTelemetry.getMeterProvider());
            }
            return instruments;
        }
    }

    private static Attributes attrs(String cls, String outcome) {
        return Attributes.of(CLASS, cls == null || cls.isEmpty() ? UNKNOWN_CLASS : cls, OUTCOME, outcome);
    }

    private static double secondsSince(long startNanos) {
        return (System.nanoTime() - startNanos) / (double) TimeUnit.SECONDS.toNanos(1);
    }

    /**
     * The outcome of an acquire that failed: the refusal's reason in lower case,
     * {@code cancelled} when the caller cancelled, {@code unavailable} for every error without a
     * lock.v1 reason (a transport failure, the caller's timeout, a closed client).
     */
    static String outcome(Throwable t) {
        if (t instanceof LockException) {
            LockException e = (LockException) t;
            if (e.reason() == Reason.CANCELLED) {
                return "cancelled";
            }
            if (e.reason().isWireReason()) {
                return e.reason().name().toLowerCase(Locale.ROOT);
            }
            String wire = e.wireReason();
            // A reason newer than this client: named as sent, if it looks like one (the
            // service's reasons are upper-case words; anything else stays out of the label).
            if (!wire.isEmpty() && wire.length() <= 64 && wire.matches("[A-Z][A-Z_]*")) {
                return wire.toLowerCase(Locale.ROOT);
            }
        }
        return "unavailable";
    }

    /** Starts timing one acquire call (acquire, tryAcquire, acquireShared, acquirePermit, acquireAll, campaign). */
    Wait startWait() {
        return new Wait();
    }

    /**
     * A hold granted now, of class cls: its timer, ended once by {@link HoldTimer#end}
     * (released, fenced) or by {@link #shutdown()}.
     */
    HoldTimer granted(String cls) {
        HoldTimer t = new HoldTimer(cls);
        synchronized (live) {
            live.add(t);
        }
        return t;
    }

    /** Ends every live hold with outcome shutdown: the client was closed. */
    void shutdown() {
        List<HoldTimer> all;
        synchronized (live) {
            all = new ArrayList<>(live);
        }
        for (HoldTimer t : all) {
            t.end(End.SHUTDOWN);
        }
    }

    /**
     * One acquire call being timed. Used by the one thread that makes the call. Nothing is
     * recorded unless {@link #called()} was: a re-entrant acquire, or one refused before
     * anything was sent (no onFence, no keys), made no call to wait for.
     */
    final class Wait {
        private final long start = System.nanoTime();
        private boolean called;

        /** The call goes to the service. */
        void called() {
            called = true;
        }

        void granted(String cls) {
            if (called) {
                instruments().wait.record(secondsSince(start), attrs(cls, "granted"));
            }
        }

        void failed(String cls, Throwable t) {
            if (called) {
                instruments().wait.record(secondsSince(start), attrs(cls, outcome(t)));
            }
        }
    }

    /** One grant's hold time; a nested (re-entrant) hold shares its grant's timer. */
    final class HoldTimer {
        private final String cls;
        private final long start = System.nanoTime();
        private final AtomicBoolean ended = new AtomicBoolean();

        private HoldTimer(String cls) {
            this.cls = cls;
        }

        /** Records the hold's end the first time; later calls (a release after the fence) do nothing. */
        void end(End how) {
            if (!ended.compareAndSet(false, true)) {
                return;
            }
            synchronized (live) {
                live.remove(this);
            }
            Instruments i = instruments();
            Attributes a = attrs(cls, how.label());
            i.hold.record(secondsSince(start), a);
            if (how == End.FENCED) {
                // By class only: a lost hold's outcome is always fenced.
                i.lost.add(1, Attributes.of(CLASS, a.get(CLASS)));
            }
        }
    }

    /** The three instruments of one meter. */
    private static final class Instruments {
        final DoubleHistogram wait;
        final DoubleHistogram hold;
        final LongCounter lost;

        Instruments(MeterProvider provider) {
            Meter m = provider.get(SCOPE);
            wait = m.histogramBuilder(WAIT)
                    .setDescription("How long an acquire (acquire, shared, permit, set, campaign) waited for its answer.")
                    .setUnit("s")
                    .setExplicitBucketBoundariesAdvice(WAIT_BUCKETS)
                    .build();
            hold = m.histogramBuilder(HOLD)
                    .setDescription("How long a hold lasted, from its grant to its release, fence or shutdown.")
                    .setUnit("s")
                    .setExplicitBucketBoundariesAdvice(HOLD_BUCKETS)
                    .build();
            lost = m.counterBuilder(LOST)
                    .setDescription("Holds fenced before they were released (their onFence ran).")
                    .setUnit("{hold}")
                    .build();
        }
    }
}
