package minica_test

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/minica"
)

func newCA(t *testing.T, name string) *minica.CA {
	t.Helper()
	ca, err := minica.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestServerVerifies(t *testing.T) {
	ca := newCA(t, "test CA")
	srv, err := ca.Server("localhost", "127.0.0.1", "::1")
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"localhost", "127.0.0.1", "::1"} {
		_, err := srv.Cert.Verify(x509.VerifyOptions{DNSName: host, Roots: ca.Pool()})
		if err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
	if _, err := srv.Cert.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: ca.Pool()}); err == nil {
		t.Error("verified for example.com")
	}
	other := newCA(t, "other CA")
	if _, err := srv.Cert.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: other.Pool()}); err == nil {
		t.Error("verified against another CA")
	}
	// The PEM pair is what files hold.
	pair, err := tls.X509KeyPair(srv.CertPEM, srv.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !pair.Leaf.Equal(srv.Cert) {
		t.Fatal("PEM pair holds another certificate")
	}
	if d := srv.Cert.NotAfter.Sub(srv.Cert.NotBefore); d > 398*24*time.Hour {
		t.Fatalf("server certificate valid for %v, over 398 days", d)
	}
}

func TestClientUsage(t *testing.T) {
	ca := newCA(t, "test CA")
	cli, err := ca.Client("alice")
	if err != nil {
		t.Fatal(err)
	}
	if cli.Cert.Subject.CommonName != "alice" {
		t.Fatalf("CN %q, want alice", cli.Cert.Subject.CommonName)
	}
	opts := x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if _, err := cli.Cert.Verify(opts); err != nil {
		t.Fatal(err)
	}
	// A client certificate is no server certificate.
	opts.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	if _, err := cli.Cert.Verify(opts); err == nil {
		t.Fatal("client certificate verified for server auth")
	}
	if c := cli.TLSCertificate(); c.Leaf != cli.Cert || c.PrivateKey == nil {
		t.Fatalf("TLSCertificate = %+v", c)
	}
}

func TestLoadCA(t *testing.T) {
	ca := newCA(t, "test CA")
	again, err := minica.LoadCA(ca.CertPEM, ca.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// A certificate issued by the loaded CA verifies against the original.
	srv, err := again.Server("localhost")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Cert.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: ca.Pool()}); err != nil {
		t.Fatal(err)
	}

	other := newCA(t, "other CA")
	if _, err := minica.LoadCA(ca.CertPEM, other.KeyPEM); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("LoadCA with another key = %v", err)
	}
	if _, err := minica.LoadCA(srv.CertPEM, srv.KeyPEM); err == nil {
		t.Fatal("LoadCA accepted a leaf certificate")
	}
	if _, err := minica.LoadCA([]byte("junk"), ca.KeyPEM); err == nil {
		t.Fatal("LoadCA accepted junk")
	}
}

func TestIssueExpired(t *testing.T) {
	ca := newCA(t, "test CA")
	past := time.Now().Add(-48 * time.Hour)
	c, err := ca.Issue(&x509.Certificate{NotBefore: past, NotAfter: past.Add(time.Hour), DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cert.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: ca.Pool()}); err == nil {
		t.Fatal("expired certificate verified")
	}
}
