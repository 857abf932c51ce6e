package stomp_test

import (
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

func TestConnectionListedAndClosable(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	c := tb.Dial(t)
	stomptest.Send(t, c, "/queue/q", "hello")
	stomptest.Barrier(t, c) // one more (empty) message
	conns := tb.Core.Connections()
	if len(conns) != 1 || conns[0].Protocol != "stomp" || conns[0].RemoteAddr == "" || conns[0].MessagesIn != 2 || conns[0].BytesIn != 5 {
		t.Fatalf("connections %+v", conns)
	}
	if err := tb.Core.CloseConnection(conns[0].ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(tb.Core.Connections()) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("closed connection still listed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ps := tb.Core.ProtocolStats(); len(ps) != 1 || ps[0].ConnectionsTotal != 1 || ps[0].Connections != 0 || ps[0].MessagesIn != 2 {
		t.Fatalf("protocol stats %+v", ps)
	}
}

// TestConnectionAbortable: AbortConnection (the cluster's fence) resets
// the connection: what the broker wrote and the client had not received
// never arrives, and the deliveries go back to their queue.
func TestConnectionAbortable(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	const n, size = 64, 64 << 10
	p := tb.Dial(t)
	for range n {
		stomptest.Send(t, p, "/queue/big", strings.Repeat("x", size))
	}
	stomptest.Barrier(t, p)
	r := tb.Raw(t)
	r.Connect("")
	r.Write("SUBSCRIBE\nid:0\ndestination:/queue/big\nack:client-individual\nactivemq.prefetchSize:1000\n\n\x00")
	// The client reads nothing: what the broker writes fills the kernel's
	// buffers, and the rest waits in the broker's writer.
	var id uint64
	deadline := time.Now().Add(5 * time.Second)
	for id == 0 {
		for _, c := range tb.Core.Connections() {
			if c.MessagesOut == n {
				id = c.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection had the %d deliveries within 5s: %+v", n, tb.Core.Connections())
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if err := tb.Core.AbortConnection(id); err != nil {
		t.Fatal(err)
	}
	r.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.Copy(io.Discard, r.Reader)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client read %d bytes, then %v: want a reset", got, err)
	}
	if got >= n*size {
		t.Fatalf("the client read %d bytes: everything written arrived", got)
	}
	// Nothing was acked: the messages are all back for another consumer.
	c := tb.Dial(t)
	s, err := c.Subscribe("/queue/big", gostomp.AckAuto) // no barrier: its receipt would queue behind the messages
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		select {
		case m := <-s.C:
			if m.Err != nil {
				t.Fatal(m.Err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d messages came back", i, n)
		}
	}
}
