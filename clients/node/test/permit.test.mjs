// Semaphore permits (`acquirePermit`) against the fake service (test/fake_server.mjs; keys
// under `sem/` have 3 permits): distinct permits, HELD when all are taken, nesting on one
// client with one release heard, the wrong class refused, fencing.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { Fenced, Held, InvalidRequest, LockClient, meshSidecar, Permit } from "../dist/index.js";
import { startFake } from "./fake_server.mjs";

const fake = await startFake({ ttlSeconds: 3 });
const clients = [];
after(async () => {
  for (const c of clients) await c.shutdown().catch(() => undefined);
  fake.close();
});
const client = () => {
  const c = new LockClient(fake.endpoint, meshSidecar());
  clients.push(c);
  return c;
};
const unfenced = () => undefined;
const releasesOf = (key) => fake.permitReleases.filter(([k]) => k === key);

test("three clients hold three permits; a fourth is refused, then gets the freed one", async () => {
  const key = "sem/pool";
  const [a, b, c, d] = [client(), client(), client(), client()];
  const held = [];
  for (const x of [a, b, c]) held.push(await x.acquirePermit(key, { onFence: unfenced }));
  assert.ok(held.every((p) => p instanceof Permit));
  assert.deepEqual(held.map((p) => p.permit).sort(), [0, 1, 2]);
  assert.equal(new Set(held.map((p) => p.token)).size, 3);
  await assert.rejects(d.acquirePermit(key, { waitMs: 0, onFence: unfenced }), Held);
  const waiting = d.acquirePermit(key, { waitMs: 5000, onFence: unfenced });
  const [freed] = held.splice(1, 1);
  await freed.release();
  assert.deepEqual(releasesOf(key), [[key, freed.permit, freed.token]]);
  const got = await waiting;
  assert.equal(got.permit, freed.permit);
  assert.ok(got.token > freed.token);
  for (const p of [...held, got]) await p.release();
  assert.equal(fake.permitsHeld(key), 0);
});

test("a second acquire nests on the permit; only the last release calls", async () => {
  const key = "sem/nested";
  const c = client();
  const outer = await c.acquirePermit(key, { onFence: unfenced });
  const inner = await c.acquirePermit(key, { onFence: unfenced });
  assert.deepEqual([inner.permit, inner.token], [outer.permit, outer.token]);
  assert.equal(fake.permitsHeld(key), 1);
  await outer.release();
  assert.deepEqual(releasesOf(key), [], "a nested release called the service");
  await inner.release();
  await inner.release(); // once only
  assert.deepEqual(releasesOf(key), [[key, outer.permit, outer.token]]);
});

test("acquires of one client racing for a key share the grant", async () => {
  const key = "sem/race";
  const c = client();
  const [x, y] = await Promise.all([
    c.acquirePermit(key, { onFence: unfenced }),
    c.acquirePermit(key, { onFence: unfenced }),
  ]);
  assert.equal(x.token, y.token);
  await x.release();
  assert.equal(fake.permitsHeld(key), 1, "the first release ended the other's permit");
  await y.release();
  assert.equal(fake.permitsHeld(key), 0);
  assert.equal(releasesOf(key).length, 1);
});

test("a key of another class is refused MALFORMED_REQUEST; onFence is required", async () => {
  const c = client();
  await assert.rejects(c.acquirePermit("jobs/plain", { onFence: unfenced }), (e) => e instanceof InvalidRequest && e.reason === "MALFORMED_REQUEST");
  await assert.rejects(c.acquire("sem/exclusive", { onFence: unfenced }), InvalidRequest);
  await assert.rejects(c.acquirePermit("sem/x", {}), TypeError);
});

test("the token never shows", async () => {
  const p = await client().acquirePermit("sem/shown", { onFence: unfenced });
  assert.ok(p.canStart() && !p.fenced && p.wasContinuous());
  const left = p.remainingTtlMs();
  assert.ok(left > 0 && left <= 3000, String(left));
  for (const shown of [String(p), JSON.stringify(p)]) assert.ok(!shown.includes(String(p.token)), shown);
  await p.release();
});

test("a fenced permit runs onFence, rejects its release, and the next acquire is a new grant", async () => {
  const key = "sem/fenced";
  const c = client();
  let fenced;
  const wasFenced = new Promise((r) => (fenced = r));
  const old = await c.acquirePermit(key, { onFence: () => fenced() });
  fake.expireSessions();
  await wasFenced;
  assert.ok(old.fenced && !old.wasContinuous());
  const fresh = await c.acquirePermit(key, { onFence: unfenced });
  assert.ok(fresh.token > old.token && !fresh.fenced);
  await assert.rejects(old.release(), Fenced);
  assert.equal(fake.permitsHeld(key), 1, "the old permit's release left the new grant alone");
  await fresh.release();
  assert.equal(fake.permitsHeld(key), 0);
});
