// The client: sessions per TTL and cluster, each renewed by one KeepAlive stream; acquire
// with waiting and retries inside the caller's deadline; re-entrancy; holds. Mirrors the
// Rust lock-client (client/src) and the Python client: a reader of one can read the others.

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { fileURLToPath } from "node:url";
import { channelArgs, checkEndpoint, stamp, type Credentials } from "./connect.js";
import type { MeterProvider } from "@opentelemetry/api";
import {
  Fenced,
  fromGrpcError,
  Held,
  InvalidRequest,
  LockError,
  SessionExpired,
  Unavailable,
  WrongSessionPlace,
  WrongSessionTtl,
  RateLimited,
} from "./errors.js";
import { encodeKey, INSTANCE_METADATA, METADATA_KEY, processInstance, tagOf } from "./keys.js";
import { describeLapse, Liveness, type Lapse } from "./liveness.js";
import { CAMPAIGN_ROUND_MS, Leadership, MIN_ROUND_MS, type CampaignOptions } from "./election.js";
import { ClientMetrics, type HoldMeter, type HoldOutcome, UNKNOWN_CLASS, waitOutcome } from "./metrics.js";
import { Observation, type ObserveOptions } from "./observe.js";
import { Permit } from "./permit.js";

/** Attempts of one acquire (transient errors, session changes), within its deadline. */
const MAX_TRIES = 32;
/** Keys whose cluster (and class) the client remembers (past it the memory starts over). */
const MAX_PLACES = 4096;
/** Bound on one unary call beyond the wait the service was asked for. */
const CALL_SLACK_MS = 10_000;
/** Bound on one CloseSession during shutdown. */
const CLOSE_TIMEOUT_MS = 5_000;
/** The longest wait a caller may ask for; the service grants at most 300 s. */
const MAX_WAIT_MS = 24 * 3600 * 1000;

const now = (): number => performance.now();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const jitter = (ms: number): number => ms * (0.75 + Math.random() * 0.5);

// The lock.v1 service, loaded from the proto shipped with the package. int64/fixed64 are
// strings on the way in and out (no precision lost; tokens become bigint at the API).
const definition = protoLoader.loadSync(fileURLToPath(new URL("../proto/lock/v1/lock.proto", import.meta.url)), {
  keepCase: false,
  longs: String,
  defaults: true,
  includeDirs: [fileURLToPath(new URL("../proto/", import.meta.url))],
});
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const LockService = (grpc.loadPackageDefinition(definition) as any).lock.v1.Lock as grpc.ServiceClientConstructor;

/* eslint-disable @typescript-eslint/no-explicit-any */
type Stub = grpc.Client & Record<string, any>;

function keyed(key: string, extra: [string, string][] = []): grpc.Metadata {
  const md = new grpc.Metadata();
  md.set(METADATA_KEY, encodeKey(key));
  for (const [k, v] of extra) md.set(k, v);
  return md;
}

function unary<T>(stub: Stub, method: string, req: object, md: grpc.Metadata, timeoutMs: number): Promise<T> {
  return new Promise((resolve, reject) => {
    stub[method](req, md, { deadline: new Date(Date.now() + timeoutMs) }, (err: grpc.ServiceError | null, res: T) => {
      if (err) reject(fromGrpcError(err));
      else resolve(res);
    });
  });
}

export type FenceFn = () => void;

/** One KeepAlive call: a renewal writes a request and waits (bounded) for its answer. */
class KeepAliveStream {
  private readonly call: grpc.ClientDuplexStream<any, any>;
  private waiting: { resolve: (ttl: number) => void; reject: (e: LockError) => void } | null = null;
  private ended: LockError | null = null;

  constructor(stub: Stub) {
    this.call = stub["keepAlive"]();
    this.call.on("data", (r: { ttlSeconds: string }) => this.settle(null, Number(r.ttlSeconds)));
    this.call.on("error", (e: unknown) => this.settle(fromGrpcError(e), 0));
    this.call.on("end", () => this.settle(new StreamEnded("keepalive stream ended"), 0));
  }

  private settle(err: LockError | null, ttl: number): void {
    if (err && !this.ended) this.ended = err;
    const w = this.waiting;
    this.waiting = null;
    if (!w) return;
    if (err) w.reject(err);
    else w.resolve(ttl);
  }

  renew(sessionId: string, waitMs: number): Promise<void> {
    if (this.ended) return Promise.reject(this.ended);
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting = null;
        reject(new Unavailable("keepalive timed out"));
      }, Math.max(waitMs, 1));
      this.waiting = {
        resolve: (ttl) => {
          clearTimeout(timer);
          if (ttl > 0) resolve();
          else reject(new SessionExpired("the session's lease is gone"));
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.call.write({ sessionId });
    });
  }

  close(): void {
    this.call.end();
    this.call.cancel();
  }
}

/** Open `Hold` streams per client before acquires fall back to the unary calls. */
export const DEFAULT_MAX_HOLD_STREAMS = 1024;

/**
 * A hold as one `Hold` stream (issue 33): the acquire and, later, its release on one
 * HTTP/2 stream, one request at the edge instead of two. The stream is only a transport:
 * the hold lives on the session, so a release the stream cannot carry (it ended: the
 * arbiter drained, a proxy's idle timeout) goes as the unary call.
 */
class HoldLink {
  private readonly call: grpc.ClientDuplexStream<any, any>;
  private waiting: { resolve: (r: any) => void; reject: (e: LockError) => void } | null = null;
  private ended: LockError | null = null;

  constructor(stub: Stub, key: string) {
    this.call = stub["hold"](keyed(key));
    this.call.on("data", (r: any) => this.settle(null, r));
    this.call.on("error", (e: unknown) => this.settle(fromGrpcError(e), null));
    this.call.on("end", () => this.settle(new StreamEnded("the hold stream ended"), null));
  }

  private settle(err: LockError | null, answer: any): void {
    if (err && !this.ended) this.ended = err;
    const w = this.waiting;
    this.waiting = null;
    if (!w) return;
    if (err) w.reject(err);
    else w.resolve(answer);
  }

  /** Sends `ask` and waits (bounded) for the one answer it gets. */
  ask(ask: object, waitMs: number): Promise<any> {
    if (this.ended) return Promise.reject(this.ended);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting = null;
        this.close();
        reject(new Unavailable("the hold stream did not answer in time"));
      }, Math.max(waitMs, 1));
      this.waiting = {
        resolve: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.call.write(ask);
    });
  }

  close(): void {
    this.call.end();
    this.call.cancel();
  }
}

/** The server ended the KeepAlive stream cleanly (an arbiter draining). */
class StreamEnded extends Unavailable {}

/**
 * One lease for this client per TTL, renewed by one KeepAlive stream however many holds it
 * carries (ADR-10). Its loop sends a keepalive every TTL/3, records the send time of each
 * success, and fences every hold of the session at the deadline.
 */
class Session {
  readonly id: string;
  private readonly live: Liveness;
  private readonly fences = new Map<number, FenceFn>();
  private stopped = false;
  private wake: (() => void) | null = null;

  constructor(id: string, ttlMs: number, openedAt: number, private readonly stub: () => Stub) {
    this.id = id;
    this.live = new Liveness(ttlMs, openedAt);
    void this.keepAlive();
  }

  get ttlMs(): number {
    return this.live.ttlMs;
  }
  get fenced(): boolean {
    return this.live.fenced;
  }
  canStart(): boolean {
    return this.live.canStart(now());
  }
  remaining(): number {
    return this.live.remaining(now());
  }
  lapse(): Lapse | null {
    return this.live.coveredUntil(now());
  }
  attach(hold: number, onFence: FenceFn | undefined): void {
    if (onFence) this.fences.set(hold, onFence);
  }
  detach(hold: number): void {
    this.fences.delete(hold);
  }

  /** Closed by its owner: dead from now on, and no onFence runs. */
  close(): void {
    this.live.expire();
    this.fences.clear();
    this.stopped = true;
    this.wake?.();
  }

  private fenceAll(due: (l: Liveness) => boolean): void {
    if (!due(this.live)) return;
    const callbacks = [...this.fences.values()];
    this.fences.clear();
    for (const f of callbacks) {
      try {
        f();
      } catch (e) {
        // A caller's bug must not stop the fencing of the others.
        console.error("lock-client: onFence threw", e);
      }
    }
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.wake = null;
        resolve();
      }, Math.max(ms, 0));
      // Renewals alone do not keep a process alive: holds belong to work that does.
      t.unref();
      this.wake = () => {
        clearTimeout(t);
        this.wake = null;
        resolve();
      };
    });
  }

  private async keepAlive(): Promise<void> {
    const period = this.live.ttlMs / 3;
    let stream: KeepAliveStream | null = null;
    let nextAt = now() + period;
    try {
      while (!this.stopped) {
        const deadline = this.live.deadline();
        await this.pause(Math.min(nextAt, deadline) - now());
        if (this.stopped) return;
        const t = now();
        this.fenceAll((l) => l.fenceDue(t));
        if (this.fenced) return;
        if (t < nextAt) continue;
        const sent = now();
        const waitMs = Math.max(Math.min(period, deadline - sent), 0);
        try {
          stream ??= new KeepAliveStream(this.stub());
          try {
            await stream.renew(this.id, waitMs);
          } catch (e) {
            if (!(e instanceof StreamEnded)) throw e;
            // Ended cleanly (a drain): reopen at once, through the edge, on another arbiter.
            stream.close();
            stream = new KeepAliveStream(this.stub());
            await stream.renew(this.id, Math.max(deadline - now(), 0));
          }
          this.live.renewed(sent);
          nextAt = sent + period;
        } catch (e) {
          if (e instanceof SessionExpired) {
            this.fenceAll((l) => l.expire());
            return;
          }
          this.live.failed();
          stream?.close();
          stream = null;
          // Retry sooner than a full period while the deadline allows.
          nextAt = now() + period / 3;
        }
      }
    } finally {
      stream?.close();
    }
  }
}

interface Reentry {
  count: number;
  token: bigint;
  session: Session;
  /** The hold's open `Hold` stream, which carries its release (null: unary). */
  link: HoldLink | null;
  measured: Measured;
}

/** The outermost permit grant of a key on this client, and how many Permits share it. */
interface PermitEntry {
  count: number;
  permit: number;
  token: bigint;
  session: Session;
  measured: Measured;
}

/** A grant being measured for the hold-time metric, and the hook on its session that ends
 * it when the session is fenced (its own hook: the count of lost holds does not depend on
 * what the caller's onFence does). */
interface Measured {
  meter: HoldMeter;
  session: Session;
  hook: number;
}

/**
 * A granted lock. Pass `token` to the guarded write; check `canStart()` before each unit of
 * work; `release()` when done (or use `LockClient.withHold`). Never log the token.
 */
export class Hold {
  private done = false;

  /** @internal */
  constructor(
    private readonly client: LockClient,
    readonly key: string,
    private readonly holdId: number,
    /** The fencing token: compare it in the resource's own conditional write. */
    readonly token: bigint,
    private readonly session: Session,
  ) {}

  /** False from the first failed renewal on: finish in-flight work, start nothing new. */
  canStart(): boolean {
    return this.session.canStart();
  }
  /** Milliseconds left before the local deadline at which the hold is fenced. */
  remainingTtlMs(): number {
    return this.session.remaining();
  }
  /** The hold was fenced (its onFence ran): it is dead. */
  get fenced(): boolean {
    return this.session.fenced;
  }
  /** True if the hold covered every instant from its grant until now: ask when the guarded
   * work ends. False once the session passed its local deadline, even if the renewal timer
   * has not fenced yet (a process frozen past the TTL). */
  wasContinuous(): boolean {
    return this.session.lapse() === null;
  }
  /** Why the hold was not continuous, if it was not. */
  lapse(): Lapse | null {
    return this.session.lapse();
  }
  /** @internal */
  get sessionId(): string {
    return this.session.id;
  }

  /** Releases this acquire; only the outermost hold of a key calls the service. Rejects
   * with Fenced if the hold was fenced: its work may not have been exclusive. */
  async release(): Promise<void> {
    if (this.done) return;
    this.done = true;
    await this.client.finish(this.key, this.holdId, this.token, this.session);
  }

  /** Never the token: it is a capability. */
  toString(): string {
    return `Hold(key=${JSON.stringify(this.key)}, fenced=${this.fenced})`;
  }
  toJSON(): object {
    return { key: this.key, fenced: this.fenced };
  }
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}

/** What a set and a shared hold share: liveness, and one release. Never log the token. */
abstract class OtherHold {
  private done = false;

  /** @internal */
  constructor(
    protected readonly client: LockClient,
    protected readonly holdId: number,
    /** The fencing token. */
    readonly token: bigint,
    protected readonly session: Session,
    /** @internal */
    protected readonly measured: Measured,
  ) {}

  /** False from the first failed renewal: finish in-flight work, start nothing new. */
  canStart(): boolean {
    return this.session.canStart();
  }
  /** Milliseconds left before the local deadline at which the hold is fenced (0 once fenced). */
  remainingTtlMs(): number {
    return this.session.remaining();
  }
  get fenced(): boolean {
    return this.session.fenced;
  }
  wasContinuous(): boolean {
    return this.session.lapse() === null;
  }
  async release(): Promise<void> {
    if (this.done) return;
    this.done = true;
    await this.end();
  }
  protected abstract end(): Promise<void>;
  abstract toString(): string;
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}

/** Keys granted together by `acquireAll`: `token` is every key's; `release()` ends them in
 * one transaction. */
export class HeldSet extends OtherHold {
  /** @internal */
  constructor(client: LockClient, readonly keys: string[], holdId: number, token: bigint, session: Session, measured: Measured) {
    super(client, holdId, token, session, measured);
  }
  protected end(): Promise<void> {
    return this.client.finishOther("set", this.keys, this.holdId, this.token, this.session, this.measured);
  }
  toString(): string {
    return `HeldSet(keys=${JSON.stringify(this.keys)}, fenced=${this.fenced})`;
  }
  toJSON(): object {
    return { keys: this.keys, fenced: this.fenced };
  }
}

/** A shared hold (`acquireShared`). Its token is above the last exclusive grant of the key
 * before it: a resource that keeps its last writer's token serves reads only under a token at
 * least that one. */
export class SharedHold extends OtherHold {
  /** @internal */
  constructor(client: LockClient, readonly key: string, holdId: number, token: bigint, session: Session, measured: Measured) {
    super(client, holdId, token, session, measured);
  }
  protected end(): Promise<void> {
    return this.client.finishOther("shared", this.key, this.holdId, this.token, this.session, this.measured);
  }
  toString(): string {
    return `SharedHold(key=${JSON.stringify(this.key)}, fenced=${this.fenced})`;
  }
  toJSON(): object {
    return { key: this.key, fenced: this.fenced };
  }
}

/** JavaScript callers have no compiler to tell them: an acquire without onFence is refused
 * before anything is sent (ADR-12). */
function requireOnFence(call: string, opts: { onFence?: unknown } | undefined): void {
  if (typeof opts?.onFence !== "function") {
    throw new TypeError(
      `${call}: opts.onFence is required (ADR-12): the function that stops your work if the hold is fenced`,
    );
  }
}

export interface AcquireOptions {
  /** How long to wait for a held key, in milliseconds (0: refuse at once). */
  waitMs?: number;
  /**
   * Required (ADR-12): runs if the hold is lost (its session could not be renewed in time)
   * and must stop the work the hold guards. Code that truly has nothing to stop says so
   * with `() => {}`, visibly, rather than by leaving it out.
   */
  onFence: FenceFn;
}

export interface ClientOptions {
  /** This client among the replicas of its identity, sent with every OpenSession as
   * `lock-instance`, as it is. Default `processInstance()`: `<LOCK_INSTANCE (the pod UID),
   * else random once per process>:<pid>:<n>`, `n` counting this process's client objects
   * from 1. */
  instance?: string;
  /** Where the client's metrics go (`lock.client.wait.duration`, `lock.client.hold.duration`,
   * `lock.client.holds.lost`). Default: `metrics.getMeterProvider()` of @opentelemetry/api
   * as it is when the client is built, a no-op unless the application registered an SDK
   * before. */
  meterProvider?: MeterProvider;
}

/**
 * Client of the fenced lock service through its Envoy edge.
 *
 * - One session (etcd lease) per distinct TTL, opened on first use; one KeepAlive stream
 *   per session renews every hold attached to it, every TTL/3 (ADR-10).
 * - Drain then fence (ADR-12): `canStart()` turns false at the first failed renewal; at the
 *   send time of the last successful renewal + TTL − 1 s the hold's onFence runs.
 * - Re-entrancy (ADR-13): nested acquires of a key this client holds count locally.
 * - Refusals are LockError subclasses; waits, transient errors (jittered backoff) and rate
 *   limits (retry-after) are handled inside the deadline. Keyed calls send `lock-key`.
 */
export class LockClient {
  readonly instance: string;
  private stubValue: Stub;
  private stampValue: string;
  private readonly sessions = new Map<string, Session>();
  private readonly places = new Map<string, number>();
  private readonly clusterTags = new Map<string, number>();
  /** Settles when the session being opened is open (`sessionOrOpen`). */
  private opening: Promise<void> = Promise.resolve();
  private readonly holds = new Map<string, Reentry>();
  /** Re-entrancy of semaphore permits: the outermost permit grant by key (permit.ts). */
  private readonly permits = new Map<string, PermitEntry>();
  private nextHold = 1;
  private openStreams = 0;
  private maxHoldStreams = DEFAULT_MAX_HOLD_STREAMS;
  private readonly metrics: ClientMetrics;
  /** The class the service last named for a key (OpenSession, a grant, WRONG_SESSION_TTL):
   * the metrics' `class` of an acquire whose own answer names none (a refusal). */
  private readonly classes = new Map<string, string>();
  /** Grants whose hold time is being measured: the shutdown ends them. */
  private readonly measuring = new Set<Measured>();
  /** Open observations: the shutdown closes them. */
  private readonly observations = new Set<Observation>();

  constructor(
    private readonly endpoint: string,
    private readonly credentials: Credentials,
    options: ClientOptions = {},
  ) {
    checkEndpoint(endpoint, credentials.kind === "meshSidecar");
    this.metrics = new ClientMetrics(options.meterProvider);
    this.instance = options.instance ?? processInstance();
    this.stubValue = this.newStub();
    this.stampValue = stamp(credentials);
  }

  private newStub(): Stub {
    const { target, creds, options } = channelArgs(this.endpoint, this.credentials);
    return new LockService(target, creds, options) as Stub;
  }

  /** The stub, on a new channel when the SVID files changed (rotation). */
  private stub(): Stub {
    const s = stamp(this.credentials);
    if (s !== this.stampValue) {
      // The old channel stays open for the streams already on it.
      this.stubValue = this.newStub();
      this.stampValue = s;
    }
    return this.stubValue;
  }

  /** At most `max` holds of this client keep their `Hold` stream open (default
   * DEFAULT_MAX_HOLD_STREAMS); past it acquires use the unary calls. 0: unary calls only
   * (a proxy on the way that does not carry bidirectional streams). */
  limitHoldStreams(max: number): void {
    this.maxHoldStreams = max;
  }

  /** Hold streams open now (holds whose release will travel on their own stream). */
  openHoldStreams(): number {
    return this.openStreams;
  }

  /** The acquire on a `Hold` stream when the budget allows (kept for the release), else
   * the unary call. */
  private async grant(key: string, sessionId: string, waitMs: number): Promise<[bigint, HoldLink | null]> {
    const req = { key, sessionId, waitMillis: String(Math.floor(waitMs)) };
    if (this.openStreams >= this.maxHoldStreams) {
      const r = await unary<{ token: string; className: string }>(this.stub(), "acquire", req, keyed(key), waitMs + CALL_SLACK_MS);
      this.learnClass(key, r.className);
      return [BigInt(r.token), null];
    }
    const link = new HoldLink(this.stub(), key);
    this.openStreams += 1;
    try {
      const answer = await link.ask({ acquire: req }, waitMs + CALL_SLACK_MS);
      if (!answer?.acquired) throw new Unavailable("the hold stream answered without a grant");
      this.learnClass(key, answer.acquired.className);
      return [BigInt(answer.acquired.token), link];
    } catch (e) {
      this.closeLink(link);
      throw e;
    }
  }

  private closeLink(link: HoldLink): void {
    link.close();
    this.openStreams -= 1;
  }

  /** Takes `key`, waiting up to `waitMs` for it. */
  async acquire(key: string, opts: AcquireOptions): Promise<Hold> {
    requireOnFence("acquire", opts);
    const started = now();
    try {
      const { hold, fresh } = await this.take(key, opts.waitMs ?? 0, opts.onFence);
      // A nested acquire made no call: it has no wait to count.
      if (fresh) this.metrics.waited(this.classOf(key), "granted", started);
      return hold;
    } catch (e) {
      this.metrics.waited(this.classOf(key), waitOutcome(e), started);
      throw e;
    }
  }

  /**
   * The exclusive acquire behind `acquire` and `campaign`, which measure its wait: nested
   * when this client holds `key` already (`fresh` false: no call was made).
   */
  private async take(key: string, waitMs: number, onFence: FenceFn): Promise<{ hold: Hold; fresh: boolean }> {
    const holdId = this.nextHold++;
    const entry = this.holds.get(key);
    if (entry && entry.session.fenced) {
      if (entry.link) this.closeLink(entry.link);
      this.holds.delete(key);
    } else if (entry) {
      entry.count += 1;
      entry.session.attach(holdId, onFence);
      return { hold: new Hold(this, key, holdId, entry.token, entry.session), fresh: false };
    }
    const deadline = now() + Math.min(Math.max(waitMs, 0), MAX_WAIT_MS);
    const [[token, link], s] = await this.onSession(key, key, deadline, (s, left) => this.grant(key, s.id, left));
    s.attach(holdId, onFence);
    const measured = this.measure(this.classOf(key), s);
    this.holds.set(key, { count: 1, token, session: s, link, measured });
    return { hold: new Hold(this, key, holdId, token, s), fresh: true };
  }

  /**
   * Campaigns for the leadership of `key` (issue 35): waits in its FIFO queue until this
   * client leads, or `opts.waitMs` runs out (rejects with Held: another leads). Leadership
   * is the hold, and `Leadership.term` its fencing token. The service ends a wait after
   * 300 s; the campaign asks again, behind the candidates that queued meanwhile. A refusal
   * that waiting cannot cure (NotGranted, InvalidRequest, LeakedHold...) rejects at once.
   * Replicas of one identity campaign like any candidates.
   */
  async campaign(key: string, opts: CampaignOptions): Promise<Leadership> {
    requireOnFence("campaign", opts);
    const started = now();
    const deadline = opts.waitMs === undefined ? Infinity : started + Math.max(opts.waitMs, 0);
    for (;;) {
      const round = now();
      try {
        const { hold, fresh } = await this.take(key, Math.min(Math.max(deadline - round, 0), CAMPAIGN_ROUND_MS), opts.onFence);
        if (fresh) this.metrics.waited(this.classOf(key), "granted", started);
        return new Leadership(hold);
      } catch (e) {
        // The round ended with the key still held: still a candidate while time is left,
        // and not in a spin when a round is refused at once.
        const left = deadline - now();
        if (e instanceof Held && left > 0) {
          if (now() - round < MIN_ROUND_MS) await sleep(Math.min(MIN_ROUND_MS, left));
          if (deadline - now() > 0) continue;
        }
        this.metrics.waited(this.classOf(key), waitOutcome(e), started);
        throw e;
      }
    }
  }

  /**
   * Observes `key` (issue 35): its holder now (`current`), then every change (granted,
   * released, expired, closed, forced, revoked), reconnecting and resuming by itself. A
   * hint, never a grant: to act on a key, acquire it. Answers about this client's own
   * hold of the key carry its token.
   *
   * `for await (const o of locks.observe(key)) { ... }`; `close()` ends it, as does the
   * client's shutdown.
   */
  observe(key: string, opts: ObserveOptions = {}): Observation {
    const o = new Observation(
      key,
      (req) => this.stub()["observe"](req, keyed(key)),
      () => this.ownSession(key),
      (closed) => this.observations.delete(closed),
      opts,
    );
    this.observations.add(o);
    return o;
  }

  /**
   * Takes every key of `keys` together (AcquireAll): all or nothing, in one transaction, one
   * token for every key. Waiting holds nothing, so callers asking for overlapping sets in any
   * order cannot deadlock. The keys must be of classes with one TTL, on one store, neither
   * durable nor shared (KeySetRefused otherwise).
   */
  async acquireAll(keys: string[], opts: AcquireOptions): Promise<HeldSet> {
    requireOnFence("acquireAll", opts);
    if (keys.length === 0) throw new InvalidRequest("a key set has 1..=16 keys");
    const first = [...keys].sort()[0] ?? "";
    const started = now();
    const deadline = started + Math.min(Math.max(opts.waitMs ?? 0, 0), MAX_WAIT_MS);
    let answer: [{ token: string; keys: string[] }, Session];
    try {
      // A WRONG_SESSION_TTL names one key's class, not the set's: not learnt (null).
      answer = await this.onSession<{ token: string; keys: string[] }>(first, null, deadline, (s, left) =>
        // No lock-key: the edge decides a set on every key of its body.
        unary<{ token: string; keys: string[] }>(
          this.stub(),
          "acquireAll",
          { keys, sessionId: s.id, waitMillis: String(Math.floor(left)) },
          new grpc.Metadata(),
          left + CALL_SLACK_MS,
        ),
      );
    } catch (e) {
      this.metrics.waited(this.classOf(first), waitOutcome(e), started);
      throw e;
    }
    const [r, s] = answer;
    // AcquireAll's answer names no class: a set counts under its first key's (sort order).
    const className = this.classOf(first);
    this.metrics.waited(className, "granted", started);
    const holdId = this.nextHold++;
    s.attach(holdId, opts.onFence);
    return new HeldSet(this, r.keys, holdId, BigInt(r.token), s, this.measure(className, s));
  }

  /**
   * Takes `key` shared (a `shared: true` class): many sessions hold it at once; an exclusive
   * acquire of it waits for all of them, and while one waits, new shared holds wait behind it.
   */
  async acquireShared(key: string, opts: AcquireOptions): Promise<SharedHold> {
    requireOnFence("acquireShared", opts);
    const started = now();
    const deadline = started + Math.min(Math.max(opts.waitMs ?? 0, 0), MAX_WAIT_MS);
    let answer: [{ token: string; className: string }, Session];
    try {
      answer = await this.onSession(key, key, deadline, (s, left) =>
        unary<{ token: string; className: string }>(
          this.stub(),
          "acquire",
          { key, sessionId: s.id, waitMillis: String(Math.floor(left)), mode: "HOLD_MODE_SHARED" },
          keyed(key),
          left + CALL_SLACK_MS,
        ),
      );
    } catch (e) {
      this.metrics.waited(this.classOf(key), waitOutcome(e), started);
      throw e;
    }
    const [r, s] = answer;
    this.learnClass(key, r.className);
    const className = this.classOf(key);
    this.metrics.waited(className, "granted", started);
    const holdId = this.nextHold++;
    s.attach(holdId, opts.onFence);
    return new SharedHold(this, key, holdId, BigInt(r.token), s, this.measure(className, s));
  }

  /**
   * Takes one permit of `key`, a key of a semaphore class (`permits: N`): up to N sessions
   * hold it at once, each on its own permit (`Permit.permit`, 0..N-1) with its own token.
   * Waits up to `waitMs` in the key's FIFO queue while all N are held (Held when the wait
   * ends). Asked again while this client holds a permit of the key, it returns that permit,
   * nested: only the last release calls the service. A key of any other class is
   * InvalidRequest (MALFORMED_REQUEST).
   */
  async acquirePermit(key: string, opts: AcquireOptions): Promise<Permit> {
    requireOnFence("acquirePermit", opts);
    const holdId = this.nextHold++;
    const entry = this.permits.get(key);
    if (entry && entry.session.fenced) {
      // Fenced: the grant is gone; its Permits still end by their own release.
      this.permits.delete(key);
    } else if (entry) {
      entry.count += 1;
      entry.session.attach(holdId, opts.onFence);
      return this.permitOf(key, holdId, entry);
    }
    const started = now();
    const deadline = started + Math.min(Math.max(opts.waitMs ?? 0, 0), MAX_WAIT_MS);
    type Granted = { token: string; className: string; permit: number };
    let answer: [Granted, Session];
    try {
      answer = await this.onSession(key, key, deadline, (s, left) =>
        unary<Granted>(
          this.stub(),
          "acquire",
          { key, sessionId: s.id, waitMillis: String(Math.floor(left)), mode: "HOLD_MODE_PERMIT" },
          keyed(key),
          left + CALL_SLACK_MS,
        ),
      );
    } catch (e) {
      this.metrics.waited(this.classOf(key), waitOutcome(e), started);
      throw e;
    }
    const [r, s] = answer;
    this.learnClass(key, r.className);
    const className = this.classOf(key);
    this.metrics.waited(className, "granted", started);
    s.attach(holdId, opts.onFence);
    const token = BigInt(r.token);
    const held = this.permits.get(key);
    if (held && held.session === s && held.token === token) {
      // Another acquire of this client was granted the same permit meanwhile (the service
      // answers a session's second ask with its grant): nest on it, so the first release
      // does not end the other's permit.
      held.count += 1;
      return this.permitOf(key, holdId, held);
    }
    const granted: PermitEntry = { count: 1, permit: r.permit, token, session: s, measured: this.measure(className, s) };
    this.permits.set(key, granted);
    return this.permitOf(key, holdId, granted);
  }

  private permitOf(key: string, holdId: number, e: PermitEntry): Permit {
    const { permit, token, session } = e;
    return new Permit(key, permit, token, session, () => this.finishPermit(key, holdId, token, session));
  }

  /** One Permit ends: a nested one only detaches; the last releases the grant (mode PERMIT,
   * by its token). Any of them rejects with Fenced if the grant was fenced. */
  private async finishPermit(key: string, holdId: number, token: bigint, s: Session): Promise<void> {
    s.detach(holdId);
    const entry = this.permits.get(key);
    let last: PermitEntry | null = null;
    // No entry, or a later grant's (this permit was fenced and the key taken again): not
    // this Permit's to count down.
    if (entry && entry.session === s && entry.token === token) {
      if (entry.count > 1) entry.count -= 1;
      else {
        this.permits.delete(key);
        last = entry;
      }
    }
    try {
      // Fenced: its hold time was counted when the fence ran (the end below is a no-op).
      if (s.fenced) throw new Fenced("the permit was fenced before its release");
      if (!last) return;
      const req = { key, token: token.toString(), sessionId: s.id, mode: "HOLD_MODE_PERMIT" };
      await unary(this.stub(), "release", req, keyed(key), CALL_SLACK_MS);
    } finally {
      if (last) this.endMeasure(last.measured, "released");
    }
  }

  /** @internal Ends a set or a shared hold (their `release()`). */
  async finishOther(
    kind: "set" | "shared",
    key: string | string[],
    holdId: number,
    token: bigint,
    s: Session,
    measured: Measured,
  ): Promise<void> {
    s.detach(holdId);
    try {
      // Fenced: its hold time was counted when the fence ran (the end below is a no-op).
      if (s.fenced) throw new Fenced("the hold was fenced before its release");
      if (kind === "set") {
        const keys = key as string[];
        await unary(this.stub(), "releaseAll", { keys, token: token.toString(), sessionId: s.id }, new grpc.Metadata(), CALL_SLACK_MS);
      } else {
        const k = key as string;
        const req = { key: k, token: token.toString(), sessionId: s.id, mode: "HOLD_MODE_SHARED" };
        await unary(this.stub(), "release", req, keyed(k), CALL_SLACK_MS);
      }
    } finally {
      this.endMeasure(measured, "released");
    }
  }

  /**
   * `call(session, ms left)` for `key` until it answers, the deadline passes or a refusal no
   * retry cures: a session opened for the key's class when there is none, one of the TTL or
   * on the cluster the service asks for, a new one when it expired, and transient refusals
   * waited out inside the deadline.
   */
  private async onSession<T>(
    key: string,
    classKey: string | null,
    deadline: number,
    call: (s: Session, leftMs: number) => Promise<T>,
  ): Promise<[T, Session]> {
    let session = this.sessionForKey(key);
    // The session the service asked for, once it has said (by TTL or by cluster).
    let wanted: (() => Session | null) | null = null;
    let opened: ((s: Session) => void) | undefined;
    let backoff = 50;
    let err: LockError = new Unavailable("gave up after repeated retries");
    for (let i = 0; i < MAX_TRIES; i++) {
      let s = session;
      session = null;
      try {
        s ??= await this.sessionOrOpen(key, wanted, opened);
        const left = Math.max(deadline - now(), 0);
        const answer = await call(s, left);
        this.learnPlace(key, tagOf(s.id));
        return [answer, s];
      } catch (e) {
        err = fromGrpcError(e);
      }
      if (err instanceof WrongSessionTtl) {
        if (classKey !== null) this.learnClass(classKey, err.className);
        const ttlMs = err.ttlSeconds * 1000;
        wanted = () => this.sessionFor((tl) => tl === ttlMs);
        session = wanted();
        continue;
      }
      if (err instanceof WrongSessionPlace) {
        const cluster = err.cluster;
        wanted = () => {
          const tag = this.clusterTags.get(cluster);
          return tag === undefined ? null : this.sessionFor((_, t) => t === tag);
        };
        // The session opened next (for this key) is that cluster's: remember its tag.
        opened = (o) => this.clusterTags.set(cluster, tagOf(o.id));
        session = wanted();
        continue;
      }
      if (err instanceof SessionExpired) {
        if (s) this.forgetSession(s);
        continue;
      }
      let pause: number;
      if (err instanceof RateLimited) pause = err.retryAfterMs;
      else if (err.transient) {
        backoff = Math.min(backoff * 2, 1000);
        pause = jitter(backoff);
      } else throw err;
      if (now() + pause >= deadline) throw err;
      await sleep(pause);
      session = s;
    }
    throw err;
  }

  /**
   * `await client.withHold(key, {waitMs: 5000, onFence: stopWork}, async (hold) => ...)`: the key is released
   * when `fn` settles. If the hold did not cover the whole of `fn` (fenced, or past its
   * deadline when it ended), rejects with Fenced: its work may not have been exclusive.
   */
  async withHold<T>(key: string, opts: AcquireOptions, fn: (hold: Hold) => Promise<T>): Promise<T> {
    const h = await this.acquire(key, opts);
    let result: T;
    try {
      result = await fn(h);
    } catch (e) {
      await h.release().catch(() => undefined);
      throw e;
    }
    const lapse = h.lapse();
    if (lapse !== null) {
      await h.release().catch(() => undefined);
      throw new Fenced(`the hold on ${key} did not cover the whole block (${describeLapse(lapse)})`);
    }
    await h.release();
    return result;
  }

  /**
   * Ends every hold of this client now and closes its sessions: one CloseSession per
   * session revokes its lease, so the next waiter is granted at once instead of when the
   * TTL runs out. No onFence runs: the owner ended the holds.
   */
  async shutdown(): Promise<void> {
    for (const o of [...this.observations]) o.close();
    // Every hold still held ends here: counted as ended by the shutdown, not fenced.
    for (const m of [...this.measuring]) this.endMeasure(m, "shutdown");
    const sessions = [...this.sessions.values()];
    this.sessions.clear();
    for (const h of this.holds.values()) if (h.link) this.closeLink(h.link);
    this.holds.clear();
    this.permits.clear();
    let first: LockError | null = null;
    for (const s of sessions) {
      const wasFenced = s.fenced;
      s.close();
      if (wasFenced) continue; // its holds are dead already; its lease lapses within the margin
      try {
        await unary(this.stub(), "closeSession", { sessionId: s.id }, new grpc.Metadata(), CLOSE_TIMEOUT_MS);
      } catch (e) {
        const err = fromGrpcError(e);
        if (!(err instanceof SessionExpired)) first ??= err;
      }
    }
    this.stubValue.close();
    if (first) throw first;
  }

  /** @internal */
  async finish(key: string, holdId: number, token: bigint, s: Session): Promise<void> {
    s.detach(holdId);
    const entry = this.holds.get(key);
    if (!entry) return;
    if (entry.count > 1) {
      entry.count -= 1;
      return;
    }
    this.holds.delete(key);
    const link = entry.link;
    try {
      // Fenced: its hold time was counted when the fence ran (the end below is a no-op).
      if (s.fenced) throw new Fenced("the hold was fenced before its release");
      const req = { key, token: token.toString(), sessionId: s.id };
      if (link) {
        try {
          const answer = await link.ask({ release: req }, CALL_SLACK_MS);
          if (answer?.released) return;
        } catch (e) {
          // A refusal of the service (a lock.v1 reason: STALE_TOKEN...) stands. A stream that
          // ended or broke did not release: unary below (a grant it did release answers
          // that call STALE_TOKEN). Broke means any error without a reason, not only
          // UNAVAILABLE: an arbiter restarting under the stream resets it, which grpc-js
          // reports as INTERNAL ("Received RST_STREAM with code 2"); found by the
          // conformance suite's observe-resume scenario.
          if (e instanceof LockError && e.reason !== null && !(e instanceof Unavailable)) throw e;
        }
      }
      await unary(this.stub(), "release", req, keyed(key), CALL_SLACK_MS);
    } finally {
      if (link) this.closeLink(link);
      this.endMeasure(entry.measured, "released");
    }
  }

  /**
   * The session to use when none was at hand: one another acquire opened meanwhile, or a
   * new one. Opening is serialised per client, so acquires racing on a client without a
   * session share the one opened first (ADR-10: one session per TTL per client, however
   * many holds; `Promise.all` of first acquires otherwise opened one session each).
   */
  private async sessionOrOpen(
    key: string,
    wanted: (() => Session | null) | null,
    opened?: (s: Session) => void,
  ): Promise<Session> {
    const before = this.opening;
    let done = (): void => undefined;
    this.opening = new Promise<void>((r) => (done = r));
    try {
      await before;
      const found = wanted ? wanted() : this.sessionForKey(key);
      if (found) return found;
      const s = await this.openSession(key);
      opened?.(s);
      return s;
    } finally {
      done();
    }
  }

  /** Opens the session for `key`'s class (its TTL) and starts renewing it. */
  private async openSession(key: string): Promise<Session> {
    const sent = now();
    const r = await unary<{ sessionId: string; ttlSeconds: number; className: string }>(
      this.stub(),
      "openSession",
      { key },
      keyed(key, [[INSTANCE_METADATA, this.instance]]),
      CALL_SLACK_MS,
    );
    this.learnClass(key, r.className);
    const s = new Session(r.sessionId, r.ttlSeconds * 1000, sent, () => this.stub());
    const slot = `${r.ttlSeconds}/${tagOf(r.sessionId)}`;
    const old = this.sessions.get(slot);
    this.sessions.set(slot, s);
    if (old?.fenced) old.close();
    return s;
  }

  /** @internal The live sessions (tests read their ids and tags). */
  sessionIds(): string[] {
    return [...this.sessions.values()].filter((s) => !s.fenced).map((s) => s.id);
  }

  private sessionFor(match: (ttlMs: number, tag: number) => boolean): Session | null {
    for (const s of this.sessions.values()) {
      if (!s.fenced && match(s.ttlMs, tagOf(s.id))) return s;
    }
    return null;
  }

  private sessionForKey(key: string): Session | null {
    const tag = this.places.get(key);
    const any = this.sessionFor(() => true);
    if (tag === undefined) return any;
    return this.sessionFor((_, t) => t === tag) ?? any;
  }

  /** The session this client would hold `key` on ("0": none): answers of an observation
   * about this client's own hold carry its token. */
  private ownSession(key: string): string {
    const e = this.holds.get(key);
    if (e && !e.session.fenced) return e.session.id;
    return this.sessionForKey(key)?.id ?? "0";
  }

  /** Starts measuring a grant's hold time. Its end is recorded once: by the release, the
   * shutdown, or the session's fence. */
  private measure(className: string, s: Session): Measured {
    const m: Measured = { meter: this.metrics.granted(className), session: s, hook: this.nextHold++ };
    this.measuring.add(m);
    s.attach(m.hook, () => this.endMeasure(m, "fenced"));
    return m;
  }

  private endMeasure(m: Measured, outcome: HoldOutcome): void {
    m.session.detach(m.hook);
    this.measuring.delete(m);
    m.meter.end(outcome);
  }

  /** The metrics' `class` of `key`: the class the service last named for it, else "unknown". */
  private classOf(key: string): string {
    return this.classes.get(key) ?? UNKNOWN_CLASS;
  }

  private learnClass(key: string, className: string | undefined): void {
    if (!className) return;
    if (this.classes.size >= MAX_PLACES && !this.classes.has(key)) this.classes.clear();
    this.classes.set(key, className);
  }

  private learnPlace(key: string, tag: number): void {
    if (this.places.size >= MAX_PLACES && !this.places.has(key)) this.places.clear();
    this.places.set(key, tag);
  }

  private forgetSession(s: Session): void {
    for (const [k, x] of this.sessions) if (x === s) this.sessions.delete(k);
  }
}
