package mqtt_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/mqtt/mqtttest"
)

func TestMQTTRoundTripQoS0And1AndWildcards(t *testing.T) {
	tb := mqtttest.Start(t)
	// One client per filter: a client whose filters overlap gets a copy
	// per matching subscription (MQTT-3.3.5-1 allows it, as Mosquitto
	// does), and paho hands every copy to every matching handler.
	exact := mqtttest.Inbox(t, tb.Client(t, "sub-exact"), "sensors/kitchen/temp", 1)
	plus := mqtttest.Inbox(t, tb.Client(t, "sub-plus"), "sensors/+/temp", 1)
	hash := mqtttest.Inbox(t, tb.Client(t, "sub-hash"), "sensors/#", 0)
	pub := tb.Client(t, "pub")
	mqtttest.Wait(t, pub.Publish("sensors/kitchen/temp", 1, false, "21"))
	mqtttest.Wait(t, pub.Publish("sensors/kitchen/humidity", 0, false, "40"))
	for _, ch := range []chan paho.Message{exact, plus} {
		m := mqtttest.Next(t, ch)
		if string(m.Payload()) != "21" || m.Qos() != 1 || m.Topic() != "sensors/kitchen/temp" {
			t.Fatalf("got %q qos %d on %s", m.Payload(), m.Qos(), m.Topic())
		}
		mqtttest.None(t, ch, 30*time.Millisecond) // exactly once
	}
	got := map[string]bool{}
	got[string(mqtttest.Next(t, hash).Payload())] = true
	got[string(mqtttest.Next(t, hash).Payload())] = true
	if !got["21"] || !got["40"] {
		t.Fatalf("# subscriber got %v", got)
	}
	mqtttest.None(t, hash, 30*time.Millisecond)
}

// A client's overlapping subscriptions each deliver a copy, at the QoS
// of each (MQTT-3.3.5-1: at least one at the highest matching QoS).
func TestOverlappingSubscriptionsOneCopyEach(t *testing.T) {
	tb := mqtttest.Start(t)
	c := tb.Client5(t, "overlap", 0)
	c.Subscribe(t, "o/+", 0)
	c.Subscribe(t, "o/#", 1)
	pub := tb.Client(t, "pub")
	mqtttest.Wait(t, pub.Publish("o/x", 1, false, "m"))
	qos := map[byte]int{}
	qos[c.Next(t).QoS]++
	qos[c.Next(t).QoS]++
	if qos[0] != 1 || qos[1] != 1 {
		t.Fatalf("copies by QoS %v, want one at 0 and one at 1", qos)
	}
	select {
	case p := <-c.Inbox:
		t.Fatalf("a third copy: %q qos %d", p.Payload, p.QoS)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestMQTTPublishReachesCoreConsumers(t *testing.T) {
	tb := mqtttest.Start(t)
	s, _ := tb.Core.NewSession(core.SessionOptions{})
	defer s.Close()
	got := make(chan core.Delivery, 10)
	if _, err := s.Subscribe(core.ConsumerOptions{Address: "a.*", RoutingType: core.Multicast, Credit: 10,
		Handler: func(d core.Delivery) { got <- d }}); err != nil {
		t.Fatal(err)
	}
	// An anycast queue named like a topic takes that topic's publishes.
	if err := tb.Core.CreateAddress("jobs.new", core.Anycast); err != nil {
		t.Fatal(err)
	}
	pub := tb.Client(t, "pub")
	mqtttest.Wait(t, pub.Publish("a/b", 1, true, "hello"))
	mqtttest.Wait(t, pub.Publish("jobs/new", 1, false, "job-1"))
	select {
	case d := <-got:
		m := d.Message
		if string(m.Body) != "hello" || m.Address != "a.b" || !m.Durable || m.Properties[mqtt.PropRetain] != true {
			t.Fatalf("core got %q at %s durable=%v props=%v", m.Body, m.Address, m.Durable, m.Properties)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("MQTT publish did not reach core")
	}
	deadline := time.Now().Add(5 * time.Second)
	for tb.Core.Queue("jobs.new").Stats().Depth != 1 {
		if time.Now().After(deadline) {
			t.Fatal("MQTT publish did not reach the anycast queue")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestCoreMessagesReachMQTTSubscribers(t *testing.T) {
	tb := mqtttest.Start(t)
	// Two clients: one client's overlapping subscriptions get one copy at
	// the highest QoS, as MQTT allows.
	q1 := mqtttest.Inbox(t, tb.Client(t, "sub1"), "news/+", 1)
	q0 := mqtttest.Inbox(t, tb.Client(t, "sub0"), "news/#", 0)
	s, _ := tb.Core.NewSession(core.SessionOptions{})
	defer s.Close()
	send := func(durable bool, body string) {
		err := s.Send(context.Background(), &core.Message{Address: "news.today", RoutingType: core.Multicast,
			Durable: durable, Body: []byte(body), Priority: core.DefaultPriority})
		if err != nil {
			t.Fatal(err)
		}
	}
	send(true, "durable")
	send(false, "volatile")
	for _, want := range []struct {
		body string
		qos  byte
	}{{"durable", 1}, {"volatile", 0}} {
		m := mqtttest.Next(t, q1)
		if string(m.Payload()) != want.body || m.Qos() != want.qos || m.Topic() != "news/today" {
			t.Fatalf("QoS 1 subscriber got %q qos %d on %s, want %q qos %d", m.Payload(), m.Qos(), m.Topic(), want.body, want.qos)
		}
		if m := mqtttest.Next(t, q0); m.Qos() != 0 {
			t.Fatalf("QoS 0 subscriber got qos %d", m.Qos())
		}
	}
	mqtttest.None(t, q1, 30*time.Millisecond)
}

func TestRetainedMessages(t *testing.T) {
	tb := mqtttest.Start(t)
	pub := tb.Client(t, "pub")
	mqtttest.Wait(t, pub.Publish("state/door", 1, true, "open"))
	mqtttest.Wait(t, pub.Publish("state/door", 1, true, "closed")) // replaces
	c := tb.Client(t, "late")
	ch := mqtttest.Inbox(t, c, "state/#", 1)
	if m := mqtttest.Next(t, ch); string(m.Payload()) != "closed" || !m.Retained() {
		t.Fatalf("retained: got %q retained=%v", m.Payload(), m.Retained())
	}
	mqtttest.Wait(t, pub.Publish("state/door", 1, true, "")) // clears
	c2 := tb.Client(t, "later")
	// The clearing publish was routed and the value cleared before its
	// PUBACK: a later subscription gets nothing.
	ch2 := mqtttest.Inbox(t, c2, "state/#", 1)
	mqtttest.None(t, ch2, 50*time.Millisecond)
}

func TestAuthenticationThroughCore(t *testing.T) {
	tb := mqtttest.Start(t)
	o := paho.NewClientOptions().AddBroker("tcp://" + tb.Addr).SetClientID("x").SetUsername("bob").SetPassword("pw").
		SetAutoReconnect(false).SetConnectRetry(false)
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(5 * time.Second) {
		t.Fatal("no CONNACK")
	}
	// mochi answers a failed authentication of an MQTT 3 client with
	// CONNACK return code 5, "not authorized".
	if err := tok.Error(); !errors.Is(err, packets.ErrorRefusedNotAuthorised) && !errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword) {
		t.Fatalf("bob connected: %v", err)
	}
	tb.Client(t, "alice", func(o *paho.ClientOptions) { o.SetUsername("alice") })
}

func TestCloseIsIdempotentAndDisconnectsClients(t *testing.T) {
	tb := mqtttest.Start(t)
	lost := make(chan error, 1)
	tb.Client(t, "c", func(o *paho.ClientOptions) {
		o.SetConnectionLostHandler(func(_ paho.Client, err error) { lost <- err })
	})
	tb.Server.Close()
	tb.Server.Close()
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("client still connected after Close")
	}
}

func TestDetect(t *testing.T) {
	for in, want := range map[string]bool{
		"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c": true,
		"\x10\x8c\x01\x00\x04MQTT\x05":         true,
		"\x10\x0e\x00\x06MQIsdp\x03":           true,
		"CONNECT\naccept-version:1.2\n":        false,
		"\x20\x02\x00\x00":                     false,
		"\x10":                                 false,
	} {
		if got := mqtt.Detect([]byte(in)); got != want {
			t.Errorf("Detect(%q) = %v", in, got)
		}
	}
}

func TestMalformedPacketClosesOnlyThatConnection(t *testing.T) {
	tb := mqtttest.Start(t)
	good := tb.Client(t, "good")
	ch := mqtttest.Inbox(t, good, "ok/#", 1)
	for i, bad := range [][]byte{
		{0x10, 0xff, 0xff, 0xff, 0xff, 0x7f},             // remaining length over 4 bytes
		[]byte("\x10\x0c\x00\x04MQTT\x09\x02\x00\x3cxx"), // unknown protocol level 9
		[]byte("GET / HTTP/1.1\r\n\r\n"),                 // not MQTT at all
		[]byte("\x30\x05\x00\x01"),                       // PUBLISH before CONNECT
	} {
		nc, err := net.Dial("tcp", tb.Addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(bad)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		for {
			_, err := nc.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("case %d: connection not closed", i)
				}
				break // closed, after a CONNACK with a reason code where one applies
			}
		}
		nc.Close()
		mqtttest.Wait(t, good.Publish("ok/still", 1, false, "alive"))
		if m := mqtttest.Next(t, ch); string(m.Payload()) != "alive" {
			t.Fatalf("good client got %q", m.Payload())
		}
	}
}

func TestPersistentSessionQueuesWhileAway(t *testing.T) {
	tb := mqtttest.Start(t)
	persistent := func(o *paho.ClientOptions) { o.SetCleanSession(false) }
	dev := tb.Client(t, "device-1", persistent)
	mqtttest.Wait(t, dev.Subscribe("cmd/#", 1, nil))
	dev.Disconnect(100)

	pub := tb.Client(t, "ctl")
	for i := range 5 {
		mqtttest.Wait(t, pub.Publish("cmd/reboot", 1, false, fmt.Sprint(i)))
	}
	mqtttest.Wait(t, pub.Publish("cmd/volatile", 0, false, "qos0")) // non-durable: QoS 0, still queued

	got := make(chan paho.Message, 100)
	tb.Client(t, "device-1", persistent, func(o *paho.ClientOptions) {
		o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { got <- m })
	})
	// MQTT orders messages per topic and QoS (4.6): the QoS 1 messages
	// on cmd/reboot arrive in order; the QoS 0 one on another topic may
	// come anywhere among them, once.
	reboot, volatile := 0, 0
	for range 6 {
		m := mqtttest.Next(t, got)
		switch {
		case m.Topic() == "cmd/volatile" && string(m.Payload()) == "qos0" && m.Qos() == 0:
			volatile++
		case m.Topic() == "cmd/reboot" && string(m.Payload()) == fmt.Sprint(reboot) && m.Qos() == 1:
			reboot++
		default:
			t.Fatalf("offline message after %d of cmd/reboot and %d of cmd/volatile: got %q qos %d on %s", reboot, volatile, m.Payload(), m.Qos(), m.Topic())
		}
	}
	if reboot != 5 || volatile != 1 {
		t.Fatalf("got %d of cmd/reboot and %d of cmd/volatile, want 5 and 1", reboot, volatile)
	}
	mqtttest.None(t, got, 50*time.Millisecond)
	// Acked messages are gone from the session's queue.
	deadline := time.Now().Add(5 * time.Second)
	for {
		q := tb.Core.Queue("mqtt/device-1.cmd/#")
		if q != nil && q.Stats().Depth == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("persistent session queue not drained: %+v", q)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestCleanStartDiscardsThePersistentSession(t *testing.T) {
	tb := mqtttest.Start(t)
	dev := tb.Client(t, "d", func(o *paho.ClientOptions) { o.SetCleanSession(false) })
	mqtttest.Wait(t, dev.Subscribe("x", 1, nil))
	dev.Disconnect(100)
	if tb.Core.Queue("mqtt/d.x") == nil {
		t.Fatal("no durable subscription for the persistent session")
	}
	tb.Client(t, "d") // clean session
	// The old session is gone before CONNACK.
	if tb.Core.Queue("mqtt/d.x") != nil {
		t.Fatal("clean start left the old session's subscription")
	}
}

func TestPersistentSessionReceivesOtherProtocolsAndOnce(t *testing.T) {
	tb := mqtttest.Start(t)
	got := make(chan paho.Message, 100)
	dev := tb.Client(t, "p", func(o *paho.ClientOptions) {
		o.SetCleanSession(false)
		o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { got <- m })
	})
	mqtttest.Wait(t, dev.Subscribe("t/+", 1, nil))
	s, _ := tb.Core.NewSession(core.SessionOptions{})
	defer s.Close()
	if err := s.Send(context.Background(), &core.Message{Address: "t.a", RoutingType: core.Multicast, Durable: true, Body: []byte("core")}); err != nil {
		t.Fatal(err)
	}
	pub := tb.Client(t, "pub")
	mqtttest.Wait(t, pub.Publish("t/b", 1, false, "mqtt"))
	seen := map[string]int{}
	seen[string(mqtttest.Next(t, got).Payload())]++
	seen[string(mqtttest.Next(t, got).Payload())]++
	mqtttest.None(t, got, 50*time.Millisecond)
	if seen["core"] != 1 || seen["mqtt"] != 1 {
		t.Fatalf("deliveries %v, want each once", seen)
	}
}

func TestWillOnUngracefulDisconnect(t *testing.T) {
	tb := mqtttest.Start(t)
	watcher := tb.Client(t, "watcher")
	wills := mqtttest.Inbox(t, watcher, "status/+", 1)
	// A STOMP-side consumer (core) sees the will too.
	s, _ := tb.Core.NewSession(core.SessionOptions{})
	defer s.Close()
	coreGot := make(chan core.Delivery, 1)
	s.Subscribe(core.ConsumerOptions{Address: "status.*", RoutingType: core.Multicast, Credit: 10,
		Handler: func(d core.Delivery) { coreGot <- d }})

	nc, err := net.Dial("tcp", tb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	// CONNECT 3.1.1 with a will on status/dev1 ("gone", QoS 1), by hand so
	// that the connection can be cut without a DISCONNECT.
	connect := []byte{0x10, 0, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x0e, 0x00, 0x3c,
		0x00, 0x04, 'd', 'e', 'v', '1',
		0x00, 0x0b, 's', 't', 'a', 't', 'u', 's', '/', 'd', 'e', 'v', '1',
		0x00, 0x04, 'g', 'o', 'n', 'e'}
	connect[1] = byte(len(connect) - 2)
	nc.Write(connect)
	ack := make([]byte, 4)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(nc, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 {
		t.Fatalf("CONNACK %x %v", ack, err)
	}
	nc.Close() // ungraceful
	if m := mqtttest.Next(t, wills); string(m.Payload()) != "gone" || m.Topic() != "status/dev1" {
		t.Fatalf("will: %q on %s", m.Payload(), m.Topic())
	}
	select {
	case d := <-coreGot:
		if string(d.Message.Body) != "gone" || d.Message.Address != "status.dev1" {
			t.Fatalf("core got %q at %s", d.Message.Body, d.Message.Address)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the will did not reach core's subscribers")
	}
	mqtttest.None(t, wills, 50*time.Millisecond) // and MQTT got it once
}

func TestKeepAliveTimeout(t *testing.T) {
	tb := mqtttest.Start(t)
	nc, err := net.Dial("tcp", tb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Keep-alive 1s; then silence: the server must cut the connection
	// after 1.5 × keep-alive [MQTT-3.1.2-24].
	nc.Write([]byte{0x10, 0x0e, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02, 0x00, 0x01, 0x00, 0x02, 'k', 'a'})
	start := time.Now()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 16)
	for {
		if _, err := nc.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("silent client still connected after 10s")
			}
			break
		}
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("cut after %v, before the keep-alive", d)
	}
}

func TestSessionTakeover(t *testing.T) {
	tb := mqtttest.Start(t)
	lost := make(chan struct{}, 1)
	tb.Client(t, "same", func(o *paho.ClientOptions) {
		o.SetCleanSession(false)
		o.SetConnectionLostHandler(func(paho.Client, error) { lost <- struct{}{} })
	})
	got := make(chan paho.Message, 10)
	second := tb.Client(t, "same", func(o *paho.ClientOptions) {
		o.SetCleanSession(false)
		o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { got <- m })
	})
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("first connection not taken over")
	}
	mqtttest.Wait(t, second.Subscribe("take/over", 1, nil))
	pub := tb.Client(t, "pub")
	mqtttest.Wait(t, pub.Publish("take/over", 1, false, "x"))
	if m := mqtttest.Next(t, got); string(m.Payload()) != "x" {
		t.Fatalf("got %q", m.Payload())
	}
}

// A subscriber that stops reading must not hold up anyone else [mochi#95].
func TestSlowSubscriberDoesNotDelayOthers(t *testing.T) {
	tb := mqtttest.Start(t)
	// The slow one: subscribes by hand, then never reads.
	nc, err := net.Dial("tcp", tb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write([]byte{0x10, 0x10, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02, 0x00, 0x3c, 0x00, 0x04, 's', 'l', 'o', 'w'})
	nc.Write([]byte{0x82, 0x08, 0x00, 0x01, 0x00, 0x03, 'b', '/', '#', 0x00})
	time.Sleep(50 * time.Millisecond)
	fast := tb.Client(t, "fast")
	ch := mqtttest.Inbox(t, fast, "b/#", 0)
	pub := tb.Client(t, "pub")
	payload := make([]byte, 16<<10)
	start := time.Now()
	const n = 2000 // 32 MiB: far more than the slow socket's buffers hold
	for i := range n {
		pub.Publish("b/x", 0, false, payload)
		_ = i
	}
	for i := range n {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("fast subscriber stalled after %d of %d messages", i, n)
		}
	}
	t.Logf("fast subscriber got %d messages of 16 KiB in %v while another subscriber did not read", n, time.Since(start))
}

func TestPersistentSessionByteBudget(t *testing.T) {
	// With DROP. (The default policy, PAGE, pages the overflow to disk
	// when the broker persists, and makes the publisher wait without a
	// page store.)
	drop := "DROP"
	tb := mqtttest.StartFull(t, mqtt.Config{MaxSessionBytes: 1000},
		core.Config{Authenticator: mqtttest.DenyBob{}, AddressSettings: []core.AddressSettings{{Match: "feed", FullPolicy: &drop}}})
	dev := tb.Client(t, "dev", func(o *paho.ClientOptions) { o.SetCleanSession(false) })
	mqtttest.Wait(t, dev.Subscribe("feed", 1, nil))
	dev.Disconnect(100)
	pub := tb.Client(t, "pub")
	body := make([]byte, 200)
	for range 10 {
		// The publisher is not refused; the session keeps what fits.
		mqtttest.Wait(t, pub.Publish("feed", 1, false, body))
	}
	st := tb.Core.Queue("mqtt/dev.feed").Stats()
	if st.Depth != 5 || st.Dropped != 5 || st.Bytes != 1000 {
		t.Fatalf("session queue %+v, want 5 kept and 5 dropped (counted)", st)
	}
}

func TestExpiredPersistentSessionIsDropped(t *testing.T) {
	b, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// A session left behind (as after a restart), unknown to mochi.
	s, _ := b.NewSession(core.SessionOptions{ClientID: "mqtt/gone"})
	if _, err := s.Subscribe(core.ConsumerOptions{Address: "x", RoutingType: core.Multicast, SubscriptionName: "q1/x",
		Handler: func(core.Delivery) {}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	srv, err := mqtt.New(mqtt.Config{MaxSessionExpiry: 100 * time.Millisecond}, b)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	deadline := time.Now().Add(5 * time.Second)
	for b.Queue("mqtt/gone.q1/x") != nil {
		if time.Now().After(deadline) {
			t.Fatal("restored session never expired")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
