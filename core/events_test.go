package core

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

func newEventBroker(t *testing.T, ev EventsConfig, settings ...AddressSettings) *Broker {
	t.Helper()
	ev.Enabled = true
	b, err := New(Config{AddressSettings: settings, ExpiryScanInterval: 20 * time.Millisecond, Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// waitEvent reads events from col until one of type typ arrives.
func waitEvent(t *testing.T, col *collector, typ string) (Event, *Message) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case d := <-col.ch:
			if d.Message.Properties[PropNotifType] == typ {
				var e Event
				if err := json.Unmarshal(d.Message.Body, &e); err != nil {
					t.Fatal(err)
				}
				return e, d.Message
			}
		case <-deadline:
			t.Fatalf("no %s event within 5s", typ)
		}
	}
}

func TestEventsOfEveryKind(t *testing.T) {
	hundred := int64(100)
	fail := string(FullFail)
	drop := string(FullDrop)
	one := 1
	thresh := int64(2)
	b := newEventBroker(t, EventsConfig{Advisory: true},
		AddressSettings{Match: "small.drop", MaxSizeBytes: &hundred, FullPolicy: &drop},
		AddressSettings{Match: "small.fail", MaxSizeBytes: &hundred, FullPolicy: &fail},
		AddressSettings{Match: "dl", MaxDeliveryAttempts: &one},
		AddressSettings{Match: "slow", SlowConsumerThreshold: &thresh},
	)
	watch := newSession(t, b, "")
	_, col := subscribe(t, watch, ConsumerOptions{Address: DefaultNotificationAddress, RoutingType: Multicast, Credit: 100000})
	_, adv := subscribe(t, watch, ConsumerOptions{Address: "ActiveMQ.Advisory.Consumer.Queue.work", RoutingType: Multicast, Credit: 100})

	s, err := b.NewSession(SessionOptions{Protocol: "stomp", User: "alice", RemoteAddr: "127.0.0.1:5555", ClientID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := waitEvent(t, col, EventConnectionCreated); e.User != "alice" || e.Protocol != "stomp" || e.ClientID != "c1" || e.ConnectionID != s.ID() {
		t.Fatalf("connection event %+v", e)
	}
	c, err := s.Subscribe(ConsumerOptions{Address: "work", RoutingType: Anycast, Credit: 10, Handler: func(Delivery) {}, Selector: "x = 1"})
	if err != nil {
		t.Fatal(err)
	}
	e, m := waitEvent(t, col, EventConsumerCreated)
	if e.Address != "work" || e.Queue != "work" || e.Filter == "" || e.ConsumerCount != 1 || m.Properties[PropEventAddress] != "work" {
		t.Fatalf("consumer event %+v %v", e, m.Properties)
	}
	if e, _ := waitEvent(t, adv, EventConsumerCreated); e.Address != "work" {
		t.Fatalf("advisory %+v", e)
	}
	c.Close()
	waitEvent(t, col, EventConsumerClosed)

	// Dropped and refused.
	body := make([]byte, 60)
	for range 2 {
		s.Send(context.Background(), &Message{Address: "small.drop", RoutingType: Anycast, Body: body})
		s.Send(context.Background(), &Message{Address: "small.fail", RoutingType: Anycast, Body: body})
	}
	if e, _ := waitEvent(t, col, EventMessageDropped); e.Queue != "small.drop" || e.Reason != DropFull.String() || e.User != "alice" {
		t.Fatalf("drop event %+v", e)
	}
	if e, _ := waitEvent(t, col, EventAddressFull); e.Queue != "small.fail" {
		t.Fatalf("full event %+v", e)
	}

	// Dead-lettered and expired.
	send(t, s, "dl", Anycast, "x")
	dc, dcol := subscribe(t, s, ConsumerOptions{Address: "dl", RoutingType: Anycast, Credit: 1})
	if err := dc.Reject(dcol.next(t).ID); err != nil {
		t.Fatal(err)
	}
	if e, _ := waitEvent(t, col, EventMessageDeadLettered); e.Address != "dl" {
		t.Fatalf("dead-letter event %+v", e)
	}
	s.Send(context.Background(), &Message{Address: "exp", RoutingType: Anycast, Body: body, Expiration: time.Now().Add(time.Millisecond)})
	waitEvent(t, col, EventMessageExpired)

	// Slow consumer.
	subscribe(t, s, ConsumerOptions{Address: "slow", RoutingType: Multicast})
	for range 4 {
		send(t, s, "slow", Multicast, "x")
	}
	waitEvent(t, col, EventConsumerSlow)

	// Addresses and queues.
	if err := b.CreateAddress("made", Anycast); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, col, EventAddressAdded)
	waitEvent(t, col, EventBindingAdded)
	if err := b.DeleteAddress("made"); err != nil {
		t.Fatal(err)
	}
	if e, _ := waitEvent(t, col, EventAddressRemoved); e.Address != "made" {
		t.Fatalf("%+v", e)
	}

	s.Close()
	waitEvent(t, col, EventConnectionDestroyed)
	if st := b.EventStats(); st.Published < 10 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
	if len(b.RecentEvents()) == 0 {
		t.Fatal("no recent events")
	}
	// Nothing about the notification address itself.
	for _, e := range b.RecentEvents() {
		if e.Address == DefaultNotificationAddress {
			t.Fatalf("event about the notification address: %+v", e)
		}
	}
}

func TestAuthFailureEvent(t *testing.T) {
	b, err := New(Config{Events: EventsConfig{Enabled: true}, Authenticator: denyAll{}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, col := subscribe(t, newSession(t, b, ""), ConsumerOptions{Address: DefaultNotificationAddress, RoutingType: Multicast, Credit: 100})
	if _, err := b.AuthenticateFrom(context.Background(), "10.0.0.9:1234", "mallory", "x"); err == nil {
		t.Fatal("authenticated")
	}
	if e, _ := waitEvent(t, col, EventAuthFailure); e.User != "mallory" || e.RemoteAddr != "10.0.0.9:1234" {
		t.Fatalf("%+v", e)
	}
}

type denyAll struct{}

func (denyAll) Authenticate(context.Context, string, string) (string, error) {
	return "", ErrAuthFailed
}

// A queue dropping every message (DROP under load) emits at most ten
// MESSAGE_DROPPED events a second, whose counts add up to its drops.
func TestDropEventsAreCoalesced(t *testing.T) {
	one := int64(1)
	drop := string(FullDrop)
	b := newEventBroker(t, EventsConfig{}, AddressSettings{Match: "full", MaxSizeBytes: &one, FullPolicy: &drop})
	s := newSession(t, b, "")
	_, col := subscribe(t, s, ConsumerOptions{Address: DefaultNotificationAddress, RoutingType: Multicast, Credit: 1 << 20,
		Selector: "_AMQ_NotifType = 'MESSAGE_DROPPED'"})
	send(t, s, "full", Anycast, "first")
	const n = 20000
	start := time.Now()
	for range n {
		send(t, s, "full", Anycast, "x")
	}
	took := time.Since(start)
	time.Sleep(2 * dropEventInterval)
	send(t, s, "full", Anycast, "last") // reports what the window held
	var events, total int64
	deadline := time.After(5 * time.Second)
	for total < n+1 {
		select {
		case d := <-col.ch:
			events++
			total += d.Message.Properties[PropEventCount].(int64)
		case <-deadline:
			t.Fatalf("%d events counting %d drops of %d", events, total, n+1)
		}
	}
	if max := int64(took/dropEventInterval) + 3; events > max {
		t.Fatalf("%d events for %d drops in %v; want at most %d", events, n+1, took, max)
	}
	t.Logf("%d drops in %v: %d MESSAGE_DROPPED events", n+1, took, events)
}

// A flood of events (here a send dropped by 300 full subscriptions at
// once, 300 events) fills the bounded buffer: the rest are dropped and
// counted, and sends go on without waiting.
func TestEventFloodIsDroppedNotWaitedFor(t *testing.T) {
	one := int64(1)
	drop := string(FullDrop)
	b := newEventBroker(t, EventsConfig{Buffer: 4}, AddressSettings{Match: "fan", MaxSizeBytes: &one, FullPolicy: &drop})
	s := newSession(t, b, "")
	for range 300 {
		subscribe(t, s, ConsumerOptions{Address: "fan", RoutingType: Multicast})
	}
	send(t, s, "fan", Multicast, "fills them")
	start := time.Now()
	const n = 50
	for range n {
		send(t, s, "fan", Multicast, "x")
		time.Sleep(dropEventInterval / 10)
	}
	st := b.EventStats()
	if st.Dropped == 0 {
		t.Fatalf("events %+v: none dropped from a 4-event buffer", st)
	}
	t.Logf("%d sends dropped by 300 subscriptions in %v: %d events published, %d dropped", n, time.Since(start), st.Published, st.Dropped)
}

// addressUnrouted returns the sends to address that reached no queue.
func addressUnrouted(b *Broker, address string) uint64 {
	for _, a := range b.AddressStats() {
		if a.Name == address {
			return a.Unrouted
		}
	}
	return 0
}

// waitPublished waits until n events have been published.
func waitPublished(t *testing.T, b *Broker, n uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.EventStats().Published < n {
		if time.Now().After(deadline) {
			t.Fatalf("events %+v: %d not published within 5s", b.EventStats(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// An event nobody listens to is not encoded or routed, but it is still
// published as far as anyone can tell: counted, kept among the recent
// events, and counted unrouted on the notification address as a send
// to an address without queues is. Listeners reached by a wildcard
// subscription or through a divert get every event as before.
func TestEventsWithoutListenersStillCountAndReachLateListeners(t *testing.T) {
	b := newEventBroker(t, EventsConfig{})
	open := func(id string) {
		t.Helper()
		s, err := b.NewSession(SessionOptions{Protocol: "stomp", User: "alice", ClientID: id})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	open("nobody")
	waitPublished(t, b, 2)
	if n := addressUnrouted(b, DefaultNotificationAddress); n != 2 {
		t.Fatalf("unrouted events %d, want 2", n)
	}
	if r := b.RecentEvents(); len(r) != 2 || r[0].Type != EventConnectionCreated || r[1].Type != EventConnectionDestroyed || r[0].ClientID != "nobody" {
		t.Fatalf("recent events %+v", r)
	}

	// A wildcard subscription matching the notification address.
	watch := newSession(t, b, "")
	wc, wild := subscribe(t, watch, ConsumerOptions{Address: "activemq.#", RoutingType: Multicast, Credit: 100})
	open("wild")
	if e, m := waitEvent(t, wild, EventConnectionCreated); e.ClientID != "wild" || m.Properties[PropClientID] != "wild" || m.Address != DefaultNotificationAddress {
		t.Fatalf("event through a wildcard subscription %+v %v", e, m.Properties)
	}
	waitEvent(t, wild, EventConnectionDestroyed)
	wc.Close()

	// A divert of the notification address to a queue.
	if err := b.CreateDivert(Divert{Name: "ev", Address: DefaultNotificationAddress, ForwardingAddress: "queue://kept"}); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateQueue("kept", Anycast); err != nil {
		t.Fatal(err)
	}
	open("diverted")
	_, kept := subscribe(t, watch, ConsumerOptions{Address: "kept", RoutingType: Anycast, Credit: 100})
	if e, _ := waitEvent(t, kept, EventConnectionCreated); e.ClientID != "diverted" {
		t.Fatalf("diverted event %+v", e)
	}
	waitEvent(t, kept, EventConnectionDestroyed)
	if st := b.EventStats(); st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}
