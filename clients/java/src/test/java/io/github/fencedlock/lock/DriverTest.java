package io.github.fencedlock.lock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.github.fencedlock.lock.conformance.Driver;
import io.grpc.Status;
import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import lock.v1.LockOuterClass.ObserveEvent;
import lock.v1.LockOuterClass.ObserveResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The conformance driver's plumbing against FakeServer: answers by id, tokens as decimal
 * strings, re-entrancy, state, the fenced event, observe events, and DRIVER for what it
 * cannot do. The scenarios themselves run against the real stack (integration/tests/conformance.rs).
 */
class DriverTest {
    private FakeServer server;
    private final BlockingQueue<JsonObject> lines = new LinkedBlockingQueue<>();
    private final CountDownLatch exited = new CountDownLatch(1);
    private Driver driver;
    private final List<JsonObject> seen = new ArrayList<>();

    @BeforeEach
    void start() throws Exception {
        server = new FakeServer();
        OutputStream sink = new OutputStream() {
            private final ByteArrayOutputStream line = new ByteArrayOutputStream();

            @Override
            public synchronized void write(int b) {
                if (b == '\n') {
                    lines.add(JsonParser.parseString(line.toString(StandardCharsets.UTF_8)).getAsJsonObject());
                    line.reset();
                } else {
                    line.write(b);
                }
            }
        };
        driver = new Driver(new PrintStream(sink, false, StandardCharsets.UTF_8),
                instance -> {
                    LockClient.Builder b = LockClient.builder(server.endpoint()).meshSidecar();
                    if (instance != null) {
                        b.instance(instance);
                    }
                    return b.build();
                },
                exited::countDown);
    }

    @AfterEach
    void stop() {
        server.close();
    }

    /** The next line that is the answer to id, or the event matching (events are kept in seen). */
    private JsonObject answer(int id) throws InterruptedException {
        for (JsonObject o : seen) {
            if (o.has("id") && !o.get("id").isJsonNull() && o.get("id").getAsInt() == id) {
                seen.remove(o);
                return o;
            }
        }
        while (true) {
            JsonObject o = lines.poll(10, TimeUnit.SECONDS);
            assertNotNull(o, "no answer to " + id);
            if (o.has("id") && !o.get("id").isJsonNull() && o.get("id").getAsInt() == id) {
                return o;
            }
            seen.add(o);
        }
    }

    private JsonObject send(int id, String json) throws InterruptedException {
        driver.submit("{\"id\":" + id + "," + json + "}");
        return answer(id);
    }

    private JsonObject event(String kind) throws InterruptedException {
        for (JsonObject o : seen) {
            if (o.has("event") && o.get("event").getAsString().equals(kind)) {
                seen.remove(o);
                return o;
            }
        }
        while (true) {
            JsonObject o = lines.poll(10, TimeUnit.SECONDS);
            assertNotNull(o, "no " + kind + " event");
            if (o.has("event") && o.get("event").getAsString().equals(kind)) {
                return o;
            }
            seen.add(o);
        }
    }

    @Test
    void acquireReenterStateReleaseAndShutdown() throws Exception {
        JsonObject c = send(1, "\"op\":\"client\",\"client\":\"a\",\"instance\":\"pod-1\"");
        assertTrue(c.get("ok").getAsBoolean(), c.toString());
        assertEquals("pod-1", c.get("instance").getAsString());
        assertTrue(send(2, "\"op\":\"client\",\"client\":\"b\"").get("ok").getAsBoolean());

        JsonObject h1 = send(3, "\"op\":\"acquire\",\"client\":\"a\",\"key\":\"pay/d\",\"hold\":\"h1\",\"wait_ms\":0");
        assertTrue(h1.get("ok").getAsBoolean(), h1.toString());
        String token = h1.get("token").getAsString();
        assertTrue(Long.parseUnsignedLong(token) != 0, token);
        JsonObject h2 = send(4, "\"op\":\"acquire\",\"client\":\"a\",\"key\":\"pay/d\",\"hold\":\"h2\",\"wait_ms\":1000");
        assertEquals(token, h2.get("token").getAsString(), "re-entry answers the same token");

        JsonObject refused = send(5, "\"op\":\"acquire\",\"client\":\"b\",\"key\":\"pay/d\",\"hold\":\"h3\",\"wait_ms\":0");
        assertFalse(refused.get("ok").getAsBoolean());
        assertEquals("HELD", refused.get("reason").getAsString());
        JsonObject notGranted = send(6, "\"op\":\"acquire\",\"client\":\"b\",\"key\":\"archive/x\",\"hold\":\"h4\",\"wait_ms\":500");
        assertEquals("NOT_GRANTED", notGranted.get("reason").getAsString());

        JsonObject st = send(7, "\"op\":\"state\",\"hold\":\"h1\"");
        assertTrue(st.get("can_start").getAsBoolean());
        assertFalse(st.get("fenced").getAsBoolean());
        long remaining = st.get("remaining_ms").getAsLong();
        assertTrue(remaining > 0 && remaining <= 3000, "remaining_ms " + remaining);

        // b queues behind a's two holds; both releases hand the key on.
        driver.submit("{\"id\":8,\"op\":\"acquire\",\"client\":\"b\",\"key\":\"pay/d\",\"hold\":\"h5\",\"wait_ms\":5000}");
        assertTrue(send(9, "\"op\":\"release\",\"hold\":\"h2\"").get("ok").getAsBoolean());
        assertTrue(send(10, "\"op\":\"release\",\"hold\":\"h1\"").get("ok").getAsBoolean());
        JsonObject later = answer(8);
        assertTrue(later.get("ok").getAsBoolean(), later.toString());
        assertTrue(Long.compareUnsigned(Long.parseUnsignedLong(later.get("token").getAsString()),
                Long.parseUnsignedLong(token)) > 0);

        JsonObject sh = send(11, "\"op\":\"acquire_shared\",\"client\":\"a\",\"key\":\"pay/r\",\"hold\":\"s1\",\"wait_ms\":0");
        assertTrue(sh.get("ok").getAsBoolean(), sh.toString());
        JsonObject set = send(12, "\"op\":\"acquire_all\",\"client\":\"a\",\"keys\":[\"pay/s1\",\"pay/s2\"],\"hold\":\"set\",\"wait_ms\":1000");
        assertTrue(set.get("ok").getAsBoolean(), set.toString());
        JsonObject lead = send(13, "\"op\":\"campaign\",\"client\":\"a\",\"key\":\"pay/lead\",\"hold\":\"l1\",\"wait_ms\":2000");
        assertTrue(lead.get("ok").getAsBoolean(), lead.toString());
        assertTrue(send(14, "\"op\":\"release\",\"hold\":\"l1\"").get("ok").getAsBoolean());

        assertTrue(send(15, "\"op\":\"shutdown\",\"client\":\"b\"").get("ok").getAsBoolean());
        assertFalse(server.held("pay/d"));
        JsonObject closed = send(16, "\"op\":\"acquire\",\"client\":\"b\",\"key\":\"pay/e\",\"hold\":\"h6\",\"wait_ms\":0");
        assertEquals("CLOSED", closed.get("reason").getAsString());

        assertTrue(send(17, "\"op\":\"exit\"").get("ok").getAsBoolean());
        assertTrue(exited.await(5, TimeUnit.SECONDS));
    }

    @Test
    void aFencedHoldWritesItsEvent() throws Exception {
        send(1, "\"op\":\"client\",\"client\":\"a\"");
        assertTrue(send(2, "\"op\":\"acquire\",\"client\":\"a\",\"key\":\"pay/f\",\"hold\":\"h1\",\"wait_ms\":0")
                .get("ok").getAsBoolean());
        server.keepAliveFails = true;
        assertEquals("h1", event("fenced").get("hold").getAsString());
        JsonObject st = send(3, "\"op\":\"state\",\"hold\":\"h1\"");
        assertTrue(st.get("fenced").getAsBoolean());
        assertFalse(st.get("can_start").getAsBoolean());
        assertEquals(0, st.get("remaining_ms").getAsLong());
        assertEquals("FENCED", send(4, "\"op\":\"release\",\"hold\":\"h1\"").get("reason").getAsString());
    }

    @Test
    void observeAnswersOnceOpenAndWritesEveryChange() throws Exception {
        server.observeScript = (call, r) -> call == 0
                ? new FakeServer.Script(List.of(
                        ObserveResponse.newBuilder().setEvent(ObserveEvent.OBSERVE_EVENT_CURRENT).setRevision(7).build(),
                        ObserveResponse.newBuilder().setEvent(ObserveEvent.OBSERVE_EVENT_GRANTED).setRevision(8)
                                .setHeld(true).build()), null)
                : new FakeServer.Script(List.of(), FakeServer.refusal(Status.Code.PERMISSION_DENIED, "NOT_GRANTED", Map.of()));
        send(1, "\"op\":\"client\",\"client\":\"a\"");
        assertTrue(send(2, "\"op\":\"observe\",\"client\":\"a\",\"key\":\"pay/o\",\"obs\":\"o1\"").get("ok").getAsBoolean());
        JsonObject first = event("observed");
        assertEquals("current", first.get("kind").getAsString());
        assertEquals("7", first.get("revision").getAsString());
        assertFalse(first.get("held").getAsBoolean());
        JsonObject second = event("observed");
        assertEquals("granted", second.get("kind").getAsString());
        assertTrue(second.get("held").getAsBoolean());
        // The stream ended; the client resumed it and was refused: an observe_error.
        JsonObject err = event("observe_error");
        assertEquals("o1", err.get("obs").getAsString());
        assertEquals("NOT_GRANTED", err.get("reason").getAsString());
    }

    @Test
    void whatTheDriverCannotDoIsDriver() throws Exception {
        assertEquals("DRIVER", send(1, "\"op\":\"fly\"").get("reason").getAsString());
        assertEquals("DRIVER", send(2, "\"op\":\"release\",\"hold\":\"nope\"").get("reason").getAsString());
        assertEquals("DRIVER", send(3, "\"op\":\"acquire\",\"client\":\"nope\",\"key\":\"pay/x\",\"hold\":\"h\"")
                .get("reason").getAsString());
        driver.submit("not json");
        JsonObject bad = lines.poll(10, TimeUnit.SECONDS);
        assertNotNull(bad);
        assertTrue(bad.get("id").isJsonNull());
        assertEquals("DRIVER", bad.get("reason").getAsString());
    }
}
