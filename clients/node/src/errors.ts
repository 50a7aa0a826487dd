// Typed errors: the one place wire statuses become errors.
//
// Every refusal of the service is a gRPC status whose `grpc-status-details-bin` trailer is
// a google.rpc.Status holding a google.rpc.ErrorInfo with domain "lock.v1"; its `reason` is
// the contract (proto/lock/v1/lock.proto), not the message. The same table as the Rust
// client's error.rs and the Python client's errors.py.

import { status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";
import protobuf from "protobufjs";
import { fileURLToPath } from "node:url";

export const DOMAIN = "lock.v1";
export const DETAILS_TRAILER = "grpc-status-details-bin";

/** A refusal or failure of the lock service. */
export class LockError extends Error {
  /** The contract's reason (null when the status carried none, e.g. a transport failure). */
  readonly reason: string | null;
  /** The gRPC status code, when there was a status. */
  readonly code: number | null;
  readonly metadata: Readonly<Record<string, string>>;

  constructor(message: string, opts: { code?: number | null; reason?: string | null; metadata?: Record<string, string> } = {}) {
    super(message || new.target.name);
    this.name = new.target.name;
    this.code = opts.code ?? null;
    this.reason = opts.reason ?? null;
    this.metadata = { ...(opts.metadata ?? {}) };
  }

  /** Worth retrying inside the caller's deadline. */
  get transient(): boolean {
    return this instanceof NoQuorum || this instanceof Unavailable || this instanceof RateLimited || this instanceof Moving;
  }
}

/** Held by another session: at once (wait 0), or still held when the wait ended. */
export class Held extends LockError {}
/** This process instance holds the key under another session (ADR-13): a leak. A sibling
 * replica's hold (same identity, another instance) is waited for instead. */
export class LeakedHold extends LockError {}
/** The key's namespace is homed in another region: call that region's edge. */
export class RegionRedirect extends LockError {
  get region(): string {
    return this.metadata["region"] ?? "";
  }
}
export class RateLimited extends LockError {
  /** Milliseconds to wait before the next call. */
  get retryAfterMs(): number {
    const v = Number(this.metadata["retry_after_ms"]);
    return Number.isFinite(v) && v >= 0 ? v : 1000;
  }
}
/** The store was restored without an epoch advance: no grants until an operator acts. */
export class Sealed extends LockError {}
/** The store has no quorum: no grant, no renewal (closed posture); an outcome unknown, not a refusal (retry with the same session). */
export class NoQuorum extends LockError {}
/** etcd's NOSPACE alarm: no new grants or sessions. */
export class StoreFull extends LockError {}
/** No grant covers this key for this identity (the same reply whether or not it exists). */
export class NotGranted extends LockError {}
export class Unauthenticated extends LockError {}
/** The key or the request is malformed. */
export class InvalidRequest extends LockError {}
/** The token is not the key's current grant. */
export class StaleToken extends LockError {}
/** The session's lease is gone. */
export class SessionExpired extends LockError {}
/** The key's class needs a session of another TTL (the client opens one and retries). */
export class WrongSessionTtl extends LockError {
  get className(): string {
    return this.metadata["class"] ?? "";
  }
  get ttlSeconds(): number {
    return Number(this.metadata["ttl_seconds"] ?? 0) || 0;
  }
}
/** The key lives on another etcd cluster than the session (tiers and shards). */
export class WrongSessionPlace extends LockError {
  get cluster(): string {
    return this.metadata["cluster"] ?? "";
  }
}
/** The key's range is moving between shards: retried inside the deadline. */
export class Moving extends LockError {}
/** A KeepAlive stream asked to renew too many sessions. */
export class StreamFull extends LockError {}
/** Observe could not resume: the store compacted past the last revision seen (metadata `compact_revision`). */
export class HistoryCompacted extends LockError {}
/** AcquireAll: the set cannot be granted in one transaction (metadata `why`). Nothing was held. */
export class KeySetRefused extends LockError {}
/** The hold was fenced or lapsed: work done under it may not have been exclusive. */
export class Fenced extends LockError {}
/** The service could not be reached. */
export class Unavailable extends LockError {}
/** The arbiter is draining for a restart: nothing was done; retried at the key's next owner. */
export class Draining extends Unavailable {}
/** A status outside the contract. */
export class OtherError extends LockError {}

type ErrorClass = new (message: string, opts: { code?: number | null; reason?: string | null; metadata?: Record<string, string> }) => LockError;

const BY_REASON: Record<string, ErrorClass> = {
  HELD: Held,
  LEAKED_HOLD: LeakedHold,
  REGION_REDIRECT: RegionRedirect,
  RATE_LIMITED: RateLimited,
  SEALED: Sealed,
  NO_QUORUM: NoQuorum,
  STORE_FULL: StoreFull,
  NOT_GRANTED: NotGranted,
  UNAUTHENTICATED: Unauthenticated,
  INVALID_KEY: InvalidRequest,
  MALFORMED_REQUEST: InvalidRequest,
  UNKNOWN_METHOD: InvalidRequest,
  STALE_TOKEN: StaleToken,
  SESSION_EXPIRED: SessionExpired,
  WRONG_SESSION_TTL: WrongSessionTtl,
  WRONG_SESSION_PLACE: WrongSessionPlace,
  MOVING: Moving,
  STREAM_FULL: StreamFull,
  HISTORY_COMPACTED: HistoryCompacted,
  KEY_SET_REFUSED: KeySetRefused,
  DRAINING: Draining,
  INTERNAL: OtherError,
};

const TRANSPORT = new Set<number>([GrpcStatus.UNAVAILABLE, GrpcStatus.UNKNOWN, GrpcStatus.CANCELLED, GrpcStatus.DEADLINE_EXCEEDED]);

const statusProto = protobuf.loadSync(fileURLToPath(new URL("../proto/google/rpc/status.proto", import.meta.url)));
const StatusMsg = statusProto.lookupType("google.rpc.Status");
const ErrorInfoMsg = statusProto.lookupType("google.rpc.ErrorInfo");
const ERROR_INFO_URL = "type.googleapis.com/google.rpc.ErrorInfo";

/** The contract's reason and metadata in a status-details trailer, if it holds one. */
export function refusal(details: Uint8Array | null | undefined): { reason: string; metadata: Record<string, string> } | null {
  if (!details || details.length === 0) return null;
  let status: { details?: { typeUrl?: string; value?: Uint8Array }[] };
  try {
    status = StatusMsg.toObject(StatusMsg.decode(details), { defaults: true }) as typeof status;
  } catch {
    return null; // a peer's garbage is not a refusal of ours
  }
  for (const any of status.details ?? []) {
    if (any.typeUrl !== ERROR_INFO_URL || !any.value) continue;
    try {
      const info = ErrorInfoMsg.toObject(ErrorInfoMsg.decode(any.value), { defaults: true }) as {
        reason: string;
        domain: string;
        metadata: Record<string, string>;
      };
      if (info.domain === DOMAIN) return { reason: info.reason, metadata: { ...info.metadata } };
    } catch {
      return null;
    }
  }
  return null;
}

/**
 * A status message as the service wrote it. On the wire `grpc-message` is percent-encoded
 * (every byte outside printable ASCII, and `%`), and a message read from it as is says
 * "leaked hold%3F". Malformed escapes are left as they came.
 */
export function decodeGrpcMessage(message: string): string {
  if (!message.includes("%")) return message;
  try {
    return decodeURIComponent(message);
  } catch {
    return message;
  }
}

/** A typed error from a status's parts (pure; the unit tests have the table). */
export function fromParts(code: number, message: string, details: Uint8Array | null | undefined): LockError {
  const found = refusal(details);
  const text = decodeGrpcMessage(message);
  if (found === null) {
    return TRANSPORT.has(code) ? new Unavailable(text, { code }) : new OtherError(text, { code });
  }
  const cls = BY_REASON[found.reason] ?? OtherError;
  return new cls(text, { code, reason: found.reason, metadata: found.metadata });
}

/** The typed error for a failed call. */
export function fromGrpcError(err: unknown): LockError {
  if (err instanceof LockError) return err;
  const e = err as Partial<ServiceError>;
  if (typeof e?.code !== "number") {
    return new Unavailable(err instanceof Error ? err.message : String(err));
  }
  const raw = e.metadata?.get(DETAILS_TRAILER)?.[0];
  const details = raw instanceof Uint8Array ? raw : null;
  return fromParts(e.code, e.details ?? e.message ?? "", details);
}
