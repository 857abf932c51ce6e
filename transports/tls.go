package transports

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// defaultHandshakeTimeout bounds a TLS handshake when
// TLSHandler.HandshakeTimeout is zero.
const defaultHandshakeTimeout = 10 * time.Second

// TLSOptions names the files of a TLS configuration. Files are PEM.
type TLSOptions struct {
	// CertFile holds the server certificate, followed by any
	// intermediates; KeyFile its private key. Both are required.
	CertFile, KeyFile string

	// ClientCAFile, if set, holds the CA certificates that client
	// certificates are verified against. Clients are then asked for a
	// certificate; one that presents none is still accepted unless
	// RequireClientCert is set, and one that presents an unverifiable
	// certificate is refused.
	ClientCAFile string

	// RequireClientCert refuses clients without a verified certificate.
	// It requires ClientCAFile.
	RequireClientCert bool
}

// TLSConfig loads the files of opts and returns a server configuration
// (TLS 1.2 at least) and the [CertReloader] that serves it: every
// handshake uses what the files held at the last successful load, and
// [CertReloader.Reload] reads them again (on SIGHUP, say).
//
// The returned *tls.Config selects the current certificate and client
// CAs through GetConfigForClient (and GetCertificate, for code that
// looks for one). A caller that clones it and sets more fields (NextProtos,
// say) must know that GetConfigForClient's answer replaces the whole
// configuration for each handshake.
func TLSConfig(opts TLSOptions) (*tls.Config, *CertReloader, error) {
	switch {
	case opts.CertFile == "" || opts.KeyFile == "":
		return nil, nil, errors.New("transports: tls: a certificate file and a key file are both required")
	case opts.RequireClientCert && opts.ClientCAFile == "":
		return nil, nil, errors.New("transports: tls: requiring client certificates needs a client CA file")
	}
	r := &CertReloader{opts: opts}
	if err := r.Reload(); err != nil {
		return nil, nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ClientAuth: r.cur.Load().ClientAuth,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.cur.Load(), nil
		},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &r.cur.Load().Certificates[0], nil
		},
	}
	return cfg, r, nil
}

// CertReloader holds the TLS configuration loaded from files, for the
// *tls.Config made by [TLSConfig]. It is safe for concurrent use.
type CertReloader struct {
	opts TLSOptions
	mu   sync.Mutex                 // serialises Reload
	cur  atomic.Pointer[tls.Config] // what handshakes use; replaced whole by Reload
}

// Reload reads the certificate, key and client CA files again. New
// handshakes use them at once; established connections are unaffected,
// and so are sessions resumed from tickets issued before (they keep the
// client identity verified when they began). If a file is missing or
// invalid, Reload keeps the configuration it had and returns the error.
func (r *CertReloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cert, err := tls.LoadX509KeyPair(r.opts.CertFile, r.opts.KeyFile)
	if err != nil {
		return fmt.Errorf("transports: tls: %w", err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("transports: tls: %s: %w", r.opts.CertFile, err)
		}
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
	}
	if r.opts.ClientCAFile != "" {
		pem, err := os.ReadFile(r.opts.ClientCAFile)
		if err != nil {
			return fmt.Errorf("transports: tls: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("transports: tls: %s: no PEM certificate found", r.opts.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		if r.opts.RequireClientCert {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	r.cur.Store(cfg)
	return nil
}

// Leaf returns the server certificate in use, for log lines (its
// Subject, DNSNames, NotAfter).
func (r *CertReloader) Leaf() *x509.Certificate {
	return r.cur.Load().Certificates[0].Leaf
}

// TLSHandler is a [Handler] that makes a plain connection a TLS server
// connection and passes it to another Handler:
//
//	tlsCfg, certs, err := transports.TLSConfig(transports.TLSOptions{CertFile: ..., KeyFile: ...})
//	th := &transports.TLSHandler{Config: tlsCfg, Handler: stompSrv.ServeConn, OnLimit: stompSrv.Reject}
//	srv := &transports.Server{Name: "stomp+tls", Handler: th.ServeConn, OnLimit: th.Reject}
//
// The handshake happens in the connection's goroutine, never in the
// accept loop, and is bounded by HandshakeTimeout (and by shutdown); a
// client that stays silent or stalls is closed when it passes. Handler
// receives the *tls.Conn only once the handshake has succeeded, so
// [ConnectionState] and [PeerCertificate] are already answered.
//
// Behind TLS, Handler may be a [Mux]'s ServeConn: detection then reads
// the decrypted stream. In front of TLS, a Mux Protocol with [DetectTLS]
// and a TLSHandler serves TLS and plaintext clients on one port.
//
// Fields must not be changed once the TLSHandler is in use.
type TLSHandler struct {
	// Config is the server configuration, as made by [TLSConfig].
	// Required.
	Config *tls.Config

	// Handler serves each connection once its handshake has succeeded.
	// Required.
	Handler Handler

	// HandshakeTimeout bounds the handshake, reads and writes together.
	// Zero means 10 seconds.
	HandshakeTimeout time.Duration

	// OnLimit, if set, is given a connection turned away over the
	// Server's MaxConns (through [TLSHandler.Reject]) after its
	// handshake, so the protocol can answer in the clear, as
	// [Server].OnLimit would without TLS.
	OnLimit func(conn net.Conn)

	// OnHandshakeError, if set, is called with each connection whose
	// handshake failed (a bad certificate, a timeout, a client that hung
	// up: io.EOF, which TCP health checks cause) before it is closed.
	// It is not called for handshakes cut by shutdown.
	OnHandshakeError func(conn net.Conn, err error)
}

// ServeConn performs the TLS handshake on conn and serves the TLS
// connection with Handler, then closes it (sending close_notify). It has
// the [Handler] signature.
func (h *TLSHandler) ServeConn(ctx context.Context, conn net.Conn) {
	tc, err := h.handshake(ctx, conn, h.handshakeTimeout())
	if err != nil {
		if ctx.Err() == nil && h.OnHandshakeError != nil {
			h.OnHandshakeError(conn, err)
		}
		return
	}
	defer tc.Close()
	h.Handler(ctx, tc)
}

// Reject is meant for [Server].OnLimit: it performs the handshake (within
// a second, or HandshakeTimeout if shorter) and passes the TLS connection
// to OnLimit, with a one-second deadline set as the Server would. Without OnLimit it closes conn at once, without
// a handshake.
func (h *TLSHandler) Reject(conn net.Conn) {
	if h.OnLimit == nil {
		return
	}
	tc, err := h.handshake(context.Background(), conn, min(h.handshakeTimeout(), limitTimeout))
	if err != nil {
		return
	}
	// As the Server does before OnLimit.
	_ = conn.SetDeadline(time.Now().Add(limitTimeout))
	h.OnLimit(tc)
}

func (h *TLSHandler) handshakeTimeout() time.Duration {
	if h.HandshakeTimeout > 0 {
		return h.HandshakeTimeout
	}
	return defaultHandshakeTimeout
}

// handshake runs the server handshake on conn within timeout, or until
// ctx is cancelled, and clears the deadline it set.
func (h *TLSHandler) handshake(ctx context.Context, conn net.Conn, timeout time.Duration) (*tls.Conn, error) {
	tc := tls.Server(conn, h.Config)
	// The deadline bounds the handshake's writes too, which the context
	// alone would not if the client never reads.
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		return nil, err
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return tc, nil
}
