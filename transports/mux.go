package transports

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"time"
)

// Detection errors, given to [Mux].OnUnknown.
var (
	// ErrUnknownProtocol means MaxPrefix bytes arrived and no detector
	// recognised them.
	ErrUnknownProtocol = errors.New("transports: unknown protocol")

	// ErrDetectTimeout means DetectTimeout passed before a detector
	// recognised the bytes received (perhaps none).
	ErrDetectTimeout = errors.New("transports: no protocol recognised before the detection timeout")
)

const (
	defaultDetectTimeout = 5 * time.Second
	defaultMaxPrefix     = 64

	// rejectDetectTimeout bounds detection in [Mux.Reject], which runs on
	// a connection over the limit.
	rejectDetectTimeout = time.Second
)

// Protocol is one protocol a [Mux] can recognise.
type Protocol struct {
	// Name names the protocol in logs, e.g. "stomp".
	Name string

	// Detect reports whether prefix, the first bytes the client sent,
	// begin this protocol. It is called with a growing prefix (each call
	// sees every byte received so far) and must answer false while the
	// bytes are too few to tell. It must be quick and must not retain
	// prefix. Required.
	Detect func(prefix []byte) bool

	// Handler serves a connection whose prefix Detect recognised. Its
	// conn replays the prefix before reading on. Required.
	Handler Handler

	// Reject, if set, is given a connection of this protocol that the
	// Server turned away over its MaxConns (through [Mux.Reject]), so
	// that it can tell the client why. Its conn replays the prefix too.
	Reject func(conn net.Conn)
}

// Mux serves several protocols on one listener: it reads the first bytes
// of each connection, asks each Protocol's Detect in turn, and hands the
// connection to the first that recognises them. It imports no protocol:
// cmd registers the detectors and handlers.
//
//	mux := &transports.Mux{Protocols: []transports.Protocol{
//		{Name: "http", Detect: transports.DetectHTTP, Handler: wsHandler.ServeConn},
//		{Name: "amqp", Detect: amqp.Detect, Handler: amqpSrv.ServeConn, Reject: amqpSrv.Reject},
//		{Name: "stomp", Detect: stomp.Detect, Handler: stompSrv.ServeConn, Reject: stompSrv.Reject},
//	}}
//	srv := &transports.Server{Name: "all", Handler: mux.ServeConn, OnLimit: mux.Reject}
//
// The zero value recognises nothing. Fields must not be changed once the
// Mux is in use; it may serve any number of connections at once.
type Mux struct {
	// Protocols are tried in order on every prefix; the first whose
	// Detect answers true gets the connection, so order settles overlaps.
	Protocols []Protocol

	// DetectTimeout bounds the whole detection, from the first read: a
	// client that sends nothing, or too little, or sends it a byte at a
	// time, is closed once it passes. Zero means 5 seconds.
	DetectTimeout time.Duration

	// MaxPrefix is the most bytes read before giving up. Zero means 64,
	// enough for every detector of ours.
	MaxPrefix int

	// OnUnknown, if set, is called once for each connection closed
	// because no Protocol recognised it, before the Mux returns (the
	// Server then closes conn). prefix holds the bytes received, valid
	// only during the call; err says why detection stopped:
	// [ErrUnknownProtocol], [ErrDetectTimeout], io.EOF (the peer closed,
	// as TCP health checks do, with an empty prefix) or another read
	// error. It is not called for connections cut by shutdown.
	OnUnknown func(conn net.Conn, prefix []byte, err error)
}

// ServeConn detects conn's protocol and serves it with that Protocol's
// Handler, or returns (the Server then closes conn) if none recognises
// it. It has the [Handler] signature. Detection runs in the caller's
// goroutine, under a read deadline that is cleared before the hand-over,
// and stops at once when ctx is cancelled.
func (m *Mux) ServeConn(ctx context.Context, conn net.Conn) {
	p, pc, err := m.detect(ctx, conn, m.detectTimeout())
	if err != nil {
		if ctx.Err() == nil && m.OnUnknown != nil {
			m.OnUnknown(conn, pc.prefix, err)
		}
		return
	}
	p.Handler(ctx, pc)
}

// Reject is meant for [Server].OnLimit: it detects conn's protocol,
// within a second, and passes conn to that Protocol's Reject, if any.
// The Server closes conn afterwards in every case.
func (m *Mux) Reject(conn net.Conn) {
	p, pc, err := m.detect(context.Background(), conn, min(m.detectTimeout(), rejectDetectTimeout))
	if err != nil || p.Reject == nil {
		return
	}
	p.Reject(pc)
}

func (m *Mux) detectTimeout() time.Duration {
	if m.DetectTimeout > 0 {
		return m.DetectTimeout
	}
	return defaultDetectTimeout
}

// detect reads from conn until a Protocol recognises the prefix. It
// returns that Protocol and a conn that replays the prefix, or an error
// and the prefix read (in the returned prefixConn, never nil).
func (m *Mux) detect(ctx context.Context, conn net.Conn, timeout time.Duration) (*Protocol, *prefixConn, error) {
	size := m.MaxPrefix
	if size <= 0 {
		size = defaultMaxPrefix
	}
	pc := &prefixConn{Conn: conn}
	if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, pc, err
	}
	// A cancelled ctx (shutdown) cuts the read short.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	buf := make([]byte, size)
	n := 0
	for {
		k, err := conn.Read(buf[n:])
		n += k
		pc.prefix = buf[:n]
		if k > 0 {
			for i := range m.Protocols {
				if p := &m.Protocols[i]; p.Detect(pc.prefix) {
					if !stop() {
						return nil, pc, ctx.Err() // cancelled: the deadline may be in the past
					}
					if err := conn.SetReadDeadline(time.Time{}); err != nil {
						return nil, pc, err
					}
					return p, pc, nil
				}
			}
		}
		switch {
		case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
			if ctx.Err() != nil {
				return nil, pc, ctx.Err()
			}
			return nil, pc, ErrDetectTimeout
		case err != nil:
			return nil, pc, err
		case n == len(buf):
			return nil, pc, ErrUnknownProtocol
		}
	}
}

// httpMethods are the request methods [DetectHTTP] recognises, each
// followed by the space that ends it.
var httpMethods = [][]byte{
	[]byte("GET "), []byte("HEAD "), []byte("POST "), []byte("PUT "), []byte("DELETE "),
	[]byte("OPTIONS "), []byte("PATCH "), []byte("CONNECT "), []byte("TRACE "),
}

// DetectHTTP reports whether prefix begins an HTTP/1 request: a method
// (GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, CONNECT or TRACE)
// followed by a space. The space keeps HTTP apart from STOMP, whose
// "CONNECT" is followed by an end of line. For a [Mux] Protocol that
// leads to HTTP, e.g. WebSocket upgrades: it recognises every method, so
// that the HTTP side can answer a request it does not serve with an HTTP
// error rather than a bare close.
func DetectHTTP(prefix []byte) bool {
	for _, m := range httpMethods {
		if bytes.HasPrefix(prefix, m) {
			return true
		}
	}
	return false
}

// DetectTLS reports whether prefix begins a TLS connection: a handshake
// record (content type 22) of TLS 1.0 to 1.3 record versions (3.0x),
// which is how every ClientHello starts. With it a [Mux] can serve TLS
// and plaintext clients on one port: register a Protocol whose Handler
// is a [TLSHandler] around a second Mux for the decrypted stream.
func DetectTLS(prefix []byte) bool {
	return len(prefix) >= 3 && prefix[0] == 22 && prefix[1] == 3 && prefix[2] <= 4
}

// prefixConn is a net.Conn that returns prefix, the bytes read during
// detection, before reading from Conn. Only Read changes; every other
// method is Conn's, so deadlines and Close work as before. The bytes
// are consumed by Read, the one goroutine that reads.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Buffered is the number of detection bytes not yet replayed: with
// NetConn, it lets a front-end wait on the socket without a read (and
// its buffer) once they are read (internal/inbound.Replayer).
func (c *prefixConn) Buffered() int { return len(c.prefix) }

// NetConn returns the wrapped connection, following [tls.Conn.NetConn].
// Reading from it directly would skip the bytes not yet replayed.
func (c *prefixConn) NetConn() net.Conn { return c.Conn }

// ConnectionState returns the state of the TLS connection c wraps, or a
// zero state (HandshakeComplete false) if it wraps none.
func (c *prefixConn) ConnectionState() tls.ConnectionState {
	cs, _ := ConnectionState(c.Conn)
	return cs
}

// ConnectionState returns the TLS state of conn and true if conn is, or
// wraps, a TLS connection whose handshake is complete. It looks through
// the wrappers of this package and any net.Conn that has a
// ConnectionState() tls.ConnectionState method (as *tls.Conn does) or a
// NetConn() net.Conn method.
//
// A protocol package, which may not import this one, gets the same
// answer with the interface alone:
//
//	if c, ok := conn.(interface{ ConnectionState() tls.ConnectionState }); ok && c.ConnectionState().HandshakeComplete {
func ConnectionState(conn net.Conn) (tls.ConnectionState, bool) {
	for conn != nil {
		switch c := conn.(type) {
		case interface{ ConnectionState() tls.ConnectionState }:
			cs := c.ConnectionState()
			return cs, cs.HandshakeComplete
		case interface{ NetConn() net.Conn }:
			conn = c.NetConn()
		default:
			return tls.ConnectionState{}, false
		}
	}
	return tls.ConnectionState{}, false
}

// PeerCertificate returns the client certificate of conn, and true, if
// conn is a TLS connection (see [ConnectionState]) whose client presented
// a certificate that was verified against the configured client CAs. A
// front-end that maps certificates to users (SASL EXTERNAL) takes the
// name from it: Subject.CommonName, or Subject.String() for the whole
// distinguished name.
func PeerCertificate(conn net.Conn) (*x509.Certificate, bool) {
	cs, ok := ConnectionState(conn)
	if !ok || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return nil, false
	}
	return cs.PeerCertificates[0], true
}
