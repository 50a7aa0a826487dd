"""The Python client against the real stack (Envoy with the filter, arbiters, etcd)."""

import concurrent.futures
import subprocess
import json
import os
import signal
import sys
import threading
import time
import urllib.request
import uuid

import pytest

from lock_client import (
    Fenced,
    Held,
    InvalidRequest,
    LeakedHold,
    LockClient,
    MeshSidecar,
    NotGranted,
)

pytestmark = pytest.mark.stack


def unfenced() -> None:
    """The fence callback of tests whose holds guard no work (on_fence is required: ADR-12)."""


def fresh(prefix: str) -> str:
    return f"{prefix}/py-{uuid.uuid4().hex[:10]}"


def test_a_hold_gives_a_token_and_a_later_grant_a_greater_one(locks, stack_env):
    key = fresh(stack_env["prefix"])
    first = locks.acquire(key, on_fence=unfenced)
    assert first.can_start() and first.token > 0
    first.release()
    second = locks.acquire(key, on_fence=unfenced)
    assert second.token > first.token
    second.release()


def test_the_context_manager_holds_for_the_block_and_releases_after(locks, other_locks, stack_env):
    key = fresh(stack_env["prefix"])
    with locks.hold(key, on_fence=unfenced) as h:
        assert h.can_start()
        with pytest.raises(Held):
            other_locks.acquire(key, wait=0, on_fence=unfenced)
    taken = other_locks.acquire(key, wait=2, on_fence=unfenced)
    assert taken.token > h.token
    taken.release()


def test_a_waiter_is_granted_when_the_holder_releases(locks, other_locks, stack_env):
    key = fresh(stack_env["prefix"])
    holder = locks.acquire(key, on_fence=unfenced)
    got = {}

    def wait():
        got["hold"] = other_locks.acquire(key, wait=10, on_fence=unfenced)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.5)
    assert "hold" not in got, "granted while held"
    holder.release()
    t.join(timeout=10)
    assert got["hold"].token > holder.token
    got["hold"].release()


def test_nested_acquires_count_locally_and_the_last_release_calls(locks, other_locks, stack_env):
    key = fresh(stack_env["prefix"])
    outer = locks.acquire(key, on_fence=unfenced)
    inner = locks.acquire(key, on_fence=unfenced)
    assert inner.token == outer.token
    inner.release()
    with pytest.raises(Held):
        other_locks.acquire(key, wait=0, on_fence=unfenced)
    outer.release()
    other_locks.acquire(key, wait=2, on_fence=unfenced).release()


def test_replicas_of_one_identity_take_turns(replica, stack_env):
    """Issue 32: three replicas (one SPIFFE ID, three instances) on one key, each waiting
    its turn: every one is granted in turn (FIFO handoff), none hears LEAKED_HOLD."""
    key = fresh(stack_env["prefix"])
    pods = [replica(f"pod-{i}-{uuid.uuid4().hex[:6]}") for i in range(3)]
    tokens, errors_seen, lock = [], [], threading.Lock()

    def run(c: LockClient) -> None:
        for _ in range(3):
            try:
                with c.hold(key, wait=20, on_fence=unfenced) as h:
                    with lock:
                        tokens.append((h.token, id(c)))
                    time.sleep(0.05)
            except Exception as e:  # recorded: the assertion below names it
                errors_seen.append(repr(e))

    threads = [threading.Thread(target=run, args=(c,)) for c in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors_seen, errors_seen
    assert len(tokens) == 9
    assert [t for t, _ in tokens] == sorted(t for t, _ in tokens), "tokens rise in grant order"
    handoffs = sum(1 for a, b in zip(tokens, tokens[1:]) if a[1] != b[1])
    print(f"replicas: 9 holds, {handoffs} handoffs between siblings")
    assert handoffs >= 2


def test_observe_follows_a_key_and_the_token_reaches_only_its_holder(replica, other_locks, stack_env):
    """Issue 35: another identity observes a key a replica holds and releases; the holder
    sees its own token, its sibling (same SVID, another instance) does not."""
    key = fresh(stack_env["prefix"])
    a, b = replica(f"obs-a-{uuid.uuid4().hex[:6]}"), replica(f"obs-b-{uuid.uuid4().hex[:6]}")
    b.acquire(key + "-b", on_fence=unfenced).release()  # b's own session in the class
    watching = other_locks.observe(key)
    first = next(watching)
    assert (first.change, first.held, first.token) == ("current", False, None)
    h = a.acquire(key, wait=5, on_fence=unfenced)
    granted = next(watching)
    assert (granted.change, granted.held, granted.token) == ("granted", True, None)
    assert granted.holder is not None and granted.holder.instance == a._instance
    own = next(a.observe(key))
    assert (own.change, own.token) == ("current", h.token)
    sibling = next(b.observe(key))
    assert (sibling.change, sibling.held, sibling.token) == ("current", True, None)
    assert str(h.token) not in repr(own), "an answer's repr never shows the token"
    h.release()
    released = next(watching)
    assert (released.change, released.held) == ("released", False)
    # Resumed after the last revision seen: the changes since, in order.
    again = other_locks.observe(key, after_revision=released.revision - 1,
                                after_store_epoch=released.store_epoch)
    assert next(again).change == "released"


def test_campaign_elects_one_replica_and_the_next_on_resign(replica, stack_env):
    """Issue 35: two replicas of one identity campaign; one leads, the other leads once it
    resigns, under a higher term."""
    key = fresh(stack_env["prefix"])
    a, b = replica(f"elect-a-{uuid.uuid4().hex[:6]}"), replica(f"elect-b-{uuid.uuid4().hex[:6]}")
    first = a.campaign(key, on_deposed=unfenced)
    assert first.can_lead()
    won = []
    t = threading.Thread(target=lambda: won.append(b.campaign(key, on_deposed=unfenced)))
    t.start()
    time.sleep(0.5)
    assert not won, "one leader at a time"
    first.resign()
    t.join(timeout=20)
    assert won and won[0].term > first.term
    assert str(won[0].term) not in repr(won[0])
    won[0].resign()
    with pytest.raises(TypeError):
        a.campaign(key, on_deposed=None)


def test_a_restarted_process_is_still_told_leaked_hold(replica, stack_env):
    """Issue 50, the restart case: a container's main process that restarts is often pid 1
    again and builds its first client again, so it sends its previous life's instance
    (`<prefix>:<pid>:1`) and, meeting its own old hold, is told LEAKED_HOLD, at once and also
    when it would wait. A test cannot reuse a pid: the restarted life is a client given the
    first life's instance explicitly (an explicit instance is sent as it is)."""
    key = fresh(stack_env["prefix"])
    first = replica()
    prefix, pid, n = first._instance.rsplit(":", 2)
    assert (pid, int(n) >= 1) == (str(os.getpid()), True), first._instance
    again = replica(first._instance)
    assert again._instance == first._instance
    h = first.acquire(key, on_fence=unfenced)
    with pytest.raises(LeakedHold):
        again.acquire(key, wait=0, on_fence=unfenced)
    with pytest.raises(LeakedHold):
        again.acquire(key, wait=2, on_fence=unfenced)
    h.release()
    again.acquire(key, on_fence=unfenced).release()


def test_two_clients_of_one_process_queue(replica, stack_env):
    """Issue 50: two client objects of one process, neither naming an instance, are two
    instances (the same prefix and pid, the next number): the second is told HELD, not
    LEAKED_HOLD, and when it waits it queues and is granted once the first releases."""
    key = fresh(stack_env["prefix"])
    first, second = replica(), replica()
    assert first._instance != second._instance
    assert first._instance.rsplit(":", 1)[0] == second._instance.rsplit(":", 1)[0]
    h = first.acquire(key, on_fence=unfenced)
    with pytest.raises(Held):
        second.acquire(key, wait=0, on_fence=unfenced)
    got = []
    t = threading.Thread(target=lambda: got.append(second.acquire(key, wait=20, on_fence=unfenced)))
    t.start()
    time.sleep(0.5)
    h.release()
    t.join(timeout=30)
    assert got and got[0].token > h.token, got
    got[0].release()


_SIBLING_CHILD = """
import os, sys
from lock_client import Held, LockClient, SvidFiles
c = LockClient(os.environ["LOCK_ENDPOINT"],
               SvidFiles(os.environ["LOCK_SVID"], os.environ["LOCK_SVID_KEY"], os.environ["LOCK_CA"]))
print(c._instance, flush=True)
try:
    h = c.acquire(sys.argv[1], wait=0, on_fence=lambda: None)
except Held:
    print("refused HELD", flush=True)
    h = c.acquire(sys.argv[1], wait=20, on_fence=lambda: None)
print("held", flush=True)
sys.stdin.readline()
h.release()
c.shutdown()
"""


def test_worker_processes_sharing_lock_instance_queue(stack_env):
    """Issue 50: two worker processes of one pod share LOCK_INSTANCE (the pod UID) and
    their identity; their pids tell them apart, so the second queues (HELD at wait=0, then
    granted once the first releases) instead of being told LEAKED_HOLD."""
    key = fresh(stack_env["prefix"])
    shared = f"pod-{uuid.uuid4()}"
    env = dict(os.environ, LOCK_INSTANCE=shared,
               PYTHONPATH=os.path.join(os.path.dirname(__file__), "..", "src"))
    children = []

    def worker() -> subprocess.Popen:
        children.append(subprocess.Popen(
            [sys.executable, "-c", _SIBLING_CHILD, key], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=env))
        return children[-1]

    try:
        a = worker()
        first_instance = a.stdout.readline().strip()
        assert a.stdout.readline().strip() == "held"
        b = worker()
        second_instance = b.stdout.readline().strip()
        assert first_instance == f"{shared}:{a.pid}:1", first_instance
        assert second_instance == f"{shared}:{b.pid}:1", second_instance
        assert b.stdout.readline().strip() == "refused HELD", "a sibling worker queues"
        a.stdin.write("go\n")
        a.stdin.flush()
        assert a.wait(timeout=20) == 0
        assert b.stdout.readline().strip() == "held"
        b.stdin.write("go\n")
        b.stdin.flush()
        assert b.wait(timeout=20) == 0
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait(timeout=10)


_FROZEN_CHILD = """
import os, sys, time
from lock_client import LockClient, SvidFiles
c = LockClient(os.environ["LOCK_ENDPOINT"],
               SvidFiles(os.environ["LOCK_SVID"], os.environ["LOCK_SVID_KEY"], os.environ["LOCK_CA"]))
h = c.acquire(sys.argv[1], on_fence=lambda: None)
print("held", flush=True)
sys.stdin.readline()        # the parent freezes this process, then wakes it and writes
print("continuous" if h.was_continuous() else f"lapsed: {h.lapse()}", flush=True)
c.shutdown()
"""


def test_a_hold_frozen_past_its_ttl_is_not_continuous(stack_env):
    """Issue 32: a process frozen (SIGSTOP) past its TTL and woken must learn that its
    hold did not cover its work, however the wake-up races its renewal thread."""
    for freeze in (0.0, stack_env["ttl"] + 1.0):
        key = fresh(stack_env["prefix"])
        child = subprocess.Popen(
            [sys.executable, "-c", _FROZEN_CHILD, key], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), "..", "src")))
        try:
            assert child.stdout.readline().strip() == "held"
            if freeze:
                os.kill(child.pid, signal.SIGSTOP)
                time.sleep(freeze)
                os.kill(child.pid, signal.SIGCONT)
            child.stdin.write("go\n")
            child.stdin.flush()
            verdict = child.stdout.readline().strip()
            child.wait(timeout=20)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)
        if freeze:
            assert verdict.startswith("lapsed:"), verdict
        else:
            assert verdict == "continuous", verdict


def test_many_holds_share_one_session(locks, stack_env):
    holds = [locks.acquire(fresh(stack_env["prefix"]), on_fence=unfenced) for _ in range(20)]
    assert len({h._session.id for h in holds}) == 1
    # Renewed past two TTLs: one KeepAlive stream keeps all of them.
    time.sleep(stack_env["ttl"] * 2)
    assert all(h.can_start() and not h.fenced for h in holds)
    for h in holds:
        h.release()


def test_first_acquires_racing_on_a_fresh_client_share_one_session(locks, stack_env):
    # `locks` is a fresh client: none of the ten threads finds a session open.
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        holds = list(pool.map(
            lambda _: locks.acquire(fresh(stack_env["prefix"]), on_fence=unfenced), range(10)))
    assert len({h._session.id for h in holds}) == 1
    for h in holds:
        h.release()


def _fast_path_count() -> int:
    admin = os.environ["LOCK_ENVOY_ADMIN"]
    url = f"http://{admin}/stats?filter=^wasmcustom.lock_edge.fast_path$"
    with urllib.request.urlopen(url, timeout=2) as r:
        return sum(int(line.rsplit(":", 1)[1]) for line in r.read().decode().splitlines()
                   if ":" in line)


def test_keyed_calls_take_the_edges_fast_path(locks, stack_env):
    if "LOCK_ENVOY_ADMIN" not in os.environ:
        pytest.skip("LOCK_ENVOY_ADMIN is not set")
    before = _fast_path_count()
    # OpenSession (a fresh client has none), then the lock's Hold stream (its acquire and
    # release on one request): two keyed requests, each decided on its lock-key header
    # without waiting for the body. As two unary calls, three.
    locks.acquire(fresh(stack_env["prefix"]), on_fence=unfenced).release()
    assert _fast_path_count() - before >= 2
    locks.limit_hold_streams(0)
    mid = _fast_path_count()
    locks.acquire(fresh(stack_env["prefix"]), on_fence=unfenced).release()
    assert _fast_path_count() - mid >= 2


def test_each_lock_is_one_hold_stream_which_carries_its_release(locks, other_locks, stack_env):
    key = fresh(stack_env["prefix"])
    h = locks.acquire(key, on_fence=unfenced)
    assert locks.open_hold_streams() == 1
    with pytest.raises(Held):
        other_locks.acquire(key, wait=0, on_fence=unfenced)
    h.release()
    assert locks.open_hold_streams() == 0
    # Released on its stream: the key is free at once.
    again = other_locks.acquire(key, wait=0, on_fence=unfenced)
    assert again.token > h.token
    again.release()
    # Unary calls only: the same lock, no stream.
    locks.limit_hold_streams(0)
    u = locks.acquire(key, on_fence=unfenced)
    assert locks.open_hold_streams() == 0
    u.release()
    other_locks.acquire(key, wait=0, on_fence=unfenced).release()


def test_refusals_are_typed(locks, stack_env):
    with pytest.raises(NotGranted):
        locks.acquire("archive/py", on_fence=unfenced)
    with pytest.raises(InvalidRequest):
        locks.acquire(stack_env["prefix"] + "//bad", on_fence=unfenced)


def test_through_the_mesh_sidecar(stack_env):
    endpoint = os.environ.get("LOCK_SIDECAR_ENDPOINT")
    if not endpoint:
        pytest.skip("LOCK_SIDECAR_ENDPOINT is not set")
    with LockClient(endpoint, MeshSidecar()) as meshed:
        with meshed.hold(fresh(stack_env["prefix"]), on_fence=unfenced) as h:
            assert h.can_start()
        with pytest.raises(NotGranted):
            meshed.acquire("archive/py", on_fence=unfenced)


def _etcd_has(etcd: dict, key: str) -> bool:
    # etcd serves TLS with client certificates and auth (the operator's certificate
    # may read /l/); its JSON gateway has no user, so etcdctl reads.
    out = subprocess.run(
        [etcd["etcdctl"], f"--endpoints={etcd['url']}", f"--cacert={etcd['ca']}",
         f"--cert={etcd['cert']}", f"--key={etcd['key']}", "get", key, "--keys-only",
         "-w", "json"],
        capture_output=True, timeout=10)
    assert out.returncode == 0, f"etcdctl: {out.stderr.decode()}"
    return int(json.loads(out.stdout).get("count", 0)) > 0


@pytest.mark.kills_edge
def test_drain_then_fence_before_the_lease_expires_when_the_edge_dies(locks, stack_env):
    key = fresh(stack_env["prefix"])
    fenced_at = {}
    hold = locks.acquire(key, on_fence=lambda: fenced_at.setdefault("t", time.monotonic()))
    assert hold.can_start()
    assert _etcd_has(stack_env["etcd"], f"/l/{key}")

    os.kill(int(os.environ["LOCK_ENVOY_PID"]), signal.SIGKILL)
    limit = time.monotonic() + stack_env["ttl"] * 4
    drained_at = None
    deleted_at = None
    while time.monotonic() < limit and deleted_at is None:
        now = time.monotonic()
        if drained_at is None and not hold.can_start():
            drained_at = now
        if not _etcd_has(stack_env["etcd"], f"/l/{key}"):
            deleted_at = now
        time.sleep(0.02)
    assert drained_at is not None, "can_start never turned false"
    assert deleted_at is not None, "etcd never deleted the hold"
    assert "t" in fenced_at, "on_fence did not run"
    assert drained_at <= fenced_at["t"], "drained before the fence"
    # The client fences at (last renewal sent) + TTL - 1 s; etcd deletes at (last renewal
    # applied) + TTL. Half the designed second is the margin required (as in Rust).
    margin = deleted_at - fenced_at["t"]
    print(f"drained {fenced_at['t'] - drained_at:.3f}s before the fence; fenced {margin:.3f}s "
          "before etcd deleted the hold")
    assert margin >= 0.5, f"fenced only {margin:.3f}s before the server-side expiry"
    assert hold.fenced and hold.remaining_ttl() == 0.0
    with pytest.raises(Fenced):
        hold.release()


@pytest.mark.shards
def test_keys_on_different_clusters_get_a_session_each(locks):
    """Tiers and shards: keys homed on different etcd clusters (LOCK_SHARD_KEYS, set by
    python_client.rs from the shard map). The first key opens a session; the next, on another
    cluster, is answered WRONG_SESSION_PLACE and the client opens one there and retries."""
    keys = [k for k in os.environ.get("LOCK_SHARD_KEYS", "").split(",") if k]
    if len(keys) < 2:
        pytest.skip("LOCK_SHARD_KEYS is not set: run through integration/tests/python_client.rs")
    holds = [locks.acquire(k, on_fence=unfenced) for k in keys]
    assert all(h.can_start() for h in holds)
    # One session per cluster, each id carrying its own cluster's tag.
    tags = {(s.id >> 55) & 0xFF for s in locks._sessions.values()}
    assert len(tags) == len(keys), tags
    for h in holds:
        h.release()
    # Remembered: the same keys again open no new session.
    again = [locks.acquire(k, on_fence=unfenced) for k in keys]
    assert len(locks._sessions) == len(keys)
    for h in again:
        h.release()


def test_acquire_all_takes_a_set_with_one_token_and_no_deadlock(locks, other_locks, stack_env):
    """Issue 35: a set is granted whole, with one token; {a,b} and {b,a} asked at once by two
    identities both get through (a set waits holding nothing)."""
    a, b = fresh(stack_env["prefix"]), fresh(stack_env["prefix"])
    single = other_locks.acquire(b, on_fence=unfenced)
    with pytest.raises(Held):
        locks.acquire_all([a, b], on_fence=unfenced)
    single.release()
    s = locks.acquire_all([b, a], 5, on_fence=unfenced)
    assert s.keys == sorted([a, b]) and s.token > single.token
    assert str(s.token) not in repr(s)
    s.release()
    done = []

    def loop(client, keys):
        for _ in range(5):
            with client.acquire_all(keys, 10, on_fence=unfenced):
                time.sleep(0.01)
        done.append(keys)

    threads = [threading.Thread(target=loop, args=(c, k))
               for c, k in ((locks, [a, b]), (other_locks, [b, a]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(done) == 2, "a set waited forever"


def test_shared_holds_admit_readers_together_and_a_writer_alone(replica, other_locks, stack_env):
    """Issue 35: readers of a shared class hold a key at once (two replicas of one identity
    among them); a writer waits for them, above their tokens."""
    key = fresh(stack_env["shared_prefix"])
    a = replica(f"reader-{uuid.uuid4().hex[:6]}")
    r1 = a.acquire_shared(key, 5, on_fence=unfenced)
    r2 = replica(f"reader-{uuid.uuid4().hex[:6]}").acquire_shared(key, 5, on_fence=unfenced)
    assert r1.token != r2.token
    with pytest.raises(Held):
        other_locks.acquire(key, on_fence=unfenced)
    r1.release()
    r2.release()
    w = other_locks.acquire(key, 5, on_fence=unfenced)
    assert w.token > max(r1.token, r2.token)
    w.release()


def test_a_semaphore_admits_n_holders_each_on_its_own_permit(locks, other_locks, replica, sem_env):
    """Issue 53: N clients (two identities, replicas of one) hold a `permits: N` key at once
    on distinct permits with distinct tokens; one more is refused HELD, then waits and is
    handed the permit a release frees, with a greater token."""
    key = fresh(sem_env["prefix"])
    n = sem_env["permits"]
    holders = [locks, other_locks] + [replica(f"sem-{i}-{uuid.uuid4().hex[:6]}")
                                      for i in range(n - 2)]
    held = [c.acquire_permit(key, on_fence=unfenced) for c in holders]
    assert sorted(p.permit for p in held) == list(range(n))
    assert len({p.token for p in held}) == n
    late = replica(f"sem-late-{uuid.uuid4().hex[:6]}")
    with pytest.raises(Held):
        late.acquire_permit(key, wait=0, on_fence=unfenced)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(late.acquire_permit, key, 20, on_fence=unfenced)
        time.sleep(0.5)
        assert not waiting.done(), "granted while every permit was held"
        freed = held.pop(1)
        freed.release()
        got = waiting.result(timeout=20)
    assert got.permit == freed.permit, "the waiter is handed the freed permit"
    assert got.token > freed.token, "a permit's tokens strictly increase"
    for p in held + [got]:
        p.release()


def test_a_clients_second_permit_nests_and_the_last_release_frees_it(locks, replica, sem_env):
    key = fresh(sem_env["prefix"])
    outer = locks.acquire_permit(key, on_fence=unfenced)
    inner = locks.acquire_permit(key, on_fence=unfenced)
    assert (inner.permit, inner.token) == (outer.permit, outer.token)
    # The other N-1 permits, held by replicas: the nested acquire took none of them.
    rest = [replica(f"sem-{i}-{uuid.uuid4().hex[:6]}").acquire_permit(key, on_fence=unfenced)
            for i in range(sem_env["permits"] - 1)]
    late = replica(f"sem-late-{uuid.uuid4().hex[:6]}")
    with pytest.raises(Held):
        late.acquire_permit(key, on_fence=unfenced)
    outer.release()
    with pytest.raises(Held):
        late.acquire_permit(key, on_fence=unfenced)
    inner.release()
    got = late.acquire_permit(key, wait=5, on_fence=unfenced)
    assert got.permit == outer.permit and got.token > outer.token
    for p in rest + [got]:
        p.release()


def test_a_permit_of_another_class_and_another_mode_on_a_semaphore_are_refused(
        locks, stack_env, sem_env):
    with pytest.raises(InvalidRequest) as e:
        locks.acquire_permit(fresh(stack_env["prefix"]), on_fence=unfenced)
    assert e.value.reason == "MALFORMED_REQUEST"
    with pytest.raises(InvalidRequest) as e:
        locks.acquire(fresh(sem_env["prefix"]), on_fence=unfenced)
    assert e.value.reason == "MALFORMED_REQUEST"
