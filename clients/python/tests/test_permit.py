"""Semaphore permits (`acquire_permit`) against the in-process fake service: distinct
permits, HELD when all are taken, nesting on one client with one release heard, the wrong
class refused, fencing, and the metrics."""

import threading

import pytest

from fake_lock import FakeLock, Served
from lock_client import Fenced, Held, InvalidRequest, LockClient, MeshSidecar, Permit

SEM = "pay/sem/pool"


@pytest.fixture
def served():
    fake = FakeLock(ttl_seconds=3, class_name="fake-sem")
    fake.semaphores[SEM] = 3
    s = Served(fake)
    yield s
    s.stop()


@pytest.fixture
def clients(served):
    made = []

    def make(**kwargs) -> LockClient:
        c = LockClient(served.endpoint, MeshSidecar(), **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.shutdown()


def test_three_clients_hold_three_permits_and_a_fourth_gets_the_freed_one(served, clients):
    a, b, c, d = (clients() for _ in range(4))
    held = [x.acquire_permit(SEM, on_fence=lambda: None) for x in (a, b, c)]
    assert sorted(p.permit for p in held) == [0, 1, 2]
    assert len({p.token for p in held}) == 3
    with pytest.raises(Held):
        d.acquire_permit(SEM, wait=0, on_fence=lambda: None)
    freed = held[1]
    freed.release()
    assert served.fake.permit_releases == [(SEM, freed.permit, freed.token)]
    got = d.acquire_permit(SEM, on_fence=lambda: None)
    assert got.permit == freed.permit and got.token > freed.token
    for p in (held[0], held[2], got):
        p.release()
    assert served.fake.permits_held(SEM) == 0


def test_a_second_acquire_nests_and_only_the_last_release_calls(served, clients):
    c = clients()
    outer = c.acquire_permit(SEM, on_fence=lambda: None)
    inner = c.acquire_permit(SEM, on_fence=lambda: None)
    assert (inner.permit, inner.token) == (outer.permit, outer.token)
    assert served.fake.permits_held(SEM) == 1
    outer.release()
    assert served.fake.permit_releases == [], "a nested release called the service"
    assert served.fake.permits_held(SEM) == 1
    inner.release()
    inner.release()  # once only
    assert served.fake.permit_releases == [(SEM, outer.permit, outer.token)]


def test_concurrent_first_acquires_of_one_client_share_the_grant(served, clients):
    """Two threads of one client ask at once: the service answers the session's second ask
    with its grant, and the client nests the two, so the first release keeps the permit."""
    c = clients()
    got, barrier = [], threading.Barrier(2)

    def take():
        barrier.wait()
        got.append(c.acquire_permit(SEM, on_fence=lambda: None))

    threads = [threading.Thread(target=take) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(got) == 2 and got[0].token == got[1].token
    got[0].release()
    assert served.fake.permits_held(SEM) == 1
    got[1].release()
    assert served.fake.permits_held(SEM) == 0
    assert len(served.fake.permit_releases) == 1


def test_a_key_of_another_class_is_refused_malformed(served, clients):
    with pytest.raises(InvalidRequest) as e:
        clients().acquire_permit("pay/ledger/1", on_fence=lambda: None)
    assert e.value.reason == "MALFORMED_REQUEST"


def test_the_context_manager_releases_and_the_repr_hides_the_token(served, clients):
    c = clients()
    with c.acquire_permit(SEM, on_fence=lambda: None) as p:
        assert isinstance(p, Permit) and p.can_start() and not p.fenced
        assert 0 < p.remaining_ttl() <= 2.0  # TTL 3 s less the 1 s margin
        assert str(p.token) not in repr(p)
        assert served.fake.permits_held(SEM) == 1
    assert served.fake.permits_held(SEM) == 0


def test_a_fenced_permit_runs_on_fence_and_the_next_acquire_is_a_new_grant(served, clients):
    c = clients()
    fenced = threading.Event()
    old = c.acquire_permit(SEM, on_fence=fenced.set)
    served.fake.expire(next(s for s, _ in served.fake.permits[SEM].values()))
    assert fenced.wait(10), "on_fence did not run"
    assert old.fenced and not old.was_continuous()
    new = c.acquire_permit(SEM, on_fence=lambda: None)
    assert new.token > old.token and not new.fenced
    with pytest.raises(Fenced):
        old.release()
    # The old Permit's release left the newer grant alone.
    assert served.fake.permits_held(SEM) == 1
    new.release()
    assert served.fake.permits_held(SEM) == 0


def test_an_acquire_without_on_fence_is_refused_before_anything_is_sent():
    c = LockClient("http://127.0.0.1:1", MeshSidecar())
    try:
        with pytest.raises(TypeError, match="on_fence"):
            c.acquire_permit(SEM, on_fence=None)  # type: ignore[arg-type]
    finally:
        c.shutdown()
