package stomp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/authztest"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/stomp"
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

func startAuthzBroker(t *testing.T) *testBroker {
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
	srv := stomp.New(stomp.Config{}, b)
	t.Cleanup(func() { b.Close() })
	addr, _ := testserve.Serve(t, srv.ServeConn)
	return &testBroker{addr: addr, broker: b, srv: srv}
}

// dialAs connects as user; the connection may end with an ERROR, so the
// cleanup does not wait for a DISCONNECT receipt.
func (tb *testBroker) dialAs(t *testing.T, user string, opts ...func(*gostomp.Conn) error) *gostomp.Conn {
	t.Helper()
	opts = append([]func(*gostomp.Conn) error{gostomp.ConnOpt.HeartBeat(0, 0), quiet, gostomp.ConnOpt.Login(user, "")}, opts...)
	c, err := gostomp.Dial("tcp", tb.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.MustDisconnect() })
	return c
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

func denials(tb *testBroker) uint64 {
	_, by := tb.broker.AuthzDenials()
	return by["stomp"]
}

func TestAuthorizationQueue(t *testing.T) {
	tb := startAuthzBroker(t)
	cons := tb.dialAs(t, "consumer")
	sub := subscribe(t, cons, "/queue/orders", gostomp.AckAuto)
	prod := tb.dialAs(t, "producer")
	send(t, prod, "/queue/orders", "o1", gostomp.SendOpt.Receipt)
	if m := next(t, sub); string(m.Body) != "o1" {
		t.Fatalf("got %q", m.Body)
	}
	// The producer may not consume, the consumer may not send.
	subscribeDenied(t, tb.dialAs(t, "producer"), "/queue/orders", core.PermConsume, "orders")
	err := tb.dialAs(t, "consumer").Send("/queue/orders", "text/plain", []byte("x"), gostomp.SendOpt.Receipt)
	wantNotAuthorized(t, err, core.PermSend, "orders")
	// A persistent SEND (answered asynchronously) is refused the same way.
	err = tb.dialAs(t, "consumer").Send("/queue/orders", "text/plain", []byte("x"), gostomp.SendOpt.Receipt,
		gostomp.SendOpt.Header("persistent", "true"))
	wantNotAuthorized(t, err, core.PermSend, "orders")
	// In a transaction too (the SEND is refused, not the COMMIT).
	c := tb.dialAs(t, "consumer")
	tx := c.Begin()
	err = tx.Send("/queue/orders", "text/plain", []byte("x"), gostomp.SendOpt.Receipt)
	wantNotAuthorized(t, err, core.PermSend, "orders")
	if n := denials(tb); n != 4 {
		t.Fatalf("%d denials counted, want 4", n)
	}
	if d := tb.broker.Queue("orders").Stats().Enqueued; d != 1 {
		t.Fatalf("%d messages enqueued, want 1", d)
	}
}

func TestAuthorizationWildcardTopic(t *testing.T) {
	tb := startAuthzBroker(t)
	cons := tb.dialAs(t, "consumer")
	sub := subscribe(t, cons, "/topic/sensors.#", gostomp.AckAuto)
	prod := tb.dialAs(t, "producer")
	send(t, prod, "/topic/sensors.kitchen", "t1", gostomp.SendOpt.Receipt)
	if m := next(t, sub); string(m.Body) != "t1" {
		t.Fatalf("got %q", m.Body)
	}
	subscribeDenied(t, tb.dialAs(t, "producer"), "/topic/sensors.#", core.PermConsume, "sensors.#")
	err := tb.dialAs(t, "consumer").Send("/topic/sensors.kitchen", "text/plain", []byte("x"), gostomp.SendOpt.Receipt)
	wantNotAuthorized(t, err, core.PermSend, "sensors.kitchen")
	// Creating an address needs createAddress, which nobody has here.
	err = tb.dialAs(t, "producer").Send("/topic/sensors.garage", "text/plain", []byte("x"), gostomp.SendOpt.Receipt)
	wantNotAuthorized(t, err, core.PermCreateAddress, "sensors.garage")
	if n := denials(tb); n != 3 {
		t.Fatalf("%d denials counted, want 3", n)
	}
}

func TestAuthorizationDurableSubscription(t *testing.T) {
	tb := startAuthzBroker(t)
	// A non-durable subscription is allowed, a durable one is not.
	c := tb.dialAs(t, "durable", gostomp.ConnOpt.Header("client-id", "app"))
	subscribe(t, c, "/topic/news", gostomp.AckAuto)
	d := tb.dialAs(t, "durable", gostomp.ConnOpt.Header("client-id", "app2"))
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
	if tb.broker.Queue("app2.s") != nil {
		t.Fatal("the durable subscription was created")
	}
	if n := denials(tb); n != 1 {
		t.Fatalf("%d denials counted, want 1", n)
	}
}
