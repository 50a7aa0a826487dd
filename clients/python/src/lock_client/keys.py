"""The key as `lock-key` request metadata (the edge's fast path, issue 19).

The same encoding as lock_config::edge_headers::encode_key in Rust: every printable ASCII
byte but `%` as is, every other byte of the UTF-8 key as `%XX` (upper-case hex). One
spelling per key, so the value always parses and the edge and the arbiter agree on it.
"""

import itertools
import os
import re
import secrets
import threading
from typing import Optional

METADATA_KEY = "lock-key"


def encode_key(key: str) -> str:
    out = []
    for b in key.encode("utf-8"):
        if 0x21 <= b <= 0x7E and b != 0x25:
            out.append(chr(b))
        else:
            out.append(f"%{b:02X}")
    return "".join(out)


def keyed(key: str) -> tuple:
    """Call metadata for a keyed call on `key`."""
    return ((METADATA_KEY, encode_key(key)),)


INSTANCE_METADATA = "lock-instance"
INSTANCE_ENV = "LOCK_INSTANCE"
_INSTANCE_OK = re.compile(r"[A-Za-z0-9._:-]{1,253}")
_instance_lock = threading.Lock()
_process_prefix: "list[tuple[str, str]]" = []  # (LOCK_INSTANCE or "", random prefix)
_client_count = itertools.count(1)


def valid_instance(value: str) -> bool:
    """The service's rule for `lock-instance` (lock_config::instance::parse_instance)."""
    return _INSTANCE_OK.fullmatch(value) is not None


def instance_for(prefix_env: Optional[str], pid: int, n: int, random_prefix: str) -> str:
    """The instance rule (issue 50), pure: `<prefix>:<pid>:<n>`, where the prefix is
    `prefix_env` (the value of LOCK_INSTANCE) when it is set and valid and the whole
    instance stays a valid `lock-instance` (at most 253 characters), else `random_prefix`."""
    if prefix_env is not None and valid_instance(prefix_env):
        instance = f"{prefix_env}:{pid}:{n}"
        if valid_instance(instance):
            return instance
    return f"{random_prefix}:{pid}:{n}"


def process_instance() -> str:
    """The instance of the next client object of this process (issues 32, 50):
    `<prefix>:<pid>:<n>`. The prefix is LOCK_INSTANCE (the pod UID from the downward API,
    read once per process) or a random `p-<16 hex>` chosen once per process; `n` counts the
    calls from 1 (each LockClient built without an explicit instance takes one).

    Replicas of one identity are told apart by it: a sibling's hold is waited for, only this
    client's own earlier session's hold is a leak. Worker processes of one pod (other pids)
    and two clients of one process (other `n`) queue; a restarted container process, often
    pid 1 again with its first client again, gets its previous life's instance and is told
    LEAKED_HOLD when it meets its own old hold."""
    with _instance_lock:
        if not _process_prefix:
            _process_prefix.append((os.environ.get(INSTANCE_ENV, ""),
                                    f"p-{secrets.token_hex(8)}"))
        env, random_prefix = _process_prefix[0]
        n = next(_client_count)
    return instance_for(env or None, os.getpid(), n, random_prefix)
