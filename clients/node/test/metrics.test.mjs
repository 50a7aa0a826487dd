// Client-side metrics (issue 50 item 7) against the fake service, read with the SDK's
// in-memory reader: every call site records what it should, with exactly {class, outcome},
// and never the key or the token.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { metrics } from "@opentelemetry/api";
import { MeterProvider, MetricReader } from "@opentelemetry/sdk-metrics";
import {
  HOLD_DURATION, HOLDS_LOST, LockClient, meshSidecar, METER_NAME, NotGranted, Held, WAIT_DURATION, waitOutcome,
  Unavailable, NoQuorum, fromParts,
} from "../dist/index.js";
import { startFake } from "./fake_server.mjs";

/** The SDK's reader, collected on demand (the Go SDK's ManualReader). */
class InMemoryReader extends MetricReader {
  async onForceFlush() {}
  async onShutdown() {}
}

const fake = await startFake({ ttlSeconds: 3 });
const clients = [];
after(async () => {
  for (const c of clients) await c.shutdown().catch(() => undefined);
  fake.close();
});
const unfenced = () => undefined;

function meter() {
  const reader = new InMemoryReader();
  const provider = new MeterProvider({ readers: [reader] });
  const client = new LockClient(fake.endpoint, meshSidecar(), { meterProvider: provider });
  clients.push(client);
  /** Every data point of the client's instruments: {name, unit, attributes, value}. */
  const points = async () => {
    const { resourceMetrics, errors } = await reader.collect();
    assert.deepEqual(errors, []);
    const out = [];
    for (const scope of resourceMetrics.scopeMetrics) {
      assert.equal(scope.scope.name, METER_NAME);
      for (const m of scope.metrics) {
        for (const p of m.dataPoints) out.push({ name: m.descriptor.name, unit: m.descriptor.unit, attributes: p.attributes, value: p.value });
      }
    }
    return out;
  };
  return { client, points };
}

const find = (points, name, outcome) => points.filter((p) => p.name === name && p.attributes.outcome === outcome);
const count = (p) => (typeof p.value === "number" ? p.value : p.value.count);

/** Exactly {class, outcome}; no value is a key or a token the test used. */
function clean(points, secrets) {
  for (const p of points) {
    assert.deepEqual(Object.keys(p.attributes).sort(), ["class", "outcome"], `${p.name}: ${JSON.stringify(p.attributes)}`);
    for (const v of Object.values(p.attributes)) {
      for (const s of secrets) assert.notEqual(String(v), String(s), `${p.name} carries ${s}`);
    }
  }
}

test("a grant, a refusal, a release and a fenced hold are recorded", async () => {
  const { client, points } = meter();
  const other = new LockClient(fake.endpoint, meshSidecar());
  clients.push(other);

  // A grant and its release.
  const h = await client.acquire("ledger/a", { waitMs: 1000, onFence: unfenced });
  // Re-entrant: no call, nothing recorded.
  const nested = await client.acquire("ledger/a", { onFence: unfenced });
  await nested.release();
  await h.release();

  // Refusals: held by another client, of a key whose class an earlier answer named
  // (ledger/a's grant) and of one no answer named (HELD carries no class): "unknown"; not
  // granted (OpenSession refused: no class either).
  const theirs = await other.acquire("ledger/a", { onFence: unfenced });
  const theirsToo = await other.acquire("ledger/b", { onFence: unfenced });
  await assert.rejects(client.acquire("ledger/a", { waitMs: 0, onFence: unfenced }), Held);
  await assert.rejects(client.acquire("ledger/b", { waitMs: 0, onFence: unfenced }), Held);
  const fresh = meter();
  await assert.rejects(fresh.client.acquire("denied/x", { waitMs: 0, onFence: unfenced }), NotGranted);
  assert.deepEqual((await fresh.points()).map((p) => [p.name, p.attributes.class, p.attributes.outcome]), [[WAIT_DURATION, "unknown", "not_granted"]]);
  await theirs.release();
  await theirsToo.release();

  // A hold whose session can no longer be renewed: fenced, counted as lost.
  let fenced;
  const wasFenced = new Promise((r) => (fenced = r));
  const lost = await client.acquire("ledger/c", { onFence: () => fenced() });
  fake.expireSessions();
  await wasFenced;
  assert.ok(lost.fenced);
  await assert.rejects(lost.release(), (e) => e.name === "Fenced");

  const got = await points();
  clean(got, ["ledger/a", "ledger/b", "ledger/c", h.token, theirs.token, theirsToo.token, lost.token]);

  const waits = got.filter((p) => p.name === WAIT_DURATION);
  assert.ok(waits.every((p) => p.unit === "s"));
  const granted = find(got, WAIT_DURATION, "granted");
  assert.deepEqual(granted.map((p) => [p.attributes.class, count(p)]), [["ledger", 2]], "two grants (the nested acquire made no call)");
  assert.deepEqual(find(got, WAIT_DURATION, "held").map((p) => [p.attributes.class, count(p)]).sort(), [["ledger", 1], ["unknown", 1]]);

  const holds = got.filter((p) => p.name === HOLD_DURATION);
  assert.ok(holds.every((p) => p.unit === "s"));
  assert.deepEqual(find(got, HOLD_DURATION, "released").map((p) => [p.attributes.class, count(p)]), [["ledger", 1]], "one hold, however nested");
  assert.deepEqual(find(got, HOLD_DURATION, "fenced").map((p) => [p.attributes.class, count(p)]), [["ledger", 1]], "the fenced release is not counted again");
  const lostPoints = got.filter((p) => p.name === HOLDS_LOST);
  assert.deepEqual(lostPoints.map((p) => [p.unit, p.attributes.class, p.attributes.outcome, p.value]), [["{hold}", "ledger", "fenced", 1]]);

});

test("sets, shared holds and campaigns are measured; the shutdown ends what is held", async () => {
  const { client, points } = meter();
  const set = await client.acquireAll(["jobs/x", "jobs/y"], { waitMs: 1000, onFence: unfenced });
  const shared = await client.acquireShared("readers/r", { waitMs: 1000, onFence: unfenced });
  const lead = await client.campaign("leaders/l", { waitMs: 1000, onFence: unfenced });
  await shared.release();
  const stillHeld = await client.acquire("jobs/z", { onFence: unfenced });
  await client.shutdown();

  const got = await points();
  clean(got, ["jobs/x", "jobs/y", "jobs/z", "readers/r", "leaders/l", set.token, shared.token, lead.term, stillHeld.token]);
  const grants = find(got, WAIT_DURATION, "granted").map((p) => [p.attributes.class, count(p)]).sort();
  // AcquireAll's answer names no class: the set counts under its first key's, which the
  // OpenSession for it named.
  assert.deepEqual(grants, [["jobs", 2], ["leaders", 1], ["readers", 1]]);
  assert.deepEqual(find(got, HOLD_DURATION, "released").map((p) => [p.attributes.class, count(p)]), [["readers", 1]]);
  const down = find(got, HOLD_DURATION, "shutdown").map((p) => [p.attributes.class, count(p)]).sort();
  assert.deepEqual(down, [["jobs", 2], ["leaders", 1]]);
  assert.equal(got.filter((p) => p.name === HOLDS_LOST).length, 0);
});

test("permits are measured as holds; a nested one records nothing", async () => {
  const { client, points } = meter();
  const other = new LockClient(fake.endpoint, meshSidecar());
  clients.push(other);
  const p = await client.acquirePermit("sem/m", { onFence: unfenced });
  await (await client.acquirePermit("sem/m", { onFence: unfenced })).release(); // nested: nothing
  await p.release();
  // Three permits of sem/full held elsewhere: the fourth is refused.
  const full = [];
  for (let i = 0; i < 3; i++) {
    const c = new LockClient(fake.endpoint, meshSidecar());
    clients.push(c);
    full.push(await c.acquirePermit("sem/full", { onFence: unfenced }));
  }
  await assert.rejects(client.acquirePermit("sem/full", { waitMs: 0, onFence: unfenced }), Held);
  const kept = await client.acquirePermit("sem/kept", { onFence: unfenced });
  for (const f of full) await f.release();

  const got = await points();
  clean(got, ["sem/m", "sem/full", "sem/kept", p.token, kept.token, ...full.map((f) => f.token)]);
  assert.deepEqual(find(got, WAIT_DURATION, "granted").map((x) => [x.attributes.class, count(x)]), [["sem", 2]]);
  // The session was opened for sem/m: sem/full's class was never named to this client.
  assert.deepEqual(find(got, WAIT_DURATION, "held").map((x) => [x.attributes.class, count(x)]), [["unknown", 1]]);
  assert.deepEqual(find(got, HOLD_DURATION, "released").map((x) => [x.attributes.class, count(x)]), [["sem", 1]]);
  await client.shutdown();
  const down = find(await points(), HOLD_DURATION, "shutdown").map((x) => [x.attributes.class, count(x)]);
  assert.deepEqual(down, [["sem", 1]], "the permit still held ends with the shutdown");
});

test("a campaign that times out records one wait, not one per round", async () => {
  const { client, points } = meter();
  const other = new LockClient(fake.endpoint, meshSidecar());
  clients.push(other);
  const leader = await other.campaign("leaders/busy", { onFence: unfenced });
  await assert.rejects(client.campaign("leaders/busy", { waitMs: 1500, onFence: unfenced }), Held);
  const got = await points();
  assert.deepEqual(find(got, WAIT_DURATION, "held").map((p) => [p.attributes.class, count(p)]), [["leaders", 1]]);
  await leader.resign();
});

test("wait outcomes: granted, the reason in lower case, unavailable without one", () => {
  assert.equal(waitOutcome(null), "granted");
  assert.equal(waitOutcome(new Held("x", { reason: "HELD" })), "held");
  assert.equal(waitOutcome(new NoQuorum("x", { reason: "NO_QUORUM" })), "no_quorum");
  assert.equal(waitOutcome(new Unavailable("connection refused", { code: 14 })), "unavailable");
  assert.equal(waitOutcome(fromParts(14, "gone", null)), "unavailable");
  assert.equal(waitOutcome(new Error("not ours")), "unavailable");
});

test("without a meterProvider the global one is used, and unset it costs nothing", async () => {
  // No SDK registered: the global provider is the API's no-op; acquires work as ever.
  const plain = new LockClient(fake.endpoint, meshSidecar());
  clients.push(plain);
  await (await plain.acquire("ledger/noop", { onFence: unfenced })).release();

  const reader = new InMemoryReader();
  const provider = new MeterProvider({ readers: [reader] });
  assert.ok(metrics.setGlobalMeterProvider(provider));
  try {
    const global = new LockClient(fake.endpoint, meshSidecar());
    clients.push(global);
    await (await global.acquire("ledger/global", { onFence: unfenced })).release();
    const { resourceMetrics } = await reader.collect();
    const names = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics.map((m) => m.descriptor.name)).sort();
    assert.deepEqual(names, [HOLD_DURATION, WAIT_DURATION]);
  } finally {
    metrics.disable();
  }
});
