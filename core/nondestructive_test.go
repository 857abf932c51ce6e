package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func ndSettings(match string) AddressSettings {
	return AddressSettings{Match: match, NonDestructive: ptrTo(true)}
}

// bodies takes n deliveries and returns their bodies in order.
func bodies(t *testing.T, col *collector, n int) []string {
	t.Helper()
	var out []string
	for range n {
		out = append(out, body(col.next(t)))
	}
	return out
}

func ackAll(t *testing.T, c *Consumer, col *collector, n int) []string {
	t.Helper()
	var out []string
	for range n {
		d := col.next(t)
		if err := c.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
		out = append(out, body(d))
	}
	return out
}

func TestNonDestructiveLastValues(t *testing.T) {
	b := newBroker(t, ndSettings("nd.#"))
	s := newSession(t, b, "")
	ctx := context.Background()
	for _, kv := range []string{"a=1", "b=1", "a=2"} {
		k, _, _ := strings.Cut(kv, "=")
		if err := s.Send(ctx, lvMsg("nd.prices", k, kv, false)); err != nil {
			t.Fatal(err)
		}
	}
	c1, col1 := subscribe(t, s, ConsumerOptions{Address: "nd.prices", RoutingType: Anycast, Credit: 10})
	if got := ackAll(t, c1, col1, 2); !slices.Equal(got, []string{"b=1", "a=2"}) {
		t.Fatalf("first consumer got %q, want [b=1 a=2]", got)
	}
	// Acked, and still there: a second consumer has the same snapshot.
	_, col2 := subscribe(t, s, ConsumerOptions{Address: "nd.prices", RoutingType: Anycast, Credit: 10})
	if got := bodies(t, col2, 2); !slices.Equal(got, []string{"b=1", "a=2"}) {
		t.Fatalf("second consumer got %q, want [b=1 a=2]", got)
	}
	col1.none(t, 30*time.Millisecond)
	// A new value replaces a=2 and reaches both, once.
	s.Send(ctx, lvMsg("nd.prices", "a", "a=3", false))
	for i, col := range []*collector{col1, col2} {
		if got := body(col.next(t)); got != "a=3" {
			t.Fatalf("consumer %d got %q, want a=3", i+1, got)
		}
		col.none(t, 30*time.Millisecond)
	}
	// Browsing lists what the queue holds, not the copies in flight.
	if page, total, err := b.Browse("nd.prices", 0, 10); err != nil || total != 2 || len(page) != 2 ||
		string(page[0].Message.Body) != "b=1" || string(page[1].Message.Body) != "a=3" || page[0].InFlight {
		t.Fatalf("browse: %d of %d, %v", len(page), total, err)
	}
	q := b.Queue("nd.prices")
	if st := q.Stats(); st.Depth != 2 || st.Replaced != 2 || st.Dequeued != 2 || st.InFlight != 4 {
		t.Fatalf("stats %+v, want depth 2, 2 replaced, 2 acked, 4 in flight (c1's a=3, c2's three)", st)
	}
	// The first consumer comes back: the current values again.
	c1.Close()
	_, col3 := subscribe(t, s, ConsumerOptions{Address: "nd.prices", RoutingType: Anycast, Credit: 10})
	if got := bodies(t, col3, 2); !slices.Equal(got, []string{"b=1", "a=3"}) {
		t.Fatalf("consumer back got %q, want [b=1 a=3]", got)
	}
	col3.none(t, 30*time.Millisecond)
}

func TestNonDestructiveOutcomes(t *testing.T) {
	b := newBroker(t, AddressSettings{Match: "nd", NonDestructive: ptrTo(true), MaxDeliveryAttempts: ptrTo(2)})
	s := newSession(t, b, "")
	for _, m := range []string{"m1", "m2", "m3"} {
		send(t, s, "nd", Anycast, m)
	}
	c, col := subscribe(t, s, ConsumerOptions{Address: "nd", RoutingType: Anycast, Credit: 3})
	d := [3]Delivery{col.next(t), col.next(t), col.next(t)}
	// Released: offered again to the same consumer, uncounted; failed:
	// counted, and past max-delivery-attempts not offered again; rejected:
	// not offered again. Nothing is dead-lettered.
	c.Release(d[0].ID, false)
	c.Release(d[1].ID, true)
	c.Reject(d[2].ID)
	c.Flow(10)
	a, f := col.next(t), col.next(t)
	if body(a) != "m1" || a.DeliveryCount != 0 || body(f) != "m2" || f.DeliveryCount != 1 {
		t.Fatalf("again: %q count %d, %q count %d; want m1 count 0, m2 count 1", body(a), a.DeliveryCount, body(f), f.DeliveryCount)
	}
	c.Release(f.ID, true)
	col.none(t, 50*time.Millisecond)
	if st := b.Queue("nd").Stats(); st.Depth != 3 || st.DeadLettered != 0 || st.InFlight != 1 {
		t.Fatalf("stats %+v, want 3 messages kept, none dead-lettered, m1 in flight", st)
	}
	if dlq := b.Queue("DLQ"); dlq != nil && dlq.Stats().Depth != 0 {
		t.Fatalf("DLQ holds %d", dlq.Stats().Depth)
	}

	// A transaction: a rollback offers its acks again, a commit settles.
	tx, err := s.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Ack(c, a.ID); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	a = col.next(t)
	if body(a) != "m1" || a.DeliveryCount != 1 {
		t.Fatalf("after rollback %q count %d, want m1 count 1", body(a), a.DeliveryCount)
	}
	tx, _ = s.Begin()
	tx.Ack(c, a.ID)
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	col.none(t, 50*time.Millisecond)
	// A new consumer has all three.
	_, col2 := subscribe(t, s, ConsumerOptions{Address: "nd", RoutingType: Anycast, Credit: 10})
	if got := bodies(t, col2, 3); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("new consumer got %q", got)
	}
}

func TestNonDestructiveExclusiveSelectorPriority(t *testing.T) {
	b := newBroker(t, ndSettings("nd"))
	s := newSession(t, b, "")
	ex, colEx := subscribe(t, s, ConsumerOptions{Address: "nd", RoutingType: Anycast, Credit: 10, Exclusive: true})
	_, colOther := subscribe(t, s, ConsumerOptions{Address: "nd", RoutingType: Anycast, Credit: 10})
	_, colSel := subscribe(t, s, ConsumerOptions{Address: "nd", RoutingType: Anycast, Credit: 10, Selector: "k = 'x'"})
	ctx := context.Background()
	for i, p := range []uint8{4, 9, 4} {
		m := &Message{Address: "nd", RoutingType: Anycast, Priority: p, Body: []byte(fmt.Sprint("p", p, "/", i)),
			Properties: map[string]any{"k": "x"}, GroupID: "g"}
		if err := s.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if got := bodies(t, colEx, 3); !slices.Equal(got, []string{"p4/0", "p9/1", "p4/2"}) {
		t.Fatalf("exclusive got %q", got)
	}
	colOther.none(t, 30*time.Millisecond)
	colSel.none(t, 0)
	// The exclusive consumer leaves: the others start from the
	// beginning, highest priority first, group or not.
	ex.Close()
	want := []string{"p9/1", "p4/0", "p4/2"}
	if got := bodies(t, colOther, 3); !slices.Equal(got, want) {
		t.Fatalf("other got %q, want %q", got, want)
	}
	if got := bodies(t, colSel, 3); !slices.Equal(got, want) {
		t.Fatalf("selective got %q, want %q", got, want)
	}
	send(t, s, "nd", Anycast, "no k")
	if got := body(colOther.next(t)); got != "no k" {
		t.Fatalf("other got %q", got)
	}
	colSel.none(t, 30*time.Millisecond)
}

func TestNonDestructiveExpiryPurgeAndRing(t *testing.T) {
	b := newBroker(t, ndSettings("nd"), AddressSettings{Match: "ring", NonDestructive: ptrTo(true), RingSize: ptrTo(int64(2))})
	s := newSession(t, b, "")
	ctx := context.Background()
	c, col := subscribe(t, s, ConsumerOptions{Address: "nd", RoutingType: Anycast, Credit: 10})
	m := &Message{Address: "nd", RoutingType: Anycast, Priority: DefaultPriority, Body: []byte("short"), Expiration: time.Now().Add(80 * time.Millisecond)}
	if err := s.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	send(t, s, "nd", Anycast, "long")
	ackAll(t, c, col, 2)
	q := b.Queue("nd")
	deadline := time.Now().Add(5 * time.Second)
	for q.Stats().Expired != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("not expired: %+v", q.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := q.Stats(); st.Depth != 1 {
		t.Fatalf("after expiry %+v, want depth 1", st)
	}
	if eq := b.Queue("ExpiryQueue"); eq == nil || eq.Stats().Depth != 1 {
		t.Fatal("the expired message is not on ExpiryQueue")
	}
	if n, err := b.PurgeQueue("nd"); err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	_, col2 := subscribe(t, s, ConsumerOptions{Address: "nd", RoutingType: Anycast, Credit: 10})
	col2.none(t, 30*time.Millisecond)

	// A ring of 2: the deliveries in flight hold no room.
	_, rcol := subscribe(t, s, ConsumerOptions{Address: "ring", RoutingType: Anycast, Credit: 100})
	for i := range 5 {
		send(t, s, "ring", Anycast, fmt.Sprint(i))
	}
	bodies(t, rcol, 5)
	if st := b.Queue("ring").Stats(); st.Depth != 2 || st.Dropped != 3 {
		t.Fatalf("ring %+v, want depth 2, 3 dropped", st)
	}
	_, rcol2 := subscribe(t, s, ConsumerOptions{Address: "ring", RoutingType: Anycast, Credit: 100})
	if got := bodies(t, rcol2, 2); !slices.Equal(got, []string{"3", "4"}) {
		t.Fatalf("ring holds %q", got)
	}
}

// Acks of a non-destructive queue write nothing; the messages survive a
// restart, and a replacement still deletes the old value's record.
func TestNonDestructiveJournal(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	open := func() *Broker {
		b, err := New(Config{Messages: msgs, Bindings: bindings, ExpiryScanInterval: -1, AddressSettings: []AddressSettings{ndSettings("nd")}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b1 := open()
	s1, _ := b1.NewSession(SessionOptions{})
	ctx := context.Background()
	for _, kv := range []string{"a=1", "b=1", "a=2"} {
		k, _, _ := strings.Cut(kv, "=")
		if err := s1.Send(ctx, lvMsg("nd", k, kv, true)); err != nil {
			t.Fatal(err)
		}
	}
	waitLive(t, msgs, 2)
	c, col := subscribe(t, s1, ConsumerOptions{Address: "nd", RoutingType: Anycast, Credit: 10})
	ackAll(t, c, col, 2)
	c2, col2 := subscribe(t, s1, ConsumerOptions{Address: "nd", RoutingType: Anycast, Credit: 10})
	d := col2.next(t)
	c2.Release(d.ID, true) // a failed attempt: no count written either
	ackAll(t, c2, col2, 2)
	tx, _ := s1.Begin()
	c3, col3 := subscribe(t, s1, ConsumerOptions{Address: "nd", RoutingType: Anycast, Credit: 10})
	for range 2 {
		tx.Ack(c3, col3.next(t).ID)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	msgs.mu.Lock()
	updates := 0
	for _, r := range msgs.recs {
		updates += len(r.updates)
	}
	msgs.mu.Unlock()
	if msgs.live() != 2 || updates != 0 {
		t.Fatalf("journal: %d live records, %d updates; want the 2 values, no update", msgs.live(), updates)
	}
	s1.Close()
	b1.Close()

	b2 := open()
	s2 := newSession(t, b2, "")
	for range 2 {
		_, col := subscribe(t, s2, ConsumerOptions{Address: "nd", RoutingType: Anycast, Credit: 10})
		got := col.next(t)
		if body(got) != "b=1" || !got.Redelivered() {
			t.Fatalf("after a restart got %q (redelivered %v), want b=1 flagged", body(got), got.Redelivered())
		}
		if got := body(col.next(t)); got != "a=2" {
			t.Fatalf("after a restart got %q, want a=2", got)
		}
	}
	if err := s2.Send(ctx, lvMsg("nd", "a", "a=3", true)); err != nil {
		t.Fatal(err)
	}
	waitLive(t, msgs, 2)
}

// Reloading the address settings switches a queue's consumption.
func TestNonDestructiveReload(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	for i := range 3 {
		send(t, s, "q", Anycast, fmt.Sprint(i))
	}
	c, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 1})
	ackAll(t, c, col, 1) // "0" consumed for good
	if err := b.SetAddressSettings([]AddressSettings{ndSettings("q")}); err != nil {
		t.Fatal(err)
	}
	c.Flow(10)
	ackAll(t, c, col, 2)
	c2, col2 := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	if got := bodies(t, col2, 2); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("second consumer got %q", got)
	}
	c.Close()
	c2.Close()
	if err := b.SetAddressSettings(nil); err != nil {
		t.Fatal(err)
	}
	// Destructive again: acks of the non-destructive deliveries in
	// flight removed nothing; what waits is consumed once more.
	c3, col3 := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10, Exclusive: true})
	got := ackAll(t, c3, col3, 2)
	if !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("after switching back got %q", got)
	}
	if st := b.Queue("q").Stats(); st.Depth != 0 {
		t.Fatalf("stats %+v, want empty", st)
	}
}

// BenchmarkNonDestructiveLastValue is BenchmarkSendDispatchAck on a
// non-destructive last-value queue of 100 keys: each send replaces a
// value and is given to the consumer as a copy, whose ack writes
// nothing.
func BenchmarkNonDestructiveLastValue(b *testing.B) {
	br, _ := New(Config{ExpiryScanInterval: -1, AddressSettings: []AddressSettings{ndSettings("bench")}})
	defer br.Close()
	s, _ := br.NewSession(SessionOptions{})
	var last uint64
	c, err := s.Subscribe(ConsumerOptions{Address: "bench", RoutingType: Anycast, Credit: 1000,
		Handler: func(d Delivery) { last = d.ID }})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m := &Message{Address: "bench", RoutingType: Anycast, Body: payload, Properties: map[string]any{PropLastValue: keys[i%len(keys)]}}
		i++
		if err := s.Send(ctx, m); err != nil {
			b.Fatal(err)
		}
		if err := c.Ack(last); err != nil {
			b.Fatal(err)
		}
		c.Flow(1)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
