package io.github.fencedlock.lock;

import java.util.HashMap;
import java.util.Map;
import java.util.Optional;

/**
 * Why a call failed: one constant per refusal reason of lock.v1 (the {@code reason} of the
 * {@code google.rpc.ErrorInfo} of domain {@code "lock.v1"}; config/proto/lock/v1/lock.proto,
 * docs/src/reference/errors.md), with the same names as the Go client's sentinels, and the
 * failures the client decides itself ({@link #UNAVAILABLE}, {@link #FENCED},
 * {@link #ON_FENCE_REQUIRED}, {@link #CLOSED}, {@link #TIMED_OUT}, {@link #CANCELLED}).
 */
public enum Reason {
    /** No or an unusable client certificate (UNAUTHENTICATED). */
    UNAUTHENTICATED("not authenticated", true),
    /** No grant covers the key for this identity (NOT_GRANTED). */
    NOT_GRANTED("no grant covers this key for this identity", true),
    /** The key's namespace is homed in another region; metadata {@code region} (REGION_REDIRECT). */
    REGION_REDIRECT("the key's namespace is homed in another region", true),
    /** Retry after metadata {@code retry_after_ms} (RATE_LIMITED). */
    RATE_LIMITED("rate limited", true),
    /** Key syntax, or no lock class covers the key (INVALID_KEY). */
    INVALID_KEY("invalid key", true),
    /** Not a decodable lock.v1 message, a {@code lock-key} disagreeing with the body, or an invalid {@code lock-instance}. */
    MALFORMED_REQUEST("malformed request", true),
    /** Held by another session, at once or still when the wait ended (HELD). */
    HELD("held by another session", true),
    /** This identity and instance hold the key under another session (LEAKED_HOLD, ADR-13). */
    LEAKED_HOLD("held by this instance under another session (a leaked hold?)", true),
    /** The token is not the key's current grant (STALE_TOKEN). */
    STALE_TOKEN("the token is not the key's current grant", true),
    /** The session's lease is gone (SESSION_EXPIRED). */
    SESSION_EXPIRED("the session expired", true),
    /** The key's class needs a session of another TTL; metadata {@code class}, {@code ttl_seconds}. Handled by the client. */
    WRONG_SESSION_TTL("the key's class needs a session with another TTL", true),
    /** The key lives on another etcd cluster than the session; metadata {@code cluster}. Handled by the client. */
    WRONG_SESSION_PLACE("the key lives on another cluster than the session", true),
    /** The store is sealed (a restore without epoch advance) (SEALED). */
    SEALED("the store is sealed", true),
    /** The store has no quorum; a retried acquire on the same session gets its grant back (NO_QUORUM). */
    NO_QUORUM("the store has no quorum", true),
    /** etcd's NOSPACE alarm: no new grants or sessions (STORE_FULL). */
    STORE_FULL("the store is out of space", true),
    /** The arbiter is restarting; nothing was done (DRAINING). {@link #isUnavailable()} is true. */
    DRAINING("the arbiter is draining for a restart", true),
    /** The key's range is moving between shards; nothing was done (MOVING). */
    MOVING("the key's range is moving between shards", true),
    /** A stream limit was reached (STREAM_FULL). */
    STREAM_FULL("stream limit reached", true),
    /** An Observe cannot resume; metadata {@code compact_revision} (HISTORY_COMPACTED). */
    HISTORY_COMPACTED("the store compacted past the last revision seen", true),
    /** An AcquireAll set cannot be granted as one; metadata {@code why} (KEY_SET_REFUSED). */
    KEY_SET_REFUSED("the key set cannot be granted as one", true),
    /** A method the edge cannot authorise (UNKNOWN_METHOD). */
    UNKNOWN_METHOD("a method the edge cannot authorise", true),
    /** The service failed internally (INTERNAL). */
    INTERNAL("lock service internal error", true),

    /** The service could not be reached or the call broke (a transport failure). Retried within the caller's deadline. */
    UNAVAILABLE("cannot reach the lock service", false),
    /** The hold was fenced (its session could not be renewed in time): work under it may not have been exclusive. */
    FENCED("the hold was fenced: its session could not be renewed in time", false),
    /** An acquire without {@link AcquireOptions.Builder#onFence(Runnable)} (ADR-12); nothing was sent. */
    ON_FENCE_REQUIRED("onFence is required: the callback that stops your work if the hold is lost", false),
    /** The client was closed. */
    CLOSED("the client is closed", false),
    /** The caller's own deadline ended before the service answered (Go: context.DeadlineExceeded). */
    TIMED_OUT("the caller's deadline ended", false),
    /** The calling thread was interrupted, or the call cancelled (Go: context.Canceled). */
    CANCELLED("cancelled", false),
    /** A status without a lock.v1 reason that is not a transport failure (a status outside the contract). */
    UNKNOWN("lock service error", false);

    private final String description;
    private final boolean wire;

    Reason(String description, boolean wire) {
        this.description = description;
        this.wire = wire;
    }

    private static final Map<String, Reason> BY_WIRE = new HashMap<>();

    static {
        for (Reason r : values()) {
            if (r.wire) {
                BY_WIRE.put(r.name(), r);
            }
        }
    }

    /** The reason for a lock.v1 ErrorInfo reason string, empty for one this client does not know. */
    public static Optional<Reason> fromWire(String reason) {
        return Optional.ofNullable(BY_WIRE.get(reason));
    }

    /** Whether this is a reason the service sends (as opposed to one the client decides). */
    public boolean isWireReason() {
        return wire;
    }

    /** What the reason means, for messages. */
    public String description() {
        return description;
    }

    /** Whether this matches Go's {@code ErrUnavailable}: {@link #UNAVAILABLE} and {@link #DRAINING}. */
    public boolean isUnavailable() {
        return this == UNAVAILABLE || this == DRAINING;
    }

    /** Worth retrying inside the caller's deadline (NO_QUORUM, UNAVAILABLE, DRAINING, RATE_LIMITED, MOVING). */
    public boolean isTransient() {
        switch (this) {
            case NO_QUORUM:
            case UNAVAILABLE:
            case DRAINING:
            case RATE_LIMITED:
            case MOVING:
                return true;
            default:
                return false;
        }
    }
}
