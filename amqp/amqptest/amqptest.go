// Package amqptest is the harness of the AMQP tests: a broker with an
// AMQP 1.0 listener on a loopback port and go-amqp clients dialled to it.
// Package amqp's tests and the integration tests of internal/e2e share
// it; no production code may import it (internal/lint).
package amqptest

import (
	"context"
	"errors"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
)

// Broker is a broker with an AMQP listener on a loopback port.
type Broker struct {
	Addr   string       // amqp://host:port
	Core   *core.Broker // the broker
	Server *amqp.Server // its AMQP server
	Stop   func()       // stops the listener and waits for the connections' handlers (also at cleanup)
}

// Start starts a broker with bcfg (expired messages scanned every 20 ms
// unless bcfg says) and an AMQP server with cfg over it, both stopped when
// the test ends.
func Start(t *testing.T, cfg amqp.Config, bcfg core.Config) *Broker {
	t.Helper()
	if bcfg.ExpiryScanInterval == 0 {
		bcfg.ExpiryScanInterval = 20 * time.Millisecond
	}
	b, err := core.New(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := amqp.New(cfg, b)
	t.Cleanup(func() { b.Close() })
	addr, stop := testserve.Serve(t, srv.ServeConn)
	return &Broker{Addr: "amqp://" + addr, Core: b, Server: srv, Stop: stop}
}

// Ctx is a context that ends after 10 s, or with the test.
func Ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Dial connects a go-amqp client, closed when the test ends.
func (tb *Broker) Dial(t *testing.T, opts *goamqp.ConnOptions) *goamqp.Conn {
	t.Helper()
	c, err := goamqp.Dial(Ctx(t), tb.Addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Session dials a connection and begins a session on it.
func (tb *Broker) Session(t *testing.T, opts *goamqp.ConnOptions) *goamqp.Session {
	t.Helper()
	s, err := tb.Dial(t, opts).NewSession(Ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// NewSender attaches a sender link to target.
func NewSender(t *testing.T, s *goamqp.Session, target string, opts *goamqp.SenderOptions) *goamqp.Sender {
	t.Helper()
	snd, err := s.NewSender(Ctx(t), target, opts)
	if err != nil {
		t.Fatal(err)
	}
	return snd
}

// NewReceiver attaches a receiver link to source.
func NewReceiver(t *testing.T, s *goamqp.Session, source string, opts *goamqp.ReceiverOptions) *goamqp.Receiver {
	t.Helper()
	r, err := s.NewReceiver(Ctx(t), source, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Send sends m, failing the test if go-amqp returns an error.
func Send(t *testing.T, snd *goamqp.Sender, m *goamqp.Message) {
	t.Helper()
	if err := snd.Send(Ctx(t), m, nil); err != nil {
		t.Fatal(err)
	}
}

// Text is a message whose one data section is body.
func Text(body string) *goamqp.Message { return goamqp.NewMessage([]byte(body)) }

// Receive waits for one message and accepts it.
func Receive(t *testing.T, r *goamqp.Receiver) *goamqp.Message {
	t.Helper()
	m := ReceiveOnly(t, r)
	if err := r.AcceptMessage(Ctx(t), m); err != nil {
		t.Fatal(err)
	}
	return m
}

// ReceiveOnly waits for one message and leaves it unsettled.
func ReceiveOnly(t *testing.T, r *goamqp.Receiver) *goamqp.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := r.Receive(ctx, nil)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return m
}

// ExpectNone checks that nothing arrives within a short wait.
func ExpectNone(t *testing.T, r *goamqp.Receiver) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	m, err := r.Receive(ctx, nil)
	if err == nil {
		t.Fatalf("unexpected message %q", m.GetData())
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive: %v", err)
	}
}

// QueueDepth is the depth of queue name, or -1 if there is none.
func QueueDepth(tb *Broker, name string) int64 {
	if q := tb.Core.Queue(name); q != nil {
		return q.Stats().Depth
	}
	return -1
}

// ConnInfo returns the only AMQP connection's information.
func ConnInfo(t *testing.T, b *core.Broker) core.ConnectionInfo {
	t.Helper()
	for _, c := range b.Connections() {
		if c.Protocol == "amqp" {
			return c
		}
	}
	t.Fatal("no AMQP connection")
	return core.ConnectionInfo{}
}

// WantResourceLimit checks that err is the rejection of a send with
// amqp:resource-limit-exceeded.
func WantResourceLimit(t *testing.T, err error) {
	t.Helper()
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondResourceLimitExceeded {
		t.Fatalf("send: got %v, want a rejection with %s", err, goamqp.ErrCondResourceLimitExceeded)
	}
}
