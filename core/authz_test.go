package core

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core/wildcard"
)

// grantTable is a test Authorizer: per user, the permissions granted on
// address patterns (a grant on a pattern covers the addresses and
// patterns it matches).
type grantTable struct {
	grants map[string]map[Permission][]string
	calls  atomic.Int64
}

func (g *grantTable) Authorize(user string, perm Permission, address string) bool {
	g.calls.Add(1)
	for _, p := range g.grants[user][perm] {
		if p == address || wildcard.Match(p, address) {
			return true
		}
	}
	return false
}

func newAuthzBroker(t *testing.T, g *grantTable) (*Broker, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	b, err := New(Config{Authorizer: g, ExpiryScanInterval: -1, Logger: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, logs
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func clientSession(t *testing.T, b *Broker, user, clientID string) *Session {
	t.Helper()
	s, err := b.NewSession(SessionOptions{User: user, ClientID: clientID, Protocol: "test", RemoteAddr: "10.0.0.1:1234"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func wantDenied(t *testing.T, err error, perm Permission, addr string) {
	t.Helper()
	var ae *AuthzError
	if !errors.Is(err, ErrUnauthorized) || !errors.As(err, &ae) || ae.Permission != perm || ae.Address != addr {
		t.Fatalf("got %v, want %s denied on %q", err, perm, addr)
	}
}

func noop(Delivery) {}

func TestAuthzSendWithoutConsumeAndReverse(t *testing.T) {
	g := &grantTable{grants: map[string]map[Permission][]string{
		"producer": {PermSend: {"orders", "sensors.#"}},
		"consumer": {PermConsume: {"orders", "sensors.#"}, PermCreateNonDurableQueue: {"sensors.#"}},
	}}
	b, _ := newAuthzBroker(t, g)
	if err := b.CreateAddress("orders", Anycast); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateAddress("sensors.kitchen", Multicast); err != nil {
		t.Fatal(err)
	}
	p := clientSession(t, b, "producer", "")
	c := clientSession(t, b, "consumer", "")

	// A queue.
	_, err := p.Subscribe(ConsumerOptions{Address: "orders", RoutingType: Anycast, Handler: noop})
	wantDenied(t, err, PermConsume, "orders")
	wantDenied(t, c.Send(context.Background(), &Message{Address: "orders", RoutingType: Anycast}), PermSend, "orders")
	_, col := subscribe(t, c, ConsumerOptions{Address: "orders", RoutingType: Anycast, Credit: 10})
	send(t, p, "orders", Anycast, "o1")
	if body(col.next(t)) != "o1" {
		t.Fatal("wrong message")
	}

	// A wildcard topic subscription.
	_, err = p.Subscribe(ConsumerOptions{Address: "sensors.#", RoutingType: Multicast, Handler: noop})
	wantDenied(t, err, PermConsume, "sensors.#")
	wantDenied(t, c.Send(context.Background(), &Message{Address: "sensors.kitchen", RoutingType: Multicast}), PermSend, "sensors.kitchen")
	_, col = subscribe(t, c, ConsumerOptions{Address: "sensors.#", RoutingType: Multicast, Credit: 10})
	send(t, p, "sensors.kitchen", Multicast, "t1")
	if body(col.next(t)) != "t1" {
		t.Fatal("wrong message")
	}
	// A transaction's send is checked when it is added.
	tx, err := c.Begin()
	if err != nil {
		t.Fatal(err)
	}
	wantDenied(t, tx.Send(&Message{Address: "orders", RoutingType: Anycast}), PermSend, "orders")

	total, by := b.AuthzDenials()
	if total != 5 || by["test"] != 5 {
		t.Fatalf("denials %d %v, want 5", total, by)
	}
}

func TestAuthzQueueCreation(t *testing.T) {
	g := &grantTable{grants: map[string]map[Permission][]string{
		"u": {PermConsume: {"#"}, PermSend: {"#"}, PermCreateNonDurableQueue: {"temp-queue.#"}},
		"creator": {PermConsume: {"#"}, PermCreateDurableQueue: {"news"}, PermCreateAddress: {"news"},
			PermDeleteDurableQueue: {"news"}},
	}}
	b, _ := newAuthzBroker(t, g)
	u := clientSession(t, b, "u", "app")

	// No createAddress: neither a send nor a subscribe auto-creates.
	wantDenied(t, u.Send(context.Background(), &Message{Address: "fresh", RoutingType: Anycast}), PermCreateAddress, "fresh")
	_, err := u.Subscribe(ConsumerOptions{Address: "fresh2", RoutingType: Anycast, Handler: noop})
	wantDenied(t, err, PermCreateAddress, "fresh2")
	if _, _, exists := b.AddressRoutingTypes("fresh"); exists {
		t.Fatal("address created despite the refusal")
	}
	if _, _, exists := b.AddressRoutingTypes("fresh2"); exists {
		t.Fatal("address created despite the refusal")
	}

	if err := b.CreateAddress("news", Multicast); err != nil {
		t.Fatal(err)
	}
	// Durable and non-durable subscriptions need their create permission.
	_, err = u.Subscribe(ConsumerOptions{Address: "news", RoutingType: Multicast, SubscriptionName: "s", Handler: noop})
	wantDenied(t, err, PermCreateDurableQueue, "news")
	_, err = u.Subscribe(ConsumerOptions{Address: "news", RoutingType: Multicast, Handler: noop})
	wantDenied(t, err, PermCreateNonDurableQueue, "news")
	_, err = u.Subscribe(ConsumerOptions{Address: "news", RoutingType: Multicast, SharedSubscriptionName: "g", Handler: noop})
	wantDenied(t, err, PermCreateNonDurableQueue, "news")
	wantDenied(t, u.AuthorizeSubscribe(ConsumerOptions{Address: "news", RoutingType: Multicast, SubscriptionName: "s"}),
		PermCreateDurableQueue, "news")
	if b.Queue("app.s") != nil {
		t.Fatal("durable subscription created despite the refusal")
	}

	// A temporary queue needs createNonDurableQueue on its name.
	if _, err := u.CreateTemporaryQueue(); err != nil {
		t.Fatal(err)
	}
	cr := clientSession(t, b, "creator", "")
	_, err = cr.CreateTemporaryQueue()
	var ae *AuthzError
	if !errors.As(err, &ae) || ae.Permission != PermCreateNonDurableQueue || !strings.HasPrefix(ae.Address, TemporaryQueuePrefix) {
		t.Fatalf("temporary queue: %v", err)
	}

	// Created by a user who may; then reattaching needs only consume, and
	// deleting needs deleteDurableQueue.
	u.Close()
	c2 := clientSession(t, b, "creator", "app")
	if err := c2.AuthorizeSubscribe(ConsumerOptions{Address: "news", RoutingType: Multicast, SubscriptionName: "s"}); err != nil {
		t.Fatal(err)
	}
	if b.Queue("app.s") != nil {
		t.Fatal("AuthorizeSubscribe created the subscription")
	}
	cons, err := c2.Subscribe(ConsumerOptions{Address: "news", RoutingType: Multicast, SubscriptionName: "s", Handler: noop})
	if err != nil {
		t.Fatal(err)
	}
	cons.Close()
	c2.Close()
	u2 := clientSession(t, b, "u", "app")
	cons, err = u2.Subscribe(ConsumerOptions{Address: "news", RoutingType: Multicast, SubscriptionName: "s", Handler: noop})
	if err != nil {
		t.Fatalf("reattaching an existing durable subscription: %v", err)
	}
	cons.Close()
	wantDenied(t, u2.Unsubscribe("s"), PermDeleteDurableQueue, "news")
	if b.Queue("app.s") == nil {
		t.Fatal("unsubscribe deleted despite the refusal")
	}
	u2.Close()
	c3 := clientSession(t, b, "creator", "app")
	if err := c3.Unsubscribe("s"); err != nil {
		t.Fatal(err)
	}
}

func TestAuthzDenialLoggedOncePerConnection(t *testing.T) {
	g := &grantTable{grants: map[string]map[Permission][]string{"u": {PermConsume: {"#"}}}}
	b, logs := newAuthzBroker(t, g)
	if err := b.CreateAddress("q", Anycast); err != nil {
		t.Fatal(err)
	}
	s := clientSession(t, b, "u", "")
	for range 3 {
		wantDenied(t, s.Send(context.Background(), &Message{Address: "q", RoutingType: Anycast}), PermSend, "q")
	}
	if err := b.CreateAddress("q2", Anycast); err != nil {
		t.Fatal(err)
	}
	wantDenied(t, s.Send(context.Background(), &Message{Address: "q2", RoutingType: Anycast}), PermSend, "q2")
	out := logs.String()
	if n := strings.Count(out, "not authorized"); n != 2 {
		t.Fatalf("%d log lines, want 2:\n%s", n, out)
	}
	for _, want := range []string{`"user":"u"`, `"permission":"send"`, `"address":"q"`, `"remote":"10.0.0.1:1234"`, `"level":"warn"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("log lacks %s:\n%s", want, out)
		}
	}
	// Another connection logs its own.
	s2 := clientSession(t, b, "u", "")
	s2.Send(context.Background(), &Message{Address: "q", RoutingType: Anycast})
	if n := strings.Count(logs.String(), "not authorized"); n != 3 {
		t.Fatalf("%d log lines, want 3", n)
	}
	if total, _ := b.AuthzDenials(); total != 5 {
		t.Fatalf("%d denials, want 5", total)
	}
}

func TestAuthzSendDecisionCachedAndInternalSessionsTrusted(t *testing.T) {
	g := &grantTable{grants: map[string]map[Permission][]string{"u": {PermSend: {"q"}}}}
	b, _ := newAuthzBroker(t, g)
	if err := b.CreateAddress("q", Anycast); err != nil {
		t.Fatal(err)
	}
	s := clientSession(t, b, "u", "")
	for range 10 {
		send(t, s, "q", Anycast, "x")
	}
	if n := g.calls.Load(); n != 1 {
		t.Fatalf("%d Authorize calls for 10 sends, want 1", n)
	}
	// A front-end's internal session (no Protocol) is not checked.
	in, err := b.NewSession(SessionOptions{User: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	send(t, in, "elsewhere", Multicast, "x")
	if _, err := in.Subscribe(ConsumerOptions{Address: "#", RoutingType: Multicast, Handler: noop}); err != nil {
		t.Fatal(err)
	}
	if total, _ := b.AuthzDenials(); total != 0 {
		t.Fatalf("%d denials", total)
	}
}

func TestAuthzAuthorizeSendCreatesNothing(t *testing.T) {
	g := &grantTable{grants: map[string]map[Permission][]string{
		"u": {PermSend: {"#"}, PermCreateAddress: {"a.#"}},
	}}
	b, _ := newAuthzBroker(t, g)
	s := clientSession(t, b, "u", "")
	if err := s.AuthorizeSend("a.b", Multicast); err != nil {
		t.Fatal(err)
	}
	// An anycast address's queue needs createDurableQueue as well.
	wantDenied(t, s.AuthorizeSend("a.c", Anycast), PermCreateDurableQueue, "a.c")
	wantDenied(t, s.AuthorizeSend("b", Multicast), PermCreateAddress, "b")
	if _, _, exists := b.AddressRoutingTypes("a.b"); exists {
		t.Fatal("AuthorizeSend created the address")
	}
	if err := b.CreateAddress("b", Multicast); err != nil {
		t.Fatal(err)
	}
	if err := s.AuthorizeSend("b", Multicast); err != nil {
		t.Fatalf("an existing address needs only send: %v", err)
	}
}
