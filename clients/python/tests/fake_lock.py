"""A small in-process lock.v1 server for unit tests: enough of the service (sessions,
KeepAlive, Acquire, Hold, Release, AcquireAll, CloseSession) to drive the client without
the stack. It keeps no queue: a held key is refused HELD at once. Keys named in
`semaphores` are semaphores (mode PERMIT only, one permit per session). Plaintext on loopback,
reached with `MeshSidecar()`."""

from __future__ import annotations

import itertools
import threading
from concurrent import futures
from typing import Dict, List, Optional, Set, Tuple

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from lock_client._proto.lock.v1 import lock_pb2, lock_pb2_grpc
from lock_client.errors import DETAILS_TRAILER, DOMAIN


def refuse(context: grpc.ServicerContext, code: grpc.StatusCode, reason: str,
           message: str) -> None:
    """Ends the call with a lock.v1 refusal, as the service does (ErrorInfo trailer)."""
    info = error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN)
    any_ = any_pb2.Any()
    any_.Pack(info)
    status = status_pb2.Status(code=code.value[0], message=message, details=[any_])
    context.set_trailing_metadata(((DETAILS_TRAILER, status.SerializeToString()),))
    context.abort(code, message)


class FakeLock(lock_pb2_grpc.LockServicer):
    def __init__(self, ttl_seconds: int = 3, class_name: str = "fake-fast"):
        self.ttl_seconds = ttl_seconds
        self.class_name = class_name
        self._lock = threading.Lock()
        self._sessions = itertools.count(1)
        self._tokens = itertools.count(1 << 32)
        # key -> session holding it
        self.holds: Dict[str, int] = {}
        # Sessions the next KeepAlive answers as expired (ttl 0).
        self.expired: Set[int] = set()
        # Keys refused HELD whoever asks (held by "another identity").
        self.held_elsewhere: Set[str] = set()
        self.closed: Set[int] = set()
        # Hold streams reset (INTERNAL, no refusal) when a release arrives on them, as an
        # arbiter killed under the stream does; unary Releases counted.
        self.reset_hold_streams = False
        self.unary_releases = 0
        # The after_revision of each Observe call.
        self.observe_asks: list = []
        # Semaphore keys and their N; their permits held: key -> {permit: (session, token)}.
        self.semaphores: Dict[str, int] = {}
        self.permits: Dict[str, Dict[int, Tuple[int, int]]] = {}
        # Every PERMIT release heard: (key, permit, token).
        self.permit_releases: List[Tuple[str, int, int]] = []

    # -- sessions ------------------------------------------------------------------------
    def OpenSession(self, request, context):
        return lock_pb2.OpenSessionResponse(session_id=next(self._sessions),
                                            ttl_seconds=self.ttl_seconds,
                                            class_name=self.class_name)

    def KeepAlive(self, request_iterator, context):
        for r in request_iterator:
            with self._lock:
                gone = r.session_id in self.expired or r.session_id in self.closed
                if gone:
                    self._forget_locked(r.session_id)
            yield lock_pb2.KeepAliveResponse(session_id=r.session_id,
                                             ttl_seconds=0 if gone else self.ttl_seconds)

    def CloseSession(self, request, context):
        with self._lock:
            self.closed.add(request.session_id)
            self._forget_locked(request.session_id)
        return lock_pb2.CloseSessionResponse()

    def _forget_locked(self, session_id: int) -> None:
        """A session's lease is gone: so are its holds and permits."""
        for k in [k for k, s in self.holds.items() if s == session_id]:
            del self.holds[k]
        for held in self.permits.values():
            for p in [p for p, (s, _) in held.items() if s == session_id]:
                del held[p]

    def expire(self, session_id: int) -> None:
        with self._lock:
            self.expired.add(session_id)

    def session_of(self, key: str) -> Optional[int]:
        with self._lock:
            return self.holds.get(key)

    # -- holds ---------------------------------------------------------------------------
    def _take(self, key: str, session_id: int, context) -> lock_pb2.AcquireResponse:
        with self._lock:
            if key in self.held_elsewhere or key in self.holds:
                busy = True
            else:
                busy = False
                self.holds[key] = session_id
                token = next(self._tokens)
        if busy:
            refuse(context, grpc.StatusCode.ABORTED, "HELD", "held by another session")
        return lock_pb2.AcquireResponse(token=token, class_name=self.class_name,
                                        ttl_seconds=self.ttl_seconds)

    def Acquire(self, request, context):
        permit = request.mode == lock_pb2.HOLD_MODE_PERMIT
        if permit != (request.key in self.semaphores):
            refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST",
                   "PERMIT, and only PERMIT, on a semaphore's key")
        if permit:
            return self._take_permit(request.key, request.session_id, context)
        return self._take(request.key, request.session_id, context)

    def _take_permit(self, key: str, session_id: int, context) -> lock_pb2.AcquireResponse:
        with self._lock:
            held = self.permits.setdefault(key, {})
            mine = [(p, t) for p, (s, t) in held.items() if s == session_id]
            free = [p for p in range(self.semaphores[key]) if p not in held]
            if mine:
                # A session holds at most one permit: asked again, the same grant.
                permit, token = mine[0]
            elif free:
                permit, token = free[0], next(self._tokens)
                held[permit] = (session_id, token)
            else:
                permit = -1
        if permit < 0:
            refuse(context, grpc.StatusCode.ABORTED, "HELD", "every permit is held")
        return lock_pb2.AcquireResponse(token=token, class_name=self.class_name,
                                        ttl_seconds=self.ttl_seconds, permit=permit)

    def permits_held(self, key: str) -> int:
        with self._lock:
            return len(self.permits.get(key, {}))

    def Hold(self, request_iterator, context):
        for r in request_iterator:
            if r.WhichOneof("step") == "acquire":
                yield lock_pb2.HoldResponse(acquired=self._take(r.acquire.key,
                                                                r.acquire.session_id, context))
            else:
                if self.reset_hold_streams:
                    context.abort(grpc.StatusCode.INTERNAL, "Stream removed")
                self._drop(r.release.key)
                yield lock_pb2.HoldResponse(released=lock_pb2.ReleaseResponse())
                return

    def Release(self, request, context):
        with self._lock:
            self.unary_releases += 1
            found = False
            if request.mode == lock_pb2.HOLD_MODE_PERMIT:
                held = self.permits.get(request.key, {})
                for p, (_, t) in list(held.items()):
                    if t == request.token:
                        del held[p]
                        self.permit_releases.append((request.key, p, t))
                        found = True
        if request.mode == lock_pb2.HOLD_MODE_PERMIT:
            if not found:
                refuse(context, grpc.StatusCode.FAILED_PRECONDITION, "STALE_TOKEN",
                       "no permit of the key has this token")
            return lock_pb2.ReleaseResponse()
        self._drop(request.key)
        return lock_pb2.ReleaseResponse()

    def AcquireAll(self, request, context):
        with self._lock:
            if any(k in self.holds or k in self.held_elsewhere for k in request.keys):
                busy = True
            else:
                busy = False
                for k in request.keys:
                    self.holds[k] = request.session_id
                token = next(self._tokens)
        if busy:
            refuse(context, grpc.StatusCode.ABORTED, "HELD", "held by another session")
        return lock_pb2.AcquireAllResponse(token=token, keys=sorted(request.keys),
                                           ttl_seconds=self.ttl_seconds)

    def ReleaseAll(self, request, context):
        for k in request.keys:
            self._drop(k)
        return lock_pb2.ReleaseAllResponse()

    # -- observe -------------------------------------------------------------------------
    def Observe(self, request, context):
        """First stream: the key's holder now (revision 5), then a reset without a refusal
        (an arbiter killed under it). Later streams: a grant after the revision asked."""
        with self._lock:
            self.observe_asks.append(request.after_revision)
            first = len(self.observe_asks) == 1
        if first:
            yield lock_pb2.ObserveResponse(event=lock_pb2.OBSERVE_EVENT_CURRENT, revision=5,
                                           store_epoch=1)
            context.abort(grpc.StatusCode.INTERNAL, "Stream removed")
        yield lock_pb2.ObserveResponse(event=lock_pb2.OBSERVE_EVENT_GRANTED,
                                       revision=request.after_revision + 1, held=True,
                                       store_epoch=1)

    def _drop(self, key: str) -> None:
        with self._lock:
            self.holds.pop(key, None)


class Served:
    """A FakeLock on a loopback port; `endpoint` is for `LockClient(..., MeshSidecar())`."""

    def __init__(self, fake: FakeLock):
        self.fake = fake
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        lock_pb2_grpc.add_LockServicer_to_server(fake, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.endpoint = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self._server.stop(grace=None)
