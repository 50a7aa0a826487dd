package io.github.fencedlock.lock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.grpc.stub.MetadataUtils;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import lock.v1.LockGrpc;
import lock.v1.LockOuterClass.InspectRequest;
import lock.v1.LockOuterClass.InspectResponse;
import lock.v1.LockOuterClass.ValidateTokenRequest;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/**
 * The client against a real stack (etcd, arbiters, Envoy), configured through the
 * environment by integration/tests/java_client.rs: every test is skipped when LOCK_ENDPOINT
 * is unset, and that harness fails if any of them was skipped.
 */
class StackTest {
    /** The dev stack's edge identity (integration/src/pki.rs ENVOY_ID), unless LOCK_SERVER_ID. */
    static final String DEV_EDGE_ID = "spiffe://dev.lock.local/ns/edge/sa/envoy";

    private final List<LockClient> clients = new ArrayList<>();
    private String testName;
    private volatile String unexpectedFence;

    static String serverId() {
        String id = System.getenv("LOCK_SERVER_ID");
        return id == null || id.isEmpty() ? DEV_EDGE_ID : id;
    }

    static String env(String name) {
        String v = System.getenv(name);
        Assumptions.assumeTrue(v != null && !v.isEmpty(),
                name + " is not set: run through integration/tests/java_client.rs");
        return v;
    }

    @BeforeEach
    void need(TestInfo info) {
        env("LOCK_ENDPOINT");
        testName = info.getTestMethod().orElseThrow().getName();
    }

    @AfterEach
    void closeClients() {
        for (LockClient c : clients) {
            try {
                c.close();
            } catch (LockException e) {
                // the test's verdict is what counts
            }
        }
        assertNull(unexpectedFence, "fenced unexpectedly");
    }

    /** A client of identity "LOCK" or "LOCK_OTHER". */
    private LockClient client(String who, String instance) {
        LockClient.Builder b = LockClient.builder(env("LOCK_ENDPOINT"))
                .svidFiles(Path.of(env(who + "_SVID")), Path.of(env(who + "_SVID_KEY")), Path.of(env("LOCK_CA")))
                .serverId(serverId());
        if (instance != null) {
            b.instance(instance);
        }
        LockClient c = b.build();
        clients.add(c);
        return c;
    }

    private LockClient client(String who) {
        return client(who, null);
    }

    /** A fresh key under the prefix in prefixVar. */
    private String testKey(String prefixVar) {
        return env(prefixVar) + "/java-" + testName + "-" + Instance.randomSuffix().substring(0, 8);
    }

    private AcquireOptions noFence(Duration timeout) {
        return AcquireOptions.builder()
                .onFence(() -> unexpectedFence = testName)
                .timeout(timeout)
                .build();
    }

    private AcquireOptions noFence() {
        return noFence(Duration.ofSeconds(20));
    }

    private CampaignOptions candidate() {
        return CampaignOptions.builder()
                .onFence(() -> unexpectedFence = testName)
                .timeout(Duration.ofSeconds(20))
                .build();
    }

    private static Observed next(Observation o) {
        return o.next(Duration.ofSeconds(20)).orElseThrow(() -> new AssertionError("no change within 20 s"));
    }

    private static void assertGreater(long later, long earlier) {
        assertTrue(Long.compareUnsigned(later, earlier) > 0, "the later token is not greater");
    }

    @Test
    void acquireReleaseAndTheTokenIncreases() throws Exception {
        LockClient c = client("LOCK");
        String key = testKey("LOCK_TEST_PREFIX");
        Hold h1 = c.acquire(key, noFence());
        assertTrue(h1.canStart());
        assertTrue(h1.remainingTtl().compareTo(Duration.ZERO) > 0);
        assertNotEquals(0, h1.token());
        h1.release();
        Hold h2 = c.tryAcquire(key, noFence()).orElseThrow();
        assertGreater(h2.token(), h1.token());
        // Held across more than a TTL: renewed, never fenced.
        long ttl = Long.parseLong(env("LOCK_TEST_TTL"));
        Thread.sleep(TimeUnit.SECONDS.toMillis(ttl + 1));
        assertTrue(h2.canStart() && h2.wasContinuous(), "the hold lapsed although its session was renewed");
        h2.close();
    }

    @Test
    void anotherIdentityIsRefusedThenQueues() throws Exception {
        LockClient me = client("LOCK");
        LockClient other = client("LOCK_OTHER");
        String key = testKey("LOCK_TEST_PREFIX");
        Hold h = me.acquire(key, noFence());
        assertTrue(other.tryAcquire(key, noFence()).isEmpty(), "tryAcquire of a held key");
        LockException e = assertThrows(LockException.class, () -> other.acquire(key, noFence(Duration.ofMillis(1500))));
        assertEquals(Reason.HELD, e.reason(), e.toString());
        assertEquals("HELD", e.wireReason());
        CompletableFuture<Hold> waiter = other.acquireAsync(key, noFence(Duration.ofSeconds(30)));
        Thread.sleep(1000);
        assertFalse(waiter.isDone(), "the other identity did not wait");
        h.release();
        Hold w = waiter.get(20, TimeUnit.SECONDS);
        assertGreater(w.token(), h.token());
        w.release();
    }

    /**
     * Two clients of one JVM are two contenders (their client numbers differ): the second
     * waits, never LEAKED_HOLD.
     */
    @Test
    void twoClientsOfOneJvmQueue() throws Exception {
        LockClient a = client("LOCK");
        LockClient b = client("LOCK");
        assertNotEquals(a.instance(), b.instance());
        String key = testKey("LOCK_TEST_PREFIX");
        Hold h = a.acquire(key, noFence());
        assertTrue(b.tryAcquire(key, noFence()).isEmpty(), "the sibling client is not told HELD");
        CompletableFuture<Hold> waiter = CompletableFuture.supplyAsync(() -> b.acquire(key, noFence(Duration.ofSeconds(30))));
        Thread.sleep(1000);
        assertFalse(waiter.isDone(), "the second client did not wait");
        h.release();
        Hold w = waiter.get(20, TimeUnit.SECONDS);
        assertGreater(w.token(), h.token());
        w.release();
    }

    /** JVMs sharing one LOCK_INSTANCE (one pod) queue behind each other: their pids differ. */
    @Test
    void processesSharingAnInstanceQueue() throws Exception {
        String shared = "java-test-pod-" + ProcessHandle.current().pid();
        // This JVM's client is named as Instance.generate() names it with LOCK_INSTANCE set.
        LockClient c = client("LOCK", Instance.name(shared, ProcessHandle.current().pid(), Instance.nextClient(),
                Instance.fallbackPrefix()));
        String key = testKey("LOCK_TEST_PREFIX");
        Hold h = c.acquire(key, noFence());
        String cp = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        ProcessBuilder pb = new ProcessBuilder(java.toString(), "-cp", cp, ChildAcquire.class.getName(), key)
                .redirectError(ProcessBuilder.Redirect.INHERIT);
        pb.environment().put(Instance.ENV, shared);
        Process child = pb.start();
        BlockingQueue<String> lines = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8))) {
                String l;
                while ((l = r.readLine()) != null) {
                    lines.add(l);
                }
            } catch (java.io.IOException e) {
                lines.add("READ " + e);
            }
        });
        reader.setDaemon(true);
        reader.start();
        try {
            String first = lines.poll(30, TimeUnit.SECONDS);
            // The child's first client: the shared prefix, its own pid, number 1.
            assertEquals("INSTANCE " + shared + ":" + child.pid() + ":1", first, "the child's instance");
            assertNotEquals("INSTANCE " + c.instance(), first);
            String early = lines.poll(1500, TimeUnit.MILLISECONDS);
            assertNull(early, "the child did not wait");
            h.release();
            String l = lines.poll(20, TimeUnit.SECONDS);
            assertTrue(l != null && l.startsWith("ACQUIRED "), "the child: " + l);
            assertGreater(Long.parseUnsignedLong(l.substring("ACQUIRED ".length())), h.token());
            assertTrue(child.waitFor(20, TimeUnit.SECONDS), "the child did not exit");
            assertEquals(0, child.exitValue(), "the child failed: " + lines);
        } finally {
            child.destroyForcibly();
        }
    }

    @Test
    void reentry() {
        LockClient c = client("LOCK");
        LockClient other = client("LOCK_OTHER");
        String key = testKey("LOCK_TEST_PREFIX");
        Hold outer = c.acquire(key, noFence());
        Hold inner = c.tryAcquire(key, noFence()).orElseThrow();
        assertEquals(outer.token(), inner.token());
        assertEquals(2, c.holdCount(key));
        inner.release();
        assertTrue(other.tryAcquire(key, noFence()).isEmpty(), "after the inner release the key is still held");
        outer.release();
        Hold h = other.tryAcquire(key, noFence()).orElseThrow(() -> new AssertionError("after the outer release"));
        h.release();
    }

    /** LEAKED_HOLD (one identity and instance under two sessions), NOT_GRANTED, an invalid key. */
    @Test
    void refusalsAreTyped() {
        LockClient a = client("LOCK", "java-same-instance");
        LockClient b = client("LOCK", "java-same-instance");
        String key = testKey("LOCK_TEST_PREFIX");
        Hold h = a.acquire(key, noFence());
        LockException e = assertThrows(LockException.class, () -> b.tryAcquire(key, noFence()));
        assertEquals(Reason.LEAKED_HOLD, e.reason(), e.toString());
        assertEquals("LEAKED_HOLD", e.wireReason());
        assertFalse(e.toString().contains(Long.toUnsignedString(h.token())), "an error shows a token");
        assertFalse(e.toString().contains(Long.toString(h.token())), "an error shows a token");
        h.release();
        LockException ng = assertThrows(LockException.class, () -> a.tryAcquire("archive/java", noFence()));
        assertEquals(Reason.NOT_GRANTED, ng.reason(), ng.toString());
        LockException bad = assertThrows(LockException.class,
                () -> a.tryAcquire(env("LOCK_TEST_PREFIX") + "//bad", noFence()));
        assertTrue(bad.reason() == Reason.INVALID_KEY || bad.reason() == Reason.MALFORMED_REQUEST, bad.toString());
    }

    /** A key of another class's TTL: WRONG_SESSION_TTL is handled by opening its session. */
    @Test
    void aSessionPerTtl() {
        LockClient c = client("LOCK");
        Hold fast = c.acquire(testKey("LOCK_TEST_PREFIX"), noFence());
        Hold slow = c.acquire(testKey("LOCK_TEST_SLOW_PREFIX"), noFence());
        assertNotSame(fast.session, slow.session);
        assertTrue(slow.remainingTtl().compareTo(fast.remainingTtl()) > 0,
                "one session per TTL: " + fast.remainingTtl() + " and " + slow.remainingTtl());
        fast.release();
        slow.release();
    }

    @Test
    void aWrongServerIdIsRefusedAtTheHandshake() {
        LockClient c = LockClient.builder(env("LOCK_ENDPOINT"))
                .svidFiles(Path.of(env("LOCK_SVID")), Path.of(env("LOCK_SVID_KEY")), Path.of(env("LOCK_CA")))
                .serverId("spiffe://dev.lock.local/ns/edge/sa/not-the-edge")
                .build();
        clients.add(c);
        LockException e = assertThrows(LockException.class,
                () -> c.tryAcquire(testKey("LOCK_TEST_PREFIX"), noFence(Duration.ofSeconds(3))));
        if (!e.is(Reason.UNAVAILABLE) && e.reason() != Reason.TIMED_OUT) {
            fail("a wrong edge identity: " + e);
        }
        // Refused by the SPIFFE ID check, not by anything else on the way.
        StringBuilder chain = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            chain.append(t).append('\n');
        }
        assertTrue(chain.toString().contains("is not the expected spiffe://dev.lock.local/ns/edge/sa/not-the-edge"),
                "the handshake was not refused for the edge's SPIFFE ID:\n" + chain);
    }

    // ---- observe, campaign, acquireAll, shared holds (as Go's integration_more_test.go) ----

    /**
     * Another identity observes a key: the current state, the grant (holder and instance, no
     * token), then a broken stream resumed after the last revision seen: the release follows
     * with no CURRENT in between. A second observation resumed from the first answer replays
     * both changes. The holder's own observation carries its token.
     */
    @Test
    void observeSeesChangesAndResumes() {
        LockClient holder = client("LOCK");
        LockClient watcher = client("LOCK_OTHER");
        String key = testKey("LOCK_TEST_PREFIX");
        try (Observation obs = watcher.observe(key, null)) {
            Observed first = next(obs);
            assertEquals(Change.CURRENT, first.change(), first.toString());
            assertFalse(first.held(), first.toString());
            assertTrue(first.revision() > 0, first.toString());
            Hold h = holder.acquire(key, noFence());
            Observed granted = next(obs);
            assertEquals(Change.GRANTED, granted.change(), granted.toString());
            assertTrue(granted.held(), granted.toString());
            assertEquals(holder.instance(), granted.holder().orElseThrow().instance(), granted.toString());
            assertEquals(0, granted.token(), "a token shown to another identity");
            try (Observation own = holder.observe(key, null)) {
                Observed ev = next(own);
                assertEquals(Change.CURRENT, ev.change(), ev.toString());
                assertTrue(ev.token() == h.token(), "the holder's own observation does not carry its token");
            }
            // Break the stream: the next call resumes after the grant's revision.
            obs.dropStream();
            h.release();
            Observed released = next(obs);
            assertEquals(Change.RELEASED, released.change(), "after the break: " + released);
            assertFalse(released.held());
            assertTrue(released.revision() > granted.revision(), released.toString());
            try (Observation replay = watcher.observe(key, ObserveOptions.resumeAfter(first.revision(), first.storeEpoch()))) {
                assertEquals(List.of(Change.GRANTED, Change.RELEASED), List.of(next(replay).change(), next(replay).change()),
                        "resumed from the first answer");
            }
        }
    }

    /**
     * Two candidates of one identity (two clients: two replicas): one leads, the other waits
     * in the queue; a resign hands over at once, with a higher term.
     */
    @Test
    void campaignTermsRiseAndResignHandsOver() throws Exception {
        LockClient a = client("LOCK");
        LockClient b = client("LOCK");
        String key = testKey("LOCK_TEST_PREFIX");
        assertEquals(Reason.ON_FENCE_REQUIRED,
                assertThrows(LockException.class, () -> a.campaign(key, CampaignOptions.builder().build())).reason());
        Leadership first = a.campaign(key, candidate());
        CompletableFuture<Leadership> waiting = b.campaignAsync(key, candidate());
        Thread.sleep(1500);
        assertFalse(waiting.isDone(), "two leaders at once");
        assertTrue(first.canLead() && first.wasContinuous(), "the first term lapsed");
        long resigned = System.nanoTime();
        first.resign();
        Leadership second = waiting.get(20, TimeUnit.SECONDS);
        assertGreater(second.term(), first.term());
        long took = System.nanoTime() - resigned;
        assertTrue(took < TimeUnit.SECONDS.toNanos(3), "the hand-over took " + Duration.ofNanos(took));
        assertFalse(second.toString().contains(Long.toUnsignedString(second.term())), "a term printed");
        second.close();
    }

    /**
     * A set: one token for every key, each key held against another identity, released in
     * one call; overlapping sets in opposite orders do not deadlock; a set of two TTLs is
     * refused as one.
     */
    @Test
    void acquireAllOneTokenAndRelease() throws Exception {
        LockClient c = client("LOCK");
        LockClient other = client("LOCK_OTHER");
        List<String> keys = List.of(testKey("LOCK_TEST_PREFIX"), testKey("LOCK_TEST_PREFIX"), testKey("LOCK_TEST_PREFIX"));
        HeldSet set = c.acquireAll(keys, noFence());
        assertEquals(keys.stream().sorted().toList(), set.keys());
        assertTrue(set.canStart());
        for (String k : keys) {
            assertTrue(other.tryAcquire(k, noFence()).isEmpty(), k + " of the set is not held");
        }
        // Another identity's set overlapping it waits, then gets every key at once.
        CompletableFuture<HeldSet> got = CompletableFuture.supplyAsync(
                () -> other.acquireAll(List.of(keys.get(2), keys.get(0)), noFence()));
        Thread.sleep(1000);
        assertFalse(got.isDone(), "an overlapping set granted while the first is held");
        set.release();
        HeldSet second = got.get(20, TimeUnit.SECONDS);
        assertGreater(second.token(), set.token());
        Hold h = c.tryAcquire(keys.get(1), noFence()).orElseThrow(() -> new AssertionError("the key outside the second set"));
        h.release();
        second.release();
        LockException e = assertThrows(LockException.class,
                () -> c.acquireAll(List.of(testKey("LOCK_TEST_PREFIX"), testKey("LOCK_TEST_SLOW_PREFIX")), noFence()));
        assertEquals(Reason.KEY_SET_REFUSED, e.reason(), e.toString());
        assertFalse(e.metadata().getOrDefault("why", "").isEmpty(), e.toString());
    }

    /**
     * Shared holds of two identities coexist; an exclusive acquire (a third client: a client
     * holding the key shared is told LEAKED_HOLD if it asks for it exclusive) waits for both,
     * and its token is above theirs.
     */
    @Test
    void sharedHoldsCoexistAndExcludeExclusive() throws Exception {
        LockClient a = client("LOCK");
        LockClient b = client("LOCK_OTHER");
        LockClient w = client("LOCK");
        String key = testKey("LOCK_TEST_SHARED_PREFIX");
        SharedHold ra = a.acquireShared(key, noFence());
        SharedHold rb = b.acquireShared(key, noFence());
        assertTrue(w.tryAcquire(key, noFence()).isEmpty(), "exclusive while shared");
        CompletableFuture<Hold> writer = w.acquireAsync(key, noFence(Duration.ofSeconds(30)));
        Thread.sleep(1000);
        assertFalse(writer.isDone(), "the writer did not wait for the readers");
        ra.release();
        Thread.sleep(500);
        assertFalse(writer.isDone(), "the writer did not wait for the second reader");
        rb.release();
        Hold h = writer.get(20, TimeUnit.SECONDS);
        assertGreater(h.token(), ra.token());
        assertGreater(h.token(), rb.token());
        h.release();
        LockException e = assertThrows(LockException.class,
                () -> a.acquireShared(testKey("LOCK_TEST_PREFIX"), noFence()));
        assertEquals(Reason.MALFORMED_REQUEST, e.reason(), "shared on a class that is not shared: " + e);
    }

    // ---- semaphores: the test registry's class of LOCK_TEST_SEM_PERMITS permits ----

    private static int semPermits() {
        int n = Integer.parseInt(env("LOCK_TEST_SEM_PERMITS"));
        assertTrue(n >= 2, "LOCK_TEST_SEM_PERMITS");
        return n;
    }

    /** The raw lock.v1 stub on c's channel, the key sent as {@code lock-key}. */
    private static LockGrpc.LockBlockingStub raw(LockClient c, String key) {
        return LockGrpc.newBlockingStub(c.channel())
                .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(Keys.keyed(key)))
                .withDeadlineAfter(10, TimeUnit.SECONDS);
    }

    private static InspectResponse inspect(LockClient c, String key) {
        return raw(c, key).inspect(InspectRequest.newBuilder().setKey(key).build());
    }

    private static boolean valid(LockClient c, String key, long token) {
        return raw(c, key).validateToken(ValidateTokenRequest.newBuilder().setKey(key).setToken(token).build())
                .getValid();
    }

    /**
     * N clients (two identities, sibling clients of each) hold the N permits of a key at once,
     * each its own permit and token; the next is refused HELD without a wait, then waits and is
     * handed the permit a release frees, under a greater token.
     */
    @Test
    void permitsHeldAtOnceAndTheNextWaitsForARelease() throws Exception {
        int n = semPermits();
        String key = testKey("LOCK_TEST_SEM_PREFIX");
        List<Permit> held = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            held.add(client(i % 2 == 0 ? "LOCK" : "LOCK_OTHER").tryAcquirePermit(key, noFence())
                    .orElseThrow(() -> new AssertionError("a permit holder was refused")));
        }
        TreeSet<Integer> permits = new TreeSet<>();
        Set<Long> tokens = new HashSet<>();
        for (Permit p : held) {
            permits.add(p.permit());
            tokens.add(p.token());
        }
        assertTrue(permits.size() == n && permits.first() == 0 && permits.last() == n - 1, "permits " + permits);
        assertEquals(n, tokens.size(), "two permit grants share a token");
        LockClient last = client("LOCK_OTHER");
        InspectResponse seen = inspect(last, key);
        assertTrue(seen.getHeld());
        assertEquals(n, seen.getPermitsHeld());
        assertEquals(n, seen.getPermits());
        assertTrue(last.tryAcquirePermit(key, noFence()).isEmpty(), "one holder too many");
        CompletableFuture<Permit> waiter = last.acquirePermitAsync(key, noFence(Duration.ofSeconds(30)));
        Thread.sleep(1000);
        assertFalse(waiter.isDone(), "the waiter did not wait");
        Permit freed = held.remove(1);
        freed.release();
        Permit got = waiter.get(20, TimeUnit.SECONDS);
        assertEquals(freed.permit(), got.permit(), "the waiter is handed the freed permit");
        assertGreater(got.token(), freed.token());
        assertFalse(valid(last, key, freed.token()), "the freed permit's old token is current");
        assertTrue(valid(last, key, got.token()));
        held.add(got);
        for (Permit p : held) {
            p.release();
        }
        seen = inspect(last, key);
        assertFalse(seen.getHeld());
        assertEquals(0, seen.getPermitsHeld());
    }

    /** A client's second acquire nests on its permit; the service hears the last release only. */
    @Test
    void permitReentry() {
        LockClient c = client("LOCK");
        LockClient look = client("LOCK_OTHER");
        String key = testKey("LOCK_TEST_SEM_PREFIX");
        Permit outer = c.acquirePermit(key, noFence());
        Permit inner = c.tryAcquirePermit(key, noFence()).orElseThrow();
        assertEquals(outer.permit(), inner.permit());
        assertEquals(outer.token(), inner.token());
        assertEquals(1, inspect(look, key).getPermitsHeld(), "one permit for one nested client");
        outer.release();
        assertTrue(valid(look, key, inner.token()), "released while a nested Permit holds it");
        inner.release();
        assertFalse(valid(look, key, inner.token()), "still held after the last release");
    }

    /** A permit of a class that is no semaphore, and an exclusive or shared hold of a semaphore's key: MALFORMED_REQUEST. */
    @Test
    void permitsOnlyOnASemaphore() {
        LockClient c = client("LOCK");
        LockException e = assertThrows(LockException.class,
                () -> c.tryAcquirePermit(testKey("LOCK_TEST_PREFIX"), noFence()));
        assertEquals(Reason.MALFORMED_REQUEST, e.reason(), e.toString());
        assertEquals("MALFORMED_REQUEST", e.wireReason());
        String sem = testKey("LOCK_TEST_SEM_PREFIX");
        assertEquals(Reason.MALFORMED_REQUEST,
                assertThrows(LockException.class, () -> c.tryAcquire(sem, noFence())).reason());
        assertEquals(Reason.MALFORMED_REQUEST,
                assertThrows(LockException.class, () -> c.tryAcquireShared(sem, noFence())).reason());
    }
}
