// Leader election on the lock (issue 35): leadership *is* the hold of the key, and the term
// is its fencing token. The campaign itself is `LockClient.campaign` (it waits in the key's
// FIFO queue, round after round); this is what it returns. The same shape as lock-client's
// election.rs, the Python, Go and Java clients'.
//
// The leader writes with its term, so the guarded resource refuses a deposed leader that
// writes late: a leader frozen past its TTL wakes after another was elected, and its write
// carries the older term. Followers learn who leads with `LockClient.observe`.

import type { FenceFn, Hold } from "./client.js";

/** One campaign round: the longest wait the service grants. */
export const CAMPAIGN_ROUND_MS = 300_000;
/** A round refused sooner than this is followed by a pause of as long (no spin). */
export const MIN_ROUND_MS = 1000;

export interface CampaignOptions {
  /**
   * Required (ADR-12): runs if the leadership is lost without `resign()` (its session could
   * not be renewed before the local deadline: drain, then fence). Stop acting as leader there.
   */
  onFence: FenceFn;
  /** How long to stay a candidate, in milliseconds; absent: until this client leads. When
   * it runs out while another leads, the campaign rejects with `Held`. */
  waitMs?: number;
}

/** This client leads `key` while it holds this. Never shows its term. */
export class Leadership {
  /** @internal */
  constructor(
    /** The hold underneath, for callers that manage it as a lock. */
    readonly hold: Hold,
  ) {}

  /** The term: the hold's fencing token. Every write of this leader carries it, and the
   * resource accepts a write only at or above the last term it saw (`fence <= $term`). */
  get term(): bigint {
    return this.hold.token;
  }
  get key(): string {
    return this.hold.key;
  }
  /** False from the first failed renewal: start nothing new as leader. */
  canLead(): boolean {
    return this.hold.canStart();
  }
  /** The leadership was lost (onFence ran). */
  get fenced(): boolean {
    return this.hold.fenced;
  }
  /** Milliseconds left before the local deadline at which the term is fenced. */
  remainingTtlMs(): number {
    return this.hold.remainingTtlMs();
  }
  /** Whether the leadership lasted, without a gap, until now (false after a freeze past the
   * TTL): check it before reporting work done as leader. */
  wasContinuous(): boolean {
    return this.hold.wasContinuous();
  }
  /** Steps down: the next candidate in the queue leads at once. Rejects with Fenced if the
   * term had ended already. */
  resign(): Promise<void> {
    return this.hold.release();
  }

  toString(): string {
    return `Leadership(key=${JSON.stringify(this.key)}, fenced=${this.fenced})`;
  }
  toJSON(): object {
    return { key: this.key, fenced: this.fenced };
  }
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}
