package lock

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/fenced-lock/fenced-lock/clients/go/lockv1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fakeLock is an in-process lock.v1 server for the unit tests: sessions, exclusive grants
// with increasing tokens, HELD for another session, the Hold stream, and switches that
// make renewals fail or the next call refuse with a chosen reason. Keys under "sem/" are
// a semaphore of fakePermits permits (mode PERMIT only, one permit per session, HELD at
// once when all are held); PERMIT elsewhere is MALFORMED_REQUEST.
type fakeLock struct {
	lockv1.UnimplementedLockServer
	ttl uint32

	mu          sync.Mutex
	nextSession int64
	token       uint64
	holders     map[string]int64
	calls       map[string]int
	instances   []string
	keyHeaders  []string
	dropRenewal bool
	refuse      *status.Status

	// Observe: the requests seen, and per call (0, 1, ...) the answers to send before the
	// stream ends cleanly, or the refusal to end it with.
	observeReqs    []*lockv1.ObserveRequest
	observeScript  func(call int, r *lockv1.ObserveRequest) ([]*lockv1.ObserveResponse, error)
	acquireAllReqs []*lockv1.AcquireAllRequest
	releaseAllReqs []*lockv1.ReleaseAllRequest
	modes          []lockv1.HoldMode
	waits          []uint64 // wait_millis of each unary Acquire

	// Semaphores: per key, the grant of each permit held.
	permits map[string]map[uint32]permitGrant
	// lateGrant: the next PERMIT Acquire is granted, then answered only when its caller
	// has gone (its answer is lost), as a grant racing the caller's cancellation.
	lateGrant bool
	// onPermit, when set, runs (without the fake's lock) before each PERMIT Acquire answers.
	onPermit func()
}

// fakePermits is the fake's semaphores' N.
const fakePermits = 3

type permitGrant struct {
	session int64
	token   uint64
}

func isSemaphore(key string) bool { return strings.HasPrefix(key, "sem/") }

var malformed = refusal(codes.InvalidArgument, "MALFORMED_REQUEST", "the mode does not fit the key's class", nil)

// permitLocked hands r's session a permit of r.Key: the one it holds, else a free one.
func (f *fakeLock) permitLocked(r *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	if f.refuse != nil {
		s := f.refuse
		f.refuse = nil
		return nil, s.Err()
	}
	if !isSemaphore(r.Key) {
		return nil, malformed.Err()
	}
	held := f.permits[r.Key]
	if held == nil {
		held = map[uint32]permitGrant{}
		f.permits[r.Key] = held
	}
	for i, g := range held {
		if g.session == r.SessionId {
			return &lockv1.AcquireResponse{Token: g.token, TtlSeconds: f.ttl, ClassName: "fake", Permit: i}, nil
		}
	}
	for i := range uint32(fakePermits) {
		if _, taken := held[i]; !taken {
			f.token++
			held[i] = permitGrant{r.SessionId, f.token}
			return &lockv1.AcquireResponse{Token: f.token, TtlSeconds: f.ttl, ClassName: "fake", Permit: i}, nil
		}
	}
	return nil, refusal(codes.Aborted, "HELD", "every permit is held", nil).Err()
}

// permitHolders is how many permits of key are held.
func (f *fakeLock) permitHolders(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.permits[key])
}

func refusal(code codes.Code, reason, msg string, md map[string]string) *status.Status {
	s, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: md})
	if err != nil {
		panic(err)
	}
	return s
}

func (f *fakeLock) count(method string, ctx context.Context) {
	f.calls[method]++
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		f.keyHeaders = append(f.keyHeaders, md.Get(keyHeader)...)
	}
}

func (f *fakeLock) OpenSession(ctx context.Context, r *lockv1.OpenSessionRequest) (*lockv1.OpenSessionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("OpenSession", ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	f.instances = append(f.instances, md.Get(instanceHeader)...)
	f.nextSession++
	return &lockv1.OpenSessionResponse{SessionId: f.nextSession, TtlSeconds: f.ttl, ClassName: "fake"}, nil
}

func (f *fakeLock) KeepAlive(st lockv1.Lock_KeepAliveServer) error {
	for {
		r, err := st.Recv()
		if err != nil {
			return nil
		}
		f.mu.Lock()
		f.calls["KeepAlive"]++
		drop := f.dropRenewal
		f.mu.Unlock()
		if drop {
			continue // never answered: the client's renewal times out
		}
		if err := st.Send(&lockv1.KeepAliveResponse{SessionId: r.SessionId, TtlSeconds: int64(f.ttl)}); err != nil {
			return nil
		}
	}
}

func (f *fakeLock) grantLocked(r *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	if f.refuse != nil {
		s := f.refuse
		f.refuse = nil
		return nil, s.Err()
	}
	if isSemaphore(r.Key) {
		return nil, malformed.Err()
	}
	if h, ok := f.holders[r.Key]; ok && h != r.SessionId {
		return nil, refusal(codes.Aborted, "HELD", "held by another session", nil).Err()
	}
	f.token++
	f.holders[r.Key] = r.SessionId
	return &lockv1.AcquireResponse{Token: f.token, TtlSeconds: f.ttl, ClassName: "fake"}, nil
}

func (f *fakeLock) Acquire(ctx context.Context, r *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("Acquire", ctx)
	f.modes = append(f.modes, r.GetMode())
	f.waits = append(f.waits, r.GetWaitMillis())
	if r.GetMode() == lockv1.HoldMode_HOLD_MODE_PERMIT {
		a, err := f.permitLocked(r)
		if hook := f.onPermit; hook != nil {
			f.mu.Unlock()
			hook()
			f.mu.Lock()
		}
		if err == nil && f.lateGrant {
			f.lateGrant = false
			f.mu.Unlock()
			<-ctx.Done()
			f.mu.Lock()
		}
		return a, err
	}
	if isSemaphore(r.Key) {
		return nil, malformed.Err()
	}
	if r.GetMode() == lockv1.HoldMode_HOLD_MODE_SHARED {
		f.token++
		return &lockv1.AcquireResponse{Token: f.token, TtlSeconds: f.ttl, ClassName: "fake"}, nil
	}
	return f.grantLocked(r)
}

func (f *fakeLock) Release(ctx context.Context, r *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("Release", ctx)
	f.modes = append(f.modes, r.GetMode())
	if r.GetMode() == lockv1.HoldMode_HOLD_MODE_SHARED {
		return &lockv1.ReleaseResponse{}, nil
	}
	if r.GetMode() == lockv1.HoldMode_HOLD_MODE_PERMIT {
		for i, g := range f.permits[r.Key] {
			if g.token == r.Token && g.session == r.SessionId {
				delete(f.permits[r.Key], i)
				return &lockv1.ReleaseResponse{}, nil
			}
		}
		return nil, refusal(codes.FailedPrecondition, "STALE_TOKEN", "no permit of this key has that token", nil).Err()
	}
	if f.holders[r.Key] != r.SessionId {
		return nil, refusal(codes.FailedPrecondition, "STALE_TOKEN", "token does not name the current grant of this key", nil).Err()
	}
	delete(f.holders, r.Key)
	return &lockv1.ReleaseResponse{}, nil
}

func (f *fakeLock) Hold(st lockv1.Lock_HoldServer) error {
	first, err := st.Recv()
	if err != nil {
		return nil
	}
	f.mu.Lock()
	f.count("Hold", st.Context())
	r, err := f.grantLocked(first.GetAcquire())
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if err := st.Send(&lockv1.HoldResponse{Step: &lockv1.HoldResponse_Acquired{Acquired: r}}); err != nil {
		return nil
	}
	rel, err := st.Recv()
	if err != nil {
		return nil
	}
	f.mu.Lock()
	f.calls["HoldRelease"]++
	delete(f.holders, rel.GetRelease().GetKey())
	f.mu.Unlock()
	return st.Send(&lockv1.HoldResponse{Step: &lockv1.HoldResponse_Released{Released: &lockv1.ReleaseResponse{}}})
}

func (f *fakeLock) CloseSession(ctx context.Context, r *lockv1.CloseSessionRequest) (*lockv1.CloseSessionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["CloseSession"]++
	for k, s := range f.holders {
		if s == r.SessionId {
			delete(f.holders, k)
		}
	}
	for _, held := range f.permits {
		for i, g := range held {
			if g.session == r.SessionId {
				delete(held, i)
			}
		}
	}
	return &lockv1.CloseSessionResponse{}, nil
}

func (f *fakeLock) calledN(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// startFake serves a fakeLock on loopback and returns it with its endpoint (the mesh
// sidecar mode: plaintext to loopback).
func startFake(t *testing.T, ttl uint32) (*fakeLock, string) {
	t.Helper()
	f := &fakeLock{ttl: ttl, token: 1 << 48, holders: map[string]int64{}, calls: map[string]int{},
		permits: map[string]map[uint32]permitGrant{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	lockv1.RegisterLockServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return f, "http://" + ln.Addr().String()
}

func dialFake(t *testing.T, endpoint string, opts ...DialOption) *Client {
	t.Helper()
	c, err := Dial(context.Background(), endpoint, append([]DialOption{WithMeshSidecar()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
