"""The key as `lock-key` request metadata (the edge's fast path, issue 19).

The same encoding as lock_config::edge_headers::encode_key in Rust: every printable ASCII
byte but `%` as is, every other byte of the UTF-8 key as `%XX` (upper-case hex). One
spelling per key, so the value always parses and the edge and the arbiter agree on it.
"""

import os
import re
import secrets

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
_process_instance: "list[str]" = []


def valid_instance(value: str) -> bool:
    """The service's rule for `lock-instance` (lock_config::instance::parse_instance)."""
    return _INSTANCE_OK.fullmatch(value) is not None


def process_instance() -> str:
    """This process's instance (issue 32): `LOCK_INSTANCE` if set and valid (the pod UID
    from the downward API), else random, chosen once per process. Replicas of one identity
    are told apart by it: a sibling's hold is waited for, only this process's own is a leak."""
    if not _process_instance:
        env = os.environ.get(INSTANCE_ENV, "")
        _process_instance.append(env if valid_instance(env) else f"p-{secrets.token_hex(16)}")
    return _process_instance[0]
