// A fake lock.v1 service on loopback, plaintext (the client reaches it as a mesh sidecar):
// enough of the contract for unit tests of what the client does around its calls (metrics,
// campaign rounds, observe's resumes, the conformance driver) without the stack. It is not
// the service: one store, no fairness beyond a poll, one class per key prefix, refusals
// with the real ErrorInfo trailer so the client's typed errors are the real ones.
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";
import { fileURLToPath } from "node:url";

const proto = (p) => fileURLToPath(new URL(`../proto/${p}`, import.meta.url));
const definition = protoLoader.loadSync(proto("lock/v1/lock.proto"), {
  keepCase: false, longs: String, enums: String, defaults: true, includeDirs: [proto("")],
});
const Lock = grpc.loadPackageDefinition(definition).lock.v1.Lock;
const rpc = protobuf.loadSync(proto("google/rpc/status.proto"));
const Status = rpc.lookupType("google.rpc.Status");
const ErrorInfo = rpc.lookupType("google.rpc.ErrorInfo");

const CODES = { HELD: 9, NOT_GRANTED: 7, SESSION_EXPIRED: 5, STALE_TOKEN: 9, HISTORY_COMPACTED: 11, INVALID_KEY: 3, MALFORMED_REQUEST: 3 };

/** A refusal as the service sends it: a status whose details trailer holds the ErrorInfo. */
export function refusal(reason, message = reason.toLowerCase(), metadata = {}) {
  const code = CODES[reason] ?? 9;
  const info = ErrorInfo.encode(ErrorInfo.create({ reason, domain: "lock.v1", metadata })).finish();
  const details = Status.encode(Status.create({
    code, message, details: [{ typeUrl: "type.googleapis.com/google.rpc.ErrorInfo", value: info }],
  })).finish();
  const md = new grpc.Metadata();
  md.set("grpc-status-details-bin", Buffer.from(details));
  return { code, details: message, metadata: md };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts the fake. Keys under `denied/` are NOT_GRANTED; every other key is of class
 * `classOf(key)` (default: the key's first segment). `ttlSeconds`: every session's TTL.
 * A key with `permitsOf(key)` > 0 (default: 3 under `sem/`) is a semaphore: mode PERMIT
 * only, one permit per live session, the same grant to a session that asks again.
 */
export async function startFake({
  ttlSeconds = 3,
  classOf = (k) => k.split("/")[0],
  permitsOf = (k) => (k.startsWith("sem/") ? 3 : 0),
} = {}) {
  const sessions = new Map(); // id -> { expired }
  const holds = new Map(); // key -> { token, session, shared: Set<session> | null }
  const permits = new Map(); // key -> Map<permit, { session, token }>
  const observers = new Map(); // key -> Set<call>
  let revision = 100n;
  let nextSession = 1000n;
  const fake = {
    endpoint: "",
    calls: [],
    /** Every later keepalive of every session answers ttl 0: the client fences its holds. */
    expireSessions() {
      for (const s of sessions.values()) s.expired = true;
    },
    /** Ends every open Observe stream cleanly (as a proxy's idle timeout does). */
    endObservers() {
      for (const set of observers.values()) for (const call of set) call.end();
      observers.clear();
    },
    /** Resets every open Observe stream (INTERNAL, no details), as Envoy does when the
     * arbiter behind it dies. */
    resetObservers() {
      for (const set of observers.values()) for (const call of set) call.emit("error", { code: grpc.status.INTERNAL, details: "stream reset" });
      observers.clear();
    },
    /** The next Observe resuming after a revision is refused HISTORY_COMPACTED. */
    compactNext: false,
    /** Hold streams are reset (INTERNAL, no details) when they carry a release, as Envoy
     * resets them when the arbiter behind dies. */
    breakHoldStreams: false,
    holderOf: (key) => holds.get(key),
    /** Permits of `key` held by live sessions. */
    permitsHeld: (key) => livePermits(key).size,
    /** Every PERMIT release the service heard: [key, permit, token]. */
    permitReleases: [],
  };

  const free = (key) => !holds.has(key);
  const tokenOf = () => (1n << 48n) | ++revision;
  // Every change of every key, so a resumed Observe replays what it missed.
  const history = [];
  const notify = (key, event, held) => {
    const change = { event, revision: String(revision), held, holderSpiffeId: "spiffe://fake/me", className: classOf(key), storeEpoch: 1 };
    history.push([key, change]);
    for (const call of observers.get(key) ?? []) call.write(change);
  };
  const check = (key) => (key.startsWith("denied/") ? refusal("NOT_GRANTED", "no grant covers this key") : null);
  const liveSession = (id) => {
    const s = sessions.get(String(id));
    return s && !s.expired ? s : null;
  };

  /** `key`'s permits, less those of sessions gone (expired or closed). */
  function livePermits(key) {
    const held = permits.get(key) ?? new Map();
    for (const [p, h] of held) if (!liveSession(h.session)) held.delete(p);
    permits.set(key, held);
    return held;
  }

  async function takePermit(req, n) {
    const until = Date.now() + Number(req.waitMillis ?? 0);
    const session = String(req.sessionId);
    for (;;) {
      const held = livePermits(req.key);
      const mine = [...held].find(([, h]) => h.session === session);
      if (mine) return { token: String(mine[1].token), className: classOf(req.key), ttlSeconds, permit: mine[0] };
      for (let p = 0; p < n; p++) {
        if (held.has(p)) continue;
        const token = tokenOf();
        held.set(p, { session, token });
        return { token: String(token), className: classOf(req.key), ttlSeconds, permit: p };
      }
      if (Date.now() >= until) throw refusal("HELD", "every permit is held");
      await sleep(20);
    }
  }

  async function acquire(req) {
    fake.calls.push(["acquire", req.key]);
    const denied = check(req.key);
    if (denied) throw denied;
    if (!liveSession(req.sessionId)) throw refusal("SESSION_EXPIRED");
    const n = permitsOf(req.key);
    if ((req.mode === "HOLD_MODE_PERMIT") !== n > 0) throw refusal("MALFORMED_REQUEST", "PERMIT, and only PERMIT, on a semaphore's key");
    if (n > 0) return takePermit(req, n);
    const until = Date.now() + Number(req.waitMillis ?? 0);
    for (;;) {
      const h = holds.get(req.key);
      if (!h || (req.mode === "HOLD_MODE_SHARED" && h.shared)) break;
      if (Date.now() >= until) throw refusal("HELD", "held by another session");
      await sleep(20);
    }
    const token = tokenOf();
    if (req.mode === "HOLD_MODE_SHARED") {
      const h = holds.get(req.key) ?? { token, session: null, shared: new Set() };
      h.shared.add(String(req.sessionId));
      holds.set(req.key, h);
    } else {
      holds.set(req.key, { token, session: String(req.sessionId), shared: null });
      notify(req.key, "OBSERVE_EVENT_GRANTED", true);
    }
    return { token: String(token), className: classOf(req.key), ttlSeconds };
  }

  function release(req) {
    fake.calls.push(["release", req.key]);
    if (req.mode === "HOLD_MODE_PERMIT") {
      const held = livePermits(req.key);
      const found = [...held].find(([, h]) => String(h.token) === req.token);
      if (!found) throw refusal("STALE_TOKEN");
      held.delete(found[0]);
      fake.permitReleases.push([req.key, found[0], BigInt(req.token)]);
      return { releasedAtRevision: String(++revision) };
    }
    const h = holds.get(req.key);
    if (!h) throw refusal("STALE_TOKEN");
    revision += 1n;
    if (h.shared) {
      h.shared.delete(String(req.sessionId));
      if (h.shared.size === 0) holds.delete(req.key);
    } else {
      holds.delete(req.key);
      notify(req.key, "OBSERVE_EVENT_RELEASED", false);
    }
    return { releasedAtRevision: String(revision) };
  }

  const answer = (f) => async (call, cb) => {
    try {
      cb(null, await f(call.request, call));
    } catch (e) {
      cb(e);
    }
  };

  const server = new grpc.Server();
  server.addService(Lock.service, {
    openSession: answer((req) => {
      fake.calls.push(["openSession", req.key]);
      const denied = check(req.key);
      if (denied) throw denied;
      const id = String(++nextSession);
      sessions.set(id, { expired: false });
      return { sessionId: id, ttlSeconds, className: classOf(req.key) };
    }),
    keepAlive: (call) => {
      call.on("data", (req) => {
        const s = sessions.get(String(req.sessionId));
        call.write({ sessionId: req.sessionId, ttlSeconds: s && !s.expired ? String(ttlSeconds) : "0" });
      });
      call.on("end", () => call.end());
      call.on("error", () => undefined);
    },
    closeSession: answer((req) => {
      fake.calls.push(["closeSession", req.sessionId]);
      sessions.delete(String(req.sessionId));
      for (const [k, h] of holds) if (h.session === String(req.sessionId)) holds.delete(k);
      return {};
    }),
    acquire: answer(acquire),
    release: answer(release),
    hold: (call) => {
      call.on("data", async (req) => {
        try {
          if (req.acquire) call.write({ acquired: await acquire(req.acquire) });
          else if (req.release && fake.breakHoldStreams) call.emit("error", { code: grpc.status.INTERNAL, details: "stream reset" });
          else if (req.release) call.write({ released: release(req.release) });
        } catch (e) {
          call.emit("error", e);
        }
      });
      call.on("end", () => call.end());
      call.on("error", () => undefined);
    },
    acquireAll: answer(async (req) => {
      fake.calls.push(["acquireAll", req.keys.join(",")]);
      for (const k of req.keys) {
        const denied = check(k);
        if (denied) throw denied;
      }
      const until = Date.now() + Number(req.waitMillis ?? 0);
      while (!req.keys.every(free)) {
        if (Date.now() >= until) throw refusal("HELD", "a key of the set is held");
        await sleep(20);
      }
      const token = tokenOf();
      for (const k of req.keys) holds.set(k, { token, session: String(req.sessionId), shared: null });
      return { token: String(token), keys: [...req.keys].sort(), ttlSeconds };
    }),
    releaseAll: answer((req) => {
      for (const k of req.keys) holds.delete(k);
      return { releasedAtRevision: String(++revision), keys: [...req.keys].sort() };
    }),
    observe: (call) => {
      const req = call.request;
      const denied = check(req.key);
      if (denied) return call.emit("error", denied);
      if (fake.compactNext && BigInt(req.afterRevision) > 0n) {
        fake.compactNext = false;
        const e = refusal("HISTORY_COMPACTED", "compacted", { compact_revision: String(revision) });
        return call.emit("error", e);
      }
      const after = BigInt(req.afterRevision);
      if (after === 0n) {
        const held = holds.has(req.key);
        call.write({ event: "OBSERVE_EVENT_CURRENT", revision: String(revision), held, holderSpiffeId: held ? "spiffe://fake/me" : "", className: classOf(req.key), storeEpoch: 1 });
      } else {
        for (const [k, change] of history) if (k === req.key && BigInt(change.revision) > after) call.write(change);
      }
      if (!observers.has(req.key)) observers.set(req.key, new Set());
      observers.get(req.key).add(call);
      call.on("cancelled", () => observers.get(req.key)?.delete(call));
    },
  });
  const port = await new Promise((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  fake.endpoint = `http://127.0.0.1:${port}`;
  fake.close = () => server.forceShutdown();
  return fake;
}
