"""Client-side metrics (issue 50 item 7), in Prometheus through prometheus-client.

Opt-in: `LockClient(..., registry=CollectorRegistry())` (or `prometheus_client.REGISTRY`)
records into that registry; without one nothing is recorded and prometheus-client is never
imported (it is the optional extra `fenced-lock-client[metrics]`).

- `lock_client_wait_seconds` (histogram): from an acquire call (acquire, acquire_shared,
  acquire_permit, acquire_all, campaign) to its answer; `outcome` is `granted`, the
  refusal's reason in lower case (`held`, `not_granted`, `no_quorum`, ...), `unavailable`
  for an error without one, `cancelled` when the caller's thread was interrupted.
- `lock_client_hold_seconds` (histogram): from the grant to the hold's end; `outcome` is
  `released`, `fenced` or `shutdown`.
- `lock_client_holds_lost_total` (counter): holds fenced before they were released.

The labels are `class` (the lock class the service named, "unknown" when no answer named
one) and `outcome`, never the key, the token, the identity or the instance: those would
make a series per lock, and a token is a capability.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Optional

from . import errors

WAIT = "lock_client_wait_seconds"
HOLD = "lock_client_hold_seconds"
# prometheus-client exposes a counter with `_total` appended.
LOST = "lock_client_holds_lost"
LABELS = ("class", "outcome")
UNKNOWN_CLASS = "unknown"

# A wait is an immediate answer (a few ms) or a queue (up to the service's 300 s).
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                120.0, 300.0)
# A hold is one unit of work (milliseconds) or a leadership (hours).
HOLD_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
                4 * 3600.0)


class Metrics:
    """What the client records. This base records nothing (no registry given)."""

    def waited(self, class_name: str, outcome: str, seconds: float) -> None:
        pass

    def held(self, class_name: str, outcome: str, seconds: float) -> None:
        pass

    def lost(self, class_name: str) -> None:
        pass


NOOP = Metrics()


class _Families:
    """The three families of one registry."""

    def __init__(self, registry: Any):
        from prometheus_client import Counter, Histogram  # noqa: PLC0415 (the optional extra)

        self.wait = Histogram(WAIT, "Time from a lock client's acquire call to its answer.",
                              LABELS, registry=registry, buckets=WAIT_BUCKETS)
        self.hold = Histogram(HOLD, "Time from a lock client's grant to the hold's end.",
                              LABELS, registry=registry, buckets=HOLD_BUCKETS)
        self.lost = Counter(LOST, "Holds of a lock client fenced before they were released.",
                            ["class"], registry=registry)


# One set of families per registry, shared by every client object recording into it: a
# second registration of a name in one registry raises. Weak keys: a registry dropped by
# its owner (a test's) takes its families with it.
_by_registry: "weakref.WeakKeyDictionary[Any, _Families]" = weakref.WeakKeyDictionary()
_by_registry_lock = threading.Lock()


def _families(registry: Any) -> _Families:
    with _by_registry_lock:
        found = _by_registry.get(registry)
        if found is None:
            found = _Families(registry)
            _by_registry[registry] = found
        return found


class Prometheus(Metrics):
    def __init__(self, registry: Any):
        self._f = _families(registry)

    def waited(self, class_name: str, outcome: str, seconds: float) -> None:
        self._f.wait.labels(class_name, outcome).observe(seconds)

    def held(self, class_name: str, outcome: str, seconds: float) -> None:
        self._f.hold.labels(class_name, outcome).observe(seconds)

    def lost(self, class_name: str) -> None:
        self._f.lost.labels(class_name).inc()


def for_registry(registry: Optional[Any]) -> Metrics:
    """The client's metrics: into `registry`, or none."""
    return NOOP if registry is None else Prometheus(registry)


def outcome_of(err: BaseException) -> str:
    """A failed wait's outcome: the refusal's reason in lower case."""
    if isinstance(err, errors.LockError):
        return err.reason.lower() if err.reason else "unavailable"
    if isinstance(err, Exception):
        return "unavailable"
    # KeyboardInterrupt, SystemExit, a cancelled task's CancelledError.
    return "cancelled"


class HoldClock:
    """One grant's hold time, ended once: by the owner's release, the fence or shutdown.
    Attached to the hold's session like a fence callback, so a fence ends it."""

    __slots__ = ("_metrics", "class_name", "_start", "_ended", "_lock")

    def __init__(self, metrics: Metrics, class_name: str):
        self._metrics = metrics
        self.class_name = class_name
        self._start = time.monotonic()
        self._ended = False
        self._lock = threading.Lock()

    def end(self, outcome: str) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        self._metrics.held(self.class_name, outcome, time.monotonic() - self._start)
        if outcome == "fenced":
            self._metrics.lost(self.class_name)

    def fenced(self) -> None:
        self.end("fenced")
