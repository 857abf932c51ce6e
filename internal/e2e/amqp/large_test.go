package amqp_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"net"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/amqptest"
	"github.com/junctionmq/junction/internal/e2e/e2etest"
	"github.com/junctionmq/junction/internal/testserve"
)

// startLargeBroker starts a broker with a journal and a large-message
// store (threshold 64 KiB); it returns the store's directory.
func startLargeBroker(t *testing.T, cfg amqp.Config) (*amqptest.Broker, string) {
	t.Helper()
	bcfg, dir := e2etest.Large(t)
	return amqptest.Start(t, cfg, bcfg), dir
}

// A go-amqp message of 6 MiB, more than MaxMessageSize, arrives in
// many transfer frames that go to its file as they come, and goes out
// to a go-amqp receiver split into frames from the file; application
// properties and the footer survive. Durable and not, pre-settled
// receiver and not.
func TestLargeMessageStreamed(t *testing.T) {
	tb, dir := startLargeBroker(t, amqp.Config{MaxMessageSize: 4 << 20})
	body := e2etest.Pattern(6<<20 + 3)
	sess := tb.Session(t, nil)
	snd := amqptest.NewSender(t, sess, "big", nil)
	for i, durable := range []bool{true, false} {
		m := goamqp.NewMessage(body)
		m.Header = &goamqp.MessageHeader{Durable: durable}
		m.ApplicationProperties = map[string]any{"n": int64(i)}
		m.Footer = goamqp.Annotations{"hash": "x"}
		amqptest.Send(t, snd, m)
		msgs, total, err := tb.Core.Browse("big", 0, 1)
		if err != nil || total != 1 || !msgs[0].Message.Streamed() || msgs[0].Message.Size() != int64(len(body)) {
			t.Fatalf("durable=%v: browse %d %v", durable, total, err)
		}
		if n := e2etest.CountFiles(t, dir); n != 1 {
			t.Fatalf("%d files, want 1", n)
		}
		opts := &goamqp.ReceiverOptions{}
		if i == 1 {
			opts.SettlementMode = goamqp.ReceiverSettleModeFirst.Ptr()
			opts.RequestedSenderSettleMode = goamqp.SenderSettleModeSettled.Ptr()
		}
		r := amqptest.NewReceiver(t, sess, "big", opts)
		// go-amqp copies a message it assembles over and over: slow
		// under the race detector on a busy machine.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		got, err := r.Receive(ctx, nil)
		cancel()
		if err != nil {
			t.Fatalf("durable=%v: receive: %v", durable, err)
		}
		if i == 0 {
			if err := r.AcceptMessage(amqptest.Ctx(t), got); err != nil {
				t.Fatal(err)
			}
		}
		if sha256.Sum256(got.GetData()) != sha256.Sum256(body) {
			t.Fatalf("durable=%v: body of %d bytes differs", durable, len(got.GetData()))
		}
		if got.ApplicationProperties["n"] != int64(i) || got.Footer["hash"] != "x" {
			t.Fatalf("durable=%v: properties %v footer %v", durable, got.ApplicationProperties, got.Footer)
		}
		r.Close(amqptest.Ctx(t))
		got, msgs = nil, nil
		e2etest.EventuallyGC(t, "the file to go with the message", func() bool { return e2etest.CountFiles(t, dir) == 0 })
	}
}

// cutConn fails every write once limit bytes have gone, and closes the
// connection: a client that vanishes mid-message.
type cutConn struct {
	net.Conn
	limit atomic.Int64
}

func (c *cutConn) Write(p []byte) (int, error) {
	if c.limit.Add(-int64(len(p))) < 0 {
		c.Conn.Close()
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

// A sender cut off mid-message leaves no file and no message; one that
// sends more than MaxLargeMessageSize is refused; a small message still
// goes through whole.
func TestLargeMessageCutAndLimits(t *testing.T) {
	tb, dir := startLargeBroker(t, amqp.Config{MaxMessageSize: 4 << 20, MaxLargeMessageSize: 8 << 20})
	nc, err := net.Dial("tcp", tb.Addr[len("amqp://"):])
	if err != nil {
		t.Fatal(err)
	}
	cc := &cutConn{Conn: nc}
	cc.limit.Store(1 << 40)
	conn, err := goamqp.NewConn(amqptest.Ctx(t), cc, nil)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := conn.NewSession(amqptest.Ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	snd := amqptest.NewSender(t, sess, "big", nil)
	cc.limit.Store(3 << 20) // 3 MiB of a 6 MiB message
	m := goamqp.NewMessage(e2etest.Pattern(6 << 20))
	m.Header = &goamqp.MessageHeader{Durable: true}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := snd.Send(ctx, m, nil); err == nil {
		t.Fatal("a cut message was confirmed")
	}
	cancel()
	conn.Close()
	testserve.Eventually(t, "the cut body's file to go", func() bool { return e2etest.CountFiles(t, dir) == 0 })
	time.Sleep(50 * time.Millisecond)
	if q := tb.Core.Queue("big"); q != nil && q.Stats().Depth != 0 {
		t.Fatalf("a cut message was sent: depth %d", q.Stats().Depth)
	}

	sess = tb.Session(t, nil)
	snd = amqptest.NewSender(t, sess, "big", nil)
	if err := snd.Send(amqptest.Ctx(t), goamqp.NewMessage(e2etest.Pattern(9<<20)), nil); err == nil {
		t.Fatal("a message over MaxLargeMessageSize was accepted")
	}
	sess = tb.Session(t, nil)
	snd = amqptest.NewSender(t, sess, "big", nil)
	small := e2etest.Pattern(1000)
	amqptest.Send(t, snd, goamqp.NewMessage(small))
	r := amqptest.NewReceiver(t, sess, "big", nil)
	if got := amqptest.Receive(t, r); !bytes.Equal(got.GetData(), small) {
		t.Fatal("small body differs")
	}
	if n := e2etest.CountFiles(t, dir); n != 0 {
		t.Fatalf("%d files left", n)
	}
}
