package core

import (
	"sync/atomic"
	"testing"
)

// abortable opens a client session of an access broker whose Abort
// counts its calls.
func abortable(t *testing.T, b *Broker, aborts *atomic.Int32) *Session {
	t.Helper()
	s, err := b.NewSession(SessionOptions{User: "u", Protocol: "test", RemoteAddr: "192.0.2.1:1234", Abort: func() { aborts.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestFenceDoubtful(t *testing.T) {
	c := newOneGroup(t)
	a := newAccess(t, c)
	var aborts, flaggedAborts, plainAborts atomic.Int32
	s := abortable(t, a, &aborts)
	for _, b := range []string{"1", "2", "3", "4", "5"} {
		sendDurable(t, s, "q", Anycast, b)
	}
	cons, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 3})
	d1, d2, d3 := col.next(t), col.next(t), col.next(t)
	for _, d := range []Delivery{d1, d2, d3} {
		if d.Redelivered() {
			t.Fatalf("%q flagged before any doubt", d.Message.Body)
		}
	}
	if err := cons.Ack(d1.ID); err != nil {
		t.Fatal(err)
	}
	// A connection whose front-end cannot abort is left alone; so is one
	// that holds nothing.
	plain := accessSession(t, a, "")
	_, pcol := subscribe(t, plain, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 1})
	pcol.next(t)
	idle := abortable(t, a, &plainAborts)
	subscribe(t, idle, ConsumerOptions{Address: "other", RoutingType: Anycast, Credit: 1})

	if f := a.FenceDoubtful(); len(f) != 0 || aborts.Load() != 0 {
		t.Fatalf("nothing doubtful: fenced %+v, %d aborts", f, aborts.Load())
	}

	c.doubtful.Store(true)
	// What goes out while the source is doubtful is flagged: a
	// connection holding only that needs no fence.
	flagged := abortable(t, a, &flaggedAborts)
	_, fcol := subscribe(t, flagged, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 1})
	if d := fcol.next(t); !d.Redelivered() {
		t.Fatalf("%q handed out while doubtful, not flagged", d.Message.Body)
	}

	f := a.FenceDoubtful()
	if len(f) != 1 || f[0].ID != s.ID() || f[0].Deliveries != 2 || f[0].Protocol != "test" || f[0].RemoteAddr != "192.0.2.1:1234" {
		t.Fatalf("fenced %+v, want session %d with 2 deliveries", f, s.ID())
	}
	if aborts.Load() != 1 || flaggedAborts.Load() != 0 || plainAborts.Load() != 0 {
		t.Fatalf("aborts: %d of the fenced session, %d of the flagged one, %d of the idle one", aborts.Load(), flaggedAborts.Load(), plainAborts.Load())
	}
	// Once: the front-end is closing the connection.
	if f := a.FenceDoubtful(); len(f) != 0 || aborts.Load() != 1 {
		t.Fatalf("fenced again: %+v, %d aborts", f, aborts.Load())
	}
	// Its session closing gives its deliveries back; the group delivers
	// them again, flagged.
	s.Close()
	c.doubtful.Store(false)
	_, rcol := subscribe(t, idle, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 2})
	for range 2 {
		if d := rcol.next(t); !d.Redelivered() {
			t.Fatalf("%q given back by the fenced connection, not flagged when delivered again", d.Message.Body)
		}
	}
}

func TestFenceDoubtfulSingleBroker(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if f := b.FenceDoubtful(); f != nil {
		t.Fatalf("a broker without a cluster fenced %+v", f)
	}
}
