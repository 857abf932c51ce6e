package amqp_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/amqptest"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
)

// limited is address settings bounding addr's queues to max body bytes
// with the given address-full-policy.
func limited(addr string, max int64, policy string) core.AddressSettings {
	return core.AddressSettings{Match: addr, MaxSizeBytes: &max, FullPolicy: &policy}
}

// A send to a full FAIL address is rejected with
// amqp:resource-limit-exceeded; the link stays usable.
func TestFullFailRejects(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{AddressSettings: []core.AddressSettings{limited("fail", 10, "FAIL")}})
	snd := amqptest.NewSender(t, tb.Session(t, nil), "fail", nil)
	amqptest.Send(t, snd, amqptest.Text("12345678"))
	amqptest.WantResourceLimit(t, snd.Send(amqptest.Ctx(t), amqptest.Text("12345678"), nil))
	if got := tb.Core.DropStats()[core.RefusedFull]; got != 1 {
		t.Fatalf("refused_full = %d, want 1", got)
	}
	if c := amqptest.ConnInfo(t, tb.Core); c.Refused != 1 || c.Dropped != 0 {
		t.Fatalf("connection refused %d dropped %d, want 1 and 0", c.Refused, c.Dropped)
	}
	if d := amqptest.QueueDepth(tb, "fail"); d != 1 {
		t.Fatalf("depth %d, want 1", d)
	}
}

// With DROP, sends to a full address are accepted and the messages
// dropped, counted for the broker and the connection.
func TestFullDropCounts(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{AddressSettings: []core.AddressSettings{limited("drop", 10, "DROP")}})
	snd := amqptest.NewSender(t, tb.Session(t, nil), "drop", nil)
	for i := range 3 {
		amqptest.Send(t, snd, amqptest.Text(fmt.Sprintf("message%d", i)))
	}
	if d := amqptest.QueueDepth(tb, "drop"); d != 1 {
		t.Fatalf("depth %d, want 1", d)
	}
	if got := tb.Core.DropStats()[core.DropFull]; got != 2 {
		t.Fatalf("queue_full drops = %d, want 2", got)
	}
	if c := amqptest.ConnInfo(t, tb.Core); c.Dropped != 2 || c.Refused != 0 {
		t.Fatalf("connection dropped %d refused %d, want 2 and 0", c.Dropped, c.Refused)
	}
	r := amqptest.NewReceiver(t, tb.Session(t, nil), "drop", nil)
	if got := string(amqptest.Receive(t, r).GetData()); got != "message0" {
		t.Fatalf("got %q, want message0", got)
	}
}

// With BLOCK, the broker stops granting credit while the address is
// full: the producer's amqptest.Send blocks (having overshot by at most its
// credit), and resumes as a consumer drains; every message arrives, in
// order.
func TestFullBlockWithholdsCredit(t *testing.T) {
	const credit, n = 10, 60
	tb := amqptest.Start(t, amqp.Config{LinkCredit: credit}, core.Config{AddressSettings: []core.AddressSettings{limited("block", 100, "BLOCK")}})
	snd := amqptest.NewSender(t, tb.Session(t, nil), "block", nil)
	var sent atomic.Int32
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for i := range n {
			if err := snd.Send(ctx, amqptest.Text(fmt.Sprintf("message%03d", i)), nil); err != nil {
				errc <- fmt.Errorf("send %d: %w", i, err)
				return
			}
			sent.Add(1)
		}
		errc <- nil
	}()
	// Ten 10-byte messages fill the queue; the producer may overshoot by
	// the credit it holds, no more.
	testserve.Eventually(t, "the queue to fill", func() bool { return amqptest.QueueDepth(tb, "block") >= 10 })
	select {
	case err := <-errc:
		t.Fatalf("the producer finished (%v) while the address was full; %d sent", err, sent.Load())
	case <-time.After(500 * time.Millisecond):
	}
	if d := amqptest.QueueDepth(tb, "block"); d > 10+credit {
		t.Fatalf("depth %d, want at most %d: credit was not withheld", d, 10+credit)
	}
	if s := sent.Load(); s >= n {
		t.Fatalf("all %d sent while the address was full", s)
	}

	r := amqptest.NewReceiver(t, tb.Session(t, nil), "block", &goamqp.ReceiverOptions{Credit: 5})
	for i := range n {
		if got, want := string(amqptest.Receive(t, r).GetData()), fmt.Sprintf("message%03d", i); got != want {
			t.Fatalf("message %d: got %q, want %q", i, got, want)
		}
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the producer did not resume: %d of %d sent", sent.Load(), n)
	}
}

// An anonymous-relay link is never held: its messages to a full BLOCK
// address are taken over the limit.
func TestFullBlockAnonymousRelayNotHeld(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{LinkCredit: 10}, core.Config{AddressSettings: []core.AddressSettings{limited("block", 10, "BLOCK")}})
	snd := amqptest.NewSender(t, tb.Session(t, nil), "", nil)
	for i := range 30 {
		m := amqptest.Text(fmt.Sprintf("message%03d", i))
		m.Properties = &goamqp.MessageProperties{To: ptr("block")}
		amqptest.Send(t, snd, m)
	}
	if d := amqptest.QueueDepth(tb, "block"); d != 30 {
		t.Fatalf("depth %d, want 30", d)
	}
}

func ptr[T any](v T) *T { return &v }
