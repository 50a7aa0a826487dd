package io.github.fencedlock.lock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import org.junit.jupiter.api.Test;

/** The drain-then-fence rule on the monotonic clock (the same cases as liveness.rs and liveness.go). */
class LivenessTest {
    private static final long S = 1_000_000_000L;
    // An arbitrary nanoTime origin, negative on purpose: only differences count.
    private static final long T0 = -5 * S;

    @Test
    void theDeadlineIsTheSendTimeOfTheLastRenewalPlusTheTtlLessOneSecond() {
        Liveness l = new Liveness(Duration.ofSeconds(5), T0);
        assertEquals(T0 + 4 * S, l.deadline());
        l.renewed(T0 + 2 * S);
        assertEquals(T0 + 6 * S, l.deadline());
        // An answer to an older send never moves the deadline back.
        l.renewed(T0 + S);
        assertEquals(T0 + 6 * S, l.deadline());
        assertEquals(Duration.ofSeconds(3), l.remaining(T0 + 3 * S));
        assertEquals(Duration.ZERO, l.remaining(T0 + 7 * S));
    }

    @Test
    void aTtlBelowTheMarginFencesAtTheSendTime() {
        Liveness l = new Liveness(Duration.ofMillis(500), T0);
        assertEquals(T0, l.deadline());
        assertFalse(l.canStart(T0));
    }

    @Test
    void aFailedRenewalStopsNewWorkButDoesNotFence() {
        Liveness l = new Liveness(Duration.ofSeconds(5), T0);
        assertTrue(l.canStart(T0 + S));
        l.failed();
        assertFalse(l.canStart(T0 + S));
        assertTrue(l.continuous(T0 + S));
        assertFalse(l.fenced());
        l.renewed(T0 + 2 * S);
        assertTrue(l.canStart(T0 + 2 * S));
    }

    @Test
    void theFenceIsDueOnceAtTheDeadline() {
        Liveness l = new Liveness(Duration.ofSeconds(5), T0);
        assertFalse(l.fenceDue(T0 + 4 * S - 1));
        assertTrue(l.continuous(T0 + 4 * S - 1));
        assertFalse(l.continuous(T0 + 4 * S));
        assertTrue(l.fenceDue(T0 + 4 * S));
        assertFalse(l.fenceDue(T0 + 5 * S));
        assertTrue(l.fenced());
        assertFalse(l.canStart(T0));
        assertEquals(Duration.ZERO, l.remaining(T0));
        // Renewals after the fence change nothing: the hold is dead.
        l.renewed(T0 + 10 * S);
        assertTrue(l.fenced());
    }

    @Test
    void expireIsTrueTheFirstTimeOnly() {
        Liveness l = new Liveness(Duration.ofSeconds(5), T0);
        assertTrue(l.expire());
        assertFalse(l.expire());
        assertFalse(l.fenceDue(T0 + 10 * S));
    }

    @Test
    void theWaitAskedForLeavesATenthAtMostOneSecond() {
        assertEquals(0, LockClient.waitFor(false, true, 10 * S));
        assertEquals(300 * S, LockClient.waitFor(true, false, 0));
        assertEquals(9 * S, LockClient.waitFor(true, true, 10 * S));
        assertEquals(1_350_000_000L, LockClient.waitFor(true, true, 1_500_000_000L));
        assertEquals(299 * S, LockClient.waitFor(true, true, 300 * S));
        assertEquals(300 * S, LockClient.waitFor(true, true, 1000 * S));
        assertEquals(0, LockClient.waitFor(true, true, 0));
    }

    @Test
    void theClusterTagIsBits55To62OfTheSessionId() {
        assertEquals(0, Session.tagOf(12345));
        assertEquals(3, Session.tagOf((3L << 55) | 77));
        assertEquals(0xff, Session.tagOf(0x7f80_0000_0000_0001L | (1L << 63)));
    }
}
