package transports_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/minica"
	"github.com/junctionmq/junction/transports"
)

// pki is a CA with a server and a client certificate, and its files.
type pki struct {
	ca                        *minica.CA
	server, client            *minica.Cert
	certFile, keyFile, caFile string
}

func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	ca, err := minica.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server("localhost", "127.0.0.1", "::1")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.Client("alice")
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{ca: ca, server: srv, client: cli,
		certFile: filepath.Join(dir, "server.pem"),
		keyFile:  filepath.Join(dir, "server-key.pem"),
		caFile:   filepath.Join(dir, "ca.pem"),
	}
	p.write(t)
	return p
}

// write (re)writes p's files.
func (p *pki) write(t *testing.T) {
	t.Helper()
	for name, data := range map[string][]byte{p.certFile: p.server.CertPEM, p.keyFile: p.server.KeyPEM, p.caFile: p.ca.CertPEM} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// clientConfig trusts ca and presents cert (if not nil) whatever CAs
// the server names (Go's client would otherwise send no certificate
// that the server's CAs did not issue).
func clientConfig(ca *minica.CA, cert *minica.Cert) *tls.Config {
	cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
	if cert != nil {
		tc := cert.TLSCertificate()
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tc, nil }
	}
	return cfg
}

// whoami writes what the handler learns of its conn's TLS state, then
// echoes.
func whoami(_ context.Context, c net.Conn) {
	cs, ok := transports.ConnectionState(c)
	peer := "-"
	if cert, ok := transports.PeerCertificate(c); ok {
		peer = cert.Subject.CommonName
	}
	_, _ = fmt.Fprintf(c, "tls=%v version=%x peer=%s\n", ok, cs.Version, peer)
	_, _ = io.Copy(c, c)
}

// startTLS serves th on a loopback port.
func startTLS(t *testing.T, th *transports.TLSHandler) string {
	t.Helper()
	addr, _ := start(t, &transports.Server{Name: "tls", Handler: th.ServeConn, OnLimit: th.Reject})
	return addr
}

// tlsTalk dials addr with cfg, reads the first line and checks an echo.
// It returns the line, or the first error: with TLS 1.3 a client learns
// that the server refused its certificate only on its first read.
func tlsTalk(addr string, cfg *tls.Config) (string, error) {
	d := &net.Dialer{Timeout: timeout}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	buf := make([]byte, 200)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	line := string(buf[:n])
	if _, err := io.WriteString(c, "ping"); err != nil {
		return line, err
	}
	if _, err := io.ReadFull(c, buf[:4]); err != nil || string(buf[:4]) != "ping" {
		return line, fmt.Errorf("echo %q, %v", buf[:4], err)
	}
	return line, nil
}

func tlsConfig(t *testing.T, opts transports.TLSOptions) (*tls.Config, *transports.CertReloader) {
	t.Helper()
	cfg, r, err := transports.TLSConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, r
}

func TestTLSHandshake(t *testing.T) {
	p := newPKI(t, t.TempDir())
	cfg, r := tlsConfig(t, transports.TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile})
	if !r.Leaf().Equal(p.server.Cert) {
		t.Fatal("Leaf is not the certificate loaded")
	}
	addr := startTLS(t, &transports.TLSHandler{Config: cfg, Handler: whoami})

	line, err := tlsTalk(addr, clientConfig(p.ca, nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := "tls=true version=304 peer=-\n"; line != want {
		t.Fatalf("handler saw %q, want %q", line, want)
	}
	// By IP address (the certificate names 127.0.0.1), and with TLS 1.2.
	ipCfg := clientConfig(p.ca, nil)
	ipCfg.ServerName = ""
	ipCfg.MaxVersion = tls.VersionTLS12
	if line, err := tlsTalk(addr, ipCfg); err != nil || !strings.Contains(line, "version=303") {
		t.Fatalf("TLS 1.2 by IP: %q, %v", line, err)
	}
	// Below TLS 1.2: refused.
	old := clientConfig(p.ca, nil)
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if _, err := tlsTalk(addr, old); err == nil {
		t.Fatal("TLS 1.1 handshake succeeded")
	}
}

func TestTLSUntrustedServer(t *testing.T) {
	p := newPKI(t, t.TempDir())
	cfg, _ := tlsConfig(t, transports.TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile})
	var mu sync.Mutex
	var serverErrs []error
	handshakeErr := make(chan struct{}, 1)
	addr := startTLS(t, &transports.TLSHandler{Config: cfg, Handler: whoami,
		OnHandshakeError: func(_ net.Conn, err error) {
			mu.Lock()
			serverErrs = append(serverErrs, err)
			mu.Unlock()
			handshakeErr <- struct{}{}
		}})

	other, err := minica.NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tlsTalk(addr, clientConfig(other, nil))
	var uae x509.UnknownAuthorityError
	if !errors.As(err, &uae) {
		t.Fatalf("client trusting another CA: %v, want an unknown authority", err)
	}
	// Wrong name.
	wrong := clientConfig(p.ca, nil)
	wrong.ServerName = "example.com"
	var hne x509.HostnameError
	if _, err := tlsTalk(addr, wrong); !errors.As(err, &hne) {
		t.Fatalf("client for example.com: %v, want a hostname error", err)
	}
	recv(t, handshakeErr, "OnHandshakeError")
	recv(t, handshakeErr, "OnHandshakeError")
	mu.Lock()
	defer mu.Unlock()
	if len(serverErrs) != 2 {
		t.Fatalf("OnHandshakeError: %v", serverErrs)
	}
}

func TestTLSClientCertificates(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	other, err := minica.NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	mallory, err := other.Client("mallory")
	if err != nil {
		t.Fatal(err)
	}
	// A server certificate of our CA is no client certificate.
	serverAsClient := p.server

	for _, tc := range []struct {
		name    string
		require bool
		cert    *minica.Cert
		peer    string // "" when the handshake must fail
	}{
		{"required/verified", true, p.client, "alice"},
		{"required/missing", true, nil, ""},
		{"required/other-CA", true, mallory, ""},
		{"required/server-cert", true, serverAsClient, ""},
		{"optional/verified", false, p.client, "alice"},
		{"optional/missing", false, nil, "-"},
		{"optional/other-CA", false, mallory, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _ := tlsConfig(t, transports.TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile,
				ClientCAFile: p.caFile, RequireClientCert: tc.require})
			addr := startTLS(t, &transports.TLSHandler{Config: cfg, Handler: whoami})
			line, err := tlsTalk(addr, clientConfig(p.ca, tc.cert))
			if tc.peer == "" {
				if err == nil {
					t.Fatalf("handshake succeeded: %q", line)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := "peer=" + tc.peer + "\n"; !strings.HasSuffix(line, want) {
				t.Fatalf("handler saw %q, want %q", line, want)
			}
		})
	}
}

func TestTLSReload(t *testing.T) {
	p := newPKI(t, t.TempDir())
	cfg, r := tlsConfig(t, transports.TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile})
	addr := startTLS(t, &transports.TLSHandler{Config: cfg, Handler: whoami})
	if _, err := tlsTalk(addr, clientConfig(p.ca, nil)); err != nil {
		t.Fatal(err)
	}

	// New files from another CA: not used until Reload.
	old := p.ca
	ca2, err := minica.NewCA("second CA")
	if err != nil {
		t.Fatal(err)
	}
	if p.server, err = ca2.Server("localhost"); err != nil {
		t.Fatal(err)
	}
	p.ca = ca2
	p.write(t)
	if _, err := tlsTalk(addr, clientConfig(old, nil)); err != nil {
		t.Fatalf("before Reload: %v", err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := tlsTalk(addr, clientConfig(ca2, nil)); err != nil {
		t.Fatalf("after Reload, trusting the new CA: %v", err)
	}
	if _, err := tlsTalk(addr, clientConfig(old, nil)); err == nil {
		t.Fatal("after Reload, a client trusting only the old CA connected")
	}
	if !r.Leaf().Equal(p.server.Cert) {
		t.Fatal("Leaf is not the reloaded certificate")
	}

	// A failed reload keeps what was loaded.
	for name, break_ := range map[string]func(){
		"bad key":      func() { _ = os.WriteFile(p.keyFile, []byte("junk"), 0o600) },
		"missing cert": func() { _ = os.Remove(p.certFile) },
	} {
		break_()
		if err := r.Reload(); err == nil {
			t.Fatalf("%s: Reload succeeded", name)
		}
		if _, err := tlsTalk(addr, clientConfig(ca2, nil)); err != nil {
			t.Fatalf("%s: after a failed Reload: %v", name, err)
		}
		p.write(t)
	}
}

func TestTLSHandshakeTimeout(t *testing.T) {
	const hs = 300 * time.Millisecond
	p := newPKI(t, t.TempDir())
	cfg, _ := tlsConfig(t, transports.TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile})
	errs := make(chan error, 10)
	addr := startTLS(t, &transports.TLSHandler{Config: cfg, Handler: whoami, HandshakeTimeout: hs,
		OnHandshakeError: func(_ net.Conn, err error) { errs <- err }})

	for _, tc := range []struct {
		name string
		sent []byte
	}{
		{"silent", nil},
		{"partial-hello", []byte{22, 3, 1, 0, 200, 1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			begin := time.Now()
			_, _ = c.Write(tc.sent)
			if _, err := io.ReadAll(c); err != nil && !isReset(err) {
				t.Fatalf("read: %v", err)
			}
			if el := time.Since(begin); el < hs-50*time.Millisecond || el > hs+2*time.Second {
				t.Fatalf("closed after %v, want about %v", el, hs)
			}
			if err := recv(t, errs, "OnHandshakeError"); err == nil {
				t.Fatal("OnHandshakeError(nil)")
			}
		})
	}
}

// TestTLSShutdownDuringHandshake checks that a pending handshake does
// not hold up Shutdown.
func TestTLSShutdownDuringHandshake(t *testing.T) {
	p := newPKI(t, t.TempDir())
	cfg, _ := tlsConfig(t, transports.TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile})
	th := &transports.TLSHandler{Config: cfg, Handler: whoami}
	s := &transports.Server{Handler: th.ServeConn}
	addr, _ := start(t, s)
	c := dial(t, addr)
	_, _ = c.Write([]byte{22, 3, 1})
	for s.Stats().Open != 1 {
		time.Sleep(time.Millisecond)
	}
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(begin); el > time.Second {
		t.Fatalf("Shutdown took %v with a handshake pending", el)
	}
}

// TestTLSReject checks that a TLS client over MaxConns gets the
// protocol's answer inside TLS.
func TestTLSReject(t *testing.T) {
	p := newPKI(t, t.TempDir())
	cfg, _ := tlsConfig(t, transports.TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile})
	th := &transports.TLSHandler{Config: cfg, Handler: whoami,
		OnLimit: func(c net.Conn) { _, _ = io.WriteString(c, "busy\n") }}
	s := &transports.Server{Handler: th.ServeConn, OnLimit: th.Reject, MaxConns: 1}
	addr, _ := start(t, s)
	c1, err := tls.Dial("tcp", addr, clientConfig(p.ca, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	buf := make([]byte, 100)
	if _, err := c1.Read(buf); err != nil {
		t.Fatal(err)
	}
	if line, err := tlsTalk(addr, clientConfig(p.ca, nil)); line != "busy\n" {
		t.Fatalf("second client read %q, %v; want busy", line, err)
	}
}

// TestTLSMux puts a Mux behind TLS: detection reads the decrypted
// stream, and the protocol handler sees the TLS state through the
// Mux's wrapper.
func TestTLSMux(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	cfg, _ := tlsConfig(t, transports.TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile})
	protos := protocols()
	protos[1].Handler = func(ctx context.Context, c net.Conn) { // amqp
		buf := make([]byte, 8)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "AMQP\x00\x01\x00\x00" {
			return
		}
		whoami(ctx, c)
	}
	mux := &transports.Mux{Protocols: protos}
	addr := startTLS(t, &transports.TLSHandler{Config: cfg, Handler: mux.ServeConn})

	c, err := tls.Dial("tcp", addr, clientConfig(p.ca, p.client))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	_, _ = io.WriteString(c, "AMQP\x00\x01\x00\x00")
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(buf[:n]), "tls=true version=304 peer=alice\n"; got != want {
		t.Fatalf("amqp handler saw %q, want %q", got, want)
	}

	c2, err := tls.Dial("tcp", addr, clientConfig(p.ca, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(timeout))
	_, _ = io.WriteString(c2, "CONNECT\n\n\x00")
	expectRoute(t, c2, "stomp", "CONNECT\n\n\x00")
}

// TestTLSAndPlainOnOnePort serves TLS and plaintext clients on one port:
// an outer Mux recognises the ClientHello and hands it to a TLSHandler
// around an inner Mux.
func TestTLSAndPlainOnOnePort(t *testing.T) {
	p := newPKI(t, t.TempDir())
	cfg, _ := tlsConfig(t, transports.TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile})
	stomp := transports.Protocol{Name: "stomp", Detect: detectSTOMP, Handler: func(ctx context.Context, c net.Conn) {
		buf := make([]byte, len("CONNECT\n\n\x00"))
		if _, err := io.ReadFull(c, buf); err == nil {
			whoami(ctx, c)
		}
	}}
	inner := &transports.Mux{Protocols: []transports.Protocol{stomp}}
	th := &transports.TLSHandler{Config: cfg, Handler: inner.ServeConn}
	outer := &transports.Mux{Protocols: []transports.Protocol{
		{Name: "tls", Detect: transports.DetectTLS, Handler: th.ServeConn},
		stomp,
	}}
	addr, _ := startMux(t, outer)

	plain := dial(t, addr)
	_, _ = io.WriteString(plain, "CONNECT\n\n\x00")
	buf := make([]byte, 100)
	n, err := plain.Read(buf)
	if err != nil || string(buf[:n]) != "tls=false version=0 peer=-\n" {
		t.Fatalf("plain client read %q, %v", buf[:n], err)
	}

	sc, err := tls.Dial("tcp", addr, clientConfig(p.ca, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	_ = sc.SetDeadline(time.Now().Add(timeout))
	_, _ = io.WriteString(sc, "CONNECT\n\n\x00")
	n, err = sc.Read(buf)
	if err != nil || string(buf[:n]) != "tls=true version=304 peer=-\n" {
		t.Fatalf("TLS client read %q, %v", buf[:n], err)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts transports.TLSOptions
	}{
		{"no key", transports.TLSOptions{CertFile: p.certFile}},
		{"require without CA", transports.TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile, RequireClientCert: true}},
		{"missing cert", transports.TLSOptions{CertFile: filepath.Join(dir, "none.pem"), KeyFile: p.keyFile}},
		{"key of another cert", transports.TLSOptions{CertFile: p.certFile, KeyFile: writeKey(t, dir, p.client)}},
		{"junk CA", transports.TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: junk}},
		{"missing CA", transports.TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: filepath.Join(dir, "none.pem")}},
	} {
		if _, _, err := transports.TLSConfig(tc.opts); err == nil || !strings.HasPrefix(err.Error(), "transports: tls: ") {
			t.Errorf("%s: TLSConfig = %v, want a transports: tls: error", tc.name, err)
		}
	}
}

func writeKey(t *testing.T, dir string, c *minica.Cert) string {
	t.Helper()
	name := filepath.Join(dir, "other-key.pem")
	if err := os.WriteFile(name, c.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}
