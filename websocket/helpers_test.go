package websocket

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	gws "github.com/gorilla/websocket"
)

// served is a Handler serving on a loopback port through Handler.Serve.
type served struct {
	h    *Handler
	addr string // host:port
	errc chan error
}

// serve starts h on 127.0.0.1:0; cleanup closes it and checks that
// Serve returned http.ErrServerClosed.
func serve(t *testing.T, cfg Config) *served {
	t.Helper()
	h, err := New(cfg)
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

// expectClose reads until the connection ends and checks the close code.
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

// echo copies what it reads back, until the connection or ctx ends.
func echo(ctx context.Context, nc net.Conn) {
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	io.Copy(nc, nc)
}

// checkGoroutines fails if, within a few seconds, the goroutines do not
// come back to at most base (those of other tests are not running:
// callers are not parallel).
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("%d goroutines, want at most %d:\n%s", runtime.NumGoroutine(), base, buf[:n])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// httpGet sends a plain GET and returns the status, the headers and the
// body.
func httpGet(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
