package main

import (
	"context"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
)

// A message recovered after a restart may have been delivered before
// the broker stopped: an AMQP receiver is told so by delivery-count ≥ 1
// (what Qpid JMS reads for JMSRedelivered) as well as first-acquirer
// false. A message sent after the restart is not flagged.
func TestAMQPRecoveredMessageHasDeliveryCount(t *testing.T) {
	cfg := testConfig(t)
	_, stop := startServe(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, s := amqpSession(t, nil)
	snd := must[*goamqp.Sender](t)(s.NewSender(ctx, "queue://recovered", nil))
	// Delivered once, not settled, when the broker stops: the typical
	// possible duplicate.
	for _, body := range []string{"delivered-before", "never-delivered"} {
		if err := snd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte(body)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	r := must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "queue://recovered", &goamqp.ReceiverOptions{Credit: 1}))
	if m, err := r.Receive(ctx, nil); err != nil || string(m.GetData()) != "delivered-before" ||
		m.Header.DeliveryCount != 0 || !m.Header.FirstAcquirer {
		t.Fatalf("first delivery: %v %+v", err, m)
	}
	conn.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	cfg.AMQP.Listen = "127.0.0.1:0"
	startServe(t, cfg)
	_, s = amqpSession(t, nil)
	snd = must[*goamqp.Sender](t)(s.NewSender(ctx, "queue://recovered", nil))
	if err := snd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte("after-restart")}}, nil); err != nil {
		t.Fatal(err)
	}
	r = must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "queue://recovered", &goamqp.ReceiverOptions{Credit: 10}))
	for _, want := range []struct {
		body      string
		recovered bool
	}{{"delivered-before", true}, {"never-delivered", true}, {"after-restart", false}} {
		m := amqpReceive(t, r)
		if string(m.GetData()) != want.body {
			t.Fatalf("got %q, want %q", m.GetData(), want.body)
		}
		if want.recovered && (m.Header.DeliveryCount < 1 || m.Header.FirstAcquirer) {
			t.Errorf("recovered %q: delivery-count %d, first-acquirer %v; want ≥ 1 and false", want.body, m.Header.DeliveryCount, m.Header.FirstAcquirer)
		}
		if !want.recovered && (m.Header.DeliveryCount != 0 || !m.Header.FirstAcquirer) {
			t.Errorf("fresh %q: delivery-count %d, first-acquirer %v; want 0 and true", want.body, m.Header.DeliveryCount, m.Header.FirstAcquirer)
		}
	}
}
