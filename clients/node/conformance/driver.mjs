// The Node client's conformance driver (clients/conformance/README.md): JSON commands on
// stdin, one answer per command and events on stdout, one whole line each. It holds no lock
// rule of its own: every command is one call of the client's public API (the built
// ../dist/index.js), and every reason is read from the client's typed errors.
//
//   node clients/node/conformance/driver.mjs   (after `npm run build` in clients/node)
//
// Environment: LOCK_ENDPOINT (`host:port` of the edge; a full `https://` URL is taken as
// it is, and `http://` to loopback reaches a plaintext sidecar, as the unit test's fake
// service is reached), LOCK_SVID, LOCK_SVID_KEY, LOCK_CA. The Node client verifies the
// edge's certificate by its DNS name (svidFiles' serverName, default `localhost`, which the
// dev stack's edge certificate carries), not by its SPIFFE ID: LOCK_SERVER_ID is not read.
// LOCK_INSTANCE is read by the client itself (its default instance).
import { createInterface } from "node:readline";
import { Fenced, InvalidRequest, LockClient, LockError, meshSidecar, svidFiles } from "../dist/index.js";

/** Names chosen by the conductor -> objects. */
const clients = new Map();
const holds = new Map();
const observations = new Map();

/** One line, written whole: a single write of one string (Node runs one callback at a time,
 * so two lines never interleave). */
function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

/** A command the driver cannot perform: answered DRIVER. */
class DriverError extends Error {}

/**
 * The reason of a failed call, from the client's typed error: the lock.v1 reason it
 * carries; for one raised before anything was sent, its type (Fenced: a release of a hold
 * already fenced; InvalidRequest: a request refused locally); UNAVAILABLE for one that
 * carries no reason (a transport failure, a local timeout).
 */
function reasonOf(e) {
  if (e instanceof DriverError) return "DRIVER";
  if (e instanceof LockError) {
    if (e.reason) return e.reason;
    if (e instanceof Fenced) return "FENCED";
    if (e instanceof InvalidRequest) return "INVALID_KEY";
    return "UNAVAILABLE";
  }
  // Not the library's refusal: a TypeError for a malformed command, or a driver bug.
  return "DRIVER";
}

function need(cmd, field, type) {
  const v = cmd[field];
  const ok = type === "array" ? Array.isArray(v) : typeof v === type;
  if (!ok) throw new DriverError(`${cmd.op}: field ${JSON.stringify(field)} must be a ${type}`);
  return v;
}

function named(map, kind, name) {
  const v = map.get(name);
  if (v === undefined) throw new DriverError(`no ${kind} named ${JSON.stringify(name)}`);
  return v;
}

function env(name) {
  const v = process.env[name];
  if (!v) throw new DriverError(`${name} is not set`);
  return v;
}

function newClient(instance) {
  const endpoint = env("LOCK_ENDPOINT");
  const options = instance === undefined ? {} : { instance };
  if (endpoint.startsWith("http://")) return new LockClient(endpoint, meshSidecar(), options);
  const url = endpoint.includes("://") ? endpoint : `https://${endpoint}`;
  return new LockClient(url, svidFiles(env("LOCK_SVID"), env("LOCK_SVID_KEY"), env("LOCK_CA")), options);
}

/** The fence callback of hold `name`: the event, written when the client fences it. */
const fenceOf = (name) => () => emit({ event: "fenced", hold: name });

/** What `state` and `release` need of any hold (a Hold, HeldSet, SharedHold or Leadership). */
function asHold(h) {
  return {
    token: h.token,
    canStart: () => h.canStart(),
    fenced: () => h.fenced,
    remainingMs: () => h.remainingTtlMs(),
    release: () => h.release(),
  };
}
function asLeadership(l) {
  return {
    token: l.term,
    canStart: () => l.canLead(),
    fenced: () => l.fenced,
    remainingMs: () => l.remainingTtlMs(),
    release: () => l.resign(),
  };
}

/** Takes a hold by `take(client, onFence, waitMs)` and keeps it under the command's name.
 * `wait_ms` absent: `absent` (0 for acquires: no wait). */
async function hold(cmd, take, wrap, absent = 0) {
  const client = named(clients, "client", need(cmd, "client", "string"));
  const name = need(cmd, "hold", "string");
  if (holds.has(name)) throw new DriverError(`hold ${JSON.stringify(name)} exists already`);
  const waitMs = cmd.wait_ms === undefined || cmd.wait_ms === null ? absent : need(cmd, "wait_ms", "number");
  const h = wrap(await take(client, fenceOf(name), waitMs));
  holds.set(name, h);
  return { token: h.token.toString() };
}

/** Writes every change of `obs` as an event until it ends; a failure is an event too. */
async function pump(name, obs, first) {
  const write = (o) => emit({ event: "observed", obs: name, revision: o.revision.toString(), held: o.held, kind: o.change });
  write(first);
  try {
    for (;;) {
      const r = await obs.next();
      if (r.done) return;
      write(r.value);
    }
  } catch (e) {
    emit({ event: "observe_error", obs: name, reason: reasonOf(e), message: e?.message ?? String(e) });
  }
}

const OPS = {
  async client(cmd) {
    const name = need(cmd, "client", "string");
    if (clients.has(name)) throw new DriverError(`client ${JSON.stringify(name)} exists already`);
    const instance = cmd.instance === undefined || cmd.instance === null ? undefined : need(cmd, "instance", "string");
    const c = newClient(instance);
    clients.set(name, c);
    return { instance: c.instance };
  },
  acquire: (cmd) =>
    hold(cmd, (c, onFence, waitMs) => c.acquire(need(cmd, "key", "string"), { waitMs, onFence }), asHold),
  acquire_shared: (cmd) =>
    hold(cmd, (c, onFence, waitMs) => c.acquireShared(need(cmd, "key", "string"), { waitMs, onFence }), asHold),
  acquire_all: (cmd) =>
    hold(cmd, (c, onFence, waitMs) => c.acquireAll(need(cmd, "keys", "array"), { waitMs, onFence }), asHold),
  // Without wait_ms a campaign lasts until this client leads (the library's default).
  campaign: (cmd) =>
    hold(cmd, (c, onFence, waitMs) => c.campaign(need(cmd, "key", "string"), { waitMs, onFence }), asLeadership, undefined),
  async release(cmd) {
    const h = named(holds, "hold", need(cmd, "hold", "string"));
    await h.release();
    return {};
  },
  async state(cmd) {
    const h = named(holds, "hold", need(cmd, "hold", "string"));
    const fenced = h.fenced();
    return { can_start: h.canStart(), fenced, remaining_ms: fenced ? 0 : Math.floor(h.remainingMs()) };
  },
  async observe(cmd) {
    const client = named(clients, "client", need(cmd, "client", "string"));
    const name = need(cmd, "obs", "string");
    if (observations.has(name)) throw new DriverError(`observation ${JSON.stringify(name)} exists already`);
    const obs = client.observe(need(cmd, "key", "string"));
    observations.set(name, obs);
    // Open once the stream has answered (its first change, `current`): then the answer,
    // then that change and every later one as events.
    let first;
    try {
      first = await obs.next();
    } catch (e) {
      observations.delete(name);
      throw e;
    }
    if (first.done) throw new DriverError(`observation ${JSON.stringify(name)} ended before it opened`);
    return { after: () => void pump(name, obs, first.value) };
  },
  async shutdown(cmd) {
    await named(clients, "client", need(cmd, "client", "string")).shutdown();
    return {};
  },
  async exit() {
    return { after: () => process.stdout.write("", () => process.exit(0)) };
  },
};

/** One command, on its own: answered exactly once. */
async function handle(line) {
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch (e) {
    emit({ id: null, ok: false, reason: "DRIVER", message: `not a JSON command: ${e.message}` });
    return;
  }
  const id = cmd?.id ?? null;
  let after;
  try {
    const op = typeof cmd?.op === "string" && Object.hasOwn(OPS, cmd.op) ? OPS[cmd.op] : null;
    if (!op) throw new DriverError(`unknown op ${JSON.stringify(cmd?.op)}`);
    const { after: then, ...fields } = await op(cmd);
    after = then;
    emit({ id, ok: true, ...fields });
  } catch (e) {
    // The message only: a LockError's message is the service's text, never a token.
    emit({ id, ok: false, reason: reasonOf(e), message: e?.message ?? String(e) });
  }
  after?.();
}

const input = createInterface({ input: process.stdin, crlfDelay: Infinity });
input.on("line", (line) => {
  if (line.trim() !== "") void handle(line);
});
// The conductor is gone: nothing more will be asked or read.
input.on("close", () => process.exit(0));
