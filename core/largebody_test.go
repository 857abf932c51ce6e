package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"
)

// streamOf returns a reader of n bytes with a pattern, and the bytes.
func streamOf(n int) (io.Reader, []byte) {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return bytes.NewReader(b), b
}

// failAfter gives n bytes, then fails as a connection cut off mid-body.
type failAfter struct {
	r io.Reader
	n int
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	p = p[:min(len(p), f.n)]
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

// waitCount waits until the store holds want bodies, running the
// collector so unreferenced bodies are cleaned up.
func waitCount(t *testing.T, l *memLarge, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.count() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d large bodies stored, want %d", l.count(), want)
		}
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStreamedBodies(t *testing.T) {
	msgs, bindings, large := newMemJournal(), newMemJournal(), &memLarge{bodies: map[uint64][]byte{}}
	dla := "DLQ"
	open := func() *Broker {
		b, err := New(Config{Messages: msgs, Bindings: bindings, Large: large, LargeMessageThreshold: 64, ExpiryScanInterval: -1,
			AddressSettings: []AddressSettings{{Match: "q", DeadLetterAddress: &dla}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b1 := open()
	s := newSession(t, b1, "")
	if s.StreamThreshold() != 64 {
		t.Fatalf("StreamThreshold %d", s.StreamThreshold())
	}

	// A sender cut off mid-body: an error, no body stored, nothing sent.
	r, _ := streamOf(5000)
	m := &Message{Address: "q", RoutingType: Anycast, Durable: true}
	if err := s.ReceiveBody(m, &failAfter{r: r, n: 3000}, 5000); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut body: %v", err)
	}
	if large.count() != 0 {
		t.Fatal("a cut body was stored")
	}

	// Durable: the journal keeps the file; the record holds no body.
	r, big := streamOf(5000)
	m = &Message{Address: "q", RoutingType: Anycast, Durable: true}
	if err := s.ReceiveBody(m, r, 5000); err != nil {
		t.Fatal(err)
	}
	if !m.Streamed() || m.Size() != 5000 || m.Body != nil {
		t.Fatalf("streamed %v size %d", m.Streamed(), m.Size())
	}
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	// Non-durable: the file goes once nothing references the message.
	r, _ = streamOf(3000)
	nd := &Message{Address: "nd", RoutingType: Anycast}
	if err := s.ReceiveBody(nd, r, -1); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), nd); err != nil {
		t.Fatal(err)
	}
	for _, id := range msgs.order {
		if r := msgs.recs[id]; r != nil && len(r.payload) > 500 {
			t.Fatalf("record %d holds %d bytes: the large body went into the journal", id, len(r.payload))
		}
	}
	if large.count() != 2 {
		t.Fatalf("%d bodies, want 2", large.count())
	}
	c, col := subscribe(t, s, ConsumerOptions{Address: "nd", RoutingType: Anycast, Credit: 10})
	d := col.next(t)
	if got, err := d.Message.ReadBody(); err != nil || d.Message.Size() != 3000 || len(got) != 3000 {
		t.Fatalf("non-durable body: %d %v", len(got), err)
	}
	if err := c.Ack(d.ID); err != nil {
		t.Fatal(err)
	}
	c.Close()
	d, nd = Delivery{}, nil
	waitCount(t, large, 1)
	s.Close()
	b1.Close()

	// Recovered by reference; rejected to the DLQ, the copy gets its
	// own file and the original's goes with its record.
	b2 := open()
	s2 := newSession(t, b2, "")
	c2, col2 := subscribe(t, s2, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	d = col2.next(t)
	if !d.Message.Streamed() {
		t.Fatal("recovered body in memory")
	}
	head, err := d.Message.BodyHead(10)
	if err != nil || !bytes.Equal(head, big[:10]) {
		t.Fatalf("BodyHead %v %v", head, err)
	}
	if err := c2.Reject(d.ID); err != nil {
		t.Fatal(err)
	}
	_, col3 := subscribe(t, s2, ConsumerOptions{Address: "DLQ", RoutingType: Anycast, Credit: 10})
	d = col3.next(t)
	got, err := d.Message.ReadBody()
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("dead-lettered body: %d bytes, %v", len(got), err)
	}
	waitCount(t, large, 1)
	if _, ok := large.bodies[d.Message.ID]; !ok {
		t.Fatal("the dead-lettered copy has no file of its own")
	}
}

func TestStreamedBodyDiskCheck(t *testing.T) {
	large := &memLarge{bodies: map[uint64][]byte{}}
	free := int64(10000)
	b, err := New(Config{Large: large, LargeMessageThreshold: 64, ExpiryScanInterval: -1,
		Disk: DiskLimits{MinFree: 1000, Free: func() (int64, error) { return free, nil }}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := newSession(t, b, "")
	r, _ := streamOf(9500)
	if err := s.ReceiveBody(&Message{Address: "q"}, r, 9500); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("announced past the free space: %v", err)
	}
	r, _ = streamOf(9500)
	if err := s.ReceiveBody(&Message{Address: "q"}, r, -1); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("grown past the free space: %v", err)
	}
	r, _ = streamOf(5000)
	if err := s.ReceiveBody(&Message{Address: "q"}, r, 5000); err != nil {
		t.Fatal(err)
	}
	if large.count() != 1 {
		t.Fatalf("%d bodies", large.count())
	}
}

// A retained streamed message is kept by reference in a file of its own
// (the sent message's goes with it), survives a restart, and its file
// goes when the value is replaced.
func TestRetainedStreamedBody(t *testing.T) {
	msgs, bindings, large := newMemJournal(), newMemJournal(), &memLarge{bodies: map[uint64][]byte{}}
	open := func() *Broker {
		b, err := New(Config{Messages: msgs, Bindings: bindings, Large: large, LargeMessageThreshold: 64, ExpiryScanInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b1 := open()
	s := newSession(t, b1, "")
	r, body := streamOf(4000)
	m := &Message{Address: "t", Durable: true}
	if err := s.ReceiveBody(m, r, 4000); err != nil {
		t.Fatal(err)
	}
	if err := b1.Retain(m); err != nil {
		t.Fatal(err)
	}
	m = nil
	waitCount(t, large, 1) // the sent message's file went; the retained copy's stays
	b1.Close()

	b2 := open()
	rs := b2.Retained()
	if len(rs) != 1 || !rs[0].Streamed() {
		t.Fatalf("retained after restart: %v", rs)
	}
	if got, err := rs[0].ReadBody(); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("retained body: %d bytes, %v", len(got), err)
	}
	if err := b2.Retain(&Message{Address: "t", Durable: true}); err != nil { // clears it
		t.Fatal(err)
	}
	waitCount(t, large, 0)
}

// A streamed message reaching a paging queue is paged by reference: its
// record holds no body, a link to the body is the record's; it keeps
// its place in the queue's order, survives a restart while paged, comes
// back whole, and every file goes once it is acked.
func TestStreamedBodyPagedByReference(t *testing.T) {
	msgs, bindings, pager, large := newMemJournal(), newMemJournal(), newMemPager(), &memLarge{bodies: map[uint64][]byte{}}
	limit := int64(100)
	open := func() *Broker {
		b, err := New(Config{Messages: msgs, Bindings: bindings, Pager: pager, Large: large, LargeMessageThreshold: 64,
			ExpiryScanInterval: -1, AddressSettings: []AddressSettings{{Match: "big", MaxSizeBytes: &limit}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b1 := open()
	s := newSession(t, b1, "")
	const n = 300 // messages "0".."299", "150" streamed
	var big []byte
	for i := range n {
		if i != 150 {
			sendDurable(t, s, "big", Anycast, fmt.Sprint(i))
			continue
		}
		_, big = streamOf(5000)
		copy(big, "150")
		m := &Message{Address: "big", RoutingType: Anycast, Durable: true, Priority: DefaultPriority}
		if err := s.ReceiveBody(m, bytes.NewReader(big), 5000); err != nil {
			t.Fatal(err)
		}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	if st := b1.Queue("big").Stats(); st.Paged < n/2 {
		t.Fatalf("not paging: %+v", st)
	}
	for _, ps := range pager.stores {
		for _, rec := range ps.recs {
			if len(rec) > 500 {
				t.Fatalf("a page record of %d bytes: the large body went into the page store", len(rec))
			}
		}
	}
	waitCount(t, large, 1) // the record's link; the sent message's own file went with it
	s.Close()
	b1.Close()

	b2 := open()
	s2 := newSession(t, b2, "")
	c, col := subscribe(t, s2, ConsumerOptions{Address: "big", RoutingType: Anycast, Credit: 100})
	for i := range n {
		d := col.next(t)
		if i == 150 {
			got, err := d.Message.ReadBody()
			if err != nil || !bytes.Equal(got, big) || !d.Message.Streamed() {
				t.Fatalf("the paged large message: %d bytes, %v", len(got), err)
			}
		} else if got := body(d); got != fmt.Sprint(i) {
			t.Fatalf("message %d: got %q", i, got)
		}
		if err := c.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
		c.Flow(1)
	}
	waitCount(t, large, 0)
}

// A streamed message sent to a composite destination reaches each part
// whole, each copy with a file of its own (a link), all gone once acked.
func TestStreamedBodyCompositeCopies(t *testing.T) {
	msgs, bindings, large := newMemJournal(), newMemJournal(), &memLarge{bodies: map[uint64][]byte{}}
	b, err := New(Config{Messages: msgs, Bindings: bindings, Large: large, LargeMessageThreshold: 64, ExpiryScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := newSession(t, b, "")
	c1, col1 := subscribe(t, s, ConsumerOptions{Address: "p1", RoutingType: Anycast, Credit: 10})
	c2, col2 := subscribe(t, s, ConsumerOptions{Address: "p2", RoutingType: Anycast, Credit: 10})
	r, body := streamOf(3000)
	m := &Message{Address: "queue://p1,queue://p2", Durable: true, Priority: DefaultPriority}
	if err := s.ReceiveBody(m, r, 3000); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		c   *Consumer
		col *collector
	}{{c1, col1}, {c2, col2}} {
		d := x.col.next(t)
		if got, err := d.Message.ReadBody(); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s: %d bytes, %v", d.Message.Address, len(got), err)
		}
		if err := x.c.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
	}
	m = nil
	waitCount(t, large, 0)
}

// WriteBody writes the head, then a streamed body in pieces of at most
// StreamBuffer bytes, keeping back a last piece of 4 KiB in the head's
// buffer; a body shorter than its size, or a failed write, is an error.
func TestWriteBody(t *testing.T) {
	large := &memLarge{bodies: map[uint64][]byte{}}
	_, body := streamOf(StreamBuffer + 10000)
	large.bodies[7] = body
	m := &Message{ID: 7, lb: keptBody(large, 7, int64(len(body)))}
	var pieces [][]byte
	write := func(p []byte) error {
		pieces = append(pieces, bytes.Clone(p))
		return nil
	}
	head := append(make([]byte, 0, 8<<10), "head"...)
	tail, err := m.WriteBody(head, write)
	if err != nil {
		t.Fatal(err)
	}
	if len(pieces) != 3 || string(pieces[0]) != "head" || len(pieces[1]) != StreamBuffer || len(pieces[2]) != 10000-4<<10 {
		t.Fatalf("%d pieces", len(pieces))
	}
	if len(tail) != 4<<10 || &tail[:1][0] != &head[:1][0] {
		t.Fatalf("tail of %d bytes, in the head's buffer %v", len(tail), len(tail) > 0 && &tail[:1][0] == &head[:1][0])
	}
	if got := append(append(pieces[1], pieces[2]...), tail...); !bytes.Equal(got, body) {
		t.Fatal("the body written differs")
	}

	// A body of fewer bytes than its size.
	large.bodies[7] = body[:5000]
	pieces = nil
	if _, err := m.WriteBody([]byte("head"), write); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short body: %v", err)
	}
	// A failed write stops it.
	large.bodies[7] = body
	cut := errors.New("cut")
	calls := 0
	if _, err := m.WriteBody([]byte("head"), func([]byte) error {
		calls++
		if calls == 2 {
			return cut
		}
		return nil
	}); err != cut || calls != 2 {
		t.Fatalf("failed write: %v after %d writes", err, calls)
	}
}
