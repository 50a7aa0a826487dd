package io.github.fencedlock.lock;

/**
 * How to observe: from the current holder (the default), or resumed after a revision seen
 * in an earlier observation.
 *
 * <pre>{@code
 * ObserveOptions.resumeAfter(last.revision(), last.storeEpoch())
 * }</pre>
 */
public final class ObserveOptions {
    private static final ObserveOptions DEFAULTS = new ObserveOptions(0, 0);

    private final long afterRevision;
    private final int afterStoreEpoch;

    private ObserveOptions(long afterRevision, int afterStoreEpoch) {
        this.afterRevision = Math.max(afterRevision, 0);
        this.afterStoreEpoch = afterStoreEpoch;
    }

    /** Observe from the current holder. */
    public static ObserveOptions defaults() {
        return DEFAULTS;
    }

    /**
     * Starts after revision of the store of storeEpoch (an {@link Observed}'s
     * {@link Observed#revision()} and {@link Observed#storeEpoch()}; storeEpoch 0: unchecked)
     * instead of from the current holder: the changes after it follow, or, when the store
     * compacted them away, a {@link Change#CURRENT} with {@link Observed#gap()} set.
     * storeEpoch is lock.v1's unsigned 32-bit number in an int.
     */
    public static ObserveOptions resumeAfter(long revision, int storeEpoch) {
        return new ObserveOptions(revision, storeEpoch);
    }

    long afterRevision() {
        return afterRevision;
    }

    int afterStoreEpoch() {
        return afterStoreEpoch;
    }

    @Override
    public String toString() {
        return "ObserveOptions{after: " + afterRevision + ", storeEpoch: " + Integer.toUnsignedString(afterStoreEpoch) + "}";
    }
}
