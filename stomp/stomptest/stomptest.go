// Package stomptest is the harness of the STOMP tests: a broker with a
// STOMP listener on a loopback port, go-stomp clients dialled to it, and
// a raw connection for what a well-behaved client cannot do. Package
// stomp's tests and the integration tests of internal/e2e share it; no
// production code may import it (internal/lint).
package stomptest

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

// Broker is a broker with a STOMP listener on a loopback port,
// served by a minimal accept loop (the real listener lives in
// transports; these tests exercise the protocol).
type Broker struct {
	Addr   string        // host:port
	Core   *core.Broker  // the broker
	Server *stomp.Server // its STOMP server
	Stop   func()        // stops the listener and waits for the connections' handlers (also at cleanup)
}

// Start starts a broker (expired messages scanned every 20 ms) with a
// STOMP server over it, both stopped when the test ends.
func Start(t *testing.T, cfg stomp.Config, settings ...core.AddressSettings) *Broker {
	t.Helper()
	return StartWith(t, core.Config{AddressSettings: settings, ExpiryScanInterval: 20 * time.Millisecond}, cfg)
}

// StartWith starts a broker with bcfg and a STOMP server with cfg.
func StartWith(t *testing.T, bcfg core.Config, cfg stomp.Config) *Broker {
	t.Helper()
	b, err := core.New(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	return Serve(t, b, cfg)
}

// Serve serves a STOMP server with cfg over b on a loopback port; b is
// closed when the test ends, after the server has stopped.
func Serve(t *testing.T, b *core.Broker, cfg stomp.Config) *Broker {
	t.Helper()
	srv := stomp.New(cfg, b)
	t.Cleanup(func() { b.Close() }) // runs after the server's stop (cleanups run last-in first-out)
	addr, stop := testserve.Serve(t, srv.ServeConn)
	return &Broker{Addr: addr, Core: b, Server: srv, Stop: stop}
}

// Dial connects a go-stomp client without heart-beats; the test's
// cleanup disconnects it.
func (tb *Broker) Dial(t *testing.T, opts ...func(*gostomp.Conn) error) *gostomp.Conn {
	t.Helper()
	opts = append([]func(*gostomp.Conn) error{gostomp.ConnOpt.HeartBeat(0, 0), Quiet}, opts...)
	c, err := gostomp.Dial("tcp", tb.Addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.MustDisconnect() })
	return c
}

// DialAs connects as user (go-stomp's login header, no passcode).
func (tb *Broker) DialAs(t *testing.T, user string, opts ...func(*gostomp.Conn) error) *gostomp.Conn {
	t.Helper()
	return tb.Dial(t, append([]func(*gostomp.Conn) error{gostomp.ConnOpt.Login(user, "")}, opts...)...)
}

// Subscribe subscribes c to dest and returns once the broker has the
// subscription (see Barrier).
func Subscribe(t *testing.T, c *gostomp.Conn, dest string, ack gostomp.AckMode, opts ...func(*frame.Frame) error) *gostomp.Subscription {
	t.Helper()
	s, err := c.Subscribe(dest, ack, opts...)
	if err != nil {
		t.Fatal(err)
	}
	Barrier(t, c)
	return s
}

// Barrier returns once the broker has handled every frame c sent before:
// frames of a connection are handled in order, so the receipt of a later
// SEND proves it (go-stomp's Subscribe does not wait for the broker).
func Barrier(t *testing.T, c *gostomp.Conn) {
	t.Helper()
	if err := c.Send("/queue/barrier", "", nil, gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
}

// Send sends body as text/plain to dest.
func Send(t *testing.T, c *gostomp.Conn, dest, body string, opts ...func(*frame.Frame) error) {
	t.Helper()
	if err := c.Send(dest, "text/plain", []byte(body), opts...); err != nil {
		t.Fatal(err)
	}
}

// Next waits for one message.
func Next(t *testing.T, s *gostomp.Subscription) *gostomp.Message {
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

// None checks that nothing arrives on s within d.
func None(t *testing.T, s *gostomp.Subscription, d time.Duration) {
	t.Helper()
	select {
	case m := <-s.C:
		t.Fatalf("unexpected message %q", m.Body)
	case <-time.After(d):
	}
}

// RawConn speaks STOMP by hand, for what a well-behaved client cannot do.
type RawConn struct {
	t      *testing.T
	Conn   net.Conn
	Reader *bufio.Reader
}

// Raw opens a RawConn to the broker, closed when the test ends.
func (tb *Broker) Raw(t *testing.T) *RawConn {
	t.Helper()
	nc, err := net.Dial("tcp", tb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &RawConn{t: t, Conn: nc, Reader: bufio.NewReader(nc)}
}

// Write writes s as it is.
func (r *RawConn) Write(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.Conn, s); err != nil {
		r.t.Fatal(err)
	}
}

// Connect sends a STOMP 1.2 CONNECT with headers (each line ending in
// "\n") and returns the CONNECTED frame, failing the test otherwise.
func (r *RawConn) Connect(headers string) string {
	r.t.Helper()
	r.Write("CONNECT\naccept-version:1.2\nhost:/\n" + headers + "\n\x00")
	f := r.Frame()
	if !strings.HasPrefix(f, "CONNECTED\n") {
		r.t.Fatalf("want CONNECTED, got %q", f)
	}
	return f
}

// Frame reads one frame (up to its NUL), skipping heart-beat EOLs.
func (r *RawConn) Frame() string {
	r.t.Helper()
	r.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		s, err := r.Reader.ReadString(0)
		if err != nil {
			r.t.Fatalf("reading a frame: %v (got %q)", err, s)
		}
		s = strings.TrimLeft(s, "\r\n")
		if s != "" {
			return strings.TrimSuffix(s, "\x00")
		}
	}
}

// Closed asserts the server closes the connection.
func (r *RawConn) Closed() {
	r.t.Helper()
	r.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	for {
		_, err := r.Reader.Read(buf)
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || err != nil && strings.Contains(err.Error(), "reset") {
			return
		}
		if err != nil {
			r.t.Fatalf("want the connection closed, got %v", err)
		}
	}
}

// Header returns the value of header name in frame f ("" if none).
func Header(f, name string) string {
	head, _, _ := strings.Cut(f, "\n\n")
	for _, line := range strings.Split(head, "\n")[1:] {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			return v
		}
	}
	return ""
}

// Quiet silences go-stomp's logging in tests.
var Quiet = stompclient.Quiet
