package lock

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// HTTP/2 PINGs on the one connection, idle or not: a silently dead path breaks the
// connection within seconds and gRPC reconnects (as the Rust client does).
const (
	pingInterval = 20 * time.Second
	pingTimeout  = 5 * time.Second
)

// DialOption configures Dial.
type DialOption func(*dialConfig)

type dialConfig struct {
	svidFiles       *svidFiles
	svidSource      x509svid.Source
	bundleSource    x509bundle.Source
	workloadAPIAddr string
	useWorkloadAPI  bool
	meshSidecar     bool
	authorizer      tlsconfig.Authorizer
	authorizerErr   error
	instance        string
	maxHoldStreams  int
	grpcOptions     []grpc.DialOption
	meterProvider   metric.MeterProvider
}

type svidFiles struct{ cert, key, bundle string }

// WithSVIDFiles presents the workload's X.509-SVID from PEM files (written by the SPIRE
// agent or spiffe-helper): the certificate chain, its PKCS#8 key and the trust bundle
// that verifies the edge. The files are read again when they change (a rotation), at the
// next TLS handshake. A certificate that names no SPIFFE ID is presented as it is, and the
// edge refuses its calls (ErrUnauthenticated), as it does for every client.
func WithSVIDFiles(cert, key, bundle string) DialOption {
	return func(c *dialConfig) { c.svidFiles = &svidFiles{cert, key, bundle} }
}

// WithX509Source presents the SVID of svid and verifies the edge with bundle; a
// *workloadapi.X509Source is both (pass it twice). The caller owns the sources: Close
// does not close them.
func WithX509Source(svid x509svid.Source, bundle x509bundle.Source) DialOption {
	return func(c *dialConfig) { c.svidSource, c.bundleSource = svid, bundle }
}

// WithWorkloadAPI takes the SVID and bundle from the SPIFFE Workload API at addr
// (`unix:///run/spire/agent.sock`; empty: SPIFFE_ENDPOINT_SOCKET). Dial waits, within its
// context, for the first SVID; Close closes the source.
func WithWorkloadAPI(addr string) DialOption {
	return func(c *dialConfig) { c.useWorkloadAPI, c.workloadAPIAddr = true, addr }
}

// WithMeshSidecar speaks plaintext HTTP/2 to the workload's mesh sidecar, which presents
// the SVID for it. Allowed only to a loopback endpoint (http://127.0.0.1:PORT): anything
// farther would carry the calls, and the tokens in them, in the clear.
func WithMeshSidecar() DialOption {
	return func(c *dialConfig) { c.meshSidecar = true }
}

// WithServerID authorises the edge by its exact SPIFFE ID
// (`spiffe://example.org/ns/edge/sa/envoy`). TLS modes need it or WithServerTrustDomain.
func WithServerID(id string) DialOption {
	return func(c *dialConfig) {
		sid, err := spiffeid.FromString(id)
		if err != nil {
			c.authorizerErr = fmt.Errorf("lock: server SPIFFE ID %q: %w", id, err)
			return
		}
		c.authorizer = tlsconfig.AuthorizeID(sid)
	}
}

// WithServerTrustDomain authorises any edge SVID of the trust domain td
// (`example.org`): weaker than WithServerID.
func WithServerTrustDomain(td string) DialOption {
	return func(c *dialConfig) {
		t, err := spiffeid.TrustDomainFromString(td)
		if err != nil {
			c.authorizerErr = fmt.Errorf("lock: server trust domain %q: %w", td, err)
			return
		}
		c.authorizer = tlsconfig.AuthorizeMemberOf(t)
	}
}

// WithInstance sets the client's `lock-instance` exactly (a test's second replica, or a
// workload naming its instance itself) instead of InstanceName(LOCK_INSTANCE, pid, n,
// ...), and as is. It must satisfy ValidInstance. Two Clients with one instance and identity are
// one contender: the second is told LEAKED_HOLD for the first's hold.
func WithInstance(instance string) DialOption {
	return func(c *dialConfig) { c.instance = instance }
}

// WithMaxHoldStreams bounds the holds whose Hold stream stays open (default
// DefaultMaxHoldStreams); past it acquires use the unary calls. 0: unary calls only (a
// proxy on the way that does not carry bidirectional streams).
func WithMaxHoldStreams(n int) DialOption {
	return func(c *dialConfig) { c.maxHoldStreams = n }
}

// WithGRPCDialOptions appends options to the gRPC client (interceptors, a custom dialer).
func WithGRPCDialOptions(opts ...grpc.DialOption) DialOption {
	return func(c *dialConfig) { c.grpcOptions = append(c.grpcOptions, opts...) }
}

// checkEndpoint returns the gRPC target of endpoint: https:// for the client's own TLS,
// http:// only to a loopback host (the sidecar). The same rule as the Rust client.
func checkEndpoint(endpoint string, plaintext bool) (string, error) {
	scheme, rest, ok := strings.Cut(endpoint, "://")
	if !ok {
		return "", fmt.Errorf("lock: endpoint %q: expected https://host:port", endpoint)
	}
	authority, _, _ := strings.Cut(rest, "/")
	switch {
	case scheme == "https" && !plaintext:
		return authority, nil
	case scheme == "http" && plaintext:
		if isLoopback(authority) {
			return authority, nil
		}
		return "", fmt.Errorf("lock: endpoint %q: plaintext goes only to the workload's sidecar on loopback (127.0.0.0/8, ::1, localhost)", endpoint)
	case scheme == "http":
		return "", fmt.Errorf("lock: endpoint %q is plaintext: use https:// with SVID files or the Workload API, or WithMeshSidecar for a local sidecar", endpoint)
	case plaintext:
		return "", fmt.Errorf("lock: endpoint %q: the mesh sidecar is reached over http://127.0.0.1:PORT", endpoint)
	default:
		return "", fmt.Errorf("lock: endpoint %q: expected https://host:port", endpoint)
	}
}

func isLoopback(authority string) bool {
	host := authority
	if strings.HasPrefix(authority, "[") {
		host, _, _ = strings.Cut(authority[1:], "]")
	} else if h, _, err := net.SplitHostPort(authority); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// fileSource is an SVID and bundle from PEM files, read again when a file changes.
type fileSource struct {
	files svidFiles
	mu    sync.Mutex
	stamp [3]time.Time
	svid  *x509svid.SVID
	set   *x509bundle.Bundle
}

func newFileSource(f svidFiles) (*fileSource, error) {
	s := &fileSource{files: f}
	if err := s.refresh(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *fileSource) refresh() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var stamp [3]time.Time
	for i, p := range []string{s.files.cert, s.files.key, s.files.bundle} {
		fi, err := os.Stat(p)
		if err != nil {
			return clientError(ErrUnauthenticated, err.Error())
		}
		stamp[i] = fi.ModTime()
	}
	if s.svid != nil && stamp == s.stamp {
		return nil
	}
	svid, err := x509svid.Load(s.files.cert, s.files.key)
	if err != nil {
		var ok bool
		if svid, ok = loadWithoutID(s.files.cert, s.files.key); !ok {
			return clientError(ErrUnauthenticated, fmt.Sprintf("SVID %s: %v", s.files.cert, err))
		}
	}
	b, err := x509bundle.Load(svid.ID.TrustDomain(), s.files.bundle)
	if err != nil {
		return clientError(ErrUnauthenticated, fmt.Sprintf("bundle %s: %v", s.files.bundle, err))
	}
	s.svid, s.set, s.stamp = svid, b, stamp
	return nil
}

// loadWithoutID loads a certificate that names no SPIFFE ID (no URI SAN) with its key, to
// be presented as it is: the edge, not the client, refuses it (UNAUTHENTICATED, the typed
// refusal every client gets for it). False for any other certificate, whose error
// x509svid.Load said.
func loadWithoutID(certFile, keyFile string) (*x509svid.SVID, bool) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil || pair.Leaf == nil || len(pair.Leaf.URIs) > 0 {
		return nil, false
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, false
	}
	chain := make([]*x509.Certificate, 0, len(pair.Certificate))
	for _, der := range pair.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, false
		}
		chain = append(chain, c)
	}
	return &x509svid.SVID{Certificates: chain, PrivateKey: key}, true
}

// GetX509SVID implements x509svid.Source.
func (s *fileSource) GetX509SVID() (*x509svid.SVID, error) {
	if err := s.refresh(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.svid, nil
}

// GetX509BundleForTrustDomain implements x509bundle.Source. The bundle file verifies the
// edge whatever its trust domain says (one file, one set of roots).
func (s *fileSource) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	if err := s.refresh(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return x509bundle.FromX509Authorities(td, s.set.X509Authorities()), nil
}

// transport builds the gRPC transport credentials; closer closes what Dial opened.
func (c *dialConfig) transport(ctx context.Context) (credentials.TransportCredentials, func() error, error) {
	if c.meshSidecar {
		return insecure.NewCredentials(), func() error { return nil }, nil
	}
	if c.authorizerErr != nil {
		return nil, nil, c.authorizerErr
	}
	if c.authorizer == nil {
		return nil, nil, fmt.Errorf("lock: WithServerID (or WithServerTrustDomain) is required: the edge's SPIFFE ID to authorise")
	}
	closer := func() error { return nil }
	var svid x509svid.Source
	var bundle x509bundle.Source
	switch {
	case c.svidFiles != nil:
		fs, err := newFileSource(*c.svidFiles)
		if err != nil {
			return nil, nil, err
		}
		svid, bundle = fs, fs
	case c.svidSource != nil && c.bundleSource != nil:
		svid, bundle = c.svidSource, c.bundleSource
	case c.useWorkloadAPI:
		var opts []workloadapi.X509SourceOption
		if c.workloadAPIAddr != "" {
			opts = append(opts, workloadapi.WithClientOptions(workloadapi.WithAddr(c.workloadAPIAddr)))
		}
		src, err := workloadapi.NewX509Source(ctx, opts...)
		if err != nil {
			return nil, nil, clientError(ErrUnauthenticated, fmt.Sprintf("SPIFFE Workload API: %v", err))
		}
		svid, bundle, closer = src, src, src.Close
	default:
		return nil, nil, fmt.Errorf("lock: no credentials: WithSVIDFiles, WithX509Source, WithWorkloadAPI or WithMeshSidecar")
	}
	tc := tlsconfig.MTLSClientConfig(svid, bundle, c.authorizer)
	tc.MinVersion = tls.VersionTLS12
	return credentials.NewTLS(tc), closer, nil
}

// grpcTarget is the gRPC target for an endpoint's host:port (the dns resolver; an IP
// literal resolves to itself).
func grpcTarget(authority string) string {
	return "dns:///" + (&url.URL{Host: authority}).Host
}

func (c *dialConfig) grpcDialOptions(creds credentials.TransportCredentials) []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                pingInterval,
			Timeout:             pingTimeout,
			PermitWithoutStream: true,
		}),
	}
	return append(opts, c.grpcOptions...)
}
