package main

import (
	"context"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"
)

func amqpSession(t *testing.T, opts *goamqp.ConnOptions) (*goamqp.Conn, *goamqp.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqp://"+lastInstance.addrs["amqp"].String(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func amqpReceive(t *testing.T, r *goamqp.Receiver) *goamqp.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := r.Receive(ctx, nil)
	if err != nil {
		t.Fatalf("AMQP receive: %v", err)
	}
	if err := r.AcceptMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// AMQP and STOMP exchange messages on queues and topics, both ways, with
// the documented field mapping.
func TestAMQPAndStompInterop(t *testing.T) {
	stompAddr, _ := startServe(t, testConfig(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, s := amqpSession(t, nil)
	st, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Disconnect()

	// STOMP → AMQP on a queue, with headers.
	r := must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "queue://jobs", nil))
	if err := st.Send("/queue/jobs", "application/json", []byte(`{"n":1}`), gostomp.SendOpt.Receipt,
		gostomp.SendOpt.Header("persistent", "true"), gostomp.SendOpt.Header("priority", "8"),
		gostomp.SendOpt.Header("correlation-id", "c-1"), gostomp.SendOpt.Header("reply-to", "/queue/answers"),
		gostomp.SendOpt.Header("region", "eu")); err != nil {
		t.Fatal(err)
	}
	m := amqpReceive(t, r)
	if string(m.GetData()) != `{"n":1}` || !m.Header.Durable || m.Header.Priority != 8 ||
		*m.Properties.ContentType != "application/json" || m.Properties.CorrelationID != "c-1" ||
		m.ApplicationProperties["region"] != "eu" {
		t.Fatalf("AMQP got %q header %+v properties %+v app %v", m.GetData(), m.Header, m.Properties, m.ApplicationProperties)
	}

	// AMQP → STOMP on a queue: a string value arrives as text.
	sub, err := st.Subscribe("/queue/replies", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send("/queue/barrier", "", nil, gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	snd := must[*goamqp.Sender](t)(s.NewSender(ctx, "queue://replies", nil))
	corr := "c-2"
	if err := snd.Send(ctx, &goamqp.Message{
		Header:                &goamqp.MessageHeader{Durable: true, Priority: 2},
		Properties:            &goamqp.MessageProperties{CorrelationID: corr, Subject: &corr},
		ApplicationProperties: map[string]any{"kind": "answer", "n": int64(5)},
		Value:                 "forty-two",
	}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case sm := <-sub.C:
		h := sm.Header
		if string(sm.Body) != "forty-two" || sm.ContentType != "text/plain; charset=utf-8" || h.Get("persistent") != "true" ||
			h.Get("priority") != "2" || h.Get("correlation-id") != "c-2" || h.Get("kind") != "answer" || h.Get("n") != "5" {
			t.Fatalf("STOMP got %q %q headers %v", sm.Body, sm.ContentType, h)
		}
		for i := 0; i < h.Len(); i++ {
			if k, _ := h.GetAt(i); len(k) > 10 && k[:10] == "_JUNCTION_" {
				t.Fatalf("internal property %q leaked to STOMP", k)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("STOMP did not get the AMQP message")
	}

	// Topics, both ways.
	tr := must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "topic://news.eu", nil))
	stTopic, err := st.Subscribe("/topic/news.*", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send("/topic/news.eu", "text/plain", []byte("from stomp"), gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	if m := amqpReceive(t, tr); string(m.GetData()) != "from stomp" {
		t.Fatalf("AMQP topic got %q", m.GetData())
	}
	<-stTopic.C
	ts := must[*goamqp.Sender](t)(s.NewSender(ctx, "topic://news.eu", nil))
	if err := ts.Send(ctx, goamqp.NewMessage([]byte("from amqp")), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case sm := <-stTopic.C:
		if string(sm.Body) != "from amqp" || sm.Destination != "/topic/news.eu" {
			t.Fatalf("STOMP topic got %q at %s", sm.Body, sm.Destination)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("STOMP topic subscriber did not get the AMQP message")
	}
	if m := amqpReceive(t, tr); string(m.GetData()) != "from amqp" {
		t.Fatalf("AMQP topic got %q", m.GetData())
	}
}

// AMQP and MQTT exchange messages on topics, both ways.
func TestAMQPAndMQTTInterop(t *testing.T) {
	startServe(t, testConfig(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, s := amqpSession(t, nil)
	mq := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + lastInstance.addrs["mqtt"].String()).SetClientID("amqp-peer").
		SetAutoReconnect(false).SetConnectRetry(false))
	if tok := mq.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt connect: %v", tok.Error())
	}
	defer mq.Disconnect(100)
	got := make(chan paho.Message, 10)
	if tok := mq.Subscribe("plant/+/temp", 1, func(_ paho.Client, m paho.Message) { got <- m }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	// AMQP → MQTT: a durable message reaches the QoS 1 subscription as
	// QoS 1.
	snd := must[*goamqp.Sender](t)(s.NewSender(ctx, "topic://plant.7.temp", nil))
	if err := snd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte("21.5")}}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if string(m.Payload()) != "21.5" || m.Topic() != "plant/7/temp" || m.Qos() != 1 {
			t.Fatalf("MQTT got %q on %s qos %d", m.Payload(), m.Topic(), m.Qos())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("MQTT did not get the AMQP message")
	}
	// MQTT → AMQP: a topic receiver and a wildcard receiver.
	exact := must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "topic://plant.8.temp", nil))
	wild := must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "topic://plant.#", nil))
	if tok := mq.Publish("plant/8/temp", 1, false, "19.0"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	for _, r := range []*goamqp.Receiver{exact, wild} {
		m := amqpReceive(t, r)
		if string(m.GetData()) != "19.0" || !m.Header.Durable || *m.Properties.To != "plant.8.temp" {
			t.Fatalf("AMQP got %q durable %v to %v", m.GetData(), m.Header.Durable, *m.Properties.To)
		}
	}
	<-got // the MQTT subscriber's own copy
	// MQTT feeds an AMQP queue consumer when the anycast address exists.
	q := must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "queue://plant.alarms", nil))
	if tok := mq.Publish("plant/alarms", 1, false, "overheat"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	if m := amqpReceive(t, q); string(m.GetData()) != "overheat" {
		t.Fatalf("AMQP queue got %q", m.GetData())
	}
}

// A durable AMQP subscription keeps its messages across a broker
// restart, and a confirmed durable send survives it.
func TestAMQPDurableAcrossRestart(t *testing.T) {
	cfg := testConfig(t)
	_, stop := startServe(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts := &goamqp.ConnOptions{ContainerID: "reporting"}
	durable := &goamqp.ReceiverOptions{Name: "daily", SourceDurability: goamqp.DurabilityUnsettledState, SourceExpiryPolicy: goamqp.ExpiryPolicyNever}

	c, s := amqpSession(t, opts)
	must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "topic://reports", durable))
	c.Close()
	_, ps := amqpSession(t, nil)
	ts := must[*goamqp.Sender](t)(ps.NewSender(ctx, "topic://reports", nil))
	qs := must[*goamqp.Sender](t)(ps.NewSender(ctx, "queue://ledger", nil))
	for _, body := range []string{"r1", "r2"} {
		m := &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte(body)}}
		if err := ts.Send(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		if err := qs.Send(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	cfg.AMQP.Listen = "127.0.0.1:0"
	startServe(t, cfg)
	_, s = amqpSession(t, opts)
	r := must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "topic://reports", durable))
	q := must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "queue://ledger", nil))
	for _, want := range []string{"r1", "r2"} {
		if m := amqpReceive(t, r); string(m.GetData()) != want {
			t.Fatalf("subscription after restart got %q, want %q", m.GetData(), want)
		}
		if m := amqpReceive(t, q); string(m.GetData()) != want {
			t.Fatalf("queue after restart got %q, want %q", m.GetData(), want)
		}
	}
}
