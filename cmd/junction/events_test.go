package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho5 "github.com/eclipse/paho.golang/paho"
	gostomp "github.com/go-stomp/stomp/v3"
)

// Broker events reach a STOMP subscriber and an AMQP receiver (each with
// a selector) and an MQTT 5 subscriber of the notification address, and
// the API's event log.
func TestEventsReachStompAndMQTTSubscribers(t *testing.T) {
	stompAddr, _ := startServe(t, testConfig(t))
	in := lastInstance
	mqttAddr := in.addrs["mqtt"].String()

	nc, err := net.Dial("tcp", mqttAddr)
	if err != nil {
		t.Fatal(err)
	}
	type mqttEvent struct {
		typ, address string
		body         map[string]any
	}
	mqttGot := make(chan mqttEvent, 1000)
	m5 := paho5.NewClient(paho5.ClientConfig{Conn: nc, OnPublishReceived: []func(paho5.PublishReceived) (bool, error){
		func(r paho5.PublishReceived) (bool, error) {
			var e mqttEvent
			if r.Packet.Properties != nil {
				e.typ = r.Packet.Properties.User.Get("_AMQ_NotifType")
				e.address = r.Packet.Properties.User.Get("_AMQ_Address")
			}
			json.Unmarshal(r.Packet.Payload, &e.body)
			select {
			case mqttGot <- e:
			default:
			}
			return true, nil
		},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := m5.Connect(ctx, &paho5.Connect{ClientID: "watcher", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer m5.Disconnect(&paho5.Disconnect{})
	if _, err := m5.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: "activemq/notifications", QoS: 0}}}); err != nil {
		t.Fatal(err)
	}

	watch, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Disconnect()
	sub, err := watch.Subscribe("/topic/activemq.notifications", gostomp.AckAuto,
		gostomp.SubscribeOpt.Header("selector", "_AMQ_NotifType = 'CONSUMER_CREATED' AND _AMQ_Address = 'orders'"))
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Send("/queue/barrier", "", nil, gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}

	// An AMQP receiver with a selector filter, for the connections.
	_, as := amqpSession(t, nil)
	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer acancel()
	ar, err := as.NewReceiver(actx, "topic://activemq.notifications", &goamqp.ReceiverOptions{
		Filters: []goamqp.LinkFilter{goamqp.NewSelectorFilter("_AMQ_NotifType = 'CONNECTION_CREATED' AND _AMQ_User = 'bob'")}})
	if err != nil {
		t.Fatal(err)
	}

	// A client connects and consumes from orders.
	c, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0), gostomp.ConnOpt.Login("bob", ""), quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe("/queue/other", gostomp.AckAuto); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe("/queue/orders", gostomp.AckAuto); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-sub.C:
		if m.Err != nil {
			t.Fatal(m.Err)
		}
		if m.Header.Get("_AMQ_NotifType") != "CONSUMER_CREATED" || m.Header.Get("_AMQ_Address") != "orders" ||
			m.Header.Get("_AMQ_User") != "bob" || m.Header.Get("_AMQ_Protocol") != "stomp" {
			t.Fatalf("STOMP event headers %v", m.Header)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no CONSUMER_CREATED event over STOMP")
	}
	// The selector kept the rest away (the consumer of /queue/other
	// came first).
	select {
	case m := <-sub.C:
		t.Fatalf("selector let through %v", m.Header)
	case <-time.After(200 * time.Millisecond):
	}
	c.Disconnect()
	am, err := ar.Receive(actx, nil)
	if err != nil {
		t.Fatalf("AMQP event: %v", err)
	}
	if am.ApplicationProperties["_AMQ_NotifType"] != "CONNECTION_CREATED" || am.ApplicationProperties["_AMQ_Protocol"] != "stomp" {
		t.Fatalf("AMQP event properties %v", am.ApplicationProperties)
	}

	want := map[string]bool{"CONNECTION_CREATED": false, "CONSUMER_CREATED": false, "CONSUMER_CLOSED": false, "CONNECTION_DESTROYED": false}
	deadline := time.After(5 * time.Second)
	for n := 0; n < len(want); {
		select {
		case e := <-mqttGot:
			if done, ok := want[e.typ]; ok && !done {
				if e.body["type"] != e.typ {
					t.Fatalf("MQTT event body %v for %s", e.body, e.typ)
				}
				want[e.typ] = true
				n++
			}
		case <-deadline:
			t.Fatalf("MQTT subscriber saw %v", want)
		}
	}

	// The API's event log.
	res, err := http.Get("http://" + in.addrs["console"].String() + "/api/v1/events?type=CONSUMER_CREATED")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		Enabled bool
		Address string
		Events  []struct{ Type, Address, User string }
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if !out.Enabled || out.Address != "activemq.notifications" || len(out.Events) < 2 || out.Events[0].Type != "CONSUMER_CREATED" {
		t.Fatalf("GET /api/v1/events: %+v", out)
	}
}
