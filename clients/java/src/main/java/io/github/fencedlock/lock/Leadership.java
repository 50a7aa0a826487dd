package io.github.fencedlock.lock;

import java.time.Duration;

/**
 * This client's term as leader of a key ({@link LockClient#campaign}): it leads while it
 * holds this. Leadership is the hold of the key, and the term is its fencing token: every
 * write of the leader carries it, so the guarded resource refuses a deposed leader that
 * writes late. {@link #close()} resigns. Its {@code toString} never shows the term.
 */
public final class Leadership implements AutoCloseable {
    private final Hold hold;

    Leadership(Hold hold) {
        this.hold = hold;
    }

    /** The key this leadership is of. */
    public String key() {
        return hold.key();
    }

    /**
     * The term: the hold's fencing token, unsigned as {@link Hold#token()} (compare with
     * {@link Long#compareUnsigned}). The resource accepts a write only at or above the last
     * term it saw. Never log it.
     */
    public long term() {
        return hold.token();
    }

    /** False from the first failed renewal on: start nothing new as leader. */
    public boolean canLead() {
        return hold.canStart();
    }

    /**
     * Whether the leadership lasted, without a gap, until now (false after a freeze past the
     * TTL): check it before reporting work done as leader.
     */
    public boolean wasContinuous() {
        return hold.wasContinuous();
    }

    /** Whether the leadership was lost (its onFence ran, or the client was closed). */
    public boolean fenced() {
        return hold.fenced();
    }

    /** The time left before the local deadline at which the term is fenced. */
    public Duration remainingTtl() {
        return hold.remainingTtl();
    }

    /** The hold underneath. */
    public Hold hold() {
        return hold;
    }

    /**
     * Steps down: the next candidate in the queue leads at once. Throws
     * {@link Reason#FENCED} when the term had ended already. A second call does nothing.
     */
    public void resign() {
        hold.release();
    }

    /** {@link #resign()}. */
    @Override
    public void close() {
        resign();
    }

    /** The leadership without its term. */
    @Override
    public String toString() {
        return "Leadership{" + hold + "}";
    }
}
