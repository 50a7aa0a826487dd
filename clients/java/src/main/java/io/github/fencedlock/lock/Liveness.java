package io.github.fencedlock.lock;

import java.time.Duration;

/**
 * Drain-then-fence (ADR-12) as a pure rule on the monotonic clock ({@link System#nanoTime()}
 * readings): the same rule as lock-client's liveness.rs and the Go client's liveness.go. The
 * deadline is the SEND time of the last successful keepalive plus the TTL minus
 * {@link #FENCE_MARGIN}: the store restarts the lease no earlier than it receives that
 * keepalive, so the holder always believes it has lost the lock before the store says so.
 * At the first failed keepalive canStart turns false; at the deadline the holds are fenced.
 * Not thread-safe: the session guards it.
 */
final class Liveness {
    /** The safety margin under the TTL (ADR-12). */
    static final Duration FENCE_MARGIN = Duration.ofSeconds(1);

    private final long ttlNanos;
    private long lastOkSend;
    private boolean failing;
    private boolean fenced;

    /** Starts at openedAt: the nanoTime when the OpenSession request was sent. */
    Liveness(Duration ttl, long openedAt) {
        this.ttlNanos = ttl.toNanos();
        this.lastOkSend = openedAt;
    }

    long deadline() {
        long m = Math.max(ttlNanos - FENCE_MARGIN.toNanos(), 0);
        return lastOkSend + m;
    }

    /** A keepalive sent at sentAt succeeded. */
    void renewed(long sentAt) {
        if (fenced) {
            return;
        }
        if (sentAt - lastOkSend > 0) {
            lastOkSend = sentAt;
        }
        failing = false;
    }

    /** A keepalive failed: start nothing new. */
    void failed() {
        failing = true;
    }

    /** True once, when the deadline has passed: the caller fences the holds. */
    boolean fenceDue(long now) {
        if (!fenced && now - deadline() >= 0) {
            fenced = true;
            return true;
        }
        return false;
    }

    /** Ends the session at once (the service said it expired, or its owner closed it); true the first time. */
    boolean expire() {
        boolean first = !fenced;
        fenced = true;
        return first;
    }

    boolean fenced() {
        return fenced;
    }

    boolean canStart(long now) {
        return !failing && !fenced && now - deadline() < 0;
    }

    /** Whether the session covered every instant up to now: never fenced and its deadline not passed. */
    boolean continuous(long now) {
        return !fenced && now - deadline() < 0;
    }

    Duration remaining(long now) {
        if (fenced) {
            return Duration.ZERO;
        }
        long d = deadline() - now;
        return d <= 0 ? Duration.ZERO : Duration.ofNanos(d);
    }
}
