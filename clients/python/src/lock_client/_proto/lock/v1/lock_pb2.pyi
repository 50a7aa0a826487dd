from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HoldMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HOLD_MODE_UNSPECIFIED: _ClassVar[HoldMode]
    HOLD_MODE_EXCLUSIVE: _ClassVar[HoldMode]
    HOLD_MODE_SHARED: _ClassVar[HoldMode]
    HOLD_MODE_PERMIT: _ClassVar[HoldMode]

class ObserveEvent(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OBSERVE_EVENT_UNSPECIFIED: _ClassVar[ObserveEvent]
    OBSERVE_EVENT_CURRENT: _ClassVar[ObserveEvent]
    OBSERVE_EVENT_GRANTED: _ClassVar[ObserveEvent]
    OBSERVE_EVENT_RELEASED: _ClassVar[ObserveEvent]
    OBSERVE_EVENT_EXPIRED: _ClassVar[ObserveEvent]
    OBSERVE_EVENT_CLOSED: _ClassVar[ObserveEvent]
    OBSERVE_EVENT_FORCED: _ClassVar[ObserveEvent]
    OBSERVE_EVENT_REVOKED: _ClassVar[ObserveEvent]
    OBSERVE_EVENT_PROGRESS: _ClassVar[ObserveEvent]
HOLD_MODE_UNSPECIFIED: HoldMode
HOLD_MODE_EXCLUSIVE: HoldMode
HOLD_MODE_SHARED: HoldMode
HOLD_MODE_PERMIT: HoldMode
OBSERVE_EVENT_UNSPECIFIED: ObserveEvent
OBSERVE_EVENT_CURRENT: ObserveEvent
OBSERVE_EVENT_GRANTED: ObserveEvent
OBSERVE_EVENT_RELEASED: ObserveEvent
OBSERVE_EVENT_EXPIRED: ObserveEvent
OBSERVE_EVENT_CLOSED: ObserveEvent
OBSERVE_EVENT_FORCED: ObserveEvent
OBSERVE_EVENT_REVOKED: ObserveEvent
OBSERVE_EVENT_PROGRESS: ObserveEvent

class OpenSessionRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("session_id", "ttl_seconds", "class_name")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    ttl_seconds: int
    class_name: str
    def __init__(self, session_id: _Optional[int] = ..., ttl_seconds: _Optional[int] = ..., class_name: _Optional[str] = ...) -> None: ...

class KeepAliveRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    def __init__(self, session_id: _Optional[int] = ...) -> None: ...

class KeepAliveResponse(_message.Message):
    __slots__ = ("session_id", "ttl_seconds")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    ttl_seconds: int
    def __init__(self, session_id: _Optional[int] = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    def __init__(self, session_id: _Optional[int] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AcquireRequest(_message.Message):
    __slots__ = ("key", "session_id", "wait_millis", "mode")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    key: str
    session_id: int
    wait_millis: int
    mode: HoldMode
    def __init__(self, key: _Optional[str] = ..., session_id: _Optional[int] = ..., wait_millis: _Optional[int] = ..., mode: _Optional[_Union[HoldMode, str]] = ...) -> None: ...

class TokenParts(_message.Message):
    __slots__ = ("epoch", "revision")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    revision: int
    def __init__(self, epoch: _Optional[int] = ..., revision: _Optional[int] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ("token", "parts", "class_name", "ttl_seconds", "permit")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PERMIT_FIELD_NUMBER: _ClassVar[int]
    token: int
    parts: TokenParts
    class_name: str
    ttl_seconds: int
    permit: int
    def __init__(self, token: _Optional[int] = ..., parts: _Optional[_Union[TokenParts, _Mapping]] = ..., class_name: _Optional[str] = ..., ttl_seconds: _Optional[int] = ..., permit: _Optional[int] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("key", "token", "session_id", "mode")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    key: str
    token: int
    session_id: int
    mode: HoldMode
    def __init__(self, key: _Optional[str] = ..., token: _Optional[int] = ..., session_id: _Optional[int] = ..., mode: _Optional[_Union[HoldMode, str]] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("released_at_revision",)
    RELEASED_AT_REVISION_FIELD_NUMBER: _ClassVar[int]
    released_at_revision: int
    def __init__(self, released_at_revision: _Optional[int] = ...) -> None: ...

class ValidateTokenRequest(_message.Message):
    __slots__ = ("key", "token")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    key: str
    token: int
    def __init__(self, key: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class ValidateTokenResponse(_message.Message):
    __slots__ = ("valid",)
    VALID_FIELD_NUMBER: _ClassVar[int]
    valid: bool
    def __init__(self, valid: _Optional[bool] = ...) -> None: ...

class HoldRequest(_message.Message):
    __slots__ = ("acquire", "release")
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    acquire: AcquireRequest
    release: ReleaseRequest
    def __init__(self, acquire: _Optional[_Union[AcquireRequest, _Mapping]] = ..., release: _Optional[_Union[ReleaseRequest, _Mapping]] = ...) -> None: ...

class HoldResponse(_message.Message):
    __slots__ = ("acquired", "released")
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    acquired: AcquireResponse
    released: ReleaseResponse
    def __init__(self, acquired: _Optional[_Union[AcquireResponse, _Mapping]] = ..., released: _Optional[_Union[ReleaseResponse, _Mapping]] = ...) -> None: ...

class InspectRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class InspectResponse(_message.Message):
    __slots__ = ("held", "holder_spiffe_id", "class_name", "acquired_at_unix_ms", "waiters", "shared_holders", "permits_held", "permits")
    HELD_FIELD_NUMBER: _ClassVar[int]
    HOLDER_SPIFFE_ID_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    ACQUIRED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    SHARED_HOLDERS_FIELD_NUMBER: _ClassVar[int]
    PERMITS_HELD_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    held: bool
    holder_spiffe_id: str
    class_name: str
    acquired_at_unix_ms: int
    waiters: int
    shared_holders: int
    permits_held: int
    permits: int
    def __init__(self, held: _Optional[bool] = ..., holder_spiffe_id: _Optional[str] = ..., class_name: _Optional[str] = ..., acquired_at_unix_ms: _Optional[int] = ..., waiters: _Optional[int] = ..., shared_holders: _Optional[int] = ..., permits_held: _Optional[int] = ..., permits: _Optional[int] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ("key", "after_revision", "session_id", "after_store_epoch")
    KEY_FIELD_NUMBER: _ClassVar[int]
    AFTER_REVISION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_STORE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    key: str
    after_revision: int
    session_id: int
    after_store_epoch: int
    def __init__(self, key: _Optional[str] = ..., after_revision: _Optional[int] = ..., session_id: _Optional[int] = ..., after_store_epoch: _Optional[int] = ...) -> None: ...

class ObserveResponse(_message.Message):
    __slots__ = ("event", "revision", "held", "holder_spiffe_id", "holder_instance", "class_name", "acquired_at_unix_ms", "epoch", "grant_revision", "token", "store_epoch")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    HOLDER_SPIFFE_ID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    ACQUIRED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    GRANT_REVISION_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    STORE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    event: ObserveEvent
    revision: int
    held: bool
    holder_spiffe_id: str
    holder_instance: str
    class_name: str
    acquired_at_unix_ms: int
    epoch: int
    grant_revision: int
    token: int
    store_epoch: int
    def __init__(self, event: _Optional[_Union[ObserveEvent, str]] = ..., revision: _Optional[int] = ..., held: _Optional[bool] = ..., holder_spiffe_id: _Optional[str] = ..., holder_instance: _Optional[str] = ..., class_name: _Optional[str] = ..., acquired_at_unix_ms: _Optional[int] = ..., epoch: _Optional[int] = ..., grant_revision: _Optional[int] = ..., token: _Optional[int] = ..., store_epoch: _Optional[int] = ...) -> None: ...

class AcquireAllRequest(_message.Message):
    __slots__ = ("keys", "session_id", "wait_millis")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    session_id: int
    wait_millis: int
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., session_id: _Optional[int] = ..., wait_millis: _Optional[int] = ...) -> None: ...

class AcquireAllResponse(_message.Message):
    __slots__ = ("token", "parts", "keys", "ttl_seconds")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    token: int
    parts: TokenParts
    keys: _containers.RepeatedScalarFieldContainer[str]
    ttl_seconds: int
    def __init__(self, token: _Optional[int] = ..., parts: _Optional[_Union[TokenParts, _Mapping]] = ..., keys: _Optional[_Iterable[str]] = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class ReleaseAllRequest(_message.Message):
    __slots__ = ("keys", "token", "session_id")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    token: int
    session_id: int
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., token: _Optional[int] = ..., session_id: _Optional[int] = ...) -> None: ...

class ReleaseAllResponse(_message.Message):
    __slots__ = ("released_at_revision", "released_keys")
    RELEASED_AT_REVISION_FIELD_NUMBER: _ClassVar[int]
    RELEASED_KEYS_FIELD_NUMBER: _ClassVar[int]
    released_at_revision: int
    released_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, released_at_revision: _Optional[int] = ..., released_keys: _Optional[_Iterable[str]] = ...) -> None: ...
