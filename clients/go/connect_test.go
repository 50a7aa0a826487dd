package lock

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writePEM issues a certificate for uris from a fresh CA into dir and returns the files
// of the certificate, its key and the CA.
func writePEM(t *testing.T, dir, name string, uris ...string) svidFiles {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, leafKey := key(), key()
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		leaf.URIs = append(leaf.URIs, parsed)
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	f := svidFiles{filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key"), filepath.Join(dir, name+"-ca.pem")}
	for path, block := range map[string]*pem.Block{
		f.cert:   {Type: "CERTIFICATE", Bytes: leafDER},
		f.key:    {Type: "PRIVATE KEY", Bytes: pkcs8},
		f.bundle: {Type: "CERTIFICATE", Bytes: caDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// An SVID loads; a certificate naming no SPIFFE ID is presented as it is (the edge refuses
// it, as it does for every client); one naming something else, or no file, is refused here.
func TestSVIDFiles(t *testing.T) {
	dir := t.TempDir()
	svid, err := newFileSource(writePEM(t, dir, "svid", "spiffe://example.org/ns/pay/sa/ledger"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := svid.GetX509SVID(); got.ID.String() != "spiffe://example.org/ns/pay/sa/ledger" {
		t.Fatalf("SPIFFE ID %q", got.ID)
	}
	anon, err := newFileSource(writePEM(t, dir, "anon"))
	if err != nil {
		t.Fatalf("a certificate without a SPIFFE ID: %v", err)
	}
	if got, _ := anon.GetX509SVID(); len(got.Certificates) != 1 || got.PrivateKey == nil || !got.ID.IsZero() {
		t.Fatalf("presented: %d certificates, ID %q", len(got.Certificates), got.ID)
	}
	if _, err := newFileSource(writePEM(t, dir, "web", "https://example.org/x")); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("a URI SAN that is no SPIFFE ID: %v", err)
	}
	if _, err := newFileSource(svidFiles{filepath.Join(dir, "none.pem"), filepath.Join(dir, "none.key"), filepath.Join(dir, "svid-ca.pem")}); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("no files: %v", err)
	}
}
