// lock.v1: the fenced lock service's public API, the contract every client builds on
// (lock-client in Rust, clients/python, or stubs generated from this file in any language).
// `make test` checks it with `buf lint` and `buf breaking` against the last released
// version (config/proto-released/): fields and methods are added, never renumbered,
// retyped or removed.
//
// Transport. Calls reach the service through the lock edge (Envoy) over mutual TLS with
// the workload's X.509-SVID; the caller's identity is the certificate's single SPIFFE ID,
// never anything the request says. A workload may instead speak plaintext HTTP/2 to its
// own mesh sidecar on loopback, which presents the SVID for it.
//
// Keyed calls. OpenSession, Acquire, Release, ValidateToken, Inspect and Observe carry a key
// in field 1, Hold in its first message's `acquire`, AcquireAll and ReleaseAll every key
// of a set in field 1 (each authorised; the set is routed on its least key): the edge authorises the caller's identity for it (prefix grants), refuses or
// redirects by region, and routes every call for a key to the same arbiter. KeepAlive and
// CloseSession carry only a session id; the arbiter checks the session is the caller's.
// Keys are `<namespace>/<path>` (`pay/ledger/42`): the namespace a DNS label, the path
// 1..=512 bytes of UTF-8 split on '/' into segments never empty, `.` or `..`, without
// control characters (DESIGN 4.1; config/src/key.rs).
//
// Metadata. Every request header a client may send, what it means, and what happens
// without it (config/src/instance.rs, config/src/edge_headers.rs; a test keeps this list
// equal to the code's):
//   lock-key       A keyed call's key, percent-encoded (lock_config::edge_headers::encode_key;
//                  any unreserved ASCII byte as is). The edge then authorises and routes on
//                  the request's headers instead of pausing for its body. The arbiter
//                  refuses (MALFORMED_REQUEST) a body key other than the one the edge
//                  admitted. Without it: the edge reads the key from the body, a little
//                  slower; nothing else changes.
//   lock-instance  The client object's instance: 1..=253 of `A-Z a-z 0-9 . _ : -`
//                  (MALFORMED_REQUEST otherwise), read at OpenSession and kept with the
//                  session. Holds of one SPIFFE ID with different instances queue behind
//                  each other like any two callers; only the same identity and the same
//                  instance under another session is LEAKED_HOLD (a process that lost its
//                  session asking again before its old hold lapsed). Replicas share an
//                  identity, so every client object sends its own: the clients send
//                  `$LOCK_INSTANCE` (the pod) + `:` + pid + `:` + a random part per client
//                  object. Without it: the identity alone is the instance, so a second
//                  process of the identity holding the key is answered LEAKED_HOLD instead
//                  of queueing.
//   traceparent    W3C trace context: the arbiter's spans join the caller's trace. Without
//                  it (or malformed): the call gets a trace of its own; nothing is refused.
// Any `x-lock-*` header or trailer a client sends is removed at the edge.
//
// Errors. Every refusal is a gRPC status whose details hold a google.rpc.ErrorInfo with
// domain "lock.v1", a `reason` and string metadata; the reason, not the message, is the
// contract (docs/src/reference/errors.md has the table):
//   UNAUTHENTICATED      UNAUTHENTICATED      no or an unusable client certificate
//   NOT_GRANTED          PERMISSION_DENIED    no grant covers the key (identical for held,
//                                             free and nonexistent keys)
//   REGION_REDIRECT      FAILED_PRECONDITION  metadata `region`: call that region's edge
//   RATE_LIMITED         RESOURCE_EXHAUSTED   metadata `retry_after_ms`
//   INVALID_KEY          INVALID_ARGUMENT     key syntax, or no lock class covers the key
//   MALFORMED_REQUEST    INVALID_ARGUMENT     not a decodable lock.v1 message, or `lock-key`
//                                             disagreeing with the body
//   HELD                 ABORTED              held by another session (wait_millis 0), or
//                        DEADLINE_EXCEEDED    still held when the wait ended
//   LEAKED_HOLD          FAILED_PRECONDITION  this identity holds the key on another session
//   STALE_TOKEN          FAILED_PRECONDITION  the token is not the key's current grant
//   SESSION_EXPIRED      NOT_FOUND            the session's lease is gone (or not yours)
//   WRONG_SESSION_TTL    FAILED_PRECONDITION  metadata `class`, `ttl_seconds`: open a session
//                                             for the key's class
//   SEALED, NO_QUORUM,   UNAVAILABLE          the store cannot grant safely now; retry
//   STORE_FULL
//   DRAINING             UNAVAILABLE          the arbiter is restarting; nothing was done:
//                                             retry (the key's next owner answers)
//   MOVING               UNAVAILABLE          the key's range is moving between entity
//                                             shards; nothing was done: retry shortly
//   WRONG_SESSION_PLACE  FAILED_PRECONDITION  metadata `cluster`: the session lives on
//                                             another etcd cluster than the key; open a
//                                             session for the key and retry
//   STREAM_FULL          RESOURCE_EXHAUSTED   a KeepAlive stream renewing too many sessions,
//                                             or an arbiter serving its limit of Observe streams
//   HISTORY_COMPACTED    OUT_OF_RANGE         Observe cannot resume: the store has compacted
//                                             past `after_revision`; observe from now (0)
//   KEY_SET_REFUSED      FAILED_PRECONDITION  AcquireAll: the set cannot be granted as one
//                                             (metadata `why`: spans-stores, durable-class,
//                                             delayed-class, shared-class, mixed-ttl,
//                                             own-hold)
//   UNKNOWN_METHOD       UNIMPLEMENTED        a method the edge cannot authorise
//   INTERNAL             INTERNAL             an error inside the service that fits no
//                                             other reason; a retry is not known to help
// Retry UNAVAILABLE, RATE_LIMITED (after retry_after_ms) and HELD with a wait, inside your
// own deadline; the others need a different request. NO_QUORUM is an answer lost, not a
// refusal: the transaction may have committed. Retry the same call on the same session:
// a retried Acquire gets that grant back (the same token), a retried Release of a hold
// that did end answers STALE_TOKEN. Never open a new session to retry an Acquire answered
// NO_QUORUM: the old session's grant would hold the key until that session lapses.
//
// Tokens. A token orders writes; it does not authorise them. Release and ReleaseAll also
// require the caller's identity to be the holder's; ValidateToken only says whether a
// token is current; a resource's fence compares numbers and cannot tell who sent one. So
// Observe gives any observer the epoch and grant revision a token is made of. Between
// processes of one identity a token does release a sibling's hold, so clients and the
// service keep tokens out of logs, spans, metrics and error messages.

// Code generated by protoc-gen-go. DO NOT EDIT.
// versions:
// 	protoc-gen-go v1.36.12
// 	protoc        v3.21.12
// source: lock/v1/lock.proto

package lockv1

import (
	protoreflect "google.golang.org/protobuf/reflect/protoreflect"
	protoimpl "google.golang.org/protobuf/runtime/protoimpl"
	reflect "reflect"
	sync "sync"
	unsafe "unsafe"
)

const (
	// Verify that this generated code is sufficiently up-to-date.
	_ = protoimpl.EnforceVersion(20 - protoimpl.MinVersion)
	// Verify that runtime/protoimpl is sufficiently up-to-date.
	_ = protoimpl.EnforceVersion(protoimpl.MaxVersion - 20)
)

// How a hold is held.
type HoldMode int32

const (
	// Exclusive.
	HoldMode_HOLD_MODE_UNSPECIFIED HoldMode = 0
	// One holder at a time: the exclusive lock, every class's only mode unless shared.
	HoldMode_HOLD_MODE_EXCLUSIVE HoldMode = 1
	// One of many holders at once (readers), on a `shared: true` class. An exclusive hold
	// excludes every shared one, and a queued exclusive waiter stops new shared grants. A
	// shared hold's token is its own grant's revision: above the last exclusive grant before
	// it, below the next one.
	HoldMode_HOLD_MODE_SHARED HoldMode = 2
	// One of the N permits of a semaphore (a `permits: N` class): up to N sessions hold the
	// key at once, each on its own permit, numbered 0..N-1 (`AcquireResponse.permit`). The
	// token is the grant's revision: tokens of one permit's successive grants strictly
	// increase, and no two grants of the key share one. A resource fences per permit.
	HoldMode_HOLD_MODE_PERMIT HoldMode = 3
)

// Enum value maps for HoldMode.
var (
	HoldMode_name = map[int32]string{
		0: "HOLD_MODE_UNSPECIFIED",
		1: "HOLD_MODE_EXCLUSIVE",
		2: "HOLD_MODE_SHARED",
		3: "HOLD_MODE_PERMIT",
	}
	HoldMode_value = map[string]int32{
		"HOLD_MODE_UNSPECIFIED": 0,
		"HOLD_MODE_EXCLUSIVE":   1,
		"HOLD_MODE_SHARED":      2,
		"HOLD_MODE_PERMIT":      3,
	}
)

func (x HoldMode) Enum() *HoldMode {
	p := new(HoldMode)
	*p = x
	return p
}

func (x HoldMode) String() string {
	return protoimpl.X.EnumStringOf(x.Descriptor(), protoreflect.EnumNumber(x))
}

func (HoldMode) Descriptor() protoreflect.EnumDescriptor {
	return file_lock_v1_lock_proto_enumTypes[0].Descriptor()
}

func (HoldMode) Type() protoreflect.EnumType {
	return &file_lock_v1_lock_proto_enumTypes[0]
}

func (x HoldMode) Number() protoreflect.EnumNumber {
	return protoreflect.EnumNumber(x)
}

// Deprecated: Use HoldMode.Descriptor instead.
func (HoldMode) EnumDescriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{0}
}

// What an Observe answer reports.
type ObserveEvent int32

const (
	ObserveEvent_OBSERVE_EVENT_UNSPECIFIED ObserveEvent = 0
	// The stream's first answer (unless resuming): the holder as of `revision`, or free.
	ObserveEvent_OBSERVE_EVENT_CURRENT ObserveEvent = 1
	// The key was granted to a session (free before, or handed on by a release).
	ObserveEvent_OBSERVE_EVENT_GRANTED ObserveEvent = 2
	// The holder released it.
	ObserveEvent_OBSERVE_EVENT_RELEASED ObserveEvent = 3
	// The holder's session was not renewed within its TTL.
	ObserveEvent_OBSERVE_EVENT_EXPIRED ObserveEvent = 4
	// The holder closed its session (CloseSession).
	ObserveEvent_OBSERVE_EVENT_CLOSED ObserveEvent = 5
	// Two operators force-released it (lock-admin).
	ObserveEvent_OBSERVE_EVENT_FORCED ObserveEvent = 6
	// An epoch advance revoked every hold of the store.
	ObserveEvent_OBSERVE_EVENT_REVOKED ObserveEvent = 7
	// Nothing changed up to `revision` (sent about once a minute on a quiet key): a resume
	// point, and traffic that keeps proxies' idle timeouts from ending the stream.
	ObserveEvent_OBSERVE_EVENT_PROGRESS ObserveEvent = 8
)

// Enum value maps for ObserveEvent.
var (
	ObserveEvent_name = map[int32]string{
		0: "OBSERVE_EVENT_UNSPECIFIED",
		1: "OBSERVE_EVENT_CURRENT",
		2: "OBSERVE_EVENT_GRANTED",
		3: "OBSERVE_EVENT_RELEASED",
		4: "OBSERVE_EVENT_EXPIRED",
		5: "OBSERVE_EVENT_CLOSED",
		6: "OBSERVE_EVENT_FORCED",
		7: "OBSERVE_EVENT_REVOKED",
		8: "OBSERVE_EVENT_PROGRESS",
	}
	ObserveEvent_value = map[string]int32{
		"OBSERVE_EVENT_UNSPECIFIED": 0,
		"OBSERVE_EVENT_CURRENT":     1,
		"OBSERVE_EVENT_GRANTED":     2,
		"OBSERVE_EVENT_RELEASED":    3,
		"OBSERVE_EVENT_EXPIRED":     4,
		"OBSERVE_EVENT_CLOSED":      5,
		"OBSERVE_EVENT_FORCED":      6,
		"OBSERVE_EVENT_REVOKED":     7,
		"OBSERVE_EVENT_PROGRESS":    8,
	}
)

func (x ObserveEvent) Enum() *ObserveEvent {
	p := new(ObserveEvent)
	*p = x
	return p
}

func (x ObserveEvent) String() string {
	return protoimpl.X.EnumStringOf(x.Descriptor(), protoreflect.EnumNumber(x))
}

func (ObserveEvent) Descriptor() protoreflect.EnumDescriptor {
	return file_lock_v1_lock_proto_enumTypes[1].Descriptor()
}

func (ObserveEvent) Type() protoreflect.EnumType {
	return &file_lock_v1_lock_proto_enumTypes[1]
}

func (x ObserveEvent) Number() protoreflect.EnumNumber {
	return protoreflect.EnumNumber(x)
}

// Deprecated: Use ObserveEvent.Descriptor instead.
func (ObserveEvent) EnumDescriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{1}
}

type OpenSessionRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// A key of the class the session is for; its class decides the TTL. Authorised like any
	// keyed request, so a session cannot be used to probe keys the caller has no grant for.
	Key           string `protobuf:"bytes,1,opt,name=key,proto3" json:"key,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *OpenSessionRequest) Reset() {
	*x = OpenSessionRequest{}
	mi := &file_lock_v1_lock_proto_msgTypes[0]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *OpenSessionRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*OpenSessionRequest) ProtoMessage() {}

func (x *OpenSessionRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[0]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use OpenSessionRequest.ProtoReflect.Descriptor instead.
func (*OpenSessionRequest) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{0}
}

func (x *OpenSessionRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

type OpenSessionResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The session (an etcd lease id, positive 63-bit, chosen by the service). Send it with
	// Acquire and renew it on one KeepAlive stream every ttl_seconds / 3.
	SessionId int64 `protobuf:"varint,1,opt,name=session_id,json=sessionId,proto3" json:"session_id,omitempty"`
	// The class's TTL: without a renewal for this long, the session and every hold on it end.
	TtlSeconds uint32 `protobuf:"varint,2,opt,name=ttl_seconds,json=ttlSeconds,proto3" json:"ttl_seconds,omitempty"`
	// The lock class covering the key (the registry's name).
	ClassName     string `protobuf:"bytes,3,opt,name=class_name,json=className,proto3" json:"class_name,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *OpenSessionResponse) Reset() {
	*x = OpenSessionResponse{}
	mi := &file_lock_v1_lock_proto_msgTypes[1]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *OpenSessionResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*OpenSessionResponse) ProtoMessage() {}

func (x *OpenSessionResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[1]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use OpenSessionResponse.ProtoReflect.Descriptor instead.
func (*OpenSessionResponse) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{1}
}

func (x *OpenSessionResponse) GetSessionId() int64 {
	if x != nil {
		return x.SessionId
	}
	return 0
}

func (x *OpenSessionResponse) GetTtlSeconds() uint32 {
	if x != nil {
		return x.TtlSeconds
	}
	return 0
}

func (x *OpenSessionResponse) GetClassName() string {
	if x != nil {
		return x.ClassName
	}
	return ""
}

type KeepAliveRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// A session of the caller's identity; one stream may renew up to 16 sessions.
	SessionId     int64 `protobuf:"varint,1,opt,name=session_id,json=sessionId,proto3" json:"session_id,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *KeepAliveRequest) Reset() {
	*x = KeepAliveRequest{}
	mi := &file_lock_v1_lock_proto_msgTypes[2]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *KeepAliveRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*KeepAliveRequest) ProtoMessage() {}

func (x *KeepAliveRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[2]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use KeepAliveRequest.ProtoReflect.Descriptor instead.
func (*KeepAliveRequest) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{2}
}

func (x *KeepAliveRequest) GetSessionId() int64 {
	if x != nil {
		return x.SessionId
	}
	return 0
}

type KeepAliveResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The session this answer renewed.
	SessionId int64 `protobuf:"varint,1,opt,name=session_id,json=sessionId,proto3" json:"session_id,omitempty"`
	// Remaining TTL as granted by the etcd leader for this renewal.
	TtlSeconds    int64 `protobuf:"varint,2,opt,name=ttl_seconds,json=ttlSeconds,proto3" json:"ttl_seconds,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *KeepAliveResponse) Reset() {
	*x = KeepAliveResponse{}
	mi := &file_lock_v1_lock_proto_msgTypes[3]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *KeepAliveResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*KeepAliveResponse) ProtoMessage() {}

func (x *KeepAliveResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[3]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use KeepAliveResponse.ProtoReflect.Descriptor instead.
func (*KeepAliveResponse) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{3}
}

func (x *KeepAliveResponse) GetSessionId() int64 {
	if x != nil {
		return x.SessionId
	}
	return 0
}

func (x *KeepAliveResponse) GetTtlSeconds() int64 {
	if x != nil {
		return x.TtlSeconds
	}
	return 0
}

type CloseSessionRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// A session of the caller's identity. Its holds end at once: the next waiter of each
	// key is granted without waiting for the TTL.
	SessionId     int64 `protobuf:"varint,1,opt,name=session_id,json=sessionId,proto3" json:"session_id,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *CloseSessionRequest) Reset() {
	*x = CloseSessionRequest{}
	mi := &file_lock_v1_lock_proto_msgTypes[4]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *CloseSessionRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*CloseSessionRequest) ProtoMessage() {}

func (x *CloseSessionRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[4]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use CloseSessionRequest.ProtoReflect.Descriptor instead.
func (*CloseSessionRequest) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{4}
}

func (x *CloseSessionRequest) GetSessionId() int64 {
	if x != nil {
		return x.SessionId
	}
	return 0
}

type CloseSessionResponse struct {
	state         protoimpl.MessageState `protogen:"open.v1"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *CloseSessionResponse) Reset() {
	*x = CloseSessionResponse{}
	mi := &file_lock_v1_lock_proto_msgTypes[5]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *CloseSessionResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*CloseSessionResponse) ProtoMessage() {}

func (x *CloseSessionResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[5]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use CloseSessionResponse.ProtoReflect.Descriptor instead.
func (*CloseSessionResponse) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{5}
}

type AcquireRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The key to take (see "Keyed calls").
	Key string `protobuf:"bytes,1,opt,name=key,proto3" json:"key,omitempty"`
	// The session to attach the hold to: open for the key's class (WRONG_SESSION_TTL if its
	// TTL is another class's).
	SessionId int64 `protobuf:"varint,2,opt,name=session_id,json=sessionId,proto3" json:"session_id,omitempty"`
	// How long the caller is prepared to wait for a held key. 0 = refuse at once.
	WaitMillis uint64 `protobuf:"varint,3,opt,name=wait_millis,json=waitMillis,proto3" json:"wait_millis,omitempty"`
	// EXCLUSIVE (the default) or, for a key of a `shared: true` class, SHARED: many sessions
	// hold it at once, and an exclusive hold waits for all of them (MALFORMED_REQUEST for
	// SHARED on a class that is not shared). docs: coordination/shared.md. PERMIT, and only
	// PERMIT, on a key of a `permits: N` class (a semaphore): one of its N permits
	// (MALFORMED_REQUEST for PERMIT elsewhere, or another mode there).
	// docs: coordination/semaphores.md.
	Mode          HoldMode `protobuf:"varint,4,opt,name=mode,proto3,enum=lock.v1.HoldMode" json:"mode,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *AcquireRequest) Reset() {
	*x = AcquireRequest{}
	mi := &file_lock_v1_lock_proto_msgTypes[6]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *AcquireRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*AcquireRequest) ProtoMessage() {}

func (x *AcquireRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[6]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use AcquireRequest.ProtoReflect.Descriptor instead.
func (*AcquireRequest) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{6}
}

func (x *AcquireRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

func (x *AcquireRequest) GetSessionId() int64 {
	if x != nil {
		return x.SessionId
	}
	return 0
}

func (x *AcquireRequest) GetWaitMillis() uint64 {
	if x != nil {
		return x.WaitMillis
	}
	return 0
}

func (x *AcquireRequest) GetMode() HoldMode {
	if x != nil {
		return x.Mode
	}
	return HoldMode_HOLD_MODE_UNSPECIFIED
}

// The decoded parts of a token, for diagnostics only: resources compare `token`.
type TokenParts struct {
	state         protoimpl.MessageState `protogen:"open.v1"`
	Epoch         uint32                 `protobuf:"varint,1,opt,name=epoch,proto3" json:"epoch,omitempty"`
	Revision      uint64                 `protobuf:"varint,2,opt,name=revision,proto3" json:"revision,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *TokenParts) Reset() {
	*x = TokenParts{}
	mi := &file_lock_v1_lock_proto_msgTypes[7]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *TokenParts) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*TokenParts) ProtoMessage() {}

func (x *TokenParts) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[7]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use TokenParts.ProtoReflect.Descriptor instead.
func (*TokenParts) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{7}
}

func (x *TokenParts) GetEpoch() uint32 {
	if x != nil {
		return x.Epoch
	}
	return 0
}

func (x *TokenParts) GetRevision() uint64 {
	if x != nil {
		return x.Revision
	}
	return 0
}

type AcquireResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The fencing token: epoch << 48 | the etcd revision of the write that made the caller
	// holder. Strictly greater than every earlier grant's token of this key. The guarded
	// resource stores it with each write and accepts a write only when its token is greater
	// than the stored one, in its own conditional write
	// (`UPDATE ... SET fence = $token WHERE id = $id AND fence < $token`). A capability:
	// never log it.
	Token uint64 `protobuf:"fixed64,1,opt,name=token,proto3" json:"token,omitempty"`
	// The token's parts, for diagnostics.
	Parts *TokenParts `protobuf:"bytes,2,opt,name=parts,proto3" json:"parts,omitempty"`
	// The lock class covering the key.
	ClassName string `protobuf:"bytes,3,opt,name=class_name,json=className,proto3" json:"class_name,omitempty"`
	// The session's TTL: the hold lasts while the session is renewed.
	TtlSeconds uint32 `protobuf:"varint,4,opt,name=ttl_seconds,json=ttlSeconds,proto3" json:"ttl_seconds,omitempty"`
	// PERMIT holds only: which of the semaphore's permits this is (0..N-1). The resource
	// fences per permit: `... WHERE key = $k AND permit = $permit AND fence < $token`.
	Permit        uint32 `protobuf:"varint,5,opt,name=permit,proto3" json:"permit,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *AcquireResponse) Reset() {
	*x = AcquireResponse{}
	mi := &file_lock_v1_lock_proto_msgTypes[8]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *AcquireResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*AcquireResponse) ProtoMessage() {}

func (x *AcquireResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[8]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use AcquireResponse.ProtoReflect.Descriptor instead.
func (*AcquireResponse) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{8}
}

func (x *AcquireResponse) GetToken() uint64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *AcquireResponse) GetParts() *TokenParts {
	if x != nil {
		return x.Parts
	}
	return nil
}

func (x *AcquireResponse) GetClassName() string {
	if x != nil {
		return x.ClassName
	}
	return ""
}

func (x *AcquireResponse) GetTtlSeconds() uint32 {
	if x != nil {
		return x.TtlSeconds
	}
	return 0
}

func (x *AcquireResponse) GetPermit() uint32 {
	if x != nil {
		return x.Permit
	}
	return 0
}

type ReleaseRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The held key.
	Key string `protobuf:"bytes,1,opt,name=key,proto3" json:"key,omitempty"`
	// The token Acquire returned; STALE_TOKEN if it is no longer the key's current grant.
	Token uint64 `protobuf:"fixed64,2,opt,name=token,proto3" json:"token,omitempty"`
	// Optional: when set, the release also checks the grant belongs to this session.
	SessionId int64 `protobuf:"varint,3,opt,name=session_id,json=sessionId,proto3" json:"session_id,omitempty"`
	// The hold's mode, as acquired (a shared hold is released as SHARED).
	Mode          HoldMode `protobuf:"varint,4,opt,name=mode,proto3,enum=lock.v1.HoldMode" json:"mode,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *ReleaseRequest) Reset() {
	*x = ReleaseRequest{}
	mi := &file_lock_v1_lock_proto_msgTypes[9]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *ReleaseRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ReleaseRequest) ProtoMessage() {}

func (x *ReleaseRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[9]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ReleaseRequest.ProtoReflect.Descriptor instead.
func (*ReleaseRequest) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{9}
}

func (x *ReleaseRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

func (x *ReleaseRequest) GetToken() uint64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *ReleaseRequest) GetSessionId() int64 {
	if x != nil {
		return x.SessionId
	}
	return 0
}

func (x *ReleaseRequest) GetMode() HoldMode {
	if x != nil {
		return x.Mode
	}
	return HoldMode_HOLD_MODE_UNSPECIFIED
}

type ReleaseResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The store revision at which the hold ended: where the audit trail (ADR-21) records
	// this release, and the revision any later grant of the key is above.
	ReleasedAtRevision int64 `protobuf:"varint,1,opt,name=released_at_revision,json=releasedAtRevision,proto3" json:"released_at_revision,omitempty"`
	unknownFields      protoimpl.UnknownFields
	sizeCache          protoimpl.SizeCache
}

func (x *ReleaseResponse) Reset() {
	*x = ReleaseResponse{}
	mi := &file_lock_v1_lock_proto_msgTypes[10]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *ReleaseResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ReleaseResponse) ProtoMessage() {}

func (x *ReleaseResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[10]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ReleaseResponse.ProtoReflect.Descriptor instead.
func (*ReleaseResponse) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{10}
}

func (x *ReleaseResponse) GetReleasedAtRevision() int64 {
	if x != nil {
		return x.ReleasedAtRevision
	}
	return 0
}

type ValidateTokenRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The key the token was granted for.
	Key string `protobuf:"bytes,1,opt,name=key,proto3" json:"key,omitempty"`
	// The token to check.
	Token         uint64 `protobuf:"fixed64,2,opt,name=token,proto3" json:"token,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *ValidateTokenRequest) Reset() {
	*x = ValidateTokenRequest{}
	mi := &file_lock_v1_lock_proto_msgTypes[11]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *ValidateTokenRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ValidateTokenRequest) ProtoMessage() {}

func (x *ValidateTokenRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[11]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ValidateTokenRequest.ProtoReflect.Descriptor instead.
func (*ValidateTokenRequest) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{11}
}

func (x *ValidateTokenRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

func (x *ValidateTokenRequest) GetToken() uint64 {
	if x != nil {
		return x.Token
	}
	return 0
}

type ValidateTokenResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// True when the token is the key's current grant at a linearizable read.
	Valid         bool `protobuf:"varint,1,opt,name=valid,proto3" json:"valid,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *ValidateTokenResponse) Reset() {
	*x = ValidateTokenResponse{}
	mi := &file_lock_v1_lock_proto_msgTypes[12]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *ValidateTokenResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ValidateTokenResponse) ProtoMessage() {}

func (x *ValidateTokenResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[12]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ValidateTokenResponse.ProtoReflect.Descriptor instead.
func (*ValidateTokenResponse) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{12}
}

func (x *ValidateTokenResponse) GetValid() bool {
	if x != nil {
		return x.Valid
	}
	return false
}

type HoldRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// Types that are valid to be assigned to Step:
	//
	//	*HoldRequest_Acquire
	//	*HoldRequest_Release
	Step          isHoldRequest_Step `protobuf_oneof:"step"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *HoldRequest) Reset() {
	*x = HoldRequest{}
	mi := &file_lock_v1_lock_proto_msgTypes[13]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *HoldRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*HoldRequest) ProtoMessage() {}

func (x *HoldRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[13]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use HoldRequest.ProtoReflect.Descriptor instead.
func (*HoldRequest) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{13}
}

func (x *HoldRequest) GetStep() isHoldRequest_Step {
	if x != nil {
		return x.Step
	}
	return nil
}

func (x *HoldRequest) GetAcquire() *AcquireRequest {
	if x != nil {
		if x, ok := x.Step.(*HoldRequest_Acquire); ok {
			return x.Acquire
		}
	}
	return nil
}

func (x *HoldRequest) GetRelease() *ReleaseRequest {
	if x != nil {
		if x, ok := x.Step.(*HoldRequest_Release); ok {
			return x.Release
		}
	}
	return nil
}

type isHoldRequest_Step interface {
	isHoldRequest_Step()
}

type HoldRequest_Acquire struct {
	// The stream's first message: the key the edge decided the stream on.
	Acquire *AcquireRequest `protobuf:"bytes,1,opt,name=acquire,proto3,oneof"`
}

type HoldRequest_Release struct {
	// After `acquired`: the release of that grant (the same key and token).
	Release *ReleaseRequest `protobuf:"bytes,2,opt,name=release,proto3,oneof"`
}

func (*HoldRequest_Acquire) isHoldRequest_Step() {}

func (*HoldRequest_Release) isHoldRequest_Step() {}

type HoldResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// Types that are valid to be assigned to Step:
	//
	//	*HoldResponse_Acquired
	//	*HoldResponse_Released
	Step          isHoldResponse_Step `protobuf_oneof:"step"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *HoldResponse) Reset() {
	*x = HoldResponse{}
	mi := &file_lock_v1_lock_proto_msgTypes[14]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *HoldResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*HoldResponse) ProtoMessage() {}

func (x *HoldResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[14]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use HoldResponse.ProtoReflect.Descriptor instead.
func (*HoldResponse) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{14}
}

func (x *HoldResponse) GetStep() isHoldResponse_Step {
	if x != nil {
		return x.Step
	}
	return nil
}

func (x *HoldResponse) GetAcquired() *AcquireResponse {
	if x != nil {
		if x, ok := x.Step.(*HoldResponse_Acquired); ok {
			return x.Acquired
		}
	}
	return nil
}

func (x *HoldResponse) GetReleased() *ReleaseResponse {
	if x != nil {
		if x, ok := x.Step.(*HoldResponse_Released); ok {
			return x.Released
		}
	}
	return nil
}

type isHoldResponse_Step interface {
	isHoldResponse_Step()
}

type HoldResponse_Acquired struct {
	Acquired *AcquireResponse `protobuf:"bytes,1,opt,name=acquired,proto3,oneof"`
}

type HoldResponse_Released struct {
	Released *ReleaseResponse `protobuf:"bytes,2,opt,name=released,proto3,oneof"`
}

func (*HoldResponse_Acquired) isHoldResponse_Step() {}

func (*HoldResponse_Released) isHoldResponse_Step() {}

type InspectRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The key to look at; the caller needs a grant for it like any keyed call.
	Key           string `protobuf:"bytes,1,opt,name=key,proto3" json:"key,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *InspectRequest) Reset() {
	*x = InspectRequest{}
	mi := &file_lock_v1_lock_proto_msgTypes[15]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *InspectRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*InspectRequest) ProtoMessage() {}

func (x *InspectRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[15]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use InspectRequest.ProtoReflect.Descriptor instead.
func (*InspectRequest) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{15}
}

func (x *InspectRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

type InspectResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// Whether any session holds the key now.
	Held bool `protobuf:"varint,1,opt,name=held,proto3" json:"held,omitempty"`
	// The holder's SPIFFE ID (empty when free).
	HolderSpiffeId string `protobuf:"bytes,2,opt,name=holder_spiffe_id,json=holderSpiffeId,proto3" json:"holder_spiffe_id,omitempty"`
	// The lock class covering the key.
	ClassName string `protobuf:"bytes,3,opt,name=class_name,json=className,proto3" json:"class_name,omitempty"`
	// When the current hold was granted (0 when free).
	AcquiredAtUnixMs uint64 `protobuf:"varint,4,opt,name=acquired_at_unix_ms,json=acquiredAtUnixMs,proto3" json:"acquired_at_unix_ms,omitempty"`
	// Waiters queued for the key (on the arbiter that owns it).
	Waiters uint32 `protobuf:"varint,5,opt,name=waiters,proto3" json:"waiters,omitempty"`
	// Shared holds of the key now (a `shared: true` class; 0 otherwise). `held` and the
	// holder fields describe the exclusive hold only.
	SharedHolders uint32 `protobuf:"varint,6,opt,name=shared_holders,json=sharedHolders,proto3" json:"shared_holders,omitempty"`
	// A semaphore (`permits: N` class): its permits held now, and N (both 0 otherwise).
	// `held` is true while any permit is held; the holder fields describe none of them.
	PermitsHeld   uint32 `protobuf:"varint,7,opt,name=permits_held,json=permitsHeld,proto3" json:"permits_held,omitempty"`
	Permits       uint32 `protobuf:"varint,8,opt,name=permits,proto3" json:"permits,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *InspectResponse) Reset() {
	*x = InspectResponse{}
	mi := &file_lock_v1_lock_proto_msgTypes[16]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *InspectResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*InspectResponse) ProtoMessage() {}

func (x *InspectResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[16]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use InspectResponse.ProtoReflect.Descriptor instead.
func (*InspectResponse) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{16}
}

func (x *InspectResponse) GetHeld() bool {
	if x != nil {
		return x.Held
	}
	return false
}

func (x *InspectResponse) GetHolderSpiffeId() string {
	if x != nil {
		return x.HolderSpiffeId
	}
	return ""
}

func (x *InspectResponse) GetClassName() string {
	if x != nil {
		return x.ClassName
	}
	return ""
}

func (x *InspectResponse) GetAcquiredAtUnixMs() uint64 {
	if x != nil {
		return x.AcquiredAtUnixMs
	}
	return 0
}

func (x *InspectResponse) GetWaiters() uint32 {
	if x != nil {
		return x.Waiters
	}
	return 0
}

func (x *InspectResponse) GetSharedHolders() uint32 {
	if x != nil {
		return x.SharedHolders
	}
	return 0
}

func (x *InspectResponse) GetPermitsHeld() uint32 {
	if x != nil {
		return x.PermitsHeld
	}
	return 0
}

func (x *InspectResponse) GetPermits() uint32 {
	if x != nil {
		return x.Permits
	}
	return 0
}

type ObserveRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The key to observe; the caller needs a grant for it like any keyed call.
	Key string `protobuf:"bytes,1,opt,name=key,proto3" json:"key,omitempty"`
	// 0: start with the current holder (`CURRENT`). Otherwise resume: the changes after
	// this revision (the `revision` of the last answer seen), or HISTORY_COMPACTED.
	AfterRevision int64 `protobuf:"varint,2,opt,name=after_revision,json=afterRevision,proto3" json:"after_revision,omitempty"`
	// Optional: the caller's own session. While that session holds the key (and the caller
	// is the holder's identity), the answers about its hold carry its token. Every other
	// observer, a sibling replica of the same identity included, sees no token.
	SessionId int64 `protobuf:"varint,3,opt,name=session_id,json=sessionId,proto3" json:"session_id,omitempty"`
	// With `after_revision`: the `store_epoch` of the answer it came from. A revision means
	// something only in its store's history: after a shard move or a restore the key's store
	// is another, and the resume is answered HISTORY_COMPACTED (observe from now). 0: not
	// checked.
	AfterStoreEpoch uint32 `protobuf:"varint,4,opt,name=after_store_epoch,json=afterStoreEpoch,proto3" json:"after_store_epoch,omitempty"`
	unknownFields   protoimpl.UnknownFields
	sizeCache       protoimpl.SizeCache
}

func (x *ObserveRequest) Reset() {
	*x = ObserveRequest{}
	mi := &file_lock_v1_lock_proto_msgTypes[17]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *ObserveRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ObserveRequest) ProtoMessage() {}

func (x *ObserveRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[17]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ObserveRequest.ProtoReflect.Descriptor instead.
func (*ObserveRequest) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{17}
}

func (x *ObserveRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

func (x *ObserveRequest) GetAfterRevision() int64 {
	if x != nil {
		return x.AfterRevision
	}
	return 0
}

func (x *ObserveRequest) GetSessionId() int64 {
	if x != nil {
		return x.SessionId
	}
	return 0
}

func (x *ObserveRequest) GetAfterStoreEpoch() uint32 {
	if x != nil {
		return x.AfterStoreEpoch
	}
	return 0
}

type ObserveResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	Event ObserveEvent           `protobuf:"varint,1,opt,name=event,proto3,enum=lock.v1.ObserveEvent" json:"event,omitempty"`
	// The store revision of this answer: resume after it.
	Revision int64 `protobuf:"varint,2,opt,name=revision,proto3" json:"revision,omitempty"`
	// Whether a session holds the key after this change (the holder fields below describe
	// it; for RELEASED, EXPIRED, CLOSED, FORCED and REVOKED they describe the hold that
	// ended).
	Held bool `protobuf:"varint,3,opt,name=held,proto3" json:"held,omitempty"`
	// The holder's SPIFFE ID, and its process instance when its client sent one.
	HolderSpiffeId string `protobuf:"bytes,4,opt,name=holder_spiffe_id,json=holderSpiffeId,proto3" json:"holder_spiffe_id,omitempty"`
	HolderInstance string `protobuf:"bytes,5,opt,name=holder_instance,json=holderInstance,proto3" json:"holder_instance,omitempty"`
	// The lock class covering the key.
	ClassName string `protobuf:"bytes,6,opt,name=class_name,json=className,proto3" json:"class_name,omitempty"`
	// When the hold was granted.
	AcquiredAtUnixMs uint64 `protobuf:"varint,7,opt,name=acquired_at_unix_ms,json=acquiredAtUnixMs,proto3" json:"acquired_at_unix_ms,omitempty"`
	// The epoch the hold was granted in; with `grant_revision`, the hold's token parts.
	Epoch uint32 `protobuf:"varint,8,opt,name=epoch,proto3" json:"epoch,omitempty"`
	// The store revision of the write that made the holder: a later hold's is higher.
	GrantRevision int64 `protobuf:"varint,9,opt,name=grant_revision,json=grantRevision,proto3" json:"grant_revision,omitempty"`
	// The hold's fencing token, only on answers to the holder's own session (see
	// ObserveRequest.session_id); 0 otherwise. A capability: never log it.
	Token uint64 `protobuf:"fixed64,10,opt,name=token,proto3" json:"token,omitempty"`
	// The epoch of the store `revision` belongs to: send it back as `after_store_epoch`.
	StoreEpoch    uint32 `protobuf:"varint,11,opt,name=store_epoch,json=storeEpoch,proto3" json:"store_epoch,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *ObserveResponse) Reset() {
	*x = ObserveResponse{}
	mi := &file_lock_v1_lock_proto_msgTypes[18]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *ObserveResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ObserveResponse) ProtoMessage() {}

func (x *ObserveResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[18]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ObserveResponse.ProtoReflect.Descriptor instead.
func (*ObserveResponse) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{18}
}

func (x *ObserveResponse) GetEvent() ObserveEvent {
	if x != nil {
		return x.Event
	}
	return ObserveEvent_OBSERVE_EVENT_UNSPECIFIED
}

func (x *ObserveResponse) GetRevision() int64 {
	if x != nil {
		return x.Revision
	}
	return 0
}

func (x *ObserveResponse) GetHeld() bool {
	if x != nil {
		return x.Held
	}
	return false
}

func (x *ObserveResponse) GetHolderSpiffeId() string {
	if x != nil {
		return x.HolderSpiffeId
	}
	return ""
}

func (x *ObserveResponse) GetHolderInstance() string {
	if x != nil {
		return x.HolderInstance
	}
	return ""
}

func (x *ObserveResponse) GetClassName() string {
	if x != nil {
		return x.ClassName
	}
	return ""
}

func (x *ObserveResponse) GetAcquiredAtUnixMs() uint64 {
	if x != nil {
		return x.AcquiredAtUnixMs
	}
	return 0
}

func (x *ObserveResponse) GetEpoch() uint32 {
	if x != nil {
		return x.Epoch
	}
	return 0
}

func (x *ObserveResponse) GetGrantRevision() int64 {
	if x != nil {
		return x.GrantRevision
	}
	return 0
}

func (x *ObserveResponse) GetToken() uint64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *ObserveResponse) GetStoreEpoch() uint32 {
	if x != nil {
		return x.StoreEpoch
	}
	return 0
}

type AcquireAllRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The keys to take together: 1..=16 distinct keys, in any order (the set is sorted).
	Keys []string `protobuf:"bytes,1,rep,name=keys,proto3" json:"keys,omitempty"`
	// The session to attach every hold to (see AcquireRequest).
	SessionId int64 `protobuf:"varint,2,opt,name=session_id,json=sessionId,proto3" json:"session_id,omitempty"`
	// How long the caller is prepared to wait until every key is free at once.
	WaitMillis    uint64 `protobuf:"varint,3,opt,name=wait_millis,json=waitMillis,proto3" json:"wait_millis,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *AcquireAllRequest) Reset() {
	*x = AcquireAllRequest{}
	mi := &file_lock_v1_lock_proto_msgTypes[19]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *AcquireAllRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*AcquireAllRequest) ProtoMessage() {}

func (x *AcquireAllRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[19]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use AcquireAllRequest.ProtoReflect.Descriptor instead.
func (*AcquireAllRequest) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{19}
}

func (x *AcquireAllRequest) GetKeys() []string {
	if x != nil {
		return x.Keys
	}
	return nil
}

func (x *AcquireAllRequest) GetSessionId() int64 {
	if x != nil {
		return x.SessionId
	}
	return 0
}

func (x *AcquireAllRequest) GetWaitMillis() uint64 {
	if x != nil {
		return x.WaitMillis
	}
	return 0
}

type AcquireAllResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The fencing token of every key of the set: one transaction made them all, so each
	// key's token is this number, strictly greater than every earlier grant's token of that
	// key. Write to each key's resource with it. A capability: never log it.
	Token uint64      `protobuf:"fixed64,1,opt,name=token,proto3" json:"token,omitempty"`
	Parts *TokenParts `protobuf:"bytes,2,opt,name=parts,proto3" json:"parts,omitempty"`
	// The keys held, sorted: what ReleaseAll names.
	Keys []string `protobuf:"bytes,3,rep,name=keys,proto3" json:"keys,omitempty"`
	// The session's TTL: the holds last while the session is renewed.
	TtlSeconds    uint32 `protobuf:"varint,4,opt,name=ttl_seconds,json=ttlSeconds,proto3" json:"ttl_seconds,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *AcquireAllResponse) Reset() {
	*x = AcquireAllResponse{}
	mi := &file_lock_v1_lock_proto_msgTypes[20]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *AcquireAllResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*AcquireAllResponse) ProtoMessage() {}

func (x *AcquireAllResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[20]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use AcquireAllResponse.ProtoReflect.Descriptor instead.
func (*AcquireAllResponse) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{20}
}

func (x *AcquireAllResponse) GetToken() uint64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *AcquireAllResponse) GetParts() *TokenParts {
	if x != nil {
		return x.Parts
	}
	return nil
}

func (x *AcquireAllResponse) GetKeys() []string {
	if x != nil {
		return x.Keys
	}
	return nil
}

func (x *AcquireAllResponse) GetTtlSeconds() uint32 {
	if x != nil {
		return x.TtlSeconds
	}
	return 0
}

type ReleaseAllRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// Every key of the set, as AcquireAll answered them (any order).
	Keys []string `protobuf:"bytes,1,rep,name=keys,proto3" json:"keys,omitempty"`
	// The set's token.
	Token uint64 `protobuf:"fixed64,2,opt,name=token,proto3" json:"token,omitempty"`
	// Optional, as in ReleaseRequest.
	SessionId     int64 `protobuf:"varint,3,opt,name=session_id,json=sessionId,proto3" json:"session_id,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *ReleaseAllRequest) Reset() {
	*x = ReleaseAllRequest{}
	mi := &file_lock_v1_lock_proto_msgTypes[21]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *ReleaseAllRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ReleaseAllRequest) ProtoMessage() {}

func (x *ReleaseAllRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[21]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ReleaseAllRequest.ProtoReflect.Descriptor instead.
func (*ReleaseAllRequest) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{21}
}

func (x *ReleaseAllRequest) GetKeys() []string {
	if x != nil {
		return x.Keys
	}
	return nil
}

func (x *ReleaseAllRequest) GetToken() uint64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *ReleaseAllRequest) GetSessionId() int64 {
	if x != nil {
		return x.SessionId
	}
	return 0
}

type ReleaseAllResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The store revision at which the keys below were released.
	ReleasedAtRevision int64 `protobuf:"varint,1,opt,name=released_at_revision,json=releasedAtRevision,proto3" json:"released_at_revision,omitempty"`
	// The keys this call ended, sorted. A key of the set missing here had already ended
	// alone (a Release of that key, a force release): what a Release of it would have been
	// told STALE_TOKEN for.
	ReleasedKeys  []string `protobuf:"bytes,2,rep,name=released_keys,json=releasedKeys,proto3" json:"released_keys,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *ReleaseAllResponse) Reset() {
	*x = ReleaseAllResponse{}
	mi := &file_lock_v1_lock_proto_msgTypes[22]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *ReleaseAllResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ReleaseAllResponse) ProtoMessage() {}

func (x *ReleaseAllResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lock_v1_lock_proto_msgTypes[22]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ReleaseAllResponse.ProtoReflect.Descriptor instead.
func (*ReleaseAllResponse) Descriptor() ([]byte, []int) {
	return file_lock_v1_lock_proto_rawDescGZIP(), []int{22}
}

func (x *ReleaseAllResponse) GetReleasedAtRevision() int64 {
	if x != nil {
		return x.ReleasedAtRevision
	}
	return 0
}

func (x *ReleaseAllResponse) GetReleasedKeys() []string {
	if x != nil {
		return x.ReleasedKeys
	}
	return nil
}

var File_lock_v1_lock_proto protoreflect.FileDescriptor

const file_lock_v1_lock_proto_rawDesc = "" +
	"\n" +
	"\x12lock/v1/lock.proto\x12\alock.v1\"&\n" +
	"\x12OpenSessionRequest\x12\x10\n" +
	"\x03key\x18\x01 \x01(\tR\x03key\"t\n" +
	"\x13OpenSessionResponse\x12\x1d\n" +
	"\n" +
	"session_id\x18\x01 \x01(\x03R\tsessionId\x12\x1f\n" +
	"\vttl_seconds\x18\x02 \x01(\rR\n" +
	"ttlSeconds\x12\x1d\n" +
	"\n" +
	"class_name\x18\x03 \x01(\tR\tclassName\"1\n" +
	"\x10KeepAliveRequest\x12\x1d\n" +
	"\n" +
	"session_id\x18\x01 \x01(\x03R\tsessionId\"S\n" +
	"\x11KeepAliveResponse\x12\x1d\n" +
	"\n" +
	"session_id\x18\x01 \x01(\x03R\tsessionId\x12\x1f\n" +
	"\vttl_seconds\x18\x02 \x01(\x03R\n" +
	"ttlSeconds\"4\n" +
	"\x13CloseSessionRequest\x12\x1d\n" +
	"\n" +
	"session_id\x18\x01 \x01(\x03R\tsessionId\"\x16\n" +
	"\x14CloseSessionResponse\"\x89\x01\n" +
	"\x0eAcquireRequest\x12\x10\n" +
	"\x03key\x18\x01 \x01(\tR\x03key\x12\x1d\n" +
	"\n" +
	"session_id\x18\x02 \x01(\x03R\tsessionId\x12\x1f\n" +
	"\vwait_millis\x18\x03 \x01(\x04R\n" +
	"waitMillis\x12%\n" +
	"\x04mode\x18\x04 \x01(\x0e2\x11.lock.v1.HoldModeR\x04mode\">\n" +
	"\n" +
	"TokenParts\x12\x14\n" +
	"\x05epoch\x18\x01 \x01(\rR\x05epoch\x12\x1a\n" +
	"\brevision\x18\x02 \x01(\x04R\brevision\"\xaa\x01\n" +
	"\x0fAcquireResponse\x12\x14\n" +
	"\x05token\x18\x01 \x01(\x06R\x05token\x12)\n" +
	"\x05parts\x18\x02 \x01(\v2\x13.lock.v1.TokenPartsR\x05parts\x12\x1d\n" +
	"\n" +
	"class_name\x18\x03 \x01(\tR\tclassName\x12\x1f\n" +
	"\vttl_seconds\x18\x04 \x01(\rR\n" +
	"ttlSeconds\x12\x16\n" +
	"\x06permit\x18\x05 \x01(\rR\x06permit\"~\n" +
	"\x0eReleaseRequest\x12\x10\n" +
	"\x03key\x18\x01 \x01(\tR\x03key\x12\x14\n" +
	"\x05token\x18\x02 \x01(\x06R\x05token\x12\x1d\n" +
	"\n" +
	"session_id\x18\x03 \x01(\x03R\tsessionId\x12%\n" +
	"\x04mode\x18\x04 \x01(\x0e2\x11.lock.v1.HoldModeR\x04mode\"C\n" +
	"\x0fReleaseResponse\x120\n" +
	"\x14released_at_revision\x18\x01 \x01(\x03R\x12releasedAtRevision\">\n" +
	"\x14ValidateTokenRequest\x12\x10\n" +
	"\x03key\x18\x01 \x01(\tR\x03key\x12\x14\n" +
	"\x05token\x18\x02 \x01(\x06R\x05token\"-\n" +
	"\x15ValidateTokenResponse\x12\x14\n" +
	"\x05valid\x18\x01 \x01(\bR\x05valid\"\x7f\n" +
	"\vHoldRequest\x123\n" +
	"\aacquire\x18\x01 \x01(\v2\x17.lock.v1.AcquireRequestH\x00R\aacquire\x123\n" +
	"\arelease\x18\x02 \x01(\v2\x17.lock.v1.ReleaseRequestH\x00R\areleaseB\x06\n" +
	"\x04step\"\x86\x01\n" +
	"\fHoldResponse\x126\n" +
	"\bacquired\x18\x01 \x01(\v2\x18.lock.v1.AcquireResponseH\x00R\bacquired\x126\n" +
	"\breleased\x18\x02 \x01(\v2\x18.lock.v1.ReleaseResponseH\x00R\breleasedB\x06\n" +
	"\x04step\"\"\n" +
	"\x0eInspectRequest\x12\x10\n" +
	"\x03key\x18\x01 \x01(\tR\x03key\"\x9b\x02\n" +
	"\x0fInspectResponse\x12\x12\n" +
	"\x04held\x18\x01 \x01(\bR\x04held\x12(\n" +
	"\x10holder_spiffe_id\x18\x02 \x01(\tR\x0eholderSpiffeId\x12\x1d\n" +
	"\n" +
	"class_name\x18\x03 \x01(\tR\tclassName\x12-\n" +
	"\x13acquired_at_unix_ms\x18\x04 \x01(\x04R\x10acquiredAtUnixMs\x12\x18\n" +
	"\awaiters\x18\x05 \x01(\rR\awaiters\x12%\n" +
	"\x0eshared_holders\x18\x06 \x01(\rR\rsharedHolders\x12!\n" +
	"\fpermits_held\x18\a \x01(\rR\vpermitsHeld\x12\x18\n" +
	"\apermits\x18\b \x01(\rR\apermits\"\x94\x01\n" +
	"\x0eObserveRequest\x12\x10\n" +
	"\x03key\x18\x01 \x01(\tR\x03key\x12%\n" +
	"\x0eafter_revision\x18\x02 \x01(\x03R\rafterRevision\x12\x1d\n" +
	"\n" +
	"session_id\x18\x03 \x01(\x03R\tsessionId\x12*\n" +
	"\x11after_store_epoch\x18\x04 \x01(\rR\x0fafterStoreEpoch\"\x83\x03\n" +
	"\x0fObserveResponse\x12+\n" +
	"\x05event\x18\x01 \x01(\x0e2\x15.lock.v1.ObserveEventR\x05event\x12\x1a\n" +
	"\brevision\x18\x02 \x01(\x03R\brevision\x12\x12\n" +
	"\x04held\x18\x03 \x01(\bR\x04held\x12(\n" +
	"\x10holder_spiffe_id\x18\x04 \x01(\tR\x0eholderSpiffeId\x12'\n" +
	"\x0fholder_instance\x18\x05 \x01(\tR\x0eholderInstance\x12\x1d\n" +
	"\n" +
	"class_name\x18\x06 \x01(\tR\tclassName\x12-\n" +
	"\x13acquired_at_unix_ms\x18\a \x01(\x04R\x10acquiredAtUnixMs\x12\x14\n" +
	"\x05epoch\x18\b \x01(\rR\x05epoch\x12%\n" +
	"\x0egrant_revision\x18\t \x01(\x03R\rgrantRevision\x12\x14\n" +
	"\x05token\x18\n" +
	" \x01(\x06R\x05token\x12\x1f\n" +
	"\vstore_epoch\x18\v \x01(\rR\n" +
	"storeEpoch\"g\n" +
	"\x11AcquireAllRequest\x12\x12\n" +
	"\x04keys\x18\x01 \x03(\tR\x04keys\x12\x1d\n" +
	"\n" +
	"session_id\x18\x02 \x01(\x03R\tsessionId\x12\x1f\n" +
	"\vwait_millis\x18\x03 \x01(\x04R\n" +
	"waitMillis\"\x8a\x01\n" +
	"\x12AcquireAllResponse\x12\x14\n" +
	"\x05token\x18\x01 \x01(\x06R\x05token\x12)\n" +
	"\x05parts\x18\x02 \x01(\v2\x13.lock.v1.TokenPartsR\x05parts\x12\x12\n" +
	"\x04keys\x18\x03 \x03(\tR\x04keys\x12\x1f\n" +
	"\vttl_seconds\x18\x04 \x01(\rR\n" +
	"ttlSeconds\"\\\n" +
	"\x11ReleaseAllRequest\x12\x12\n" +
	"\x04keys\x18\x01 \x03(\tR\x04keys\x12\x14\n" +
	"\x05token\x18\x02 \x01(\x06R\x05token\x12\x1d\n" +
	"\n" +
	"session_id\x18\x03 \x01(\x03R\tsessionId\"k\n" +
	"\x12ReleaseAllResponse\x120\n" +
	"\x14released_at_revision\x18\x01 \x01(\x03R\x12releasedAtRevision\x12#\n" +
	"\rreleased_keys\x18\x02 \x03(\tR\freleasedKeys*j\n" +
	"\bHoldMode\x12\x19\n" +
	"\x15HOLD_MODE_UNSPECIFIED\x10\x00\x12\x17\n" +
	"\x13HOLD_MODE_EXCLUSIVE\x10\x01\x12\x14\n" +
	"\x10HOLD_MODE_SHARED\x10\x02\x12\x14\n" +
	"\x10HOLD_MODE_PERMIT\x10\x03*\x85\x02\n" +
	"\fObserveEvent\x12\x1d\n" +
	"\x19OBSERVE_EVENT_UNSPECIFIED\x10\x00\x12\x19\n" +
	"\x15OBSERVE_EVENT_CURRENT\x10\x01\x12\x19\n" +
	"\x15OBSERVE_EVENT_GRANTED\x10\x02\x12\x1a\n" +
	"\x16OBSERVE_EVENT_RELEASED\x10\x03\x12\x19\n" +
	"\x15OBSERVE_EVENT_EXPIRED\x10\x04\x12\x18\n" +
	"\x14OBSERVE_EVENT_CLOSED\x10\x05\x12\x18\n" +
	"\x14OBSERVE_EVENT_FORCED\x10\x06\x12\x19\n" +
	"\x15OBSERVE_EVENT_REVOKED\x10\a\x12\x1a\n" +
	"\x16OBSERVE_EVENT_PROGRESS\x10\b2\xf6\x05\n" +
	"\x04Lock\x12H\n" +
	"\vOpenSession\x12\x1b.lock.v1.OpenSessionRequest\x1a\x1c.lock.v1.OpenSessionResponse\x12F\n" +
	"\tKeepAlive\x12\x19.lock.v1.KeepAliveRequest\x1a\x1a.lock.v1.KeepAliveResponse(\x010\x01\x12K\n" +
	"\fCloseSession\x12\x1c.lock.v1.CloseSessionRequest\x1a\x1d.lock.v1.CloseSessionResponse\x12<\n" +
	"\aAcquire\x12\x17.lock.v1.AcquireRequest\x1a\x18.lock.v1.AcquireResponse\x12<\n" +
	"\aRelease\x12\x17.lock.v1.ReleaseRequest\x1a\x18.lock.v1.ReleaseResponse\x12N\n" +
	"\rValidateToken\x12\x1d.lock.v1.ValidateTokenRequest\x1a\x1e.lock.v1.ValidateTokenResponse\x12<\n" +
	"\aInspect\x12\x17.lock.v1.InspectRequest\x1a\x18.lock.v1.InspectResponse\x127\n" +
	"\x04Hold\x12\x14.lock.v1.HoldRequest\x1a\x15.lock.v1.HoldResponse(\x010\x01\x12>\n" +
	"\aObserve\x12\x17.lock.v1.ObserveRequest\x1a\x18.lock.v1.ObserveResponse0\x01\x12E\n" +
	"\n" +
	"AcquireAll\x12\x1a.lock.v1.AcquireAllRequest\x1a\x1b.lock.v1.AcquireAllResponse\x12E\n" +
	"\n" +
	"ReleaseAll\x12\x1a.lock.v1.ReleaseAllRequest\x1a\x1b.lock.v1.ReleaseAllResponseb\x06proto3"

var (
	file_lock_v1_lock_proto_rawDescOnce sync.Once
	file_lock_v1_lock_proto_rawDescData []byte
)

func file_lock_v1_lock_proto_rawDescGZIP() []byte {
	file_lock_v1_lock_proto_rawDescOnce.Do(func() {
		file_lock_v1_lock_proto_rawDescData = protoimpl.X.CompressGZIP(unsafe.Slice(unsafe.StringData(file_lock_v1_lock_proto_rawDesc), len(file_lock_v1_lock_proto_rawDesc)))
	})
	return file_lock_v1_lock_proto_rawDescData
}

var file_lock_v1_lock_proto_enumTypes = make([]protoimpl.EnumInfo, 2)
var file_lock_v1_lock_proto_msgTypes = make([]protoimpl.MessageInfo, 23)
var file_lock_v1_lock_proto_goTypes = []any{
	(HoldMode)(0),                 // 0: lock.v1.HoldMode
	(ObserveEvent)(0),             // 1: lock.v1.ObserveEvent
	(*OpenSessionRequest)(nil),    // 2: lock.v1.OpenSessionRequest
	(*OpenSessionResponse)(nil),   // 3: lock.v1.OpenSessionResponse
	(*KeepAliveRequest)(nil),      // 4: lock.v1.KeepAliveRequest
	(*KeepAliveResponse)(nil),     // 5: lock.v1.KeepAliveResponse
	(*CloseSessionRequest)(nil),   // 6: lock.v1.CloseSessionRequest
	(*CloseSessionResponse)(nil),  // 7: lock.v1.CloseSessionResponse
	(*AcquireRequest)(nil),        // 8: lock.v1.AcquireRequest
	(*TokenParts)(nil),            // 9: lock.v1.TokenParts
	(*AcquireResponse)(nil),       // 10: lock.v1.AcquireResponse
	(*ReleaseRequest)(nil),        // 11: lock.v1.ReleaseRequest
	(*ReleaseResponse)(nil),       // 12: lock.v1.ReleaseResponse
	(*ValidateTokenRequest)(nil),  // 13: lock.v1.ValidateTokenRequest
	(*ValidateTokenResponse)(nil), // 14: lock.v1.ValidateTokenResponse
	(*HoldRequest)(nil),           // 15: lock.v1.HoldRequest
	(*HoldResponse)(nil),          // 16: lock.v1.HoldResponse
	(*InspectRequest)(nil),        // 17: lock.v1.InspectRequest
	(*InspectResponse)(nil),       // 18: lock.v1.InspectResponse
	(*ObserveRequest)(nil),        // 19: lock.v1.ObserveRequest
	(*ObserveResponse)(nil),       // 20: lock.v1.ObserveResponse
	(*AcquireAllRequest)(nil),     // 21: lock.v1.AcquireAllRequest
	(*AcquireAllResponse)(nil),    // 22: lock.v1.AcquireAllResponse
	(*ReleaseAllRequest)(nil),     // 23: lock.v1.ReleaseAllRequest
	(*ReleaseAllResponse)(nil),    // 24: lock.v1.ReleaseAllResponse
}
var file_lock_v1_lock_proto_depIdxs = []int32{
	0,  // 0: lock.v1.AcquireRequest.mode:type_name -> lock.v1.HoldMode
	9,  // 1: lock.v1.AcquireResponse.parts:type_name -> lock.v1.TokenParts
	0,  // 2: lock.v1.ReleaseRequest.mode:type_name -> lock.v1.HoldMode
	8,  // 3: lock.v1.HoldRequest.acquire:type_name -> lock.v1.AcquireRequest
	11, // 4: lock.v1.HoldRequest.release:type_name -> lock.v1.ReleaseRequest
	10, // 5: lock.v1.HoldResponse.acquired:type_name -> lock.v1.AcquireResponse
	12, // 6: lock.v1.HoldResponse.released:type_name -> lock.v1.ReleaseResponse
	1,  // 7: lock.v1.ObserveResponse.event:type_name -> lock.v1.ObserveEvent
	9,  // 8: lock.v1.AcquireAllResponse.parts:type_name -> lock.v1.TokenParts
	2,  // 9: lock.v1.Lock.OpenSession:input_type -> lock.v1.OpenSessionRequest
	4,  // 10: lock.v1.Lock.KeepAlive:input_type -> lock.v1.KeepAliveRequest
	6,  // 11: lock.v1.Lock.CloseSession:input_type -> lock.v1.CloseSessionRequest
	8,  // 12: lock.v1.Lock.Acquire:input_type -> lock.v1.AcquireRequest
	11, // 13: lock.v1.Lock.Release:input_type -> lock.v1.ReleaseRequest
	13, // 14: lock.v1.Lock.ValidateToken:input_type -> lock.v1.ValidateTokenRequest
	17, // 15: lock.v1.Lock.Inspect:input_type -> lock.v1.InspectRequest
	15, // 16: lock.v1.Lock.Hold:input_type -> lock.v1.HoldRequest
	19, // 17: lock.v1.Lock.Observe:input_type -> lock.v1.ObserveRequest
	21, // 18: lock.v1.Lock.AcquireAll:input_type -> lock.v1.AcquireAllRequest
	23, // 19: lock.v1.Lock.ReleaseAll:input_type -> lock.v1.ReleaseAllRequest
	3,  // 20: lock.v1.Lock.OpenSession:output_type -> lock.v1.OpenSessionResponse
	5,  // 21: lock.v1.Lock.KeepAlive:output_type -> lock.v1.KeepAliveResponse
	7,  // 22: lock.v1.Lock.CloseSession:output_type -> lock.v1.CloseSessionResponse
	10, // 23: lock.v1.Lock.Acquire:output_type -> lock.v1.AcquireResponse
	12, // 24: lock.v1.Lock.Release:output_type -> lock.v1.ReleaseResponse
	14, // 25: lock.v1.Lock.ValidateToken:output_type -> lock.v1.ValidateTokenResponse
	18, // 26: lock.v1.Lock.Inspect:output_type -> lock.v1.InspectResponse
	16, // 27: lock.v1.Lock.Hold:output_type -> lock.v1.HoldResponse
	20, // 28: lock.v1.Lock.Observe:output_type -> lock.v1.ObserveResponse
	22, // 29: lock.v1.Lock.AcquireAll:output_type -> lock.v1.AcquireAllResponse
	24, // 30: lock.v1.Lock.ReleaseAll:output_type -> lock.v1.ReleaseAllResponse
	20, // [20:31] is the sub-list for method output_type
	9,  // [9:20] is the sub-list for method input_type
	9,  // [9:9] is the sub-list for extension type_name
	9,  // [9:9] is the sub-list for extension extendee
	0,  // [0:9] is the sub-list for field type_name
}

func init() { file_lock_v1_lock_proto_init() }
func file_lock_v1_lock_proto_init() {
	if File_lock_v1_lock_proto != nil {
		return
	}
	file_lock_v1_lock_proto_msgTypes[13].OneofWrappers = []any{
		(*HoldRequest_Acquire)(nil),
		(*HoldRequest_Release)(nil),
	}
	file_lock_v1_lock_proto_msgTypes[14].OneofWrappers = []any{
		(*HoldResponse_Acquired)(nil),
		(*HoldResponse_Released)(nil),
	}
	type x struct{}
	out := protoimpl.TypeBuilder{
		File: protoimpl.DescBuilder{
			GoPackagePath: reflect.TypeOf(x{}).PkgPath(),
			RawDescriptor: unsafe.Slice(unsafe.StringData(file_lock_v1_lock_proto_rawDesc), len(file_lock_v1_lock_proto_rawDesc)),
			NumEnums:      2,
			NumMessages:   23,
			NumExtensions: 0,
			NumServices:   1,
		},
		GoTypes:           file_lock_v1_lock_proto_goTypes,
		DependencyIndexes: file_lock_v1_lock_proto_depIdxs,
		EnumInfos:         file_lock_v1_lock_proto_enumTypes,
		MessageInfos:      file_lock_v1_lock_proto_msgTypes,
	}.Build()
	File_lock_v1_lock_proto = out.File
	file_lock_v1_lock_proto_goTypes = nil
	file_lock_v1_lock_proto_depIdxs = nil
}
