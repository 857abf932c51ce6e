package mqtt_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/authztest"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/mqtt"
)

// producer may send to the queue orders and the topics sensors.#;
// consumer may read the topics; durable may read news, but not in a
// durable (persistent session's) subscription.
var authzGrants = authztest.Grants{
	"producer": {core.PermSend: {"orders", "sensors.#"}},
	"consumer": {core.PermConsume: {"sensors.#"}, core.PermCreateNonDurableQueue: {"sensors.#"}},
	"durable":  {core.PermConsume: {"news"}, core.PermCreateNonDurableQueue: {"news"}},
}

func startAuthzBroker(t *testing.T) *testBroker {
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
	srv, err := mqtt.New(mqtt.Config{}, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	addr, stop := testserve.Serve(t, srv.ServeConn)
	t.Cleanup(func() {
		srv.Close()
		stop()
	})
	return &testBroker{addr: addr, broker: b, srv: srv}
}

func mqttDenials(tb *testBroker) uint64 {
	_, by := tb.broker.AuthzDenials()
	return by["mqtt"]
}

func waitDenials(t *testing.T, tb *testBroker, want uint64) {
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
	cons := tb.client(t, "cons", as("consumer"))
	in := inbox(t, cons, "sensors/#", 1)
	prod := tb.client(t, "prod", as("producer"))
	wait(t, prod.Publish("sensors/kitchen", 1, false, "t1"))
	if m := next(t, in); string(m.Payload()) != "t1" {
		t.Fatalf("got %q", m.Payload())
	}
	// Wildcard topic subscription: the producer may not consume.
	if code := subackCode(t, prod, "sensors/#", 1); code != 0x80 {
		t.Fatalf("SUBACK %#x, want 0x80", code)
	}
	waitDenials(t, tb, 1)
	// The consumer may not send: QoS 0 dropped, the connection stays.
	wait(t, cons.Publish("sensors/kitchen", 0, false, "dropped"))
	waitDenials(t, tb, 2)
	none(t, in, 100*time.Millisecond)
	if !cons.IsConnectionOpen() {
		t.Fatal("a refused QoS 0 publish closed the connection")
	}
	// To a queue: the producer's publish reaches it; the consumer's QoS 1
	// publish closes its connection.
	wait(t, prod.Publish("orders", 1, false, "o1"))
	if d := tb.broker.Queue("orders").Stats().Depth; d != 1 {
		t.Fatalf("queue depth %d, want 1", d)
	}
	cons.Publish("orders", 1, false, "refused")
	waitClosed(t, cons)
	waitDenials(t, tb, 3)
	if d := tb.broker.Queue("orders").Stats().Depth; d != 1 {
		t.Fatalf("queue depth %d, want 1", d)
	}

	// A will the user may not send is dropped (mochi does not check
	// wills): closed by an administrator, the client leaves no will.
	watch := inbox(t, tb.client(t, "watch", as("consumer")), "sensors/#", 0)
	willer := tb.client(t, "willer", as("consumer"), func(o *paho.ClientOptions) {
		o.SetWill("sensors/kitchen", "will", 0, false)
	})
	waitDenials(t, tb, 4)
	var last uint64
	for _, c := range tb.broker.Connections() {
		last = max(last, c.ID) // willer's is the newest
	}
	if err := tb.broker.CloseConnection(last); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, willer)
	none(t, watch, 200*time.Millisecond)

	// A persistent session's subscription is a durable subscription.
	dur := tb.client(t, "dur", as("durable"), func(o *paho.ClientOptions) { o.SetCleanSession(false) })
	if code := subackCode(t, dur, "news", 1); code != 0x80 {
		t.Fatalf("durable SUBACK %#x, want 0x80", code)
	}
	waitDenials(t, tb, 5)
	if subs := tb.broker.DurableClientIDs(); len(subs) != 0 {
		t.Fatalf("durable subscriptions created: %v", subs)
	}
	// A clean session's is not.
	clean := tb.client(t, "clean", as("durable"))
	if code := subackCode(t, clean, "news", 1); code != 1 {
		t.Fatalf("clean SUBACK %#x, want 1", code)
	}
}

func (tb *testBroker) connect5As(t *testing.T, id, user string, expiry uint32) *client5 {
	t.Helper()
	nc, err := net.Dial("tcp", tb.addr)
	if err != nil {
		t.Fatal(err)
	}
	cl := &client5{inbox: make(chan *paho5.Publish, 1000)}
	cl.c = paho5.NewClient(paho5.ClientConfig{
		Conn: nc,
		OnPublishReceived: []func(paho5.PublishReceived) (bool, error){
			func(r paho5.PublishReceived) (bool, error) { cl.inbox <- r.Packet; return true, nil },
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cp := &paho5.Connect{ClientID: id, KeepAlive: 30, CleanStart: true, Username: user, UsernameFlag: true,
		Properties: &paho5.ConnectProperties{SessionExpiryInterval: &expiry}}
	ca, err := cl.c.Connect(ctx, cp)
	if err != nil || ca.ReasonCode != 0 {
		t.Fatalf("mqtt 5 connect %s: %v %+v", id, err, ca)
	}
	t.Cleanup(func() { cl.c.Disconnect(&paho5.Disconnect{}) })
	return cl
}

// MQTT 5: refusals are reason 0x87 (not authorized) in SUBACK, PUBACK
// and PUBREC; a refused QoS 0 publish is dropped.
func TestMQTT5Authorization(t *testing.T) {
	tb := startAuthzBroker(t)
	cons := tb.connect5As(t, "cons5", "consumer", 0)
	if code := cons.subscribe(t, "sensors/#", 1); code != 1 {
		t.Fatalf("SUBACK %#x, want 1", code)
	}
	prod := tb.connect5As(t, "prod5", "producer", 0)
	if r := prod.publish(t, &paho5.Publish{Topic: "sensors/kitchen", QoS: 1, Payload: []byte("t1")}); r.ReasonCode != 0 {
		t.Fatalf("PUBACK %#x", r.ReasonCode)
	}
	if p := cons.next(t); string(p.Payload) != "t1" {
		t.Fatalf("got %q", p.Payload)
	}
	// Wildcard topic subscription, plain and shared: the producer may not.
	if code := prod.subscribe(t, "sensors/#", 1); code != 0x87 {
		t.Fatalf("SUBACK %#x, want 0x87", code)
	}
	if code := prod.subscribe(t, "$share/g/sensors/#", 1); code != 0x87 {
		t.Fatalf("shared SUBACK %#x, want 0x87", code)
	}
	waitDenials(t, tb, 2)
	// The consumer may not publish, to the topic or to the queue.
	for _, qos := range []byte{1, 2} {
		if r := cons.publish(t, &paho5.Publish{Topic: "sensors/kitchen", QoS: qos, Payload: []byte("x")}); r.ReasonCode != 0x87 {
			t.Fatalf("QoS %d: reason %#x, want 0x87", qos, r.ReasonCode)
		}
	}
	if r := cons.publish(t, &paho5.Publish{Topic: "orders", QoS: 1, Payload: []byte("x")}); r.ReasonCode != 0x87 {
		t.Fatalf("queue: reason %#x, want 0x87", r.ReasonCode)
	}
	cons.publish(t, &paho5.Publish{Topic: "sensors/kitchen", QoS: 0, Payload: []byte("dropped")})
	waitDenials(t, tb, 6)
	select {
	case p := <-cons.inbox:
		t.Fatalf("a refused publish was delivered: %q", p.Payload)
	case <-time.After(100 * time.Millisecond):
	}
	if r := prod.publish(t, &paho5.Publish{Topic: "orders", QoS: 1, Payload: []byte("o1")}); r.ReasonCode != 0 {
		t.Fatalf("PUBACK %#x", r.ReasonCode)
	}
	if d := tb.broker.Queue("orders").Stats().Depth; d != 1 {
		t.Fatalf("queue depth %d, want 1", d)
	}
	// A topic with no address yet: creating it needs createAddress.
	if r := prod.publish(t, &paho5.Publish{Topic: "sensors/garage", QoS: 1, Payload: []byte("x")}); r.ReasonCode != 0x87 {
		t.Fatalf("new address: reason %#x, want 0x87", r.ReasonCode)
	}
	if _, _, exists := tb.broker.AddressRoutingTypes("sensors.garage"); exists {
		t.Fatal("address created despite the refusal")
	}

	// A session that outlives the connection subscribes durably: refused.
	dur := tb.connect5As(t, "dur5", "durable", 3600)
	if code := dur.subscribe(t, "news", 1); code != 0x87 {
		t.Fatalf("durable SUBACK %#x, want 0x87", code)
	}
	waitDenials(t, tb, 8)
	if subs := tb.broker.DurableClientIDs(); len(subs) != 0 {
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

func startGrantsBroker(t *testing.T, g core.Authorizer) *testBroker {
	t.Helper()
	b, err := core.New(core.Config{Authorizer: g})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mqtt.New(mqtt.Config{}, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	addr, stop := testserve.Serve(t, srv.ServeConn)
	t.Cleanup(func() {
		srv.Close()
		stop()
	})
	return &testBroker{addr: addr, broker: b, srv: srv}
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
	alice := tb.client(t, "alice", as("alice", true))
	wait(t, alice.Publish("devices/secret/a", 1, true, "retained secret"))
	wait(t, alice.Publish("devices/x/a", 1, true, "retained x"))
	// mochi acknowledges a publish before it hands it to subscribers, and
	// reads a client's next packet after: once this one is acknowledged,
	// the retained ones cannot reach the subscribers below live as well.
	wait(t, alice.Publish("sync", 1, false, "sync"))
	type sub struct {
		name string
		ch   chan paho.Message
	}
	var bobs, alices []sub
	for _, f := range []string{"devices/#", "devices/+/a"} {
		for _, clean := range []bool{true, false} {
			name := fmt.Sprintf("%s clean=%v", f, clean)
			id := fmt.Sprintf("w%d", len(bobs))
			bobs = append(bobs, sub{"bob " + name, inbox(t, tb.client(t, "bob-"+id, as("bob", clean)), f, 1)})
			alices = append(alices, sub{"alice " + name, inbox(t, tb.client(t, "alice-"+id, as("alice", clean)), f, 1)})
		}
	}
	// Retained messages, sent as the filters subscribe.
	for _, s := range bobs {
		if m := next(t, s.ch); string(m.Payload()) != "retained x" {
			t.Fatalf("%s: first retained message %q, want the one bob may read", s.name, m.Payload())
		}
	}
	for _, s := range alices {
		got := []string{string(next(t, s.ch).Payload()), string(next(t, s.ch).Payload())}
		slices.Sort(got)
		if !slices.Equal(got, []string{"retained secret", "retained x"}) {
			t.Fatalf("%s: retained %q", s.name, got)
		}
	}
	b5 := tb.connect5As(t, "bob5", "bob", 0)
	a5 := tb.connect5As(t, "alice5", "alice", 0)
	for _, c := range []*client5{b5, a5} {
		if code := c.subscribe(t, "$share/g/devices/#", 1); code != 1 {
			t.Fatalf("shared SUBACK %#x", code)
		}
	}

	wait(t, alice.Publish("devices/secret/a", 1, false, "secret"))
	wait(t, alice.Publish("devices/x/a", 1, false, "x"))
	for _, s := range bobs {
		if m := next(t, s.ch); string(m.Payload()) != "x" {
			t.Fatalf("%s received %q on %s first, want x", s.name, m.Payload(), m.Topic())
		}
	}
	for _, s := range alices {
		if m := next(t, s.ch); string(m.Payload()) != "secret" {
			t.Fatalf("%s received %q, want secret then x", s.name, m.Payload())
		}
		if m := next(t, s.ch); string(m.Payload()) != "x" {
			t.Fatalf("%s received %q, want x", s.name, m.Payload())
		}
	}
	// The shared group: the secret to alice whatever the turn, x to one.
	for range 4 {
		wait(t, alice.Publish("devices/secret/a", 1, false, "secret"))
	}
	wait(t, alice.Publish("devices/x/a", 1, false, "x"))
	secrets, xs := 0, 0
	for secrets < 5 || xs < 2 {
		select {
		case p := <-a5.inbox:
			switch string(p.Payload) {
			case "secret":
				secrets++
			case "x":
				xs++
			}
		case p := <-b5.inbox:
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
