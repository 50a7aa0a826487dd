// Client-side metrics (issue 50, item 7), the same three in every client of the service:
// how long acquires wait, how long holds last, and how many holds were lost to a fence.
// OpenTelemetry instruments on the MeterProvider of the client's options, else the global
// one, which is a no-op until the application installs an SDK: a client whose application
// collects nothing spends one no-op call per acquire and release.
//
// Attributes are `class` and `outcome` only. Never the key, the token, the identity or the
// instance: keys are unbounded (one series per key would grow without end) and a token is
// a capability.

import { metrics, type Counter, type Histogram, type MeterProvider } from "@opentelemetry/api";
import { readFileSync } from "node:fs";
import { LockError } from "./errors.js";

/** The instrumentation scope of the client's instruments. */
export const METER_NAME = "@fenced-lock/client";
/** Histogram, seconds: from an acquire call (acquire, acquireShared, acquirePermit, acquireAll, campaign) to its answer. */
export const WAIT_DURATION = "lock.client.wait.duration";
/** Histogram, seconds: from a grant to the hold's end. */
export const HOLD_DURATION = "lock.client.hold.duration";
/** Counter: holds fenced before they were released (their onFence ran). */
export const HOLDS_LOST = "lock.client.holds.lost";
/** The `class` of an acquire no answer of the service named a class for. */
export const UNKNOWN_CLASS = "unknown";

/** How a hold ended: its release, a fence, or the client's shutdown. */
export type HoldOutcome = "released" | "fenced" | "shutdown";

// Waits run from a grant at once to the service's longest wait (300 s); holds from a
// moment to hours. The SDK's default buckets are made for milliseconds.
const WAIT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const HOLD_BUCKETS = [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400];

const now = (): number => performance.now();

function packageVersion(): string | undefined {
  try {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version?: unknown };
    return typeof pkg.version === "string" ? pkg.version : undefined;
  } catch {
    return undefined; // a bundler moved the code away from its package.json: no version, still metrics
  }
}

/**
 * The wait outcome of an acquire's answer: `granted` (`err` null), the refusal's lock.v1
 * reason in lower case (`held`, `not_granted`, `no_quorum`, ...), or `unavailable` for an
 * error that carries no reason (a transport failure, a local timeout).
 */
export function waitOutcome(err: unknown): string {
  if (err === null || err === undefined) return "granted";
  if (err instanceof LockError && err.reason) return err.reason.toLowerCase();
  return "unavailable";
}

/** The client's three instruments. */
export class ClientMetrics {
  private readonly waitHistogram: Histogram;
  private readonly holdHistogram: Histogram;
  private readonly lostCounter: Counter;

  constructor(provider: MeterProvider = metrics.getMeterProvider()) {
    const meter = provider.getMeter(METER_NAME, packageVersion());
    this.waitHistogram = meter.createHistogram(WAIT_DURATION, {
      unit: "s",
      description: "From an acquire call (acquire, acquireShared, acquirePermit, acquireAll, campaign) to its answer",
      advice: { explicitBucketBoundaries: WAIT_BUCKETS },
    });
    this.holdHistogram = meter.createHistogram(HOLD_DURATION, {
      unit: "s",
      description: "From a grant to the hold's end (released, fenced or shutdown)",
      advice: { explicitBucketBoundaries: HOLD_BUCKETS },
    });
    this.lostCounter = meter.createCounter(HOLDS_LOST, {
      unit: "{hold}",
      description: "Holds fenced before they were released (their onFence ran)",
    });
  }

  /** An acquire that started at `startedAt` (performance.now()) answered now. */
  waited(className: string, outcome: string, startedAt: number): void {
    this.waitHistogram.record(Math.max(now() - startedAt, 0) / 1000, { class: className, outcome });
  }

  /** Starts measuring a hold granted now. */
  granted(className: string): HoldMeter {
    return new HoldMeter(this, className, now());
  }

  /** @internal */
  ended(className: string, outcome: HoldOutcome, grantedAt: number): void {
    this.holdHistogram.record(Math.max(now() - grantedAt, 0) / 1000, { class: className, outcome });
    if (outcome === "fenced") this.lostCounter.add(1, { class: className, outcome });
  }
}

/** One grant, measured from the grant to its end; the first end counts, later ones are no-ops
 * (a fenced hold that is released afterwards ended when it was fenced). */
export class HoldMeter {
  private over = false;

  constructor(
    private readonly metrics: ClientMetrics,
    private readonly className: string,
    private readonly grantedAt: number,
  ) {}

  /** Whether the hold has ended. */
  get ended(): boolean {
    return this.over;
  }

  end(outcome: HoldOutcome): void {
    if (this.over) return;
    this.over = true;
    this.metrics.ended(this.className, outcome, this.grantedAt);
  }
}
