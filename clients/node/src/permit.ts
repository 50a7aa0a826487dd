// Semaphores: one of the N permits of a key of a `permits: N` class. Up to N sessions hold
// the key at once, each on its own permit (numbered 0..N-1) with its own token. A resource
// fences per permit: it keeps the last token seen for each (key, permit) and accepts a write
// only under a greater one
// (`UPDATE ... SET fence = $token WHERE key = $k AND permit = $p AND fence < $token`), so a
// paused permit holder's late write is refused once its permit has been given again.
//
// Re-entrancy follows the exclusive hold's rule (the Rust client's permit.rs): a client that
// holds a permit of a key and asks again gets the same permit back, nested, and the service
// hears one release, the last one (a session holds at most one permit of a key). The acquire
// itself is `LockClient.acquirePermit`; this is what it returns.

import type { Lapse } from "./liveness.js";

/** What a permit reads of its session: local state, no call. @internal */
export interface PermitSession {
  readonly fenced: boolean;
  canStart(): boolean;
  remaining(): number;
  lapse(): Lapse | null;
}

/**
 * A held permit of a semaphore (`LockClient.acquirePermit`). Renewed with its session and
 * fenced with it, as any hold. Pass `permit` and `token` to the guarded write; check
 * `canStart()` before each unit of work; `release()` when done. Never log the token.
 */
export class Permit {
  private done = false;

  /** @internal */
  constructor(
    readonly key: string,
    /** Which of the key's permits this is (0..N-1): the resource fences per permit. */
    readonly permit: number,
    /** This grant's token: strictly above every earlier grant of the same permit, and unlike
     * every other grant of the key. */
    readonly token: bigint,
    private readonly session: PermitSession,
    private readonly end: () => Promise<void>,
  ) {}

  /** False from the first failed renewal on: finish in-flight work, start nothing new. */
  canStart(): boolean {
    return this.session.canStart();
  }
  /** Milliseconds left before the local deadline at which the permit is fenced (0 once it is). */
  remainingTtlMs(): number {
    return this.session.remaining();
  }
  /** The permit was fenced (its onFence ran): it is dead. */
  get fenced(): boolean {
    return this.session.fenced;
  }
  /** True if the permit was held at every instant from its grant until now. */
  wasContinuous(): boolean {
    return this.session.lapse() === null;
  }
  /** Why the permit was not held continuously, if it was not. */
  lapse(): Lapse | null {
    return this.session.lapse();
  }

  /** Releases this acquire; only the last of a key's nested permits calls the service.
   * Rejects with Fenced if the permit was fenced: its work may have overlapped the permit's
   * next holder. */
  async release(): Promise<void> {
    if (this.done) return;
    this.done = true;
    await this.end();
  }

  /** Never the token: it is a capability. */
  toString(): string {
    return `Permit(key=${JSON.stringify(this.key)}, permit=${this.permit}, fenced=${this.fenced})`;
  }
  toJSON(): object {
    return { key: this.key, permit: this.permit, fenced: this.fenced };
  }
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}
