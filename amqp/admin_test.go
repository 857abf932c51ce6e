package amqp_test

import (
	"testing"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/amqptest"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
)

func TestConnectionListedAndClosable(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{})
	s := tb.Session(t, nil)
	snd := amqptest.NewSender(t, s, "q", nil)
	amqptest.Send(t, snd, amqptest.Text("hello"))
	conns := tb.Core.Connections()
	if len(conns) != 1 || conns[0].Protocol != "amqp" || conns[0].RemoteAddr == "" || conns[0].MessagesIn != 1 || conns[0].BytesIn != 5 {
		t.Fatalf("connections %+v", conns)
	}
	if err := tb.Core.CloseConnection(conns[0].ID); err != nil {
		t.Fatal(err)
	}
	testserve.Eventually(t, "connection gone", func() bool { return len(tb.Core.Connections()) == 0 })
	if err := snd.Send(amqptest.Ctx(t), amqptest.Text("after"), nil); err == nil {
		t.Fatal("send on a closed connection succeeded")
	}
}

// TestConnectionAbortable: AbortConnection (the cluster's fence) ends
// the connection as CloseConnection does (internal/outbound tests the
// reset itself).
func TestConnectionAbortable(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{})
	s := tb.Session(t, nil)
	snd := amqptest.NewSender(t, s, "q", nil)
	amqptest.Send(t, snd, amqptest.Text("hello"))
	conns := tb.Core.Connections()
	if len(conns) != 1 {
		t.Fatalf("connections %+v", conns)
	}
	if err := tb.Core.AbortConnection(conns[0].ID); err != nil {
		t.Fatal(err)
	}
	testserve.Eventually(t, "connection gone", func() bool { return len(tb.Core.Connections()) == 0 })
	if err := snd.Send(amqptest.Ctx(t), amqptest.Text("after"), nil); err == nil {
		t.Fatal("send on an aborted connection succeeded")
	}
}
