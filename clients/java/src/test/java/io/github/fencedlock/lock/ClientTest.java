package io.github.fencedlock.lock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** The client against FakeServer: re-entrancy counting, metadata, sessions per TTL, fencing. */
class ClientTest {
    private FakeServer server;

    @BeforeEach
    void start() throws Exception {
        server = new FakeServer();
    }

    @AfterEach
    void stop() {
        server.close();
    }

    private LockClient client() {
        return LockClient.builder(server.endpoint()).meshSidecar().build();
    }

    private static AcquireOptions opts() {
        return AcquireOptions.builder().onFence(() -> { }).timeout(Duration.ofSeconds(5)).build();
    }

    @Test
    void anAcquireWithoutOnFenceFailsBeforeAnythingIsSent() {
        try (LockClient c = client()) {
            LockException e = assertThrows(LockException.class, () -> c.acquire("pay/a", AcquireOptions.builder().build()));
            assertEquals(Reason.ON_FENCE_REQUIRED, e.reason());
            assertEquals(Reason.ON_FENCE_REQUIRED, assertThrows(LockException.class, () -> c.tryAcquire("pay/a", null)).reason());
            ExecutionException x = assertThrows(ExecutionException.class, () -> c.acquireAsync("pay/a", null).get());
            assertEquals(Reason.ON_FENCE_REQUIRED, ((LockException) x.getCause()).reason());
            assertTrue(server.calls.isEmpty(), server.calls.toString());
        }
    }

    @Test
    void nestedAcquiresAreCountedLocallyAndTheOutermostReleases() {
        try (LockClient c = client()) {
            Hold outer = c.acquire("pay/re", opts());
            Hold inner = c.tryAcquire("pay/re", opts()).orElseThrow();
            assertEquals(outer.token(), inner.token());
            assertEquals(2, c.holdCount("pay/re"));
            assertEquals(1, server.calls.stream().filter(s -> s.equals("Hold")).count(), server.calls.toString());
            inner.close();
            inner.close(); // a second release does nothing
            assertEquals(1, c.holdCount("pay/re"));
            assertTrue(server.held("pay/re"));
            outer.close();
            assertEquals(0, c.holdCount("pay/re"));
            assertFalse(server.held("pay/re"));
            assertEquals(0, c.openHoldStreams());
        }
    }

    @Test
    void keyedCallsCarryTheLockKeyAndOpenSessionTheInstance() {
        try (LockClient c = client()) {
            try (Hold h = c.acquire("pay/été 1", opts())) {
                assertTrue(h.canStart());
                assertTrue(h.remainingTtl().compareTo(Duration.ZERO) > 0);
                assertFalse(h.toString().contains(Long.toString(h.token())), h.toString());
                assertFalse(h.toString().contains(Long.toUnsignedString(h.token())), h.toString());
            }
            assertTrue(server.lockKeys.contains("OpenSession pay/%C3%A9t%C3%A9%201"), server.lockKeys.toString());
            assertTrue(server.lockKeys.contains("Hold pay/%C3%A9t%C3%A9%201"), server.lockKeys.toString());
            assertEquals(java.util.List.of(c.instance()), server.instances);
        }
    }

    @Test
    void unaryCallsWhenNoHoldStreamsAreAllowed() {
        try (LockClient c = LockClient.builder(server.endpoint()).meshSidecar().maxHoldStreams(0).build()) {
            Hold h = c.acquire("pay/unary", opts());
            h.release();
            assertTrue(server.calls.contains("Acquire") && server.calls.contains("Release"), server.calls.toString());
            assertFalse(server.calls.contains("Hold"));
            assertTrue(server.lockKeys.contains("Release pay/unary"), server.lockKeys.toString());
        }
    }

    @Test
    void heldIsEmptyForTryAcquireAndHeldAfterTheWaitForAcquire() throws Exception {
        try (LockClient a = client(); LockClient b = client()) {
            assertNotEquals(a.instance(), b.instance());
            Hold h = a.acquire("pay/q", opts());
            assertEquals(Optional.empty(), b.tryAcquire("pay/q", opts()));
            long t0 = System.nanoTime();
            LockException e = assertThrows(LockException.class, () -> b.acquire("pay/q",
                    AcquireOptions.builder().onFence(() -> { }).timeout(Duration.ofMillis(800)).build()));
            assertEquals(Reason.HELD, e.reason());
            assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(600));
            CompletableFuture<Hold> waiter = b.acquireAsync("pay/q", opts());
            Thread.sleep(300);
            assertFalse(waiter.isDone());
            h.release();
            Hold w = waiter.get(5, TimeUnit.SECONDS);
            assertTrue(Long.compareUnsigned(w.token(), h.token()) > 0);
            w.release();
        }
    }

    @Test
    void aKeyOfAnotherTtlGetsItsOwnSession() {
        try (LockClient c = client()) {
            Hold fast = c.acquire("pay/f", opts());
            Hold slow = c.acquire("slow/s", opts());
            assertNotEquals(fast.session.id, slow.session.id);
            assertTrue(slow.remainingTtl().compareTo(fast.remainingTtl()) > 0);
            assertEquals(2, server.calls.stream().filter(s -> s.equals("OpenSession")).count());
            Hold fast2 = c.acquire("pay/f2", opts());
            assertSame(fast.session, fast2.session);
            fast.release();
            slow.release();
            fast2.release();
        }
    }

    @Test
    void refusalsAreTyped() {
        try (LockClient c = client()) {
            assertEquals(Reason.NOT_GRANTED, assertThrows(LockException.class, () -> c.tryAcquire("archive/x", opts())).reason());
            LockException e = assertThrows(LockException.class, () -> c.acquire("bad/x", opts()));
            assertEquals(Reason.INVALID_KEY, e.reason());
            assertEquals("refused: invalid_key", e.statusMessage());
        }
    }

    /**
     * A try is one attempt: a transient refusal is its answer at once (NO_QUORUM promptly,
     * RATE_LIMITED to a burst), while an acquire with a timeout retries it within the timeout.
     */
    @Test
    void aTryAnswersATransientRefusalAtOnce() {
        try (LockClient c = client()) {
            c.acquire("pay/warm", opts()).release(); // the session is open
            server.refuseAcquires = "NO_QUORUM";
            int before = server.calls.size();
            long started = System.nanoTime();
            LockException e = assertThrows(LockException.class, () -> c.tryAcquire("pay/nq", opts()));
            assertEquals(Reason.NO_QUORUM, e.reason());
            assertTrue(System.nanoTime() - started < TimeUnit.SECONDS.toNanos(2), "the try retried");
            assertEquals(List.of("Hold"), server.calls.subList(before, server.calls.size()));
            assertEquals(Reason.NO_QUORUM, assertThrows(LockException.class,
                    () -> c.tryAcquireShared("pay/nq", opts())).reason());

            before = server.calls.size();
            LockException waited = assertThrows(LockException.class, () -> c.acquire("pay/nq",
                    AcquireOptions.builder().onFence(() -> { }).timeout(Duration.ofMillis(1500)).build()));
            // Its answer is the last refusal, or TIMED_OUT when the timeout ran out during
            // an attempt or a backoff: which one depends on the machine's timing.
            assertTrue(waited.reason() == Reason.NO_QUORUM || waited.reason() == Reason.TIMED_OUT,
                    "an acquire that timed out on NO_QUORUM answered " + waited.reason());
            assertTrue(server.calls.size() - before > 1, "an acquire with a timeout did not retry");
            server.refuseAcquires = null;
        }
    }

    /**
     * A hold whose stream was reset (no lock.v1 reason: a proxy's RST_STREAM when its arbiter
     * restarted) is released with the unary call, not refused.
     */
    @Test
    void aReleaseOnABrokenHoldStreamFallsBackToTheUnaryCall() throws Exception {
        try (LockClient c = client()) {
            Hold h = c.acquire("pay/reset", opts());
            assertEquals(1, c.openHoldStreams());
            server.breakHoldStreams();
            Thread.sleep(200); // the reset reaches the client before the release
            h.release();
            assertFalse(server.held("pay/reset"));
            assertTrue(server.calls.contains("Release"), server.calls.toString());
            assertEquals(0, c.openHoldStreams());
        }
    }

    @Test
    void aSessionThatCannotBeRenewedFencesItsHolds() throws Exception {
        try (LockClient c = client()) {
            CountDownLatch fenced = new CountDownLatch(1);
            Hold h = c.acquire("pay/fence", AcquireOptions.builder().onFence(fenced::countDown).build());
            server.keepAliveFails = true;
            // TTL 3 s: renewals every second fail; the deadline is the last good send + 2 s.
            assertTrue(fenced.await(6, TimeUnit.SECONDS), "onFence did not run");
            assertTrue(h.fenced());
            assertFalse(h.canStart());
            assertFalse(h.wasContinuous());
            assertEquals(Duration.ZERO, h.remainingTtl());
            assertEquals(Reason.FENCED, assertThrows(LockException.class, h::release).reason());
        }
    }

    @Test
    void aHoldIsRenewedPastItsTtl() throws Exception {
        try (LockClient c = client()) {
            Hold h = c.acquire("pay/renew", AcquireOptions.builder().onFence(() -> { }).build());
            Thread.sleep(4000);
            assertTrue(h.canStart() && h.wasContinuous());
            assertTrue(server.keepalives.get() >= 3, "keepalives: " + server.keepalives.get());
            h.release();
        }
    }

    @Test
    void closingEndsTheSessionsAndTheClient() {
        LockClient c = client();
        Hold h = c.acquire("pay/close", opts());
        c.close();
        assertTrue(server.calls.contains("CloseSession"));
        assertFalse(server.held("pay/close"));
        h.release(); // nothing to do: the client ended it
        assertEquals(Reason.CLOSED, assertThrows(LockException.class, () -> c.acquire("pay/x", opts())).reason());
        c.close();
    }
}
