package core

import (
	"context"
	"testing"
	"time"
)

func lvMsg(addr, key, body string, durable bool) *Message {
	return &Message{Address: addr, RoutingType: Anycast, Durable: durable, Priority: DefaultPriority,
		Body: []byte(body), Properties: map[string]any{PropLastValue: key}}
}

func TestLastValueSparesDeliveriesAndReplacesScheduled(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	ctx := context.Background()
	for _, body := range []string{"a1", "a2"} {
		if err := s.Send(ctx, lvMsg("lv", "a", body, false)); err != nil {
			t.Fatal(err)
		}
	}
	// a2 replaced a1; with credit 1 the consumer holds a2 unacked.
	c, col := subscribe(t, s, ConsumerOptions{Address: "lv", RoutingType: Anycast, Credit: 1})
	d := col.next(t)
	if body(d) != "a2" {
		t.Fatalf("got %q, want a2", body(d))
	}
	// A delivery in flight is not replaced: a3 waits behind it, and a4
	// replaces a3; a scheduled a5 replaces a4 and is itself replaced by
	// a6 while it waits.
	s.Send(ctx, lvMsg("lv", "a", "a3", false))
	s.Send(ctx, lvMsg("lv", "a", "a4", false))
	m5 := lvMsg("lv", "a", "a5", false)
	m5.DeliveryTime = time.Now().Add(time.Hour)
	s.Send(ctx, m5)
	s.Send(ctx, lvMsg("lv", "b", "b1", false))
	q := b.Queue("lv")
	if st := q.Stats(); st.Scheduled != 1 || st.Depth != 3 || st.Replaced != 3 {
		t.Fatalf("stats %+v, want 3 deep (a2 in flight, a5 scheduled, b1), 1 scheduled, 3 replaced", st)
	}
	s.Send(ctx, lvMsg("lv", "a", "a6", false))
	if err := c.Ack(d.ID); err != nil {
		t.Fatal(err)
	}
	c.Flow(10)
	got := []string{body(col.next(t)), body(col.next(t))}
	if got[0] != "b1" || got[1] != "a6" {
		t.Fatalf("after the ack got %q, want [b1 a6]", got)
	}
	col.none(t, 50*time.Millisecond)
	if st := q.Stats(); st.Scheduled != 0 || st.Replaced != 4 {
		t.Fatalf("stats %+v, want nothing scheduled and 4 replaced", st)
	}
}

func TestRingDropsOldestWaiting(t *testing.T) {
	b := newBroker(t, AddressSettings{Match: "ring", RingSize: ptrTo(int64(3))})
	s := newSession(t, b, "")
	c, col := subscribe(t, s, ConsumerOptions{Address: "ring", RoutingType: Anycast, Credit: 1})
	for i := range 6 {
		send(t, s, "ring", Anycast, string(rune('0'+i)))
	}
	// 0 is in flight and stays; 1 and 2 go for 4 and 5: the ring holds 3.
	d := col.next(t)
	if body(d) != "0" {
		t.Fatalf("got %q", body(d))
	}
	st := b.Queue("ring").Stats()
	if st.Depth != 3 || st.Dropped != 3 || b.DropStats()[DropRing] != 3 {
		t.Fatalf("stats %+v, drops %v: want depth 3, 3 dropped for ring_full", st, b.DropStats())
	}
	c.Ack(d.ID)
	c.Flow(10)
	if got := body(col.next(t)) + body(col.next(t)); got != "45" {
		t.Fatalf("got %q, want 45", got)
	}
}

func ptrTo[T any](v T) *T { return &v }
