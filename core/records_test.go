package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

func recordsOf(s *Session) map[string]string {
	out := map[string]string{}
	recs, err := s.ClientRecords()
	if err != nil {
		panic(err) // no cluster here: it cannot fail
	}
	for _, r := range recs {
		out[r.Key] = string(r.Value)
	}
	return out
}

func setRecord(t *testing.T, s *Session, key, value string) {
	t.Helper()
	ch := make(chan error, 1)
	if err := s.SetClientRecord(key, []byte(value), func(err error) { ch <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
}

// Client records are kept per client id, replaced and deleted by key,
// and survive a restart exactly (one journal record per live key).
func TestClientRecordsSurviveRestart(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b1 := durableBroker(t, msgs, bindings)
	s1 := newSession(t, b1, "mqtt/dev")
	other := newSession(t, b1, "mqtt/other")
	setRecord(t, s1, "session", "v1")
	setRecord(t, s1, "session", "v2") // replaces
	setRecord(t, s1, "f/a", "1")
	setRecord(t, s1, "f/b", "2")
	setRecord(t, s1, "f/b", "") // deletes
	setRecord(t, other, "session", "x")
	if got := recordsOf(s1); fmt.Sprint(got) != "map[f/a:1 session:v2]" {
		t.Fatalf("records %v", got)
	}
	waitLive(t, msgs, 3)
	if got := b1.ClientRecordHolders(); !slices.Equal(got, []string{"mqtt/dev", "mqtt/other"}) {
		t.Fatalf("holders %v", got)
	}
	if err := newSession(t, b1, "").SetClientRecord("k", []byte("v"), nil); !errors.Is(err, ErrClientIDRequired) {
		t.Fatalf("a session without client id: %v", err)
	}
	s1.Close()
	other.Close()
	b1.Close()

	b2 := durableBroker(t, msgs, bindings)
	s2 := newSession(t, b2, "mqtt/dev")
	if got := recordsOf(s2); fmt.Sprint(got) != "map[f/a:1 session:v2]" {
		t.Fatalf("after restart: records %v", got)
	}
	done := make(chan error, 1)
	if err := s2.ClearClientRecords("f/", func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := recordsOf(s2); fmt.Sprint(got) != "map[session:v2]" {
		t.Fatalf("after clearing f/: %v", got)
	}
	s2.ClearClientRecords("", nil)
	if got := b2.ClientRecordHolders(); !slices.Equal(got, []string{"mqtt/other"}) {
		t.Fatalf("holders after clearing %v", got)
	}
	waitLive(t, msgs, 1)
}

// A crash between writing a record's new value and deleting the old
// leaves both; recovery keeps the later.
func TestClientRecordRecoveryKeepsTheLater(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	msgs.Append(10, recClientRecord, encodeClientRecord("c", "k", []byte("old")), true, nil)
	msgs.Append(11, recClientRecord, encodeClientRecord("c", "k", []byte("new")), true, nil)
	msgs.Append(12, recClientRecord, encodeClientRecord("c", "j", []byte("x")), true, nil)
	b := durableBroker(t, msgs, bindings)
	if got := recordsOf(newSession(t, b, "c")); fmt.Sprint(got) != "map[j:x k:new]" {
		t.Fatalf("records %v", got)
	}
	waitLive(t, msgs, 2)
}

// A transaction's client records and messages take effect together, or
// not at all.
func TestClientRecordsInTransactions(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s := newSession(t, b, "mqtt/q2")
	if err := b.CreateAddress("jobs", Anycast); err != nil {
		t.Fatal(err)
	}
	tx, _ := s.Begin()
	tx.Send(&Message{Address: "jobs", RoutingType: Anycast, Durable: true, Body: []byte("m1")})
	tx.SetClientRecord("i/7", []byte{1})
	tx.SetClientRecord("i/8", []byte{1})
	tx.SetClientRecord("i/8", nil) // the last write of a key wins
	if got := recordsOf(s); len(got) != 0 {
		t.Fatalf("records visible before commit: %v", got)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := recordsOf(s); fmt.Sprint(got) != "map[i/7:\x01]" {
		t.Fatalf("after commit %q", got)
	}
	if d := b.Queue("jobs").Stats().Depth; d != 1 {
		t.Fatalf("depth %d", d)
	}

	// A commit the journal refuses changes nothing.
	msgs.mu.Lock()
	msgs.fail = errors.New("disk gone")
	msgs.mu.Unlock()
	tx, _ = s.Begin()
	tx.Send(&Message{Address: "jobs", RoutingType: Anycast, Durable: true, Body: []byte("m2")})
	tx.SetClientRecord("i/7", nil)
	tx.SetClientRecord("i/9", []byte{1})
	if err := tx.Commit(context.Background()); err == nil {
		t.Fatal("commit succeeded on a failing journal")
	}
	if got := recordsOf(s); fmt.Sprint(got) != "map[i/7:\x01]" {
		t.Fatalf("after a failed commit %q", got)
	}
	if d := b.Queue("jobs").Stats().Depth; d != 1 {
		t.Fatalf("depth %d after a failed commit", d)
	}
	msgs.mu.Lock()
	msgs.fail = nil
	msgs.mu.Unlock()

	// A rolled back transaction changes nothing either.
	tx, _ = s.Begin()
	tx.SetClientRecord("i/7", nil)
	tx.Rollback()
	if got := recordsOf(s); fmt.Sprint(got) != "map[i/7:\x01]" {
		t.Fatalf("after rollback %q", got)
	}

	s.Close()
	b.Close()
	b2 := durableBroker(t, msgs, bindings)
	if got := recordsOf(newSession(t, b2, "mqtt/q2")); fmt.Sprint(got) != "map[i/7:\x01]" {
		t.Fatalf("after restart %q", got)
	}
}

// Without a journal, client records live in memory.
func TestClientRecordsInMemory(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "c")
	setRecord(t, s, "k", "v")
	tx, _ := s.Begin()
	tx.SetClientRecord("t", []byte("x"))
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := recordsOf(s); fmt.Sprint(got) != "map[k:v t:x]" {
		t.Fatalf("records %v", got)
	}
}

// A mark follows the message in its queue: a redelivery (after the
// consumer closed, and after a restart) carries it, the subscription
// lists it, and it goes with the ack.
func TestMarksFollowTheMessage(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b1 := durableBroker(t, msgs, bindings)
	s1 := newSession(t, b1, "dev")
	opts := ConsumerOptions{Address: "cmd.#", RoutingType: Multicast, SubscriptionName: "cmd", Credit: 10}
	c, col := subscribe(t, s1, opts)
	for i := range 3 {
		sendDurable(t, s1, "cmd.x", Multicast, fmt.Sprint(i))
	}
	var ds []Delivery
	for range 3 {
		ds = append(ds, col.next(t))
	}
	if ds[0].Mark != 0 {
		t.Fatalf("first delivery has mark %d", ds[0].Mark)
	}
	done := make(chan error, 1)
	if err := c.Mark(ds[0].ID, 7, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.Mark(ds[1].ID, 8, nil)
	if err := c.Mark(12345, 9, nil); !errors.Is(err, ErrUnknownDelivery) {
		t.Fatalf("mark of an unknown delivery: %v", err)
	}
	c.Ack(ds[2].ID)
	if subs, err := s1.DurableSubscriptions(); err != nil || len(subs) != 1 || !sameMarks(subs[0].Marks, 7, 8) {
		t.Fatalf("subscriptions %+v", subs)
	}
	c.Close()
	c, col = subscribe(t, s1, opts)
	if d := col.next(t); body(d) != "0" || d.Mark != 7 || !d.Redelivered() {
		t.Fatalf("redelivery %q mark %d", d.Message.Body, d.Mark)
	}
	if d := col.next(t); body(d) != "1" || d.Mark != 8 {
		t.Fatalf("redelivery %q mark %d", d.Message.Body, d.Mark)
	}
	col.none(t, 20*time.Millisecond)
	s1.Close()
	b1.Close()

	b2 := durableBroker(t, msgs, bindings)
	s2 := newSession(t, b2, "dev")
	if subs, err := s2.DurableSubscriptions(); err != nil || len(subs) != 1 || !sameMarks(subs[0].Marks, 7, 8) {
		t.Fatalf("after restart: subscriptions %+v", subs)
	}
	c, col = subscribe(t, s2, opts)
	d := col.next(t)
	if body(d) != "0" || d.Mark != 7 {
		t.Fatalf("after restart: %q mark %d", d.Message.Body, d.Mark)
	}
	c.Ack(d.ID)
	if d := col.next(t); body(d) != "1" || d.Mark != 8 {
		t.Fatalf("after restart: %q mark %d", d.Message.Body, d.Mark)
	}
	if subs, err := s2.DurableSubscriptions(); err != nil || len(subs) != 1 || !sameMarks(subs[0].Marks, 8) {
		t.Fatalf("after an ack: %+v %v", subs, err)
	}
}

func sameMarks(got []uint32, want ...uint32) bool {
	got = slices.Clone(got)
	slices.Sort(got)
	return slices.Equal(got, want)
}

// Retained messages for a subscription: by pattern, never expired ones
// (which are dropped), never $ addresses for a leading wildcard.
func TestRetainedFor(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s := newSession(t, b, "")
	for _, m := range []*Message{
		{Address: "a.b", Body: []byte("ab")},
		{Address: "a.c", Body: []byte("ac")},
		{Address: "a.old", Body: []byte("old"), Expiration: time.Now().Add(-time.Second)},
		{Address: ".x", Body: []byte("empty first word")},
		{Address: "b", Body: []byte("b")},
	} {
		if err := b.Retain(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.RetainInMemory(&Message{Address: "$SYS.broker.uptime", Body: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, msgs, 5)
	addrs := func(ms []*Message) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Address)
		}
		return out
	}
	for _, tc := range []struct {
		pattern string
		want    []string
	}{
		{"a.*", []string{"a.b", "a.c"}},
		{"a.b", []string{"a.b"}},
		{"#", []string{".x", "a.b", "a.c", "b"}},
		{"*.x", []string{".x"}},
		{"$SYS.#", []string{"$SYS.broker.uptime"}},
		{"nothing.#", nil},
	} {
		if got := addrs(s.RetainedFor(tc.pattern)); !slices.Equal(got, tc.want) {
			t.Errorf("RetainedFor(%q) = %v, want %v", tc.pattern, got, tc.want)
		}
	}
	// The expired one is gone, from memory and the journal; the $SYS one
	// was never journaled.
	if n := b.RetainedCount(); n != 5 {
		t.Fatalf("RetainedCount %d, want 5", n)
	}
	waitLive(t, msgs, 4)
}

// A leading wildcard does not route a $ address's messages; a pattern
// naming the first word does.
func TestSystemAddressesAndWildcards(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	_, all := subscribe(t, s, ConsumerOptions{Address: "#", RoutingType: Multicast, Credit: 10})
	_, one := subscribe(t, s, ConsumerOptions{Address: "*.broker.uptime", RoutingType: Multicast, Credit: 10})
	_, sys := subscribe(t, s, ConsumerOptions{Address: "$SYS.#", RoutingType: Multicast, Credit: 10})
	send(t, s, "$SYS.broker.uptime", Multicast, "sys")
	send(t, s, "a.broker.uptime", Multicast, "plain")
	if d := sys.next(t); body(d) != "sys" {
		t.Fatalf("$SYS.# got %q", d.Message.Body)
	}
	if d := all.next(t); body(d) != "plain" {
		t.Fatalf("# got %q", d.Message.Body)
	}
	if d := one.next(t); body(d) != "plain" {
		t.Fatalf("*.broker.uptime got %q", d.Message.Body)
	}
	all.none(t, 20*time.Millisecond)
	one.none(t, 0)
	sys.none(t, 0)
}

// Subscriptions may have empty words (MQTT's empty levels).
func TestEmptyWordsInSubscriptions(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	_, lead := subscribe(t, s, ConsumerOptions{Address: ".a.#", RoutingType: Multicast, Credit: 10})
	_, exact := subscribe(t, s, ConsumerOptions{Address: "a..b", RoutingType: Multicast, Credit: 10})
	send(t, s, ".a.x", Multicast, "1")
	send(t, s, "a..b", Multicast, "2")
	send(t, s, "a.b", Multicast, "3")
	if d := lead.next(t); body(d) != "1" {
		t.Fatalf(".a.# got %q", d.Message.Body)
	}
	if d := exact.next(t); body(d) != "2" {
		t.Fatalf("a..b got %q", d.Message.Body)
	}
	lead.none(t, 20*time.Millisecond)
	exact.none(t, 0)
	if _, err := s.Subscribe(ConsumerOptions{Address: "", RoutingType: Multicast, Handler: func(Delivery) {}}); !errors.Is(err, ErrInvalidAddress) {
		t.Fatalf("empty address: %v", err)
	}
}

func TestSubscriptionCount(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "c")
	subscribe(t, s, ConsumerOptions{Address: "a.#", RoutingType: Multicast})
	subscribe(t, s, ConsumerOptions{Address: "a", RoutingType: Multicast, SubscriptionName: "d"})
	subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast})
	if n := b.SubscriptionCount(); n != 2 {
		t.Fatalf("SubscriptionCount %d, want 2", n)
	}
}
