"""Typed errors: the one place wire statuses become exceptions.

Every refusal of the service is a gRPC status whose `grpc-status-details-bin` trailer is a
google.rpc.Status holding a google.rpc.ErrorInfo with domain "lock.v1"; its `reason` is
the contract (config/proto/lock/v1/lock.proto, docs/src/reference/errors.md), not the message.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import grpc
from google.rpc import error_details_pb2, status_pb2

DOMAIN = "lock.v1"
DETAILS_TRAILER = "grpc-status-details-bin"


class LockError(Exception):
    """A refusal or failure of the lock service. `reason` is the contract's reason (None
    when the status carried none, e.g. a transport failure)."""

    reason: Optional[str] = None

    def __init__(self, message: str = "", *, code: Optional[grpc.StatusCode] = None,
                 reason: Optional[str] = None, metadata: Optional[Dict[str, str]] = None):
        super().__init__(message or self.__class__.__name__)
        self.message = message
        self.code = code
        if reason is not None:
            self.reason = reason
        self.metadata = dict(metadata or {})

    @property
    def transient(self) -> bool:
        """Worth retrying inside the caller's deadline."""
        return isinstance(self, (NoQuorum, Unavailable, RateLimited, Moving))


class Held(LockError):
    """Held by another session: at once (wait 0), or still held when the wait ended."""


class LeakedHold(LockError):
    """This process instance (or, without one, this identity) holds the key under another
    session (ADR-13): a leak. A sibling replica's hold is waited for instead."""


class RegionRedirect(LockError):
    """The key's namespace is homed in another region: call that region's edge."""

    @property
    def region(self) -> str:
        return self.metadata.get("region", "")


class RateLimited(LockError):
    @property
    def retry_after(self) -> float:
        """Seconds to wait before the next call."""
        try:
            return int(self.metadata.get("retry_after_ms", "1000")) / 1000.0
        except ValueError:
            return 1.0


class Sealed(LockError):
    """The store has no epoch record, or another cluster's: nothing is granted."""


class NoQuorum(LockError):
    """etcd is unreachable or not answering in time."""


class StoreFull(LockError):
    """etcd's NOSPACE alarm: no new grants or sessions."""


class NotGranted(LockError):
    """No grant covers the key for this identity."""


class Unauthenticated(LockError):
    """No usable client certificate (SVID)."""


class InvalidRequest(LockError):
    """Key syntax, no lock class for the key, a malformed request or an unknown method."""


class StaleToken(LockError):
    """The token is not the key's current grant."""


class SessionExpired(LockError):
    """The session's lease is gone."""


class WrongSessionTtl(LockError):
    """The key's class needs a session with another TTL."""

    @property
    def class_name(self) -> str:
        return self.metadata.get("class", "")

    @property
    def ttl_seconds(self) -> int:
        try:
            return int(self.metadata.get("ttl_seconds", "0"))
        except ValueError:
            return 0


class WrongSessionPlace(LockError):
    """The key lives on another etcd cluster than the session (tiers and shards):
    open a session for the key and retry."""

    @property
    def cluster(self) -> str:
        return self.metadata.get("cluster", "")


class Moving(LockError):
    """The key's range is being moved between shards: nothing was done; retried inside
    the caller's deadline."""


class StreamFull(LockError):
    """A stream limit was reached: a KeepAlive stream renewing too many sessions, or an
    arbiter serving its limit of Observe streams."""


class HistoryCompacted(LockError):
    """Observe could not resume: the store compacted past the last revision seen
    (metadata ``compact_revision``). Observe again from now."""


class KeySetRefused(LockError):
    """AcquireAll: the set cannot be granted in one transaction (metadata ``why``:
    spans-stores, durable-class, delayed-class, shared-class,
    semaphore-class, mixed-ttl, own-hold). Nothing was held."""

    @property
    def why(self) -> str:
        return self.metadata.get("why", "")


class Fenced(LockError):
    """The hold was fenced (its session could not be renewed in time): work done under it
    may not have been exclusive."""


class Unavailable(LockError):
    """The service could not be reached."""


class Draining(Unavailable):
    """The arbiter is draining for a restart: nothing was done; retried at the key's next
    owner inside the caller's deadline."""


class OtherError(LockError):
    """A status outside the contract."""


_BY_REASON = {
    "HELD": Held,
    "LEAKED_HOLD": LeakedHold,
    "REGION_REDIRECT": RegionRedirect,
    "RATE_LIMITED": RateLimited,
    "SEALED": Sealed,
    "NO_QUORUM": NoQuorum,
    "STORE_FULL": StoreFull,
    "NOT_GRANTED": NotGranted,
    "UNAUTHENTICATED": Unauthenticated,
    "INVALID_KEY": InvalidRequest,
    "MALFORMED_REQUEST": InvalidRequest,
    "UNKNOWN_METHOD": InvalidRequest,
    "STALE_TOKEN": StaleToken,
    "SESSION_EXPIRED": SessionExpired,
    "WRONG_SESSION_TTL": WrongSessionTtl,
    "WRONG_SESSION_PLACE": WrongSessionPlace,
    "MOVING": Moving,
    "STREAM_FULL": StreamFull,
    "HISTORY_COMPACTED": HistoryCompacted,
    "KEY_SET_REFUSED": KeySetRefused,
    "DRAINING": Draining,
    "INTERNAL": OtherError,
}

_TRANSPORT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED)


def refusal(details: Optional[bytes]) -> Optional[Tuple[str, Dict[str, str]]]:
    """The contract's (reason, metadata) in a status-details trailer, if it holds one."""
    if not details:
        return None
    status = status_pb2.Status()
    try:
        status.ParseFromString(details)
    except Exception:  # a peer's garbage is not a refusal of ours
        return None
    for any_ in status.details:
        if any_.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            any_.Unpack(info)
            if info.domain == DOMAIN:
                return info.reason, dict(info.metadata)
    return None


def from_parts(code: grpc.StatusCode, message: str, details: Optional[bytes]) -> LockError:
    """A typed error from a status's parts (pure; tests/test_errors.py has the table)."""
    found = refusal(details)
    if found is None:
        if code in _TRANSPORT or code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return Unavailable(message, code=code)
        return OtherError(message, code=code)
    reason, metadata = found
    cls = _BY_REASON.get(reason, OtherError)
    return cls(message, code=code, reason=reason, metadata=metadata)


def on_stream(err: LockError) -> LockError:
    """`err` as a stream's failure: a reset without a lock.v1 reason (gRPC reports a
    received RST_STREAM, as from an arbiter killed under the stream, as INTERNAL) is the
    stream breaking, `Unavailable`, not a refusal. Unary calls keep `from_parts`' answer."""
    if err.reason is None and err.code == grpc.StatusCode.INTERNAL:
        return Unavailable(err.message, code=err.code)
    return err


def _details(metadata: Optional[Sequence[Tuple[str, object]]]) -> Optional[bytes]:
    for key, value in metadata or ():
        if key == DETAILS_TRAILER and isinstance(value, bytes):
            return value
    return None


def from_rpc_error(err: grpc.RpcError) -> LockError:
    """The typed error for a failed call."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = err.details() if hasattr(err, "details") else str(err)
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    return from_parts(code, message or "", _details(trailers))
