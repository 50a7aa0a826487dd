"""The stack the integration tests run against comes from the environment, set by
integration/tests/python_client.rs (`make test`), which starts etcd, arbiters and Envoy."""

import os
from typing import Optional

import pytest

from lock_client import LockClient, SvidFiles


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"{name} is not set: run through integration/tests/python_client.rs")
    return value


@pytest.fixture
def stack_env():
    return {
        "endpoint": _env("LOCK_ENDPOINT"),
        "prefix": _env("LOCK_TEST_PREFIX"),
        "shared_prefix": _env("LOCK_TEST_SHARED_PREFIX"),
        "ttl": float(_env("LOCK_TEST_TTL")),
        "etcd": {
            "url": _env("LOCK_ETCD"),
            "etcdctl": _env("LOCK_ETCDCTL"),
            "ca": _env("LOCK_ETCD_CA"),
            "cert": _env("LOCK_ETCD_CERT"),
            "key": _env("LOCK_ETCD_KEY"),
        },
    }


@pytest.fixture
def sem_env():
    """The test registry's semaphore class: its prefix and its N permits."""
    return {
        "prefix": _env("LOCK_TEST_SEM_PREFIX"),
        "permits": int(_env("LOCK_TEST_SEM_PERMITS")),
    }


def _client(prefix: str, instance=None) -> LockClient:
    return LockClient(
        _env("LOCK_ENDPOINT"),
        SvidFiles(_env(f"{prefix}_SVID"), _env(f"{prefix}_SVID_KEY"), _env("LOCK_CA")),
        instance=instance,
    )


@pytest.fixture
def locks():
    c = _client("LOCK")
    yield c
    c.shutdown()


@pytest.fixture
def other_locks():
    """A client of another identity with the same grants."""
    c = _client("LOCK_OTHER")
    yield c
    c.shutdown()


@pytest.fixture
def replica():
    """Another replica of `locks`'s identity: the same SVID, its own instance (a second pod
    of one Deployment). Call it with an instance name (sent as it is), or with none for this
    process's next (`<prefix>:<pid>:<n>`); each client is shut down after."""
    made = []

    def make(instance: Optional[str] = None) -> LockClient:
        c = _client("LOCK", instance=instance)
        made.append(c)
        return c

    yield make
    for c in made:
        c.shutdown()
