package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/transports"
)

// runCertCmd runs `junction cert ARGS...` and returns its output.
func runCertCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append([]string{"cert"}, args...), noEnv, &out, &errOut)
	return out.String() + errOut.String(), err
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseCert(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(readFile(t, name), readFile(t, strings.TrimSuffix(name, ".pem")+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return pair.Leaf
}

func caPool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(readFile(t, filepath.Join(dir, "ca.pem"))) {
		t.Fatal("ca.pem holds no certificate")
	}
	return pool
}

func TestCertDev(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "tls")
	out, err := runCertCmd(t, "dev", "-dir", dir, "-client", "alice")
	if err != nil {
		t.Fatalf("cert dev: %v\n%s", err, out)
	}
	path := func(n string) string { return filepath.Join(dir, n) }
	for _, want := range []string{"--tls-cert " + path("server.pem"), "--tls-key " + path("server-key.pem"), "--tls-client-ca " + path("ca.pem")} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for name, mode := range map[string]os.FileMode{
		"ca.pem": 0o644, "ca-key.pem": 0o600,
		"server.pem": 0o644, "server-key.pem": 0o600,
		"client-alice.pem": 0o644, "client-alice-key.pem": 0o600,
	} {
		fi, err := os.Stat(path(name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 6 {
		t.Errorf("%d files in %s, want 6 (no temporary files left)", len(entries), dir)
	}

	roots := caPool(t, dir)
	srv := parseCert(t, path("server.pem"))
	for _, host := range []string{"localhost", "127.0.0.1", "::1"} {
		if _, err := srv.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	alice := parseCert(t, path("client-alice.pem"))
	if _, err := alice.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}

	// The files work as the flags will use them: a TLS server requiring
	// client certificates, and a client with alice's.
	cfg, _, err := transports.TLSConfig(transports.TLSOptions{
		CertFile: path("server.pem"), KeyFile: path("server-key.pem"),
		ClientCAFile: path("ca.pem"), RequireClientCert: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	th := &transports.TLSHandler{Config: cfg, Handler: func(_ context.Context, c net.Conn) {
		if cert, ok := transports.PeerCertificate(c); ok {
			_, _ = io.WriteString(c, cert.Subject.CommonName)
		}
	}}
	s := &transports.Server{Handler: th.ServeConn}
	go func() { _ = s.Serve(l) }()
	defer s.Close()
	pair, err := tls.LoadX509KeyPair(path("client-alice.pem"), path("client-alice-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", l.Addr().String(),
		&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(c); string(got) != "alice" {
		t.Fatalf("server saw client %q, %v; want alice", got, err)
	}
}

// TestCertDevAgain checks that a second run reuses the CA and keeps the
// files, that -client adds a client of the same CA, and that -force
// starts over.
func TestCertDevAgain(t *testing.T) {
	dir := t.TempDir()
	path := func(n string) string { return filepath.Join(dir, n) }
	if out, err := runCertCmd(t, "dev", "-dir", dir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ca, srv := readFile(t, path("ca.pem")), readFile(t, path("server.pem"))

	out, err := runCertCmd(t, "dev", "-dir", dir, "-client", "bob")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !bytes.Equal(ca, readFile(t, path("ca.pem"))) || !bytes.Equal(srv, readFile(t, path("server.pem"))) {
		t.Fatal("a second run replaced the CA or the server certificate")
	}
	if !strings.Contains(out, "kept") {
		t.Errorf("output does not say what was kept:\n%s", out)
	}
	bob := parseCert(t, path("client-bob.pem"))
	if _, err := bob.Verify(x509.VerifyOptions{Roots: caPool(t, dir), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("bob's certificate against the first CA: %v", err)
	}
	if _, err := runCertCmd(t, "dev", "-dir", dir, "-client", "bob"); err == nil {
		t.Fatal("a second -client bob replaced bob's files")
	}

	if out, err := runCertCmd(t, "dev", "-dir", dir, "-force", "-hosts", "broker.example, 10.1.2.3"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if bytes.Equal(ca, readFile(t, path("ca.pem"))) {
		t.Fatal("-force kept the CA")
	}
	srvCert := parseCert(t, path("server.pem"))
	for _, host := range []string{"localhost", "broker.example", "10.1.2.3"} {
		if _, err := srvCert.Verify(x509.VerifyOptions{DNSName: host, Roots: caPool(t, dir)}); err != nil {
			t.Errorf("-hosts: server certificate for %s: %v", host, err)
		}
	}

	// A server certificate whose CA is gone is not silently kept.
	if err := os.Remove(path("ca.pem")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path("ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	if _, err := runCertCmd(t, "dev", "-dir", dir); err == nil || !strings.Contains(err.Error(), "-force") {
		t.Fatalf("server files without a CA: %v, want an error naming -force", err)
	}
}

func TestCertUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"prod"}, {"dev", "-nope"}, {"dev", "extra"}, {"dev", "-client", "../x"}} {
		if _, err := runCertCmd(t, args...); err == nil {
			t.Errorf("cert %q succeeded", args)
		}
	}
}

// TestCertDevHostsOnce: a host given with --hosts that is among the
// defaults (127.0.0.1) is named once in the certificate.
func TestCertDevHostsOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	if out, err := runCertCmd(t, "dev", "-dir", dir, "-hosts", "127.0.0.1,broker.example"); err != nil {
		t.Fatalf("cert dev: %v\n%s", err, out)
	}
	srv := parseCert(t, filepath.Join(dir, "server.pem"))
	if len(srv.IPAddresses) != 2 || len(srv.DNSNames) != 2 {
		t.Fatalf("names in the certificate: IPs %v, DNS %v; want 127.0.0.1 and ::1, localhost and broker.example, each once", srv.IPAddresses, srv.DNSNames)
	}
}
