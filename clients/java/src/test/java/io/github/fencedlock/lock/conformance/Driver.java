package io.github.fencedlock.lock.conformance;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import io.github.fencedlock.lock.AcquireOptions;
import io.github.fencedlock.lock.CampaignOptions;
import io.github.fencedlock.lock.HeldSet;
import io.github.fencedlock.lock.Hold;
import io.github.fencedlock.lock.Leadership;
import io.github.fencedlock.lock.LockClient;
import io.github.fencedlock.lock.LockException;
import io.github.fencedlock.lock.Observation;
import io.github.fencedlock.lock.Observed;
import io.github.fencedlock.lock.Reason;
import io.github.fencedlock.lock.SharedHold;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

/**
 * The Java client's conformance driver (clients/conformance/README.md): commands as JSON
 * lines on stdin, answers and events as JSON lines on stdout, each written whole. Every
 * command runs on its own thread, so an acquire that waits never stops the next command. It
 * holds no rule of its own: each op is one call of the client's public API, and every
 * {@code reason} comes from the client's typed error ({@link LockException#reason()}).
 *
 * <p>Started by the conductor as {@code java -cp target/test-classes:target/classes:$(cat
 * target/classpath.txt) io.github.fencedlock.lock.conformance.Driver}, with LOCK_ENDPOINT,
 * LOCK_SVID, LOCK_SVID_KEY, LOCK_CA, LOCK_SERVER_ID (and LOCK_INSTANCE, which the client
 * reads itself) in its environment.
 */
public final class Driver {
    private static final Gson GSON = new GsonBuilder().disableHtmlEscaping().serializeNulls().create();

    /** Makes the client object of a {@code client} op: instance null means the client's own rule. */
    @FunctionalInterface
    public interface ClientFactory {
        LockClient make(String instance);
    }

    /** A refusal the driver answers itself: an unusable command (DRIVER), or a typed empty answer. */
    private static final class Refusal extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final String reason;

        Refusal(String reason, String message) {
            super(message);
            this.reason = reason;
        }
    }

    /** What the ops on a hold need, whatever kind of hold it is. */
    private record Held(long token, Runnable release, BooleanSupplier canStart, BooleanSupplier fenced,
                        Supplier<Duration> remaining) {
        static Held of(Hold h) {
            return new Held(h.token(), h::release, h::canStart, h::fenced, h::remainingTtl);
        }

        static Held of(SharedHold h) {
            return new Held(h.token(), h::release, h::canStart, h::fenced, h::remainingTtl);
        }

        static Held of(HeldSet h) {
            return new Held(h.token(), h::release, h::canStart, h::fenced, h::remainingTtl);
        }

        static Held of(Leadership l) {
            return new Held(l.term(), l::resign, l::canLead, l::fenced, l::remainingTtl);
        }
    }

    private final PrintStream out;
    private final ClientFactory factory;
    private final Runnable exit;
    private final Map<String, LockClient> clients = new ConcurrentHashMap<>();
    private final Map<String, Held> holds = new ConcurrentHashMap<>();
    private final ExecutorService commands = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "driver-command");
        t.setDaemon(true);
        return t;
    });

    /**
     * A driver writing to out, making clients with factory; exit runs after the
     * {@code exit} op's answer is written.
     */
    public Driver(PrintStream out, ClientFactory factory, Runnable exit) {
        this.out = out;
        this.factory = factory;
        this.exit = exit;
    }

    public static void main(String[] args) throws IOException {
        PrintStream protocol = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        // Only the driver writes protocol lines: anything else that prints goes to stderr.
        System.setOut(System.err);
        Driver d = new Driver(protocol, Driver::fromEnvironment, () -> System.exit(0));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            d.submit(line);
        }
        // stdin closed: the conductor is gone.
        System.exit(0);
    }

    /** A client from the conductor's environment: SVID files, the edge's SPIFFE ID. */
    static LockClient fromEnvironment(String instance) {
        String endpoint = env("LOCK_ENDPOINT");
        if (!endpoint.contains("://")) {
            endpoint = "https://" + endpoint; // the README's host:port
        }
        LockClient.Builder b = LockClient.builder(endpoint)
                .svidFiles(Path.of(env("LOCK_SVID")), Path.of(env("LOCK_SVID_KEY")), Path.of(env("LOCK_CA")))
                .serverId(env("LOCK_SERVER_ID"));
        if (instance != null) {
            b.instance(instance);
        }
        return b.build();
    }

    private static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            throw new Refusal("DRIVER", name + " is not set");
        }
        return v;
    }

    /** Runs one command line on a thread of its own. */
    public void submit(String line) {
        if (line.isBlank()) {
            return;
        }
        JsonObject cmd;
        try {
            cmd = JsonParser.parseString(line).getAsJsonObject();
        } catch (JsonParseException | IllegalStateException e) {
            JsonObject a = new JsonObject();
            a.add("id", null);
            a.addProperty("ok", false);
            a.addProperty("reason", "DRIVER");
            a.addProperty("message", "not a JSON object: " + e.getMessage());
            write(a);
            return;
        }
        commands.execute(() -> run(cmd));
    }

    private void run(JsonObject cmd) {
        JsonElement id = cmd.get("id");
        JsonObject answer = new JsonObject();
        answer.add("id", id);
        try {
            JsonObject fields = perform(cmd);
            answer.addProperty("ok", true);
            fields.entrySet().forEach(e -> answer.add(e.getKey(), e.getValue()));
        } catch (LockException e) {
            answer.addProperty("ok", false);
            answer.addProperty("reason", reasonOf(e));
            answer.addProperty("message", e.getMessage()); // never a token: the client formats none
        } catch (Refusal e) {
            answer.addProperty("ok", false);
            answer.addProperty("reason", e.reason);
            answer.addProperty("message", e.getMessage());
        } catch (RuntimeException e) {
            // Not a refusal of the client's (a builder's argument check, a driver bug).
            answer.addProperty("ok", false);
            answer.addProperty("reason", "DRIVER");
            answer.addProperty("message", e.toString());
        }
        write(answer);
        if ("exit".equals(op(cmd))) {
            exit.run();
        }
    }

    /**
     * The protocol's reason for a client error, from its type: the lock.v1 reason it carries;
     * the client's own refusals (FENCED, CLOSED, ON_FENCE_REQUIRED) by name; UNAVAILABLE for
     * an error without a lock.v1 reason (a transport failure, the caller's timeout).
     */
    static String reasonOf(LockException e) {
        Reason r = e.reason();
        if (r.isWireReason()) {
            return r.name();
        }
        switch (r) {
            case FENCED:
            case CLOSED:
            case ON_FENCE_REQUIRED:
                return r.name();
            case UNKNOWN:
                // A lock.v1 reason newer than this client: named as it came.
                return e.wireReason().isEmpty() ? "UNAVAILABLE" : e.wireReason();
            default:
                return "UNAVAILABLE";
        }
    }

    private static String op(JsonObject cmd) {
        JsonElement op = cmd.get("op");
        return op != null && op.isJsonPrimitive() ? op.getAsString() : "";
    }

    private JsonObject perform(JsonObject cmd) {
        JsonObject r = new JsonObject();
        switch (op(cmd)) {
            case "client": {
                String name = str(cmd, "client");
                JsonElement inst = cmd.get("instance");
                LockClient c = factory.make(inst == null || inst.isJsonNull() ? null : inst.getAsString());
                if (clients.putIfAbsent(name, c) != null) {
                    c.close();
                    throw new Refusal("DRIVER", "client \"" + name + "\" exists already");
                }
                r.addProperty("instance", c.instance());
                return r;
            }
            case "acquire": {
                String hold = str(cmd, "hold");
                LockClient c = client(cmd);
                String key = str(cmd, "key");
                long wait = waitMs(cmd);
                AcquireOptions o = options(hold, wait);
                Hold h = wait > 0 ? c.acquire(key, o) : orHeld(c.tryAcquire(key, o));
                return granted(r, hold, Held.of(h));
            }
            case "acquire_shared": {
                String hold = str(cmd, "hold");
                LockClient c = client(cmd);
                String key = str(cmd, "key");
                long wait = waitMs(cmd);
                AcquireOptions o = options(hold, wait);
                SharedHold h = wait > 0 ? c.acquireShared(key, o) : orHeld(c.tryAcquireShared(key, o));
                return granted(r, hold, Held.of(h));
            }
            case "acquire_all": {
                String hold = str(cmd, "hold");
                LockClient c = client(cmd);
                List<String> keys = strings(cmd, "keys");
                long wait = waitMs(cmd);
                AcquireOptions o = options(hold, wait);
                HeldSet h = wait > 0 ? c.acquireAll(keys, o) : orHeld(c.tryAcquireAll(keys, o));
                return granted(r, hold, Held.of(h));
            }
            case "campaign": {
                String hold = str(cmd, "hold");
                LockClient c = client(cmd);
                String key = str(cmd, "key");
                // A campaign waits to lead (it has no try form): without wait_ms, as long as it takes.
                long wait = waitMs(cmd);
                Leadership l = c.campaign(key, CampaignOptions.builder()
                        .onFence(() -> event("fenced", "hold", hold))
                        .timeout(wait > 0 ? Duration.ofMillis(wait) : null)
                        .build());
                return granted(r, hold, Held.of(l));
            }
            case "release":
                held(cmd).release.run();
                return r;
            case "state": {
                Held h = held(cmd);
                boolean fenced = h.fenced.getAsBoolean();
                r.addProperty("can_start", h.canStart.getAsBoolean());
                r.addProperty("fenced", fenced);
                r.addProperty("remaining_ms", fenced ? 0 : h.remaining.get().toMillis());
                return r;
            }
            case "observe":
                observe(cmd);
                return r;
            case "shutdown":
                client(cmd).close();
                return r;
            case "exit":
                return r;
            default:
                throw new Refusal("DRIVER", "unknown op \"" + op(cmd) + "\"");
        }
    }

    /**
     * Options whose fence callback writes the fenced event of hold, waiting up to waitMs. With
     * no wait the ops use the try forms (one attempt, a wait of 0 sent), whose calls the
     * client bounds itself: no timeout.
     */
    private AcquireOptions options(String hold, long waitMs) {
        return AcquireOptions.builder()
                .onFence(() -> event("fenced", "hold", hold))
                .timeout(waitMs > 0 ? Duration.ofMillis(waitMs) : null)
                .build();
    }

    /** A try call's empty answer: the client's documented HELD (the key is held). */
    private static <T> T orHeld(Optional<T> h) {
        return h.orElseThrow(() -> new Refusal(Reason.HELD.name(), Reason.HELD.description()));
    }

    private JsonObject granted(JsonObject r, String hold, Held h) {
        holds.put(hold, h);
        r.addProperty("token", Long.toUnsignedString(h.token));
        return r;
    }

    /**
     * Observes until the observation fails: the first change (the stream is open) is written
     * before the answer, each later one as it comes, and a failure after the answer as an
     * observe_error event. The client resumes broken streams itself.
     */
    private void observe(JsonObject cmd) {
        String name = str(cmd, "obs");
        LockClient c = client(cmd);
        Observation o = c.observe(str(cmd, "key"), null);
        Observed first = o.next(); // a refusal here is the command's answer
        observed(name, first);
        commands.execute(() -> {
            try {
                while (true) {
                    observed(name, o.next());
                }
            } catch (LockException e) {
                JsonObject ev = new JsonObject();
                ev.addProperty("event", "observe_error");
                ev.addProperty("obs", name);
                ev.addProperty("reason", reasonOf(e));
                ev.addProperty("message", e.getMessage());
                write(ev);
            }
        });
    }

    private void observed(String obs, Observed ev) {
        JsonObject e = new JsonObject();
        e.addProperty("event", "observed");
        e.addProperty("obs", obs);
        e.addProperty("revision", Long.toString(ev.revision()));
        e.addProperty("held", ev.held());
        e.addProperty("kind", ev.change().toString()); // the lower-case name
        write(e);
    }

    private void event(String event, String field, String value) {
        JsonObject e = new JsonObject();
        e.addProperty("event", event);
        e.addProperty(field, value);
        write(e);
    }

    /** One line, whole: answers and events from many threads never interleave. */
    private void write(JsonObject o) {
        String line = GSON.toJson(o);
        synchronized (out) {
            out.print(line);
            out.print('\n');
            out.flush();
        }
    }

    private LockClient client(JsonObject cmd) {
        String name = str(cmd, "client");
        LockClient c = clients.get(name);
        if (c == null) {
            throw new Refusal("DRIVER", "no client \"" + name + "\"");
        }
        return c;
    }

    private Held held(JsonObject cmd) {
        String name = str(cmd, "hold");
        Held h = holds.get(name);
        if (h == null) {
            throw new Refusal("DRIVER", "no hold \"" + name + "\"");
        }
        return h;
    }

    private static String str(JsonObject cmd, String field) {
        JsonElement v = cmd.get(field);
        if (v == null || !v.isJsonPrimitive()) {
            throw new Refusal("DRIVER", "\"" + field + "\" is missing or not a string");
        }
        return v.getAsString();
    }

    private static List<String> strings(JsonObject cmd, String field) {
        JsonElement v = cmd.get(field);
        if (v == null || !v.isJsonArray()) {
            throw new Refusal("DRIVER", "\"" + field + "\" is missing or not a list");
        }
        JsonArray a = v.getAsJsonArray();
        List<String> out = new ArrayList<>(a.size());
        for (JsonElement e : a) {
            out.add(e.getAsString());
        }
        return out;
    }

    private static long waitMs(JsonObject cmd) {
        JsonElement v = cmd.get("wait_ms");
        if (v == null || v.isJsonNull()) {
            return 0;
        }
        try {
            long ms = v.getAsLong();
            if (ms < 0) {
                throw new Refusal("DRIVER", "\"wait_ms\" is negative");
            }
            return ms;
        } catch (NumberFormatException | UnsupportedOperationException | IllegalStateException e) {
            throw new Refusal("DRIVER", "\"wait_ms\" is not a number");
        }
    }
}
