package stomp_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/stompclient"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/stomp"
)

// testBroker is a broker with a STOMP listener on a loopback port,
// served by a minimal accept loop (the real listener lives in
// transports; these tests exercise the protocol).
type testBroker struct {
	addr   string
	broker *core.Broker
	srv    *stomp.Server
}

func startBroker(t *testing.T, cfg stomp.Config, settings ...core.AddressSettings) *testBroker {
	t.Helper()
	b, err := core.New(core.Config{AddressSettings: settings, ExpiryScanInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := stomp.New(cfg, b)
	t.Cleanup(func() { b.Close() }) // runs after the server's stop (cleanups run last-in first-out)
	addr, _ := testserve.Serve(t, srv.ServeConn)
	return &testBroker{addr: addr, broker: b, srv: srv}
}

func (tb *testBroker) dial(t *testing.T, opts ...func(*gostomp.Conn) error) *gostomp.Conn {
	t.Helper()
	opts = append([]func(*gostomp.Conn) error{gostomp.ConnOpt.HeartBeat(0, 0), quiet}, opts...)
	c, err := gostomp.Dial("tcp", tb.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.MustDisconnect() })
	return c
}

func subscribe(t *testing.T, c *gostomp.Conn, dest string, ack gostomp.AckMode, opts ...func(*frame.Frame) error) *gostomp.Subscription {
	t.Helper()
	s, err := c.Subscribe(dest, ack, opts...)
	if err != nil {
		t.Fatal(err)
	}
	barrier(t, c)
	return s
}

// barrier returns once the broker has handled every frame c sent before:
// frames of a connection are handled in order, so the receipt of a later
// SEND proves it (go-stomp's Subscribe does not wait for the broker).
func barrier(t *testing.T, c *gostomp.Conn) {
	t.Helper()
	if err := c.Send("/queue/barrier", "", nil, gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
}

func send(t *testing.T, c *gostomp.Conn, dest, body string, opts ...func(*frame.Frame) error) {
	t.Helper()
	if err := c.Send(dest, "text/plain", []byte(body), opts...); err != nil {
		t.Fatal(err)
	}
}

// next waits for one message.
func next(t *testing.T, s *gostomp.Subscription) *gostomp.Message {
	t.Helper()
	select {
	case m, ok := <-s.C:
		if !ok {
			t.Fatal("subscription closed")
		}
		if m.Err != nil {
			t.Fatalf("subscription error: %v", m.Err)
		}
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5s")
	}
	return nil
}

func none(t *testing.T, s *gostomp.Subscription, d time.Duration) {
	t.Helper()
	select {
	case m := <-s.C:
		t.Fatalf("unexpected message %q", m.Body)
	case <-time.After(d):
	}
}

// rawConn speaks STOMP by hand, for what a well-behaved client cannot do.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func (tb *testBroker) raw(t *testing.T) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", tb.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (r *rawConn) write(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.nc, s); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) connect(headers string) string {
	r.t.Helper()
	r.write("CONNECT\naccept-version:1.2\nhost:/\n" + headers + "\n\x00")
	f := r.frame()
	if !strings.HasPrefix(f, "CONNECTED\n") {
		r.t.Fatalf("want CONNECTED, got %q", f)
	}
	return f
}

// frame reads one frame (up to its NUL), skipping heart-beat EOLs.
func (r *rawConn) frame() string {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		s, err := r.br.ReadString(0)
		if err != nil {
			r.t.Fatalf("reading a frame: %v (got %q)", err, s)
		}
		s = strings.TrimLeft(s, "\r\n")
		if s != "" {
			return strings.TrimSuffix(s, "\x00")
		}
	}
}

// closed asserts the server closes the connection.
func (r *rawConn) closed() {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	for {
		_, err := r.br.Read(buf)
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || err != nil && strings.Contains(err.Error(), "reset") {
			return
		}
		if err != nil {
			r.t.Fatalf("want the connection closed, got %v", err)
		}
	}
}

func header(f, name string) string {
	head, _, _ := strings.Cut(f, "\n\n")
	for _, line := range strings.Split(head, "\n")[1:] {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			return v
		}
	}
	return ""
}

// quiet silences go-stomp's logging in tests.
var quiet = stompclient.Quiet
