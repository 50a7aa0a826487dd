package io.github.fencedlock.lock;

import java.time.Duration;
import java.util.Objects;

/**
 * How to acquire: the required onFence callback and how long to wait.
 *
 * <pre>{@code
 * AcquireOptions.builder().onFence(worker::stop).timeout(Duration.ofSeconds(5)).build()
 * }</pre>
 */
public final class AcquireOptions {
    private final Runnable onFence;
    private final Duration timeout;

    private AcquireOptions(Builder b) {
        this.onFence = b.onFence;
        this.timeout = b.timeout;
    }

    public static Builder builder() {
        return new Builder();
    }

    /** Options with onFence and no timeout: acquire waits until granted. */
    public static AcquireOptions onFence(Runnable onFence) {
        return builder().onFence(onFence).build();
    }

    Runnable onFenceCallback() {
        return onFence;
    }

    /** The timeout; null: no deadline. */
    Duration timeout() {
        return timeout;
    }

    /** Builder of {@link AcquireOptions}. */
    public static final class Builder {
        private Runnable onFence;
        private Duration timeout;

        private Builder() {}

        /**
         * The callback that runs if the hold is lost: its session could not be renewed before
         * the local deadline (the send time of the last successful keepalive + TTL − 1 s), or
         * the service said the session expired. It must stop the guarded work; it runs once,
         * on the session's renewal thread, and must not block. Required (ADR-12): an acquire
         * without it throws {@link Reason#ON_FENCE_REQUIRED} before anything is sent.
         */
        public Builder onFence(Runnable onFence) {
            this.onFence = onFence;
            return this;
        }

        /**
         * How long the whole acquire may take, retries and the wait in the key's queue
         * included; null (the default) waits until granted. When it ends the acquire throws
         * HELD (the service's wait ended) or TIMED_OUT (it ended before the service answered).
         */
        public Builder timeout(Duration timeout) {
            if (timeout != null && timeout.isNegative()) {
                throw new IllegalArgumentException("timeout is negative");
            }
            this.timeout = timeout;
            return this;
        }

        public AcquireOptions build() {
            return new AcquireOptions(this);
        }
    }

    @Override
    public String toString() {
        return "AcquireOptions{onFence: " + (onFence != null) + ", timeout: " + Objects.toString(timeout, "none") + "}";
    }
}
