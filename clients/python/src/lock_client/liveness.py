"""Drain then fence (ADR-12), as a pure rule on a monotonic clock (seconds, floats).

The deadline is the *send* time of the last successful keepalive plus the TTL minus a
margin: the leader restarts the lease no earlier than it receives that keepalive, so the
holder always believes it has lost the lock before the store says so. At the first failed
keepalive `can_start` turns false (in-flight work may finish); at the deadline the holds
are fenced. The same rule as lock-client's `liveness.rs`.
"""

from dataclasses import dataclass
from typing import Optional

MARGIN = 1.0


@dataclass(frozen=True)
class Lapse:
    """A hold that did not cover the whole of some work: seconds without a successful
    renewal when the work ended, and how far past the local deadline that was."""

    unrenewed: float
    past_deadline: float
    ttl: float

    def __str__(self) -> str:
        return (f"no successful renewal for {self.unrenewed:.1f} s (TTL {self.ttl:.0f} s): "
                f"{self.past_deadline:.1f} s past the hold's deadline")


class Liveness:
    def __init__(self, ttl: float, opened_at: float):
        self.ttl = ttl
        self._last_ok_send = opened_at
        self._failing = False
        self._fenced = False

    def deadline(self) -> float:
        return self._last_ok_send + max(self.ttl - MARGIN, 0.0)

    def renewed(self, sent_at: float) -> None:
        """A keepalive sent at `sent_at` succeeded."""
        if self._fenced:
            return
        self._last_ok_send = max(self._last_ok_send, sent_at)
        self._failing = False

    def failed(self) -> None:
        """A keepalive failed: stop starting new work."""
        self._failing = True

    def fence_due(self, now: float) -> bool:
        """True once, when the deadline has passed: the caller fences the holds."""
        if not self._fenced and now >= self.deadline():
            self._fenced = True
            return True
        return False

    def expire(self) -> bool:
        """Ends the session at once (the service said it expired); True the first time."""
        first = not self._fenced
        self._fenced = True
        return first

    @property
    def fenced(self) -> bool:
        return self._fenced

    def can_start(self, now: float) -> bool:
        return not self._failing and not self._fenced and now < self.deadline()

    def covered_until(self, now: float) -> "Optional[Lapse]":
        """None if the session covered every instant up to `now` (never fenced, deadline
        not passed); else by how much it did not (issue 32). Checked when guarded work
        ends: a process frozen past its deadline may finish before its renewal thread has
        woken to fence. The same rule as lock-client's `Liveness::covered_until`."""
        deadline = self.deadline()
        if not self._fenced and now < deadline:
            return None
        return Lapse(unrenewed=max(now - self._last_ok_send, 0.0),
                     past_deadline=max(now - deadline, 0.0), ttl=self.ttl)

    def remaining(self, now: float) -> float:
        if self._fenced:
            return 0.0
        return max(self.deadline() - now, 0.0)
