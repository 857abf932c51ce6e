package amqp_test

import (
	"testing"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/core"
)

func TestConnectionListedAndClosable(t *testing.T) {
	tb := startBroker(t, amqp.Config{}, core.Config{})
	s := tb.session(t, nil)
	snd := newSender(t, s, "q", nil)
	send(t, snd, text("hello"))
	conns := tb.broker.Connections()
	if len(conns) != 1 || conns[0].Protocol != "amqp" || conns[0].RemoteAddr == "" || conns[0].MessagesIn != 1 || conns[0].BytesIn != 5 {
		t.Fatalf("connections %+v", conns)
	}
	if err := tb.broker.CloseConnection(conns[0].ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "connection gone", func() bool { return len(tb.broker.Connections()) == 0 })
	if err := snd.Send(ctxT(t), text("after"), nil); err == nil {
		t.Fatal("send on a closed connection succeeded")
	}
}

// TestConnectionAbortable: AbortConnection (the cluster's fence) ends
// the connection as CloseConnection does (internal/outbound tests the
// reset itself).
func TestConnectionAbortable(t *testing.T) {
	tb := startBroker(t, amqp.Config{}, core.Config{})
	s := tb.session(t, nil)
	snd := newSender(t, s, "q", nil)
	send(t, snd, text("hello"))
	conns := tb.broker.Connections()
	if len(conns) != 1 {
		t.Fatalf("connections %+v", conns)
	}
	if err := tb.broker.AbortConnection(conns[0].ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "connection gone", func() bool { return len(tb.broker.Connections()) == 0 })
	if err := snd.Send(ctxT(t), text("after"), nil); err == nil {
		t.Fatal("send on an aborted connection succeeded")
	}
}
