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

// Code generated by protoc-gen-go-grpc. DO NOT EDIT.
// versions:
// - protoc-gen-go-grpc v1.6.2
// - protoc             v3.21.12
// source: lock/v1/lock.proto

package lockv1

import (
	context "context"
	grpc "google.golang.org/grpc"
	codes "google.golang.org/grpc/codes"
	status "google.golang.org/grpc/status"
)

// This is a compile-time assertion to ensure that this generated file
// is compatible with the grpc package it is being compiled against.
// Requires gRPC-Go v1.64.0 or later.
const _ = grpc.SupportPackageIsVersion9

const (
	Lock_OpenSession_FullMethodName   = "/lock.v1.Lock/OpenSession"
	Lock_KeepAlive_FullMethodName     = "/lock.v1.Lock/KeepAlive"
	Lock_CloseSession_FullMethodName  = "/lock.v1.Lock/CloseSession"
	Lock_Acquire_FullMethodName       = "/lock.v1.Lock/Acquire"
	Lock_Release_FullMethodName       = "/lock.v1.Lock/Release"
	Lock_ValidateToken_FullMethodName = "/lock.v1.Lock/ValidateToken"
	Lock_Inspect_FullMethodName       = "/lock.v1.Lock/Inspect"
	Lock_Hold_FullMethodName          = "/lock.v1.Lock/Hold"
	Lock_Observe_FullMethodName       = "/lock.v1.Lock/Observe"
	Lock_AcquireAll_FullMethodName    = "/lock.v1.Lock/AcquireAll"
	Lock_ReleaseAll_FullMethodName    = "/lock.v1.Lock/ReleaseAll"
)

// LockClient is the client API for Lock service.
//
// For semantics around ctx use and closing/ending streaming RPCs, please refer to https://pkg.go.dev/google.golang.org/grpc/?tab=doc#ClientConn.NewStream.
//
// The service's name is its wire path, `/lock.v1.Lock/<Method>`, which the edge routes
// and authorises: it keeps the name it was released with (buf's SERVICE_SUFFIX is
// excepted in config/proto/buf.yaml).
type LockClient interface {
	// Opens a session: one etcd lease whose TTL is the TTL of the key's lock class. Callers
	// never choose a TTL; a session serves every key whose class has the same TTL.
	OpenSession(ctx context.Context, in *OpenSessionRequest, opts ...grpc.CallOption) (*OpenSessionResponse, error)
	// Renews a session. One stream per session renews every hold attached to it.
	KeepAlive(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[KeepAliveRequest, KeepAliveResponse], error)
	// Ends a session and releases every hold attached to it in one committed entry.
	CloseSession(ctx context.Context, in *CloseSessionRequest, opts ...grpc.CallOption) (*CloseSessionResponse, error)
	// Grants the key to the session in one etcd transaction and returns the fencing token.
	Acquire(ctx context.Context, in *AcquireRequest, opts ...grpc.CallOption) (*AcquireResponse, error)
	// Deletes the grant only if the token names the current grant of the key.
	Release(ctx context.Context, in *ReleaseRequest, opts ...grpc.CallOption) (*ReleaseResponse, error)
	// For resources that cannot store a fence (ADR-16): is this token the key's current
	// grant? A linearizable read. Not atomic with the resource's write: prefer a fence column.
	ValidateToken(ctx context.Context, in *ValidateTokenRequest, opts ...grpc.CallOption) (*ValidateTokenResponse, error)
	// Who holds the key, since when, under which class, and how many wait. Never a token.
	Inspect(ctx context.Context, in *InspectRequest, opts ...grpc.CallOption) (*InspectResponse, error)
	// One hold of one key as one stream: Acquire, then (on the same stream) its Release.
	// The same two calls as Acquire and Release, for the price of one request at the edge:
	// the edge decides the stream once, on its key, and every message on it must name that
	// key (MALFORMED_REQUEST otherwise). The first message must be `acquire`; its answer is
	// `acquired`, or the stream ends with the refusal Acquire would have returned. Then at
	// most one `release` of that grant, answered `released`, and the stream ends. The hold
	// lives on the session, not on the stream: a stream that ends early (the client
	// half-closes, a proxy's idle timeout, the arbiter restarting) leaves the hold as it
	// was, to be released with Release or ended with the session.
	Hold(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[HoldRequest, HoldResponse], error)
	// The key's holder now, then every change of it, from an etcd watch on the arbiter that
	// owns the key. A hint, never a grant (ADR-15): a change seen is not a hold taken, and
	// by the time it arrives it may be over; take the key with Acquire and write with its
	// token. Authorised at the edge like Inspect. A stream that ends (a proxy's timeout, the
	// arbiter restarting) is resumed by calling again with the last `revision` seen: the
	// changes after it follow, or HISTORY_COMPACTED says they are gone.
	Observe(ctx context.Context, in *ObserveRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[ObserveResponse], error)
	// Grants every key of a set to the session in one etcd transaction, or none of them:
	// its compares cover every key (absent), the epoch record and the session, and its puts
	// hold them all at one revision, so every key's token is the same number. At most 16
	// keys, all of classes with one TTL (the session's), on one store, none of a
	// durable-fairness or shared class (KEY_SET_REFUSED otherwise). The edge authorises every key: one without a grant
	// refuses the whole request, with the denial a single key gets. A set waits without
	// holding anything, so two callers asking for {a,b} and {b,a} cannot deadlock; it
	// takes its keys when all are free at once (docs: coordination/acquire-all.md).
	AcquireAll(ctx context.Context, in *AcquireAllRequest, opts ...grpc.CallOption) (*AcquireAllResponse, error)
	// Releases a set AcquireAll granted: every key still that grant, in one transaction. Keys
	// that already ended alone are skipped and not named in the answer; STALE_TOKEN when
	// none is still that grant.
	ReleaseAll(ctx context.Context, in *ReleaseAllRequest, opts ...grpc.CallOption) (*ReleaseAllResponse, error)
}

type lockClient struct {
	cc grpc.ClientConnInterface
}

func NewLockClient(cc grpc.ClientConnInterface) LockClient {
	return &lockClient{cc}
}

func (c *lockClient) OpenSession(ctx context.Context, in *OpenSessionRequest, opts ...grpc.CallOption) (*OpenSessionResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(OpenSessionResponse)
	err := c.cc.Invoke(ctx, Lock_OpenSession_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *lockClient) KeepAlive(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[KeepAliveRequest, KeepAliveResponse], error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	stream, err := c.cc.NewStream(ctx, &Lock_ServiceDesc.Streams[0], Lock_KeepAlive_FullMethodName, cOpts...)
	if err != nil {
		return nil, err
	}
	x := &grpc.GenericClientStream[KeepAliveRequest, KeepAliveResponse]{ClientStream: stream}
	return x, nil
}

// This type alias is provided for backwards compatibility with existing code that references the prior non-generic stream type by name.
type Lock_KeepAliveClient = grpc.BidiStreamingClient[KeepAliveRequest, KeepAliveResponse]

func (c *lockClient) CloseSession(ctx context.Context, in *CloseSessionRequest, opts ...grpc.CallOption) (*CloseSessionResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(CloseSessionResponse)
	err := c.cc.Invoke(ctx, Lock_CloseSession_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *lockClient) Acquire(ctx context.Context, in *AcquireRequest, opts ...grpc.CallOption) (*AcquireResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(AcquireResponse)
	err := c.cc.Invoke(ctx, Lock_Acquire_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *lockClient) Release(ctx context.Context, in *ReleaseRequest, opts ...grpc.CallOption) (*ReleaseResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(ReleaseResponse)
	err := c.cc.Invoke(ctx, Lock_Release_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *lockClient) ValidateToken(ctx context.Context, in *ValidateTokenRequest, opts ...grpc.CallOption) (*ValidateTokenResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(ValidateTokenResponse)
	err := c.cc.Invoke(ctx, Lock_ValidateToken_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *lockClient) Inspect(ctx context.Context, in *InspectRequest, opts ...grpc.CallOption) (*InspectResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(InspectResponse)
	err := c.cc.Invoke(ctx, Lock_Inspect_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *lockClient) Hold(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[HoldRequest, HoldResponse], error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	stream, err := c.cc.NewStream(ctx, &Lock_ServiceDesc.Streams[1], Lock_Hold_FullMethodName, cOpts...)
	if err != nil {
		return nil, err
	}
	x := &grpc.GenericClientStream[HoldRequest, HoldResponse]{ClientStream: stream}
	return x, nil
}

// This type alias is provided for backwards compatibility with existing code that references the prior non-generic stream type by name.
type Lock_HoldClient = grpc.BidiStreamingClient[HoldRequest, HoldResponse]

func (c *lockClient) Observe(ctx context.Context, in *ObserveRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[ObserveResponse], error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	stream, err := c.cc.NewStream(ctx, &Lock_ServiceDesc.Streams[2], Lock_Observe_FullMethodName, cOpts...)
	if err != nil {
		return nil, err
	}
	x := &grpc.GenericClientStream[ObserveRequest, ObserveResponse]{ClientStream: stream}
	if err := x.ClientStream.SendMsg(in); err != nil {
		return nil, err
	}
	if err := x.ClientStream.CloseSend(); err != nil {
		return nil, err
	}
	return x, nil
}

// This type alias is provided for backwards compatibility with existing code that references the prior non-generic stream type by name.
type Lock_ObserveClient = grpc.ServerStreamingClient[ObserveResponse]

func (c *lockClient) AcquireAll(ctx context.Context, in *AcquireAllRequest, opts ...grpc.CallOption) (*AcquireAllResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(AcquireAllResponse)
	err := c.cc.Invoke(ctx, Lock_AcquireAll_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *lockClient) ReleaseAll(ctx context.Context, in *ReleaseAllRequest, opts ...grpc.CallOption) (*ReleaseAllResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(ReleaseAllResponse)
	err := c.cc.Invoke(ctx, Lock_ReleaseAll_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LockServer is the server API for Lock service.
// All implementations must embed UnimplementedLockServer
// for forward compatibility.
//
// The service's name is its wire path, `/lock.v1.Lock/<Method>`, which the edge routes
// and authorises: it keeps the name it was released with (buf's SERVICE_SUFFIX is
// excepted in config/proto/buf.yaml).
type LockServer interface {
	// Opens a session: one etcd lease whose TTL is the TTL of the key's lock class. Callers
	// never choose a TTL; a session serves every key whose class has the same TTL.
	OpenSession(context.Context, *OpenSessionRequest) (*OpenSessionResponse, error)
	// Renews a session. One stream per session renews every hold attached to it.
	KeepAlive(grpc.BidiStreamingServer[KeepAliveRequest, KeepAliveResponse]) error
	// Ends a session and releases every hold attached to it in one committed entry.
	CloseSession(context.Context, *CloseSessionRequest) (*CloseSessionResponse, error)
	// Grants the key to the session in one etcd transaction and returns the fencing token.
	Acquire(context.Context, *AcquireRequest) (*AcquireResponse, error)
	// Deletes the grant only if the token names the current grant of the key.
	Release(context.Context, *ReleaseRequest) (*ReleaseResponse, error)
	// For resources that cannot store a fence (ADR-16): is this token the key's current
	// grant? A linearizable read. Not atomic with the resource's write: prefer a fence column.
	ValidateToken(context.Context, *ValidateTokenRequest) (*ValidateTokenResponse, error)
	// Who holds the key, since when, under which class, and how many wait. Never a token.
	Inspect(context.Context, *InspectRequest) (*InspectResponse, error)
	// One hold of one key as one stream: Acquire, then (on the same stream) its Release.
	// The same two calls as Acquire and Release, for the price of one request at the edge:
	// the edge decides the stream once, on its key, and every message on it must name that
	// key (MALFORMED_REQUEST otherwise). The first message must be `acquire`; its answer is
	// `acquired`, or the stream ends with the refusal Acquire would have returned. Then at
	// most one `release` of that grant, answered `released`, and the stream ends. The hold
	// lives on the session, not on the stream: a stream that ends early (the client
	// half-closes, a proxy's idle timeout, the arbiter restarting) leaves the hold as it
	// was, to be released with Release or ended with the session.
	Hold(grpc.BidiStreamingServer[HoldRequest, HoldResponse]) error
	// The key's holder now, then every change of it, from an etcd watch on the arbiter that
	// owns the key. A hint, never a grant (ADR-15): a change seen is not a hold taken, and
	// by the time it arrives it may be over; take the key with Acquire and write with its
	// token. Authorised at the edge like Inspect. A stream that ends (a proxy's timeout, the
	// arbiter restarting) is resumed by calling again with the last `revision` seen: the
	// changes after it follow, or HISTORY_COMPACTED says they are gone.
	Observe(*ObserveRequest, grpc.ServerStreamingServer[ObserveResponse]) error
	// Grants every key of a set to the session in one etcd transaction, or none of them:
	// its compares cover every key (absent), the epoch record and the session, and its puts
	// hold them all at one revision, so every key's token is the same number. At most 16
	// keys, all of classes with one TTL (the session's), on one store, none of a
	// durable-fairness or shared class (KEY_SET_REFUSED otherwise). The edge authorises every key: one without a grant
	// refuses the whole request, with the denial a single key gets. A set waits without
	// holding anything, so two callers asking for {a,b} and {b,a} cannot deadlock; it
	// takes its keys when all are free at once (docs: coordination/acquire-all.md).
	AcquireAll(context.Context, *AcquireAllRequest) (*AcquireAllResponse, error)
	// Releases a set AcquireAll granted: every key still that grant, in one transaction. Keys
	// that already ended alone are skipped and not named in the answer; STALE_TOKEN when
	// none is still that grant.
	ReleaseAll(context.Context, *ReleaseAllRequest) (*ReleaseAllResponse, error)
	mustEmbedUnimplementedLockServer()
}

// UnimplementedLockServer must be embedded to have
// forward compatible implementations.
//
// NOTE: this should be embedded by value instead of pointer to avoid a nil
// pointer dereference when methods are called.
type UnimplementedLockServer struct{}

func (UnimplementedLockServer) OpenSession(context.Context, *OpenSessionRequest) (*OpenSessionResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method OpenSession not implemented")
}
func (UnimplementedLockServer) KeepAlive(grpc.BidiStreamingServer[KeepAliveRequest, KeepAliveResponse]) error {
	return status.Error(codes.Unimplemented, "method KeepAlive not implemented")
}
func (UnimplementedLockServer) CloseSession(context.Context, *CloseSessionRequest) (*CloseSessionResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method CloseSession not implemented")
}
func (UnimplementedLockServer) Acquire(context.Context, *AcquireRequest) (*AcquireResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method Acquire not implemented")
}
func (UnimplementedLockServer) Release(context.Context, *ReleaseRequest) (*ReleaseResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method Release not implemented")
}
func (UnimplementedLockServer) ValidateToken(context.Context, *ValidateTokenRequest) (*ValidateTokenResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method ValidateToken not implemented")
}
func (UnimplementedLockServer) Inspect(context.Context, *InspectRequest) (*InspectResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method Inspect not implemented")
}
func (UnimplementedLockServer) Hold(grpc.BidiStreamingServer[HoldRequest, HoldResponse]) error {
	return status.Error(codes.Unimplemented, "method Hold not implemented")
}
func (UnimplementedLockServer) Observe(*ObserveRequest, grpc.ServerStreamingServer[ObserveResponse]) error {
	return status.Error(codes.Unimplemented, "method Observe not implemented")
}
func (UnimplementedLockServer) AcquireAll(context.Context, *AcquireAllRequest) (*AcquireAllResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method AcquireAll not implemented")
}
func (UnimplementedLockServer) ReleaseAll(context.Context, *ReleaseAllRequest) (*ReleaseAllResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method ReleaseAll not implemented")
}
func (UnimplementedLockServer) mustEmbedUnimplementedLockServer() {}
func (UnimplementedLockServer) testEmbeddedByValue()              {}

// UnsafeLockServer may be embedded to opt out of forward compatibility for this service.
// Use of this interface is not recommended, as added methods to LockServer will
// result in compilation errors.
type UnsafeLockServer interface {
	mustEmbedUnimplementedLockServer()
}

func RegisterLockServer(s grpc.ServiceRegistrar, srv LockServer) {
	// If the following call panics, it indicates UnimplementedLockServer was
	// embedded by pointer and is nil.  This will cause panics if an
	// unimplemented method is ever invoked, so we test this at initialization
	// time to prevent it from happening at runtime later due to I/O.
	if t, ok := srv.(interface{ testEmbeddedByValue() }); ok {
		t.testEmbeddedByValue()
	}
	s.RegisterService(&Lock_ServiceDesc, srv)
}

func _Lock_OpenSession_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(OpenSessionRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(LockServer).OpenSession(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: Lock_OpenSession_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(LockServer).OpenSession(ctx, req.(*OpenSessionRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _Lock_KeepAlive_Handler(srv interface{}, stream grpc.ServerStream) error {
	return srv.(LockServer).KeepAlive(&grpc.GenericServerStream[KeepAliveRequest, KeepAliveResponse]{ServerStream: stream})
}

// This type alias is provided for backwards compatibility with existing code that references the prior non-generic stream type by name.
type Lock_KeepAliveServer = grpc.BidiStreamingServer[KeepAliveRequest, KeepAliveResponse]

func _Lock_CloseSession_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(CloseSessionRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(LockServer).CloseSession(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: Lock_CloseSession_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(LockServer).CloseSession(ctx, req.(*CloseSessionRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _Lock_Acquire_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(AcquireRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(LockServer).Acquire(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: Lock_Acquire_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(LockServer).Acquire(ctx, req.(*AcquireRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _Lock_Release_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(ReleaseRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(LockServer).Release(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: Lock_Release_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(LockServer).Release(ctx, req.(*ReleaseRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _Lock_ValidateToken_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(ValidateTokenRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(LockServer).ValidateToken(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: Lock_ValidateToken_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(LockServer).ValidateToken(ctx, req.(*ValidateTokenRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _Lock_Inspect_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(InspectRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(LockServer).Inspect(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: Lock_Inspect_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(LockServer).Inspect(ctx, req.(*InspectRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _Lock_Hold_Handler(srv interface{}, stream grpc.ServerStream) error {
	return srv.(LockServer).Hold(&grpc.GenericServerStream[HoldRequest, HoldResponse]{ServerStream: stream})
}

// This type alias is provided for backwards compatibility with existing code that references the prior non-generic stream type by name.
type Lock_HoldServer = grpc.BidiStreamingServer[HoldRequest, HoldResponse]

func _Lock_Observe_Handler(srv interface{}, stream grpc.ServerStream) error {
	m := new(ObserveRequest)
	if err := stream.RecvMsg(m); err != nil {
		return err
	}
	return srv.(LockServer).Observe(m, &grpc.GenericServerStream[ObserveRequest, ObserveResponse]{ServerStream: stream})
}

// This type alias is provided for backwards compatibility with existing code that references the prior non-generic stream type by name.
type Lock_ObserveServer = grpc.ServerStreamingServer[ObserveResponse]

func _Lock_AcquireAll_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(AcquireAllRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(LockServer).AcquireAll(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: Lock_AcquireAll_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(LockServer).AcquireAll(ctx, req.(*AcquireAllRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _Lock_ReleaseAll_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(ReleaseAllRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(LockServer).ReleaseAll(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: Lock_ReleaseAll_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(LockServer).ReleaseAll(ctx, req.(*ReleaseAllRequest))
	}
	return interceptor(ctx, in, info, handler)
}

// Lock_ServiceDesc is the grpc.ServiceDesc for Lock service.
// It's only intended for direct use with grpc.RegisterService,
// and not to be introspected or modified (even as a copy)
var Lock_ServiceDesc = grpc.ServiceDesc{
	ServiceName: "lock.v1.Lock",
	HandlerType: (*LockServer)(nil),
	Methods: []grpc.MethodDesc{
		{
			MethodName: "OpenSession",
			Handler:    _Lock_OpenSession_Handler,
		},
		{
			MethodName: "CloseSession",
			Handler:    _Lock_CloseSession_Handler,
		},
		{
			MethodName: "Acquire",
			Handler:    _Lock_Acquire_Handler,
		},
		{
			MethodName: "Release",
			Handler:    _Lock_Release_Handler,
		},
		{
			MethodName: "ValidateToken",
			Handler:    _Lock_ValidateToken_Handler,
		},
		{
			MethodName: "Inspect",
			Handler:    _Lock_Inspect_Handler,
		},
		{
			MethodName: "AcquireAll",
			Handler:    _Lock_AcquireAll_Handler,
		},
		{
			MethodName: "ReleaseAll",
			Handler:    _Lock_ReleaseAll_Handler,
		},
	},
	Streams: []grpc.StreamDesc{
		{
			StreamName:    "KeepAlive",
			Handler:       _Lock_KeepAlive_Handler,
			ServerStreams: true,
			ClientStreams: true,
		},
		{
			StreamName:    "Hold",
			Handler:       _Lock_Hold_Handler,
			ServerStreams: true,
			ClientStreams: true,
		},
		{
			StreamName:    "Observe",
			Handler:       _Lock_Observe_Handler,
			ServerStreams: true,
		},
	},
	Metadata: "lock/v1/lock.proto",
}
