package websocket

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/websocket/wstest"
)

// served is a Handler serving on a loopback port through Handler.Serve.
type served struct {
	h    *Handler
	addr string // host:port
}

// serve starts h on 127.0.0.1:0; cleanup closes it and checks that
// Serve returned http.ErrServerClosed (wstest.Serve).
func serve(t *testing.T, cfg Config) *served {
	t.Helper()
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &served{h: h, addr: wstest.Serve(t, h)}
}

func (s *served) url(path string) string { return "ws://" + s.addr + path }

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
