package core

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// oneGroup is a Cluster of one group whose broker runs in the test, on
// in-memory journals. failover replaces the group broker by a new one
// recovered from the same journals, as a new leader would be, and tells
// every mirror that its upstream was lost.
type oneGroup struct {
	t                *testing.T
	msgs, bindings   *memJournal
	mu               sync.Mutex
	g                *Broker
	ups              []*testUpstream
	closedUpstreams  int
	attachRefusedErr error
	// doubtful is what every upstream's Doubtful answers (fence_test.go).
	doubtful atomic.Bool
}

func newOneGroup(t *testing.T) *oneGroup {
	c := &oneGroup{t: t, msgs: newMemJournal(), bindings: newMemJournal()}
	c.g = c.start()
	t.Cleanup(func() { c.group().Close() })
	return c
}

func (c *oneGroup) start() *Broker {
	g, err := New(Config{Messages: c.msgs, Bindings: c.bindings, ExpiryScanInterval: -1})
	if err != nil {
		c.t.Fatal(err)
	}
	return g
}

func (c *oneGroup) group() *Broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.g
}

// failover closes the group broker's sessions and the broker, starts a
// new one on the journals, and re-attaches every upstream.
func (c *oneGroup) failover() {
	c.mu.Lock()
	old := c.g
	ups := append([]*testUpstream(nil), c.ups...)
	c.mu.Unlock()
	for _, u := range ups {
		u.detach()
	}
	for _, s := range old.sessionsForTest() {
		s.Close()
	}
	old.Close()
	g := c.start()
	c.mu.Lock()
	c.g = g
	c.mu.Unlock()
	for _, u := range ups {
		u.reattach(c.t)
	}
}

func (c *oneGroup) Open(s *Session) RemoteSession {
	return &testRemote{c: c, opts: s.Options()}
}

func (c *oneGroup) Retain(m *Message) error { return c.group().Retain(m) }
func (c *oneGroup) PermissionsChanged()     { c.group().PermissionsChanged() }
func (c *oneGroup) AddressRoutingTypes(n string) (bool, bool, bool) {
	return c.group().AddressRoutingTypes(n)
}
func (c *oneGroup) DurableSubscriptions(id string) ([]SubscriptionInfo, error) {
	return c.group().DurableSubscriptionsOf(id), nil
}
func (c *oneGroup) DurableClientIDs() []string { return c.group().DurableClientIDs() }
func (c *oneGroup) ClientRecords(id string) ([]ClientRecord, error) {
	return c.group().ClientRecordsOf(id), nil
}
func (c *oneGroup) ClientRecordHolders() []string { return c.group().ClientRecordHolders() }
func (c *oneGroup) Retained() []*Message          { return c.group().Retained() }

// testRemote opens its group session lazily and again after a failover.
type testRemote struct {
	c    *oneGroup
	opts SessionOptions
	mu   sync.Mutex
	gs   *GroupSession
	on   *Broker
}

func (r *testRemote) session() *GroupSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.c.group()
	if r.gs == nil || r.on != g {
		gs, err := g.OpenGroupSession(r.opts)
		if err != nil {
			r.c.t.Errorf("open group session: %v", err)
			return nil
		}
		r.gs, r.on = gs, g
	}
	return r.gs
}

func (r *testRemote) Send(m *Message, done func(error)) { r.session().Send(m, done) }
func (r *testRemote) Attach(o ConsumerOptions, sink Sink) (Upstream, error) {
	if err := r.c.attachRefusedErr; err != nil {
		return nil, err
	}
	u := &testUpstream{r: r, o: o, feed: sink.(*Feed)}
	var err error
	if u.up, err = r.session().Attach(o, sink); err != nil {
		return nil, err
	}
	r.c.mu.Lock()
	r.c.ups = append(r.c.ups, u)
	r.c.mu.Unlock()
	return u, nil
}
func (r *testRemote) Commit(ctx context.Context, sends []*Message, acks []TxAck) error {
	for i, a := range acks {
		acks[i].Upstream = a.Upstream.(*testUpstream).current()
	}
	return r.session().Commit(ctx, sends, acks)
}
func (r *testRemote) CommitRecords(ctx context.Context, sends []*Message, acks []TxAck, records []ClientRecord) error {
	for i, a := range acks {
		acks[i].Upstream = a.Upstream.(*testUpstream).current()
	}
	return r.session().CommitRecords(ctx, sends, acks, records)
}
func (r *testRemote) SetClientRecord(key string, value []byte, done func(error)) {
	r.session().SetClientRecord(key, value, done)
}
func (r *testRemote) ClearClientRecords(prefix string, done func(error)) {
	r.session().ClearClientRecords(prefix, done)
}
func (r *testRemote) Unsubscribe(name string) error { return r.session().Unsubscribe(name) }
func (r *testRemote) CreateTemporaryQueue() (string, error) {
	return r.session().CreateTemporaryQueue()
}
func (r *testRemote) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gs != nil {
		r.gs.Close()
	}
}

// testUpstream survives failovers: it re-attaches and re-grants the
// credit its mirror still wants.
type testUpstream struct {
	r      *testRemote
	o      ConsumerOptions
	feed   *Feed
	mu     sync.Mutex
	up     Upstream
	epoch  uint64
	closed bool
}

func (u *testUpstream) current() Upstream {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.up
}

func (u *testUpstream) detach() {
	u.mu.Lock()
	u.up = nil
	u.epoch++
	u.mu.Unlock()
}

func (u *testUpstream) reattach(t *testing.T) {
	u.mu.Lock()
	closed := u.closed
	u.mu.Unlock()
	if closed {
		return // its consumer has gone
	}
	credit := u.feed.Lost(func(uint64) bool { return true })
	up, err := u.r.session().Attach(u.o, u.feed)
	if err != nil {
		t.Errorf("re-attach: %v", err)
		return
	}
	u.mu.Lock()
	u.up = up
	u.mu.Unlock()
	if credit > 0 {
		up.Flow(credit)
	}
}

func (u *testUpstream) Flow(n int) {
	if up := u.current(); up != nil {
		up.Flow(n)
	}
}
func (u *testUpstream) Drain() {
	if up := u.current(); up != nil {
		up.Drain()
	}
}
func (u *testUpstream) Mark(tag uint64, mark uint32, done func(error)) {
	if up := u.current(); up != nil {
		up.(MarkingUpstream).Mark(tag, mark, done)
		return
	}
	done(ErrUnavailable)
}
func (u *testUpstream) Settle(tag uint64, o Outcome) {
	if up := u.current(); up != nil {
		up.Settle(tag, o)
	}
}

// Doubtful implements DoubtingUpstream: as the test set it.
func (u *testUpstream) Doubtful(uint64) bool { return u.r.c.doubtful.Load() }

func (u *testUpstream) Close() {
	u.mu.Lock()
	up := u.up
	u.closed = true
	u.mu.Unlock()
	if up != nil {
		up.Close()
	}
	u.r.c.mu.Lock()
	u.r.c.closedUpstreams++
	u.r.c.mu.Unlock()
}

// sessionsForTest lists the broker's open sessions.
func (b *Broker) sessionsForTest() []*Session {
	b.sessMu.Lock()
	defer b.sessMu.Unlock()
	var out []*Session
	for _, s := range b.sessions {
		out = append(out, s)
	}
	return out
}

func newAccess(t *testing.T, c Cluster) *Broker {
	t.Helper()
	b, err := New(Config{Cluster: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func accessSession(t *testing.T, b *Broker, clientID string) *Session {
	t.Helper()
	s, err := b.NewSession(SessionOptions{ClientID: clientID, User: "u", Protocol: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// waitFor polls cond until it holds, for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func queueDepth(t *testing.T, b *Broker, name string) int64 {
	t.Helper()
	q := b.Queue(name)
	if q == nil {
		t.Fatalf("no queue %q on the group broker", name)
	}
	return q.stats.depth.Load()
}

func TestAccessBrokerSendAckThroughGroup(t *testing.T) {
	c := newOneGroup(t)
	a := newAccess(t, c)
	s := accessSession(t, a, "")
	sendDurable(t, s, "orders", Anycast, "one")
	if n := c.msgs.live(); n != 1 {
		t.Fatalf("group journal holds %d messages, want 1", n)
	}
	if a.Queue("orders") != nil {
		t.Fatal("the access broker holds a queue of its own")
	}
	cons, col := subscribe(t, s, ConsumerOptions{Address: "orders", RoutingType: Anycast, Credit: 10})
	d := col.next(t)
	if string(d.Message.Body) != "one" || d.Redelivered() {
		t.Fatalf("got %q redelivered=%v", d.Message.Body, d.Redelivered())
	}
	if err := cons.Ack(d.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return queueDepth(t, c.group(), "orders") == 0 })
	waitFor(t, func() bool { return c.msgs.live() == 0 })
}

func TestAccessBrokerCreditIsExact(t *testing.T) {
	c := newOneGroup(t)
	a := newAccess(t, c)
	s := accessSession(t, a, "")
	for i := range 6 {
		sendDurable(t, s, "q", Anycast, string(rune('a'+i)))
	}
	cons, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 2})
	d1, d2 := col.next(t), col.next(t)
	col.none(t, 100*time.Millisecond)
	// The group broker delivered only what the client may take: the
	// rest waits there, for other consumers.
	if n := c.group().Queue("q").stats.inflight.Load(); n != 2 {
		t.Fatalf("upstream in flight %d, want 2", n)
	}
	cons.Ack(d1.ID)
	cons.Ack(d2.ID)
	cons.Flow(1)
	d3 := col.next(t)
	if string(d3.Message.Body) != "c" {
		t.Fatalf("third delivery %q, want c (queue order)", d3.Message.Body)
	}
	col.none(t, 100*time.Millisecond)
	// Absolute credit and drain (AMQP) reach upstream too.
	cons.UpdateCredit(func(uint64) int { return 2 })
	col.next(t)
	col.next(t)
	if unused, _ := cons.Drain(); unused != 0 {
		t.Fatalf("drain: %d unused, want 0", unused)
	}
	waitFor(t, func() bool { return c.group().Queue("q").stats.inflight.Load() == 3 }) // c, d and e
	cons.Flow(5)
	col.next(t)
	col.none(t, 100*time.Millisecond)
}

func TestAccessBrokerReleaseRejectAndClose(t *testing.T) {
	c := newOneGroup(t)
	a := newAccess(t, c)
	s := accessSession(t, a, "")
	sendDurable(t, s, "work", Anycast, "x")
	sendDurable(t, s, "work", Anycast, "y")
	cons, col := subscribe(t, s, ConsumerOptions{Address: "work", RoutingType: Anycast, Credit: 1})
	d := col.next(t)
	if err := cons.Release(d.ID, true); err != nil {
		t.Fatal(err)
	}
	cons.Flow(1)
	d = col.next(t)
	if string(d.Message.Body) != "x" || d.DeliveryCount != 1 || !d.Redelivered() {
		t.Fatalf("after a failed release: %q count %d", d.Message.Body, d.DeliveryCount)
	}
	if err := cons.Reject(d.ID); err != nil {
		t.Fatal(err)
	}
	cons.Flow(1)
	d = col.next(t)
	if string(d.Message.Body) != "y" {
		t.Fatalf("got %q, want y", d.Message.Body)
	}
	// The group broker dead-lettered the rejected one.
	waitFor(t, func() bool { q := c.group().Queue("DLQ"); return q != nil && q.stats.depth.Load() == 1 })
	// Closing the consumer returns its unacked delivery upstream,
	// counted once, for the next consumer.
	cons.Close()
	_, col2 := subscribe(t, s, ConsumerOptions{Address: "work", RoutingType: Anycast, Credit: 5})
	d = col2.next(t)
	if string(d.Message.Body) != "y" || d.DeliveryCount != 1 {
		t.Fatalf("after close: %q count %d, want y count 1", d.Message.Body, d.DeliveryCount)
	}
	col2.none(t, 100*time.Millisecond)
}

func TestAccessBrokerTopicsAndDurableSubscription(t *testing.T) {
	c := newOneGroup(t)
	a := newAccess(t, c)
	pub := accessSession(t, a, "")
	sub := accessSession(t, a, "client-1")
	cons, col := subscribe(t, sub, ConsumerOptions{Address: "news.*", RoutingType: Multicast, SubscriptionName: "s", Credit: 10})
	_, plain := subscribe(t, pub, ConsumerOptions{Address: "news.#", RoutingType: Multicast, Credit: 10})
	m := &Message{Address: "news.sport", RoutingType: Multicast, Durable: true, Body: []byte("goal"), Priority: DefaultPriority}
	if err := pub.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if d := col.next(t); string(d.Message.Body) != "goal" {
		t.Fatalf("durable subscriber got %q", d.Message.Body)
	}
	if d := plain.next(t); string(d.Message.Body) != "goal" {
		t.Fatalf("subscriber got %q", d.Message.Body)
	}
	if subs, err := sub.DurableSubscriptions(); err != nil || len(subs) != 1 || subs[0].Name != "s" || subs[0].Address != "news.*" {
		t.Fatalf("durable subscriptions %+v", subs)
	}
	cons.Close()
	if err := sub.Unsubscribe("s"); err != nil {
		t.Fatal(err)
	}
	if c.group().Queue("client-1.s") != nil {
		t.Fatal("unsubscribed durable subscription still on the group broker")
	}
}

func TestAccessBrokerTransaction(t *testing.T) {
	c := newOneGroup(t)
	a := newAccess(t, c)
	s := accessSession(t, a, "")
	sendDurable(t, s, "in", Anycast, "job")
	cons, col := subscribe(t, s, ConsumerOptions{Address: "in", RoutingType: Anycast, Credit: 1})
	d := col.next(t)
	tx, err := s.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Ack(cons, d.ID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Send(&Message{Address: "out", RoutingType: Anycast, Durable: true, Body: []byte("result"), Priority: DefaultPriority}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return queueDepth(t, c.group(), "in") == 0 })
	if n := queueDepth(t, c.group(), "out"); n != 1 {
		t.Fatalf("out holds %d, want 1", n)
	}
	// A rolled-back ack comes again, counted.
	sendDurable(t, s, "in", Anycast, "job2")
	cons.Flow(1)
	d = col.next(t)
	tx, _ = s.Begin()
	tx.Ack(cons, d.ID)
	tx.Rollback()
	cons.Flow(1)
	if d = col.next(t); string(d.Message.Body) != "job2" || d.DeliveryCount != 1 {
		t.Fatalf("after rollback: %q count %d", d.Message.Body, d.DeliveryCount)
	}
}

func TestAccessBrokerFailoverRedeliversFlagged(t *testing.T) {
	c := newOneGroup(t)
	a := newAccess(t, c)
	s := accessSession(t, a, "")
	for _, b := range []string{"1", "2", "3", "4"} {
		sendDurable(t, s, "q", Anycast, b)
	}
	cons, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 2})
	d1, d2 := col.next(t), col.next(t)
	if err := cons.Ack(d1.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return c.msgs.live() == 3 })
	c.failover()
	// d2 was delivered and not acked: the new group broker has it, and
	// delivers it again, flagged; the client's late ack of the old
	// delivery changes nothing upstream.
	cons.Ack(d2.ID)
	cons.Flow(3)
	got := map[string]bool{}
	for range 3 {
		d := col.next(t)
		if !d.Redelivered() {
			t.Fatalf("%q after failover not flagged redelivered", d.Message.Body)
		}
		got[string(d.Message.Body)] = true
		cons.Ack(d.ID)
	}
	if !got["2"] || !got["3"] || !got["4"] {
		t.Fatalf("after failover got %v, want 2, 3 and 4", got)
	}
	waitFor(t, func() bool { return c.msgs.live() == 0 })
}

func TestAccessBrokerAttachRefused(t *testing.T) {
	c := newOneGroup(t)
	a := newAccess(t, c)
	s := accessSession(t, a, "")
	c.attachRefusedErr = &AuthzError{User: "u", Permission: PermConsume, Address: "secret"}
	_, err := s.Subscribe(ConsumerOptions{Address: "secret", RoutingType: Anycast, Handler: func(Delivery) {}})
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("subscribe: %v, want ErrUnauthorized", err)
	}
}

func TestAccessBrokerRefusesJournals(t *testing.T) {
	if _, err := New(Config{Cluster: newOneGroup(t), Messages: newMemJournal(), Bindings: newMemJournal()}); err == nil {
		t.Fatal("an access broker with journals of its own started")
	}
}

// TestShallowCopyCopiesEveryField guards shallowCopy against a new
// exported Message field it would forget.
func TestShallowCopyCopiesEveryField(t *testing.T) {
	m := &Message{}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Uint8, reflect.Uint64:
			f.SetUint(3)
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]any{"k": "v"}))
		case reflect.Slice:
			f.Set(reflect.ValueOf([]byte("b")))
		case reflect.Struct:
			f.Set(reflect.ValueOf(time.Unix(1, 2)))
		default:
			t.Fatalf("field %s of kind %v: teach this test and shallowCopy about it", v.Type().Field(i).Name, f.Kind())
		}
	}
	c := reflect.ValueOf(m.shallowCopy()).Elem()
	for i := range v.NumField() {
		if v.Type().Field(i).IsExported() && !reflect.DeepEqual(v.Field(i).Interface(), c.Field(i).Interface()) {
			t.Errorf("shallowCopy drops %s", v.Type().Field(i).Name)
		}
	}
}

// Client records in a cluster live in the group: written through one
// access broker, read through another, kept across a failover, and
// written with a transaction's messages.
func TestAccessBrokerClientRecords(t *testing.T) {
	c := newOneGroup(t)
	a1, a2 := newAccess(t, c), newAccess(t, c)
	s := accessSession(t, a1, "mqtt/dev")
	setRecord(t, s, "session", "v1")
	if err := c.group().CreateAddress("jobs", Anycast); err != nil {
		t.Fatal(err)
	}
	tx, _ := s.Begin()
	tx.Send(&Message{Address: "jobs", RoutingType: Anycast, Durable: true, Body: []byte("m"), Priority: DefaultPriority})
	tx.SetClientRecord("i/7", []byte{1})
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := recordsOf(s); fmt.Sprint(got) != "map[i/7:\x01 session:v1]" {
		t.Fatalf("records %q", got)
	}
	if d := queueDepth(t, c.group(), "jobs"); d != 1 {
		t.Fatalf("depth %d", d)
	}
	s.Close()
	c.failover()
	s2 := accessSession(t, a2, "mqtt/dev")
	if got := recordsOf(s2); fmt.Sprint(got) != "map[i/7:\x01 session:v1]" {
		t.Fatalf("after a failover, through another access broker: %q", got)
	}
	if got := a2.ClientRecordHolders(); len(got) != 1 || got[0] != "mqtt/dev" {
		t.Fatalf("holders %v", got)
	}
	done := make(chan error, 1)
	s2.ClearClientRecords("", func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := c.group().ClientRecordHolders(); len(got) != 0 {
		t.Fatalf("holders after clearing %v", got)
	}
}

// A mark set on a mirror's delivery is kept upstream: the message comes
// back with it to a new consumer, also after a failover.
func TestAccessBrokerMarks(t *testing.T) {
	c := newOneGroup(t)
	a := newAccess(t, c)
	s := accessSession(t, a, "dev")
	opts := ConsumerOptions{Address: "cmd", RoutingType: Multicast, SubscriptionName: "cmd", Credit: 10}
	cons, col := subscribe(t, s, opts)
	if err := s.Send(context.Background(), &Message{Address: "cmd", RoutingType: Multicast, Durable: true, Body: []byte("x"), Priority: DefaultPriority}); err != nil {
		t.Fatal(err)
	}
	d := col.next(t)
	done := make(chan error, 1)
	if err := cons.Mark(d.ID, 42, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if subs, err := s.DurableSubscriptions(); err != nil || len(subs) != 1 || !sameMarks(subs[0].Marks, 42) {
		t.Fatalf("subscriptions %+v", subs)
	}
	cons.Close()
	cons, col = subscribe(t, s, opts)
	if d := col.next(t); d.Mark != 42 || !d.Redelivered() {
		t.Fatalf("redelivery mark %d", d.Mark)
	}
	c.failover()
	if d := col.next(t); d.Mark != 42 || string(d.Message.Body) != "x" {
		t.Fatalf("after a failover: %q mark %d", d.Message.Body, d.Mark)
	}
}
