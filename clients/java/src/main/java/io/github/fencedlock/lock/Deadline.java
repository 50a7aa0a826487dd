package io.github.fencedlock.lock;

import java.time.Duration;

/** A caller's deadline on the monotonic clock, or none. */
final class Deadline {
    private final boolean none;
    private final long at;

    private Deadline(boolean none, long at) {
        this.none = none;
        this.at = at;
    }

    static final Deadline NONE = new Deadline(true, 0);

    static Deadline after(Duration d) {
        return d == null ? NONE : new Deadline(false, System.nanoTime() + saturatedNanos(d));
    }

    static long saturatedNanos(Duration d) {
        try {
            return d.toNanos();
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE / 4;
        }
    }

    boolean isNone() {
        return none;
    }

    /** Nanoseconds left (Long.MAX_VALUE / 4 without a deadline), never negative. */
    long remaining() {
        if (none) {
            return Long.MAX_VALUE / 4;
        }
        return Math.max(at - System.nanoTime(), 0);
    }

    boolean expired() {
        return !none && at - System.nanoTime() <= 0;
    }
}
