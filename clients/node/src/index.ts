// Node client of the fenced lock service (lock.v1 through its Envoy edge).
//
//   import { LockClient, svidFiles } from "@fenced-lock/client";
//   const locks = new LockClient("https://lock-edge:8443", svidFiles("svid.pem", "svid.key", "bundle.pem"));
//   await locks.withHold("pay/ledger/42", { waitMs: 5000, onFence: stopWriting }, async (hold) => {
//     if (hold.canStart()) await db.query("UPDATE ledger SET ..., fence = $1 WHERE id = 42 AND fence < $1", [hold.token]);
//   });
//   await locks.shutdown();
//
// Also: acquireAll (sets), acquireShared (readers), acquirePermit (semaphores), campaign
// (leader election), observe (a key's holder and its changes), and metrics through
// @opentelemetry/api (metrics.ts).

export { LockClient, Hold, HeldSet, SharedHold, DEFAULT_MAX_HOLD_STREAMS, type AcquireOptions, type ClientOptions, type FenceFn } from "./client.js";
export { checkEndpoint, meshSidecar, svidFiles, type Credentials, type MeshSidecar, type SvidFiles } from "./connect.js";
export {
  Draining,
  Fenced,
  fromParts,
  decodeGrpcMessage,
  Held,
  InvalidRequest,
  LeakedHold,
  LockError,
  Moving,
  NoQuorum,
  NotGranted,
  OtherError,
  RateLimited,
  refusal,
  RegionRedirect,
  Sealed,
  SessionExpired,
  StaleToken,
  StoreFull,
  StreamFull,
  HistoryCompacted,
  KeySetRefused,
  Unauthenticated,
  Unavailable,
  WrongSessionPlace,
  WrongSessionTtl,
} from "./errors.js";
export { encodeKey, instanceFor, processInstance, validInstance, tagOf } from "./keys.js";
export { describeLapse, Liveness, type Lapse } from "./liveness.js";
export { CAMPAIGN_ROUND_MS, Leadership, MIN_ROUND_MS, type CampaignOptions } from "./election.js";
export { Observation, Observed, type Change, type Holder, type ObserveOptions } from "./observe.js";
export { Permit } from "./permit.js";
export {
  HOLD_DURATION,
  HOLDS_LOST,
  METER_NAME,
  UNKNOWN_CLASS,
  WAIT_DURATION,
  waitOutcome,
  type HoldOutcome,
} from "./metrics.js";
