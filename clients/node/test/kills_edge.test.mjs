// Drain then fence when the edge dies: the stack's Envoy is killed (SIGKILL) under a hold.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Fenced } from "../dist/index.js";
import { client, env, etcdHas, fresh, sleep, ttlMs } from "./env.mjs";

test("drain then fence before the lease expires when the edge dies", async () => {
  const locks = client("LOCK");
  const key = fresh();
  let fencedAt = null;
  const hold = await locks.acquire(key, { onFence: () => (fencedAt ??= performance.now()) });
  assert.ok(hold.canStart());
  assert.ok(etcdHas(`/l/${key}`));
  process.kill(Number(env("LOCK_ENVOY_PID")), "SIGKILL");
  const limit = performance.now() + ttlMs() * 4;
  let drainedAt = null;
  let deletedAt = null;
  while (performance.now() < limit && deletedAt === null) {
    const t = performance.now();
    if (drainedAt === null && !hold.canStart()) drainedAt = t;
    if (!etcdHas(`/l/${key}`)) deletedAt = t;
    await sleep(20);
  }
  assert.ok(drainedAt !== null, "canStart never turned false");
  assert.ok(deletedAt !== null, "etcd never deleted the hold");
  assert.ok(fencedAt !== null, "onFence did not run");
  assert.ok(drainedAt <= fencedAt, "drained before the fence");
  // The client fences at (last renewal sent) + TTL - 1 s; etcd deletes at (last renewal
  // applied) + TTL. Half the designed second is the margin required (as in Rust and Python).
  const margin = deletedAt - fencedAt;
  console.log(`drained ${(fencedAt - drainedAt).toFixed(0)} ms before the fence; fenced ${margin.toFixed(0)} ms before etcd deleted the hold`);
  assert.ok(margin >= 500, `fenced only ${margin} ms before the server-side expiry`);
  assert.ok(hold.fenced && hold.remainingTtlMs() === 0);
  await assert.rejects(hold.release(), Fenced);
  await locks.shutdown().catch(() => undefined);
});
