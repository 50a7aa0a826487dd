"""Pure logic: liveness, error decoding, key encoding, endpoint rules (no stack)."""

import os
import pathlib
import sys

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from lock_client import errors
from lock_client.client import check_endpoint
from lock_client.keys import encode_key, instance_for, process_instance, valid_instance
from lock_client.liveness import Lapse, Liveness


def test_drain_at_first_failure_fence_at_the_send_time_deadline():
    live = Liveness(15.0, 100.0)
    assert live.can_start(100.0)
    assert live.deadline() == 114.0
    live.renewed(105.0)
    assert live.deadline() == 119.0
    live.failed()
    assert not live.can_start(106.0), "drained at the first failure"
    assert not live.fence_due(118.9)
    assert live.fence_due(119.0)
    assert not live.fence_due(120.0), "fenced once"
    assert live.fenced and live.remaining(119.0) == 0.0
    live.renewed(119.5)
    assert live.fenced, "a late success does not revive a fenced session"


def test_an_older_success_does_not_move_the_deadline_back():
    live = Liveness(6.0, 10.0)
    live.renewed(12.0)
    live.renewed(11.0)
    assert live.deadline() == 17.0


@pytest.mark.parametrize("name,at,fence,expire,want", [
    ("well inside the deadline", 105.0, None, False, None),
    ("at the deadline, not yet fenced (frozen, just woken)", 129.0, None, False,
     Lapse(unrenewed=29.0, past_deadline=0.0, ttl=30.0)),
    ("37 s frozen, not yet fenced", 137.0, None, False,
     Lapse(unrenewed=37.0, past_deadline=8.0, ttl=30.0)),
    ("fenced by the thread", 130.0, 129.0, False,
     Lapse(unrenewed=30.0, past_deadline=1.0, ttl=30.0)),
    ("the service said expired", 102.0, None, True,
     Lapse(unrenewed=2.0, past_deadline=0.0, ttl=30.0)),
])
def test_covered_until_is_the_rust_table(name, at, fence, expire, want):
    """The same cases as lock-client's `covered_until_table` (issue 32)."""
    live = Liveness(30.0, 100.0)
    if fence is not None:
        assert live.fence_due(fence)
    if expire:
        live.expire()
    assert live.covered_until(at) == want, name


def test_instances_follow_the_services_rule():
    for ok in ["3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d", "ledger-7d9f8c-x2x4q", "a" * 253]:
        assert valid_instance(ok), ok
    for bad in ["", "with space", "slash/y", "caf\u00e9", "a" * 254]:
        assert not valid_instance(bad), bad
    a, b = process_instance(), process_instance()
    assert valid_instance(a) and valid_instance(b), (a, b)
    (pa, na), (pb, nb) = a.rsplit(":", 1), b.rsplit(":", 1)
    assert pa == pb, "one prefix and pid per process"
    assert pa.endswith(f":{os.getpid()}"), a
    assert int(nb) > int(na), "each client object takes the next number"


RANDOM = "p-0123456789abcdef"
_FITS = "u" * (253 - len(":4242:1"))


@pytest.mark.parametrize("env,pid,n,want", [
    # Valid LOCK_INSTANCE: the pod's prefix, then pid and counter.
    ("3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d", 1, 1, "3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d:1:1"),
    ("pod-a", 4242, 2, "pod-a:4242:2"),
    ("node-1.pod:pay_ledger", 7, 3, "node-1.pod:pay_ledger:7:3"),
    (_FITS, 4242, 1, _FITS + ":4242:1"),
    # Invalid: the random prefix, as when unset.
    ("", 4242, 1, RANDOM + ":4242:1"),
    ("with space", 4242, 1, RANDOM + ":4242:1"),
    ("slash/y", 4242, 1, RANDOM + ":4242:1"),
    ("caf\u00e9", 4242, 1, RANDOM + ":4242:1"),
    # Too long, by itself or once the suffix is added.
    (_FITS + "u", 4242, 1, RANDOM + ":4242:1"),
    ("u" * 253, 1, 1, RANDOM + ":1:1"),
    # No LOCK_INSTANCE.
    (None, 1, 1, RANDOM + ":1:1"),
    (None, 2**32 - 1, 2**64 - 1, f"{RANDOM}:{2**32 - 1}:{2**64 - 1}"),
])
def test_instance_rule(env, pid, n, want):
    got = instance_for(env, pid, n, RANDOM)
    assert got == want
    assert valid_instance(got), got


def _details(reason: str, **metadata: str) -> bytes:
    info = error_details_pb2.ErrorInfo(reason=reason, domain="lock.v1", metadata=metadata)
    any_ = any_pb2.Any()
    any_.Pack(info)
    return status_pb2.Status(code=9, message="m", details=[any_]).SerializeToString()


@pytest.mark.parametrize(
    "code,details,expected,transient",
    [
        (grpc.StatusCode.ABORTED, _details("HELD"), errors.Held, False),
        (grpc.StatusCode.DEADLINE_EXCEEDED, _details("HELD"), errors.Held, False),
        (grpc.StatusCode.PERMISSION_DENIED, _details("NOT_GRANTED"), errors.NotGranted, False),
        (grpc.StatusCode.FAILED_PRECONDITION, _details("STALE_TOKEN"), errors.StaleToken, False),
        (grpc.StatusCode.NOT_FOUND, _details("SESSION_EXPIRED"), errors.SessionExpired, False),
        (grpc.StatusCode.INVALID_ARGUMENT, _details("INVALID_KEY"), errors.InvalidRequest, False),
        (grpc.StatusCode.INVALID_ARGUMENT, _details("MALFORMED_REQUEST"), errors.InvalidRequest, False),
        (grpc.StatusCode.UNAVAILABLE, _details("NO_QUORUM"), errors.NoQuorum, True),
        (grpc.StatusCode.UNAVAILABLE, _details("SEALED"), errors.Sealed, False),
        (grpc.StatusCode.UNAVAILABLE, _details("DRAINING"), errors.Draining, True),
        (grpc.StatusCode.UNAVAILABLE, _details("MOVING"), errors.Moving, True),
        (grpc.StatusCode.FAILED_PRECONDITION, _details("WRONG_SESSION_PLACE", cluster="e2"),
         errors.WrongSessionPlace, False),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, _details("RATE_LIMITED", retry_after_ms="250"),
         errors.RateLimited, True),
        (grpc.StatusCode.UNAVAILABLE, None, errors.Unavailable, True),
        (grpc.StatusCode.DEADLINE_EXCEEDED, None, errors.Unavailable, True),
        (grpc.StatusCode.INTERNAL, None, errors.OtherError, False),
        # another domain's ErrorInfo is not a refusal of ours
        (grpc.StatusCode.ABORTED,
         _details("HELD").replace(b"lock.v1", b"other.x"), errors.OtherError, False),
        (grpc.StatusCode.ABORTED, b"\xff\xfe garbage", errors.OtherError, False),
    ],
)
def test_statuses_become_typed_errors(code, details, expected, transient):
    err = errors.from_parts(code, "m", details)
    assert type(err) is expected
    assert err.transient is transient


def test_refusal_metadata_is_typed():
    e = errors.from_parts(grpc.StatusCode.FAILED_PRECONDITION,
                          "m", _details("WRONG_SESSION_TTL", **{"class": "pay-fast", "ttl_seconds": "5"}))
    assert isinstance(e, errors.WrongSessionTtl)
    assert (e.class_name, e.ttl_seconds) == ("pay-fast", 5)
    r = errors.from_parts(grpc.StatusCode.RESOURCE_EXHAUSTED, "m",
                          _details("RATE_LIMITED", retry_after_ms="250"))
    assert r.retry_after == 0.25
    g = errors.from_parts(grpc.StatusCode.FAILED_PRECONDITION, "m",
                          _details("REGION_REDIRECT", region="eu-west"))
    assert isinstance(g, errors.RegionRedirect) and g.region == "eu-west"
    w = errors.from_parts(grpc.StatusCode.FAILED_PRECONDITION, "m",
                          _details("WRONG_SESSION_PLACE", cluster="e2"))
    assert isinstance(w, errors.WrongSessionPlace) and w.cluster == "e2"


@pytest.mark.parametrize(
    "key,encoded",
    [
        ("pay/ledger/42", "pay/ledger/42"),
        ("pay/ledger/über", "pay/ledger/%C3%BCber"),
        ("pay/a b", "pay/a%20b"),
        ("pay/100%", "pay/100%25"),
        ("pay/ключ", "pay/%D0%BA%D0%BB%D1%8E%D1%87"),
    ],
)
def test_keys_are_encoded_as_the_rust_client_does(key, encoded):
    assert encode_key(key) == encoded


@pytest.mark.parametrize(
    "endpoint,plaintext,ok",
    [
        ("https://lock-edge:8443", False, True),
        ("http://127.0.0.1:15001", True, True),
        ("http://localhost:15001", True, True),
        ("http://[::1]:15001", True, True),
        ("http://10.0.0.5:15001", True, False),
        ("http://127.0.0.1.evil.example:80", True, False),
        ("http://127.0.0.1:8443", False, False),
        ("https://127.0.0.1:15001", True, False),
        ("127.0.0.1:8443", False, False),
    ],
)
def test_endpoints_by_mode(endpoint, plaintext, ok):
    if ok:
        check_endpoint(endpoint, plaintext)
    else:
        with pytest.raises(ValueError):
            check_endpoint(endpoint, plaintext)


def test_the_committed_stubs_are_generated_from_the_proto(tmp_path):
    here = pathlib.Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(here))
    try:
        import generate  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    generate.generate(tmp_path)
    committed = here / "src" / "lock_client" / "_proto"
    for rel in ["lock/v1/lock_pb2.py", "lock/v1/lock_pb2.pyi", "lock/v1/lock_pb2_grpc.py"]:
        assert (tmp_path / rel).read_text() == (committed / rel).read_text(), (
            f"{rel} is stale: run `python clients/python/generate.py`"
        )


@pytest.mark.parametrize("kwargs", [{}, {"wait": 5}, {"on_fence": None}, {"on_fence": "stop"}])
def test_an_acquire_without_on_fence_is_refused_before_anything_is_sent(kwargs):
    # Port 1 on loopback: nothing listens, so a call that went out would fail UNAVAILABLE,
    # not with this TypeError (ADR-12: on_fence is required).
    from lock_client import LockClient, MeshSidecar
    c = LockClient("http://127.0.0.1:1", MeshSidecar())
    try:
        with pytest.raises(TypeError, match="on_fence"):
            c.acquire("pay/x", **kwargs)
        with pytest.raises(TypeError, match="on_fence"):
            with c.hold("pay/x", **kwargs):
                pass
    finally:
        c.shutdown()


@pytest.mark.parametrize("code,details,expected", [
    # A received RST_STREAM (an arbiter killed under the stream) arrives as INTERNAL.
    (grpc.StatusCode.INTERNAL, None, errors.Unavailable),
    (grpc.StatusCode.UNAVAILABLE, None, errors.Unavailable),
    # The service's own INTERNAL, and every refusal, stay as they are.
    (grpc.StatusCode.INTERNAL, _details("INTERNAL"), errors.OtherError),
    (grpc.StatusCode.ABORTED, _details("HELD"), errors.Held),
    (grpc.StatusCode.UNIMPLEMENTED, None, errors.OtherError),
])
def test_a_reset_on_a_stream_is_the_stream_breaking(code, details, expected):
    assert type(errors.on_stream(errors.from_parts(code, "m", details))) is expected
