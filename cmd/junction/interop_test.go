package main

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"
)

// Cross-protocol: STOMP and MQTT clients exchange messages through one
// broker, in both directions, over real sockets.
func TestStompAndMQTTInterop(t *testing.T) {
	stompAddr, _ := startServe(t, testConfig(t))
	mqttAddr := lastInstance.addrs["mqtt"].String()

	st, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Disconnect()
	dial := func(id string) paho.Client {
		mq := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + mqttAddr).SetClientID(id).
			SetAutoReconnect(false).SetConnectRetry(false))
		if tok := mq.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("mqtt connect: %v", tok.Error())
		}
		t.Cleanup(func() { mq.Disconnect(100) })
		return mq
	}
	mq := dial("device")

	// One client per filter: a client whose filters overlap gets a copy
	// per subscription, and paho hands each to every matching handler.
	mqttExact := make(chan paho.Message, 10)
	mqttPlus := make(chan paho.Message, 10)
	for filter, ch := range map[string]chan paho.Message{"a/b": mqttExact, "a/+": mqttPlus} {
		ch := ch
		if tok := dial("sub-"+filter).Subscribe(filter, 1, func(_ paho.Client, m paho.Message) { ch <- m }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	stTopic, err := st.Subscribe("/topic/a.b", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	stWild, err := st.Subscribe("/topic/a.*", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	stQueue, err := st.Subscribe("/queue/work.items", gostomp.AckClientIndividual)
	if err != nil {
		t.Fatal(err)
	}
	// Barrier: the subscriptions above are in place once this returns.
	if err := st.Send("/queue/barrier", "", nil, gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}

	// STOMP → MQTT.
	if err := st.Send("/topic/a.b", "text/plain", []byte("from stomp"), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true")); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan paho.Message{"a/b": mqttExact, "a/+": mqttPlus} {
		select {
		case m := <-ch:
			if string(m.Payload()) != "from stomp" || m.Topic() != "a/b" || m.Qos() != 1 {
				t.Fatalf("MQTT %s got %q on %s qos %d", name, m.Payload(), m.Topic(), m.Qos())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("MQTT subscriber %s did not get the STOMP message", name)
		}
	}
	// STOMP's own topic subscribers got it too; drain them.
	<-stTopic.C
	<-stWild.C

	// MQTT → STOMP, topic and wildcard.
	if tok := mq.Publish("a/b", 1, false, "from mqtt"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	for name, sub := range map[string]*gostomp.Subscription{"/topic/a.b": stTopic, "/topic/a.*": stWild} {
		select {
		case m := <-sub.C:
			if string(m.Body) != "from mqtt" || m.Destination != "/topic/a.b" || m.Header.Get("persistent") != "true" {
				t.Fatalf("STOMP %s got %q at %s (persistent %q)", name, m.Body, m.Destination, m.Header.Get("persistent"))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("STOMP subscriber %s did not get the MQTT message", name)
		}
	}
	// The MQTT subscribers get the MQTT publish once each: core is the
	// only router.
	for _, ch := range []chan paho.Message{mqttExact, mqttPlus} {
		<-ch
		select {
		case m := <-ch:
			t.Fatalf("duplicate delivery %q", m.Payload())
		case <-time.After(50 * time.Millisecond):
		}
	}

	// MQTT → STOMP work queue: the queue exists, so the topic feeds it.
	if tok := mq.Publish("work/items", 1, false, "job-1"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	select {
	case m := <-stQueue.C:
		if string(m.Body) != "job-1" || m.Destination != "/queue/work.items" {
			t.Fatalf("queue consumer got %q at %s", m.Body, m.Destination)
		}
		st.Ack(m)
	case <-time.After(5 * time.Second):
		t.Fatal("MQTT publish did not feed the STOMP queue")
	}
}

// A persistent MQTT session's messages are journaled: they survive a
// broker restart and are delivered when the device reconnects.
func TestMQTTPersistentSessionSurvivesRestart(t *testing.T) {
	cfg := testConfig(t)
	_, stop := startServe(t, cfg)
	mqttAddr := lastInstance.addrs["mqtt"].String()
	connect := func(id string, clean bool, h paho.MessageHandler) paho.Client {
		o := paho.NewClientOptions().AddBroker("tcp://" + mqttAddr).SetClientID(id).SetCleanSession(clean).
			SetAutoReconnect(false).SetConnectRetry(false).SetDefaultPublishHandler(h)
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("connect %s: %v", id, tok.Error())
		}
		return c
	}
	dev := connect("meter-7", false, nil)
	if tok := dev.Subscribe("meters/7/cmd", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	dev.Disconnect(100)
	pub := connect("ctl", true, nil)
	if tok := pub.Publish("meters/7/config", 1, true, "retained-config"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	for _, body := range []string{"a", "b", "c"} {
		// PUBACK comes after the journal has the message.
		if tok := pub.Publish("meters/7/cmd", 1, false, body); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	pub.Disconnect(100)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	cfg.MQTT.Listen = "127.0.0.1:0"
	startServe(t, cfg)
	mqttAddr = lastInstance.addrs["mqtt"].String()
	got := make(chan paho.Message, 10)
	dev = connect("meter-7", false, func(_ paho.Client, m paho.Message) { got <- m })
	defer dev.Disconnect(100)
	for _, want := range []string{"a", "b", "c"} {
		select {
		case m := <-got:
			if string(m.Payload()) != want || m.Topic() != "meters/7/cmd" {
				t.Fatalf("after restart got %q on %s, want %q", m.Payload(), m.Topic(), want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("message %q lost across the restart", want)
		}
	}
	// The retained message survived the restart too.
	retained := make(chan paho.Message, 1)
	if tok := dev.Subscribe("meters/7/config", 1, func(_ paho.Client, m paho.Message) { retained <- m }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	select {
	case m := <-retained:
		if string(m.Payload()) != "retained-config" || !m.Retained() {
			t.Fatalf("retained after restart: %q retained=%v", m.Payload(), m.Retained())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("retained message lost across the restart")
	}
}

// An MQTT 5 shared subscription and a STOMP subscriber with the same
// shared-subscription-name are one group: each message goes to one of them.
func TestSharedSubscriptionAcrossProtocols(t *testing.T) {
	stompAddr, _ := startServe(t, testConfig(t))
	mqttAddr := lastInstance.addrs["mqtt"].String()

	nc, err := net.Dial("tcp", mqttAddr)
	if err != nil {
		t.Fatal(err)
	}
	mqttGot := make(chan string, 100)
	m5 := paho5.NewClient(paho5.ClientConfig{Conn: nc, OnPublishReceived: []func(paho5.PublishReceived) (bool, error){
		func(r paho5.PublishReceived) (bool, error) { mqttGot <- string(r.Packet.Payload); return true, nil },
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m5.Connect(ctx, &paho5.Connect{ClientID: "m5", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer m5.Disconnect(&paho5.Disconnect{})
	if _, err := m5.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: "$share/g/jobs/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	st, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Disconnect()
	sub, err := st.Subscribe("/topic/jobs.#", gostomp.AckAuto, gostomp.SubscribeOpt.Header("shared-subscription-name", "g"))
	if err != nil {
		t.Fatal(err)
	}
	// Subscribed once a later frame's receipt is back.
	if err := st.Send("/queue/barrier", "", nil, gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	// A separate producer connection: go-stomp stops processing receipts
	// on a connection whose subscription channel is full.
	prod, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Disconnect()
	const n = 40
	for i := range n {
		if err := prod.Send("/topic/jobs.x", "text/plain", []byte(fmt.Sprint(i)), gostomp.SendOpt.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	byMQTT, bySTOMP := 0, 0
	deadline := time.After(10 * time.Second)
	for len(seen) < n {
		select {
		case b := <-mqttGot:
			seen[b]++
			byMQTT++
		case m := <-sub.C:
			seen[string(m.Body)]++
			bySTOMP++
		case <-deadline:
			t.Fatalf("got %d of %d", len(seen), n)
		}
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("message %s delivered %d times to the group", k, c)
		}
	}
	if byMQTT == 0 || bySTOMP == 0 {
		t.Fatalf("the group did not share: MQTT %d, STOMP %d", byMQTT, bySTOMP)
	}
}
