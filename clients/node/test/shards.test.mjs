// Tiers and shards: keys homed on different etcd clusters (LOCK_SHARD_KEYS). The first key
// opens a session; the next, on another cluster, is answered WRONG_SESSION_PLACE and the
// client opens one there and retries.
import { test } from "node:test";
import assert from "node:assert/strict";
import { tagOf } from "../dist/index.js";
import { client, env, unfenced } from "./env.mjs";

test("keys on different clusters get a session each", async () => {
  const locks = client("LOCK");
  const keys = env("LOCK_SHARD_KEYS").split(",").filter(Boolean);
  assert.ok(keys.length >= 2);
  const holds = [];
  for (const k of keys) holds.push(await locks.acquire(k, { onFence: unfenced }));
  assert.ok(holds.every((h) => h.canStart()));
  assert.equal(new Set(locks.sessionIds().map(tagOf)).size, keys.length);
  for (const h of holds) await h.release();
  for (const k of keys) await (await locks.acquire(k, { onFence: unfenced })).release();
  assert.equal(locks.sessionIds().length, keys.length, "remembered: no new session");
  await locks.shutdown();
});
