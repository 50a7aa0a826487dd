package io.github.fencedlock.lock;

import java.time.Duration;
import java.util.Objects;

/**
 * How to campaign: the required onFence callback and how long to stay a candidate.
 *
 * <pre>{@code
 * CampaignOptions.builder().onFence(leader::stepDown).build()
 * }</pre>
 */
public final class CampaignOptions {
    private final Runnable onFence;
    private final Duration timeout;

    private CampaignOptions(Builder b) {
        this.onFence = b.onFence;
        this.timeout = b.timeout;
    }

    public static Builder builder() {
        return new Builder();
    }

    /** Options with onFence and no timeout: the campaign lasts until this client leads. */
    public static CampaignOptions onFence(Runnable onFence) {
        return builder().onFence(onFence).build();
    }

    Runnable onFenceCallback() {
        return onFence;
    }

    Duration timeout() {
        return timeout;
    }

    /** Builder of {@link CampaignOptions}. */
    public static final class Builder {
        private Runnable onFence;
        private Duration timeout;

        private Builder() {}

        /**
         * The callback that runs if the leadership is lost without a resign (its session could
         * not be renewed before the local deadline: drain, then fence): stop acting as leader
         * there. It runs once, on the session's renewal thread, and must not block. Required
         * (ADR-12): a campaign without it throws {@link Reason#ON_FENCE_REQUIRED} before
         * anything is sent.
         */
        public Builder onFence(Runnable onFence) {
            this.onFence = onFence;
            return this;
        }

        /**
         * How long to stay a candidate; null (the default) campaigns until this client leads.
         * When it ends the campaign throws HELD (another still leads) or TIMED_OUT.
         */
        public Builder timeout(Duration timeout) {
            if (timeout != null && timeout.isNegative()) {
                throw new IllegalArgumentException("timeout is negative");
            }
            this.timeout = timeout;
            return this;
        }

        public CampaignOptions build() {
            return new CampaignOptions(this);
        }
    }

    @Override
    public String toString() {
        return "CampaignOptions{onFence: " + (onFence != null) + ", timeout: " + Objects.toString(timeout, "none") + "}";
    }
}
