package core

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestMaxAutoCreatedQueuesPerUser(t *testing.T) {
	b, err := New(Config{MaxAutoCreatedQueuesPerUser: 3, ExpiryScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	session := func(user string) *Session {
		s, err := b.NewSession(SessionOptions{User: user, Protocol: "test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	alice, bob := session("alice"), session("bob")
	ctx := context.Background()
	sendTo := func(s *Session, addr string) error {
		return s.Send(ctx, &Message{Address: addr, RoutingType: Anycast, Body: []byte("x"), Priority: DefaultPriority})
	}

	// Two queues by sends, one by a consumer.
	for i := range 2 {
		if err := sendTo(alice, fmt.Sprintf("a%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := alice.Subscribe(ConsumerOptions{Address: "a2", RoutingType: Anycast, Credit: 1, Handler: func(Delivery) {}})
	if err != nil {
		t.Fatal(err)
	}
	// Sending to her own queues again creates nothing.
	if err := sendTo(alice, "a0"); err != nil {
		t.Fatal(err)
	}
	if n := b.AutoCreatedQueues("alice"); n != 3 {
		t.Fatalf("alice has %d auto-created queues, want 3", n)
	}
	// The fourth is refused, by send and by consumer.
	if err := sendTo(alice, "a3"); !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("send creating a fourth queue: %v, want ErrQuotaExceeded", err)
	}
	if _, err := alice.Subscribe(ConsumerOptions{Address: "a3", RoutingType: Anycast, Credit: 1, Handler: func(Delivery) {}}); !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("consumer creating a fourth queue: %v, want ErrQuotaExceeded", err)
	}
	if b.Queue("a3") != nil {
		t.Fatal("a3 was created")
	}
	// Others are not affected, and may use alice's queues.
	if err := sendTo(bob, "b0"); err != nil {
		t.Fatal(err)
	}
	if err := sendTo(bob, "a1"); err != nil {
		t.Fatal(err)
	}
	// Multicast addresses are not queues.
	if err := alice.Send(ctx, &Message{Address: "t0", RoutingType: Multicast, Priority: DefaultPriority}); err != nil {
		t.Fatal(err)
	}
	// A deleted queue frees its slot.
	c.Close()
	if err := b.DeleteQueue("a2"); err != nil {
		t.Fatal(err)
	}
	if err := sendTo(alice, "a3"); err != nil {
		t.Fatalf("after deleting one: %v", err)
	}
	if n := b.AutoCreatedQueues("alice"); n != 3 {
		t.Fatalf("alice has %d auto-created queues, want 3", n)
	}
	// A queue created by an administrator is nobody's: alice may use it.
	if err := b.CreateQueue("admin-q", Anycast); err != nil {
		t.Fatal(err)
	}
	if err := sendTo(alice, "admin-q"); err != nil {
		t.Fatal(err)
	}
}
