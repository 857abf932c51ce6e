package stomp_test

import (
	"testing"
	"time"

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
