package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/junctionmq/junction/core/selector"
)

// memJournal is an in-memory Journal for core's tests: it applies
// records at once and keeps counts of what was written.
type memJournal struct {
	mu      sync.Mutex
	order   []uint64
	recs    map[uint64]*memRec
	txs     map[uint64][]func()
	maxID   uint64
	appends int
	fail    error
	// hold, when set, holds back every completion until it is closed (a
	// sync that takes its time).
	hold chan struct{}
	// commitsLeft, when positive, is how many more transactions commit:
	// the ones after it fail (a journal that stops taking them), until
	// it is set to zero again.
	commitsLeft int
}

type memRec struct {
	utype   uint16
	payload []byte
	updates []memUpdate
}

type memUpdate struct {
	utype   uint16
	payload []byte
}

func newMemJournal() *memJournal {
	return &memJournal{recs: make(map[uint64]*memRec), txs: make(map[uint64][]func())}
}

func (j *memJournal) complete(done func(error), err error) {
	if done != nil {
		hold := j.hold
		go func() {
			if hold != nil {
				<-hold
			}
			done(err)
		}()
	}
}

func (j *memJournal) addLocked(id uint64, ut uint16, p []byte) {
	j.recs[id] = &memRec{utype: ut, payload: slices.Clone(p)}
	j.order = append(j.order, id)
	j.maxID = max(j.maxID, id)
	j.appends++
}

func (j *memJournal) updLocked(id uint64, ut uint16, p []byte) {
	if r := j.recs[id]; r != nil {
		r.updates = append(r.updates, memUpdate{ut, slices.Clone(p)})
	}
}

func (j *memJournal) Append(id uint64, ut uint16, p []byte, sync bool, done func(error)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fail != nil {
		j.complete(done, j.fail)
		return
	}
	j.addLocked(id, ut, p)
	j.complete(done, nil)
}

func (j *memJournal) Update(id uint64, ut uint16, p []byte, sync bool, done func(error)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.updLocked(id, ut, p)
	j.complete(done, nil)
}

func (j *memJournal) Delete(id uint64, sync bool, done func(error)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.recs, id)
	j.complete(done, nil)
}

func (j *memJournal) AppendTx(tx, id uint64, ut uint16, p []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	p = slices.Clone(p)
	j.txs[tx] = append(j.txs[tx], func() { j.addLocked(id, ut, p) })
}

func (j *memJournal) UpdateTx(tx, id uint64, ut uint16, p []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	p = slices.Clone(p)
	j.txs[tx] = append(j.txs[tx], func() { j.updLocked(id, ut, p) })
}

func (j *memJournal) DeleteTx(tx, id uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.txs[tx] = append(j.txs[tx], func() { delete(j.recs, id) })
}

func (j *memJournal) Commit(tx uint64, done func(error)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fail != nil {
		delete(j.txs, tx)
		j.complete(done, j.fail)
		return
	}
	switch {
	case j.commitsLeft == 1:
		j.commitsLeft = -1
	case j.commitsLeft > 1:
		j.commitsLeft--
	case j.commitsLeft < 0:
		delete(j.txs, tx)
		j.complete(done, errors.New("transactions stopped"))
		return
	}
	for _, f := range j.txs[tx] {
		f()
	}
	delete(j.txs, tx)
	j.complete(done, nil)
}

func (j *memJournal) Rollback(tx uint64, done func(error)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.txs, tx)
	j.complete(done, nil)
}

func (j *memJournal) Replay(add, update func(uint64, uint16, []byte) error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, id := range j.order {
		r := j.recs[id]
		if r == nil {
			continue
		}
		if err := add(id, r.utype, r.payload); err != nil {
			return err
		}
		for _, u := range r.updates {
			if err := update(id, u.utype, u.payload); err != nil {
				return err
			}
		}
	}
	return nil
}

func (j *memJournal) MaxID() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.maxID
}

func (j *memJournal) live() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.recs)
}

func durableBroker(t *testing.T, msgs, bindings *memJournal) *Broker {
	t.Helper()
	b, err := New(Config{Messages: msgs, Bindings: bindings, ExpiryScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func sendDurable(t *testing.T, s *Session, addr string, rt RoutingType, body string) {
	t.Helper()
	if err := s.Send(context.Background(), &Message{Address: addr, RoutingType: rt, Durable: true, Priority: DefaultPriority, Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
}

// waitLive waits for the journal's asynchronous acks to land.
func waitLive(t *testing.T, j *memJournal, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for j.live() != n {
		if time.Now().After(deadline) {
			t.Fatalf("journal holds %d live records, want %d", j.live(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDurableMessagesSurviveRestart(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b1 := durableBroker(t, msgs, bindings)
	s1, _ := b1.NewSession(SessionOptions{ClientID: "app"})
	// A durable subscription and a non-durable one.
	sub, subCol := subscribe(t, s1, ConsumerOptions{Address: "events", RoutingType: Multicast, SubscriptionName: "audit", Credit: 100})
	subscribe(t, s1, ConsumerOptions{Address: "events", RoutingType: Multicast, Credit: 100})
	for i := range 4 {
		sendDurable(t, s1, "orders", Anycast, fmt.Sprint(i))
	}
	send(t, s1, "orders", Anycast, "not durable")
	sendDurable(t, s1, "events", Multicast, "e1")
	sendDurable(t, s1, "events", Multicast, "e2")
	if got := msgs.appends; got != 6 {
		t.Fatalf("%d message records written, want 6 (durable ones once each, multicast once)", got)
	}
	// Ack one order, fail another once, ack e1 on the durable subscription.
	c, col := subscribe(t, s1, ConsumerOptions{Address: "orders", RoutingType: Anycast, Credit: 2})
	d0, d1 := col.next(t), col.next(t)
	if err := c.Ack(d0.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(d1.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := sub.Ack(subCol.next(t).ID); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	b1.Close()

	b2 := durableBroker(t, msgs, bindings)
	if rs := b2.Recovered(); rs.Messages != 4 || rs.Queues < 2 {
		t.Fatalf("recovered %+v, want 4 message references", rs)
	}
	s2 := newSession(t, b2, "app")
	_, col2 := subscribe(t, s2, ConsumerOptions{Address: "orders", RoutingType: Anycast, Credit: 10})
	for _, want := range []struct {
		body  string
		count uint32
	}{{"1", 1}, {"2", 0}, {"3", 0}} {
		d := col2.next(t)
		if body(d) != want.body || d.DeliveryCount != want.count || !d.Redelivered() {
			t.Fatalf("got %q count %d redelivered %v, want %q count %d redelivered", body(d), d.DeliveryCount, d.Redelivered(), want.body, want.count)
		}
	}
	col2.none(t, 20*time.Millisecond)
	sub2, scol := subscribe(t, s2, ConsumerOptions{Address: "events", RoutingType: Multicast, SubscriptionName: "audit", Credit: 10})
	if d := scol.next(t); body(d) != "e2" {
		t.Fatalf("durable subscription got %q", body(d))
	}
	scol.none(t, 20*time.Millisecond)
	_ = sub2
}

func TestDurableMessageToNonDurableQueueIsNotJournaled(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s := newSession(t, b, "")
	subscribe(t, s, ConsumerOptions{Address: "t", RoutingType: Multicast, Credit: 10})
	sendDurable(t, s, "t", Multicast, "x")
	send(t, s, "q", Anycast, "plain")
	if msgs.appends != 0 {
		t.Fatalf("%d records written", msgs.appends)
	}
}

func TestMulticastRecordDeletedWithLastReference(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s := newSession(t, b, "c")
	a, acol := subscribe(t, s, ConsumerOptions{Address: "t", RoutingType: Multicast, SubscriptionName: "a", Credit: 10})
	c, ccol := subscribe(t, s, ConsumerOptions{Address: "t", RoutingType: Multicast, SubscriptionName: "b", Credit: 10})
	sendDurable(t, s, "t", Multicast, "x")
	if err := a.Ack(acol.next(t).ID); err != nil {
		t.Fatal(err)
	}
	waitLive(t, msgs, 1)
	if err := c.Ack(ccol.next(t).ID); err != nil {
		t.Fatal(err)
	}
	waitLive(t, msgs, 0)
}

func TestJournalFailureFailsTheSend(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s := newSession(t, b, "")
	sendDurable(t, s, "q", Anycast, "ok") // creates the queue
	msgs.mu.Lock()
	msgs.fail = errors.New("disk full")
	msgs.mu.Unlock()
	err := s.Send(context.Background(), &Message{Address: "q", RoutingType: Anycast, Durable: true})
	if !errors.Is(err, ErrPersistence) {
		t.Fatalf("send during a journal failure: %v", err)
	}
	tx, _ := s.Begin()
	tx.Send(&Message{Address: "q", RoutingType: Anycast, Durable: true})
	if err := tx.Commit(context.Background()); !errors.Is(err, ErrPersistence) {
		t.Fatalf("commit during a journal failure: %v", err)
	}
}

func TestTransactionJournaledAsOneUnit(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b1 := durableBroker(t, msgs, bindings)
	s := newSession(t, b1, "")
	sendDurable(t, s, "q", Anycast, "old")
	c, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	d := col.next(t)
	tx, _ := s.Begin()
	tx.Send(&Message{Address: "q", RoutingType: Anycast, Durable: true, Body: []byte("new")})
	if err := tx.Ack(c, d.ID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	tx2, _ := s.Begin()
	tx2.Send(&Message{Address: "q", RoutingType: Anycast, Durable: true, Body: []byte("rolled back")})
	tx2.Rollback()
	s.Close()
	b1.Close()
	b2 := durableBroker(t, msgs, bindings)
	s2 := newSession(t, b2, "")
	_, col2 := subscribe(t, s2, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	if got := body(col2.next(t)); got != "new" {
		t.Fatalf("after restart got %q", got)
	}
	col2.none(t, 20*time.Millisecond)
}

func TestScheduledMessageSurvivesRestart(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b1 := durableBroker(t, msgs, bindings)
	s := newSession(t, b1, "")
	due := time.Now().Add(150 * time.Millisecond)
	if err := s.Send(context.Background(), &Message{Address: "q", RoutingType: Anycast, Durable: true, Body: []byte("later"), DeliveryTime: due}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	b1.Close()
	b2 := durableBroker(t, msgs, bindings)
	s2 := newSession(t, b2, "")
	_, col := subscribe(t, s2, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	d := col.next(t)
	if body(d) != "later" || time.Now().Before(due) {
		t.Fatalf("got %q at %v before its time %v", body(d), time.Now(), due)
	}
}

func TestDeletedQueueDropsItsRecords(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s := newSession(t, b, "")
	sendDurable(t, s, "gone", Anycast, "x")
	if err := b.DeleteQueue("gone"); err != nil {
		t.Fatal(err)
	}
	waitLive(t, msgs, 0)
	waitLive(t, bindings, 0)
}

func FuzzDecodeMessage(f *testing.F) {
	m := &Message{ID: 7, Address: "a.b", RoutingType: Multicast, Durable: true, Priority: 9,
		Timestamp: time.Unix(1, 2), Expiration: time.Unix(3, 4), ContentType: "text/plain",
		Properties: map[string]any{"s": "v", "i": int64(-1), "f": 1.5, "b": true, "y": []byte{0}, "n": nil},
		Body:       []byte("body")}
	f.Add(encodeMessage(m, []uint64{1, 2}))
	f.Add(encodeMessage(&Message{Address: "q"}, nil))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, p []byte) {
		m, qs, err := decodeMessage(p)
		if err != nil {
			return
		}
		again := encodeMessage(m, qs)
		m2, qs2, err := decodeMessage(again)
		if err != nil || m2.ID != m.ID || m2.Address != m.Address || string(m2.Body) != string(m.Body) ||
			!slices.Equal(qs, qs2) || len(m2.Properties) != len(m.Properties) {
			t.Fatalf("round trip changed the message: %v", err)
		}
	})
}

// FuzzDecodeDivert: a divert record decodes to a valid divert that
// survives a round trip, or is refused.
func FuzzDecodeDivert(f *testing.F) {
	f.Add(encodeDivert(&Divert{Name: "d", Address: "a.#", ForwardingAddress: "queue://x,topic://y", Filter: "n > 1", Exclusive: true, RoutingType: "STRIP"}))
	f.Add(encodeDivert(&Divert{Name: "d", Address: "a", ForwardingAddress: "b"}))
	f.Add([]byte{codecVersion, 2})
	f.Fuzz(func(t *testing.T, p []byte) {
		d, err := decodeDivert(p)
		if err != nil {
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("decoded an invalid divert %+v: %v", d, err)
		}
		if d2, err := decodeDivert(encodeDivert(&d)); err != nil || d2 != d {
			t.Fatalf("round trip changed the divert: %+v, then %+v (%v)", d, d2, err)
		}
	})
}

// memLarge is an in-memory LargeStore.
type memLarge struct {
	mu     sync.Mutex
	bodies map[uint64][]byte
}

func (l *memLarge) Write(id uint64, r io.Reader) (int64, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bodies[id] = b
	return int64(len(b)), nil
}

func (l *memLarge) Open(id uint64) (io.ReadCloser, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.bodies[id]
	if !ok {
		return nil, errors.New("no such body")
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (l *memLarge) Link(from, to uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.bodies[from]
	if !ok {
		return errors.New("no such body")
	}
	l.bodies[to] = b
	return nil
}

func (l *memLarge) Size(id uint64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.bodies[id]
	if !ok {
		return 0, errors.New("no such body")
	}
	return int64(len(b)), nil
}

func (l *memLarge) Remove(id uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.bodies, id)
	return nil
}

func (l *memLarge) List() ([]uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []uint64
	for id := range l.bodies {
		ids = append(ids, id)
	}
	return ids, nil
}

func (l *memLarge) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.bodies)
}

func TestLargeMessagesLiveInTheirOwnFiles(t *testing.T) {
	msgs, bindings, large := newMemJournal(), newMemJournal(), &memLarge{bodies: map[uint64][]byte{}}
	open := func() *Broker {
		b, err := New(Config{Messages: msgs, Bindings: bindings, Large: large, LargeMessageThreshold: 64, ExpiryScanInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	big := bytesOf(1000)
	b1 := open()
	s := newSession(t, b1, "")
	if err := s.Send(context.Background(), &Message{Address: "q", RoutingType: Anycast, Durable: true, Priority: DefaultPriority, Body: big}); err != nil {
		t.Fatal(err)
	}
	sendDurable(t, s, "q", Anycast, "small")
	if large.count() != 1 {
		t.Fatalf("%d large bodies stored, want 1", large.count())
	}
	for _, id := range msgs.order {
		if r := msgs.recs[id]; r != nil && len(r.payload) > 500 {
			t.Fatalf("record %d holds %d bytes: the large body went into the journal", id, len(r.payload))
		}
	}
	large.Write(999, strings.NewReader("orphan")) // a body whose record never made it
	s.Close()
	b1.Close()

	b2 := open()
	if large.count() != 1 {
		t.Fatalf("orphan not removed at recovery: %d bodies", large.count())
	}
	s2 := newSession(t, b2, "")
	c, col := subscribe(t, s2, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	d := col.next(t)
	if !d.Message.Streamed() {
		t.Fatal("recovered large message holds its body in memory")
	}
	if got, err := d.Message.ReadBody(); err != nil || !slices.Equal(got, big) {
		t.Fatalf("large body not restored (%d bytes, %v)", len(got), err)
	}
	if err := c.Ack(d.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for large.count() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("large body not removed after its message was acked")
		}
		time.Sleep(time.Millisecond)
	}
}

func bytesOf(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func TestRetainedMessagesSurviveRestart(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b1 := durableBroker(t, msgs, bindings)
	for _, body := range []string{"open", "closed"} {
		if err := b1.Retain(&Message{Address: "door", Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	b1.Retain(&Message{Address: "light", Body: []byte("on")})
	b1.Retain(&Message{Address: "light"}) // cleared
	b1.Close()
	b2 := durableBroker(t, msgs, bindings)
	got := b2.Retained()
	if len(got) != 1 || got[0].Address != "door" || string(got[0].Body) != "closed" {
		t.Fatalf("retained after restart: %+v", got)
	}
	waitLive(t, msgs, 1)
}

// A durable wildcard subscription recovered from a binding written
// before subscribers were recorded reads for the first session that
// attaches to it: what that user may not read is removed as it is
// reached, and what is sent afterwards is checked as it is routed.
func TestLegacyWildcardBindingReadsForItsFirstSubscriber(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	// The binding and messages as an older broker wrote them.
	old := &Queue{name: "app.feed", address: "devices.#", routing: Multicast, clientID: "app"}
	rec := encodeQueue(old)
	if rec[2]&4 != 0 {
		t.Fatal("a binding without a subscriber records one")
	}
	bindings.Append(1, recQueue, rec, true, nil)
	for i, addr := range []string{"devices.secret.a", "devices.x.a"} {
		m := &Message{ID: uint64(i + 1), Address: addr, RoutingType: Multicast, Durable: true, Priority: DefaultPriority, Body: []byte(addr)}
		msgs.Append(m.ID, recMessage, encodeMessage(m, []uint64{1}), true, nil)
	}
	g := &grantTable{grants: map[string]map[Permission][]string{
		"bob": {PermConsume: {"devices.x.#", "devices.*"}},
	}}
	b, err := New(Config{Authorizer: g, Messages: msgs, Bindings: bindings, ExpiryScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bob := clientSession(t, b, "bob", "app")
	c, col := subscribe(t, bob, ConsumerOptions{Address: "devices.#", RoutingType: Multicast, SubscriptionName: "feed", Credit: 10})
	d := col.next(t)
	if body(d) != "devices.x.a" {
		t.Fatalf("bob received %q", body(d))
	}
	col.none(t, 20*time.Millisecond)
	c.Ack(d.ID)
	q := b.Queue("app.feed")
	if n := q.Stats().Depth; n != 0 {
		t.Fatalf("subscription holds %d messages, want 0", n)
	}
	waitLive(t, msgs, 0)
	// Now bob's: a send he may not read is not taken.
	s := newSession(t, b, "")
	before := q.Stats().Enqueued
	send(t, s, "devices.secret.b", Multicast, "secret")
	if n := q.Stats().Enqueued - before; n != 0 {
		t.Fatalf("%d messages enqueued after bob attached, want 0", n)
	}
}

// A binding records its subscriber after the selector (flag bit 2);
// one written before, with or without a selector, decodes without one.
func TestQueueRecordSubscriber(t *testing.T) {
	sel, _ := selector.Parse("a = 'x'")
	q := &Queue{name: "app.sub", address: "devices.#", routing: Multicast, clientID: "app", filter: sel,
		subscriber: subscriber{user: "bob", proto: "stomp"}, subKnown: true}
	p := encodeQueue(q)
	rec, err := decodeQueue(p)
	if err != nil || !rec.subKnown || rec.subscriber != q.subscriber || rec.selector != "a = 'x'" {
		t.Fatalf("record: %+v %v", rec, err)
	}
	q.subKnown = false
	old := encodeQueue(q) // the layout before subscribers were recorded
	if rec, err := decodeQueue(old); err != nil || rec.subKnown || rec.selector != "a = 'x'" {
		t.Fatalf("older record: %+v %v", rec, err)
	}
	if _, err := decodeQueue(p[:len(p)-1]); err == nil {
		t.Fatal("a truncated subscriber decoded")
	}
}

// With VisibleWhenStored a durable message reaches consumers only once
// its write completes, and never when the write fails; a non-durable
// one at once.
func TestVisibleWhenStored(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	hold := make(chan struct{})
	msgs.hold = hold
	b, err := New(Config{Messages: msgs, Bindings: bindings, ExpiryScanInterval: -1, VisibleWhenStored: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := newSession(t, b, "")
	_, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	confirmed := make(chan error, 1)
	s.SendAsync(&Message{Address: "q", RoutingType: Anycast, Durable: true, Body: []byte("d"), Priority: DefaultPriority},
		func(err error) { confirmed <- err })
	send(t, s, "q", Anycast, "n") // not durable: no write to wait for
	if d := col.next(t); body(d) != "n" {
		t.Fatalf("first delivery %q, want the non-durable message", body(d))
	}
	col.none(t, 50*time.Millisecond)
	close(hold)
	if err := <-confirmed; err != nil {
		t.Fatal(err)
	}
	if d := col.next(t); body(d) != "d" {
		t.Fatalf("delivery %q after the write", body(d))
	}

	msgs.mu.Lock()
	msgs.hold, msgs.fail = nil, errors.New("disk gone")
	msgs.mu.Unlock()
	s.SendAsync(&Message{Address: "q", RoutingType: Anycast, Durable: true, Body: []byte("lost"), Priority: DefaultPriority},
		func(err error) { confirmed <- err })
	if err := <-confirmed; err == nil {
		t.Fatal("a failed write was confirmed")
	}
	col.none(t, 50*time.Millisecond)
}
