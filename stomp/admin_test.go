package stomp_test

import (
	"testing"
	"time"

	"github.com/junctionmq/junction/stomp"
)

func TestConnectionListedAndClosable(t *testing.T) {
	tb := startBroker(t, stomp.Config{})
	c := tb.dial(t)
	send(t, c, "/queue/q", "hello")
	barrier(t, c) // one more (empty) message
	conns := tb.broker.Connections()
	if len(conns) != 1 || conns[0].Protocol != "stomp" || conns[0].RemoteAddr == "" || conns[0].MessagesIn != 2 || conns[0].BytesIn != 5 {
		t.Fatalf("connections %+v", conns)
	}
	if err := tb.broker.CloseConnection(conns[0].ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(tb.broker.Connections()) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("closed connection still listed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ps := tb.broker.ProtocolStats(); len(ps) != 1 || ps[0].ConnectionsTotal != 1 || ps[0].Connections != 0 || ps[0].MessagesIn != 2 {
		t.Fatalf("protocol stats %+v", ps)
	}
}
