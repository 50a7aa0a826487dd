package io.github.fencedlock.lock;

import io.opentelemetry.api.common.AttributeKey;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.metrics.MeterProvider;
import io.opentelemetry.api.trace.TracerProvider;
import io.opentelemetry.context.propagation.ContextPropagators;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.HistogramPointData;
import io.opentelemetry.sdk.metrics.data.LongPointData;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The client's metrics against FakeServer, read with the SDK's in-memory reader: waits
 * (granted, refused, cancelled), hold times (released, fenced, shutdown) and lost holds,
 * each with exactly the attributes class and outcome, never a key or a token.
 */
class MetricsTest {
    private FakeServer server;
    private InMemoryMetricReader reader;
    private SdkMeterProvider provider;
    /** Every key and token the test used: no attribute value may be one of them. */
    private final Set<String> secrets = new HashSet<>();

    @BeforeEach
    void start() throws Exception {
        server = new FakeServer();
        reader = InMemoryMetricReader.create();
        provider = SdkMeterProvider.builder().registerMetricReader(reader).build();
    }

    @AfterEach
    void stop() {
        provider.close();
        server.close();
    }

    private LockClient client() {
        return LockClient.builder(server.endpoint()).meshSidecar().meterProvider(provider).build();
    }

    private static AcquireOptions opts(Runnable onFence) {
        return AcquireOptions.builder().onFence(onFence).timeout(Duration.ofSeconds(5)).build();
    }

    private static AcquireOptions opts() {
        return opts(() -> { });
    }

    private String key(String k) {
        secrets.add(k);
        return k;
    }

    private void token(long t) {
        secrets.add(Long.toUnsignedString(t));
        secrets.add(Long.toString(t));
    }

    private MetricData metric(String name) {
        return reader.collectAllMetrics().stream().filter(m -> m.getName().equals(name)).findFirst()
                .orElseThrow(() -> new AssertionError("no metric " + name));
    }

    /** Each histogram point's count, by "class/outcome". */
    private Map<String, Long> counts(String name) {
        Map<String, Long> out = new java.util.TreeMap<>();
        for (HistogramPointData p : metric(name).getHistogramData().getPoints()) {
            out.put(label(p.getAttributes()), p.getCount());
        }
        return out;
    }

    private static String label(Attributes a) {
        return a.get(Metrics.CLASS) + "/" + a.get(Metrics.OUTCOME);
    }

    /** Polls until the wait histogram has a point for label (a cancel is recorded on the client's thread). */
    private void awaitWait(String label) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (!counts(Metrics.WAIT).containsKey(label)) {
            assertTrue(System.nanoTime() < until, "no wait recorded as " + label + ": " + counts(Metrics.WAIT));
            Thread.sleep(20);
        }
    }

    @Test
    void grantsRefusalsReleasesFencesAndShutdownsAreRecorded() throws Exception {
        String k = key("pay/metrics");
        try (LockClient a = client(); LockClient b = client()) {
            Hold outer = a.acquire(k, opts());
            token(outer.token());
            Hold nested = a.acquire(k, opts()); // re-entrant: no call, nothing recorded
            LockException held = assertThrows(LockException.class, () -> b.acquire(k,
                    AcquireOptions.builder().onFence(() -> { }).timeout(Duration.ofMillis(1000)).build()));
            assertEquals(Reason.HELD, held.reason());
            assertTrue(b.tryAcquire(k, opts()).isEmpty());
            assertEquals(Reason.NOT_GRANTED,
                    assertThrows(LockException.class, () -> a.acquire(key("archive/x"), opts())).reason());

            // A caller that gives up: its wait is cancelled.
            CompletableFuture<Hold> waiter = b.acquireAsync(k, AcquireOptions.builder().onFence(() -> { }).build());
            Thread.sleep(300);
            waiter.cancel(true);
            awaitWait("fast/cancelled");

            nested.release();
            outer.release();

            try (SharedHold r = a.acquireShared(key("pay/shared"), opts());
                 HeldSet set = a.acquireAll(List.of(key("pay/s2"), key("pay/s1")), opts());
                 Leadership l = a.campaign(key("slow/leader"), CampaignOptions.onFence(() -> { }))) {
                token(r.token());
                token(set.token());
                token(l.term());
            }
        }
        // AcquireAll's answer names no class, and the set ran on a session opened for another
        // key: its class is unknown. The campaign's WRONG_SESSION_TTL named slow/leader's.
        assertEquals(Map.of(
                "fast/granted", 2L,         // the exclusive acquire and the shared one
                "unknown/granted", 1L,      // the set
                "slow/granted", 1L,         // the campaign, once however many rounds
                "fast/held", 2L,            // acquire with a timeout, and tryAcquire
                "unknown/not_granted", 1L,  // no answer ever named archive/x's class
                "fast/cancelled", 1L),
                counts(Metrics.WAIT));
        assertEquals(Map.of("fast/released", 2L, "unknown/released", 1L, "slow/released", 1L),
                counts(Metrics.HOLD));

        // Shutdown: a client closed with a hold; then a hold fenced.
        LockClient c = client();
        token(c.acquire(key("slow/closed"), opts()).token());
        c.close();
        try (LockClient d = client()) {
            CountDownLatch fenced = new CountDownLatch(1);
            Hold h = d.acquire(key("pay/fenced"), opts(fenced::countDown));
            token(h.token());
            server.keepAliveFails = true;
            assertTrue(fenced.await(6, TimeUnit.SECONDS), "onFence did not run");
            assertEquals(Reason.FENCED, assertThrows(LockException.class, h::release).reason());
        }
        Map<String, Long> holds = counts(Metrics.HOLD);
        assertEquals(1L, holds.get("slow/shutdown"), holds.toString());
        assertEquals(1L, holds.get("fast/fenced"), holds.toString()); // once: the release after it adds nothing
        List<LongPointData> lost = new ArrayList<>(metric(Metrics.LOST).getLongSumData().getPoints());
        assertEquals(1, lost.size(), lost.toString());
        assertEquals(1L, lost.get(0).getValue());
        assertEquals("fast", lost.get(0).getAttributes().get(AttributeKey.stringKey("class")));
        assertEquals(1, lost.get(0).getAttributes().size(), "the lost counter is labelled by class only");

        Collection<MetricData> all = reader.collectAllMetrics();
        assertEquals(Set.of(Metrics.WAIT, Metrics.HOLD, Metrics.LOST),
                all.stream().map(MetricData::getName).collect(java.util.stream.Collectors.toSet()));
        for (MetricData m : all) {
            assertEquals(m.getName().equals(Metrics.LOST) ? "{hold}" : "s", m.getUnit(), m.getName());
            assertEquals(Metrics.SCOPE, m.getInstrumentationScopeInfo().getName());
            m.getData().getPoints().forEach(p -> {
                assertEquals(m.getName().equals(Metrics.LOST) ? Set.of("class") : Set.of("class", "outcome"),
                        p.getAttributes().asMap().keySet().stream().map(x -> x.getKey())
                                .collect(java.util.stream.Collectors.toSet()), m.getName());
                p.getAttributes().forEach((x, v) ->
                        assertFalse(secrets.contains(String.valueOf(v)), m.getName() + " carries a key or a token"));
            });
        }
    }

    @Test
    void theWaitOutcomeIsTheReasonInLowerCase() {
        assertEquals("held", Metrics.outcome(LockException.client(Reason.HELD, "")));
        assertEquals("no_quorum", Metrics.outcome(LockException.client(Reason.NO_QUORUM, "")));
        assertEquals("cancelled", Metrics.outcome(LockException.client(Reason.CANCELLED, "")));
        assertEquals("unavailable", Metrics.outcome(LockException.client(Reason.TIMED_OUT, "")));
        assertEquals("unavailable", Metrics.outcome(LockException.client(Reason.UNAVAILABLE, "")));
        assertEquals("unavailable", Metrics.outcome(new IllegalStateException("not a lock error")));
    }

    /**
     * Without a provider the client records into the global one only once the application has
     * set it, and never sets the global itself (that would make the application's set() fail).
     */
    @Test
    void theDefaultIsTheGlobalProviderOnceSet() {
        GlobalOpenTelemetry.resetForTest();
        try (LockClient c = LockClient.builder(server.endpoint()).meshSidecar().build()) {
            c.acquire("pay/global-before", opts()).release();
            assertFalse(GlobalOpenTelemetry.isSet(), "the client set the global OpenTelemetry");
            GlobalOpenTelemetry.set(new OpenTelemetry() {
                @Override
                public TracerProvider getTracerProvider() {
                    return TracerProvider.noop();
                }

                @Override
                public MeterProvider getMeterProvider() {
                    return provider;
                }

                @Override
                public ContextPropagators getPropagators() {
                    return ContextPropagators.noop();
                }
            });
            c.acquire("pay/global-after", opts()).release();
            assertEquals(Map.of("fast/granted", 1L), counts(Metrics.WAIT));
            assertEquals(Map.of("fast/released", 1L), counts(Metrics.HOLD));
        } finally {
            GlobalOpenTelemetry.resetForTest();
        }
    }

    @Test
    void aNoopProviderRecordsNothing() {
        try (LockClient c = LockClient.builder(server.endpoint()).meshSidecar()
                .meterProvider(MeterProvider.noop()).build()) {
            Hold h = c.acquire("pay/noop", opts());
            assertNotEquals(0, h.token());
            h.release();
        }
        assertTrue(reader.collectAllMetrics().isEmpty());
    }
}
