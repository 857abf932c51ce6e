package amqp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
)

// Many clients that each sent a message close at once: every close is
// answered (the answer written by the connection's end), and the broker
// is left with no session and every message queued. This is the path of
// a wave of disconnects: the read buffers given back before the
// teardown, no writer goroutine for the answer, the session registry
// under its own lock.
func TestWaveOfCloses(t *testing.T) {
	b, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := amqp.New(amqp.Config{}, b)
	t.Cleanup(func() { b.Close() })
	addr, _ := testserve.Serve(t, srv.ServeConn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const n = 100
	join := func(i int) *goamqp.Conn {
		c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := c.NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		snd, err := s.NewSender(ctx, "wave", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := snd.Send(ctx, goamqp.NewMessage([]byte(fmt.Sprint(i))), nil); err != nil {
			t.Fatal(err)
		}
		return c
	}
	leave := func(i int, c *goamqp.Conn) error {
		if err := c.Close(); err != nil {
			return fmt.Errorf("close: %w", err)
		}
		return nil
	}
	testserve.Wave(t, n, join, leave, func() (int, int) {
		open := 0
		for _, ps := range b.ProtocolStats() {
			open += ps.Connections
		}
		return open, srv.Connections()
	})
	qs, err := b.QueueStat("wave")
	if err != nil || qs.Depth != n {
		t.Fatalf("queue wave: %+v, %v; want %d messages", qs, err, n)
	}
}
