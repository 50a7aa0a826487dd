package io.github.fencedlock.lock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.time.Duration;
import java.util.HashSet;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * The client on the SPIFFE Workload API against a real stack and the dev CA's Workload API
 * server (`devca workload-api`, the protocol a SPIRE agent serves), run by
 * integration/tests/java_client.rs with LOCK_WORKLOAD_SOCKET set (skipped without it, and
 * that harness fails if it was skipped). Its SVIDs are valid 4 s and rotated every 2 s:
 * after 9 s the first has expired, so calls that still succeed on new connections present
 * rotated SVIDs.
 */
class WorkloadApiStackTest {
    private volatile String unexpectedFence;

    private AcquireOptions options(Duration timeout) {
        return AcquireOptions.builder().onFence(() -> unexpectedFence = "fenced").timeout(timeout).build();
    }

    @Test
    void aWorkloadApiClientKeepsWorkingThroughRotations() throws Exception {
        String socket = StackTest.env("LOCK_WORKLOAD_SOCKET");
        String prefix = StackTest.env("LOCK_WORKLOAD_PREFIX");
        String run = Instance.randomSuffix().substring(0, 8);
        AcquireOptions opts = options(Duration.ofSeconds(5));
        try (WorkloadApiSource source = WorkloadApiSource.connect(socket);
             LockClient c = LockClient.builder(StackTest.env("LOCK_ENDPOINT"))
                     .workloadApi(source)
                     .serverId(StackTest.serverId())
                     .build()) {
            assertEquals(StackTest.env("LOCK_WORKLOAD_ID"), source.svid().spiffeId());
            long first = source.updates();
            Hold held = c.acquire(prefix + "/java-wl-held-" + run, opts);

            Set<BigInteger> presented = new HashSet<>();
            long start = System.nanoTime();
            int calls = 0;
            while (System.nanoTime() - start < Duration.ofSeconds(9).toNanos() && calls < 200) {
                String key = prefix + "/java-wl-" + run + "-" + calls;
                try {
                    c.acquire(key, options(Duration.ofSeconds(2))).release();
                } catch (LockException e) {
                    throw new AssertionError("call " + calls + " at "
                            + Duration.ofNanos(System.nanoTime() - start).toMillis() + " ms", e);
                }
                presented.add(c.presentedLeaf().getSerialNumber());
                calls++;
                Thread.sleep(200);
            }
            long rotations = source.updates() - first;
            System.out.printf("workload api: %d acquire/release pairs over %d ms, %d rotations, %d SVIDs presented,"
                            + " every call granted%n", calls, Duration.ofNanos(System.nanoTime() - start).toMillis(),
                    rotations, presented.size());
            assertTrue(rotations >= 3, rotations + " rotations pushed in 9 s");
            assertTrue(presented.size() >= 3,
                    "each rotation made a new connection with the new SVID: " + presented.size() + " presented");
            assertTrue(held.canStart(), "the hold lived through the rotations");
            held.release();
        }
        assertNull(unexpectedFence, "fenced unexpectedly");
    }
}
