package core

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/junctionmq/junction/core/wildcard"
)

func TestTemporaryQueueRequestReply(t *testing.T) {
	b := newBroker(t)
	requester, server, other := newSession(t, b, ""), newSession(t, b, ""), newSession(t, b, "")
	name, err := requester.CreateTemporaryQueue()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(name, TemporaryQueuePrefix) || validAddress(name) != nil || wildcard.Validate(name) != nil {
		t.Fatalf("temporary queue name %q", name)
	}
	name2, _ := requester.CreateTemporaryQueue()
	name3, _ := other.CreateTemporaryQueue()
	if name2 == name || name3 == name || name3 == name2 {
		t.Fatalf("names repeat: %q %q %q", name, name2, name3)
	}
	if anycast, multi, ok := b.AddressRoutingTypes(name); !anycast || multi || !ok {
		t.Fatalf("routing types of %q: %v %v %v", name, anycast, multi, ok)
	}
	// The reply comes from another session, with the default routing
	// type, and a consumer of a third session may read it.
	_, replies := subscribe(t, other, ConsumerOptions{Address: name, RoutingType: Anycast, Credit: 10})
	m := &Message{Address: name, Body: []byte("reply")}
	if err := server.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if got := body(replies.next(t)); got != "reply" {
		t.Fatalf("got %q", got)
	}
	st := b.Queue(name).Stats()
	if !st.Temporary || st.Durable || st.RoutingType != Anycast {
		t.Fatalf("stats %+v", st)
	}
	// Durable messages to it are not journaled: it is not durable.
	if err := server.Send(context.Background(), &Message{Address: name, Durable: true, Body: []byte("d")}); err != nil {
		t.Fatal(err)
	}
	replies.next(t)
	// It takes no multicast sends and no subscriptions.
	if err := server.Send(context.Background(), &Message{Address: name, RoutingType: Multicast}); !errors.Is(err, ErrRoutingMismatch) {
		t.Fatalf("multicast send to a temporary queue: %v", err)
	}

	// Closing the session deletes its temporary queues, with consumers
	// of other sessions attached, and their addresses.
	send(t, server, name2, RoutingDefault, "unread")
	requester.Close()
	for _, n := range []string{name, name2} {
		if b.Queue(n) != nil {
			t.Fatalf("%q survived its session", n)
		}
		if _, _, ok := b.AddressRoutingTypes(n); ok {
			t.Fatalf("the address of %q survived its session", n)
		}
	}
	// A late reply fails instead of creating a queue nobody reads.
	if err := server.Send(context.Background(), &Message{Address: name, Body: []byte("late")}); !errors.Is(err, ErrAddressNotFound) {
		t.Fatalf("send to a deleted temporary queue: %v", err)
	}
	if _, err := server.Subscribe(ConsumerOptions{Address: name, RoutingType: Anycast, Handler: func(Delivery) {}}); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("subscribe to a deleted temporary queue: %v", err)
	}
	if _, err := server.Subscribe(ConsumerOptions{Address: name, RoutingType: Multicast, Handler: func(Delivery) {}}); !errors.Is(err, ErrAddressNotFound) {
		t.Fatalf("multicast subscribe to a deleted temporary queue: %v", err)
	}
	if _, _, ok := b.AddressRoutingTypes(name); ok {
		t.Fatal("a failed send or subscribe created the address")
	}
	if _, err := requester.CreateTemporaryQueue(); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("CreateTemporaryQueue on a closed session: %v", err)
	}

	// DeleteQueue deletes one, once its consumers are gone; the session
	// forgets it.
	c, _ := subscribe(t, other, ConsumerOptions{Address: name3, RoutingType: Anycast, Credit: 1})
	if err := b.DeleteQueue(name3); !errors.Is(err, ErrSubscriptionInUse) {
		t.Fatalf("DeleteQueue with a consumer: %v", err)
	}
	c.Close()
	if b.Queue(name3) == nil {
		t.Fatal("a temporary queue went with its last consumer; it lives as long as its session")
	}
	if err := b.DeleteQueue(name3); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := b.AddressRoutingTypes(name3); ok {
		t.Fatal("DeleteQueue left the temporary queue's address")
	}
	other.mu.Lock()
	n := len(other.temps)
	other.mu.Unlock()
	if n != 0 {
		t.Fatalf("the session still lists %d temporary queues", n)
	}
}

func TestAddressRoutingTypes(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	check := func(name string, wantAny, wantMulti, wantOK bool) {
		t.Helper()
		if anycast, multi, ok := b.AddressRoutingTypes(name); anycast != wantAny || multi != wantMulti || ok != wantOK {
			t.Fatalf("AddressRoutingTypes(%q) = %v, %v, %v; want %v, %v, %v", name, anycast, multi, ok, wantAny, wantMulti, wantOK)
		}
	}
	check("nothing", false, false, false)
	send(t, s, "orders", Anycast, "x")
	check("orders", true, false, true)
	subscribe(t, s, ConsumerOptions{Address: "news", RoutingType: Multicast})
	check("news", false, true, true)
	if err := b.CreateAddress("both", Anycast); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateAddress("both", Multicast); err != nil {
		t.Fatal(err)
	}
	check("both", true, true, true)
	subscribe(t, s, ConsumerOptions{Address: "sensors.#", RoutingType: Multicast})
	check("sensors.#", false, false, false) // a pattern is not an address
	if err := b.DeleteAddress("orders"); err != nil {
		t.Fatal(err)
	}
	check("orders", false, false, false)
	// Asking creates nothing.
	if b.Queue("nothing") != nil {
		t.Fatal("AddressRoutingTypes created a queue")
	}
}
