"""The Python client's conformance driver (clients/conformance/README.md).

JSON commands, one per line, on stdin; one answer per command and the events on stdout,
each line written whole. Each command runs as its own asyncio task; the library's calls
block (it is a threaded client), so each runs on a worker thread of its own and the loop
keeps reading. The driver holds no lock rule: every outcome is the library's, and each
`reason` is named from the library's exception type, never from a message.

    PYTHONPATH=clients/python/src python clients/python/conformance/driver.py

`lock_client` is imported from PYTHONPATH when it is set (the suite's mutation check runs
this driver against a broken copy of src/), else from the installed package.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Optional


def _import_path() -> None:
    # Python already puts PYTHONPATH before site-packages (where the editable install's
    # .pth adds clients/python/src); only the script's own folder comes first. Without
    # PYTHONPATH the sibling src/ is a last resort, after any installed copy.
    if not os.environ.get("PYTHONPATH"):
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.append(os.path.join(os.path.dirname(here), "src"))


_import_path()

import lock_client  # noqa: E402
from lock_client import (  # noqa: E402
    Draining,
    Fenced,
    Held,
    HeldSet,
    HistoryCompacted,
    Hold,
    InvalidRequest,
    KeySetRefused,
    Leadership,
    LeakedHold,
    LockClient,
    LockError,
    Moving,
    NoQuorum,
    NotGranted,
    OtherError,
    RateLimited,
    RegionRedirect,
    Sealed,
    SessionExpired,
    SharedHold,
    StaleToken,
    StoreFull,
    StreamFull,
    SvidFiles,
    Unauthenticated,
    Unavailable,
    WrongSessionPlace,
    WrongSessionTtl,
)

# The lock.v1 reason of each typed error; subclasses before their base (Draining is an
# Unavailable). InvalidRequest stands for three reasons, told apart by its `reason`.
_REASONS = [
    (Held, "HELD"),
    (LeakedHold, "LEAKED_HOLD"),
    (RegionRedirect, "REGION_REDIRECT"),
    (RateLimited, "RATE_LIMITED"),
    (Sealed, "SEALED"),
    (NoQuorum, "NO_QUORUM"),
    (StoreFull, "STORE_FULL"),
    (NotGranted, "NOT_GRANTED"),
    (Unauthenticated, "UNAUTHENTICATED"),
    (StaleToken, "STALE_TOKEN"),
    (SessionExpired, "SESSION_EXPIRED"),
    (WrongSessionTtl, "WRONG_SESSION_TTL"),
    (WrongSessionPlace, "WRONG_SESSION_PLACE"),
    (Moving, "MOVING"),
    (StreamFull, "STREAM_FULL"),
    (HistoryCompacted, "HISTORY_COMPACTED"),
    (KeySetRefused, "KEY_SET_REFUSED"),
    (Draining, "DRAINING"),
    # The client's own: a release of a hold fenced before it.
    (Fenced, "FENCED"),
    (Unavailable, "UNAVAILABLE"),
]
_INVALID = ("INVALID_KEY", "MALFORMED_REQUEST", "UNKNOWN_METHOD")


def reason_of(err: BaseException) -> str:
    for cls, reason in _REASONS:
        if isinstance(err, cls):
            return reason
    if isinstance(err, InvalidRequest):
        # One type for three reasons; refused locally (no reason): a key it refuses.
        return err.reason if err.reason in _INVALID else "INVALID_KEY"
    if isinstance(err, OtherError):
        # INTERNAL is the one reason it is typed for; without a lock.v1 reason it is a
        # status from something on the way (a proxy's 5xx): unavailable.
        return "INTERNAL" if err.reason else "UNAVAILABLE"
    if isinstance(err, LockError):
        return "UNAVAILABLE"
    # Not the library's refusal: a command the driver could not perform (a bad field,
    # an endpoint the client rejects).
    return "DRIVER"


class DriverError(Exception):
    """A command the driver cannot perform (unknown op, unknown name, missing field)."""


class Out:
    """stdout, one whole line per write, from the loop and from the library's threads (a
    fence callback, an observation)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def write(self, obj: Dict[str, Any]) -> None:
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with self._lock:
            sys.stdout.write(line)
            sys.stdout.flush()


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise DriverError(f"{name} is not set")
    return value


def _endpoint() -> str:
    # The conductor gives host:port; the client wants https:// (its own TLS with the SVID).
    raw = _env("LOCK_ENDPOINT")
    return raw if "://" in raw else f"https://{raw}"


def _credentials() -> SvidFiles:
    # LOCK_SERVER_ID (the edge's SPIFFE ID) is not checked: grpcio verifies the edge's
    # certificate by its DNS name (SvidFiles.server_name, "localhost" by default, the name
    # the test PKI gives the edge), and has no hook to check a URI SAN.
    return SvidFiles(_env("LOCK_SVID"), _env("LOCK_SVID_KEY"), _env("LOCK_CA"))


def _field(cmd: Dict[str, Any], name: str) -> Any:
    if name not in cmd:
        raise DriverError(f"{cmd.get('op')}: missing field {name!r}")
    return cmd[name]


def _wait_seconds(cmd: Dict[str, Any]) -> float:
    return max(int(cmd.get("wait_ms", 0)), 0) / 1000.0


class Driver:
    def __init__(self, loop: asyncio.AbstractEventLoop, out: Out):
        self._loop = loop
        self._out = out
        # A blocking call per waiting command: the default executor (cores + 4 threads)
        # would make the sixth waiter stop the next command.
        self._pool = ThreadPoolExecutor(max_workers=512, thread_name_prefix="driver")
        self.clients: Dict[str, LockClient] = {}
        self.holds: Dict[str, Any] = {}
        self.observations: Dict[str, threading.Thread] = {}

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self._loop.run_in_executor(self._pool, fn, *args)

    def _client(self, cmd: Dict[str, Any]) -> LockClient:
        name = _field(cmd, "client")
        c = self.clients.get(name)
        if c is None:
            raise DriverError(f"no client named {name!r}")
        return c

    def _hold(self, cmd: Dict[str, Any]) -> Any:
        name = _field(cmd, "hold")
        h = self.holds.get(name)
        if h is None:
            raise DriverError(f"no hold named {name!r}")
        return h

    def _on_fence(self, hold: str) -> Callable[[], None]:
        def fenced() -> None:
            self._out.write({"event": "fenced", "hold": hold})
        return fenced

    async def run(self, cmd: Dict[str, Any]) -> None:
        """Answers `cmd` once (an observation answers from its own thread)."""
        cid = cmd.get("id")
        try:
            op = cmd.get("op")
            handler = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
            if handler is None:
                raise DriverError(f"unknown op {op!r}")
            answer = await handler(cmd)
            if answer is None:
                return
        except DriverError as e:
            answer = {"ok": False, "reason": "DRIVER", "message": str(e)}
        except BaseException as e:  # noqa: BLE001 (every failure is an answer)
            if isinstance(e, asyncio.CancelledError):
                raise
            answer = {"ok": False, "reason": reason_of(e), "message": str(e)}
        self._out.write({"id": cid, **answer})

    # -- ops ---------------------------------------------------------------------------
    async def op_client(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        name = _field(cmd, "client")
        instance = cmd.get("instance")
        c = await self._call(lambda: LockClient(_endpoint(), _credentials(), instance=instance))
        self.clients[name] = c
        return {"ok": True, "instance": c.instance}

    async def _take(self, cmd: Dict[str, Any], take: Callable[[], Any]) -> Dict[str, Any]:
        name = _field(cmd, "hold")
        h = await self._call(take)
        self.holds[name] = h
        token = h.term if isinstance(h, Leadership) else h.token
        return {"ok": True, "token": str(token)}

    async def op_acquire(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        c, key, fence = self._client(cmd), _field(cmd, "key"), self._on_fence(_field(cmd, "hold"))
        return await self._take(cmd, lambda: c.acquire(key, _wait_seconds(cmd), on_fence=fence))

    async def op_acquire_shared(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        c, key, fence = self._client(cmd), _field(cmd, "key"), self._on_fence(_field(cmd, "hold"))
        return await self._take(
            cmd, lambda: c.acquire_shared(key, _wait_seconds(cmd), on_fence=fence))

    async def op_acquire_all(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        c, keys = self._client(cmd), _field(cmd, "keys")
        if not isinstance(keys, list):
            raise DriverError("acquire_all: keys is a list")
        fence = self._on_fence(_field(cmd, "hold"))
        return await self._take(
            cmd, lambda: c.acquire_all(list(keys), _wait_seconds(cmd), on_fence=fence))

    async def op_campaign(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        c, key, fence = self._client(cmd), _field(cmd, "key"), self._on_fence(_field(cmd, "hold"))
        # Without wait_ms a candidate waits for as long as it takes.
        wait = _wait_seconds(cmd) if "wait_ms" in cmd else None
        return await self._take(cmd, lambda: c.campaign(key, on_deposed=fence, wait=wait))

    async def op_release(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        h = self._hold(cmd)
        await self._call(h.resign if isinstance(h, Leadership) else h.release)
        return {"ok": True}

    async def op_state(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        h = self._hold(cmd)
        if isinstance(h, Leadership):
            can_start, fenced = h.can_lead(), h.deposed
        elif isinstance(h, (Hold, SharedHold, HeldSet)):
            can_start, fenced = h.can_start(), h.fenced
        else:
            raise DriverError(f"hold {cmd['hold']!r} has no state")
        remaining = 0 if fenced else int(h.remaining_ttl() * 1000)
        return {"ok": True, "can_start": can_start, "fenced": fenced, "remaining_ms": remaining}

    async def op_observe(self, cmd: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        c, key, name = self._client(cmd), _field(cmd, "key"), _field(cmd, "obs")
        cid = cmd.get("id")
        # The generator blocks between changes: it gets a thread of its own for its life,
        # which answers the command once the stream is open (its first change, the key's
        # holder now) and then writes each change as it comes.
        t = threading.Thread(target=self._observe, args=(c, key, name, cid),
                             name=f"observe-{name}", daemon=True)
        self.observations[name] = t
        t.start()
        return None

    def _observe(self, c: LockClient, key: str, name: str, cid: Any) -> None:
        answered = False
        try:
            for o in c.observe(key):
                if not answered:
                    self._out.write({"id": cid, "ok": True})
                    answered = True
                self._out.write({"event": "observed", "obs": name, "revision": str(o.revision),
                                 "held": o.held, "kind": o.change})
            # The library's observation does not end by itself: say so if it does.
            err: BaseException = Unavailable("the observation ended")
        except BaseException as e:  # noqa: BLE001
            err = e
        if not answered:
            self._out.write({"id": cid, "ok": False, "reason": reason_of(err),
                             "message": str(err)})
        else:
            self._out.write({"event": "observe_error", "obs": name, "reason": reason_of(err),
                             "message": str(err)})

    async def op_shutdown(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        c = self._client(cmd)
        await self._call(c.shutdown)
        return {"ok": True}

    async def op_exit(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        self._out.write({"id": cmd.get("id"), "ok": True})
        _exit(0)
        return {"ok": True}  # not reached


# After stdin ends, how long the commands still running may take to answer.
EOF_GRACE = 60.0


def _exit(code: int) -> None:
    # Not sys.exit: worker threads blocked in the library (a waiting acquire, a keepalive)
    # would keep the interpreter alive. Nothing is released: exit is a process ending.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _read_stdin(loop: asyncio.AbstractEventLoop, lines: "asyncio.Queue[Optional[str]]") -> None:
    """Reads stdin on a thread of its own (a pipe or a file alike) into the loop."""
    for raw in sys.stdin:
        loop.call_soon_threadsafe(lines.put_nowait, raw)
    loop.call_soon_threadsafe(lines.put_nowait, None)


async def main() -> None:
    loop = asyncio.get_running_loop()
    out = Out()
    driver = Driver(loop, out)
    print(f"conformance driver: lock_client from {lock_client.__file__}", file=sys.stderr,
          flush=True)
    lines: "asyncio.Queue[Optional[str]]" = asyncio.Queue()
    threading.Thread(target=_read_stdin, args=(loop, lines), name="stdin", daemon=True).start()
    tasks = set()
    while True:
        raw = await lines.get()
        if raw is None:
            # The conductor closed stdin: nothing more will be asked. Answer what was
            # (bounded: a campaign without wait_ms may never end), then exit.
            if tasks:
                await asyncio.wait(set(tasks), timeout=EOF_GRACE)
            break
        raw = raw.strip()
        if not raw:
            continue
        try:
            cmd = json.loads(raw)
            if not isinstance(cmd, dict):
                raise ValueError("a command is a JSON object")
        except ValueError as e:
            out.write({"id": None, "ok": False, "reason": "DRIVER", "message": f"bad line: {e}"})
            continue
        task = loop.create_task(driver.run(cmd))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    _exit(0)


if __name__ == "__main__":
    asyncio.run(main())
