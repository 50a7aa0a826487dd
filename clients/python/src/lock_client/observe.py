"""Observing a key (lock.v1 Observe) and leader election on the lock (issue 35).

`LockClient.observe(key)` yields the key's holder now, then every change, reconnecting and
resuming after the last revision seen; once the store has compacted that revision away it
starts again from now and marks that change `gap=True`. A hint, never a grant.

`LockClient.campaign(key, on_deposed=...)` waits in the key's FIFO queue until this process
leads: leadership is the hold, and the term is its fencing token. Write with it, and have
the resource accept a write only under a term at least the last one it saw
(`fence <= term`): a deposed leader's late write is then refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import grpc

from . import errors
from ._proto.lock.v1 import lock_pb2, lock_pb2_grpc
from .keys import keyed

# Reconnects in a row without an answer before an observation gives up (about a minute).
MAX_RECONNECTS = 40
# One campaign round: the longest wait the service grants; a shorter one is not spun on.
CAMPAIGN_ROUND = 300.0
MIN_ROUND = 1.0

_CHANGES = {
    lock_pb2.OBSERVE_EVENT_CURRENT: "current",
    lock_pb2.OBSERVE_EVENT_GRANTED: "granted",
    lock_pb2.OBSERVE_EVENT_RELEASED: "released",
    lock_pb2.OBSERVE_EVENT_EXPIRED: "expired",
    lock_pb2.OBSERVE_EVENT_CLOSED: "closed",
    lock_pb2.OBSERVE_EVENT_FORCED: "forced",
    lock_pb2.OBSERVE_EVENT_REVOKED: "revoked",
}


@dataclass(frozen=True)
class Holder:
    """The hold a change names: the hold now, or the one that ended."""
    spiffe_id: str
    instance: Optional[str]
    class_name: str
    acquired_at_unix_ms: int
    # The token's parts (a later hold's are higher); the token itself only in `token`.
    epoch: int
    grant_revision: int


@dataclass(frozen=True)
class Observed:
    change: str  # current, granted, released, expired, closed, forced, revoked
    revision: int
    held: bool
    holder: Optional[Holder]
    # The hold's token, only when the holder is this client's own session.
    token: Optional[int]
    # Changes before this one were missed (compacted away while disconnected, or the key's
    # store is another since: a shard move, a restore).
    gap: bool = False
    # The epoch of the store `revision` is of: with it, `revision` is a resume point.
    store_epoch: int = 0

    def __repr__(self) -> str:  # never the token: it is a capability
        return (f"Observed(change={self.change!r}, revision={self.revision}, held={self.held}, "
                f"holder={self.holder!r}, gap={self.gap})")


def observed_of(a: lock_pb2.ObserveResponse, gap: bool) -> Optional[Observed]:
    """The answer as a change; None for a progress mark."""
    change = _CHANGES.get(a.event)
    if change is None:
        return None
    holder = None
    if a.holder_spiffe_id:
        holder = Holder(a.holder_spiffe_id, a.holder_instance or None, a.class_name,
                        a.acquired_at_unix_ms, a.epoch, a.grant_revision)
    return Observed(change, a.revision, a.held, holder, a.token or None,
                    gap and change == "current", a.store_epoch)


def observe(stub: Callable[[], lock_pb2_grpc.LockStub], own_session: Callable[[str], int],
            key: str, after_revision: int = 0, after_store_epoch: int = 0) -> Iterator[Observed]:
    """`stub`: the client's stub (a new channel after an SVID rotation); `own_session`: its
    session for the key (0: none), asked at each (re)connect."""
    after, store_epoch = max(after_revision, 0), after_store_epoch
    gap = False
    failures = 0
    backoff = 0.05
    while True:
        try:
            req = lock_pb2.ObserveRequest(key=key, after_revision=after,
                                          after_store_epoch=store_epoch,
                                          session_id=own_session(key))
            for a in stub().Observe(req, metadata=keyed(key)):
                failures = 0
                # A revision is a resume point only with its store's epoch.
                if a.store_epoch != store_epoch or a.revision > after:
                    after, store_epoch = a.revision, a.store_epoch
                o = observed_of(a, gap)
                if o is None:
                    continue
                if o.change == "current":
                    gap = False
                yield o
            continue  # the stream ended cleanly: resume
        except grpc.RpcError as e:
            # A reset (an arbiter killed under the stream) is resumed like any break.
            err = errors.on_stream(errors.from_rpc_error(e))
        if isinstance(err, errors.HistoryCompacted):
            after, store_epoch, gap = 0, 0, True
            continue
        if isinstance(err, errors.RateLimited):
            pause = err.retry_after
        elif err.transient:
            backoff = min(backoff * 2, 2.0)
            pause = backoff
        else:
            raise err
        failures += 1
        if failures > MAX_RECONNECTS:
            raise err
        time.sleep(pause)


class Leadership:
    """This process leads the key while it holds this."""

    def __init__(self, hold: Any):
        """`hold`: the client's `Hold` of the key."""
        self._hold = hold

    @property
    def term(self) -> int:
        """The term: the hold's fencing token. Every write of this leader carries it."""
        return self._hold.token

    @property
    def key(self) -> str:
        return self._hold.key

    def can_lead(self) -> bool:
        """False from the first failed renewal: start nothing new as leader."""
        return self._hold.can_start()

    @property
    def deposed(self) -> bool:
        """The leadership was lost (its hold fenced; `on_deposed` ran): it is over."""
        return self._hold.fenced

    def remaining_ttl(self) -> float:
        """Seconds left before the local deadline at which the leadership is lost."""
        return self._hold.remaining_ttl()

    def was_continuous(self) -> bool:
        return self._hold.was_continuous()

    def resign(self) -> None:
        """Steps down: the next candidate leads at once."""
        self._hold.release()

    def __repr__(self) -> str:  # never the term: it is a token
        return f"Leadership(key={self.key!r})"


def campaign(acquire: Callable[..., Any], key: str, on_deposed: Callable[[], None],
             wait: Optional[float] = None) -> Leadership:
    """`acquire`: the client's `acquire`; `wait`: seconds to stay a candidate (None: no
    end), after which the last round's `Held` is raised."""
    deadline = None if wait is None else time.monotonic() + max(wait, 0.0)
    while True:
        started = time.monotonic()
        round_ = CAMPAIGN_ROUND if deadline is None else min(CAMPAIGN_ROUND,
                                                             max(deadline - started, 0.0))
        try:
            return Leadership(acquire(key, round_, on_fence=on_deposed))
        except errors.Held:
            # The round ended with the key still held: still a candidate, unless the
            # caller's wait is over.
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise
            if now - started < MIN_ROUND:
                pause = MIN_ROUND if deadline is None else min(MIN_ROUND, deadline - now)
                time.sleep(pause)
