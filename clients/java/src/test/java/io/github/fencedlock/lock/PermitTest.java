package io.github.fencedlock.lock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.HistogramPointData;
import io.opentelemetry.sdk.metrics.data.LongPointData;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import lock.v1.LockOuterClass.HoldMode;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Semaphore permits against FakeServer (its "sem/" keys, 3 permits), as Go's permit_test.go. */
class PermitTest {
    private FakeServer server;
    private final List<LockClient> clients = new ArrayList<>();

    @BeforeEach
    void start() throws Exception {
        server = new FakeServer();
    }

    @AfterEach
    void stop() {
        for (LockClient c : clients) {
            c.close();
        }
        server.close();
    }

    private LockClient client(LockClient.Builder b) {
        LockClient c = b.build();
        clients.add(c);
        return c;
    }

    private LockClient client() {
        return client(LockClient.builder(server.endpoint()).meshSidecar());
    }

    private static AcquireOptions opts(Runnable onFence) {
        return AcquireOptions.builder().onFence(onFence).timeout(Duration.ofSeconds(5)).build();
    }

    private static AcquireOptions opts() {
        return opts(() -> { });
    }

    private static void await(BooleanSupplier cond, String what) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(6);
        while (!cond.getAsBoolean()) {
            assertTrue(System.nanoTime() < until, what);
            Thread.sleep(20);
        }
    }

    private long calls(String method) {
        return server.calls.stream().filter(method::equals).count();
    }

    /**
     * Three clients hold the three permits of a key at once, each its own; the fourth is
     * refused HELD, then given the permit a release frees, under a greater token. A client's
     * second acquire nests on its permit (nothing sent) and the service hears the last release
     * only, with mode PERMIT. The wrong class either way is MALFORMED_REQUEST.
     */
    @Test
    void permitsAreNumberedNestedAndReleasedWithModePermit() {
        LockClient a = client();
        LockClient b = client();
        LockClient c = client();
        LockClient d = client();
        assertEquals(Reason.ON_FENCE_REQUIRED,
                assertThrows(LockException.class, () -> a.acquirePermit("sem/p", AcquireOptions.builder().build())).reason());
        assertEquals(0, calls("OpenSession"), "a refused acquire sent something");
        Permit pa = a.acquirePermit("sem/p", opts());
        Permit nested = a.acquirePermit("sem/p", opts());
        assertEquals(pa.permit(), nested.permit());
        assertEquals(pa.token(), nested.token());
        assertEquals(1, calls("Acquire"), "the nested acquire was sent");
        Permit pb = b.acquirePermit("sem/p", opts());
        Permit pc = c.tryAcquirePermit("sem/p", opts()).orElseThrow();
        assertEquals(Set.of(0, 1, 2), Set.of(pa.permit(), pb.permit(), pc.permit()));
        assertEquals(3, new HashSet<>(List.of(pa.token(), pb.token(), pc.token())).size(), "tokens shared");
        assertTrue(d.tryAcquirePermit("sem/p", opts()).isEmpty(), "a fourth holder");
        LockException held = assertThrows(LockException.class, () -> d.acquirePermit("sem/p",
                AcquireOptions.builder().onFence(() -> { }).timeout(Duration.ofMillis(300)).build()));
        assertTrue(held.is(Reason.HELD) || held.is(Reason.TIMED_OUT), held.toString());

        nested.release();
        nested.release(); // a second release of one Permit does nothing
        assertEquals(0, calls("Release"), "the nested release reached the service");
        assertEquals(3, server.permitHolders("sem/p"));
        pa.release();
        assertEquals(1, calls("Release"));
        assertEquals(2, server.permitHolders("sem/p"));
        Permit pd = d.tryAcquirePermit("sem/p", opts()).orElseThrow();
        assertEquals(pa.permit(), pd.permit(), "the freed permit");
        assertTrue(Long.compareUnsigned(pd.token(), pa.token()) > 0, "a greater token");
        for (Permit p : List.of(pb, pc, pd)) {
            p.release();
        }
        assertEquals(0, server.permitHolders("sem/p"));
        assertTrue(server.modes.stream().allMatch(m -> m == HoldMode.HOLD_MODE_PERMIT), server.modes.toString());

        assertEquals(Reason.MALFORMED_REQUEST,
                assertThrows(LockException.class, () -> a.acquirePermit("pay/x", opts())).reason());
        assertEquals(Reason.MALFORMED_REQUEST,
                assertThrows(LockException.class, () -> a.acquire("sem/p", opts())).reason());
        String shown = pd.toString();
        assertFalse(shown.contains(Long.toUnsignedString(pd.token())) || shown.contains(Long.toString(pd.token())), shown);
        assertTrue(shown.contains("permit: " + pd.permit()), shown);
    }

    /**
     * A fenced permit runs every nested onFence, each release is FENCED, and the next acquire
     * is a new grant on a new session, not a re-entry of the dead one.
     */
    @Test
    void aFencedPermitIsNotReentered() throws Exception {
        LockClient c = client();
        AtomicInteger fenced = new AtomicInteger();
        Permit outer = c.acquirePermit("sem/f", opts(fenced::incrementAndGet));
        Permit inner = c.acquirePermit("sem/f", opts(fenced::incrementAndGet));
        server.keepAliveFails = true;
        await(() -> fenced.get() == 2, "fenced " + fenced.get());
        assertTrue(outer.fenced());
        assertFalse(outer.canStart());
        assertEquals(Reason.FENCED, assertThrows(LockException.class, inner::release).reason());
        server.keepAliveFails = false;
        Permit next = c.acquirePermit("sem/f", opts());
        assertNotEquals(outer.token(), next.token());
        assertEquals(2, calls("OpenSession"), "a new session");
        assertEquals(Reason.FENCED, assertThrows(LockException.class, outer::release).reason());
        next.release();
    }

    /**
     * A caller that gives up (its future cancelled) while the service hands it a permit: the
     * permit is reclaimed and released in the background, not left held for the session's life.
     */
    @Test
    void aPermitGrantedAfterTheCallerGaveUpIsReleased() throws Exception {
        LockClient c = client();
        server.lateGrant = true;
        CompletableFuture<Permit> f = c.acquirePermitAsync("sem/late", AcquireOptions.onFence(() -> { }));
        await(() -> server.permitHolders("sem/late") == 1, "never granted");
        f.cancel(true);
        await(() -> server.permitHolders("sem/late") == 0 && calls("Release") == 1,
                "the lost grant is still held: " + server.permitHolders("sem/late"));
    }

    /**
     * A permit's grant, a refusal, its release and a fenced permit are recorded as any hold's,
     * with exactly the attributes class and outcome; a nested acquire records nothing.
     */
    @Test
    void permitMetrics() throws Exception {
        InMemoryMetricReader reader = InMemoryMetricReader.create();
        try (SdkMeterProvider provider = SdkMeterProvider.builder().registerMetricReader(reader).build()) {
            Set<String> secrets = new HashSet<>(Set.of("sem/m"));
            CountDownLatch fenced = new CountDownLatch(1);
            List<Permit> held = new ArrayList<>();
            List<LockClient> cs = new ArrayList<>();
            for (int i = 0; i < 4; i++) {
                cs.add(client(LockClient.builder(server.endpoint()).meshSidecar().meterProvider(provider)));
            }
            for (LockClient c : cs.subList(0, 3)) {
                Permit p = c.acquirePermit("sem/m", opts(fenced::countDown));
                held.add(p);
                secrets.add(Long.toUnsignedString(p.token()));
                secrets.add(Long.toString(p.token()));
                secrets.add(c.instance());
            }
            Permit nested = cs.get(0).acquirePermit("sem/m", opts());
            assertTrue(cs.get(3).tryAcquirePermit("sem/m", opts()).isEmpty());
            nested.release();
            held.get(0).release();
            held.get(1).release();
            server.keepAliveFails = true;
            assertTrue(fenced.await(6, TimeUnit.SECONDS), "onFence did not run");

            Map<String, Map<String, Long>> got = new TreeMap<>();
            for (MetricData m : reader.collectAllMetrics()) {
                Map<String, Long> points = new TreeMap<>();
                m.getData().getPoints().forEach(p -> {
                    Set<String> keys = new TreeSet<>();
                    p.getAttributes().forEach((k, v) -> {
                        keys.add(k.getKey());
                        assertFalse(secrets.contains(String.valueOf(v)), m.getName() + " carries a key, token or instance");
                    });
                    assertEquals(m.getName().equals(Metrics.LOST) ? Set.of("class") : Set.of("class", "outcome"), keys);
                    long n = p instanceof HistogramPointData ? ((HistogramPointData) p).getCount()
                            : ((LongPointData) p).getValue();
                    points.put(p.getAttributes().get(Metrics.CLASS) + "/" + p.getAttributes().get(Metrics.OUTCOME), n);
                });
                got.put(m.getName(), points);
            }
            assertEquals(Map.of("fast/granted", 3L, "fast/held", 1L), got.get(Metrics.WAIT));
            assertEquals(Map.of("fast/released", 2L, "fast/fenced", 1L), got.get(Metrics.HOLD));
            assertEquals(Map.of("fast/null", 1L), got.get(Metrics.LOST));
        }
    }
}
