// Observe and campaign against the fake service (test/fake_server.mjs): the resume rules and
// the campaign's rounds, without the stack (the stack suites cover the real service).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { Held, LockClient, meshSidecar, NotGranted } from "../dist/index.js";
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
const within = (p, ms = 5000) =>
  Promise.race([p, new Promise((_, reject) => setTimeout(() => reject(new Error(`not within ${ms} ms`)), ms))]);

test("observe: the holder now, every change, resumed after a clean end or a reset, a gap after compaction", async () => {
  const watcher = client();
  const holder = client();
  const obs = watcher.observe("jobs/o");
  const first = (await within(obs.next())).value;
  assert.equal(first.change, "current");
  assert.equal(first.held, false);
  assert.equal(first.gap, false);

  const h = await holder.acquire("jobs/o", { onFence: unfenced });
  const granted = (await within(obs.next())).value;
  assert.deepEqual([granted.change, granted.held, granted.holder?.spiffeId], ["granted", true, "spiffe://fake/me"]);
  assert.ok(granted.revision > first.revision);
  assert.equal(obs.revision, granted.revision);

  // A proxy's idle timeout ends the stream: the observation resumes after the last
  // revision, so the next change comes without a new `current`.
  fake.endObservers();
  await new Promise((r) => setTimeout(r, 200));
  await h.release();
  const released = (await within(obs.next())).value;
  assert.deepEqual([released.change, released.held], ["released", false]);

  // The arbiter behind the stream dies and the edge resets it (INTERNAL, no reason): a
  // break, resumed like a clean end.
  fake.resetObservers();
  await new Promise((r) => setTimeout(r, 200));
  const h2 = await holder.acquire("jobs/o", { onFence: unfenced });
  const regranted = (await within(obs.next())).value;
  assert.deepEqual([regranted.change, regranted.held], ["granted", true]);
  await h2.release();
  assert.equal((await within(obs.next())).value.change, "released");

  // The store compacted past the resume point: a fresh `current`, marked as a gap.
  fake.compactNext = true;
  fake.endObservers();
  const again = (await within(obs.next())).value;
  assert.deepEqual([again.change, again.gap], ["current", true]);

  for (const shown of [String(again), JSON.stringify(again)]) assert.ok(!shown.includes("token"), shown);
  obs.close();
  assert.deepEqual(await obs.next(), { done: true, value: undefined });
});

test("observe: a refusal no retry cures rejects; the shutdown ends observations", async () => {
  const c = client();
  await assert.rejects(within(c.observe("denied/o").next()), NotGranted);
  const obs = c.observe("jobs/p");
  assert.equal((await within(obs.next())).value.change, "current");
  const pending = obs.next();
  await c.shutdown();
  assert.deepEqual(await within(pending), { done: true, value: undefined });
});

test("campaign: waits for the leader to resign; the term never shows", async () => {
  const [a, b] = [client(), client()];
  const first = await a.campaign("leaders/c", { onFence: unfenced });
  assert.ok(first.canLead() && !first.fenced && first.remainingTtlMs() > 0);
  let second = null;
  const waiting = b.campaign("leaders/c", { onFence: unfenced }).then((l) => (second = l));
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(second, null, "leads while another does");
  await first.resign();
  await within(waiting);
  assert.ok(second.term > first.term);
  for (const shown of [String(second), JSON.stringify(second)]) assert.ok(!shown.includes(String(second.term)), shown);
  await assert.rejects(b.campaign("leaders/d", {}), TypeError);
  await assert.rejects(a.campaign("leaders/c", { waitMs: 0, onFence: unfenced }), Held);
  await second.resign();
});

test("sets and shared holds say how long they have left", async () => {
  const c = client();
  const set = await c.acquireAll(["jobs/s1", "jobs/s2"], { onFence: unfenced });
  const shared = await c.acquireShared("readers/s", { onFence: unfenced });
  for (const h of [set, shared]) {
    const left = h.remainingTtlMs();
    assert.ok(left > 0 && left <= 3000, String(left));
  }
  await set.release();
  await shared.release();
});

test("a release whose Hold stream broke goes as the unary call", async () => {
  const c = client();
  const other = client();
  const h = await c.acquire("jobs/broken", { onFence: unfenced });
  assert.equal(c.openHoldStreams(), 1);
  fake.breakHoldStreams = true;
  try {
    const before = fake.calls.filter(([m]) => m === "release").length;
    await h.release();
    assert.equal(fake.calls.filter(([m]) => m === "release").length, before + 1, "released once, by the unary call");
    assert.equal(c.openHoldStreams(), 0);
  } finally {
    fake.breakHoldStreams = false;
  }
  await (await other.acquire("jobs/broken", { waitMs: 0, onFence: unfenced })).release();
});
