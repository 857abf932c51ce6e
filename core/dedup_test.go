package core

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func dupMsg(addr, id, body string) *Message {
	return &Message{Address: addr, RoutingType: Anycast, Durable: true, Priority: DefaultPriority,
		Body: []byte(body), Properties: map[string]any{PropDuplicateID: id}}
}

func TestDuplicateIDStoredOnce(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s := newSession(t, b, "")
	for range 3 {
		if err := s.Send(context.Background(), dupMsg("orders", "order-1", "first")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Send(context.Background(), dupMsg("orders", "order-2", "second")); err != nil {
		t.Fatal(err)
	}
	_, col := subscribe(t, s, ConsumerOptions{Address: "orders", RoutingType: Anycast, Credit: 10})
	if d := col.next(t); string(d.Message.Body) != "first" {
		t.Fatalf("got %q", d.Message.Body)
	}
	if d := col.next(t); string(d.Message.Body) != "second" {
		t.Fatalf("got %q", d.Message.Body)
	}
	col.none(t, 50*time.Millisecond)
	if n := b.Duplicates()["orders"]; n != 2 {
		t.Fatalf("%d duplicates counted, want 2", n)
	}
	// The same id on another address is another message.
	if err := s.Send(context.Background(), dupMsg("other", "order-1", "elsewhere")); err != nil {
		t.Fatal(err)
	}
	if q := b.Queue("other"); q == nil || q.stats.depth.Load() != 1 {
		t.Fatal("the id of another address refused")
	}
}

func TestDuplicateIDSurvivesConsumptionAndRestart(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b1 := durableBroker(t, msgs, bindings)
	s1 := newSession(t, b1, "")
	if err := s1.Send(context.Background(), dupMsg("q", "x", "once")); err != nil {
		t.Fatal(err)
	}
	c, col := subscribe(t, s1, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	d := col.next(t)
	if err := c.Ack(d.ID); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	b1.Close()
	// The message is gone (acked); its id is not.
	b2 := durableBroker(t, msgs, bindings)
	s2 := newSession(t, b2, "")
	if err := s2.Send(context.Background(), dupMsg("q", "x", "again")); err != nil {
		t.Fatalf("a duplicate after a restart must be confirmed: %v", err)
	}
	_, col2 := subscribe(t, s2, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	col2.none(t, 50*time.Millisecond)
	if n := b2.Duplicates()["q"]; n != 1 {
		t.Fatalf("%d duplicates counted after restart, want 1", n)
	}
}

func TestDuplicateIDWaitsForTheOriginal(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s := newSession(t, b, "")
	hold := make(chan struct{})
	msgs.hold = hold
	first := make(chan error, 1)
	s.SendAsync(dupMsg("q", "slow", "1"), func(err error) { first <- err })
	second := make(chan error, 1)
	s.SendAsync(dupMsg("q", "slow", "1"), func(err error) { second <- err })
	select {
	case err := <-second:
		t.Fatalf("the duplicate was confirmed (%v) before its original was stored", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(hold)
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
}

func TestDuplicateIDForgottenWhenTheOriginalFails(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s := newSession(t, b, "")
	msgs.fail = errors.New("disk on fire")
	if err := s.Send(context.Background(), dupMsg("q", "retry", "1")); err == nil {
		t.Fatal("send with a failing journal confirmed")
	}
	msgs.fail = nil
	if err := s.Send(context.Background(), dupMsg("q", "retry", "1")); err != nil {
		t.Fatal(err)
	}
	// The retry was stored, not taken for a duplicate of a send that
	// was never stored.
	if n := b.Duplicates()["q"]; n != 0 {
		t.Fatalf("the retry of a failed send was taken for a duplicate (%d)", n)
	}
	if n := msgs.live(); n != 2 { // the retry's message and id records
		t.Fatalf("journal holds %d records, want the retry's message and id", n)
	}
}

func TestDuplicateIDInTransactionFailsCommit(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s := newSession(t, b, "")
	if err := s.Send(context.Background(), dupMsg("q", "a", "1")); err != nil {
		t.Fatal(err)
	}
	tx, _ := s.Begin()
	tx.Send(dupMsg("q", "b", "2"))
	tx.Send(dupMsg("q", "a", "again"))
	if err := tx.Commit(context.Background()); !errors.Is(err, ErrDuplicateID) {
		t.Fatalf("commit: %v, want ErrDuplicateID", err)
	}
	if q := b.Queue("q"); q.stats.depth.Load() != 1 {
		t.Fatal("a failed transaction sent something")
	}
	// "b" was not kept: the transaction's own ids are forgotten with it.
	tx, _ = s.Begin()
	tx.Send(dupMsg("q", "b", "2"))
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	// And ids committed in a transaction survive a restart.
	b.Close()
	b2 := durableBroker(t, msgs, bindings)
	s2 := newSession(t, b2, "")
	s2.Send(context.Background(), dupMsg("q", "b", "2 again"))
	if n := b2.Duplicates()["q"]; n != 1 {
		t.Fatalf("%d duplicates after restart, want 1", n)
	}
}

func TestDuplicateIDCacheEvicts(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	size := 5
	b, err := New(Config{Messages: msgs, Bindings: bindings, ExpiryScanInterval: -1,
		AddressSettings: []AddressSettings{{Match: "q", IDCacheSize: &size}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := newSession(t, b, "")
	for i := range 6 {
		if err := s.Send(context.Background(), dupMsg("q", fmt.Sprint(i), "x")); err != nil {
			t.Fatal(err)
		}
	}
	// Id 0 was evicted by the sixth: taken again. Id 5 is remembered.
	s.Send(context.Background(), dupMsg("q", "0", "x"))
	s.Send(context.Background(), dupMsg("q", "5", "x"))
	if n := b.Duplicates()["q"]; n != 1 {
		t.Fatalf("%d duplicates, want 1", n)
	}
	// The journal holds the 7 messages and 5 ids (one id record deleted
	// by each eviction).
	waitLive(t, msgs, 7+5)
}
