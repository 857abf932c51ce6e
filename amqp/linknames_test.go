package amqp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/amqptest"
	"github.com/junctionmq/junction/amqp/internal/encoding"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
)

// What Qpid Proton's BlockingConnection sends for two receivers on one
// queue (each link named after the container and the address): two
// attaches with the same name on one session. Junction attaches each as
// its own link, by handle; both get messages, and so do a third receiver
// of that name on another session and a sender of that name (the other
// direction). No attach closes anything over a name.
func TestSameLinkNameAttachesEachLink(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{})
	c := dialRaw(t, tb)
	c.open(0)
	c.send(1, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 1000, OutgoingWindow: 1000}, nil)
	expect[*frames.Begin](c)
	const name = "container-queue://names.q"
	for _, l := range []struct {
		ch     uint16
		handle uint32
	}{{0, 0}, {0, 1}, {1, 0}} {
		c.send(l.ch, &frames.Attach{Name: name, Handle: l.handle, Role: frames.RoleReceiver,
			Source: &frames.Source{Address: addr("names.q")}, Target: &frames.Target{}}, nil)
		a, _ := expect[*frames.Attach](c)
		if a.Name != name || a.Handle != l.handle || a.Source == nil {
			t.Fatalf("attach %+v answered with %+v", l, a)
		}
		c.send(l.ch, &frames.Flow{NextIncomingID: u32(0), IncomingWindow: 1000, OutgoingWindow: 1000,
			Handle: u32(l.handle), DeliveryCount: u32(0), LinkCredit: u32(2)}, nil)
	}
	c.send(0, &frames.Attach{Name: name, Handle: 2, Role: frames.RoleSender, InitialDeliveryCount: u32(0),
		Source: &frames.Source{}, Target: &frames.Target{Address: addr("names.q")}}, nil)
	if a, _ := expect[*frames.Attach](c); a.Name != name || a.Target == nil {
		t.Fatalf("sender of the same name answered with %+v", a)
	}
	expect[*frames.Flow](c)
	settled := true
	for i := range 6 {
		c.send(0, &frames.Transfer{Handle: 2, DeliveryID: u32(uint32(i)), DeliveryTag: []byte{byte(i)}, Settled: &settled},
			encodeMessage(&frames.Message{BodyKind: frames.BodyData, Data: [][]byte{{byte(i)}}}))
	}
	// Each of the three links gets its credit's worth.
	got := map[[2]uint32]int{}
	for range 6 {
		ch, perf := c.nextOnChannel()
		tr, ok := perf.(*frames.Transfer)
		if !ok {
			t.Fatalf("got %T %+v on channel %d, want transfers", perf, perf, ch)
		}
		got[[2]uint32{uint32(ch), tr.Handle}]++
	}
	for _, k := range [][2]uint32{{0, 0}, {0, 1}, {1, 0}} {
		if got[k] != 2 {
			t.Errorf("channel %d handle %d got %d messages, want 2 (all: %v)", k[0], k[1], got[k], got)
		}
	}
	// Where a name means something it means the same for both links. Two
	// receivers of one shared subscription's name share it; a durable
	// subscription (container-id and link name) has one consumer at a
	// time, as in JMS, so a second receiver of its name is refused: the
	// link, with amqp:resource-locked, not the connection.
	for h := uint32(3); h < 5; h++ {
		c.send(0, &frames.Attach{Name: "shared-sub", Handle: h, Role: frames.RoleReceiver,
			Source: &frames.Source{Address: addr("topic://names.t"), Capabilities: []encoding.Symbol{"shared"}},
			Target: &frames.Target{}}, nil)
		if a, _ := expect[*frames.Attach](c); a.Source == nil {
			d, _ := expect[*frames.Detach](c)
			t.Fatalf("shared receiver %d refused: %+v", h, d.Error)
		}
	}
	for h := uint32(5); h < 7; h++ {
		c.send(0, &frames.Attach{Name: "sub", Handle: h, Role: frames.RoleReceiver,
			Source: &frames.Source{Address: addr("topic://names.t"), Durable: frames.DurableConfiguration, ExpiryPolicy: "never"},
			Target: &frames.Target{}}, nil)
		a, _ := expect[*frames.Attach](c)
		if h == 5 && a.Source == nil {
			t.Fatal("durable receiver refused")
		}
		if h == 6 {
			d, _ := expect[*frames.Detach](c)
			if a.Source != nil || d.Handle != h || !d.Closed || d.Error == nil || d.Error.Condition != frames.ErrCondResourceLocked {
				t.Fatalf("second receiver of a durable subscription: attach %+v, detach %+v", a, d)
			}
			if !strings.Contains(d.Error.Description, "has a consumer already") {
				t.Errorf("second receiver of a durable subscription: description %q does not say why", d.Error.Description)
			}
		}
	}
	// The connection carries on.
	c.send(0, &frames.Transfer{Handle: 2, DeliveryID: u32(6), DeliveryTag: []byte{6}, Settled: &settled},
		encodeMessage(&frames.Message{BodyKind: frames.BodyData, Data: [][]byte{{6}}}))
	c.send(0, &frames.Flow{NextIncomingID: u32(4), IncomingWindow: 1000, OutgoingWindow: 1000,
		Handle: u32(0), DeliveryCount: u32(2), LinkCredit: u32(1)}, nil)
	if tr, _ := expect[*frames.Transfer](c); tr.Handle != 0 {
		t.Fatalf("transfer on handle %d", tr.Handle)
	}
}

// go-amqp refuses a second link of one name on one session itself, but
// two sessions of one connection can each have a receiver of the same
// name on one queue: they compete for its messages.
func TestSameLinkNameOnTwoSessions(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{})
	conn := tb.Dial(t, nil)
	var rs []*goamqp.Receiver
	for range 2 {
		s, err := conn.NewSession(amqptest.Ctx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		r := amqptest.NewReceiver(t, s, "names.q2", &goamqp.ReceiverOptions{Name: "same-name", Credit: -1})
		// One message each, whatever the order of events.
		if err := r.IssueCredit(1); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	snd := amqptest.NewSender(t, tb.Session(t, nil), "names.q2", nil)
	for range 2 {
		amqptest.Send(t, snd, amqptest.Text("m"))
	}
	for i, r := range rs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := r.Receive(ctx, nil)
		cancel()
		if err != nil {
			t.Fatalf("receiver %d: %v", i, err)
		}
		if err := r.AcceptMessage(amqptest.Ctx(t), m); err != nil {
			t.Fatal(err)
		}
	}
}
