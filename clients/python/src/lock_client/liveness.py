"""Drain then fence (ADR-12), as a pure rule on a monotonic clock (seconds, floats).

The deadline is the *send* time of the last successful keepalive plus the TTL minus a
margin: the leader restarts the lease no earlier than it receives that keepalive, so the
holder always believes it has lost the lock before the store says so. At the first failed
keepalive `can_start` turns false (in-flight work may finish); at the deadline the holds
are fenced. The same rule as lock-client's `liveness.rs`.
"""

MARGIN = 1.0


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

    def remaining(self, now: float) -> float:
        if self._fenced:
            return 0.0
        return max(self.deadline() - now, 0.0)
