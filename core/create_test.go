package core

import (
	"context"
	"testing"
	"time"
)

// TestQueueCreationHoldsNoBrokerLockAcrossSync: while a new queue's
// binding waits for its sync, sends to other queues, and subscribes, go
// on; the new queue appears once its binding is durable, and a second
// sender to it waits for that rather than creating it twice.
func TestQueueCreationHoldsNoBrokerLockAcrossSync(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s := newSession(t, b, "")
	sendDurable(t, s, "existing", Anycast, "warm")

	hold := make(chan struct{})
	bindings.hold = hold
	created := make(chan error, 2)
	for range 2 {
		go func() {
			created <- s.Send(context.Background(), &Message{Address: "new", RoutingType: Anycast, Durable: true, Body: []byte("n"), Priority: DefaultPriority})
		}()
	}
	// The binding is being written: the queue is not visible yet, and
	// the rest of the broker is not stalled.
	time.Sleep(20 * time.Millisecond)
	if b.Queue("new") != nil {
		t.Fatal("a queue was bound before its binding was durable")
	}
	done := make(chan error, 1)
	go func() {
		done <- s.Send(context.Background(), &Message{Address: "existing", RoutingType: Anycast, Durable: true, Body: []byte("x"), Priority: DefaultPriority})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a send to an existing queue waited for another queue's binding sync")
	}
	c, col := subscribe(t, newSession(t, b, ""), ConsumerOptions{Address: "existing", RoutingType: Anycast, Credit: 10})
	_ = c
	col.next(t)
	close(hold)
	for range 2 {
		if err := <-created; err != nil {
			t.Fatal(err)
		}
	}
	if q := b.Queue("new"); q == nil || q.stats.depth.Load() != 2 {
		t.Fatalf("queue new: %v", q)
	}
	if n := bindings.appends; n != 2 { // existing and new, each once
		t.Fatalf("%d bindings written, want 2", n)
	}
}
