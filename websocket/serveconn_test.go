package websocket

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	gws "github.com/gorilla/websocket"

	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/websocket/wstest"
)

// serveOne runs h.ServeConn on nc and reports its return on the channel.
func serveOne(ctx context.Context, h *Handler, nc net.Conn) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeConn(ctx, nc)
	}()
	return done
}

func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("ServeConn did not return after %s", what)
	}
}

// acceptOne serves the first connection to a loopback listener with
// h.ServeConn(ctx, ...); done is closed when ServeConn returns.
func acceptOne(t *testing.T, ctx context.Context, h *Handler) (addr string, done <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		nc, err := l.Accept()
		l.Close()
		if err == nil {
			h.ServeConn(ctx, nc)
		}
	}()
	return l.Addr().String(), ch
}

func newHandler(t *testing.T, cfg Config) *Handler {
	t.Helper()
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestServeConnLoopback serves one accepted TCP connection: a session,
// then ServeConn returns when the client leaves, with no goroutine left.
func TestServeConnLoopback(t *testing.T) {
	base := runtime.NumGoroutine()
	h := newHandler(t, Config{Handlers: allHandlers(echo)})
	addr, done := acceptOne(t, context.Background(), h)
	ws, _, err := wstest.Dialer().Dial("ws://"+addr+"/stomp", nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.WriteMessage(gws.TextMessage, []byte("ping"))
	if _, p := wstest.ReadMessage(t, ws); string(p) != "ping" {
		t.Fatalf("echo %q", p)
	}
	ws.WriteControl(gws.CloseMessage, gws.FormatCloseMessage(gws.CloseNormalClosure, ""), time.Now().Add(time.Second))
	wstest.ExpectClose(t, ws, gws.CloseNormalClosure)
	ws.Close()
	waitDone(t, done, "the session ended")
	h.Close()
	checkGoroutines(t, base)
}

// TestServeConnPipe serves a net.Pipe end: the listener needs no socket.
func TestServeConnPipe(t *testing.T) {
	base := runtime.NumGoroutine()
	h := newHandler(t, Config{Handlers: allHandlers(echo)})
	srvEnd, cliEnd := net.Pipe()
	done := serveOne(context.Background(), h, srvEnd)
	d := wstest.Dialer("mqtt")
	d.NetDialContext = func(context.Context, string, string) (net.Conn, error) { return cliEnd, nil }
	ws, _, err := d.Dial("ws://pipe/", nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.WriteMessage(gws.BinaryMessage, []byte("over a pipe"))
	if _, p := wstest.ReadMessage(t, ws); string(p) != "over a pipe" {
		t.Fatalf("echo %q", p)
	}
	ws.Close() // no close frame: the session still ends
	waitDone(t, done, "the client vanished")
	h.Close()
	checkGoroutines(t, base)
}

// TestServeConnNotUpgraded: a plain request is answered and ServeConn
// returns when the exchange ends.
func TestServeConnNotUpgraded(t *testing.T) {
	base := runtime.NumGoroutine()
	h := newHandler(t, Config{Handlers: allHandlers(echo)})
	srvEnd, cliEnd := net.Pipe()
	done := serveOne(context.Background(), h, srvEnd)
	cliEnd.SetDeadline(time.Now().Add(5 * time.Second))
	go cliEnd.Write([]byte("GET /stomp HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(cliEnd), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("status %d, want 426", resp.StatusCode)
	}
	waitDone(t, done, "a refused request")
	cliEnd.Close()
	h.Close()
	checkGoroutines(t, base)
}

// TestServeConnCancel: cancelling ServeConn's context ends the session
// like a shutdown (close 1001), and a connection that never sent a
// request.
func TestServeConnCancel(t *testing.T) {
	base := runtime.NumGoroutine()
	h := newHandler(t, Config{Handlers: map[string]func(context.Context, net.Conn){
		STOMP: func(ctx context.Context, nc net.Conn) {
			<-ctx.Done()
			nc.Write([]byte("goodbye"))
		},
	}})
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := acceptOne(t, ctx, h)
	ws, _, err := wstest.Dialer("v12.stomp").Dial("ws://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	testserve.Eventually(t, "the session", func() bool { return h.Connections() == 1 })
	cancel()
	if _, p := wstest.ReadMessage(t, ws); string(p) != "goodbye" {
		t.Fatalf("got %q", p)
	}
	wstest.ExpectClose(t, ws, gws.CloseGoingAway)
	waitDone(t, done, "its context was cancelled")
	ws.Close()

	// Silent: no request yet.
	srvEnd, cliEnd := net.Pipe()
	ctx, cancel = context.WithCancel(context.Background())
	done = serveOne(ctx, h, srvEnd)
	cancel()
	waitDone(t, done, "cancelled before any request")
	cliEnd.Close()

	// Already cancelled.
	srvEnd, cliEnd = net.Pipe()
	done = serveOne(ctx, h, srvEnd)
	waitDone(t, done, "given a cancelled context")
	cliEnd.Close()
	h.Close()
	checkGoroutines(t, base)
}

// TestServeConnShutdown: Handler.Shutdown ends connections served by
// ServeConn, upgraded or not, and later ones are closed at once.
func TestServeConnShutdown(t *testing.T) {
	base := runtime.NumGoroutine()
	h, err := New(Config{Handlers: allHandlers(echo)})
	if err != nil {
		t.Fatal(err)
	}
	addr, upgraded := acceptOne(t, context.Background(), h)
	ws, _, err := wstest.Dialer("mqtt").Dial("ws://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	srvEnd, cliEnd := net.Pipe()
	idle := serveOne(context.Background(), h, srvEnd)
	go cliEnd.Write([]byte("GET / HTTP/1.1\r\n")) // a request that never ends
	testserve.Eventually(t, "the session", func() bool { return h.Connections() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wstest.ExpectClose(t, ws, gws.CloseGoingAway)
	waitDone(t, upgraded, "Shutdown (upgraded)")
	waitDone(t, idle, "Shutdown (request unfinished)")

	srvEnd2, cliEnd2 := net.Pipe()
	waitDone(t, serveOne(context.Background(), h, srvEnd2), "Shutdown (new connection)")
	cliEnd2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := cliEnd2.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection served after Shutdown")
	}
	ws.Close()
	cliEnd.Close()
	cliEnd2.Close()
	checkGoroutines(t, base)
}

// TestServeConnMaxHeader: the request header is bounded.
func TestServeConnMaxHeader(t *testing.T) {
	h := newHandler(t, Config{Handlers: allHandlers(echo), MaxHeaderBytes: 1024})
	srvEnd, cliEnd := net.Pipe()
	done := serveOne(context.Background(), h, srvEnd)
	cliEnd.SetDeadline(time.Now().Add(5 * time.Second))
	go cliEnd.Write([]byte("GET / HTTP/1.1\r\nHost: b\r\nX-Big: " + strings.Repeat("a", 8192) + "\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(cliEnd), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
	cliEnd.Close()
	waitDone(t, done, "an oversized header")
}

// prefixConn returns prefix before reading from Conn, as a one-port
// listener hands on a connection whose first bytes it read.
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

// TestServeConnPrefixed: a connection whose first bytes were read by a
// detector is served with them put back.
func TestServeConnPrefixed(t *testing.T) {
	h := newHandler(t, Config{Handlers: allHandlers(echo)})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := l.Accept()
		if err != nil {
			return
		}
		prefix := make([]byte, 8)
		if _, err := io.ReadFull(nc, prefix); err != nil {
			nc.Close()
			return
		}
		h.ServeConn(context.Background(), &prefixConn{Conn: nc, prefix: prefix})
	}()
	ws, _, err := wstest.Dialer("amqp").Dial("ws://"+l.Addr().String()+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.WriteMessage(gws.BinaryMessage, []byte("AMQP\x00\x01\x00\x00"))
	if _, p := wstest.ReadMessage(t, ws); string(p) != "AMQP\x00\x01\x00\x00" {
		t.Fatalf("echo %q", p)
	}
	ws.Close()
	waitDone(t, done, "the client left")
}
