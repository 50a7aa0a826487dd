"""Semaphores: one of the N permits of a key of a `permits: N` class. Up to N sessions hold
the key at once, each on its own permit (numbered 0..N-1) with its own token. A resource
fences per permit: it keeps the last token seen for each (key, permit) and accepts a write
only under a greater one
(`UPDATE ... SET fence = %s WHERE key = %s AND permit = %s AND fence < %s`), so a paused
permit holder's late write is refused once its permit has been given again.

Re-entrancy follows the exclusive hold's rule (the Rust client's `permit.rs`): a client that
holds a permit of a key and asks again gets the same permit back, nested, and the service
hears one release, the last one (a session holds at most one permit of a key).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from . import errors
from . import metrics as _metrics
from .liveness import Lapse

if TYPE_CHECKING:  # the client imports this module: no import back at run time
    from .client import LockClient, _Session


@dataclass
class _PermitEntry:
    """The outermost permit grant of a key on a client, and how many Permits share it."""

    count: int
    permit: int
    token: int
    session: "_Session"
    # The grant's hold time (metrics), ended by the last release, the fence or shutdown.
    clock: _metrics.HoldClock


class Permit:
    """A held permit of a semaphore (`LockClient.acquire_permit`). Renewed with its session
    and fenced with it, as any hold. Pass `permit` and `token` to the guarded write; check
    `can_start()` before each unit of work; `release()` when done, or use it as a context
    manager: `with locks.acquire_permit(key, wait=5, on_fence=stop) as p: ...`."""

    def __init__(self, client: "LockClient", key: str, hold_id: int, permit: int, token: int,
                 session: "_Session"):
        self._client = client
        self.key = key
        self._id = hold_id
        #: Which of the key's permits this is (0..N-1): the resource fences per permit.
        self.permit = permit
        #: This grant's token: strictly above every earlier grant of the same permit, and
        #: unlike every other grant of the key.
        self.token = token
        self._session = session
        self._done = False

    def can_start(self) -> bool:
        """False from the first failed renewal on: finish in-flight work, start nothing new."""
        return self._session.can_start()

    def remaining_ttl(self) -> float:
        """Seconds left before the local deadline at which the permit is fenced (0 once it is)."""
        return self._session.remaining()

    @property
    def fenced(self) -> bool:
        """The permit was fenced (its on_fence ran): it is dead."""
        return self._session.fenced

    def was_continuous(self) -> bool:
        """True if the permit was held at every instant from its grant until now."""
        return self._session.lapse() is None

    def lapse(self) -> Optional[Lapse]:
        """Why the permit was not held continuously, if it was not."""
        return self._session.lapse()

    def release(self) -> None:
        """Releases this acquire; only the last of a key's nested Permits calls the service.
        Raises Fenced if the permit was fenced: its work may have overlapped the permit's
        next holder."""
        if self._done:
            return
        self._done = True
        self._client._finish_permit(self.key, self._id, self.token, self._session)

    def __enter__(self) -> "Permit":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Releases the permit. As `LockClient.hold`: if it did not cover the whole block
        (fenced, or past its deadline when the block ended), raises Fenced unless the block
        raised already."""
        if exc_type is not None:
            with contextlib.suppress(errors.LockError):
                self.release()
            return
        lapse = self.lapse()
        if lapse is not None:
            with contextlib.suppress(errors.LockError):
                self.release()
            raise errors.Fenced(f"the permit of {self.key} did not cover the whole block ({lapse})")
        self.release()

    def __repr__(self) -> str:  # never the token: it is a capability
        return f"Permit(key={self.key!r}, permit={self.permit}, fenced={self.fenced})"
