// The Node client against the real stack (Envoy with the filter, arbiters, etcd): the cases
// of the Python client's test_stack.py, plus replicas of one identity (issue 32).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { Held, InvalidRequest, LeakedHold, LockClient, meshSidecar, NotGranted } from "../dist/index.js";
import { client, env, fresh, semPermits, semPrefix, sharedPrefix, sleep, ttlMs, unfenced } from "./env.mjs";

const locks = client("LOCK");
const other = client("LOCK_OTHER");
const made = [];
// Another client of the test identity: `instance` is sent as it is; undefined takes this
// process's next (`<prefix>:<pid>:<n>`).
const replica = (instance) => {
  const c = client("LOCK", { instance });
  made.push(c);
  return c;
};
after(async () => {
  for (const c of [locks, other, ...made]) await c.shutdown().catch(() => undefined);
});

test("a hold gives a token and a later grant a greater one", async () => {
  const key = fresh();
  const first = await locks.acquire(key, { onFence: unfenced });
  assert.ok(first.canStart() && first.token > 0n);
  await first.release();
  const second = await locks.acquire(key, { onFence: unfenced });
  assert.ok(second.token > first.token);
  await second.release();
});

test("withHold holds for the block and releases after", async () => {
  const key = fresh();
  let token;
  await locks.withHold(key, { onFence: unfenced }, async (h) => {
    assert.ok(h.canStart());
    token = h.token;
    await assert.rejects(other.acquire(key, { waitMs: 0, onFence: unfenced }), Held);
  });
  const taken = await other.acquire(key, { waitMs: 2000, onFence: unfenced });
  assert.ok(taken.token > token);
  await taken.release();
});

test("a waiter is granted when the holder releases", async () => {
  const key = fresh();
  const holder = await locks.acquire(key, { onFence: unfenced });
  let granted = null;
  const waiting = other.acquire(key, { waitMs: 10_000, onFence: unfenced }).then((h) => (granted = h));
  await sleep(500);
  assert.equal(granted, null, "granted while held");
  await holder.release();
  const h = await waiting;
  assert.ok(h.token > holder.token);
  await h.release();
});

test("nested acquires count locally and the last release calls", async () => {
  const key = fresh();
  const outer = await locks.acquire(key, { onFence: unfenced });
  const inner = await locks.acquire(key, { onFence: unfenced });
  assert.equal(inner.token, outer.token);
  await inner.release();
  await assert.rejects(other.acquire(key, { waitMs: 0, onFence: unfenced }), Held);
  await outer.release();
  await (await other.acquire(key, { waitMs: 2000, onFence: unfenced })).release();
});

test("many holds share one session", async () => {
  const holds = [];
  for (let i = 0; i < 20; i++) holds.push(await locks.acquire(fresh(), { onFence: unfenced }));
  assert.equal(new Set(holds.map((h) => h.sessionId)).size, 1);
  // Renewed past two TTLs: one KeepAlive stream keeps all of them.
  await sleep(ttlMs() * 2);
  assert.ok(holds.every((h) => h.canStart() && !h.fenced));
  for (const h of holds) await h.release();
});

test("first acquires racing on a fresh client share one session", async () => {
  const fresher = client("LOCK");
  made.push(fresher);
  const holds = await Promise.all(Array.from({ length: 10 }, () => fresher.acquire(fresh(), { onFence: unfenced })));
  assert.equal(new Set(holds.map((h) => h.sessionId)).size, 1);
  assert.equal(fresher.sessionIds().length, 1);
  for (const h of holds) await h.release();
});

async function fastPathCount() {
  const r = await fetch(`http://${env("LOCK_ENVOY_ADMIN")}/stats?filter=^wasmcustom.lock_edge.fast_path$`);
  return (await r.text()).split("\n").filter((l) => l.includes(":")).reduce((n, l) => n + Number(l.split(":").pop()), 0);
}

test("each lock is one Hold stream, which carries its release", async () => {
  const key = fresh();
  const h = await locks.acquire(key, { onFence: unfenced });
  assert.equal(locks.openHoldStreams(), 1);
  await assert.rejects(other.acquire(key, { waitMs: 0, onFence: unfenced }), Held);
  await h.release();
  assert.equal(locks.openHoldStreams(), 0);
  // Released on its stream: the key is free at once.
  const again = await other.acquire(key, { waitMs: 0, onFence: unfenced });
  assert.ok(again.token > h.token);
  await again.release();
  // Unary calls only: the same lock, no stream.
  const unaryOnly = client("LOCK");
  made.push(unaryOnly);
  unaryOnly.limitHoldStreams(0);
  const u = await unaryOnly.acquire(key, { onFence: unfenced });
  assert.equal(unaryOnly.openHoldStreams(), 0);
  await u.release();
  await (await other.acquire(key, { waitMs: 0, onFence: unfenced })).release();
});

test("keyed calls take the edge's fast path", async () => {
  const fresher = client("LOCK");
  made.push(fresher);
  const before = await fastPathCount();
  // OpenSession (a fresh client has none), then the lock's Hold stream (its acquire and
  // release on one request): two keyed requests, each decided on its lock-key header
  // without waiting for the body. As two unary calls, three.
  await (await fresher.acquire(fresh(), { onFence: unfenced })).release();
  assert.ok((await fastPathCount()) - before >= 2);
  const unaryOnly = client("LOCK");
  made.push(unaryOnly);
  unaryOnly.limitHoldStreams(0);
  const mid = await fastPathCount();
  await (await unaryOnly.acquire(fresh(), { onFence: unfenced })).release();
  assert.ok((await fastPathCount()) - mid >= 3);
});

test("refusals are typed", async () => {
  await assert.rejects(locks.acquire("archive/node", { onFence: unfenced }), NotGranted);
  await assert.rejects(locks.acquire(`${env("LOCK_TEST_PREFIX")}//bad`, { onFence: unfenced }), InvalidRequest);
});

test("through the mesh sidecar", async () => {
  const meshed = new LockClient(env("LOCK_SIDECAR_ENDPOINT"), meshSidecar());
  try {
    await meshed.withHold(fresh(), { onFence: unfenced }, async (h) => assert.ok(h.canStart()));
    await assert.rejects(meshed.acquire("archive/node", { onFence: unfenced }), NotGranted);
  } finally {
    await meshed.shutdown();
  }
});

test("replicas of one identity take turns", async () => {
  // Three replicas (one SPIFFE ID, three instances) on one key, each waiting its turn: every
  // one is granted in turn (FIFO handoff), none hears LEAKED_HOLD.
  const key = fresh();
  const pods = [0, 1, 2].map((i) => replica(`pod-${i}-${randomBytes(3).toString("hex")}`));
  const sections = [];
  await Promise.all(pods.map(async (c, who) => {
    for (let round = 0; round < 3; round++) {
      await c.withHold(key, { waitMs: 20_000, onFence: unfenced }, async (h) => {
        sections.push({ token: h.token, who });
        await sleep(50);
      });
    }
  }));
  assert.equal(sections.length, 9);
  for (let i = 1; i < sections.length; i++) assert.ok(sections[i].token > sections[i - 1].token, "tokens rise in grant order");
  const handoffs = sections.slice(1).filter((s, i) => s.who !== sections[i].who).length;
  console.log(`replicas: 9 holds, ${handoffs} handoffs between siblings`);
  assert.ok(handoffs >= 2);
});

test("a restarted process is still told LEAKED_HOLD", async () => {
  // Issue 50, the restart case: a container's main process that restarts is often pid 1
  // again and builds its first client again, so it sends its previous life's instance
  // (`<prefix>:<pid>:1`) and, meeting its own old hold, is told LEAKED_HOLD, at once and also
  // when it would wait. A test cannot reuse a pid: the restarted life is a client given the
  // first life's instance explicitly (an explicit instance is sent as it is).
  const key = fresh();
  const first = replica(undefined);
  const [, pid, n] = first.instance.match(/^.+:(\d+):(\d+)$/) ?? [];
  assert.ok(pid === String(process.pid) && Number(n) >= 1, first.instance);
  const again = replica(first.instance);
  assert.equal(again.instance, first.instance);
  const h = await first.acquire(key, { onFence: unfenced });
  await assert.rejects(again.acquire(key, { waitMs: 0, onFence: unfenced }), LeakedHold);
  await assert.rejects(again.acquire(key, { waitMs: 2000, onFence: unfenced }), LeakedHold);
  await h.release();
  await (await again.acquire(key, { onFence: unfenced })).release();
});

test("two client objects of one process queue", async () => {
  // Issue 50: neither names an instance, so they are two instances (the same prefix and
  // pid, the next number): the second is told HELD, not LEAKED_HOLD, and when it waits it
  // queues and is granted once the first releases.
  const key = fresh();
  const [first, second] = [replica(undefined), replica(undefined)];
  assert.notEqual(first.instance, second.instance);
  const cut = (i) => i.slice(0, i.lastIndexOf(":"));
  assert.equal(cut(first.instance), cut(second.instance));
  const h = await first.acquire(key, { onFence: unfenced });
  await assert.rejects(second.acquire(key, { waitMs: 0, onFence: unfenced }), Held);
  const waiting = second.acquire(key, { waitMs: 20_000, onFence: unfenced });
  await sleep(500);
  await h.release();
  const next = await waiting;
  assert.ok(next.token > h.token);
  await next.release();
});

const SIBLING_CHILD = `
import { Held } from ${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)};
import { client, unfenced } from ${JSON.stringify(new URL("./env.mjs", import.meta.url).href)};
const c = client("LOCK");
console.log(c.instance);
let h;
try {
  h = await c.acquire(process.argv[1], { waitMs: 0, onFence: unfenced });
} catch (e) {
  if (!(e instanceof Held)) throw e;
  console.log("refused HELD");
  h = await c.acquire(process.argv[1], { waitMs: 20_000, onFence: unfenced });
}
console.log("held");
process.stdin.once("data", async () => {
  await h.release();
  await c.shutdown().catch(() => undefined);
  process.exit(0);
});
`;

/** Every stdout line of `child`, kept until asked for (none is lost). */
function queuedLines(child) {
  let buf = "";
  const ready = [];
  const waiting = [];
  child.stdout.on("data", (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const w = waiting.shift();
      if (w) w(line);
      else ready.push(line);
    }
  });
  return () => ready.length > 0 ? Promise.resolve(ready.shift()) : new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("no line from the child")), 30_000);
    waiting.push((l) => { clearTimeout(t); resolve(l); });
  });
}

test("worker processes sharing LOCK_INSTANCE queue", async () => {
  // Issue 50: two worker processes of one pod share LOCK_INSTANCE (the pod UID) and their
  // identity; their pids tell them apart, so the second queues (HELD at waitMs 0, then
  // granted once the first releases) instead of being told LEAKED_HOLD.
  const key = fresh();
  const shared = `pod-${randomBytes(8).toString("hex")}`;
  const children = [];
  const worker = () => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", SIBLING_CHILD, key], {
      stdio: ["pipe", "pipe", "inherit"], env: { ...process.env, LOCK_INSTANCE: shared },
    });
    children.push(child);
    return [child, queuedLines(child), new Promise((r) => child.once("exit", r))];
  };
  try {
    const [a, nextA, exitA] = worker();
    assert.equal(await nextA(), `${shared}:${a.pid}:1`);
    assert.equal(await nextA(), "held");
    const [b, nextB, exitB] = worker();
    assert.equal(await nextB(), `${shared}:${b.pid}:1`);
    assert.equal(await nextB(), "refused HELD", "a sibling worker queues");
    a.stdin.write("go\n");
    assert.equal(await exitA, 0);
    assert.equal(await nextB(), "held");
    b.stdin.write("go\n");
    assert.equal(await exitB, 0);
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
  }
});

const FROZEN_CHILD = `
import { client, unfenced } from ${JSON.stringify(new URL("./env.mjs", import.meta.url).href)};
const c = client("LOCK");
const h = await c.acquire(process.argv[1], { onFence: unfenced });
console.log("held");
process.stdin.once("data", async () => {
  const lapse = h.lapse();
  console.log(lapse === null ? "continuous" : "lapsed: " + JSON.stringify(lapse));
  await c.shutdown().catch(() => undefined);
  process.exit(0);
});
`;

function lines(child) {
  let buf = "";
  const waiting = [];
  child.stdout.on("data", (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      waiting.shift()?.(line);
    }
  });
  return () => new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("no line from the child")), 30_000);
    waiting.push((l) => { clearTimeout(t); resolve(l); });
  });
}

test("a hold frozen past its ttl is not continuous", async () => {
  // A process frozen (SIGSTOP) past its TTL and woken learns that its hold did not cover
  // its work, however the wake-up races its renewal timer.
  for (const freeze of [0, ttlMs() + 1000]) {
    const child = spawn(process.execPath, ["--input-type=module", "-e", FROZEN_CHILD, fresh()], { stdio: ["pipe", "pipe", "inherit"] });
    const next = lines(child);
    try {
      assert.equal(await next(), "held");
      if (freeze) {
        process.kill(child.pid, "SIGSTOP");
        await sleep(freeze);
        process.kill(child.pid, "SIGCONT");
      }
      child.stdin.write("go\n");
      const verdict = await next();
      if (freeze) assert.ok(verdict.startsWith("lapsed:"), verdict);
      else assert.equal(verdict, "continuous");
      await new Promise((r) => child.once("exit", r));
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
  }
});

test("acquireAll takes a set with one token, and opposite orders do not deadlock", async () => {
  const [a, b] = [fresh(), fresh()];
  const single = await other.acquire(b, { onFence: unfenced });
  await assert.rejects(locks.acquireAll([a, b], { onFence: unfenced }), Held);
  await single.release();
  const set = await locks.acquireAll([b, a], { waitMs: 5000, onFence: unfenced });
  assert.deepEqual(set.keys, [a, b].sort());
  assert.ok(set.token > single.token);
  assert.ok(!String(set).includes(String(set.token)) && !JSON.stringify(set).includes(String(set.token)));
  await set.release();
  const loop = async (c, keys) => {
    for (let i = 0; i < 5; i++) {
      const s = await c.acquireAll(keys, { waitMs: 10_000, onFence: unfenced });
      await sleep(10);
      await s.release();
    }
  };
  await Promise.all([loop(locks, [a, b]), loop(other, [b, a])]);
});

test("shared holds admit readers together and a writer alone", async () => {
  const key = fresh(sharedPrefix());
  const r1 = await replica(`reader-${randomBytes(3).toString("hex")}`).acquireShared(key, { waitMs: 5000, onFence: unfenced });
  const r2 = await replica(`reader-${randomBytes(3).toString("hex")}`).acquireShared(key, { waitMs: 5000, onFence: unfenced });
  assert.notEqual(r1.token, r2.token);
  await assert.rejects(other.acquire(key, { waitMs: 0, onFence: unfenced }), Held);
  await r1.release();
  await r2.release();
  const w = await other.acquire(key, { waitMs: 5000, onFence: unfenced });
  assert.ok(w.token > r1.token && w.token > r2.token);
  await w.release();
});

test("a semaphore admits N holders, each on its own permit; one more waits for a release", async () => {
  const key = fresh(semPrefix());
  const n = semPermits();
  const holders = [locks, other];
  for (let i = 2; i < n; i++) holders.push(replica(`sem-${i}-${randomBytes(3).toString("hex")}`));
  const held = [];
  for (const c of holders) held.push(await c.acquirePermit(key, { onFence: unfenced }));
  assert.deepEqual(held.map((p) => p.permit).sort(), [...Array(n).keys()]);
  assert.equal(new Set(held.map((p) => p.token)).size, n);
  const late = replica(`sem-late-${randomBytes(3).toString("hex")}`);
  await assert.rejects(late.acquirePermit(key, { waitMs: 0, onFence: unfenced }), Held);
  let granted = null;
  const waiting = late.acquirePermit(key, { waitMs: 20_000, onFence: unfenced }).then((p) => (granted = p));
  await sleep(500);
  assert.equal(granted, null, "granted while every permit was held");
  const [freed] = held.splice(1, 1);
  await freed.release();
  const got = await waiting;
  assert.equal(got.permit, freed.permit, "the waiter is handed the freed permit");
  assert.ok(got.token > freed.token, "a permit's tokens strictly increase");
  for (const p of [...held, got]) await p.release();
});

test("a client's second permit nests, and the last release frees it", async () => {
  const key = fresh(semPrefix());
  const outer = await locks.acquirePermit(key, { onFence: unfenced });
  const inner = await locks.acquirePermit(key, { onFence: unfenced });
  assert.deepEqual([inner.permit, inner.token], [outer.permit, outer.token]);
  // The other N-1 permits, held by replicas: the nested acquire took none of them.
  const rest = [];
  for (let i = 1; i < semPermits(); i++) {
    rest.push(await replica(`sem-${i}-${randomBytes(3).toString("hex")}`).acquirePermit(key, { onFence: unfenced }));
  }
  const late = replica(`sem-late-${randomBytes(3).toString("hex")}`);
  await assert.rejects(late.acquirePermit(key, { onFence: unfenced }), Held);
  await outer.release();
  await assert.rejects(late.acquirePermit(key, { onFence: unfenced }), Held);
  await inner.release();
  const got = await late.acquirePermit(key, { waitMs: 5000, onFence: unfenced });
  assert.ok(got.permit === outer.permit && got.token > outer.token);
  for (const p of [...rest, got]) await p.release();
});

test("a permit of another class, and another mode on a semaphore, are refused", async () => {
  const malformed = (e) => e instanceof InvalidRequest && e.reason === "MALFORMED_REQUEST";
  await assert.rejects(locks.acquirePermit(fresh(), { onFence: unfenced }), malformed);
  await assert.rejects(locks.acquire(fresh(semPrefix()), { onFence: unfenced }), malformed);
});
