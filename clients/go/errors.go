package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of every refusal of the service.
const ErrorDomain = "lock.v1"

// Sentinel errors, one per refusal reason of lock.v1 (config/proto/lock/v1/lock.proto,
// docs/src/reference/errors.md), for errors.Is. Every error the client returns for a
// refusal is an *Error wrapping one of them.
var (
	// ErrUnauthenticated: no or an unusable client certificate (UNAUTHENTICATED).
	ErrUnauthenticated = errors.New("not authenticated")
	// ErrNotGranted: no grant covers the key for this identity (NOT_GRANTED).
	ErrNotGranted = errors.New("no grant covers this key for this identity")
	// ErrRegionRedirect: the key's namespace is homed in another region; metadata
	// `region` names it (REGION_REDIRECT).
	ErrRegionRedirect = errors.New("the key's namespace is homed in another region")
	// ErrRateLimited: retry after metadata `retry_after_ms` (RATE_LIMITED).
	ErrRateLimited = errors.New("rate limited")
	// ErrInvalidKey: key syntax, or no lock class covers the key (INVALID_KEY).
	ErrInvalidKey = errors.New("invalid key")
	// ErrMalformedRequest: not a decodable lock.v1 message, a `lock-key` disagreeing
	// with the body, or an invalid `lock-instance` (MALFORMED_REQUEST).
	ErrMalformedRequest = errors.New("malformed request")
	// ErrHeld: held by another session, at once or still when the wait ended (HELD).
	ErrHeld = errors.New("held by another session")
	// ErrLeakedHold: this identity and instance hold the key under another session
	// (LEAKED_HOLD, ADR-13). A sibling instance's hold is waited for instead.
	ErrLeakedHold = errors.New("held by this instance under another session (a leaked hold?)")
	// ErrStaleToken: the token is not the key's current grant (STALE_TOKEN).
	ErrStaleToken = errors.New("the token is not the key's current grant")
	// ErrSessionExpired: the session's lease is gone (SESSION_EXPIRED).
	ErrSessionExpired = errors.New("the session expired")
	// ErrWrongSessionTTL: the key's class needs a session of another TTL; metadata
	// `class`, `ttl_seconds` (WRONG_SESSION_TTL). The client handles it itself.
	ErrWrongSessionTTL = errors.New("the key's class needs a session with another TTL")
	// ErrWrongSessionPlace: the key lives on another etcd cluster than the session;
	// metadata `cluster` (WRONG_SESSION_PLACE). The client handles it itself.
	ErrWrongSessionPlace = errors.New("the key lives on another cluster than the session")
	// ErrSealed: the store is sealed (a restore without epoch advance) (SEALED).
	ErrSealed = errors.New("the store is sealed")
	// ErrNoQuorum: the store has no quorum; the transaction may have committed, and a
	// retried acquire on the same session gets its grant back (NO_QUORUM).
	ErrNoQuorum = errors.New("the store has no quorum")
	// ErrStoreFull: etcd's NOSPACE alarm: no new grants or sessions (STORE_FULL).
	ErrStoreFull = errors.New("the store is out of space")
	// ErrDraining: the arbiter is restarting; nothing was done (DRAINING). Also matches
	// ErrUnavailable.
	ErrDraining = errors.New("the arbiter is draining for a restart")
	// ErrMoving: the key's range is moving between shards; nothing was done (MOVING).
	ErrMoving = errors.New("the key's range is moving between shards")
	// ErrStreamFull: a stream limit was reached (STREAM_FULL).
	ErrStreamFull = errors.New("stream limit reached")
	// ErrHistoryCompacted: an Observe cannot resume; metadata `compact_revision`
	// (HISTORY_COMPACTED).
	ErrHistoryCompacted = errors.New("the store compacted past the last revision seen")
	// ErrKeySetRefused: an AcquireAll set cannot be granted as one; metadata `why`
	// (KEY_SET_REFUSED).
	ErrKeySetRefused = errors.New("the key set cannot be granted as one")
	// ErrUnknownMethod: a method the edge cannot authorise (UNKNOWN_METHOD).
	ErrUnknownMethod = errors.New("a method the edge cannot authorise")
	// ErrInternal: the service failed internally (INTERNAL).
	ErrInternal = errors.New("lock service internal error")

	// ErrUnavailable: the service could not be reached or the call broke (no refusal
	// reason: a transport failure, or DRAINING). Retried inside the caller's context.
	ErrUnavailable = errors.New("cannot reach the lock service")
	// ErrFenced: the hold was fenced (its session could not be renewed in time): work
	// done under it may not have been exclusive.
	ErrFenced = errors.New("the hold was fenced: its session could not be renewed in time")
	// ErrOnFenceRequired: Acquire was called without WithOnFence (ADR-12).
	ErrOnFenceRequired = errors.New("WithOnFence is required: the function that stops your work if the hold is lost")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("the client is closed")
)

// byReason maps every ErrorInfo reason of lock.v1 to its sentinel.
var byReason = map[string]error{
	"UNAUTHENTICATED":     ErrUnauthenticated,
	"NOT_GRANTED":         ErrNotGranted,
	"REGION_REDIRECT":     ErrRegionRedirect,
	"RATE_LIMITED":        ErrRateLimited,
	"INVALID_KEY":         ErrInvalidKey,
	"MALFORMED_REQUEST":   ErrMalformedRequest,
	"HELD":                ErrHeld,
	"LEAKED_HOLD":         ErrLeakedHold,
	"STALE_TOKEN":         ErrStaleToken,
	"SESSION_EXPIRED":     ErrSessionExpired,
	"WRONG_SESSION_TTL":   ErrWrongSessionTTL,
	"WRONG_SESSION_PLACE": ErrWrongSessionPlace,
	"SEALED":              ErrSealed,
	"NO_QUORUM":           ErrNoQuorum,
	"STORE_FULL":          ErrStoreFull,
	"DRAINING":            ErrDraining,
	"MOVING":              ErrMoving,
	"STREAM_FULL":         ErrStreamFull,
	"HISTORY_COMPACTED":   ErrHistoryCompacted,
	"KEY_SET_REFUSED":     ErrKeySetRefused,
	"UNKNOWN_METHOD":      ErrUnknownMethod,
	"INTERNAL":            ErrInternal,
}

// SentinelOf returns the sentinel error for a lock.v1 refusal reason, or nil for a
// reason this client does not know.
func SentinelOf(reason string) error { return byReason[reason] }

// ReasonOf is the lock.v1 reason err stands for: its *Error's Reason, or, for an *Error
// the client raised itself without asking the service, its sentinel's reason
// (MALFORMED_REQUEST for a key set of no keys, UNAUTHENTICATED for unreadable SVID files,
// SESSION_EXPIRED for a lease the keepalive found gone). Empty when err stands for none:
// ErrUnavailable (a transport failure), ErrFenced, ErrClosed, ErrOnFenceRequired, a
// context's error.
func ReasonOf(err error) string {
	var e *Error
	if !errors.As(err, &e) {
		return ""
	}
	if e.Reason != "" {
		return e.Reason
	}
	for reason, sentinel := range byReason {
		if e.kind == sentinel {
			return reason
		}
	}
	return ""
}

// Error is a refusal or failure of the lock service: use errors.As to read its reason
// and metadata, errors.Is with a sentinel (ErrHeld, ...) to test for one. Its message
// never carries a token.
type Error struct {
	// Reason is the ErrorInfo reason ("HELD", "NOT_GRANTED", ...): the contract. Empty
	// when the status carried none (a transport failure, a status outside the contract).
	Reason string
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the status message, decoded (grpc-message is percent-encoded on the
	// wire; grpc-go decodes it).
	Message string
	// Metadata is the ErrorInfo metadata (region, retry_after_ms, class, ttl_seconds,
	// cluster, why, compact_revision, limit), never nil.
	Metadata map[string]string
	kind     error
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("lock: ")
	if e.kind != nil {
		b.WriteString(e.kind.Error())
	} else {
		b.WriteString("lock service error ")
		b.WriteString(e.Code.String())
	}
	if e.Reason != "" {
		b.WriteString(" (")
		b.WriteString(e.Reason)
		b.WriteString(")")
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Unwrap returns the sentinels this error matches: its reason's (and ErrUnavailable for
// DRAINING).
func (e *Error) Unwrap() []error {
	switch {
	case e.kind == nil:
		return nil
	case e.kind == ErrDraining:
		return []error{ErrDraining, ErrUnavailable}
	default:
		return []error{e.kind}
	}
}

// RetryAfter is how long a RATE_LIMITED refusal asks the caller to wait (1 s when the
// metadata does not say).
func (e *Error) RetryAfter() time.Duration {
	ms, err := strconv.ParseUint(e.Metadata["retry_after_ms"], 10, 32)
	if err != nil {
		return time.Second
	}
	return time.Duration(ms) * time.Millisecond
}

// transient: worth retrying inside the caller's context.
func (e *Error) transient() bool {
	switch e.kind {
	case ErrNoQuorum, ErrUnavailable, ErrDraining, ErrRateLimited, ErrMoving:
		return true
	}
	return false
}

// FromStatus is the one place a gRPC status becomes an *Error: the refusal's reason and
// metadata from the google.rpc.ErrorInfo of domain "lock.v1" in its details, else by code
// (UNAVAILABLE, UNKNOWN, CANCELLED and DEADLINE_EXCEEDED: ErrUnavailable; any other: no
// sentinel). Nil for a nil or OK status.
func FromStatus(s *status.Status) *Error {
	if s == nil || s.Code() == codes.OK {
		return nil
	}
	e := &Error{Code: s.Code(), Message: s.Message(), Metadata: map[string]string{}}
	for _, d := range s.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != ErrorDomain {
			continue
		}
		e.Reason = info.GetReason()
		for k, v := range info.GetMetadata() {
			e.Metadata[k] = v
		}
		e.kind = byReason[e.Reason]
		return e
	}
	switch s.Code() {
	case codes.Unavailable, codes.Unknown, codes.Canceled, codes.DeadlineExceeded:
		e.kind = ErrUnavailable
	}
	return e
}

// wrap turns a call's error into the client's: an *Error from a status, the context's
// own error when the caller's ctx ended (errors.Is(err, context.DeadlineExceeded)).
func wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("lock: %w", ctxErr)
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if s, ok := status.FromError(err); ok {
		return FromStatus(s)
	}
	return &Error{Code: codes.Unknown, Message: err.Error(), Metadata: map[string]string{}, kind: ErrUnavailable}
}

// clientError is an *Error the client decides itself (no reason).
func clientError(kind error, msg string) *Error {
	return &Error{Code: codes.Unknown, Message: msg, Metadata: map[string]string{}, kind: kind}
}
