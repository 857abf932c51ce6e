package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/junctionmq/junction/core/selector"
)

func sendProps(t *testing.T, s *Session, addr string, rt RoutingType, body string, props map[string]any) *Message {
	t.Helper()
	m := &Message{Address: addr, RoutingType: rt, Body: []byte(body), Priority: DefaultPriority, Properties: props}
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return m
}

func colored(c string) map[string]any { return map[string]any{"color": c} }

func TestSelectorOnQueueConsumer(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	_, reds := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100, Selector: "color = 'red'"})
	_, plain := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100})
	for i := range 10 {
		c := "blue"
		if i%2 == 0 {
			c = "red"
		}
		sendProps(t, s, "q", Anycast, fmt.Sprint(i), colored(c))
	}
	got := map[string]string{}
	for len(got) < 10 {
		select {
		case d := <-reds.ch:
			if d.Message.Properties["color"] != "red" {
				t.Fatalf("the selective consumer got %v", d.Message.Properties)
			}
			got[body(d)] = "red"
		case d := <-plain.ch:
			got[body(d)] = "plain"
		case <-time.After(5 * time.Second):
			t.Fatalf("got %d of 10 messages: %v", len(got), got)
		}
	}
	for i := 1; i < 10; i += 2 {
		if got[fmt.Sprint(i)] != "plain" {
			t.Fatalf("blue message %d went to %q", i, got[fmt.Sprint(i)])
		}
	}
	reds.none(t, 20*time.Millisecond)
	plain.none(t, 0)
}

// A message no consumer selects stays in the queue, in order, without
// holding back the ones behind it, and goes to the first consumer that
// takes it.
func TestSelectorLeavesOthersQueued(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	_, reds := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100, Selector: "color = 'red'"})
	for i, c := range []string{"blue", "red", "green", "red", "blue"} {
		sendProps(t, s, "q", Anycast, fmt.Sprint(i), colored(c))
	}
	for _, want := range []string{"1", "3"} {
		if got := body(reds.next(t)); got != want {
			t.Fatalf("got %s want %s", got, want)
		}
	}
	reds.none(t, 20*time.Millisecond)
	if st := b.Queue("q").Stats(); st.Depth != 5 || st.InFlight != 2 {
		t.Fatalf("stats %+v", st)
	}
	_, greens := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100, Selector: "color IN ('green', 'yellow')"})
	if got := body(greens.next(t)); got != "2" {
		t.Fatalf("got %s", got)
	}
	// A high-priority message nobody selects does not hold back the
	// lower priorities.
	m := &Message{Address: "q", RoutingType: Anycast, Priority: 9, Body: []byte("purple"), Properties: colored("purple")}
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	sendProps(t, s, "q", Anycast, "5", colored("red"))
	if got := body(reds.next(t)); got != "5" {
		t.Fatalf("got %s", got)
	}
	_, plain := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100})
	for _, want := range []string{"purple", "0", "4"} {
		if got := body(plain.next(t)); got != want {
			t.Fatalf("plain consumer got %s want %s", got, want)
		}
	}
}

// An exclusive consumer's selector holds back what it does not select
// while it is attached (the others stand by); when it leaves, the
// others get what waited.
func TestExclusiveSelectiveConsumer(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	ex, reds := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100, Exclusive: true, Selector: "color = 'red'"})
	_, plain := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 100})
	for i, c := range []string{"blue", "red", "blue"} {
		sendProps(t, s, "q", Anycast, fmt.Sprint(i), colored(c))
	}
	if got := body(reds.next(t)); got != "1" {
		t.Fatalf("got %s", got)
	}
	plain.none(t, 20*time.Millisecond)
	ex.Close()
	for _, want := range []string{"0", "1", "2"} { // 1 came back unacked
		if got := body(plain.next(t)); got != want {
			t.Fatalf("got %s want %s", got, want)
		}
	}
}

// A selective consumer given credit again finds matching messages
// behind many it does not select, and a message it releases comes back
// to it.
func TestSelectiveConsumerCreditAndRelease(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	c, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 1, Selector: "n >= 100"})
	for i := range 200 {
		sendProps(t, s, "q", Anycast, fmt.Sprint(i), map[string]any{"n": int64(i)})
	}
	d := col.next(t)
	if body(d) != "100" {
		t.Fatalf("got %s", body(d))
	}
	col.none(t, 10*time.Millisecond)
	if err := c.Release(d.ID, false); err != nil {
		t.Fatal(err)
	}
	// Release gives no credit: the message waits in its place.
	col.none(t, 10*time.Millisecond)
	c.Flow(1)
	if d := col.next(t); body(d) != "100" {
		t.Fatalf("after release got %s", body(d))
	}
	for want := 101; want < 200; want++ {
		c.Flow(1)
		if got := body(col.next(t)); got != fmt.Sprint(want) {
			t.Fatalf("got %s want %d", got, want)
		}
	}
	if st := b.Queue("q").Stats(); st.Depth != 200 || st.InFlight != 100 {
		t.Fatalf("stats %+v", st)
	}
}

// Sends to a queue deep in messages its consumer does not select are
// offered alone (the queue stays clean), and a consumer given credit
// passes each unselected message once: the costs that would otherwise
// grow with the square of the queue.
func TestSelectiveDispatchDoesNotRescan(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	c, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 1, Selector: "color = 'red'"})
	q := b.Queue("q")
	for i := range 1000 {
		sendProps(t, s, "q", Anycast, fmt.Sprint(i), colored("blue"))
		q.mu.Lock()
		clean, fresh := q.clean, len(q.fresh)
		q.mu.Unlock()
		if !clean || fresh != 0 {
			t.Fatalf("after send %d the queue is clean=%v with %d fresh refs: the next send would scan everything", i, clean, fresh)
		}
	}
	for i := range 3 {
		sendProps(t, s, "q", Anycast, "red", colored("red"))
		d := col.next(t)
		if err := c.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
		c.Flow(1)
		// The first grant of credit passed the 1000 blues; later ones
		// start after them.
		q.mu.Lock()
		seen := c.seen[DefaultPriority]
		q.mu.Unlock()
		if seen < 1000 {
			t.Fatalf("round %d: the consumer has looked up to seq %d, want 1000 or more", i, seen)
		}
	}
	_, plain := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 2000})
	for i := range 1000 {
		if got := body(plain.next(t)); got != fmt.Sprint(i) {
			t.Fatalf("got %s want %d", got, i)
		}
	}
}

func TestSelectorHeaderIdentifiers(t *testing.T) {
	ts := time.UnixMilli(1700000000123)
	exp := time.UnixMilli(1800000000000)
	m := &Message{ID: 42, Priority: 7, Timestamp: ts, Expiration: exp, Durable: true, CorrelationID: "c-1",
		GroupID: "g", UserID: "alice", Properties: map[string]any{"JMSType": "order", "JMSPriority": "shadowed?"}}
	cases := []struct {
		expr string
		want bool
	}{
		{"JMSMessageID = 'ID:42'", true},
		{"JMSPriority = 'shadowed?'", true}, // a property of that name comes first
		{"JMSTimestamp = 1700000000123", true},
		{"JMSCorrelationID = 'c-1'", true},
		{"JMSType = 'order'", true},
		{"JMSDeliveryMode = 'PERSISTENT'", true},
		{"JMSExpiration = 1800000000000", true},
		{"JMSXGroupID = 'g'", true},
		{"JMSXUserID = 'alice'", true},
		{"JMSXDeliveryCount = 3", true},
		{"JMSRedelivered IS NULL", true}, // not a selector identifier in JMS
	}
	for _, tc := range cases {
		sel, err := selector.Parse(tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		if got := sel.Matches(func(n string) (any, bool) { return selectorValue(m, 2, n) }); got != tc.want {
			t.Errorf("%s: %v", tc.expr, got)
		}
	}
	bare := &Message{ID: 1, Priority: 4}
	for _, expr := range []string{"JMSPriority = 4", "JMSDeliveryMode = 'NON_PERSISTENT'", "JMSExpiration = 0",
		"JMSCorrelationID IS NULL", "JMSXGroupID IS NULL", "JMSType IS NULL", "JMSTimestamp IS NULL", "JMSXDeliveryCount = 1"} {
		sel, err := selector.Parse(expr)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(func(n string) (any, bool) { return selectorValue(bare, 0, n) }) {
			t.Errorf("%s does not hold for a bare message", expr)
		}
	}
}

// JMSXDeliveryCount changes as a message is redelivered, and a consumer
// that selects on it sees the message only on the attempts it selects.
func TestSelectorOnDeliveryCount(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	send(t, s, "q", Anycast, "x")
	first, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10, Selector: "JMSXDeliveryCount = 1"})
	_, retries := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10, Selector: "JMSXDeliveryCount > 1"})
	d := col.next(t)
	if err := first.Release(d.ID, true); err != nil {
		t.Fatal(err)
	}
	if d := retries.next(t); body(d) != "x" || d.DeliveryCount != 1 {
		t.Fatalf("retry got %q count %d", body(d), d.DeliveryCount)
	}
	col.none(t, 20*time.Millisecond)
}

func TestInvalidSelectorFailsSubscribe(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	for _, o := range []ConsumerOptions{
		{Address: "q", RoutingType: Anycast, Selector: "color = "},
		{Address: "t", RoutingType: Multicast, Selector: "a LIKE 5"},
		{Address: "t", RoutingType: Multicast, SharedSubscriptionName: "s", Selector: "((("},
	} {
		o.Handler = func(Delivery) {}
		_, err := s.Subscribe(o)
		var se *selector.SyntaxError
		if !errors.Is(err, ErrInvalidSelector) || !errors.As(err, &se) {
			t.Fatalf("Subscribe with selector %q: %v", o.Selector, err)
		}
	}
	// Nothing was created on the way.
	if b.Queue("q") != nil || len(b.QueueStats()) != 0 {
		t.Fatalf("a failed subscribe left queues: %+v", b.QueueStats())
	}
	// A blank selector is no selector.
	_, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 1, Selector: "  "})
	send(t, s, "q", Anycast, "x")
	col.next(t)
}

// A non-durable topic subscription with a selector holds only what it
// selects: the others never reach its queue.
func TestSelectorOnTopicSubscription(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	c, col := subscribe(t, s, ConsumerOptions{Address: "prices", RoutingType: Multicast, Credit: 100, Selector: "price > 10 AND symbol LIKE 'A%'"})
	_, all := subscribe(t, s, ConsumerOptions{Address: "prices", RoutingType: Multicast, Credit: 100})
	for i, p := range []struct {
		sym   string
		price any
	}{{"AAPL", int64(20)}, {"AMZN", 5.5}, {"MSFT", int64(30)}, {"ABC", 10.5}, {"AXE", "99"}} {
		sendProps(t, s, "prices", Multicast, fmt.Sprint(i), map[string]any{"symbol": p.sym, "price": p.price})
	}
	for _, want := range []string{"0", "3"} {
		if got := body(col.next(t)); got != want {
			t.Fatalf("got %s want %s", got, want)
		}
	}
	col.none(t, 20*time.Millisecond)
	for range 5 {
		all.next(t)
	}
	if st := c.Queue().Stats(); st.Enqueued != 2 {
		t.Fatalf("the selective subscription took %d messages in, want 2", st.Enqueued)
	}
	// The same on a wildcard subscription.
	_, wild := subscribe(t, s, ConsumerOptions{Address: "prices.#", RoutingType: Multicast, Credit: 100, Selector: "JMSPriority > 5"})
	for _, p := range []uint8{1, 9} {
		if err := s.Send(context.Background(), &Message{Address: "prices.eu", RoutingType: Multicast, Priority: p, Body: []byte(fmt.Sprint(p))}); err != nil {
			t.Fatal(err)
		}
	}
	if got := body(wild.next(t)); got != "9" {
		t.Fatalf("got %s", got)
	}
	wild.none(t, 20*time.Millisecond)
}

func TestSharedSubscriptionSelector(t *testing.T) {
	b := newBroker(t)
	s1, s2 := newSession(t, b, ""), newSession(t, b, "")
	_, c1 := subscribe(t, s1, ConsumerOptions{Address: "jobs", RoutingType: Multicast, SharedSubscriptionName: "w", Credit: 100, Selector: "kind = 'big'"})
	_, c2 := subscribe(t, s2, ConsumerOptions{Address: "jobs", RoutingType: Multicast, SharedSubscriptionName: "w", Credit: 100, Selector: "kind = 'big'"})
	if _, err := s2.Subscribe(ConsumerOptions{Address: "jobs", RoutingType: Multicast, SharedSubscriptionName: "w", Selector: "kind = 'small'", Handler: func(Delivery) {}}); !errors.Is(err, ErrSubscriptionInUse) {
		t.Fatalf("a consumer with another selector joined the shared subscription: %v", err)
	}
	for i := range 4 {
		sendProps(t, s1, "jobs", Multicast, fmt.Sprint(i), map[string]any{"kind": []string{"big", "small"}[i%2]})
	}
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case d := <-c1.ch:
			got[body(d)] = true
		case d := <-c2.ch:
			got[body(d)] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("got %v", got)
		}
	}
	if !got["0"] || !got["2"] {
		t.Fatalf("shared subscription got %v", got)
	}
	c1.none(t, 20*time.Millisecond)
	c2.none(t, 0)
}

// JMS: a durable subscription with a selector stores only the messages
// it selects, keeps its selector across a restart, and subscribing again
// with another selector replaces it.
func TestDurableSubscriptionSelector(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b1 := durableBroker(t, msgs, bindings)
	pub := newSession(t, b1, "")
	s1, err := b1.NewSession(SessionOptions{ClientID: "app"})
	if err != nil {
		t.Fatal(err)
	}
	const sel = "region = 'eu'"
	subscribe(t, s1, ConsumerOptions{Address: "orders", RoutingType: Multicast, SubscriptionName: "eu", Selector: sel, Credit: 10})
	s1.Close()
	for i, r := range []string{"eu", "us", "eu", "asia"} {
		m := &Message{Address: "orders", RoutingType: Multicast, Durable: true, Priority: DefaultPriority, Body: []byte(fmt.Sprint(i)), Properties: map[string]any{"region": r}}
		if err := pub.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	if st := b1.Queue("app.eu").Stats(); st.Depth != 2 || st.Enqueued != 2 {
		t.Fatalf("durable subscription stats %+v, want the 2 eu orders only", st)
	}
	if msgs.appends != 2 {
		t.Fatalf("%d message records journaled, want 2 (what no durable queue takes is not written)", msgs.appends)
	}
	pub.Close()
	b1.Close()

	b2 := durableBroker(t, msgs, bindings)
	pub2 := newSession(t, b2, "")
	// Sent while nobody is attached, after the restart: the restored
	// subscription still filters.
	sendProps(t, pub2, "orders", Multicast, "us-late", map[string]any{"region": "us"})
	sendProps(t, pub2, "orders", Multicast, "eu-late", map[string]any{"region": "eu"})
	s2 := newSession(t, b2, "app")
	if subs, err := s2.DurableSubscriptions(); err != nil || len(subs) != 1 || subs[0].Selector != sel || subs[0].Address != "orders" {
		t.Fatalf("durable subscriptions after restart: %+v", subs)
	}
	c, col := subscribe(t, s2, ConsumerOptions{Address: "orders", RoutingType: Multicast, SubscriptionName: "eu", Selector: sel, Credit: 10})
	for _, want := range []string{"0", "2", "eu-late"} {
		if got := body(col.next(t)); got != want {
			t.Fatalf("got %s want %s", got, want)
		}
	}
	col.none(t, 20*time.Millisecond)
	c.Close()
	// Another selector: a new subscription, the old messages gone.
	sendProps(t, pub2, "orders", Multicast, "eu-3", map[string]any{"region": "eu"})
	_, col2 := subscribe(t, s2, ConsumerOptions{Address: "orders", RoutingType: Multicast, SubscriptionName: "eu", Selector: "region = 'us'", Credit: 10})
	col2.none(t, 20*time.Millisecond)
	sendProps(t, pub2, "orders", Multicast, "us-2", map[string]any{"region": "us"})
	if got := body(col2.next(t)); got != "us-2" {
		t.Fatalf("got %s", got)
	}
	if subs, err := s2.DurableSubscriptions(); err != nil || len(subs) != 1 || subs[0].Selector != "region = 'us'" {
		t.Fatalf("after replacing: %+v", subs)
	}
}

// Bindings written before queue records had a selector still decode.
func TestQueueRecordWithoutSelectorDecodes(t *testing.T) {
	old := []byte{codecVersion, byte(Multicast), 1}
	old = appendStr(old, "app.sub")
	old = appendStr(old, "news")
	old = appendStr(old, "app")
	rec, err := decodeQueue(old)
	if err != nil || rec.name != "app.sub" || rec.address != "news" || rec.clientID != "app" || rec.selector != "" {
		t.Fatalf("old record: %+v %v", rec, err)
	}
	sel, _ := selector.Parse("a = 'x'")
	q := &Queue{name: "app.sub", address: "news", routing: Multicast, clientID: "app", filter: sel}
	rec, err = decodeQueue(encodeQueue(q))
	if err != nil || rec.selector != "a = 'x'" || rec.clientID != "app" {
		t.Fatalf("new record: %+v %v", rec, err)
	}
	if _, err := decodeQueue(append(old, 0)); err == nil {
		t.Fatal("trailing bytes accepted")
	}
}

func TestNoLocal(t *testing.T) {
	b := newBroker(t)
	s1, s2 := newSession(t, b, "app"), newSession(t, b, "")
	_, local := subscribe(t, s1, ConsumerOptions{Address: "chat", RoutingType: Multicast, Credit: 100, NoLocal: true})
	_, plain := subscribe(t, s1, ConsumerOptions{Address: "chat", RoutingType: Multicast, Credit: 100})
	send(t, s1, "chat", Multicast, "mine")
	send(t, s2, "chat", Multicast, "theirs")
	tx, _ := s1.Begin()
	tx.Send(&Message{Address: "chat", RoutingType: Multicast, Body: []byte("mine, in a transaction")})
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := body(local.next(t)); got != "theirs" {
		t.Fatalf("no-local subscription got %q", got)
	}
	local.none(t, 20*time.Millisecond)
	for _, want := range []string{"mine", "theirs", "mine, in a transaction"} {
		if got := body(plain.next(t)); got != want {
			t.Fatalf("plain subscription got %q want %q", got, want)
		}
	}
	// A durable no-local subscription: what its session sends while
	// attached is not stored; once it is away, everything is.
	c, dcol := subscribe(t, s1, ConsumerOptions{Address: "chat", RoutingType: Multicast, SubscriptionName: "d", NoLocal: true, Credit: 100})
	send(t, s1, "chat", Multicast, "mine again")
	send(t, s2, "chat", Multicast, "theirs again")
	if got := body(dcol.next(t)); got != "theirs again" {
		t.Fatalf("durable no-local got %q", got)
	}
	c.Close()
	send(t, s1, "chat", Multicast, "sent while away")
	if st := b.Queue("app.d").Stats(); st.Depth != 2 { // "theirs again" is unacked
		t.Fatalf("durable subscription holds %d, want 2", st.Depth)
	}
	// No-local means nothing on a queue.
	_, q := subscribe(t, s1, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10, NoLocal: true})
	send(t, s1, "q", Anycast, "to myself")
	if got := body(q.next(t)); got != "to myself" {
		t.Fatalf("got %q", got)
	}
}

// Origins are not journaled: a message recovered after a restart has no
// sender and reaches a no-local subscription.
func TestNoLocalAfterRestart(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b1 := durableBroker(t, msgs, bindings)
	s1, _ := b1.NewSession(SessionOptions{ClientID: "app"})
	c, _ := subscribe(t, s1, ConsumerOptions{Address: "t", RoutingType: Multicast, SubscriptionName: "s", NoLocal: true, Credit: 10})
	c.Close()
	sendDurable(t, s1, "t", Multicast, "from before")
	s1.Close()
	b1.Close()
	b2 := durableBroker(t, msgs, bindings)
	s2 := newSession(t, b2, "app")
	_, col := subscribe(t, s2, ConsumerOptions{Address: "t", RoutingType: Multicast, SubscriptionName: "s", NoLocal: true, Credit: 10})
	if d := col.next(t); body(d) != "from before" || !d.Redelivered() {
		t.Fatalf("got %q", body(d))
	}
}

// Several selective consumers and a plain one compete for one queue
// while producers send and consumers come and go: every message is
// delivered to a consumer that selects it and acked exactly once.
func TestSelectiveConsumersRace(t *testing.T) {
	b := newBroker(t)
	const producers, perProducer, kinds = 4, 500, 4
	type result struct {
		body, sel string
		k         int64
	}
	results := make(chan result, producers*perProducer*2)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	consume := func(sel string, churn bool) {
		defer wg.Done()
		s, err := b.NewSession(SessionOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		for {
			ch := make(chan Delivery, 64)
			c, err := s.Subscribe(ConsumerOptions{Address: "work", RoutingType: Anycast, Credit: 8, Selector: sel,
				Handler: func(d Delivery) { ch <- d }})
			if err != nil {
				t.Error(err)
				return
			}
			n := 0
			for {
				select {
				case d := <-ch:
					k, _ := d.Message.Properties["k"].(int64)
					results <- result{string(d.Message.Body), sel, k}
					if err := c.Ack(d.ID); err != nil {
						t.Error(err)
					}
					c.Flow(1)
					n++
				case <-stop:
					c.Close()
					return
				}
				if churn && n == 50 {
					break
				}
			}
			// Leave with deliveries unacked: they go back for the others.
			c.Close()
		drain:
			for {
				select {
				case d := <-ch:
					_ = d // returned to the queue by Close
				default:
					break drain
				}
			}
		}
	}
	for k := range kinds {
		wg.Add(1)
		go consume(fmt.Sprintf("k = %d", k), k%2 == 0)
	}
	wg.Add(2)
	go consume("k BETWEEN 0 AND 1", false)
	go consume("", false)
	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			s, err := b.NewSession(SessionOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			for i := range perProducer {
				m := &Message{Address: "work", RoutingType: Anycast, Priority: uint8(rand.IntN(10)),
					Body: []byte(fmt.Sprintf("%d-%d", p, i)), Properties: map[string]any{"k": int64(rand.IntN(kinds + 1))}}
				if err := s.Send(context.Background(), m); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	pwg.Wait()
	seen := map[string]bool{}
	deadline := time.After(20 * time.Second)
	for len(seen) < producers*perProducer {
		select {
		case r := <-results:
			if seen[r.body] {
				t.Fatalf("message %s acked twice", r.body)
			}
			seen[r.body] = true
			switch r.sel {
			case "":
			case "k BETWEEN 0 AND 1":
				if r.k > 1 {
					t.Fatalf("message %s with k=%d went to the consumer of %q", r.body, r.k, r.sel)
				}
			default:
				if want := fmt.Sprintf("k = %d", r.k); r.sel != want {
					t.Fatalf("message %s with k=%d went to the consumer of %q", r.body, r.k, r.sel)
				}
			}
		case <-deadline:
			t.Fatalf("%d of %d messages acked; queue %+v", len(seen), producers*perProducer, b.Queue("work").Stats())
		}
	}
	close(stop)
	wg.Wait()
	if st := b.Queue("work").Stats(); st.Depth != 0 || st.InFlight != 0 || st.Dequeued != producers*perProducer {
		t.Fatalf("stats %+v", st)
	}
}
