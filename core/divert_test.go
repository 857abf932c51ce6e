package core

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestCompositeAddress(t *testing.T) {
	for in, want := range map[string]string{
		"a":                       "a",
		"a,b":                     "queue://a,queue://b",
		"topic://a,b,queue://c,d": "topic://a,topic://b,queue://c,queue://d",
	} {
		if got := CompositeAddress(in, RoutingDefault); got != want {
			t.Errorf("CompositeAddress(%q) = %q, want %q", in, got, want)
		}
	}
	if got := CompositeAddress("a,b", Multicast); got != "topic://a,topic://b" {
		t.Errorf("multicast: %q", got)
	}
	if IsComposite("a,b") || !IsComposite("queue://a,topic://b") || IsComposite("queue://a") {
		t.Error("IsComposite")
	}
}

func TestCompositeSendReachesEveryPart(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	_, topic := subscribe(t, s, ConsumerOptions{Address: "b", RoutingType: Multicast, Credit: 10})
	send(t, s, "queue://a,topic://b,queue://c", RoutingDefault, "x")
	_, qa := subscribe(t, s, ConsumerOptions{Address: "a", RoutingType: Anycast, Credit: 10})
	_, qc := subscribe(t, s, ConsumerOptions{Address: "c", RoutingType: Anycast, Credit: 10})
	for _, col := range []*collector{qa, topic, qc} {
		if d := col.next(t); body(d) != "x" {
			t.Fatalf("got %q", body(d))
		}
	}
	if b.Queue("queue://a,topic://b,queue://c") != nil {
		t.Fatal("a queue named as the composite")
	}
	// A consumer cannot read a composite.
	if _, err := s.Subscribe(ConsumerOptions{Address: "queue://a,queue://c", RoutingType: Anycast, Handler: func(Delivery) {}}); err == nil {
		t.Fatal("subscribed to a composite")
	}
	// In a transaction every part is sent on commit.
	tx, _ := s.Begin()
	if err := tx.Send(&Message{Address: "queue://a,queue://c", Body: []byte("tx")}); err != nil {
		t.Fatal(err)
	}
	qa.none(t, 50*time.Millisecond)
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if body(qa.next(t)) != "tx" || body(qc.next(t)) != "tx" {
		t.Fatal("tx composite")
	}
}

func TestDiverts(t *testing.T) {
	b, err := New(Config{Diverts: []Divert{
		{Name: "audit", Address: "orders", ForwardingAddress: "audit", RoutingType: "ANYCAST"},
		{Name: "big", Address: "orders", ForwardingAddress: "queue://big,topic://big.news", Filter: "amount > 100"},
		{Name: "move", Address: "legacy.#", ForwardingAddress: "queue://modern", Exclusive: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := newSession(t, b, "")
	_, orders := subscribe(t, s, ConsumerOptions{Address: "orders", RoutingType: Anycast, Credit: 10})
	_, audit := subscribe(t, s, ConsumerOptions{Address: "audit", RoutingType: Anycast, Credit: 10})
	_, big := subscribe(t, s, ConsumerOptions{Address: "big", RoutingType: Anycast, Credit: 10})
	_, news := subscribe(t, s, ConsumerOptions{Address: "big.news", RoutingType: Multicast, Credit: 10})
	_, legacy := subscribe(t, s, ConsumerOptions{Address: "legacy.x", RoutingType: Anycast, Credit: 10})
	_, modern := subscribe(t, s, ConsumerOptions{Address: "modern", RoutingType: Anycast, Credit: 10})

	for _, amount := range []int64{50, 500} {
		m := &Message{Address: "orders", RoutingType: Anycast, Body: []byte("o"), Properties: map[string]any{"amount": amount}}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		orders.next(t)
		if d := audit.next(t); d.Message.Properties[PropOriginalAddress] != "orders" {
			t.Fatalf("audit copy %v", d.Message.Properties)
		}
	}
	if d := big.next(t); d.Message.Properties["amount"] != int64(500) {
		t.Fatalf("big got %v", d.Message.Properties)
	}
	news.next(t)
	big.none(t, 50*time.Millisecond)

	send(t, s, "legacy.x", Anycast, "moved")
	if body(modern.next(t)) != "moved" {
		t.Fatal("not moved")
	}
	legacy.none(t, 50*time.Millisecond)

	// The API's diverts.
	if err := b.CreateDivert(Divert{Name: "audit", Address: "x", ForwardingAddress: "y"}); !errors.Is(err, ErrDivertExists) {
		t.Fatalf("duplicate name: %v", err)
	}
	if err := b.CreateDivert(Divert{Name: "self", Address: "x", ForwardingAddress: "x"}); err == nil {
		t.Fatal("a divert to itself")
	}
	if err := b.CreateDivert(Divert{Name: "bad", Address: "x", ForwardingAddress: "y", Filter: "a ==="}); err == nil {
		t.Fatal("a bad filter")
	}
	if err := b.CreateDivert(Divert{Name: "api", Address: "x", ForwardingAddress: "queue://modern"}); err != nil {
		t.Fatal(err)
	}
	send(t, s, "x", Anycast, "api")
	if body(modern.next(t)) != "api" {
		t.Fatal("api divert")
	}
	// A reload replaces the configuration's diverts and keeps the API's.
	if err := b.ReloadDiverts(nil, false); err != nil {
		t.Fatal(err)
	}
	if ds := b.Diverts(); len(ds) != 1 || ds[0].Name != "api" {
		t.Fatalf("after reload: %+v", ds)
	}
	if err := b.DeleteDivert("api"); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteDivert("api"); !errors.Is(err, ErrDivertNotFound) {
		t.Fatal(err)
	}
	send(t, s, "legacy.x", Anycast, "stays")
	if body(legacy.next(t)) != "stays" {
		t.Fatal("divert not removed")
	}
}

func TestVirtualTopics(t *testing.T) {
	b, err := New(Config{VirtualTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := newSession(t, b, "")
	_, a1 := subscribe(t, s, ConsumerOptions{Address: "Consumer.A.VirtualTopic.orders", RoutingType: Anycast, Credit: 10})
	_, a2 := subscribe(t, s, ConsumerOptions{Address: "Consumer.A.VirtualTopic.orders", RoutingType: Anycast, Credit: 10})
	_, bq := subscribe(t, s, ConsumerOptions{Address: "Consumer.B.VirtualTopic.orders", RoutingType: Anycast, Credit: 10})
	_, topic := subscribe(t, s, ConsumerOptions{Address: "VirtualTopic.orders", RoutingType: Multicast, Credit: 10})
	_, other := subscribe(t, s, ConsumerOptions{Address: "Consumer.C.VirtualTopic.other", RoutingType: Anycast, Credit: 10})
	for range 4 {
		send(t, s, "VirtualTopic.orders", Multicast, "o")
	}
	// Group A's two consumers share the messages, group B gets all.
	for range 4 {
		bq.next(t)
		topic.next(t)
	}
	got := 0
	for got < 4 {
		select {
		case <-a1.ch:
		case <-a2.ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("group A got %d", got)
		}
		got++
	}
	other.none(t, 50*time.Millisecond)
}

// TestAPIDivertsSurviveRestart: a divert made through the API is written
// to the bindings journal and is in force again after a restart; one
// deleted, or replaced by a configuration divert of its name, is not.
func TestAPIDivertsSurviveRestart(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	start := func(config ...Divert) *Broker {
		t.Helper()
		b, err := New(Config{Messages: msgs, Bindings: bindings, ExpiryScanInterval: -1, Diverts: config})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := start()
	for _, d := range []Divert{
		{Name: "keep", Address: "orders", ForwardingAddress: "queue://audit", Filter: "amount > 100", Exclusive: true, RoutingType: "ANYCAST"},
		{Name: "gone", Address: "orders", ForwardingAddress: "queue://gone"},
		{Name: "shadowed", Address: "orders", ForwardingAddress: "queue://api"},
	} {
		if err := b.CreateDivert(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.DeleteDivert("gone"); err != nil {
		t.Fatal(err)
	}
	b.Close()

	// The configuration names "shadowed": its divert replaces the API's,
	// whose record goes.
	b = start(Divert{Name: "shadowed", Address: "orders", ForwardingAddress: "queue://config"})
	names := func(b *Broker) []string {
		var out []string
		for _, d := range b.Diverts() {
			out = append(out, d.Name+"->"+d.ForwardingAddress)
		}
		slices.Sort(out)
		return out
	}
	if got, want := names(b), []string{"keep->queue://audit", "shadowed->queue://config"}; !slices.Equal(got, want) {
		t.Fatalf("after restart: %v, want %v", got, want)
	}
	i := slices.IndexFunc(b.Diverts(), func(d Divert) bool { return d.Name == "keep" })
	if d := b.Diverts()[i]; !d.Exclusive || d.Filter != "amount > 100" || d.RoutingType != "ANYCAST" || d.Address != "orders" {
		t.Fatalf("recovered divert %+v", d)
	}
	s := newSession(t, b, "")
	_, audit := subscribe(t, s, ConsumerOptions{Address: "audit", RoutingType: Anycast, Credit: 10})
	_, orders := subscribe(t, s, ConsumerOptions{Address: "orders", RoutingType: Anycast, Credit: 10})
	m := &Message{Address: "orders", RoutingType: Anycast, Body: []byte("big"), Properties: map[string]any{"amount": int64(500)}}
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if body(audit.next(t)) != "big" {
		t.Fatal("the recovered divert did not divert")
	}
	orders.none(t, 50*time.Millisecond) // exclusive: moved
	b.Close()

	// Without the configuration's divert, the API's "shadowed" does not
	// come back: its record went when the configuration replaced it.
	b = start()
	if got, want := names(b), []string{"keep->queue://audit"}; !slices.Equal(got, want) {
		t.Fatalf("after the second restart: %v, want %v", got, want)
	}
	if err := b.DeleteDivert("keep"); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b = start()
	defer b.Close()
	if got := names(b); len(got) != 0 {
		t.Fatalf("a deleted divert came back: %v", got)
	}
}

func TestVirtualTopicOf(t *testing.T) {
	for _, c := range []struct{ queue, topic string }{
		{"Consumer.A.VirtualTopic.orders", "VirtualTopic.orders"},
		{"Consumer.a.b.VirtualTopic.x.y", "VirtualTopic.x.y"},
		{"Consumer.A.VirtualTopic.B.VirtualTopic.x", "VirtualTopic.B.VirtualTopic.x"},
		{"Consumer..VirtualTopic.x", ""},
		{"Consumer.A.VirtualTopic.", ""},
		{"Consumer.VirtualTopic.x", ""},
		{"VirtualTopic.x", ""},
		{"orders", ""},
	} {
		topic, ok := VirtualTopicOf(c.queue)
		if topic != c.topic || ok != (c.topic != "") {
			t.Errorf("VirtualTopicOf(%q) = %q, %v; want %q", c.queue, topic, ok, c.topic)
		}
	}
}
