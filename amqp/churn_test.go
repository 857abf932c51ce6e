package amqp_test

import (
	"context"
	"fmt"
	"sync"
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
	conns := make([]*goamqp.Conn, n)
	for i := range conns {
		c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
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
		conns[i] = c
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := c.Close(); err != nil {
				t.Errorf("client %d: close: %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		open := 0
		for _, ps := range b.ProtocolStats() {
			open += ps.Connections
		}
		if open == 0 && srv.Connections() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions and %d connections left", open, srv.Connections())
		}
		time.Sleep(10 * time.Millisecond)
	}
	qs, err := b.QueueStat("wave")
	if err != nil || qs.Depth != n {
		t.Fatalf("queue wave: %+v, %v; want %d messages", qs, err, n)
	}
}
