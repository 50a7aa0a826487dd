package io.github.fencedlock.lock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.fencedlock.lock.spiffe.workload.Workload.X509SVIDResponse;
import com.google.protobuf.ByteString;
import io.grpc.netty.shaded.io.grpc.netty.GrpcSslContexts;
import io.grpc.netty.shaded.io.netty.channel.epoll.Epoll;
import io.grpc.netty.shaded.io.netty.handler.ssl.ClientAuth;
import io.grpc.netty.shaded.io.netty.handler.ssl.SslContext;
import io.grpc.netty.shaded.io.netty.handler.ssl.SslContextBuilder;
import java.nio.file.Path;
import java.security.cert.X509Certificate;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * WorkloadApiSource against FakeWorkloadApi on a real unix socket: the first SVID, a
 * rotation, a restarted agent, the failures connect reports; and a LockClient over TLS
 * (FakeServer as the edge) that presents a rotated SVID on its next call, without a failed
 * one, while a hold opened before the rotation lives on.
 */
class WorkloadApiSourceTest {
    static final String TD = "spiffe://test.lock.local";
    static final String ME = TD + "/ns/pay/sa/ledger";
    static final String EDGE = TD + "/ns/edge/sa/envoy";

    @TempDir
    Path dir;
    private TestPki pki;
    private FakeWorkloadApi api;

    /** How long a condition may take to become true: LOCK_TEST_PATIENCE_MS, default 10 s. */
    static Duration patience() {
        String v = System.getenv("LOCK_TEST_PATIENCE_MS");
        return Duration.ofMillis(v == null || v.isEmpty() ? 10_000 : Long.parseLong(v));
    }

    /** Waits until cond holds, failing with what after {@link #patience()}. */
    static void eventually(String what, BooleanSupplier cond) throws InterruptedException {
        long end = System.nanoTime() + patience().toNanos();
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > end) {
                throw new AssertionError("not within " + patience().toMillis() + " ms: " + what);
            }
            Thread.sleep(20);
        }
    }

    @BeforeEach
    void start() throws Exception {
        Assumptions.assumeTrue(Epoll.isAvailable(), "no native epoll here: " + Epoll.unavailabilityCause());
        pki = new TestPki("test-ca");
    }

    @AfterEach
    void stop() throws Exception {
        if (api != null) {
            api.close();
        }
    }

    private X509SVIDResponse svid(TestPki.Issued s) throws Exception {
        return FakeWorkloadApi.answer(ME, s, pki.ca);
    }

    private FakeWorkloadApi serve(X509SVIDResponse first) throws Exception {
        api = new FakeWorkloadApi(dir.resolve("agent.sock"), first);
        return api;
    }

    @Test
    void theFirstSvidThenEveryRotationIsTaken() throws Exception {
        TestPki.Issued one = pki.svid(ME, Duration.ofMinutes(5));
        TestPki.Issued two = pki.svid(ME, Duration.ofMinutes(5));
        serve(svid(one));
        try (WorkloadApiSource s = WorkloadApiSource.connect(api.endpoint())) {
            assertEquals(List.of("true"), api.headers, "the security header on the call");
            assertEquals(ME, s.svid().spiffeId());
            assertEquals(one.cert, s.svid().leaf());
            assertEquals(one.key, s.svid().privateKey());
            assertEquals(List.of(pki.ca), s.bundle());
            assertEquals(1, s.updates());
            assertFalse(s.svid().toString().contains(one.key.toString()));

            AtomicInteger told = new AtomicInteger();
            AutoCloseable sub = s.onUpdate(told::incrementAndGet);
            api.push(svid(two));
            eventually("the rotation", () -> s.updates() == 2);
            assertEquals(two.cert, s.svid().leaf());
            assertEquals(two.key, s.svid().privateKey());
            assertEquals(1, told.get());
            // The same SVID again (an agent resending it) is no rotation.
            api.push(svid(two));
            Thread.sleep(200);
            assertEquals(2, s.updates());
            sub.close();
            api.push(svid(one));
            eventually("the third", () -> s.updates() == 3);
            assertEquals(1, told.get(), "an unsubscribed listener is not told");
            assertEquals(1, api.openStreams(), "one stream, kept open");
        }
        eventually("the stream ends with the source", () -> api.openStreams() == 0);
    }

    @Test
    void aRestartedAgentIsReconnectedToWithTheLastSvidKeptMeanwhile() throws Exception {
        TestPki.Issued one = pki.svid(ME, Duration.ofMinutes(5));
        TestPki.Issued two = pki.svid(ME, Duration.ofMinutes(5));
        serve(svid(one));
        try (WorkloadApiSource s = WorkloadApiSource.connect("unix:" + api.socket)) {
            api.stop();
            Thread.sleep(300);
            assertEquals(one.cert, s.svid().leaf(), "the last SVID stays while the agent is away");
            api.push(svid(two)); // the restarted agent's current SVID
            api.start();
            eventually("the SVID of the restarted agent", () -> s.updates() == 2);
            assertEquals(two.cert, s.svid().leaf());
            assertTrue(api.headers.size() >= 2, api.headers.toString());
        }
    }

    @Test
    void connectFailsWithTheLastErrorWhenNoSvidArrives() throws Exception {
        String nowhere = "unix://" + dir.resolve("none.sock");
        LockException e = assertThrows(LockException.class,
                () -> WorkloadApiSource.connect(nowhere, Duration.ofMillis(500)));
        assertEquals(Reason.UNAUTHENTICATED, e.reason());
        assertTrue(e.getMessage().contains(nowhere) && e.getMessage().contains("UNAVAILABLE"), e.getMessage());

        // An answer whose certificate is not the SPIFFE ID it names is not taken.
        TestPki.Issued other = pki.svid(TD + "/ns/orders/sa/x", Duration.ofMinutes(5));
        serve(FakeWorkloadApi.answer(ME, other, pki.ca));
        e = assertThrows(LockException.class, () -> WorkloadApiSource.connect(api.endpoint(), Duration.ofMillis(500)));
        assertTrue(e.getMessage().contains("names [" + TD + "/ns/orders/sa/x]"), e.getMessage());
    }

    @Test
    void answersAreCheckedBeforeTheyAreUsed() throws Exception {
        TestPki.Issued one = pki.svid(ME, Duration.ofMinutes(5));
        X509SVIDResponse good = svid(one);
        SvidMaterial m = WorkloadApiSource.parse(good, 7, "here");
        assertEquals(7, m.generation);
        assertEquals(ME, m.svid.spiffeId());
        // The chain is DER certificates concatenated, leaf first.
        TestPki.Issued inter = pki.svid(TD + "/intermediate", Duration.ofMinutes(5));
        X509SVIDResponse chained = good.toBuilder().setSvids(0, good.getSvids(0).toBuilder()
                .setX509Svid(ByteString.copyFrom(TestPki.der(one.cert, inter.cert)))).build();
        assertEquals(List.of(one.cert, inter.cert), WorkloadApiSource.parse(chained, 1, "here").svid.chain());

        Map<String, X509SVIDResponse> bad = Map.of(
                "carries no SVID", X509SVIDResponse.getDefaultInstance(),
                "not an EC, RSA or Ed25519", good.toBuilder().setSvids(0, good.getSvids(0).toBuilder()
                        .setX509SvidKey(ByteString.copyFromUtf8("not a key"))).build(),
                "carries no certificate", good.toBuilder().setSvids(0, good.getSvids(0).toBuilder()
                        .setX509Svid(ByteString.EMPTY)).build(),
                "no bundle certificate", good.toBuilder().setSvids(0, good.getSvids(0).toBuilder()
                        .setBundle(ByteString.EMPTY)).build(),
                "names [" + ME + "], not", good.toBuilder().setSvids(0, good.getSvids(0).toBuilder()
                        .setSpiffeId(TD + "/someone-else")).build());
        for (Map.Entry<String, X509SVIDResponse> c : bad.entrySet()) {
            LockException e = assertThrows(LockException.class, () -> WorkloadApiSource.parse(c.getValue(), 1, "here"),
                    c.getKey());
            assertEquals(Reason.UNAUTHENTICATED, e.reason());
            assertTrue(e.getMessage().contains(c.getKey()), c.getKey() + ": " + e.getMessage());
        }
    }

    @Test
    void addressesFollowTheWorkloadEndpointRules() {
        assertEquals("/run/spire/agent.sock", WorkloadApiSource.socketPath("unix:///run/spire/agent.sock"));
        assertEquals("/run/spire/agent.sock", WorkloadApiSource.socketPath("unix:/run/spire/agent.sock"));
        for (String bad : new String[] {null, "", "/run/agent.sock", "unix:agent.sock", "unix://host/agent.sock",
                "unix:///", "unix:///a.sock?x=1", "unix:///a.sock#f", "http://127.0.0.1:1", "unix:"}) {
            assertThrows(IllegalArgumentException.class, () -> WorkloadApiSource.socketPath(bad), String.valueOf(bad));
        }
        IllegalArgumentException tcp = assertThrows(IllegalArgumentException.class,
                () -> WorkloadApiSource.socketPath("tcp://127.0.0.1:8081"));
        assertTrue(tcp.getMessage().contains("tcp:// is not supported"), tcp.getMessage());
        IllegalArgumentException none = assertThrows(IllegalArgumentException.class,
                () -> WorkloadApiSource.socketPath(null));
        assertTrue(none.getMessage().contains("SPIFFE_ENDPOINT_SOCKET"), none.getMessage());
    }

    @Test
    void withoutNativeEpollTheErrorSaysWhatIsMissing() {
        WorkloadApiSource.requireEpoll(true, null);
        LockException e = assertThrows(LockException.class,
                () -> WorkloadApiSource.requireEpoll(false, new UnsatisfiedLinkError("no libnetty_transport_native_epoll")));
        assertTrue(e.getMessage().contains("native epoll") && e.getMessage().contains("Linux x86_64 and aarch64")
                && e.getMessage().contains("no libnetty_transport_native_epoll") && e.getMessage().contains("svidFiles"),
                e.getMessage());
    }

    @Test
    void aClosedSourceRefusesAndTheBuilderTakesOneCredential() throws Exception {
        serve(svid(pki.svid(ME, Duration.ofMinutes(5))));
        WorkloadApiSource s = WorkloadApiSource.connect(api.endpoint());
        LockClient.Builder both = LockClient.builder("https://127.0.0.1:1").serverId(EDGE).workloadApi(s)
                .svidFiles(dir.resolve("a"), dir.resolve("b"), dir.resolve("c"));
        assertThrows(IllegalArgumentException.class, both::build);
        assertThrows(IllegalArgumentException.class,
                () -> LockClient.builder("http://127.0.0.1:1").meshSidecar().workloadApi(s).build());
        assertThrows(IllegalArgumentException.class,
                () -> LockClient.builder("https://127.0.0.1:1").workloadApi(s).build(), "no serverId");
        s.close();
        s.close();
        assertEquals(Reason.CLOSED, assertThrows(LockException.class, s::svid).reason());
        assertEquals(Reason.CLOSED, assertThrows(LockException.class,
                () -> LockClient.builder("https://127.0.0.1:1").serverId(EDGE).workloadApi(s).build()).reason());
    }

    @Test
    void aClientPresentsTheRotatedSvidOnItsNextCallWithoutAFailedOne() throws Exception {
        TestPki.Issued edge = pki.svid(EDGE, Duration.ofMinutes(5));
        TestPki.Issued one = pki.svid(ME, Duration.ofMinutes(5));
        TestPki.Issued two = pki.svid(ME, Duration.ofMinutes(5));
        SslContext tls = GrpcSslContexts.configure(SslContextBuilder.forServer(edge.key, edge.cert))
                .trustManager(pki.ca)
                .clientAuth(ClientAuth.REQUIRE)
                .build();
        serve(svid(one));
        try (FakeServer server = new FakeServer(tls);
             WorkloadApiSource s = WorkloadApiSource.connect(api.endpoint());
             LockClient c = LockClient.builder(server.endpoint()).workloadApi(s).serverId(EDGE).build()) {
            AcquireOptions opts = AcquireOptions.builder().onFence(() -> { }).timeout(Duration.ofSeconds(5)).build();
            Hold held = c.acquire("pay/held", opts);
            c.acquire("pay/a", opts).release();
            assertEquals(one.cert, lastPeer(server));
            assertEquals(one.cert, c.presentedLeaf());

            api.push(svid(two));
            eventually("the rotation", () -> s.updates() == 2);
            c.acquire("pay/b", opts).release();
            assertEquals(two.cert, lastPeer(server), "the call after the rotation presents the new SVID");
            assertEquals(two.cert, c.presentedLeaf());

            // The hold's session keeps renewing on the connection it opened (TTL 3 s).
            long renewals = server.keepalives.get();
            eventually("a renewal after the rotation", () -> server.keepalives.get() > renewals);
            assertTrue(held.canStart(), "the hold lived through the rotation");
            held.release();
            assertEquals(0, c.holdCount("pay/held"));
        }
    }

    /** The client leaf of the server's last call. */
    private static X509Certificate lastPeer(FakeServer server) {
        List<Map.Entry<String, X509Certificate>> p = server.peers;
        return p.get(p.size() - 1).getValue();
    }

    /** The edge's SPIFFE ID is checked with Workload API credentials as with files. */
    @Test
    void theEdgeIsStillAuthorisedByItsSpiffeId() throws Exception {
        TestPki.Issued edge = pki.svid(TD + "/ns/edge/sa/not-the-edge", Duration.ofMinutes(5));
        SslContext tls = GrpcSslContexts.configure(SslContextBuilder.forServer(edge.key, edge.cert))
                .trustManager(pki.ca)
                .clientAuth(ClientAuth.REQUIRE)
                .build();
        serve(svid(pki.svid(ME, Duration.ofMinutes(5))));
        try (FakeServer server = new FakeServer(tls);
             WorkloadApiSource s = WorkloadApiSource.connect(api.endpoint());
             LockClient c = LockClient.builder(server.endpoint()).workloadApi(s).serverId(EDGE).build()) {
            LockException e = assertThrows(LockException.class, () -> c.tryAcquire("pay/x",
                    AcquireOptions.builder().onFence(() -> { }).timeout(Duration.ofSeconds(3)).build()));
            assertTrue(server.calls.isEmpty(), server.calls.toString());
            StringBuilder chain = new StringBuilder();
            for (Throwable t = e; t != null; t = t.getCause()) {
                chain.append(t).append('\n');
            }
            assertTrue(chain.toString().contains("is not the expected " + EDGE),
                    "the handshake was not refused for the edge's SPIFFE ID:\n" + chain);
        }
    }
}
