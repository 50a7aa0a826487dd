// The conformance driver (conformance/driver.mjs) against the fake service: every op of
// clients/conformance/README.md answers as the protocol says, commands run concurrently,
// reasons come from the typed errors, tokens travel as decimal strings. The conductor
// (integration/tests/conformance.rs) runs it against the real stack.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { startFake } from "./fake_server.mjs";

const fake = await startFake({ ttlSeconds: 3 });
const driverPath = fileURLToPath(new URL("../conformance/driver.mjs", import.meta.url));

/** A driver process: `send(cmd)` resolves with its answer; `event(pred)` with the first
 * event (seen or to come) that matches. */
function driver() {
  const child = spawn(process.execPath, [driverPath], {
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, LOCK_ENDPOINT: fake.endpoint },
  });
  let buf = "";
  let stderr = "";
  const answers = new Map();
  const events = [];
  const eventWaiters = [];
  child.stderr.on("data", (d) => (stderr += d));
  child.stdout.on("data", (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const msg = JSON.parse(buf.slice(0, i));
      buf = buf.slice(i + 1);
      if ("event" in msg) {
        events.push(msg);
        for (const w of [...eventWaiters]) if (w.pred(msg)) { eventWaiters.splice(eventWaiters.indexOf(w), 1); w.resolve(msg); }
      } else {
        answers.get(msg.id)?.(msg);
        answers.delete(msg.id);
      }
    }
  });
  let next = 1;
  const timeout = (what, ms = 10_000) =>
    new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms; stderr: ${stderr}`)), ms).unref());
  return {
    child,
    events,
    send(cmd) {
      const id = next++;
      const answered = new Promise((resolve) => answers.set(id, resolve));
      child.stdin.write(JSON.stringify({ id, ...cmd }) + "\n");
      return Promise.race([answered, timeout(cmd.op)]);
    },
    raw(line) {
      child.stdin.write(line + "\n");
    },
    event(pred) {
      const seen = events.find(pred);
      if (seen) return Promise.resolve(seen);
      return Promise.race([new Promise((resolve) => eventWaiters.push({ pred, resolve })), timeout("event")]);
    },
    exited: new Promise((r) => child.once("exit", (code) => r(code))),
  };
}

const drivers = [];
after(() => {
  for (const d of drivers) if (d.child.exitCode === null) d.child.kill("SIGKILL");
  fake.close();
});
const start = () => {
  const d = driver();
  drivers.push(d);
  return d;
};

test("driver: holds, re-entrancy, refusals, state, concurrency, observe, exit", async () => {
  const d = start();
  const a = await d.send({ op: "client", client: "a" });
  assert.equal(a.ok, true);
  assert.match(a.instance, /:\d+:\d+$/);
  const b = await d.send({ op: "client", client: "b", instance: "pod-x" });
  assert.deepEqual([b.ok, b.instance], [true, "pod-x"]);

  const obs = await d.send({ op: "observe", client: "b", key: "jobs/d", obs: "o1" });
  assert.equal(obs.ok, true);
  await d.event((e) => e.event === "observed" && e.obs === "o1" && e.kind === "current" && e.held === false);

  const h1 = await d.send({ op: "acquire", client: "a", key: "jobs/d", hold: "h1", wait_ms: 0 });
  assert.equal(h1.ok, true);
  assert.match(h1.token, /^\d+$/);
  assert.ok(BigInt(h1.token) > 2n ** 48n, "a decimal string, beyond a double's precision when it must be");
  const again = await d.send({ op: "acquire", client: "a", key: "jobs/d", hold: "h1b" });
  assert.equal(again.token, h1.token, "re-entrant: the same token");
  const granted = await d.event((e) => e.obs === "o1" && e.kind === "granted");
  assert.equal(granted.held, true);
  assert.match(granted.revision, /^\d+$/);

  // Another client waits (its own command, concurrently) while h1 is held; refusals are typed.
  const held = await d.send({ op: "acquire", client: "b", key: "jobs/d", hold: "x", wait_ms: 0 });
  assert.deepEqual([held.ok, held.reason], [false, "HELD"]);
  const later = d.send({ op: "acquire", client: "b", key: "jobs/d", hold: "h2", wait_ms: 5000 });
  const st = await d.send({ op: "state", hold: "h1" });
  assert.equal(st.ok, true);
  assert.equal(st.can_start, true);
  assert.equal(st.fenced, false);
  assert.ok(Number.isInteger(st.remaining_ms) && st.remaining_ms > 0 && st.remaining_ms <= 3000, JSON.stringify(st));
  assert.equal((await d.send({ op: "release", hold: "h1b" })).ok, true);
  assert.equal((await d.send({ op: "release", hold: "h1" })).ok, true);
  const h2 = await later;
  assert.equal(h2.ok, true);
  assert.ok(BigInt(h2.token) > BigInt(h1.token));

  const denied = await d.send({ op: "acquire", client: "a", key: "denied/d", hold: "n", wait_ms: 0 });
  assert.deepEqual([denied.ok, denied.reason], [false, "NOT_GRANTED"]);

  const set = await d.send({ op: "acquire_all", client: "a", keys: ["jobs/s1", "jobs/s2"], hold: "s", wait_ms: 1000 });
  assert.equal(set.ok, true);
  const shared = await d.send({ op: "acquire_shared", client: "a", key: "readers/d", hold: "r", wait_ms: 1000 });
  assert.equal(shared.ok, true);
  const lead = await d.send({ op: "campaign", client: "a", key: "leaders/d", hold: "l", wait_ms: 1000 });
  assert.equal(lead.ok, true);
  for (const name of ["s", "r", "l"]) {
    const s = await d.send({ op: "state", hold: name });
    assert.deepEqual([s.ok, s.can_start, s.fenced], [true, true, false], name);
    assert.equal((await d.send({ op: "release", hold: name })).ok, true);
  }

  // What the driver cannot do is DRIVER, never a crash.
  for (const cmd of [{ op: "fly" }, { op: "release", hold: "nope" }, { op: "acquire", client: "zz", key: "jobs/x", hold: "q" }, { op: "acquire", client: "a", hold: "q" }]) {
    const r = await d.send(cmd);
    assert.deepEqual([r.ok, r.reason], [false, "DRIVER"], JSON.stringify(cmd));
    assert.equal(typeof r.message, "string");
  }
  d.raw("{not json");

  assert.equal((await d.send({ op: "shutdown", client: "b" })).ok, true);
  assert.equal((await d.send({ op: "exit" })).ok, true);
  assert.equal(await d.exited, 0);
});

test("driver: a fenced hold writes its event, and its state says so", async () => {
  const d = start();
  await d.send({ op: "client", client: "a" });
  const h = await d.send({ op: "acquire", client: "a", key: "jobs/f", hold: "f1" });
  assert.equal(h.ok, true);
  fake.expireSessions();
  await d.event((e) => e.event === "fenced" && e.hold === "f1");
  assert.deepEqual(await d.send({ op: "state", hold: "f1" }), { id: 3, ok: true, can_start: false, fenced: true, remaining_ms: 0 });
  const r = await d.send({ op: "release", hold: "f1" });
  assert.deepEqual([r.ok, r.reason], [false, "FENCED"]);
  d.child.stdin.end();
  assert.equal(await d.exited, 0, "stdin closed: the conductor is gone");
});
