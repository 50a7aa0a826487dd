package io.github.fencedlock.lock;

import java.time.Instant;
import java.util.Optional;

/**
 * One change of an observed key. A hint, never a grant (ADR-15): by the time it arrives it
 * may be over. Its {@code toString} never shows the token.
 */
public final class Observed {
    private final Change change;
    private final long revision;
    private final boolean held;
    private final Holder holder;
    private final boolean gap;
    private final int storeEpoch;
    private final long token;

    Observed(Change change, long revision, boolean held, Holder holder, boolean gap, int storeEpoch, long token) {
        this.change = change;
        this.revision = revision;
        this.held = held;
        this.holder = holder;
        this.gap = gap;
        this.storeEpoch = storeEpoch;
        this.token = token;
    }

    /** What happened. */
    public Change change() {
        return change;
    }

    /** The store revision of the change: with {@link #storeEpoch()}, a resume point. */
    public long revision() {
        return revision;
    }

    /** Whether the key is held after the change. */
    public boolean held() {
        return held;
    }

    /** The hold the change names (the hold now, or the hold that ended); empty when it names none. */
    public Optional<Holder> holder() {
        return Optional.ofNullable(holder);
    }

    /**
     * Changes before this one were missed (the store compacted them while the stream was
     * down, or the key's store is another since). Only on a {@link Change#CURRENT}.
     */
    public boolean gap() {
        return gap;
    }

    /** The epoch of the store {@link #revision()} is of (unsigned 32-bit, in an int). */
    public int storeEpoch() {
        return storeEpoch;
    }

    /**
     * The hold's fencing token, only when the holder is this client's own session (0
     * otherwise). Unsigned, as {@link Hold#token()}. A capability: never log it.
     */
    public long token() {
        return token;
    }

    /** The change without its token. */
    @Override
    public String toString() {
        String who = holder == null ? "-" : holder.toString();
        return change + " at " + revision + " (store epoch " + Integer.toUnsignedString(storeEpoch) + "): held "
                + held + " by " + who + ", gap " + gap;
    }

    /** The hold a change names. Never its token. */
    public static final class Holder {
        private final String spiffeId;
        private final String instance;
        private final String className;
        private final Instant acquiredAt;
        private final int epoch;
        private final long grantRevision;

        Holder(String spiffeId, String instance, String className, Instant acquiredAt, int epoch, long grantRevision) {
            this.spiffeId = spiffeId;
            this.instance = instance;
            this.className = className;
            this.acquiredAt = acquiredAt;
            this.epoch = epoch;
            this.grantRevision = grantRevision;
        }

        /** The holder's SPIFFE ID. */
        public String spiffeId() {
            return spiffeId;
        }

        /** The holding process's {@code lock-instance}, empty when its client sent none. */
        public String instance() {
            return instance;
        }

        /** The lock class covering the key. */
        public String className() {
            return className;
        }

        /** When the hold was granted. */
        public Instant acquiredAt() {
            return acquiredAt;
        }

        /** The epoch the hold was granted in (a token part; a later hold's is higher or equal). */
        public int epoch() {
            return epoch;
        }

        /** The store revision of the write that made the holder: a later hold's is higher. */
        public long grantRevision() {
            return grantRevision;
        }

        @Override
        public String toString() {
            return instance.isEmpty() ? spiffeId : spiffeId + " (" + instance + ")";
        }
    }
}
