package mqtt_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/mqtt/mqtttest"
)

func TestMQTT5PropertiesMapToCoreAndBack(t *testing.T) {
	tb := mqtttest.Start(t)
	s, _ := tb.Core.NewSession(core.SessionOptions{})
	defer s.Close()
	got := make(chan core.Delivery, 10)
	s.Subscribe(core.ConsumerOptions{Address: "rpc.#", RoutingType: core.Multicast, Credit: 10,
		Handler: func(d core.Delivery) { got <- d }})
	pub := tb.Client5(t, "pub5", 0)
	expiry := uint32(60)
	pub.Publish(t, &paho5.Publish{Topic: "rpc/req", QoS: 1, Payload: []byte("ping"), Properties: &paho5.PublishProperties{
		ContentType: "text/plain", CorrelationData: []byte("c-1"), ResponseTopic: "rpc/resp",
		MessageExpiry: &expiry, User: paho5.UserProperties{{Key: "k", Value: "v"}}}})
	var m *core.Message
	select {
	case d := <-got:
		m = d.Message
	case <-time.After(5 * time.Second):
		t.Fatal("no core message")
	}
	if m.ContentType != "text/plain" || m.CorrelationID != "c-1" || m.ReplyTo != "topic://rpc.resp" ||
		m.Properties["k"] != "v" || m.Expiration.IsZero() || time.Until(m.Expiration) > 61*time.Second {
		t.Fatalf("core message %+v", m)
	}

	// And back: a core message with the same fields reaches an MQTT 5 subscriber.
	sub := tb.Client5(t, "sub5", 0)
	sub.Subscribe(t, "rpc/+", 1)
	err := s.Send(context.Background(), &core.Message{Address: "rpc.resp", RoutingType: core.Multicast, Durable: true,
		Body: []byte("pong"), ContentType: "text/plain", CorrelationID: "c-1", ReplyTo: "rpc.req",
		Properties: map[string]any{"k": "w"}, Expiration: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	p := sub.Next(t)
	if string(p.Payload) != "pong" || p.QoS != 1 || p.Properties.ContentType != "text/plain" ||
		string(p.Properties.CorrelationData) != "c-1" || p.Properties.ResponseTopic != "rpc/req" ||
		p.Properties.User.Get("k") != "w" || p.Properties.MessageExpiry == nil || *p.Properties.MessageExpiry > 60 {
		t.Fatalf("MQTT 5 subscriber got %q qos %d props %+v (expiry %v)", p.Payload, p.QoS, p.Properties, p.Properties.MessageExpiry)
	}
}

func TestMQTT5SharedSubscriptionsCompete(t *testing.T) {
	tb := mqtttest.Start(t)
	a, b := tb.Client5(t, "a", 0), tb.Client5(t, "b", 0)
	a.Subscribe(t, "$share/workers/jobs/#", 1)
	b.Subscribe(t, "$share/workers/jobs/#", 1)
	pub := tb.Client5(t, "p", 0)
	s, _ := tb.Core.NewSession(core.SessionOptions{})
	defer s.Close()
	const n = 20
	for i := range n {
		if i%2 == 0 {
			pub.Publish(t, &paho5.Publish{Topic: "jobs/x", QoS: 1, Payload: []byte{byte(i)}})
		} else if err := s.Send(context.Background(), &core.Message{Address: "jobs.x", RoutingType: core.Multicast, Body: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[byte]int{}
	deadline := time.After(5 * time.Second)
	for len(seen) < n {
		select {
		case p := <-a.Inbox:
			seen[p.Payload[0]]++
		case p := <-b.Inbox:
			seen[p.Payload[0]]++
		case <-deadline:
			t.Fatalf("got %d of %d messages", len(seen), n)
		}
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("message %d delivered %d times to the group", k, c)
		}
	}
}

func TestMQTT5MessageExpiry(t *testing.T) {
	tb := mqtttest.Start(t)
	dev := tb.Client5(t, "dev", 3600) // persistent session
	dev.Subscribe(t, "alerts/#", 1)
	dev.Client.Disconnect(&paho5.Disconnect{})
	pub := tb.Client5(t, "p", 0)
	one := uint32(1)
	pub.Publish(t, &paho5.Publish{Topic: "alerts/a", QoS: 1, Payload: []byte("stale"), Properties: &paho5.PublishProperties{MessageExpiry: &one}})
	pub.Publish(t, &paho5.Publish{Topic: "alerts/a", QoS: 1, Payload: []byte("fresh")})
	time.Sleep(1100 * time.Millisecond)
	dev2 := tb.Connect5(t, "dev", 3600, false)
	if p := dev2.Next(t); string(p.Payload) != "fresh" {
		t.Fatalf("got %q, want only the unexpired message", p.Payload)
	}
	select {
	case p := <-dev2.Inbox:
		t.Fatalf("expired message delivered: %q", p.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestMQTT5TopicAliasAndReasonCodes(t *testing.T) {
	tb := mqtttest.Start(t)
	sub := tb.Client5(t, "s", 0)
	if rc := sub.Subscribe(t, "a/#/b", 1); rc < 0x80 {
		t.Fatalf("invalid filter accepted with reason code %#x", rc)
	}
	sub.Subscribe(t, "alias/+", 0)
	pub := tb.Client5(t, "p", 0)
	alias := uint16(3)
	pub.Publish(t, &paho5.Publish{Topic: "alias/x", QoS: 0, Payload: []byte("1"), Properties: &paho5.PublishProperties{TopicAlias: &alias}})
	pub.Publish(t, &paho5.Publish{Topic: "", QoS: 0, Payload: []byte("2"), Properties: &paho5.PublishProperties{TopicAlias: &alias}})
	for _, want := range []string{"1", "2"} {
		if p := sub.Next(t); string(p.Payload) != want || p.Topic != "alias/x" {
			t.Fatalf("got %q on %q", p.Payload, p.Topic)
		}
	}
}

// failingJournal refuses every message record, as a full or failed disk
// would.
type failingJournal struct{ testserve.NopJournal }

func (failingJournal) Append(_ uint64, _ uint16, _ []byte, _ bool, done func(error)) {
	go done(errors.New("disk full"))
}

func TestQoS1PublishNotStoredIsNotAcknowledged(t *testing.T) {
	b, err := core.New(core.Config{Messages: failingJournal{}, Bindings: testserve.NopJournal{}})
	if err != nil {
		t.Fatal(err)
	}
	tb := mqtttest.Serve(t, b, mqtt.Config{})
	// A durable queue makes the publish durable-bound.
	if err := b.CreateAddress("metrics.cpu", core.Anycast); err != nil {
		t.Fatal(err)
	}
	pub := tb.Client5(t, "p", 0)
	r := pub.Publish(t, &paho5.Publish{Topic: "metrics/cpu", QoS: 1, Payload: []byte("1")})
	if r == nil || r.ReasonCode < 0x80 {
		t.Fatalf("PUBACK %+v for a message the journal refused; want a failure reason code", r)
	}
}

func TestMQTT5NoLocal(t *testing.T) {
	tb := mqtttest.Start(t)
	c := tb.Client5(t, "self", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Client.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: "echo/#", QoS: 1, NoLocal: true}}}); err != nil {
		t.Fatal(err)
	}
	other := tb.Client5(t, "other", 0)
	c.Publish(t, &paho5.Publish{Topic: "echo/a", QoS: 1, Payload: []byte("mine")})
	other.Publish(t, &paho5.Publish{Topic: "echo/a", QoS: 1, Payload: []byte("theirs")})
	if p := c.Next(t); string(p.Payload) != "theirs" {
		t.Fatalf("no-local subscriber got %q", p.Payload)
	}
	select {
	case p := <-c.Inbox:
		t.Fatalf("no-local subscriber got %q", p.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestReceiveMaximumSpansSubscriptions(t *testing.T) {
	tb := mqtttest.Start(t)
	nc, err := net.Dial("tcp", tb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	// Manual acknowledgement, Receive Maximum 2, persistent session with
	// two subscriptions: at most 2 QoS 1 deliveries may be unacknowledged.
	var mu sync.Mutex
	var held []*paho5.Publish
	c := paho5.NewClient(paho5.ClientConfig{Conn: nc, EnableManualAcknowledgment: true,
		OnPublishReceived: []func(paho5.PublishReceived) (bool, error){
			func(r paho5.PublishReceived) (bool, error) {
				mu.Lock()
				held = append(held, r.Packet)
				mu.Unlock()
				return true, nil
			},
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	expiry, rm := uint32(60), uint16(2)
	if _, err := c.Connect(ctx, &paho5.Connect{ClientID: "rm", KeepAlive: 30, CleanStart: true,
		Properties: &paho5.ConnectProperties{SessionExpiryInterval: &expiry, ReceiveMaximum: &rm}}); err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(&paho5.Disconnect{})
	if _, err := c.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: "a", QoS: 1}, {Topic: "b", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	pub := tb.Client5(t, "pub", 0)
	for _, topic := range []string{"a", "b", "a", "b"} {
		pub.Publish(t, &paho5.Publish{Topic: topic, QoS: 1, Payload: []byte(topic)})
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(held)
		mu.Unlock()
		if n == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	n := len(held)
	first := append([]*paho5.Publish(nil), held...)
	mu.Unlock()
	if n != 2 {
		t.Fatalf("%d QoS 1 deliveries in flight, want the client's Receive Maximum of 2", n)
	}
	for _, p := range first {
		if err := c.Ack(p); err != nil {
			t.Fatal(err)
		}
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n = len(held)
		mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after acks, %d of 4 delivered", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A message that may have been delivered before, but under a packet id
// the broker no longer knows (here: to another member of a shared
// subscription, which left without acknowledging it), goes out with DUP
// set, under a new packet id.
func TestMQTT5RedeliveryWithoutMarkSetsDup(t *testing.T) {
	tb := mqtttest.Start(t)
	nc, err := net.Dial("tcp", tb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *paho5.Publish, 10)
	a := paho5.NewClient(paho5.ClientConfig{Conn: nc, EnableManualAcknowledgment: true,
		OnPublishReceived: []func(paho5.PublishReceived) (bool, error){
			func(r paho5.PublishReceived) (bool, error) { got <- r.Packet; return true, nil },
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.Connect(ctx, &paho5.Connect{ClientID: "a", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: "$share/w/jobs", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	pub := tb.Client5(t, "p", 0)
	pub.Publish(t, &paho5.Publish{Topic: "jobs", QoS: 1, Payload: []byte("j1")})
	select {
	case p := <-got:
		if p.Duplicate() {
			t.Fatal("first delivery flagged DUP")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first member got nothing")
	}
	b := tb.Client5(t, "b", 0)
	b.Subscribe(t, "$share/w/jobs", 1)
	a.Disconnect(&paho5.Disconnect{}) // without acknowledging j1
	p := b.Next(t)
	if string(p.Payload) != "j1" || !p.Duplicate() {
		t.Fatalf("second member got %q, DUP %v; want j1 flagged DUP", p.Payload, p.Duplicate())
	}
}
