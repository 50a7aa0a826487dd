package io.github.fencedlock.lock;

import java.util.Optional;
import lock.v1.LockOuterClass.ObserveEvent;

/**
 * What happened to an observed key (lock.v1 ObserveEvent; PROGRESS marks are consumed as
 * resume points and never reported).
 */
public enum Change {
    /** The holder as of the observation's start (or a restart after a gap): held or free. */
    CURRENT,
    /** Granted to a session (free before, or handed on by a release). */
    GRANTED,
    /** The holder released it. */
    RELEASED,
    /** The holder's session was not renewed within its TTL. */
    EXPIRED,
    /** The holder closed its session. */
    CLOSED,
    /** Two operators force-released it. */
    FORCED,
    /** An epoch advance revoked every hold of the store. */
    REVOKED;

    /** The change an answer reports; empty for a progress mark or an event this client does not know. */
    static Optional<Change> of(ObserveEvent e) {
        switch (e) {
            case OBSERVE_EVENT_CURRENT:
                return Optional.of(CURRENT);
            case OBSERVE_EVENT_GRANTED:
                return Optional.of(GRANTED);
            case OBSERVE_EVENT_RELEASED:
                return Optional.of(RELEASED);
            case OBSERVE_EVENT_EXPIRED:
                return Optional.of(EXPIRED);
            case OBSERVE_EVENT_CLOSED:
                return Optional.of(CLOSED);
            case OBSERVE_EVENT_FORCED:
                return Optional.of(FORCED);
            case OBSERVE_EVENT_REVOKED:
                return Optional.of(REVOKED);
            default:
                return Optional.empty();
        }
    }

    /** The lower-case name, as Go's Change.String. */
    @Override
    public String toString() {
        return name().toLowerCase(java.util.Locale.ROOT);
    }
}
