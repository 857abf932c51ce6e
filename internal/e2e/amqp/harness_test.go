package amqp_test

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

// testBroker is a broker with an AMQP listener on a loopback port.
type testBroker struct {
	addr   string
	broker *core.Broker
	srv    *amqp.Server
	stop   func()
}

func startBroker(t *testing.T, cfg amqp.Config, bcfg core.Config) *testBroker {
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
	return &testBroker{addr: "amqp://" + addr, broker: b, srv: srv, stop: stop}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (tb *testBroker) dial(t *testing.T, opts *goamqp.ConnOptions) *goamqp.Conn {
	t.Helper()
	c, err := goamqp.Dial(ctxT(t), tb.addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (tb *testBroker) session(t *testing.T, opts *goamqp.ConnOptions) *goamqp.Session {
	t.Helper()
	s, err := tb.dial(t, opts).NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newSender(t *testing.T, s *goamqp.Session, target string, opts *goamqp.SenderOptions) *goamqp.Sender {
	t.Helper()
	snd, err := s.NewSender(ctxT(t), target, opts)
	if err != nil {
		t.Fatal(err)
	}
	return snd
}

func newReceiver(t *testing.T, s *goamqp.Session, source string, opts *goamqp.ReceiverOptions) *goamqp.Receiver {
	t.Helper()
	r, err := s.NewReceiver(ctxT(t), source, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func send(t *testing.T, snd *goamqp.Sender, m *goamqp.Message) {
	t.Helper()
	if err := snd.Send(ctxT(t), m, nil); err != nil {
		t.Fatal(err)
	}
}

func text(body string) *goamqp.Message { return goamqp.NewMessage([]byte(body)) }

// receive waits for one message and accepts it.
func receive(t *testing.T, r *goamqp.Receiver) *goamqp.Message {
	t.Helper()
	m := receiveOnly(t, r)
	if err := r.AcceptMessage(ctxT(t), m); err != nil {
		t.Fatal(err)
	}
	return m
}

// receiveOnly waits for one message and leaves it unsettled.
func receiveOnly(t *testing.T, r *goamqp.Receiver) *goamqp.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := r.Receive(ctx, nil)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return m
}

// expectNone checks that nothing arrives within a short wait.
func expectNone(t *testing.T, r *goamqp.Receiver) {
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

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func queueDepth(tb *testBroker, name string) int64 {
	if q := tb.broker.Queue(name); q != nil {
		return q.Stats().Depth
	}
	return -1
}
