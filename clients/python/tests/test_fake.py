"""The client against the in-process fake service (tests/fake_lock.py): local state the
conformance driver reads, and re-entrancy across a fence."""

import threading

import pytest

from fake_lock import FakeLock, Served
from lock_client import Fenced, LockClient, MeshSidecar


@pytest.fixture
def served():
    s = Served(FakeLock(ttl_seconds=3))
    yield s
    s.stop()


def test_the_instance_sent_is_readable(served):
    named = LockClient(served.endpoint, MeshSidecar(), instance="pod-a:1:1")
    default = LockClient(served.endpoint, MeshSidecar())
    try:
        assert named.instance == "pod-a:1:1"
        assert default.instance.count(":") >= 2
    finally:
        named.shutdown()
        default.shutdown()


def test_sets_and_shared_holds_tell_their_remaining_ttl(served):
    c = LockClient(served.endpoint, MeshSidecar())
    try:
        s = c.acquire_all(["pay/a", "pay/b"], on_fence=lambda: None)
        r = c.acquire_shared("pay/r", on_fence=lambda: None)
        for h in (s, r):
            assert 0 < h.remaining_ttl() <= 2.0  # TTL 3 s less the 1 s margin
            assert h.can_start() and not h.fenced
        s.release()
        r.release()
    finally:
        c.shutdown()


def test_releasing_a_fenced_hold_leaves_the_keys_next_grant_alone(served):
    c = LockClient(served.endpoint, MeshSidecar())
    try:
        fenced = threading.Event()
        old = c.acquire("pay/k", on_fence=fenced.set)
        served.fake.expire(served.fake.session_of("pay/k"))
        assert fenced.wait(10)
        assert old.fenced and old.remaining_ttl() == 0.0
        new = c.acquire("pay/k", on_fence=lambda: None)
        assert new.token > old.token and not new.fenced
        old.release()
        # The newer grant is still held and still this client's to re-enter.
        assert served.fake.session_of("pay/k") is not None
        again = c.acquire("pay/k", on_fence=lambda: None)
        assert again.token == new.token
        again.release()
        assert served.fake.session_of("pay/k") is not None, "a nested release called"
        new.release()
        assert served.fake.session_of("pay/k") is None
    finally:
        c.shutdown()


def test_a_nested_hold_of_a_fenced_one_raises_fenced_on_the_last_release(served):
    c = LockClient(served.endpoint, MeshSidecar())
    try:
        fenced = threading.Event()
        h = c.acquire("pay/n", on_fence=fenced.set)
        served.fake.expire(served.fake.session_of("pay/n"))
        assert fenced.wait(10)
        with pytest.raises(Fenced):
            h.release()
    finally:
        c.shutdown()


def test_a_release_on_a_reset_hold_stream_goes_as_the_unary_call(served):
    c = LockClient(served.endpoint, MeshSidecar())
    try:
        h = c.acquire("pay/s", on_fence=lambda: None)
        assert c.open_hold_streams() == 1
        served.fake.reset_hold_streams = True
        h.release()
        assert served.fake.unary_releases == 1
        assert served.fake.session_of("pay/s") is None
        assert c.open_hold_streams() == 0
    finally:
        c.shutdown()


def test_an_observation_resumes_after_a_reset_from_the_last_revision(served):
    c = LockClient(served.endpoint, MeshSidecar())
    try:
        changes = c.observe("pay/o")
        now = next(changes)
        assert (now.change, now.revision, now.held) == ("current", 5, False)
        after = next(changes)
        assert (after.change, after.revision, after.held) == ("granted", 6, True)
        changes.close()
        assert served.fake.observe_asks == [0, 5]
    finally:
        c.shutdown()
