package core

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// collector is a consumer handler that records deliveries.
type collector struct {
	ch chan Delivery
}

func newCollector() *collector { return &collector{ch: make(chan Delivery, 10000)} }

func (c *collector) handle(d Delivery) { c.ch <- d }

// next waits for one delivery.
func (c *collector) next(t *testing.T) Delivery {
	t.Helper()
	select {
	case d := <-c.ch:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery within 5s")
	}
	return Delivery{}
}

// none asserts that nothing arrives within d.
func (c *collector) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case x := <-c.ch:
		t.Fatalf("unexpected delivery of %q", x.Message.Body)
	case <-time.After(d):
	}
}

func newBroker(t *testing.T, settings ...AddressSettings) *Broker {
	t.Helper()
	b, err := New(Config{AddressSettings: settings, ExpiryScanInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newSession(t *testing.T, b *Broker, clientID string) *Session {
	t.Helper()
	s, err := b.NewSession(SessionOptions{ClientID: clientID, User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func send(t *testing.T, s *Session, addr string, rt RoutingType, body string) *Message {
	t.Helper()
	m := &Message{Address: addr, RoutingType: rt, Body: []byte(body), Priority: DefaultPriority}
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return m
}

func subscribe(t *testing.T, s *Session, o ConsumerOptions) (*Consumer, *collector) {
	t.Helper()
	col := newCollector()
	o.Handler = col.handle
	c, err := s.Subscribe(o)
	if err != nil {
		t.Fatal(err)
	}
	return c, col
}

func body(d Delivery) string { return string(d.Message.Body) }

func TestAnycastFIFOAndAck(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	for i := range 5 {
		send(t, s, "orders", Anycast, fmt.Sprint(i))
	}
	c, col := subscribe(t, s, ConsumerOptions{Address: "orders", RoutingType: Anycast, Credit: 10})
	for i := range 5 {
		d := col.next(t)
		if body(d) != fmt.Sprint(i) || d.Redelivered() {
			t.Fatalf("delivery %d: body %q redelivered %v", i, body(d), d.Redelivered())
		}
		if err := c.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Ack(999); !errors.Is(err, ErrUnknownDelivery) {
		t.Fatalf("ack of unknown delivery: %v", err)
	}
	st := b.Queue("orders").Stats()
	if st.Depth != 0 || st.Enqueued != 5 || st.Dequeued != 5 || st.InFlight != 0 || st.Consumers != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCreditLimitsDelivery(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	c, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 2})
	for i := range 5 {
		send(t, s, "q", Anycast, fmt.Sprint(i))
	}
	col.next(t)
	col.next(t)
	col.none(t, 30*time.Millisecond)
	if got := b.Queue("q").Stats(); got.InFlight != 2 || got.Depth != 5 {
		t.Fatalf("stats %+v", got)
	}
	c.Flow(1)
	if d := col.next(t); body(d) != "2" {
		t.Fatalf("got %q after Flow(1)", body(d))
	}
	col.none(t, 30*time.Millisecond)
	c.SetCredit(10)
	col.next(t)
	col.next(t)
}

func TestRoundRobin(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	_, a := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100})
	_, c := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100})
	for i := range 10 {
		send(t, s, "q", Anycast, fmt.Sprint(i))
	}
	for i := range 5 {
		if x := body(a.next(t)); x != fmt.Sprint(2*i) {
			t.Fatalf("consumer a got %s, want %d", x, 2*i)
		}
		if x := body(c.next(t)); x != fmt.Sprint(2*i+1) {
			t.Fatalf("consumer b got %s, want %d", x, 2*i+1)
		}
	}
}

func TestReleaseAndConsumerLossRedeliverInOrder(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	c1, col1 := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	for i := range 4 {
		send(t, s, "q", Anycast, fmt.Sprint(i))
	}
	var ds []Delivery
	for range 4 {
		ds = append(ds, col1.next(t))
	}
	// Plain release: not a failed attempt.
	if err := c1.Release(ds[0].ID, false); err != nil {
		t.Fatal(err)
	}
	if d := col1.next(t); body(d) != "0" || d.Redelivered() {
		t.Fatalf("released: got %q redelivered=%v", body(d), d.Redelivered())
	}
	if err := c1.Ack(ds[1].ID); err != nil {
		t.Fatal(err)
	}
	c1.Close()
	_, col2 := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	for _, want := range []string{"0", "2", "3"} {
		d := col2.next(t)
		if body(d) != want || !d.Redelivered() || d.DeliveryCount != 1 {
			t.Fatalf("after consumer loss got %q count=%d, want %q count=1", body(d), d.DeliveryCount, want)
		}
	}
}

func TestRejectAndMaxAttemptsDeadLetter(t *testing.T) {
	max := 3
	b := newBroker(t, AddressSettings{Match: "poison.#", MaxDeliveryAttempts: &max})
	s := newSession(t, b, "")
	_, dlq := subscribe(t, s, ConsumerOptions{Address: "DLQ", RoutingType: Anycast, Credit: 10})
	c, col := subscribe(t, s, ConsumerOptions{Address: "poison.a", RoutingType: Anycast, Credit: 10})
	send(t, s, "poison.a", Anycast, "bad")
	for attempt := range max {
		d := col.next(t)
		if int(d.DeliveryCount) != attempt {
			t.Fatalf("attempt %d: delivery count %d", attempt, d.DeliveryCount)
		}
		if err := c.Release(d.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	d := dlq.next(t)
	if body(d) != "bad" || d.Message.Properties[PropOriginalAddress] != "poison.a" || d.Message.Properties[PropOriginalQueue] != "poison.a" {
		t.Fatalf("dead letter %q props %v", body(d), d.Message.Properties)
	}
	col.none(t, 30*time.Millisecond)
	send(t, s, "poison.a", Anycast, "rejected")
	if err := c.Reject(col.next(t).ID); err != nil {
		t.Fatal(err)
	}
	if d := dlq.next(t); body(d) != "rejected" || d.Message.Properties[PropReason] != "rejected" {
		t.Fatalf("rejected: %q %v", body(d), d.Message.Properties)
	}
	st := b.Queue("poison.a").Stats()
	if st.DeadLettered != 2 || st.Depth != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRedeliveryDelayBacksOff(t *testing.T) {
	delay, mult := 40*time.Millisecond, 2.0
	b := newBroker(t, AddressSettings{Match: "slow", RedeliveryDelay: &delay, RedeliveryMultiplier: &mult})
	s := newSession(t, b, "")
	c, col := subscribe(t, s, ConsumerOptions{Address: "slow", RoutingType: Anycast, Credit: 10})
	send(t, s, "slow", Anycast, "x")
	d := col.next(t)
	for attempt, want := range []time.Duration{40 * time.Millisecond, 80 * time.Millisecond} {
		start := time.Now()
		if err := c.Release(d.ID, true); err != nil {
			t.Fatal(err)
		}
		d = col.next(t)
		if got := time.Since(start); got < want {
			t.Fatalf("attempt %d redelivered after %v, want >= %v", attempt, got, want)
		}
	}
}

func TestExpiry(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	_, exp := subscribe(t, s, ConsumerOptions{Address: "ExpiryQueue", RoutingType: Anycast, Credit: 10})
	m := &Message{Address: "q", RoutingType: Anycast, Body: []byte("old"), Expiration: time.Now().Add(20 * time.Millisecond)}
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	send(t, s, "q", Anycast, "fresh")
	// Nobody consumes q: the scan must find the expired message.
	if d := exp.next(t); body(d) != "old" || d.Message.Properties[PropReason] != "expired" {
		t.Fatalf("expiry queue got %q %v", body(d), d.Message.Properties)
	}
	_, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	if d := col.next(t); body(d) != "fresh" {
		t.Fatalf("got %q", body(d))
	}
	// Already expired at send: never delivered.
	m = &Message{Address: "q", RoutingType: Anycast, Body: []byte("dead"), Expiration: time.Now().Add(-time.Second)}
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	col.none(t, 30*time.Millisecond)
	if d := exp.next(t); body(d) != "dead" {
		t.Fatalf("got %q", body(d))
	}
	if st := b.Queue("q").Stats(); st.Expired != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPriority(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	for i, p := range []uint8{1, 9, 4, 9, 0} {
		m := &Message{Address: "q", RoutingType: Anycast, Priority: p, Body: []byte(fmt.Sprint(i))}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	_, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	for _, want := range []string{"1", "3", "2", "0", "4"} {
		if got := body(col.next(t)); got != want {
			t.Fatalf("got %s want %s", got, want)
		}
	}
	if err := s.Send(context.Background(), &Message{Address: "q", Priority: 10}); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("priority 10: %v", err)
	}
}

func TestMessageGroups(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	c1, col1 := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100})
	_, col2 := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100})
	sendG := func(g, body string) {
		m := &Message{Address: "q", RoutingType: Anycast, GroupID: g, Body: []byte(body)}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	sendG("A", "a1") // consumer 1 takes group A
	sendG("B", "b1") // consumer 2 takes group B
	for i := range 4 {
		sendG("A", fmt.Sprintf("a%d", i+2))
	}
	want1 := []string{"a1", "a2", "a3", "a4", "a5"}
	for _, w := range want1 {
		if got := body(col1.next(t)); got != w {
			t.Fatalf("consumer 1 got %s want %s", got, w)
		}
	}
	if got := body(col2.next(t)); got != "b1" {
		t.Fatalf("consumer 2 got %s", got)
	}
	// The group owner leaves: group A moves to the other consumer,
	// unacked messages first.
	c1.Close()
	for _, w := range want1 {
		if got := body(col2.next(t)); got != w {
			t.Fatalf("after reassignment got %s want %s", got, w)
		}
	}
	sendG("A", "a6")
	if got := body(col2.next(t)); got != "a6" {
		t.Fatalf("got %s", got)
	}
}

func TestGroupOwnerWithoutCreditDoesNotBlockOthers(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	_, col1 := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 1})
	_, col2 := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	for _, x := range []struct{ g, b string }{{"A", "a1"}, {"A", "a2"}, {"", "free"}} {
		if err := s.Send(context.Background(), &Message{Address: "q", RoutingType: Anycast, GroupID: x.g, Body: []byte(x.b)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := body(col1.next(t)); got != "a1" {
		t.Fatalf("got %s", got)
	}
	if got := body(col2.next(t)); got != "free" {
		t.Fatalf("a2 must wait for its group owner; consumer 2 got %s", got)
	}
	col2.none(t, 30*time.Millisecond)
}

func TestExclusiveConsumer(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	_, plain := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100})
	ex, excl := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100, Exclusive: true})
	for i := range 3 {
		send(t, s, "q", Anycast, fmt.Sprint(i))
	}
	for i := range 3 {
		if got := body(excl.next(t)); got != fmt.Sprint(i) {
			t.Fatalf("got %s", got)
		}
	}
	plain.none(t, 30*time.Millisecond)
	ex.Close()
	// The unacked messages and new ones go to the remaining consumer.
	for i := range 3 {
		if got := body(plain.next(t)); got != fmt.Sprint(i) {
			t.Fatalf("got %s", got)
		}
	}
}

func TestMulticastAndWildcards(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	_, exact := subscribe(t, s, ConsumerOptions{Address: "sensors.kitchen.temp", RoutingType: Multicast, Credit: 100})
	_, star := subscribe(t, s, ConsumerOptions{Address: "sensors.*.temp", RoutingType: Multicast, Credit: 100})
	_, hash := subscribe(t, s, ConsumerOptions{Address: "sensors.#", RoutingType: Multicast, Credit: 100})
	gt, gtc := subscribe(t, s, ConsumerOptions{Address: "sensors.>", RoutingType: Multicast, Credit: 100})
	m := send(t, s, "sensors.kitchen.temp", Multicast, "21")
	for _, col := range []*collector{exact, star, hash, gtc} {
		d := col.next(t)
		if d.Message != m {
			t.Fatal("multicast message must be shared, not copied")
		}
	}
	send(t, s, "sensors.kitchen.humidity", Multicast, "40")
	if got := body(hash.next(t)); got != "40" {
		t.Fatalf("got %s", got)
	}
	if got := body(gtc.next(t)); got != "40" {
		t.Fatalf("got %s", got)
	}
	exact.none(t, 20*time.Millisecond)
	star.none(t, 20*time.Millisecond)
	// A non-durable subscription disappears with its consumer.
	name := gt.Queue().Name()
	gt.Close()
	if b.Queue(name) != nil {
		t.Fatal("non-durable subscription queue survived its consumer")
	}
	if _, err := s.Subscribe(ConsumerOptions{Address: "a.*", RoutingType: Anycast, Handler: func(Delivery) {}}); !errors.Is(err, ErrInvalidAddress) {
		t.Fatalf("anycast wildcard: %v", err)
	}
	if err := s.Send(context.Background(), &Message{Address: "a.*"}); !errors.Is(err, ErrInvalidAddress) {
		t.Fatalf("send to pattern: %v", err)
	}
}

func TestDurableSubscriptionKeepsMessagesWhileAway(t *testing.T) {
	b := newBroker(t)
	pub := newSession(t, b, "")
	s1, err := b.NewSession(SessionOptions{ClientID: "app"})
	if err != nil {
		t.Fatal(err)
	}
	c, col := subscribe(t, s1, ConsumerOptions{Address: "news", RoutingType: Multicast, SubscriptionName: "sub", Credit: 10})
	send(t, pub, "news", Multicast, "1")
	if err := c.Ack(col.next(t).ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.NewSession(SessionOptions{ClientID: "app"}); !errors.Is(err, ErrClientIDInUse) {
		t.Fatalf("second session with the same client id: %v", err)
	}
	s1.Close()
	send(t, pub, "news", Multicast, "2")
	send(t, pub, "news", Multicast, "3")
	if st := b.Queue("app.sub").Stats(); st.Depth != 2 || !st.Durable {
		t.Fatalf("stats while away %+v", st)
	}
	s2 := newSession(t, b, "app")
	_, col2 := subscribe(t, s2, ConsumerOptions{Address: "news", RoutingType: Multicast, SubscriptionName: "sub", Credit: 10})
	for _, want := range []string{"2", "3"} {
		if got := body(col2.next(t)); got != want {
			t.Fatalf("got %s want %s", got, want)
		}
	}
	if _, err := s2.Subscribe(ConsumerOptions{Address: "news", RoutingType: Multicast, SubscriptionName: "sub", Handler: func(Delivery) {}}); !errors.Is(err, ErrSubscriptionInUse) {
		t.Fatalf("second consumer on a durable subscription: %v", err)
	}
	if err := s2.Unsubscribe("sub"); !errors.Is(err, ErrSubscriptionInUse) {
		t.Fatalf("unsubscribe while active: %v", err)
	}
	s2.Close()
	s3 := newSession(t, b, "app")
	if err := s3.Unsubscribe("sub"); err != nil {
		t.Fatal(err)
	}
	if b.Queue("app.sub") != nil {
		t.Fatal("unsubscribe left the queue")
	}
	if _, err := pub.Subscribe(ConsumerOptions{Address: "news", RoutingType: Multicast, SubscriptionName: "x", Handler: func(Delivery) {}}); !errors.Is(err, ErrClientIDRequired) {
		t.Fatalf("durable without client id: %v", err)
	}
}

func TestTransactions(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	c, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	tx, err := s.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := tx.Send(&Message{Address: "q", RoutingType: Anycast, Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	col.none(t, 20*time.Millisecond)
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ds []Delivery
	for range 3 {
		ds = append(ds, col.next(t))
	}
	if err := tx.Commit(context.Background()); !errors.Is(err, ErrTxClosed) {
		t.Fatalf("second commit: %v", err)
	}

	// Acks in a rolled-back transaction are redelivered; sends vanish.
	tx2, _ := s.Begin()
	if n, err := tx2.AckUpTo(c, ds[1].ID); err != nil || n != 2 {
		t.Fatalf("AckUpTo: %d %v", n, err)
	}
	if err := tx2.Send(&Message{Address: "q", RoutingType: Anycast, Body: []byte("never")}); err != nil {
		t.Fatal(err)
	}
	if err := tx2.Rollback(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"0", "1"} {
		d := col.next(t)
		if body(d) != want || !d.Redelivered() {
			t.Fatalf("after rollback got %s redelivered=%v", body(d), d.Redelivered())
		}
		if err := c.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
	}
	tx3, _ := s.Begin()
	if err := tx3.Ack(c, ds[2].ID); err != nil {
		t.Fatal(err)
	}
	if err := tx3.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	col.none(t, 20*time.Millisecond)
	if st := b.Queue("q").Stats(); st.Depth != 0 || st.Dequeued != 3 {
		t.Fatalf("stats %+v", st)
	}

	// A transaction whose send cannot be routed sends nothing.
	off := false
	b2 := newBroker(t, AddressSettings{Match: "locked.#", AutoCreate: &off})
	s2 := newSession(t, b2, "")
	tx4, _ := s2.Begin()
	_ = tx4.Send(&Message{Address: "ok", RoutingType: Anycast})
	_ = tx4.Send(&Message{Address: "locked.x", RoutingType: Anycast})
	if err := tx4.Commit(context.Background()); !errors.Is(err, ErrAddressNotFound) {
		t.Fatalf("commit: %v", err)
	}
	if q := b2.Queue("ok"); q != nil && q.Stats().Enqueued != 0 {
		t.Fatal("a failed commit delivered a message")
	}
}

func TestSessionCloseRollsBackAndReturns(t *testing.T) {
	b := newBroker(t)
	s1 := newSession(t, b, "")
	s2 := newSession(t, b, "")
	send(t, s2, "q", Anycast, "m")
	c, col := subscribe(t, s1, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 1})
	tx, _ := s1.Begin()
	if err := tx.Ack(c, col.next(t).ID); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	_, col2 := subscribe(t, s2, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 1})
	if d := col2.next(t); body(d) != "m" || !d.Redelivered() {
		t.Fatalf("got %q redelivered=%v", body(d), d.Redelivered())
	}
	if err := s1.Send(context.Background(), &Message{Address: "q"}); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("send on closed session: %v", err)
	}
}

func TestScheduledDelivery(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	_, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	start := time.Now()
	for _, x := range []struct {
		d    time.Duration
		body string
	}{{120 * time.Millisecond, "late"}, {60 * time.Millisecond, "early"}} {
		m := &Message{Address: "q", RoutingType: Anycast, Body: []byte(x.body), DeliveryTime: start.Add(x.d)}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	send(t, s, "q", Anycast, "now")
	if got := body(col.next(t)); got != "now" {
		t.Fatalf("got %s", got)
	}
	if st := b.Queue("q").Stats(); st.Scheduled != 2 {
		t.Fatalf("stats %+v", st)
	}
	for _, x := range []struct {
		body string
		at   time.Duration
	}{{"early", 60 * time.Millisecond}, {"late", 120 * time.Millisecond}} {
		d := col.next(t)
		if body(d) != x.body {
			t.Fatalf("got %s want %s", body(d), x.body)
		}
		if el := time.Since(start); el < x.at {
			t.Fatalf("%s delivered after %v, before its time %v", x.body, el, x.at)
		}
	}
}

func TestAutoCreateOffAndSettingsResolution(t *testing.T) {
	off := false
	dla := "orders.DLQ"
	five := 5
	b := newBroker(t,
		AddressSettings{Match: "#", MaxDeliveryAttempts: &five},
		AddressSettings{Match: "orders.#", DeadLetterAddress: &dla},
		AddressSettings{Match: "orders.eu", AutoCreate: &off},
	)
	st := b.SettingsFor("orders.eu")
	if st.DeadLetterAddress != "orders.DLQ" || st.MaxDeliveryAttempts != 5 || st.AutoCreate || st.ExpiryAddress != "ExpiryQueue" {
		t.Fatalf("settings %+v", st)
	}
	s := newSession(t, b, "")
	if err := s.Send(context.Background(), &Message{Address: "orders.eu"}); !errors.Is(err, ErrAddressNotFound) {
		t.Fatalf("send with auto-create off: %v", err)
	}
	if err := b.CreateAddress("orders.eu", Anycast); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), &Message{Address: "orders.eu"}); err != nil {
		t.Fatal(err)
	}
	if q := b.Queue("orders.eu"); q == nil || q.Stats().Depth != 1 {
		t.Fatal("explicitly created queue did not get the message")
	}
	if err := s.Send(context.Background(), &Message{Address: "orders.eu", RoutingType: Multicast}); !errors.Is(err, ErrRoutingMismatch) {
		t.Fatalf("multicast to anycast-only address: %v", err)
	}
	if err := b.DeleteAddress("orders.eu"); err != nil {
		t.Fatal(err)
	}
	if b.Queue("orders.eu") != nil {
		t.Fatal("delete left the queue")
	}
	bad := AddressSettings{Match: "a..b"}
	if _, err := New(Config{AddressSettings: []AddressSettings{bad}}); err == nil {
		t.Fatal("bad pattern accepted")
	}
}

func TestClosedBroker(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := b.NewSession(SessionOptions{})
	b.Close()
	b.Close()
	if err := s.Send(context.Background(), &Message{Address: "q"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
}

func TestSharedSubscriptionCompetes(t *testing.T) {
	b := newBroker(t)
	s1, s2 := newSession(t, b, ""), newSession(t, b, "")
	c1, col1 := subscribe(t, s1, ConsumerOptions{Address: "jobs.#", RoutingType: Multicast, SharedSubscriptionName: "workers", Credit: 100})
	_, col2 := subscribe(t, s2, ConsumerOptions{Address: "jobs.#", RoutingType: Multicast, SharedSubscriptionName: "workers", Credit: 100})
	_, other := subscribe(t, s2, ConsumerOptions{Address: "jobs.#", RoutingType: Multicast, Credit: 100})
	for i := range 4 {
		send(t, s1, "jobs.a", Multicast, fmt.Sprint(i))
	}
	got := map[string]bool{}
	for range 2 {
		got[body(col1.next(t))] = true
		got[body(col2.next(t))] = true
	}
	if len(got) != 4 {
		t.Fatalf("shared group got %v", got)
	}
	for range 4 {
		other.next(t) // a plain subscription still gets everything
	}
	name := c1.Queue().Name()
	c1.Close()
	if b.Queue(name) == nil {
		t.Fatal("shared subscription deleted while a consumer remains")
	}
	s2.Close()
	if b.Queue(name) != nil {
		t.Fatal("shared subscription kept after its last consumer left")
	}
}

func TestFullQueuePolicies(t *testing.T) {
	hundred := int64(100)
	fail := string(FullFail)
	b := newBroker(t,
		AddressSettings{Match: "small.drop", MaxSizeBytes: &hundred},
		AddressSettings{Match: "small.fail", MaxSizeBytes: &hundred, FullPolicy: &fail},
	)
	s := newSession(t, b, "")
	body := make([]byte, 40)
	sendBody := func(addr string) error {
		return s.Send(context.Background(), &Message{Address: addr, RoutingType: Anycast, Body: body})
	}
	for range 2 {
		if err := sendBody("small.drop"); err != nil {
			t.Fatal(err)
		}
		if err := sendBody("small.fail"); err != nil {
			t.Fatal(err)
		}
	}
	// The third 40-byte body would make 120 > 100.
	if err := sendBody("small.drop"); err != nil {
		t.Fatalf("DROP policy failed the send: %v", err)
	}
	if err := sendBody("small.fail"); !errors.Is(err, ErrAddressFull) {
		t.Fatalf("FAIL policy: %v", err)
	}
	if st := b.Queue("small.drop").Stats(); st.Depth != 2 || st.Dropped != 1 || st.Bytes != 80 || st.MaxBytes != 100 {
		t.Fatalf("drop queue stats %+v", st)
	}
	// Consuming frees the budget.
	c, col := subscribe(t, s, ConsumerOptions{Address: "small.fail", RoutingType: Anycast, Credit: 10})
	if err := c.Ack(col.next(t).ID); err != nil {
		t.Fatal(err)
	}
	if err := sendBody("small.fail"); err != nil {
		t.Fatalf("after an ack: %v", err)
	}
	// A consumer-given budget applies to the subscription it creates.
	_, _ = subscribe(t, s, ConsumerOptions{Address: "t", RoutingType: Multicast, MaxBytes: 50})
	for range 3 {
		if err := s.Send(context.Background(), &Message{Address: "t", RoutingType: Multicast, Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	var sub QueueStats
	for _, st := range b.QueueStats() {
		if st.Address == "t" {
			sub = st
		}
	}
	if sub.MaxBytes != 50 || sub.Dropped == 0 {
		t.Fatalf("subscription stats %+v", sub)
	}
}

// QueueElseTopic is decided where the message is routed: anycast into
// the address's queue when it has one, else multicast to its
// subscriptions; a message of either kind is stored with the routing
// type it got, and an address with neither keeps nothing.
func TestQueueElseTopic(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	_, work := subscribe(t, s, ConsumerOptions{Address: "jobs", RoutingType: Anycast, Credit: 10})
	_, news := subscribe(t, s, ConsumerOptions{Address: "news", RoutingType: Multicast, Credit: 10})
	send(t, s, "jobs", QueueElseTopic, "j")
	send(t, s, "news", QueueElseTopic, "n")
	if d := work.next(t); body(d) != "j" || d.Message.RoutingType != Anycast {
		t.Fatalf("work queue got %q routed %v", body(d), d.Message.RoutingType)
	}
	if d := news.next(t); body(d) != "n" || d.Message.RoutingType != Multicast {
		t.Fatalf("subscription got %q routed %v", body(d), d.Message.RoutingType)
	}
	work.none(t, 30*time.Millisecond)
	news.none(t, 30*time.Millisecond)
	send(t, s, "nobody", QueueElseTopic, "x")
	if q := b.Queue("nobody"); q != nil {
		t.Fatalf("a send with no queue made queue %q", q.Name())
	}
	if got := QueueElseTopic.String(); got != "queue-else-topic" {
		t.Fatalf("String() = %q", got)
	}
}

// Unsubscribing deletes a subscription, never an anycast queue that
// happens to have the subscription's name.
func TestUnsubscribeSparesAQueueOfTheSameName(t *testing.T) {
	b := newBroker(t)
	pub := newSession(t, b, "")
	if err := b.CreateQueue("app.jobs", Anycast); err != nil {
		t.Fatal(err)
	}
	send(t, pub, "app.jobs", Anycast, "1")
	s := newSession(t, b, "app")
	if err := s.Unsubscribe("jobs"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("unsubscribe named like an anycast queue: %v, want ErrQueueNotFound", err)
	}
	if q := b.Queue("app.jobs"); q == nil || q.Stats().Depth != 1 {
		t.Fatal("the anycast queue app.jobs was deleted (or lost its message) by an unsubscribe")
	}
}
