package websocket_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	gws "github.com/gorilla/websocket"

	jws "github.com/junctionmq/junction/websocket"
)

// These are package websocket's test helpers, for a Handler seen from
// outside the package.

// served is a Handler serving on a loopback port through Handler.Serve.
type served struct {
	h    *jws.Handler
	addr string // host:port
	errc chan error
}

// serve starts h on 127.0.0.1:0; cleanup closes it and checks that
// Serve returned http.ErrServerClosed.
func serve(t *testing.T, cfg jws.Config) *served {
	t.Helper()
	h, err := jws.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &served{h: h, addr: l.Addr().String(), errc: make(chan error, 1)}
	go func() { s.errc <- h.Serve(l) }()
	t.Cleanup(func() {
		h.Close()
		select {
		case err := <-s.errc:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve = %v, want http.ErrServerClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return s
}

func (s *served) url(path string) string { return "ws://" + s.addr + path }

// dial opens a WebSocket client connection offering subprotocols.
func dial(t *testing.T, url string, subprotocols ...string) *gws.Conn {
	t.Helper()
	ws, resp, err := dialer(subprotocols...).Dial(url, nil)
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

func dialer(subprotocols ...string) *gws.Dialer {
	return &gws.Dialer{HandshakeTimeout: 5 * time.Second, Subprotocols: subprotocols}
}

// readMessage reads one message with a deadline.
func readMessage(t *testing.T, ws *gws.Conn) (int, []byte) {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	typ, p, err := ws.ReadMessage()
	if err != nil {
		t.Fatalf("read message: %v", err)
	}
	return typ, p
}

// expectClose reads until the connection ends, which must be with a
// close frame of code.
func expectClose(t *testing.T, ws *gws.Conn, code int) {
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

// wsConn is a client's net.Conn over a WebSocket connection: each Write
// one binary message, Read the messages' bytes in order. One reader and
// one writer at a time, as gorilla allows.
type wsConn struct {
	ws *gws.Conn
	r  io.Reader // the message being read, if any
}

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			_, r, err := c.ws.NextReader()
			if err != nil {
				return 0, err
			}
			c.r = r
		}
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
}

func (c *wsConn) Write(p []byte) (int, error) {
	if err := c.ws.WriteMessage(gws.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsConn) Close() error                       { return c.ws.Close() }
func (c *wsConn) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
func (c *wsConn) SetDeadline(t time.Time) error {
	c.ws.SetReadDeadline(t)
	return c.ws.SetWriteDeadline(t)
}
