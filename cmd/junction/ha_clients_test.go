package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"
)

// The Go failover snippets of docs/ha.md (the code between "snippet:"
// and "end snippet" is what the page shows; internal/lint keeps the two
// the same), and the test that runs them against a shared-store pair.

// snippet: go-stomp
// stompDialAny connects to the first broker of the group that answers,
// trying each in turn for up to a minute. go-stomp has no failover of its
// own: when a Send or a subscription fails, dial again and subscribe again.
func stompDialAny(brokers []string) (*gostomp.Conn, error) {
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, b := range brokers {
			var c *gostomp.Conn
			if c, err = gostomp.Dial("tcp", b); err == nil {
				return c, nil
			}
		}
	}
	return nil, err
}

// end snippet

// snippet: paho-go
// pahoConnect lists every broker of the group: paho tries them in order
// at each (re)connection. The persistent session keeps the subscription
// in the store, so the new live broker has it; subscribing again on each
// connection covers a session that expired.
func pahoConnect(brokers []string, clientID, topic string, h paho.MessageHandler) (paho.Client, error) {
	o := paho.NewClientOptions().SetClientID(clientID).SetCleanSession(false).
		SetAutoReconnect(true).SetConnectRetry(true).SetMaxReconnectInterval(2 * time.Second).
		SetOnConnectHandler(func(c paho.Client) { c.Subscribe(topic, 1, h) })
	for _, b := range brokers {
		o.AddBroker("tcp://" + b)
	}
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
		return nil, fmt.Errorf("connect: %v", tok.Error())
	}
	return c, nil
}

// end snippet

// snippet: go-amqp
// amqpDialAny connects to the first broker of the group that answers.
// go-amqp has no failover of its own: when Send or Receive fails, close
// the connection, dial again and open the links again.
func amqpDialAny(ctx context.Context, brokers []string) (*goamqp.Conn, error) {
	var err error
	for ctx.Err() == nil {
		for _, b := range brokers {
			var c *goamqp.Conn
			if c, err = goamqp.Dial(ctx, "amqp://"+b, nil); err == nil {
				return c, nil
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil, errors.Join(err, ctx.Err())
}

// end snippet

// TestHAClientFailoverSnippets runs each Go client through a takeover:
// the brokers are listed backup first (it opens no listener: the client
// moves on); a message is received and left unacknowledged; the live
// broker is killed with SIGKILL; the client fails over, gets the message
// again, flagged redelivered (STOMP and AMQP), and a second one goes
// through the new live broker.
func TestHAClientFailoverSnippets(t *testing.T) {
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
	list := func(pick func(haSlot) string) []string { return []string{pick(slots[1]), pick(slots[0])} }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// STOMP: a consumer and a producer, each with its own connection.
	stompBrokers := list(func(s haSlot) string { return s.stomp })
	consumer, err := stompDialAny(stompBrokers)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := consumer.Subscribe("/queue/failover.go", gostomp.AckClientIndividual)
	if err != nil {
		t.Fatal(err)
	}
	producer, err := stompDialAny(stompBrokers)
	if err != nil {
		t.Fatal(err)
	}
	if err := producer.Send("/queue/failover.go", "text/plain", []byte("one"), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true")); err != nil {
		t.Fatal(err)
	}
	if m := stompNext(t, sub); m.Err != nil || string(m.Body) != "one" {
		t.Fatalf("stomp: %v %q", m.Err, m.Body)
	}

	// AMQP: a receiver and a sender on one connection.
	amqpBrokers := list(func(s haSlot) string { return s.amqp })
	openAMQP := func() (*goamqp.Conn, *goamqp.Receiver, *goamqp.Sender) {
		c, err := amqpDialAny(ctx, amqpBrokers)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.NewReceiver(ctx, "queue://failover.go.amqp", nil)
		if err != nil {
			t.Fatal(err)
		}
		snd, err := s.NewSender(ctx, "queue://failover.go.amqp", nil)
		if err != nil {
			t.Fatal(err)
		}
		return c, r, snd
	}
	amqpConn, rcv, snd := openAMQP()
	if err := snd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte("one")}}, nil); err != nil {
		t.Fatal(err)
	}
	if m, err := rcv.Receive(ctx, nil); err != nil || string(m.GetData()) != "one" {
		t.Fatalf("amqp: %v", err)
	}

	// MQTT: a persistent-session subscriber and a publisher.
	mqttBrokers := list(func(s haSlot) string { return s.mqtt })
	got := make(chan string, 10)
	subscriber, err := pahoConnect(mqttBrokers, "failover-go-sub", "failover/mqtt", func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) })
	if err != nil {
		t.Fatal(err)
	}
	defer subscriber.Disconnect(100)
	publisher, err := pahoConnect(mqttBrokers, "failover-go-pub", "failover/mqtt/unused", func(paho.Client, paho.Message) {})
	if err != nil {
		t.Fatal(err)
	}
	defer publisher.Disconnect(100)
	awaitMQTT := func(want string) {
		t.Helper()
		for {
			select {
			case body := <-got:
				if body == want {
					return
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("mqtt: no %q within 30s", want)
			}
		}
	}
	// The subscription is made in the connect handler: publish until it
	// is in place.
	for done, tries := false, 0; !done; tries++ {
		if tries == 20 {
			t.Fatal("mqtt: the subscription never got a message")
		}
		if tok := publisher.Publish("failover/mqtt", 1, false, "one"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("mqtt publish: %v", tok.Error())
		}
		select {
		case body := <-got:
			done = body == "one"
		case <-time.After(time.Second):
		}
	}

	a.kill9()

	// STOMP: the subscription ends with an error; dial again, subscribe
	// again: "one" comes back flagged, then "two".
	if m := stompNext(t, sub); m != nil && m.Err == nil {
		t.Fatalf("stomp: a message after the kill: %q", m.Body)
	}
	consumer.MustDisconnect()
	if consumer, err = stompDialAny(stompBrokers); err != nil {
		t.Fatal(err)
	}
	defer consumer.Disconnect()
	if sub, err = consumer.Subscribe("/queue/failover.go", gostomp.AckClientIndividual); err != nil {
		t.Fatal(err)
	}
	m := stompNext(t, sub)
	if m.Err != nil || string(m.Body) != "one" || m.Header.Get("redelivered") != "true" {
		t.Fatalf("stomp after the failover: %v %q redelivered=%q", m.Err, m.Body, m.Header.Get("redelivered"))
	}
	consumer.Ack(m)
	for producer.Send("/queue/failover.go", "text/plain", []byte("two"), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true")) != nil {
		producer.MustDisconnect()
		if producer, err = stompDialAny(stompBrokers); err != nil {
			t.Fatal(err)
		}
	}
	defer producer.Disconnect()
	if m := stompNext(t, sub); m.Err != nil || string(m.Body) != "two" {
		t.Fatalf("stomp after the failover: %v %q", m.Err, m.Body)
	}

	// AMQP: Receive fails; close, dial again, open the links again.
	if _, err := rcv.Receive(ctx, nil); err == nil {
		t.Fatal("amqp: a message after the kill")
	}
	amqpConn.Close()
	amqpConn, rcv, snd = openAMQP()
	defer amqpConn.Close()
	am, err := rcv.Receive(ctx, nil)
	if err != nil || string(am.GetData()) != "one" || am.Header == nil || am.Header.FirstAcquirer {
		t.Fatalf("amqp after the failover: %v %+v", err, am)
	}
	rcv.AcceptMessage(ctx, am)
	if err := snd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte("two")}}, nil); err != nil {
		t.Fatal(err)
	}
	if am, err := rcv.Receive(ctx, nil); err != nil || string(am.GetData()) != "two" {
		t.Fatalf("amqp after the failover: %v", err)
	}

	// MQTT: paho reconnects by itself, to the new live broker.
	if tok := publisher.Publish("failover/mqtt", 1, false, "two"); !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
		t.Fatalf("mqtt publish after the failover: %v", tok.Error())
	}
	awaitMQTT("two")
	b.await(t, takeoverMsg, time.Second)
}

// stompNext is the subscription's next message (nil once it is closed),
// within 30 s.
func stompNext(t *testing.T, sub *gostomp.Subscription) *gostomp.Message {
	t.Helper()
	select {
	case m := <-sub.C:
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("stomp: nothing within 30s")
	}
	return nil
}
