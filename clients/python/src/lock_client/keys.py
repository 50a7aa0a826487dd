"""The key as `lock-key` request metadata (the edge's fast path, issue 19).

The same encoding as lock_config::edge_headers::encode_key in Rust: every printable ASCII
byte but `%` as is, every other byte of the UTF-8 key as `%XX` (upper-case hex). One
spelling per key, so the value always parses and the edge and the arbiter agree on it.
"""

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
