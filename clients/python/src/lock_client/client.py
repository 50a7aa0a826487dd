"""The client: credentials and channel, sessions per TTL with one KeepAlive stream each,
acquire with waiting and retries inside the caller's deadline, re-entrancy, holds.

Mirrors the Rust lock-client (client/src): a newcomer reading one can read the other.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import queue
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple, TypeVar, Union

import grpc

from . import errors
from ._proto.lock.v1 import lock_pb2, lock_pb2_grpc
from .keys import INSTANCE_METADATA, keyed, process_instance
from .liveness import Lapse, Liveness
from . import metrics as _metrics
from . import observe as _observe
from .observe import Leadership, Observed
from .permit import Permit, _PermitEntry

T = TypeVar("T")

log = logging.getLogger("lock_client")

FenceFn = Callable[[], None]

# Attempts of one acquire (transient errors, session changes), within its deadline.
MAX_TRIES = 32
# Keys whose cluster (and class) the client remembers (past it the memory starts over).
MAX_PLACES = 4096
# Bound on one unary call beyond the wait the service was asked for: a dead path shows as
# an error instead of a hang (the HTTP/2 PINGs below usually find it sooner).
CALL_SLACK = 10.0


def _tag_of(session_id: int) -> int:
    """The cluster tag in a session id (bits 55..62; lock_config::shards::tag_of)."""
    return (session_id >> 55) & 0xFF
# Bound on one CloseSession during shutdown.
CLOSE_TIMEOUT = 5.0
# The longest wait a caller may ask for; the service grants at most 300 s.
MAX_WAIT = 24 * 3600.0

# HTTP/2 PINGs on the one connection, idle or not: a silently dead path breaks the
# connection within seconds and gRPC reconnects (the Rust client does the same).
_CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


@dataclass(frozen=True)
class SvidFiles:
    """The workload's X.509-SVID as PEM files (written by the SPIRE agent or
    spiffe-helper); a rewrite (rotation) is picked up by the next call."""

    cert: str
    key: str
    bundle: str
    server_name: str = "localhost"


@dataclass(frozen=True)
class MeshSidecar:
    """The workload's mesh sidecar originates mutual TLS with the workload's SVID; the
    client speaks plaintext HTTP/2 to it, allowed only to a loopback address."""


Credentials = Union[SvidFiles, MeshSidecar]


def check_endpoint(endpoint: str, plaintext: bool) -> str:
    """The `host:port` target of `endpoint`; ValueError unless it is https:// (own TLS)
    or http:// to a loopback host (the sidecar). The same rule as the Rust client."""
    scheme, sep, rest = endpoint.partition("://")
    if not sep:
        raise ValueError(f"endpoint {endpoint!r}: expected https://host:port")
    authority = rest.split("/", 1)[0]
    if scheme == "https" and not plaintext:
        return authority
    if scheme == "http" and plaintext:
        if _is_loopback(authority):
            return authority
        raise ValueError(
            f"endpoint {endpoint!r}: plaintext goes only to the workload's sidecar on "
            "loopback (127.0.0.0/8, ::1, localhost)"
        )
    if scheme == "http":
        raise ValueError(
            f"endpoint {endpoint!r} is plaintext: use https:// with SVID files, or "
            "MeshSidecar for a local sidecar"
        )
    raise ValueError(f"endpoint {endpoint!r}: expected https://host:port"
                     if not plaintext else
                     f"endpoint {endpoint!r}: the mesh sidecar is reached over http://127.0.0.1:PORT")


def _is_loopback(authority: str) -> bool:
    if authority.startswith("["):
        host = authority[1:].split("]", 1)[0]
    else:
        host = authority.rsplit(":", 1)[0] if ":" in authority else authority
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _stamp(credentials: Credentials) -> Tuple:
    if isinstance(credentials, SvidFiles):
        out = []
        for p in (credentials.cert, credentials.key, credentials.bundle):
            try:
                out.append(os.stat(p).st_mtime_ns)
            except OSError:
                out.append(None)
        return tuple(out)
    return ()


def _channel(endpoint: str, credentials: Credentials) -> grpc.Channel:
    if isinstance(credentials, MeshSidecar):
        return grpc.insecure_channel(check_endpoint(endpoint, True), options=_CHANNEL_OPTIONS)
    target = check_endpoint(endpoint, False)

    def read(path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise errors.Unauthenticated(f"{path}: {e}") from e

    tls = grpc.ssl_channel_credentials(
        root_certificates=read(credentials.bundle),
        private_key=read(credentials.key),
        certificate_chain=read(credentials.cert),
    )
    options = _CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", credentials.server_name)]
    return grpc.secure_channel(target, tls, options=options)


def _jitter(d: float) -> float:
    """`d` with up to ±25 % jitter, so retrying clients do not align."""
    return d * (0.75 + random.random() * 0.5)


class _Session:
    """One lease for this client per TTL, renewed by one KeepAlive stream however many
    holds it carries (ADR-10). Its thread sends a keepalive every TTL/3, records the send
    time of each success, and fences every hold of the session at the deadline."""

    def __init__(self, session_id: int, ttl: float, opened_at: float,
                 stub: lock_pb2_grpc.LockStub):
        self.id = session_id
        self._live = Liveness(ttl, opened_at)
        self._lock = threading.Lock()
        # By hold id: the caller's on_fence; by HoldClock: its metrics (ended by a fence).
        self._fences: Dict[object, FenceFn] = {}
        self._stub = stub
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._keep_alive, name=f"lock-session-{session_id}", daemon=True)
        self._thread.start()

    # -- state -------------------------------------------------------------------------
    def can_start(self) -> bool:
        with self._lock:
            return self._live.can_start(time.monotonic())

    def remaining(self) -> float:
        with self._lock:
            return self._live.remaining(time.monotonic())

    def lapse(self) -> Optional[Lapse]:
        now = time.monotonic()
        with self._lock:
            return self._live.covered_until(now)

    @property
    def fenced(self) -> bool:
        with self._lock:
            return self._live.fenced

    @property
    def ttl(self) -> float:
        return self._live.ttl

    def attach(self, hold: object, on_fence: Optional[FenceFn]) -> None:
        with self._lock:
            if on_fence is not None:
                self._fences[hold] = on_fence

    def detach(self, hold: object) -> None:
        with self._lock:
            self._fences.pop(hold, None)

    def close(self) -> None:
        """Closed by its owner (shutdown): dead from now on, and no on_fence runs; the
        holds still on it end as `shutdown` in the metrics."""
        with self._lock:
            self._live.expire()
            clocks = [h for h in self._fences if isinstance(h, _metrics.HoldClock)]
            self._fences.clear()
        self._stop.set()
        for c in clocks:
            c.end("shutdown")

    def _fence_all(self, due: Callable[[Liveness], bool]) -> None:
        with self._lock:
            callbacks = list(self._fences.values()) if due(self._live) else []
            if callbacks:
                self._fences.clear()
        for f in callbacks:  # outside the lock: a callback may ask the hold things
            try:
                f()
            except Exception:  # a caller's bug must not stop the fencing of the others
                log.exception("on_fence raised")

    # -- the keepalive thread ----------------------------------------------------------
    def _keep_alive(self) -> None:
        period = self._live.ttl / 3
        stream: Optional[_KeepAliveStream] = None
        next_at = time.monotonic() + period
        try:
            while True:
                with self._lock:
                    deadline = self._live.deadline()
                wake = min(next_at, deadline)
                if self._stop.wait(max(wake - time.monotonic(), 0.0)):
                    return
                now = time.monotonic()
                self._fence_all(lambda live: live.fence_due(now))
                if self.fenced:
                    return
                if now < next_at:
                    continue
                sent = time.monotonic()
                wait = max(min(period, deadline - sent), 0.0)
                try:
                    if stream is None:
                        stream = _KeepAliveStream(self._stub)
                    try:
                        stream.renew(self.id, wait)
                    except _StreamEnded:
                        # Ended cleanly (a drain): reopen at once, through the edge, on
                        # another arbiter, within the same wait.
                        stream.close()
                        stream = _KeepAliveStream(self._stub)
                        stream.renew(self.id, max(deadline - time.monotonic(), 0.0))
                    with self._lock:
                        self._live.renewed(sent)
                    next_at = sent + period
                except errors.SessionExpired:
                    self._fence_all(lambda live: live.expire())
                    return
                except errors.LockError as e:
                    log.warning("keepalive of session failed: %s", e)
                    with self._lock:
                        self._live.failed()
                    if stream is not None:
                        stream.close()
                    stream = None
                    # Retry sooner than a full period while the deadline allows.
                    next_at = time.monotonic() + period / 3
        finally:
            if stream is not None:
                stream.close()


class _StreamEnded(errors.Unavailable):
    """The server ended the KeepAlive stream cleanly (an arbiter draining)."""


class _KeepAliveStream:
    """One KeepAlive call: requests from a queue, answers read by a thread into another,
    so a renewal can wait for its answer with a timeout."""

    _END = object()

    def __init__(self, stub: lock_pb2_grpc.LockStub):
        self._requests: "queue.Queue[object]" = queue.Queue()
        self._answers: "queue.Queue[object]" = queue.Queue()
        self._call = stub.KeepAlive(self._iter())
        threading.Thread(target=self._read, daemon=True).start()

    def _iter(self) -> Iterator[lock_pb2.KeepAliveRequest]:
        while True:
            r = self._requests.get()
            if r is self._END:
                return
            yield r  # type: ignore[misc]

    def _read(self) -> None:
        try:
            for answer in self._call:
                self._answers.put(answer)
            self._answers.put(_StreamEnded("keepalive stream ended"))
        except grpc.RpcError as e:
            self._answers.put(errors.from_rpc_error(e))

    def renew(self, session_id: int, wait: float) -> None:
        self._requests.put(lock_pb2.KeepAliveRequest(session_id=session_id))
        try:
            answer = self._answers.get(timeout=wait)
        except queue.Empty:
            raise errors.Unavailable("keepalive timed out") from None
        if isinstance(answer, errors.LockError):
            raise answer
        if answer.ttl_seconds <= 0:
            raise errors.SessionExpired("the session's lease is gone")

    def close(self) -> None:
        self._requests.put(self._END)
        self._call.cancel()


@dataclass
class _Reentry:
    count: int
    token: int
    session: _Session
    # The grant's hold time (metrics), ended by the last release, the fence or shutdown.
    clock: _metrics.HoldClock
    # The hold's open Hold stream, which carries its release (None: unary).
    link: Optional["_HoldLink"] = None


#: Open Hold streams per client before acquires fall back to the unary calls.
DEFAULT_MAX_HOLD_STREAMS = 1024
_END = object()


class _HoldLink:
    """A hold as one Hold stream (issue 33): the acquire and, later, its release on one
    HTTP/2 stream, one request at the edge instead of two. Only a transport: the hold lives
    on the session, so a release the stream cannot carry (it ended: the arbiter drained, a
    proxy's idle timeout) goes as the unary call."""

    def __init__(self, stub: lock_pb2_grpc.LockStub, key: str):
        self._asks: "queue.SimpleQueue[object]" = queue.SimpleQueue()
        # gRPC reads the requests from this iterator on its own thread.
        self._call = stub.Hold(iter(self._asks.get, _END), metadata=keyed(key))

    def ask(self, msg: lock_pb2.HoldRequest, timeout: float) -> Optional[lock_pb2.HoldResponse]:
        """Sends `msg` and waits, at most `timeout` seconds, for its one answer; None if the
        stream ended without one. A stream that broke raises `Unavailable`; a refusal its
        `LockError`."""
        self._asks.put(msg)
        # No per-message deadline in gRPC's blocking API: past the bound the call is
        # cancelled, and the wait below ends with CANCELLED (Unavailable).
        timer = threading.Timer(timeout, self._call.cancel)
        timer.daemon = True
        timer.start()
        try:
            return next(self._call)
        except StopIteration:
            return None
        except grpc.RpcError as e:
            # A reset is the stream breaking (found by the conformance suite's
            # observe-resume: a release after restart_arbiters failed INTERNAL instead of
            # going as the unary call).
            raise errors.on_stream(errors.from_rpc_error(e)) from None
        finally:
            timer.cancel()

    def close(self) -> None:
        self._asks.put(_END)
        self._call.cancel()


class Hold:
    """A granted lock. Pass `token` to the guarded write; check `can_start()` before each
    unit of work; `release()` when done (or use `LockClient.hold` as a context manager)."""

    def __init__(self, client: "LockClient", key: str, hold_id: int, token: int,
                 session: _Session, nested: bool = False):
        self._client = client
        self.key = key
        self._id = hold_id
        self.token = token
        self._session = session
        self._done = False
        # Counted locally inside another hold of the key (re-entrancy): no call was made.
        self._nested = nested

    def can_start(self) -> bool:
        """False from the first failed renewal on: finish in-flight work, start nothing new."""
        return self._session.can_start()

    def remaining_ttl(self) -> float:
        """Seconds left before the local deadline at which the hold is fenced."""
        return self._session.remaining()

    @property
    def fenced(self) -> bool:
        """The hold was fenced (its on_fence ran): it is dead."""
        return self._session.fenced

    def was_continuous(self) -> bool:
        """True if the hold covered every instant from its grant until now: ask when the
        guarded work ends. False once the session passed its local deadline, even if the
        renewal thread has not fenced yet (a process frozen past the TTL)."""
        return self._session.lapse() is None

    def lapse(self) -> Optional[Lapse]:
        """Why the hold was not continuous, if it was not."""
        return self._session.lapse()

    def release(self) -> None:
        """Releases this acquire; only the outermost hold of a key calls the service.
        Raises Fenced if the hold was fenced: its work may not have been exclusive."""
        if self._done:
            return
        self._done = True
        self._client._finish(self.key, self._id, self.token, self._session)

    def __repr__(self) -> str:  # never the token: it is a capability
        return f"Hold(key={self.key!r}, fenced={self.fenced})"


class _Ended:
    """What a set or a shared hold shares with a Hold: liveness, and a release once."""

    def __init__(self, client: "LockClient", hold_id: int, token: int, session: _Session,
                 clock: _metrics.HoldClock):
        self._client = client
        self._id = hold_id
        self.token = token
        self._session = session
        self._clock = clock
        self._done = False

    def can_start(self) -> bool:
        """False from the first failed renewal on: finish in-flight work, start nothing new."""
        return self._session.can_start()

    def remaining_ttl(self) -> float:
        """Seconds left before the local deadline at which the hold is fenced (0 once it is)."""
        return self._session.remaining()

    @property
    def fenced(self) -> bool:
        """The hold was fenced (its on_fence ran): it is dead."""
        return self._session.fenced

    def was_continuous(self) -> bool:
        """True if the hold covered every instant from its grant until now."""
        return self._session.lapse() is None

    def release(self) -> None:
        if self._done:
            return
        self._done = True
        self._session.detach(self._id)
        self._session.detach(self._clock)
        if self._session.fenced:
            raise errors.Fenced("the hold was fenced before its release")
        try:
            self._release()
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        finally:
            self._clock.end("released")

    def _release(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class HeldSet(_Ended):
    """Keys granted together by AcquireAll: `token` is every key's token. `release()` ends
    them in one transaction."""

    def __init__(self, client: "LockClient", keys: List[str], hold_id: int, token: int,
                 session: _Session, clock: _metrics.HoldClock):
        super().__init__(client, hold_id, token, session, clock)
        self.keys = keys

    def _release(self) -> None:
        req = lock_pb2.ReleaseAllRequest(keys=self.keys, token=self.token,
                                         session_id=self._session.id)
        self._client._stub().ReleaseAll(req, timeout=CALL_SLACK)

    def __repr__(self) -> str:  # never the token: it is a capability
        return f"HeldSet(keys={self.keys!r}, fenced={self.fenced})"


class SharedHold(_Ended):
    """A shared hold (`acquire_shared`). Its token is above the last exclusive grant of the
    key before it: a resource that keeps its last writer's token serves reads only under a
    token at least that one."""

    def __init__(self, client: "LockClient", key: str, hold_id: int, token: int,
                 session: _Session, clock: _metrics.HoldClock):
        super().__init__(client, hold_id, token, session, clock)
        self.key = key

    def _release(self) -> None:
        req = lock_pb2.ReleaseRequest(key=self.key, token=self.token, session_id=self._session.id,
                                      mode=lock_pb2.HOLD_MODE_SHARED)
        self._client._stub().Release(req, metadata=keyed(self.key), timeout=CALL_SLACK)

    def __repr__(self) -> str:  # never the token: it is a capability
        return f"SharedHold(key={self.key!r}, fenced={self.fenced})"


class LockClient:
    """Client of the fenced lock service through its Envoy edge.

    - One session (etcd lease) per distinct TTL, opened on first use; one KeepAlive stream
      per session renews every hold attached to it, every TTL/3 (ADR-10).
    - Drain then fence (ADR-12): `Hold.can_start()` turns False at the first failed
      renewal; at the send time of the last successful renewal + TTL - 1 s the hold's
      `on_fence` runs and the hold is dead, before the store's lease can expire.
    - Re-entrancy (ADR-13): nested acquires of a key this client holds count locally; only
      the outermost acquire and the final release call the service.
    - Refusals are `errors.LockError` subclasses; waits, transient errors (with jittered
      backoff) and rate limits (honouring retry-after) are handled inside the deadline.
    - Each keyed call sends its key as `lock-key` metadata, the edge's fast path.
    - Metrics (opt-in, `registry`): wait and hold times, lost holds (`lock_client.metrics`).
    """

    def __init__(self, endpoint: str, credentials: Credentials,
                 instance: Optional[str] = None, *, registry: Optional[object] = None):
        """`instance`: this client among the replicas of its identity (sent with every
        OpenSession as `lock-instance`), used as it is; default `process_instance()`:
        `<LOCK_INSTANCE (the pod UID), else random once per process>:<pid>:<n>`, `n`
        counting this process's client objects from 1.

        `registry`: a `prometheus_client.CollectorRegistry` to record the client's metrics
        in (`lock_client.metrics`; needs the `metrics` extra); None, the default, records
        nothing. Client objects given one registry share its metric families."""
        # Validates the endpoint against the mode before anything is sent.
        check_endpoint(endpoint, isinstance(credentials, MeshSidecar))
        self._metrics = _metrics.for_registry(registry)
        self._instance = instance if instance is not None else process_instance()
        self._endpoint = endpoint
        self._credentials = credentials
        self._lock = threading.Lock()
        # Held while a session is opened (`_session_or_open`).
        self._opening = threading.Lock()
        self._channel = _channel(endpoint, credentials)
        self._stamp = _stamp(credentials)
        # One session per (TTL, cluster tag): a session lives on one etcd cluster, and with
        # tiers and shards its id carries the cluster's tag (bits 55..62).
        self._sessions: Dict[Tuple[int, int], _Session] = {}
        # Where keys were last granted, and the tag of each cluster a WRONG_SESSION_PLACE
        # named (learned from the session opened for it): bounded, a miss costs one call.
        self._places: Dict[str, int] = {}
        self._cluster_tags: Dict[str, int] = {}
        # The lock class the service last named for a key (AcquireResponse, or the
        # OpenSessionResponse of a session opened for it): the metrics' `class` label of
        # answers that name none (refusals, sets). Bounded like `_places`.
        self._classes: Dict[str, str] = {}
        self._holds: Dict[str, _Reentry] = {}
        # Re-entrancy of semaphore permits: the outermost permit grant by key (permit.py).
        self._permits: Dict[str, _PermitEntry] = {}
        self._next_hold = 1
        self._open_streams = 0
        self._max_hold_streams = DEFAULT_MAX_HOLD_STREAMS

    # -- public API --------------------------------------------------------------------
    @property
    def instance(self) -> str:
        """The `lock-instance` this client sends with every OpenSession."""
        return self._instance

    def limit_hold_streams(self, max_streams: int) -> None:
        """At most `max_streams` holds keep their Hold stream open (default
        DEFAULT_MAX_HOLD_STREAMS); past it acquires use the unary calls. 0: unary calls only
        (a proxy on the way that does not carry bidirectional streams)."""
        with self._lock:
            self._max_hold_streams = max_streams

    def open_hold_streams(self) -> int:
        """Hold streams open now (holds whose release will travel on their own stream)."""
        with self._lock:
            return self._open_streams

    def acquire(self, key: str, wait: float = 0.0, *, on_fence: FenceFn) -> Hold:
        """Takes `key`, waiting up to `wait` seconds for it. `on_fence` (required, ADR-12)
        runs on the session's thread if the hold is lost: stop touching the resource. Code
        with nothing to stop says so, visibly, with `on_fence=lambda: None`."""
        if not callable(on_fence):
            # Refused before anything is sent.
            raise TypeError("acquire: on_fence is required (ADR-12): the function that stops "
                            "your work if the hold is fenced")
        return self._acquire(key, wait, on_fence, True)

    def _acquire(self, key: str, wait: float, on_fence: FenceFn, metered: bool) -> Hold:
        """`acquire`; `metered`: records its wait (a campaign records its own instead)."""
        with self._lock:
            hold_id = self._next_hold
            self._next_hold += 1
            entry = self._holds.get(key)
            if entry is not None and entry.session.fenced:
                del self._holds[key]
                if entry.link is not None:
                    self._close_link_locked(entry.link)
                entry = None
            if entry is not None:
                entry.count += 1
                entry.session.attach(hold_id, on_fence)
                return Hold(self, key, hold_id, entry.token, entry.session, nested=True)
        started = time.monotonic()
        deadline = started + min(max(wait, 0.0), MAX_WAIT)

        def grant(s: _Session, left: float) -> Tuple[lock_pb2.AcquireResponse,
                                                     Optional[_HoldLink]]:
            req = lock_pb2.AcquireRequest(key=key, session_id=s.id, wait_millis=int(left * 1000))
            return self._grant(key, req, left + CALL_SLACK)

        try:
            (r, link), s = self._on_session(key, deadline, grant)
        except BaseException as e:
            if metered:
                self._waited([key], None, started, e)
            raise
        class_name = self._granted_class(key, r.class_name)
        if metered:
            self._waited([key], class_name, started, None)
        return self._held(key, hold_id, r.token, s, on_fence, class_name, link)

    def acquire_all(self, keys: List[str], wait: float = 0.0, *, on_fence: FenceFn) -> "HeldSet":
        """Takes every key of `keys` together (AcquireAll): all or nothing, in one
        transaction, one token for every key. Waiting holds nothing, so callers asking for
        overlapping sets in any order cannot deadlock. The keys must be of classes with one
        TTL, on one store, neither durable nor shared (KeySetRefused otherwise)."""
        if not callable(on_fence):
            raise TypeError("acquire_all: on_fence is required (ADR-12)")
        if not keys:
            raise errors.InvalidRequest("a key set has 1..=16 keys")
        first = min(keys)
        started = time.monotonic()
        deadline = started + min(max(wait, 0.0), MAX_WAIT)

        def grant(s: _Session, left: float) -> lock_pb2.AcquireAllResponse:
            req = lock_pb2.AcquireAllRequest(keys=list(keys), session_id=s.id,
                                             wait_millis=int(left * 1000))
            try:
                # No lock-key: the edge decides a set on every key of its body.
                return self._stub().AcquireAll(req, timeout=left + CALL_SLACK)
            except grpc.RpcError as e:
                raise errors.from_rpc_error(e) from None

        try:
            r, s = self._on_session(first, deadline, grant)
        except BaseException as e:
            self._waited(keys, None, started, e)
            raise
        class_name = self._class_of(keys)
        self._waited(keys, class_name, started, None)
        with self._lock:
            hold_id = self._next_hold
            self._next_hold += 1
        clock = _metrics.HoldClock(self._metrics, class_name)
        s.attach(hold_id, on_fence)
        s.attach(clock, clock.fenced)
        return HeldSet(self, list(r.keys), hold_id, r.token, s, clock)

    def acquire_shared(self, key: str, wait: float = 0.0, *, on_fence: FenceFn) -> "SharedHold":
        """Takes `key` shared (a `shared: true` class): many sessions hold it at once; an
        exclusive acquire of it waits for all of them, and while one waits new shared holds
        wait behind it."""
        if not callable(on_fence):
            raise TypeError("acquire_shared: on_fence is required (ADR-12)")
        started = time.monotonic()
        deadline = started + min(max(wait, 0.0), MAX_WAIT)

        def grant(s: _Session, left: float) -> lock_pb2.AcquireResponse:
            req = lock_pb2.AcquireRequest(key=key, session_id=s.id, wait_millis=int(left * 1000),
                                          mode=lock_pb2.HOLD_MODE_SHARED)
            try:
                return self._stub().Acquire(req, metadata=keyed(key), timeout=left + CALL_SLACK)
            except grpc.RpcError as e:
                raise errors.from_rpc_error(e) from None

        try:
            r, s = self._on_session(key, deadline, grant)
        except BaseException as e:
            self._waited([key], None, started, e)
            raise
        class_name = self._granted_class(key, r.class_name)
        self._waited([key], class_name, started, None)
        with self._lock:
            hold_id = self._next_hold
            self._next_hold += 1
        clock = _metrics.HoldClock(self._metrics, class_name)
        s.attach(hold_id, on_fence)
        s.attach(clock, clock.fenced)
        return SharedHold(self, key, hold_id, r.token, s, clock)

    def acquire_permit(self, key: str, wait: float = 0.0, *, on_fence: FenceFn) -> Permit:
        """Takes one permit of `key`, a key of a semaphore class (`permits: N`): up to N
        sessions hold it at once, each on its own permit (`Permit.permit`, 0..N-1) with its
        own token. Waits up to `wait` seconds in the key's FIFO queue while all N are held
        (Held when the wait ends). Asked again while this client holds a permit of the key,
        it returns that permit, nested: only the last release calls the service. A key of
        any other class is InvalidRequest (MALFORMED_REQUEST)."""
        if not callable(on_fence):
            raise TypeError("acquire_permit: on_fence is required (ADR-12)")
        with self._lock:
            hold_id = self._next_hold
            self._next_hold += 1
            entry = self._permits.get(key)
            if entry is not None and entry.session.fenced:
                # Fenced: the grant is gone; its Permits still end by their own release.
                del self._permits[key]
                entry = None
            if entry is not None:
                entry.count += 1
                entry.session.attach(hold_id, on_fence)
                return Permit(self, key, hold_id, entry.permit, entry.token, entry.session)
        started = time.monotonic()
        deadline = started + min(max(wait, 0.0), MAX_WAIT)

        def grant(s: _Session, left: float) -> lock_pb2.AcquireResponse:
            req = lock_pb2.AcquireRequest(key=key, session_id=s.id, wait_millis=int(left * 1000),
                                          mode=lock_pb2.HOLD_MODE_PERMIT)
            try:
                return self._stub().Acquire(req, metadata=keyed(key), timeout=left + CALL_SLACK)
            except grpc.RpcError as e:
                raise errors.from_rpc_error(e) from None

        try:
            r, s = self._on_session(key, deadline, grant)
        except BaseException as e:
            self._waited([key], None, started, e)
            raise
        class_name = self._granted_class(key, r.class_name)
        self._waited([key], class_name, started, None)
        s.attach(hold_id, on_fence)
        with self._lock:
            entry = self._permits.get(key)
            if entry is not None and entry.session is s and entry.token == r.token:
                # Another thread of this client was granted the same permit meanwhile (the
                # service answers a session's second ask with its grant): nest on it, so
                # the first release does not end the other's permit.
                entry.count += 1
                return Permit(self, key, hold_id, entry.permit, entry.token, s)
            clock = _metrics.HoldClock(self._metrics, class_name)
            self._permits[key] = _PermitEntry(count=1, permit=r.permit, token=r.token,
                                              session=s, clock=clock)
        s.attach(clock, clock.fenced)
        return Permit(self, key, hold_id, r.permit, r.token, s)

    def _on_session(self, key: str, deadline: float,
                    call: Callable[[_Session, float], T]) -> Tuple[T, _Session]:
        """`call(session, seconds left)` for `key` until it answers, the deadline passes or a
        refusal no retry cures: a session opened for the key's class when there is none, one
        of the TTL or on the cluster the service asks for, a new one when it expired, and
        transient refusals waited out inside the deadline."""
        session = self._session_for_key(key)
        # The session the service asked for, once it has said (by TTL or by cluster).
        wanted: Optional[Callable[[], Optional[_Session]]] = None
        opened: Optional[Callable[[_Session], None]] = None
        backoff = 0.05
        for _ in range(MAX_TRIES):
            s: Optional[_Session] = session
            session = None
            try:
                if s is None:
                    s = self._session_or_open(key, wanted, opened)
                left = max(deadline - time.monotonic(), 0.0)
                answer = call(s, left)
                self._learn_place(key, _tag_of(s.id))
                return answer, s
            except errors.LockError as err_:
                err = err_
            if isinstance(err, errors.WrongSessionTtl):
                ttl = err.ttl_seconds
                wanted = lambda: self._session_for(ttl)  # noqa: E731
                session = wanted()
                continue
            if isinstance(err, errors.WrongSessionPlace):
                cluster = err.cluster
                wanted = lambda: self._session_on_cluster(cluster)  # noqa: E731
                # The session opened next (for this key) is that cluster's: remember its tag.
                opened = lambda o: self._learn_cluster(cluster, o)  # noqa: E731
                session = wanted()
                continue
            if isinstance(err, errors.SessionExpired):
                if s is not None:
                    self._forget_session(s)
                continue
            if isinstance(err, errors.RateLimited):
                pause = err.retry_after
            elif err.transient:
                backoff = min(backoff * 2, 1.0)
                pause = _jitter(backoff)
            else:
                raise err
            if time.monotonic() + pause >= deadline:
                raise err
            time.sleep(pause)
            session = s
        raise errors.Unavailable("gave up after repeated retries")

    def observe(self, key: str, after_revision: int = 0,
                after_store_epoch: int = 0) -> Iterator["Observed"]:
        """Yields `key`'s holder now, then every change (granted, released, expired,
        closed, forced, revoked), reconnecting and resuming by itself. A hint, never a
        grant. Changes about a hold on this client's own session carry its token; no other
        observer, a sibling replica included, ever sees it."""
        return _observe.observe(self._stub, self._own_session, key, after_revision,
                                after_store_epoch)

    def campaign(self, key: str, *, on_deposed: FenceFn,
                 wait: Optional[float] = None) -> "Leadership":
        """Leader election: waits in `key`'s queue until this process leads. Leadership
        is the hold; `Leadership.term` is its fencing token. `on_deposed` (required, like
        `on_fence`) runs if the leadership is lost without `resign()`. `wait`: seconds to
        stay a candidate before giving up with `Held` (None, the default: for as long as
        it takes; 0: lead now or not at all)."""
        if not callable(on_deposed):
            raise TypeError("campaign: on_deposed is required: the function that stops "
                            "your work as leader if the leadership is lost")
        started = time.monotonic()

        def acquire(k: str, w: float, *, on_fence: FenceFn) -> Hold:
            return self._acquire(k, w, on_fence, False)

        try:
            leadership = _observe.campaign(acquire, key, on_deposed, wait)
        except BaseException as e:
            self._waited([key], None, started, e)
            raise
        if not leadership._hold._nested:
            self._waited([key], self._class_of([key]), started, None)
        return leadership

    @contextlib.contextmanager
    def hold(self, key: str, wait: float = 0.0, *, on_fence: FenceFn) -> Iterator[Hold]:
        """`with client.hold("pay/ledger/42", wait=5, on_fence=stop) as h:` ... the key is released when
        the block ends. If the hold did not cover the whole block (fenced, or past its
        deadline when the block ended), leaving it raises Fenced (unless the block raised
        already): its work may not have been exclusive."""
        h = self.acquire(key, wait, on_fence=on_fence)
        try:
            yield h
        except BaseException:
            with contextlib.suppress(errors.LockError):
                h.release()
            raise
        lapse = h.lapse()
        if lapse is not None:
            with contextlib.suppress(errors.LockError):
                h.release()
            raise errors.Fenced(f"the hold on {key} did not cover the whole block ({lapse})")
        h.release()

    def shutdown(self) -> None:
        """Ends every hold of this client now and closes its sessions: one CloseSession
        per session revokes its lease, so the next waiter is granted at once instead of
        when the TTL runs out. No on_fence runs: the owner ended the holds."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
            for h in self._holds.values():
                if h.link is not None:
                    self._close_link_locked(h.link)
            self._holds.clear()
            # Their sessions close below: the hold clocks end as `shutdown` there.
            self._permits.clear()
        first: Optional[errors.LockError] = None
        for s in sessions:
            was_fenced = s.fenced
            s.close()
            if was_fenced:
                # Its holds are dead already and its lease lapses within the margin.
                continue
            try:
                self._stub().CloseSession(
                    lock_pb2.CloseSessionRequest(session_id=s.id), timeout=CLOSE_TIMEOUT)
            except grpc.RpcError as e:
                err = errors.from_rpc_error(e)
                if not isinstance(err, errors.SessionExpired) and first is None:
                    first = err
        self._channel.close()
        if first is not None:
            raise first

    def __enter__(self) -> "LockClient":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # -- internals ---------------------------------------------------------------------
    def _stub(self) -> lock_pb2_grpc.LockStub:
        """The stub, on a new channel when the SVID files changed (rotation)."""
        with self._lock:
            stamp = _stamp(self._credentials)
            if stamp != self._stamp:
                # The old channel stays open for the streams already on it.
                self._channel = _channel(self._endpoint, self._credentials)
                self._stamp = stamp
            return lock_pb2_grpc.LockStub(self._channel)

    def _grant(self, key: str, req: lock_pb2.AcquireRequest,
               timeout: float) -> Tuple[lock_pb2.AcquireResponse, Optional[_HoldLink]]:
        """The acquire on a Hold stream when the budget allows (kept for the release),
        else the unary call."""
        with self._lock:
            stream = self._open_streams < self._max_hold_streams
            if stream:
                self._open_streams += 1
        if not stream:
            try:
                r = self._stub().Acquire(req, metadata=keyed(key), timeout=timeout)
            except grpc.RpcError as e:
                raise errors.from_rpc_error(e) from None
            return r, None
        link = _HoldLink(self._stub(), key)
        try:
            answer = link.ask(lock_pb2.HoldRequest(acquire=req), timeout)
            if answer is None or answer.WhichOneof("step") != "acquired":
                raise errors.Unavailable("the hold stream ended without answering the acquire")
            return answer.acquired, link
        except BaseException:
            self._close_link(link)
            raise

    def _close_link(self, link: _HoldLink) -> None:
        with self._lock:
            self._close_link_locked(link)

    def _close_link_locked(self, link: _HoldLink) -> None:
        link.close()
        self._open_streams -= 1

    def _held(self, key: str, hold_id: int, token: int, s: _Session,
              on_fence: Optional[FenceFn], class_name: str,
              link: Optional[_HoldLink] = None) -> Hold:
        clock = _metrics.HoldClock(self._metrics, class_name)
        s.attach(hold_id, on_fence)
        s.attach(clock, clock.fenced)
        with self._lock:
            self._holds[key] = _Reentry(count=1, token=token, session=s, clock=clock, link=link)
        return Hold(self, key, hold_id, token, s)

    def _waited(self, keys: List[str], class_name: Optional[str], started: float,
                err: Optional[BaseException]) -> None:
        """Records an acquire call's wait: granted (`err` None) or its outcome."""
        if err is None:
            outcome = "granted"
        else:
            outcome = _metrics.outcome_of(err)
            class_name = self._class_of(keys)
        self._metrics.waited(class_name or _metrics.UNKNOWN_CLASS, outcome,
                             time.monotonic() - started)

    def _learn_class(self, key: str, class_name: str) -> None:
        if not class_name:
            return
        with self._lock:
            if len(self._classes) >= MAX_PLACES and key not in self._classes:
                self._classes.clear()
            self._classes[key] = class_name

    def _granted_class(self, key: str, class_name: str) -> str:
        """The class a grant's answer named (remembered for the key's later refusals)."""
        self._learn_class(key, class_name)
        return class_name or self._class_of([key])

    def _class_of(self, keys: List[str]) -> str:
        """The class last named for `keys`: a set counts under its first key's (in sort
        order, the key its session is opened for)."""
        with self._lock:
            return self._classes.get(min(keys)) or _metrics.UNKNOWN_CLASS

    def _own_session(self, key: str) -> int:
        """The session this client holds `key` on, else its session for the key's
        cluster; 0 when it has none."""
        with self._lock:
            entry = self._holds.get(key)
            if entry is not None:
                return entry.session.id
        s = self._session_for_key(key)
        return s.id if s is not None else 0

    def _any_session(self) -> Optional[_Session]:
        with self._lock:
            return next((s for s in self._sessions.values() if not s.fenced), None)

    def _session_for(self, ttl_seconds: int) -> Optional[_Session]:
        with self._lock:
            return next((s for (ttl, _), s in self._sessions.items()
                         if ttl == ttl_seconds and not s.fenced), None)

    def _session_with_tag(self, tag: int) -> Optional[_Session]:
        with self._lock:
            return next((s for (_, t), s in self._sessions.items()
                         if t == tag and not s.fenced), None)

    def _session_for_key(self, key: str) -> Optional[_Session]:
        with self._lock:
            tag = self._places.get(key)
        if tag is None:
            return self._any_session()
        return self._session_with_tag(tag) or self._any_session()

    def _learn_place(self, key: str, tag: int) -> None:
        with self._lock:
            if len(self._places) >= MAX_PLACES and key not in self._places:
                self._places.clear()
            self._places[key] = tag

    def _forget_session(self, s: _Session) -> None:
        with self._lock:
            for k in [k for k, x in self._sessions.items() if x is s]:
                del self._sessions[k]

    def _session_on_cluster(self, cluster: str) -> Optional[_Session]:
        with self._lock:
            tag = self._cluster_tags.get(cluster)
        return None if tag is None else self._session_with_tag(tag)

    def _learn_cluster(self, cluster: str, s: _Session) -> None:
        with self._lock:
            self._cluster_tags[cluster] = _tag_of(s.id)

    def _session_or_open(self, key: str,
                         wanted: Optional[Callable[[], Optional[_Session]]],
                         opened: Optional[Callable[[_Session], None]]) -> _Session:
        """The session to use when none was at hand: one another thread's acquire opened
        meanwhile, or a new one. Opening is serialised per client, so threads racing on a
        client without a session share the one opened first (ADR-10: one session per TTL
        per client, however many holds)."""
        with self._opening:
            found = wanted() if wanted is not None else self._session_for_key(key)
            if found is not None:
                return found
            s = self._open_session(key)
            if opened is not None:
                opened(s)
            return s

    def _open_session(self, key: str) -> _Session:
        """Opens the session for `key`'s class (its TTL) and starts renewing it."""
        sent = time.monotonic()
        stub = self._stub()
        try:
            r = stub.OpenSession(lock_pb2.OpenSessionRequest(key=key),
                                 metadata=keyed(key) + ((INSTANCE_METADATA, self._instance),),
                                 timeout=CALL_SLACK)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        s = _Session(r.session_id, float(r.ttl_seconds), sent, stub)
        self._learn_class(key, r.class_name)
        with self._lock:
            slot = (r.ttl_seconds, _tag_of(r.session_id))
            old = self._sessions.get(slot)
            self._sessions[slot] = s
        if old is not None and old.fenced:
            old.close()
        return s

    def _finish(self, key: str, hold_id: int, token: int, s: _Session) -> None:
        s.detach(hold_id)
        link: Optional[_HoldLink] = None
        clock: Optional[_metrics.HoldClock] = None
        with self._lock:
            entry = self._holds.get(key)
            if entry is None or entry.session is not s:
                # Ended by shutdown, or the entry is a later grant's (this hold was fenced
                # and the key taken again): not this hold's to count down.
                last = False
            elif entry.count > 1:
                entry.count -= 1
                last = False
            else:
                del self._holds[key]
                last = True
                link = entry.link
                clock = entry.clock
        if not last:
            return
        if clock is not None:
            s.detach(clock)
        try:
            if s.fenced:
                raise errors.Fenced("the hold was fenced before its release")
            req = lock_pb2.ReleaseRequest(key=key, token=token, session_id=s.id)
            if link is not None:
                try:
                    answer = link.ask(lock_pb2.HoldRequest(release=req), CALL_SLACK)
                    if answer is not None and answer.WhichOneof("step") == "released":
                        return
                except errors.Unavailable:
                    pass  # the stream ended or broke without releasing: the unary call
            try:
                self._stub().Release(req, metadata=keyed(key), timeout=CALL_SLACK)
            except grpc.RpcError as e:
                raise errors.from_rpc_error(e) from None
        finally:
            if clock is not None:
                clock.end("released")
            if link is not None:
                self._close_link(link)

    def _finish_permit(self, key: str, hold_id: int, token: int, s: _Session) -> None:
        """One Permit ends: a nested one only detaches; the last releases the grant (mode
        PERMIT, by its token). Any of them raises Fenced if the grant was fenced."""
        s.detach(hold_id)
        last: Optional[_PermitEntry] = None
        with self._lock:
            entry = self._permits.get(key)
            if entry is None or entry.session is not s or entry.token != token:
                # Ended by shutdown, or the entry is a later grant's (this permit was fenced
                # and the key taken again): not this Permit's to count down.
                pass
            elif entry.count > 1:
                entry.count -= 1
            else:
                del self._permits[key]
                last = entry
        if last is not None:
            s.detach(last.clock)
        try:
            if s.fenced:
                raise errors.Fenced("the permit was fenced before its release")
            if last is None:
                return
            req = lock_pb2.ReleaseRequest(key=key, token=token, session_id=s.id,
                                          mode=lock_pb2.HOLD_MODE_PERMIT)
            try:
                self._stub().Release(req, metadata=keyed(key), timeout=CALL_SLACK)
            except grpc.RpcError as e:
                raise errors.from_rpc_error(e) from None
        finally:
            # Fenced: its hold time was counted when the fence ran (this end is a no-op).
            if last is not None:
                last.clock.end("released")
