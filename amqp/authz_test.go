package amqp_test

import (
	"errors"
	"testing"

	goamqp "github.com/Azure/go-amqp"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/amqptest"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/authztest"
)

// producer may send to the queue orders and the topics sensors.#;
// consumer may read them; durable may read news but not in a durable
// subscription.
var authzGrants = authztest.Grants{
	"producer": {core.PermSend: {"orders", "sensors.#"}},
	"consumer": {core.PermConsume: {"orders", "sensors.#"}, core.PermCreateNonDurableQueue: {"sensors.#"}},
	"durable":  {core.PermConsume: {"news"}, core.PermCreateNonDurableQueue: {"news"}},
}

func startAuthzBroker(t *testing.T) *amqptest.Broker {
	t.Helper()
	tb := amqptest.Start(t, amqp.Config{}, core.Config{Authorizer: authzGrants})
	for _, a := range []struct {
		name string
		rt   core.RoutingType
	}{{"orders", core.Anycast}, {"sensors.kitchen", core.Multicast}, {"news", core.Multicast}} {
		if err := tb.Core.CreateAddress(a.name, a.rt); err != nil {
			t.Fatal(err)
		}
	}
	return tb
}

func as(user string) *goamqp.ConnOptions {
	return &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(user, "x"), ContainerID: "c-" + user}
}

func wantUnauthorized(t *testing.T, what string, err error) {
	t.Helper()
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondUnauthorizedAccess {
		t.Fatalf("%s: %v, want %s", what, err, goamqp.ErrCondUnauthorizedAccess)
	}
}

func amqpDenials(tb *amqptest.Broker) uint64 {
	_, by := tb.Core.AuthzDenials()
	return by["amqp"]
}

func TestAuthorization(t *testing.T) {
	tb := startAuthzBroker(t)
	prod := tb.Session(t, as("producer"))
	cons := tb.Session(t, as("consumer"))

	for _, dest := range []struct{ send, receive string }{
		{"queue://orders", "queue://orders"},             // a queue
		{"topic://sensors.kitchen", "topic://sensors.#"}, // a wildcard topic subscription
	} {
		r := amqptest.NewReceiver(t, cons, dest.receive, nil)
		snd := amqptest.NewSender(t, prod, dest.send, nil)
		amqptest.Send(t, snd, amqptest.Text("m"))
		if m := amqptest.Receive(t, r); string(m.GetData()) != "m" {
			t.Fatalf("%s: got %q", dest.receive, m.GetData())
		}
		// The reverse is refused at attach: the refusal pattern with
		// amqp:unauthorized-access. The sessions go on.
		_, err := prod.NewReceiver(amqptest.Ctx(t), dest.receive, nil)
		wantUnauthorized(t, "receiver of "+dest.receive, err)
		_, err = cons.NewSender(amqptest.Ctx(t), dest.send, nil)
		wantUnauthorized(t, "sender to "+dest.send, err)
	}
	if n := amqpDenials(tb); n != 4 {
		t.Fatalf("%d denials, want 4", n)
	}

	// Through the anonymous relay a refused message is rejected with
	// amqp:unauthorized-access; the link goes on.
	relay := amqptest.NewSender(t, cons, "", nil)
	m := amqptest.Text("relayed")
	to := "queue://orders"
	m.Properties = &goamqp.MessageProperties{To: &to}
	wantUnauthorized(t, "relayed send", relay.Send(amqptest.Ctx(t), m, nil))
	prodRelay := amqptest.NewSender(t, prod, "", nil)
	amqptest.Send(t, prodRelay, m)
	if d := amqptest.QueueDepth(tb, "orders"); d != 1 {
		t.Fatalf("queue depth %d, want 1", d)
	}
	// A new address needs createAddress.
	_, err := prod.NewSender(amqptest.Ctx(t), "topic://sensors.garage", nil)
	wantUnauthorized(t, "sender to a new address", err)
	if n := amqpDenials(tb); n != 6 {
		t.Fatalf("%d denials, want 6", n)
	}
}

func TestAuthorizationDurableSubscription(t *testing.T) {
	tb := startAuthzBroker(t)
	s := tb.Session(t, as("durable"))
	// A non-durable subscription is allowed.
	amqptest.NewReceiver(t, s, "topic://news", nil)
	durable := &goamqp.ReceiverOptions{Name: "sub1", SourceDurability: goamqp.DurabilityUnsettledState, SourceExpiryPolicy: goamqp.ExpiryPolicyNever}
	_, err := s.NewReceiver(amqptest.Ctx(t), "topic://news", durable)
	wantUnauthorized(t, "durable subscription", err)
	if tb.Core.Queue("c-durable.sub1") != nil {
		t.Fatal("the durable subscription was created")
	}
	// A dynamic (temporary) queue needs createNonDurableQueue on it.
	_, err = s.NewReceiver(amqptest.Ctx(t), "", &goamqp.ReceiverOptions{DynamicAddress: true})
	wantUnauthorized(t, "dynamic queue", err)
	if n := amqpDenials(tb); n != 2 {
		t.Fatalf("%d denials, want 2", n)
	}
}
