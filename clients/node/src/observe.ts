// Observing a key (lock.v1 Observe): its holder now, then every change, resumed across
// reconnects. A hint, never a grant (ADR-15): to act on a key, acquire it and write with its
// token. The same rules as lock-client's observe.rs, the Python and the Go clients'.
//
// The stream ends for reasons that are not the caller's business (a proxy's idle timeout,
// an arbiter draining or restarting, the store without quorum for a while): the
// observation calls again with the last revision and store epoch it saw, and the caller
// sees no gap. When the store has compacted that revision away, the gap cannot be
// replayed: the next change is a fresh `current` with `gap` true.

import type { ClientReadableStream } from "@grpc/grpc-js";
import { fromGrpcError, HistoryCompacted, type LockError, RateLimited, Unavailable } from "./errors.js";

/** Reconnects in a row without an answer before an observation gives up (about a minute
 * with the back-off below). */
const MAX_RECONNECTS = 40;
const MAX_BACKOFF_MS = 2000;

/** What happened to the key (lock.v1 ObserveEvent, lower case; PROGRESS marks are kept as
 * resume points and never reported). */
export type Change = "current" | "granted" | "released" | "expired" | "closed" | "forced" | "revoked";

// proto-loader hands enums over as numbers; by name as well, should a loader option change.
const CHANGES = new Map<string | number, Change>([
  [1, "current"], ["OBSERVE_EVENT_CURRENT", "current"],
  [2, "granted"], ["OBSERVE_EVENT_GRANTED", "granted"],
  [3, "released"], ["OBSERVE_EVENT_RELEASED", "released"],
  [4, "expired"], ["OBSERVE_EVENT_EXPIRED", "expired"],
  [5, "closed"], ["OBSERVE_EVENT_CLOSED", "closed"],
  [6, "forced"], ["OBSERVE_EVENT_FORCED", "forced"],
  [7, "revoked"], ["OBSERVE_EVENT_REVOKED", "revoked"],
]);

/** The hold a change names: the hold now, or the hold that ended. */
export interface Holder {
  spiffeId: string;
  /** The holding process's `lock-instance`, when its client sent one. */
  instance: string | null;
  className: string;
  acquiredAtUnixMs: number;
  /** The token's parts (the epoch and revision the hold was granted at): a later hold's
   * are higher. The token itself only in `Observed.token`. */
  epoch: number;
  grantRevision: bigint;
}

/** One change of an observed key. Never shows its token. */
export class Observed {
  readonly #token: bigint | null;

  /** @internal */
  constructor(
    readonly change: Change,
    /** The store revision of the change. */
    readonly revision: bigint,
    /** Whether the key is held after the change. */
    readonly held: boolean,
    readonly holder: Holder | null,
    /** Changes before this one were missed (compacted away while the stream was down, or
     * the key's store is another since: a shard move, a restore). Only on a `current`. */
    readonly gap: boolean,
    /** The epoch of the store `revision` is of: with it, `revision` is a resume point. */
    readonly storeEpoch: number,
    token: bigint | null,
  ) {
    this.#token = token;
  }

  /** The hold's fencing token, only when the holder is this client's own session (null
   * otherwise). A capability: never log it. */
  get token(): bigint | null {
    return this.#token;
  }

  toString(): string {
    const who = this.holder ? this.holder.spiffeId + (this.holder.instance ? ` (${this.holder.instance})` : "") : "-";
    return `Observed(${this.change} at ${this.revision}, held ${this.held} by ${who}, gap ${this.gap})`;
  }
  toJSON(): object {
    return {
      change: this.change,
      revision: String(this.revision),
      held: this.held,
      holder: this.holder && { ...this.holder, grantRevision: String(this.holder.grantRevision) },
      gap: this.gap,
      storeEpoch: this.storeEpoch,
    };
  }
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}

export interface ObserveOptions {
  /** Resume after this revision (a change's `revision` from an earlier observation)
   * instead of starting from the current holder. */
  afterRevision?: bigint;
  /** With `afterRevision`: the `storeEpoch` of the change it came from (0: unchecked). */
  afterStoreEpoch?: number;
}

/* eslint-disable @typescript-eslint/no-explicit-any */
/** The ObserveRequest as sent (int64 fields as decimal strings). */
export interface ObserveRequestFields {
  key: string;
  afterRevision: string;
  afterStoreEpoch: number;
  sessionId: string;
}
/** Opens one Observe call (the client's stub, with `lock-key`). */
export type OpenObserve = (req: ObserveRequestFields) => ClientReadableStream<any>;

const DONE: IteratorReturnResult<undefined> = { done: true, value: undefined };

/**
 * A key being observed: `for await (const change of locks.observe(key))`, or `next()` by
 * hand; `close()` (or leaving the loop) ends it. Not for concurrent `next()` calls.
 *
 * `next()` rejects with the refusal a new call gets (NotGranted, InvalidRequest...), or
 * Unavailable when the service stayed out of reach for about a minute; it resolves done
 * once the observation is closed (by `close()` or the client's shutdown).
 */
export class Observation implements AsyncIterableIterator<Observed> {
  private after: bigint;
  private epoch: number;
  private gap = false;
  private closed = false;
  private call: ClientReadableStream<any> | null = null;
  private reader: AsyncIterator<any> | null = null;
  private wake: (() => void) | null = null;

  /** @internal `ownSession`: the session the client would hold the key on ("0": none),
   * asked at each (re)connect, so answers about its own hold carry the token. */
  constructor(
    readonly key: string,
    private readonly open: OpenObserve,
    private readonly ownSession: () => string,
    private readonly onClose: (o: Observation) => void,
    opts: ObserveOptions = {},
  ) {
    this.after = opts.afterRevision !== undefined && opts.afterRevision > 0n ? opts.afterRevision : 0n;
    this.epoch = opts.afterStoreEpoch ?? 0;
  }

  /** The last revision seen: where a reconnect (or a later observation) resumes. */
  get revision(): bigint {
    return this.after;
  }
  /** The epoch of the store `revision` is of. */
  get storeEpoch(): number {
    return this.epoch;
  }

  async next(): Promise<IteratorResult<Observed, undefined>> {
    let failures = 0;
    let backoff = 50;
    // Whether the stream at hand has answered: one that ends without a word is a failure
    // to back off from, not a reason to reconnect at once.
    let answered = true;
    for (;;) {
      if (this.closed) return DONE;
      let err: LockError;
      try {
        if (!this.reader) {
          this.connect();
          answered = false;
        }
        const r = await this.reader!.next();
        if (this.closed) return DONE;
        if (!r.done) {
          failures = 0;
          answered = true;
          const o = this.take(r.value);
          if (o) return { done: false, value: o };
          continue;
        }
        // The stream ended cleanly (a proxy's timeout, an arbiter draining): resume.
        this.drop();
        if (answered) continue;
        err = new Unavailable("observe streams end without an answer");
      } catch (e) {
        if (this.closed) return DONE;
        this.drop();
        err = fromGrpcError(e);
        if (err instanceof HistoryCompacted) {
          // The gap cannot be replayed: start from the current state, and say so.
          this.after = 0n;
          this.epoch = 0;
          this.gap = true;
          continue;
        }
      }
      let pause: number;
      if (err instanceof RateLimited) pause = err.retryAfterMs;
      // No lock.v1 reason: not an answer of the service but a stream that broke. An arbiter
      // restarting under it resets it, which grpc-js reports as INTERNAL ("Received
      // RST_STREAM with code 2"), not UNAVAILABLE; found by the conformance suite's
      // observe-resume scenario.
      else if (err.transient || err.reason === null) {
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
        pause = backoff;
      } else throw err;
      failures += 1;
      if (failures > MAX_RECONNECTS) throw err;
      await this.pause(pause);
    }
  }

  /** Ends the observation: a pending `next()` resolves done. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.drop();
    this.wake?.();
    this.onClose(this);
  }

  async return(): Promise<IteratorResult<Observed, undefined>> {
    this.close();
    return DONE;
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<Observed> {
    return this;
  }

  toString(): string {
    return `Observation(key=${JSON.stringify(this.key)}, revision=${this.after})`;
  }

  private connect(): void {
    const call = this.open({
      key: this.key,
      afterRevision: String(this.after),
      afterStoreEpoch: this.epoch,
      sessionId: this.ownSession(),
    });
    this.call = call;
    this.reader = call[Symbol.asyncIterator]();
  }

  private drop(): void {
    const call = this.call;
    this.call = null;
    this.reader = null;
    if (call) {
      // The stream is done with: its late error (CANCELLED) has no one to tell.
      call.on("error", () => undefined);
      call.cancel();
    }
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.wake = null;
        resolve();
      }, Math.max(ms, 0));
      this.wake = () => {
        clearTimeout(t);
        this.wake = null;
        resolve();
      };
    });
  }

  /** The answer as a change; null for a progress mark. Records its revision as the resume
   * point either way. */
  private take(a: any): Observed | null {
    const revision = BigInt(a.revision ?? 0);
    const storeEpoch = Number(a.storeEpoch ?? 0);
    // A revision is a resume point only with its store's epoch.
    if (storeEpoch !== this.epoch || revision > this.after) {
      this.after = revision;
      this.epoch = storeEpoch;
    }
    const change = CHANGES.get(a.event);
    if (change === undefined) return null;
    const holder: Holder | null = a.holderSpiffeId
      ? {
          spiffeId: a.holderSpiffeId,
          instance: a.holderInstance || null,
          className: a.className ?? "",
          acquiredAtUnixMs: Number(a.acquiredAtUnixMs ?? 0),
          epoch: Number(a.epoch ?? 0),
          grantRevision: BigInt(a.grantRevision ?? 0),
        }
      : null;
    let gap = false;
    if (change === "current" && this.gap) {
      gap = true;
      this.gap = false;
    }
    const token = BigInt(a.token ?? 0);
    return new Observed(change, revision, Boolean(a.held), holder, gap, storeEpoch, token === 0n ? null : token);
  }
}
