package mqtt_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/authztest"
	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/mqtt/mqtttest"
)

// producer may send to the queue orders and the topics sensors.#;
// consumer may read the topics; durable may read news, but not in a
// durable (persistent session's) subscription.
var authzGrants = authztest.Grants{
	"producer": {core.PermSend: {"orders", "sensors.#"}},
	"consumer": {core.PermConsume: {"sensors.#"}, core.PermCreateNonDurableQueue: {"sensors.#"}},
	"durable":  {core.PermConsume: {"news"}, core.PermCreateNonDurableQueue: {"news"}},
}

func startAuthzBroker(t *testing.T) *mqtttest.Broker {
	t.Helper()
	b, err := core.New(core.Config{Authorizer: authzGrants})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		name string
		rt   core.RoutingType
	}{{"orders", core.Anycast}, {"sensors.kitchen", core.Multicast}, {"news", core.Multicast}} {
		if err := b.CreateAddress(a.name, a.rt); err != nil {
			t.Fatal(err)
		}
	}
	return mqtttest.Serve(t, b, mqtt.Config{})
}

func mqttDenials(tb *mqtttest.Broker) uint64 {
	_, by := tb.Core.AuthzDenials()
	return by["mqtt"]
}

func waitDenials(t *testing.T, tb *mqtttest.Broker, want uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for mqttDenials(tb) != want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := mqttDenials(tb); n != want {
		t.Fatalf("%d denials counted, want %d", n, want)
	}
}

func subackCode(t *testing.T, c paho.Client, filter string, qos byte) byte {
	t.Helper()
	tok := c.Subscribe(filter, qos, func(paho.Client, paho.Message) {})
	if !tok.WaitTimeout(5 * time.Second) {
		t.Fatal("no SUBACK")
	}
	return tok.(*paho.SubscribeToken).Result()[filter]
}

func waitClosed(t *testing.T, c paho.Client) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.IsConnectionOpen() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if c.IsConnectionOpen() {
		t.Fatal("connection still open")
	}
}

// MQTT 3.1.1: a refused SUBSCRIBE filter gets 0x80; a refused QoS 0
// publish is dropped, a refused QoS 1 publish closes the connection
// [MQTT-3.3.5-2].
func TestMQTT3Authorization(t *testing.T) {
	tb := startAuthzBroker(t)
	as := func(user string) func(*paho.ClientOptions) {
		return func(o *paho.ClientOptions) { o.SetUsername(user) }
	}
	cons := tb.Client(t, "cons", as("consumer"))
	in := mqtttest.Inbox(t, cons, "sensors/#", 1)
	prod := tb.Client(t, "prod", as("producer"))
	mqtttest.Wait(t, prod.Publish("sensors/kitchen", 1, false, "t1"))
	if m := mqtttest.Next(t, in); string(m.Payload()) != "t1" {
		t.Fatalf("got %q", m.Payload())
	}
	// Wildcard topic subscription: the producer may not consume.
	if code := subackCode(t, prod, "sensors/#", 1); code != 0x80 {
		t.Fatalf("SUBACK %#x, want 0x80", code)
	}
	waitDenials(t, tb, 1)
	// The consumer may not send: QoS 0 dropped, the connection stays.
	mqtttest.Wait(t, cons.Publish("sensors/kitchen", 0, false, "dropped"))
	waitDenials(t, tb, 2)
	mqtttest.None(t, in, 100*time.Millisecond)
	if !cons.IsConnectionOpen() {
		t.Fatal("a refused QoS 0 publish closed the connection")
	}
	// To a queue: the producer's publish reaches it; the consumer's QoS 1
	// publish closes its connection.
	mqtttest.Wait(t, prod.Publish("orders", 1, false, "o1"))
	if d := tb.Core.Queue("orders").Stats().Depth; d != 1 {
		t.Fatalf("queue depth %d, want 1", d)
	}
	cons.Publish("orders", 1, false, "refused")
	waitClosed(t, cons)
	waitDenials(t, tb, 3)
	if d := tb.Core.Queue("orders").Stats().Depth; d != 1 {
		t.Fatalf("queue depth %d, want 1", d)
	}

	// A will the user may not send is dropped (mochi does not check
	// wills): closed by an administrator, the client leaves no will.
	watch := mqtttest.Inbox(t, tb.Client(t, "watch", as("consumer")), "sensors/#", 0)
	willer := tb.Client(t, "willer", as("consumer"), func(o *paho.ClientOptions) {
		o.SetWill("sensors/kitchen", "will", 0, false)
	})
	waitDenials(t, tb, 4)
	var last uint64
	for _, c := range tb.Core.Connections() {
		last = max(last, c.ID) // willer's is the newest
	}
	if err := tb.Core.CloseConnection(last); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, willer)
	mqtttest.None(t, watch, 200*time.Millisecond)

	// A persistent session's subscription is a durable subscription.
	dur := tb.Client(t, "dur", as("durable"), func(o *paho.ClientOptions) { o.SetCleanSession(false) })
	if code := subackCode(t, dur, "news", 1); code != 0x80 {
		t.Fatalf("durable SUBACK %#x, want 0x80", code)
	}
	waitDenials(t, tb, 5)
	if subs := tb.Core.DurableClientIDs(); len(subs) != 0 {
		t.Fatalf("durable subscriptions created: %v", subs)
	}
	// A clean session's is not.
	clean := tb.Client(t, "clean", as("durable"))
	if code := subackCode(t, clean, "news", 1); code != 1 {
		t.Fatalf("clean SUBACK %#x, want 1", code)
	}
}

// MQTT 5: refusals are reason 0x87 (not authorized) in SUBACK, PUBACK
// and PUBREC; a refused QoS 0 publish is dropped.
func TestMQTT5Authorization(t *testing.T) {
	tb := startAuthzBroker(t)
	cons := tb.Connect5As(t, "cons5", "consumer", 0)
	if code := cons.Subscribe(t, "sensors/#", 1); code != 1 {
		t.Fatalf("SUBACK %#x, want 1", code)
	}
	prod := tb.Connect5As(t, "prod5", "producer", 0)
	if r := prod.Publish(t, &paho5.Publish{Topic: "sensors/kitchen", QoS: 1, Payload: []byte("t1")}); r.ReasonCode != 0 {
		t.Fatalf("PUBACK %#x", r.ReasonCode)
	}
	if p := cons.Next(t); string(p.Payload) != "t1" {
		t.Fatalf("got %q", p.Payload)
	}
	// Wildcard topic subscription, plain and shared: the producer may not.
	if code := prod.Subscribe(t, "sensors/#", 1); code != 0x87 {
		t.Fatalf("SUBACK %#x, want 0x87", code)
	}
	if code := prod.Subscribe(t, "$share/g/sensors/#", 1); code != 0x87 {
		t.Fatalf("shared SUBACK %#x, want 0x87", code)
	}
	waitDenials(t, tb, 2)
	// The consumer may not publish, to the topic or to the queue.
	for _, qos := range []byte{1, 2} {
		if r := cons.Publish(t, &paho5.Publish{Topic: "sensors/kitchen", QoS: qos, Payload: []byte("x")}); r.ReasonCode != 0x87 {
			t.Fatalf("QoS %d: reason %#x, want 0x87", qos, r.ReasonCode)
		}
	}
	if r := cons.Publish(t, &paho5.Publish{Topic: "orders", QoS: 1, Payload: []byte("x")}); r.ReasonCode != 0x87 {
		t.Fatalf("queue: reason %#x, want 0x87", r.ReasonCode)
	}
	cons.Publish(t, &paho5.Publish{Topic: "sensors/kitchen", QoS: 0, Payload: []byte("dropped")})
	waitDenials(t, tb, 6)
	select {
	case p := <-cons.Inbox:
		t.Fatalf("a refused publish was delivered: %q", p.Payload)
	case <-time.After(100 * time.Millisecond):
	}
	if r := prod.Publish(t, &paho5.Publish{Topic: "orders", QoS: 1, Payload: []byte("o1")}); r.ReasonCode != 0 {
		t.Fatalf("PUBACK %#x", r.ReasonCode)
	}
	if d := tb.Core.Queue("orders").Stats().Depth; d != 1 {
		t.Fatalf("queue depth %d, want 1", d)
	}
	// A topic with no address yet: creating it needs createAddress.
	if r := prod.Publish(t, &paho5.Publish{Topic: "sensors/garage", QoS: 1, Payload: []byte("x")}); r.ReasonCode != 0x87 {
		t.Fatalf("new address: reason %#x, want 0x87", r.ReasonCode)
	}
	if _, _, exists := tb.Core.AddressRoutingTypes("sensors.garage"); exists {
		t.Fatal("address created despite the refusal")
	}

	// A session that outlives the connection subscribes durably: refused.
	dur := tb.Connect5As(t, "dur5", "durable", 3600)
	if code := dur.Subscribe(t, "news", 1); code != 0x87 {
		t.Fatalf("durable SUBACK %#x, want 0x87", code)
	}
	waitDenials(t, tb, 8)
	if subs := tb.Core.DurableClientIDs(); len(subs) != 0 {
		t.Fatalf("durable subscriptions created: %v", subs)
	}
}

// devicesGrants: alice may do everything; bob may use devices/#, except
// devices/secret/#, which only alice may (as security settings where
// devices.secret.# is narrower than devices.#).
func devicesGrants() authztest.Grants {
	all := func(patterns ...string) map[core.Permission][]string {
		m := map[core.Permission][]string{}
		for _, p := range []core.Permission{core.PermSend, core.PermConsume, core.PermCreateAddress,
			core.PermCreateNonDurableQueue, core.PermCreateDurableQueue, core.PermDeleteDurableQueue} {
			m[p] = patterns
		}
		return m
	}
	return authztest.Grants{"alice": all("#"), "bob": all("!devices.secret.#", "devices.#")}
}

func startGrantsBroker(t *testing.T, g core.Authorizer) *mqtttest.Broker {
	t.Helper()
	b, err := core.New(core.Config{Authorizer: g})
	if err != nil {
		t.Fatal(err)
	}
	return mqtttest.Serve(t, b, mqtt.Config{})
}

// A wildcard filter does not read what a narrower permission refuses:
// bob's devices/# and devices/+/a do not receive devices/secret/a, in a
// clean session (served by the MQTT engine), a persistent one, a shared
// subscription, nor as a retained message; alice's do.
func TestMQTTWildcardFiltersReadOnlyPermittedTopics(t *testing.T) {
	tb := startGrantsBroker(t, devicesGrants())
	as := func(user string, clean bool) func(*paho.ClientOptions) {
		return func(o *paho.ClientOptions) { o.SetUsername(user).SetCleanSession(clean) }
	}
	alice := tb.Client(t, "alice", as("alice", true))
	mqtttest.Wait(t, alice.Publish("devices/secret/a", 1, true, "retained secret"))
	mqtttest.Wait(t, alice.Publish("devices/x/a", 1, true, "retained x"))
	// mochi acknowledges a publish before it hands it to subscribers, and
	// reads a client's next packet after: once this one is acknowledged,
	// the retained ones cannot reach the subscribers below live as well.
	mqtttest.Wait(t, alice.Publish("sync", 1, false, "sync"))
	type sub struct {
		name string
		ch   chan paho.Message
	}
	var bobs, alices []sub
	for _, f := range []string{"devices/#", "devices/+/a"} {
		for _, clean := range []bool{true, false} {
			name := fmt.Sprintf("%s clean=%v", f, clean)
			id := fmt.Sprintf("w%d", len(bobs))
			bobs = append(bobs, sub{"bob " + name, mqtttest.Inbox(t, tb.Client(t, "bob-"+id, as("bob", clean)), f, 1)})
			alices = append(alices, sub{"alice " + name, mqtttest.Inbox(t, tb.Client(t, "alice-"+id, as("alice", clean)), f, 1)})
		}
	}
	// Retained messages, sent as the filters subscribe.
	for _, s := range bobs {
		if m := mqtttest.Next(t, s.ch); string(m.Payload()) != "retained x" {
			t.Fatalf("%s: first retained message %q, want the one bob may read", s.name, m.Payload())
		}
	}
	for _, s := range alices {
		got := []string{string(mqtttest.Next(t, s.ch).Payload()), string(mqtttest.Next(t, s.ch).Payload())}
		slices.Sort(got)
		if !slices.Equal(got, []string{"retained secret", "retained x"}) {
			t.Fatalf("%s: retained %q", s.name, got)
		}
	}
	b5 := tb.Connect5As(t, "bob5", "bob", 0)
	a5 := tb.Connect5As(t, "alice5", "alice", 0)
	for _, c := range []*mqtttest.Client5{b5, a5} {
		if code := c.Subscribe(t, "$share/g/devices/#", 1); code != 1 {
			t.Fatalf("shared SUBACK %#x", code)
		}
	}

	mqtttest.Wait(t, alice.Publish("devices/secret/a", 1, false, "secret"))
	mqtttest.Wait(t, alice.Publish("devices/x/a", 1, false, "x"))
	for _, s := range bobs {
		if m := mqtttest.Next(t, s.ch); string(m.Payload()) != "x" {
			t.Fatalf("%s received %q on %s first, want x", s.name, m.Payload(), m.Topic())
		}
	}
	for _, s := range alices {
		if m := mqtttest.Next(t, s.ch); string(m.Payload()) != "secret" {
			t.Fatalf("%s received %q, want secret then x", s.name, m.Payload())
		}
		if m := mqtttest.Next(t, s.ch); string(m.Payload()) != "x" {
			t.Fatalf("%s received %q, want x", s.name, m.Payload())
		}
	}
	// The shared group: the secret to alice whatever the turn, x to one.
	for range 4 {
		mqtttest.Wait(t, alice.Publish("devices/secret/a", 1, false, "secret"))
	}
	mqtttest.Wait(t, alice.Publish("devices/x/a", 1, false, "x"))
	secrets, xs := 0, 0
	for secrets < 5 || xs < 2 {
		select {
		case p := <-a5.Inbox:
			switch string(p.Payload) {
			case "secret":
				secrets++
			case "x":
				xs++
			}
		case p := <-b5.Inbox:
			if string(p.Payload) != "x" {
				t.Fatalf("bob's shared subscription received %q", p.Payload)
			}
			xs++
		case <-time.After(5 * time.Second):
			t.Fatalf("shared group: %d secrets and %d x received, want 5 and 2", secrets, xs)
		}
	}
	if n := mqttDenials(tb); n == 0 {
		t.Fatal("no denial counted for the withheld messages")
	}
}
