// Package wstest is the harness of the WebSocket tests: a server (a
// websocket.Handler) on a loopback port, gorilla clients dialled to it,
// and a client's net.Conn over a WebSocket connection for the protocol
// clients. Package websocket's tests, the integration tests of
// internal/e2e and cmd/junction's share it; no production code may
// import it (internal/lint). It imports nothing of ours, so that package
// websocket's own tests can use it.
package wstest

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	gws "github.com/gorilla/websocket"
)

// Server is what Serve serves: a websocket.Handler.
type Server interface {
	Serve(l net.Listener) error
	Close() error
}

// Serve serves h on 127.0.0.1 (a free port) and returns its address
// (host:port); the test's cleanup closes h and checks that Serve
// returned http.ErrServerClosed.
func Serve(t testing.TB, h Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- h.Serve(l) }()
	t.Cleanup(func() {
		h.Close()
		select {
		case err := <-errc:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve = %v, want http.ErrServerClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return l.Addr().String()
}

// Dial opens a WebSocket client connection offering subprotocols,
// closed when the test ends.
func Dial(t testing.TB, url string, subprotocols ...string) *gws.Conn {
	t.Helper()
	ws, resp, err := Dialer(subprotocols...).Dial(url, nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s %v: %v (status %d)", url, subprotocols, err, status)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

// Dialer is a gorilla dialer offering subprotocols, its handshake
// bounded by 5 s.
func Dialer(subprotocols ...string) *gws.Dialer {
	return &gws.Dialer{HandshakeTimeout: 5 * time.Second, Subprotocols: subprotocols}
}

// ReadMessage reads one message within 5 s.
func ReadMessage(t testing.TB, ws *gws.Conn) (int, []byte) {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	typ, p, err := ws.ReadMessage()
	if err != nil {
		t.Fatalf("read message: %v", err)
	}
	return typ, p
}

// ExpectClose reads until the connection ends, which must be with a
// close frame of code.
func ExpectClose(t testing.TB, ws *gws.Conn, code int) {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, _, err := ws.ReadMessage()
		if err == nil {
			continue
		}
		var ce *gws.CloseError
		if !errors.As(err, &ce) || ce.Code != code {
			t.Fatalf("connection ended with %v, want close code %d", err, code)
		}
		return
	}
}

// Conn is a client's net.Conn over a WebSocket connection, for a
// protocol's client: Read reads the data messages' bytes in order (a
// close frame reads as io.EOF), each Write is one binary message, Close
// sends a normal close frame first. One reader at a time; writers are
// serialised.
//
// It is also a sync.Locker, held across the writes of one packet by a
// client that writes a packet in several Writes and takes the lock when
// its connection offers one: paho.golang writes an MQTT 5 packet as its
// fixed header and then each part, and its pinger writes the first
// PINGREQ from another goroutine as soon as the client is connected.
// Over TCP a packet's parts go out in one writev; here each is a
// message, and without the lock a PINGREQ landed inside a SUBSCRIBE,
// which the broker rightly refused as malformed (cmd/junction's
// TestMQTT5OverWebSocketKeepsPacketsWhole).
type Conn struct {
	ws  *gws.Conn
	r   io.Reader  // the message being read; only the reading goroutine uses it
	wmu sync.Mutex // one message at a time (gorilla allows one writer)
	pmu sync.Mutex // one packet at a time: Lock and Unlock
}

var _ sync.Locker = (*Conn)(nil)

// Lock and Unlock hold the connection for one packet's writes.
func (c *Conn) Lock()   { c.pmu.Lock() }
func (c *Conn) Unlock() { c.pmu.Unlock() }

// NewConn returns ws as a net.Conn.
func NewConn(ws *gws.Conn) *Conn { return &Conn{ws: ws} }

func (c *Conn) Read(p []byte) (int, error) {
	for {
		if c.r != nil {
			n, err := c.r.Read(p)
			if err == io.EOF {
				c.r = nil
				if n > 0 {
					return n, nil
				}
				continue
			}
			return n, err
		}
		_, r, err := c.ws.NextReader()
		if err != nil {
			var ce *gws.CloseError
			if errors.As(err, &ce) {
				return 0, io.EOF
			}
			return 0, err
		}
		c.r = r
	}
}

func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.WriteMessage(gws.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *Conn) Close() error {
	c.ws.WriteControl(gws.CloseMessage, gws.FormatCloseMessage(gws.CloseNormalClosure, ""), time.Now().Add(time.Second))
	return c.ws.Close()
}

func (c *Conn) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
func (c *Conn) SetDeadline(t time.Time) error {
	c.ws.SetReadDeadline(t)
	return c.ws.SetWriteDeadline(t)
}
