package stomp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/authztest"
	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

// authzGrants: producer may send to the queue orders and the topics
// sensors.#; consumer may read them; durable may read news but not
// create a durable subscription on it.
var authzGrants = authztest.Grants{
	"producer": {core.PermSend: {"orders", "sensors.#", "barrier"}},
	"consumer": {core.PermSend: {"barrier"}, core.PermConsume: {"orders", "sensors.#"},
		core.PermCreateNonDurableQueue: {"sensors.#"}},
	"durable": {core.PermSend: {"barrier"}, core.PermConsume: {"news"}, core.PermCreateNonDurableQueue: {"news"}},
}

func startAuthzBroker(t *testing.T) *stomptest.Broker {
	t.Helper()
	b, err := core.New(core.Config{Authorizer: authzGrants, ExpiryScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		name string
		rt   core.RoutingType
	}{{"orders", core.Anycast}, {"barrier", core.Anycast}, {"sensors.kitchen", core.Multicast}, {"news", core.Multicast}} {
		if err := b.CreateAddress(a.name, a.rt); err != nil {
			t.Fatal(err)
		}
	}
	return stomptest.Serve(t, b, stomp.Config{})
}

// wantNotAuthorized checks a STOMP ERROR "not authorized" whose body
// names the permission and the address.
func wantNotAuthorized(t *testing.T, err error, perm core.Permission, addr string) {
	t.Helper()
	var se *gostomp.Error
	if !errors.As(err, &se) {
		var sv gostomp.Error
		if !errors.As(err, &sv) {
			t.Fatalf("want a STOMP ERROR, got %v", err)
		}
		se = &sv
	}
	body := ""
	if se.Frame != nil {
		body = string(se.Frame.Body)
	}
	if se.Message != "not authorized" || !strings.Contains(body, string(perm)) || !strings.Contains(body, `"`+addr+`"`) {
		t.Fatalf("ERROR message %q body %q, want not authorized: %s on %q", se.Message, body, perm, addr)
	}
}

// subscribeDenied subscribes and expects the ERROR that refuses it.
func subscribeDenied(t *testing.T, c *gostomp.Conn, dest string, perm core.Permission, addr string) {
	t.Helper()
	s, err := c.Subscribe(dest, gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-s.C:
		if m == nil || m.Err == nil {
			t.Fatalf("want an ERROR for the subscription to %s, got %+v", dest, m)
		}
		wantNotAuthorized(t, m.Err, perm, addr)
	case <-time.After(5 * time.Second):
		t.Fatal("no ERROR within 5s")
	}
}

func denials(tb *stomptest.Broker) uint64 {
	_, by := tb.Core.AuthzDenials()
	return by["stomp"]
}

func TestAuthorizationQueue(t *testing.T) {
	tb := startAuthzBroker(t)
	cons := tb.DialAs(t, "consumer")
	sub := stomptest.Subscribe(t, cons, "/queue/orders", gostomp.AckAuto)
	prod := tb.DialAs(t, "producer")
	stomptest.Send(t, prod, "/queue/orders", "o1", gostomp.SendOpt.Receipt)
	if m := stomptest.Next(t, sub); string(m.Body) != "o1" {
		t.Fatalf("got %q", m.Body)
	}
	// The producer may not consume, the consumer may not send.
	subscribeDenied(t, tb.DialAs(t, "producer"), "/queue/orders", core.PermConsume, "orders")
	err := tb.DialAs(t, "consumer").Send("/queue/orders", "text/plain", []byte("x"), gostomp.SendOpt.Receipt)
	wantNotAuthorized(t, err, core.PermSend, "orders")
	// A persistent SEND (answered asynchronously) is refused the same way.
	err = tb.DialAs(t, "consumer").Send("/queue/orders", "text/plain", []byte("x"), gostomp.SendOpt.Receipt,
		gostomp.SendOpt.Header("persistent", "true"))
	wantNotAuthorized(t, err, core.PermSend, "orders")
	// In a transaction too (the SEND is refused, not the COMMIT).
	c := tb.DialAs(t, "consumer")
	tx := c.Begin()
	err = tx.Send("/queue/orders", "text/plain", []byte("x"), gostomp.SendOpt.Receipt)
	wantNotAuthorized(t, err, core.PermSend, "orders")
	if n := denials(tb); n != 4 {
		t.Fatalf("%d denials counted, want 4", n)
	}
	if d := tb.Core.Queue("orders").Stats().Enqueued; d != 1 {
		t.Fatalf("%d messages enqueued, want 1", d)
	}
}

func TestAuthorizationWildcardTopic(t *testing.T) {
	tb := startAuthzBroker(t)
	cons := tb.DialAs(t, "consumer")
	sub := stomptest.Subscribe(t, cons, "/topic/sensors.#", gostomp.AckAuto)
	prod := tb.DialAs(t, "producer")
	stomptest.Send(t, prod, "/topic/sensors.kitchen", "t1", gostomp.SendOpt.Receipt)
	if m := stomptest.Next(t, sub); string(m.Body) != "t1" {
		t.Fatalf("got %q", m.Body)
	}
	subscribeDenied(t, tb.DialAs(t, "producer"), "/topic/sensors.#", core.PermConsume, "sensors.#")
	err := tb.DialAs(t, "consumer").Send("/topic/sensors.kitchen", "text/plain", []byte("x"), gostomp.SendOpt.Receipt)
	wantNotAuthorized(t, err, core.PermSend, "sensors.kitchen")
	// Creating an address needs createAddress, which nobody has here.
	err = tb.DialAs(t, "producer").Send("/topic/sensors.garage", "text/plain", []byte("x"), gostomp.SendOpt.Receipt)
	wantNotAuthorized(t, err, core.PermCreateAddress, "sensors.garage")
	if n := denials(tb); n != 3 {
		t.Fatalf("%d denials counted, want 3", n)
	}
}

func TestAuthorizationDurableSubscription(t *testing.T) {
	tb := startAuthzBroker(t)
	// A non-durable subscription is allowed, a durable one is not.
	c := tb.DialAs(t, "durable", gostomp.ConnOpt.Header("client-id", "app"))
	stomptest.Subscribe(t, c, "/topic/news", gostomp.AckAuto)
	d := tb.DialAs(t, "durable", gostomp.ConnOpt.Header("client-id", "app2"))
	s, err := d.Subscribe("/topic/news", gostomp.AckAuto, gostomp.SubscribeOpt.Header("activemq.subscriptionName", "s"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-s.C:
		if m == nil || m.Err == nil {
			t.Fatalf("want an ERROR, got %+v", m)
		}
		wantNotAuthorized(t, m.Err, core.PermCreateDurableQueue, "news")
	case <-time.After(5 * time.Second):
		t.Fatal("no ERROR within 5s")
	}
	if tb.Core.Queue("app2.s") != nil {
		t.Fatal("the durable subscription was created")
	}
	if n := denials(tb); n != 1 {
		t.Fatalf("%d denials counted, want 1", n)
	}
}
