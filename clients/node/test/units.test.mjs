// Pure logic: liveness, error decoding, key encoding, instances, endpoint rules (no stack).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import protobuf from "protobufjs";
import {
  checkEndpoint, encodeKey, fromParts, decodeGrpcMessage, Held, InvalidRequest, LeakedHold, Liveness, NotGranted,
  instanceFor, processInstance, RateLimited, RegionRedirect, Unavailable, OtherError, validInstance,
  WrongSessionTtl, Draining, Hold, LockClient, meshSidecar,
} from "../dist/index.js";

const S = 1000;

test("drain at first failure, fence at the send-time deadline", () => {
  const live = new Liveness(15 * S, 100 * S);
  assert.ok(live.canStart(100 * S));
  assert.equal(live.deadline(), 114 * S);
  live.renewed(105 * S);
  assert.equal(live.deadline(), 119 * S);
  live.failed();
  assert.ok(!live.canStart(106 * S), "drained at the first failure");
  assert.ok(!live.fenceDue(118.9 * S));
  assert.ok(live.fenceDue(119 * S));
  assert.ok(!live.fenceDue(120 * S), "fenced once");
  assert.ok(live.fenced && live.remaining(119 * S) === 0);
  live.renewed(119.5 * S);
  assert.ok(live.fenced, "a late success does not revive a fenced session");
});

test("an older success does not move the deadline back", () => {
  const live = new Liveness(6 * S, 10 * S);
  live.renewed(12 * S);
  live.renewed(11 * S);
  assert.equal(live.deadline(), 17 * S);
});

// The same cases as lock-client's `covered_until_table` and the Python client's (issue 32).
for (const [name, at, fence, expire, want] of [
  ["well inside the deadline", 105, null, false, null],
  ["at the deadline, not yet fenced (frozen, just woken)", 129, null, false, [29, 0]],
  ["37 s frozen, not yet fenced", 137, null, false, [37, 8]],
  ["fenced by the timer", 130, 129, false, [30, 1]],
  ["the service said expired", 102, null, true, [2, 0]],
]) {
  test(`coveredUntil: ${name}`, () => {
    const live = new Liveness(30 * S, 100 * S);
    if (fence !== null) assert.ok(live.fenceDue(fence * S));
    if (expire) live.expire();
    const got = live.coveredUntil(at * S);
    assert.deepEqual(got, want && { unrenewedMs: want[0] * S, pastDeadlineMs: want[1] * S, ttlMs: 30 * S });
  });
}

test("keys are encoded as the Rust client does", () => {
  for (const [key, wire] of [
    ["pay/ledger/42", "pay/ledger/42"],
    ["pay/ledger/über", "pay/ledger/%C3%BCber"],
    ["pay/ключ", "pay/%D0%BA%D0%BB%D1%8E%D1%87"],
    ["pay/a b", "pay/a%20b"],
    ["pay/100%", "pay/100%25"],
  ]) assert.equal(encodeKey(key), wire);
});

test("instances follow the service's rule", () => {
  for (const ok of ["3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d", "ledger-7d9f8c-x2x4q", "a".repeat(253)]) assert.ok(validInstance(ok), ok);
  for (const bad of ["", "with space", "slash/y", "café", "a".repeat(254)]) assert.ok(!validInstance(bad), bad);
  const [a, b] = [processInstance(), processInstance()];
  assert.ok(validInstance(a) && validInstance(b), `${a} ${b}`);
  const cut = (i) => [i.slice(0, i.lastIndexOf(":")), Number(i.slice(i.lastIndexOf(":") + 1))];
  const [[pa, na], [pb, nb]] = [cut(a), cut(b)];
  assert.equal(pa, pb, "one prefix and pid per process");
  assert.ok(pa.endsWith(`:${process.pid}`), a);
  assert.ok(nb > na, "each client object takes the next number");
});

test("the instance rule: LOCK_INSTANCE (or random), pid, counter", () => {
  const random = "p-0123456789abcdef";
  const fits = "u".repeat(253 - ":4242:1".length);
  for (const [env, pid, n, want] of [
    // Valid LOCK_INSTANCE: the pod's prefix, then pid and counter.
    ["3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d", 1, 1, "3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d:1:1"],
    ["pod-a", 4242, 2, "pod-a:4242:2"],
    ["node-1.pod:pay_ledger", 7, 3, "node-1.pod:pay_ledger:7:3"],
    [fits, 4242, 1, `${fits}:4242:1`],
    // Invalid: the random prefix, as when unset.
    ["", 4242, 1, `${random}:4242:1`],
    ["with space", 4242, 1, `${random}:4242:1`],
    ["slash/y", 4242, 1, `${random}:4242:1`],
    ["café", 4242, 1, `${random}:4242:1`],
    // Too long, by itself or once the suffix is added.
    [`${fits}u`, 4242, 1, `${random}:4242:1`],
    ["u".repeat(253), 1, 1, `${random}:1:1`],
    // No LOCK_INSTANCE.
    [undefined, 1, 1, `${random}:1:1`],
    [undefined, 2 ** 32 - 1, 2n ** 64n - 1n, `${random}:4294967295:18446744073709551615`],
  ]) {
    const got = instanceFor(env, pid, n, random);
    assert.equal(got, want, `${env} ${pid} ${n}`);
    assert.ok(validInstance(got), got);
  }
});

const root = protobuf.loadSync(fileURLToPath(new URL("../proto/google/rpc/status.proto", import.meta.url)));
const Status = root.lookupType("google.rpc.Status");
const ErrorInfo = root.lookupType("google.rpc.ErrorInfo");
function details(reason, metadata = {}, domain = "lock.v1") {
  const info = ErrorInfo.encode(ErrorInfo.create({ reason, domain, metadata })).finish();
  return Status.encode(Status.create({ code: 9, message: "m", details: [{ typeUrl: "type.googleapis.com/google.rpc.ErrorInfo", value: info }] })).finish();
}

test("statuses become typed errors", () => {
  const cases = [
    [10, details("HELD"), Held, false],
    [9, details("LEAKED_HOLD"), LeakedHold, false],
    [7, details("NOT_GRANTED"), NotGranted, false],
    [3, details("INVALID_KEY"), InvalidRequest, false],
    [8, details("RATE_LIMITED", { retry_after_ms: "250" }), RateLimited, true],
    [14, details("DRAINING"), Draining, true],
    [14, null, Unavailable, true],
    [13, null, OtherError, false],
    [9, details("HELD", {}, "other.domain"), OtherError, false],
    [9, new Uint8Array([0xff, 0xff, 0xff]), OtherError, false],
  ];
  for (const [code, d, cls, transient] of cases) {
    const e = fromParts(code, "msg", d);
    assert.ok(e instanceof cls, `${code} ${cls.name}: got ${e.constructor.name}`);
    assert.equal(e.transient, transient, cls.name);
  }
});

test("refusal metadata is typed", () => {
  assert.equal(fromParts(9, "", details("REGION_REDIRECT", { region: "eu-far" })).region, "eu-far");
  assert.equal(fromParts(8, "", details("RATE_LIMITED", { retry_after_ms: "250" })).retryAfterMs, 250);
  const t = fromParts(9, "", details("WRONG_SESSION_TTL", { class: "ledger", ttl_seconds: "30" }));
  assert.ok(t instanceof WrongSessionTtl && t.ttlSeconds === 30 && t.className === "ledger");
  assert.ok(fromParts(9, "", details("REGION_REDIRECT")) instanceof RegionRedirect);
});

test("endpoints by mode", () => {
  for (const [endpoint, plaintext, ok] of [
    ["https://edge:8443", false, true],
    ["http://127.0.0.1:15001", true, true],
    ["http://[::1]:15001", true, true],
    ["http://localhost:15001", true, true],
    ["http://10.0.0.5:15001", true, false],
    ["http://edge:8443", false, false],
    ["https://edge:8443", true, false],
    ["edge:8443", false, false],
  ]) {
    if (ok) assert.doesNotThrow(() => checkEndpoint(endpoint, plaintext), endpoint);
    else assert.throws(() => checkEndpoint(endpoint, plaintext), TypeError, endpoint);
  }
});

test("a hold never shows its token", () => {
  const h = new Hold(null, "pay/x", 1, 123456789n, { fenced: false });
  for (const shown of [String(h), JSON.stringify(h)]) assert.ok(!shown.includes("123456789"), shown);
});

test("the shipped proto is the repository's lock.v1", () => {
  const repo = new URL("../../../config/proto/", import.meta.url);
  if (!existsSync(fileURLToPath(repo))) return; // outside the repository (a published package)
  for (const f of ["lock/v1/lock.proto", "google/rpc/status.proto"]) {
    assert.equal(
      readFileSync(new URL(`../proto/${f}`, import.meta.url), "utf8"),
      readFileSync(new URL(f, repo), "utf8"),
      `clients/node/proto/${f} differs from config/proto/${f}: copy it again`,
    );
  }
});

test("an acquire without onFence is refused before anything is sent (ADR-12)", async () => {
  // Port 1 on loopback: nothing listens, so a call that went out would fail UNAVAILABLE,
  // not with this TypeError.
  const c = new LockClient("http://127.0.0.1:1", meshSidecar());
  try {
    for (const opts of [undefined, {}, { waitMs: 5 }, { onFence: null }, { onFence: "stop" }]) {
      await assert.rejects(c.acquire("pay/x", opts), (e) => e instanceof TypeError && /onFence is required/.test(e.message), JSON.stringify(opts));
      await assert.rejects(c.withHold("pay/x", opts, async () => undefined), TypeError);
    }
  } finally {
    await c.shutdown();
  }
});

test("status messages are shown as the service wrote them, not percent-encoded", () => {
  for (const [wire, want] of [
    ["held by this process instance under another session (leaked hold%3F)", "held by this process instance under another session (leaked hold?)"],
    ["100%25 sure", "100% sure"],
    ["caf%C3%A9", "caf\u00e9"],
    ["no escapes here", "no escapes here"],
    ["a bad escape %ZZ stays", "a bad escape %ZZ stays"],
    ["", ""],
  ]) {
    assert.equal(decodeGrpcMessage(wire), want, wire);
  }
  // Through the one decoder every call uses: no details (a transport error) and a refusal.
  assert.equal(fromParts(14, "gone%3F", null).message, "gone?");
});
