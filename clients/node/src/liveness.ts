// Drain then fence (ADR-12), as a pure rule on a monotonic clock (milliseconds).
//
// The deadline is the *send* time of the last successful keepalive plus the TTL minus a
// margin: the leader restarts the lease no earlier than it receives that keepalive, so the
// holder always believes it has lost the lock before the store says so. At the first failed
// keepalive `canStart` turns false (in-flight work may finish); at the deadline the holds
// are fenced. The same rule as lock-client's liveness.rs and the Python client's.

export const MARGIN_MS = 1000;

/** A hold that did not cover the whole of some work (issue 32). */
export interface Lapse {
  /** Milliseconds without a successful renewal when the work ended. */
  unrenewedMs: number;
  /** How far past the hold's local deadline that was. */
  pastDeadlineMs: number;
  ttlMs: number;
}

export function describeLapse(l: Lapse): string {
  return `no successful renewal for ${(l.unrenewedMs / 1000).toFixed(1)} s (TTL ${Math.round(l.ttlMs / 1000)} s): ${(l.pastDeadlineMs / 1000).toFixed(1)} s past the hold's deadline`;
}

export class Liveness {
  readonly ttlMs: number;
  private lastOkSend: number;
  private failing = false;
  private fencedFlag = false;

  /** `openedAt`: when the OpenSession request was sent (the lease starts after it). */
  constructor(ttlMs: number, openedAt: number) {
    this.ttlMs = ttlMs;
    this.lastOkSend = openedAt;
  }

  deadline(): number {
    return this.lastOkSend + Math.max(this.ttlMs - MARGIN_MS, 0);
  }

  /** A keepalive sent at `sentAt` succeeded. */
  renewed(sentAt: number): void {
    if (this.fencedFlag) return;
    this.lastOkSend = Math.max(this.lastOkSend, sentAt);
    this.failing = false;
  }

  /** A keepalive failed: stop starting new work. */
  failed(): void {
    this.failing = true;
  }

  /** True once, when the deadline has passed: the caller fences the holds. */
  fenceDue(now: number): boolean {
    if (!this.fencedFlag && now >= this.deadline()) {
      this.fencedFlag = true;
      return true;
    }
    return false;
  }

  /** Ends the session at once (the service said it expired); true the first time. */
  expire(): boolean {
    const first = !this.fencedFlag;
    this.fencedFlag = true;
    return first;
  }

  get fenced(): boolean {
    return this.fencedFlag;
  }

  canStart(now: number): boolean {
    return !this.failing && !this.fencedFlag && now < this.deadline();
  }

  remaining(now: number): number {
    return this.fencedFlag ? 0 : Math.max(this.deadline() - now, 0);
  }

  /**
   * Null if the session covered every instant up to `now` (never fenced, deadline not
   * passed), else by how much it did not. Checked when guarded work ends: a process frozen
   * past its deadline may finish before its renewal timer has fired to fence.
   */
  coveredUntil(now: number): Lapse | null {
    const deadline = this.deadline();
    if (!this.fencedFlag && now < deadline) return null;
    return {
      unrenewedMs: Math.max(now - this.lastOkSend, 0),
      pastDeadlineMs: Math.max(now - deadline, 0),
      ttlMs: this.ttlMs,
    };
  }
}
