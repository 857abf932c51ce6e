package main

import (
	"path/filepath"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// mqttDelivery is one PUBLISH as a paho client saw it.
type mqttDelivery struct {
	payload string
	dup     bool
	qos     byte
	id      uint16
	msg     paho.Message
}

// TestHAMQTTRedeliveryFlaggedDup: an MQTT 3.1.1 subscriber with a
// persistent session (clean session 0) receives a QoS 1 message from the
// live broker of a shared-store pair and holds back its PUBACK; the live
// broker is killed with SIGKILL; paho reconnects by itself to the new
// live broker, which resumes the session (session present) and sends the
// message again under its original packet id [MQTT-4.4.0-1] with DUP set
// [MQTT-3.3.1-1]. A message sent after the takeover comes with DUP clear,
// and once acknowledged, neither comes again to a later connection of
// the session.
func TestHAMQTTRedeliveryFlaggedDup(t *testing.T) {
	if testing.Short() {
		t.Skip("HA process test skipped in -short mode")
	}
	bin := buildBinary(t)
	dir := filepath.Join(t.TempDir(), "data")
	slots := newSlots(t)
	a := startHAProc(t, bin, dir, slots[0], "--ha-lock-poll", "100ms")
	a.await(t, "junction started", 30*time.Second)
	b := startHAProc(t, bin, dir, slots[1], "--ha-lock-poll", "100ms")
	b.await(t, backupMsg, 30*time.Second)
	// The backup first: it opens no listener, so paho moves on to the
	// live broker, and after the kill finds the new one first.
	brokers := []string{"tcp://" + slots[1].mqtt, "tcp://" + slots[0].mqtt}
	const topic = "ha/dup"

	got := make(chan mqttDelivery, 100)
	handler := func(_ paho.Client, m paho.Message) {
		got <- mqttDelivery{string(m.Payload()), m.Duplicate(), m.Qos(), m.MessageID(), m}
	}
	connects := make(chan bool, 10) // session present, at each connection
	subscriberOpts := func() *paho.ClientOptions {
		o := paho.NewClientOptions().SetClientID("ha-dup-sub").SetCleanSession(false).
			SetAutoAckDisabled(true). // the test acknowledges, or not
			SetAutoReconnect(true).SetConnectRetry(true).SetMaxReconnectInterval(time.Second).
			SetKeepAlive(2 * time.Second).SetDefaultPublishHandler(handler)
		for _, br := range brokers {
			o.AddBroker(br)
		}
		return o
	}
	connect := func(o *paho.ClientOptions) paho.Client {
		t.Helper()
		c := paho.NewClient(o)
		tok := c.Connect()
		if !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
			t.Fatalf("mqtt connect: %v", tok.Error())
		}
		connects <- tok.(*paho.ConnectToken).SessionPresent()
		return c
	}
	next := func(what string) mqttDelivery {
		t.Helper()
		select {
		case d := <-got:
			return d
		case <-time.After(30 * time.Second):
			t.Fatalf("mqtt: no message within 30s (%s)", what)
		}
		return mqttDelivery{}
	}
	none := func(what string, d time.Duration) {
		t.Helper()
		select {
		case m := <-got:
			t.Fatalf("mqtt: %s: %q (dup=%v id=%d)", what, m.payload, m.dup, m.id)
		case <-time.After(d):
		}
	}

	sub := connect(subscriberOpts())
	<-connects
	if tok := sub.Subscribe(topic, 1, handler); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt subscribe: %v", tok.Error())
	}
	pub := paho.NewClient(paho.NewClientOptions().SetClientID("ha-dup-pub").
		SetAutoReconnect(true).SetConnectRetry(true).SetMaxReconnectInterval(time.Second).
		AddBroker(brokers[0]).AddBroker(brokers[1]))
	if tok := pub.Connect(); !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
		t.Fatalf("mqtt connect: %v", tok.Error())
	}
	defer pub.Disconnect(100)
	publish := func(body string) {
		t.Helper()
		if tok := pub.Publish(topic, 1, false, body); !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
			t.Fatalf("mqtt publish %q: %v", body, tok.Error())
		}
	}

	// "acked" is acknowledged before the kill, "held" is not.
	publish("acked")
	d := next("acked")
	if d.payload != "acked" || d.dup || d.qos != 1 {
		t.Fatalf("first delivery: %q dup=%v qos=%d", d.payload, d.dup, d.qos)
	}
	d.msg.Ack()
	publish("held")
	held := next("held")
	if held.payload != "held" || held.dup || held.qos != 1 {
		t.Fatalf("first delivery: %q dup=%v qos=%d", held.payload, held.dup, held.qos)
	}
	// The PUBACK for "acked" was written before "held" arrived, and the
	// broker reads a connection's packets in order; give it a moment to
	// reach the store all the same (an acknowledgement that is not in
	// the store at the kill may come again, flagged, as QoS 1 allows).
	time.Sleep(200 * time.Millisecond)

	a.kill9()
	b.await(t, takeoverMsg, 30*time.Second)

	// paho reconnects to the new live broker; the session is resumed
	// and "held" comes again, same packet id, DUP set.
	for {
		d := next("the held message after the takeover")
		if d.payload == "acked" {
			if !d.dup {
				t.Fatalf("the acknowledged message came again without DUP (id %d)", d.id)
			}
			t.Logf("the acknowledged message came again, flagged DUP: its PUBACK had not reached the store")
			d.msg.Ack()
			continue
		}
		if d.payload != "held" || !d.dup || d.qos != 1 || d.id != held.id {
			t.Fatalf("after the takeover: %q dup=%v qos=%d id=%d, want \"held\" dup=true qos=1 id=%d",
				d.payload, d.dup, d.qos, d.id, held.id)
		}
		d.msg.Ack()
		break
	}
	publish("after")
	if d := next("after"); d.payload != "after" || d.dup || d.qos != 1 {
		t.Fatalf("a message sent after the takeover: %q dup=%v qos=%d", d.payload, d.dup, d.qos)
	} else {
		d.msg.Ack()
	}
	none("a message came again after it was acknowledged", time.Second)

	// The acknowledgements reached the new live broker: a later
	// connection of the session gets nothing again, and goes on.
	sub.Disconnect(500)
	sub = connect(subscriberOpts())
	if !<-connects {
		t.Fatal("the session was not present on reconnecting to the new live broker")
	}
	defer sub.Disconnect(100)
	publish("last")
	if d := next("last"); d.payload != "last" || d.dup {
		t.Fatalf("after reconnecting: %q dup=%v, want \"last\" dup=false", d.payload, d.dup)
	} else {
		d.msg.Ack()
	}
	none("after reconnecting", 500*time.Millisecond)
}
