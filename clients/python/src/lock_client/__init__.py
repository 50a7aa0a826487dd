"""Python client of the fenced lock service (lock.v1 through its Envoy edge).

    from lock_client import LockClient, SvidFiles

    locks = LockClient("https://lock-edge:8443",
                       SvidFiles("svid.pem", "svid.key", "bundle.pem"))
    with locks.hold("pay/ledger/42", wait=5, on_fence=stop_writing) as hold:
        if hold.can_start():
            db.execute("UPDATE ledger SET ..., fence = %s WHERE id = 42 AND fence < %s",
                       (hold.token, hold.token))
    locks.shutdown()

Behind a mesh sidecar: `LockClient("http://127.0.0.1:15001", MeshSidecar())`.
"""

from .client import (
    DEFAULT_MAX_HOLD_STREAMS,
    HeldSet,
    Hold,
    LockClient,
    MeshSidecar,
    SharedHold,
    SvidFiles,
    check_endpoint,
)
from .errors import (
    Draining,
    Fenced,
    Held,
    InvalidRequest,
    LeakedHold,
    LockError,
    Moving,
    NoQuorum,
    NotGranted,
    OtherError,
    RateLimited,
    RegionRedirect,
    Sealed,
    SessionExpired,
    StaleToken,
    StoreFull,
    StreamFull,
    HistoryCompacted,
    KeySetRefused,
    Unauthenticated,
    Unavailable,
    WrongSessionPlace,
    WrongSessionTtl,
)
from .keys import encode_key, process_instance
from .observe import Leadership, Observed
from .permit import Permit
from .liveness import Lapse

__all__ = [
    "Draining", "Fenced", "Held", "Hold", "InvalidRequest", "LeakedHold", "LockClient", "LockError",
    "MeshSidecar", "Moving", "NoQuorum", "NotGranted", "OtherError", "RateLimited", "RegionRedirect",
    "Sealed", "SessionExpired", "StaleToken", "StoreFull", "StreamFull", "HistoryCompacted", "KeySetRefused", "SvidFiles",
    "Unauthenticated", "Unavailable", "WrongSessionPlace", "WrongSessionTtl", "check_endpoint", "encode_key",
    "Lapse", "process_instance", "DEFAULT_MAX_HOLD_STREAMS", "Leadership", "Observed", "HeldSet",
    "SharedHold", "Permit",
]
