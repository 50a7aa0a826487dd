"""Client-side metrics (lock_client.metrics) against the in-process fake service: a grant,
a refusal, a release, a fenced hold and a shutdown are recorded under {class, outcome}, and
no label ever carries a key or a token."""

import threading
import time

import pytest

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client import CollectorRegistry  # noqa: E402

from fake_lock import FakeLock, Served  # noqa: E402
from lock_client import Held, LockClient, MeshSidecar  # noqa: E402
from lock_client import metrics  # noqa: E402


@pytest.fixture
def served():
    s = Served(FakeLock(ttl_seconds=3, class_name="fake-fast"))
    yield s
    s.stop()


def samples(registry, name):
    """{(class, outcome): value} of a family's `_count` (histograms) or `_total` (counter)."""
    out = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name in (name + "_count", name + "_total"):
                out[(s.labels.get("class"), s.labels.get("outcome"))] = s.value
    return out


def all_labels(registry):
    """Every sample of the client's families: (its label names without `le`, its values)."""
    for family in registry.collect():
        if not family.name.startswith("lock_client_"):
            continue
        for s in family.samples:
            labels = {k: v for k, v in s.labels.items() if k != "le"}
            yield family.name, s.name, labels


def test_grant_refusal_release_fence_and_shutdown_are_recorded(served):
    registry = CollectorRegistry()
    c = LockClient(served.endpoint, MeshSidecar(), registry=registry)
    tokens, keys = [], ["pay/ledger/1", "pay/ledger/busy", "pay/ledger/fenced", "pay/ledger/end"]
    try:
        h = c.acquire(keys[0], on_fence=lambda: None)
        tokens.append(h.token)
        # Nested: counted locally, no call, nothing recorded.
        inner = c.acquire(keys[0], on_fence=lambda: None)
        inner.release()
        h.release()

        served.fake.held_elsewhere.add(keys[1])
        with pytest.raises(Held):
            c.acquire(keys[1], on_fence=lambda: None)

        fenced = threading.Event()
        f = c.acquire(keys[2], on_fence=fenced.set)
        tokens.append(f.token)
        served.fake.expire(served.fake.session_of(keys[2]))
        assert fenced.wait(10), "the hold was not fenced"
        with pytest.raises(Exception):
            f.release()  # Fenced: ended already, not counted again

        last = c.acquire(keys[3], on_fence=lambda: None)
        tokens.append(last.token)
    finally:
        c.shutdown()

    wait = samples(registry, metrics.WAIT)
    # Three grants (the nested acquire made no call) and one refusal. The refused key's
    # class was never named by an answer: unknown.
    assert wait == {("fake-fast", "granted"): 3.0, ("unknown", "held"): 1.0}, wait
    hold = samples(registry, metrics.HOLD)
    assert hold == {("fake-fast", "released"): 1.0, ("fake-fast", "fenced"): 1.0,
                    ("fake-fast", "shutdown"): 1.0}, hold
    assert samples(registry, metrics.LOST) == {("fake-fast", None): 1.0}

    secrets = {str(t) for t in tokens} | set(keys) | {c.instance}
    seen = 0
    for family, name, labels in all_labels(registry):
        seen += 1
        want = {"class"} if family == metrics.LOST else {"class", "outcome"}
        assert set(labels) == want, (name, labels)
        assert not set(labels.values()) & secrets, (name, labels)
    assert seen > 0


def test_a_refusal_is_counted_under_the_class_last_named_for_its_key(served):
    registry = CollectorRegistry()
    c = LockClient(served.endpoint, MeshSidecar(), registry=registry)
    try:
        c.acquire("pay/k", on_fence=lambda: None).release()
        served.fake.held_elsewhere.add("pay/k")
        with pytest.raises(Held):
            c.acquire("pay/k", on_fence=lambda: None)
    finally:
        c.shutdown()
    assert samples(registry, metrics.WAIT)[("fake-fast", "held")] == 1.0


def test_sets_and_shared_holds_are_recorded(served):
    registry = CollectorRegistry()
    c = LockClient(served.endpoint, MeshSidecar(), registry=registry)
    try:
        s = c.acquire_all(["pay/b", "pay/a"], on_fence=lambda: None)
        s.release()
        r = c.acquire_shared("pay/r", on_fence=lambda: None)
        r.release()
    finally:
        c.shutdown()
    wait = samples(registry, metrics.WAIT)
    # The set's session was opened for its first key, which named the class.
    assert wait == {("fake-fast", "granted"): 2.0}, wait
    assert samples(registry, metrics.HOLD) == {("fake-fast", "released"): 2.0}


def test_two_clients_share_one_registry_and_none_records_nothing(served):
    registry = CollectorRegistry()
    a = LockClient(served.endpoint, MeshSidecar(), registry=registry)
    b = LockClient(served.endpoint, MeshSidecar(), registry=registry)
    quiet = LockClient(served.endpoint, MeshSidecar())
    try:
        a.acquire("pay/x", on_fence=lambda: None).release()
        b.acquire("pay/y", on_fence=lambda: None).release()
        quiet.acquire("pay/z", on_fence=lambda: None).release()
    finally:
        for c in (a, b, quiet):
            c.shutdown()
    assert samples(registry, metrics.WAIT) == {("fake-fast", "granted"): 2.0}
    assert quiet._metrics is metrics.NOOP


def test_a_campaign_records_one_wait_and_its_term_as_a_hold(served):
    registry = CollectorRegistry()
    c = LockClient(served.endpoint, MeshSidecar(), registry=registry)
    try:
        served.fake.held_elsewhere.add("pay/lead")
        started = time.monotonic()
        with pytest.raises(Held):
            c.campaign("pay/lead", on_deposed=lambda: None, wait=1.5)
        assert 1.4 <= time.monotonic() - started < 5
        served.fake.held_elsewhere.discard("pay/lead")
        lead = c.campaign("pay/lead", on_deposed=lambda: None, wait=1.0)
        assert lead.remaining_ttl() > 0 and not lead.deposed
        lead.resign()
    finally:
        c.shutdown()
    # The session was opened for the key: its class is known to the refused round too.
    assert samples(registry, metrics.WAIT) == {("fake-fast", "held"): 1.0,
                                               ("fake-fast", "granted"): 1.0}
    assert samples(registry, metrics.HOLD) == {("fake-fast", "released"): 1.0}


@pytest.mark.parametrize("err,outcome", [
    (Held("m", reason="HELD"), "held"),
    (metrics.errors.NoQuorum("m", reason="NO_QUORUM"), "no_quorum"),
    (metrics.errors.Unavailable("m"), "unavailable"),
    (ValueError("x"), "unavailable"),
    (KeyboardInterrupt(), "cancelled"),
])
def test_outcomes(err, outcome):
    assert metrics.outcome_of(err) == outcome


def test_permits_are_recorded_and_a_nested_one_is_not():
    fake = FakeLock(ttl_seconds=3, class_name="fake-sem")
    fake.semaphores["pay/sem/a"] = 1
    fake.semaphores["pay/sem/b"] = 1
    served = Served(fake)
    registry = CollectorRegistry()
    c = LockClient(served.endpoint, MeshSidecar(), registry=registry)
    other = LockClient(served.endpoint, MeshSidecar())
    tokens = []
    try:
        p = c.acquire_permit("pay/sem/a", on_fence=lambda: None)
        tokens.append(p.token)
        c.acquire_permit("pay/sem/a", on_fence=lambda: None).release()  # nested: nothing
        p.release()
        tokens.append(other.acquire_permit("pay/sem/b", on_fence=lambda: None).token)
        with pytest.raises(Held):
            c.acquire_permit("pay/sem/b", on_fence=lambda: None)
        fenced = threading.Event()
        f = c.acquire_permit("pay/sem/a", on_fence=fenced.set)
        tokens.append(f.token)
        fake.expire(next(s for s, _ in fake.permits["pay/sem/a"].values()))
        assert fenced.wait(10), "the permit was not fenced"
    finally:
        c.shutdown()
        other.shutdown()
        served.stop()
    # The refused key's session was opened for pay/sem/a: the class of b was never named.
    assert samples(registry, metrics.WAIT) == {("fake-sem", "granted"): 2.0,
                                               ("unknown", "held"): 1.0}
    assert samples(registry, metrics.HOLD) == {("fake-sem", "released"): 1.0,
                                               ("fake-sem", "fenced"): 1.0}
    assert samples(registry, metrics.LOST) == {("fake-sem", None): 1.0}
    secrets = {str(t) for t in tokens} | {"pay/sem/a", "pay/sem/b", c.instance}
    for family, name, labels in all_labels(registry):
        want = {"class"} if family == metrics.LOST else {"class", "outcome"}
        assert set(labels) == want, (name, labels)
        assert not set(labels.values()) & secrets, (name, labels)
