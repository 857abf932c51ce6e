package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// memPager is an in-memory Pager for core's tests; persistence/page has
// the real one, tested on its own and through cmd/junction.
type memPager struct {
	mu     sync.Mutex
	stores map[string]*memPageStore
}

type memPageStore struct {
	mu     sync.Mutex
	recs   [][]byte
	first  uint64 // position of recs[0]
	closed bool
	syncs  int
}

func newMemPager() *memPager { return &memPager{stores: make(map[string]*memPageStore)} }

func (p *memPager) Open(name string) (PageStore, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stores[name]
	if s == nil {
		s = &memPageStore{}
		p.stores[name] = s
	}
	s.mu.Lock()
	s.closed = false
	s.mu.Unlock()
	return s, nil
}

func (p *memPager) List() ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for n := range p.stores {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

func (p *memPager) Remove(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.stores, name)
	return nil
}

func (p *memPager) Bytes() int64 { return 0 }

func (p *memPager) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.stores)
}

var errStoreClosed = errors.New("page store closed")

func (s *memPageStore) Append(rec []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errStoreClosed
	}
	s.recs = append(s.recs, slices.Clone(rec))
	return nil
}

func (s *memPageStore) Sync(done func(error)) {
	s.mu.Lock()
	s.syncs++
	s.mu.Unlock()
	go done(nil)
}

func (s *memPageStore) Start() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

func (s *memPageStore) Read(pos uint64, n, maxBytes int) ([][]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, pos, errStoreClosed
	}
	var out [][]byte
	size := 0
	for i := int(pos - s.first); i < len(s.recs) && len(out) < n && (size < maxBytes || len(out) == 0); i++ {
		out = append(out, s.recs[i])
		size += len(s.recs[i])
	}
	return out, pos + uint64(len(out)), nil
}

func (s *memPageStore) Release(pos uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := int(pos - s.first); k > 0 {
		s.recs = s.recs[k:]
		s.first = pos
	}
	return nil
}

func (s *memPageStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func pagingBroker(t *testing.T, msgs, bindings *memJournal, pager *memPager, maxMem int64, settings ...AddressSettings) *Broker {
	t.Helper()
	b, err := New(Config{Messages: msgs, Bindings: bindings, Pager: pager, MaxMemory: maxMem, AddressSettings: settings, ExpiryScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// drainInOrder consumes n messages from addr, acking each, and checks
// that bodies are "0".."n-1" in order.
func drainInOrder(t *testing.T, s *Session, addr string, n int) {
	t.Helper()
	c, col := subscribe(t, s, ConsumerOptions{Address: addr, RoutingType: Anycast, Credit: 100})
	defer c.Close()
	for i := range n {
		d := col.next(t)
		if got, want := body(d), fmt.Sprint(i); got != want {
			t.Fatalf("message %d: got %q, want %q", i, got, want)
		}
		if err := c.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
		c.Flow(1)
	}
	col.none(t, 50*time.Millisecond)
}

func TestPagingKeepsOrderAndBoundsMemory(t *testing.T) {
	msgs, bindings, pager := newMemJournal(), newMemJournal(), newMemPager()
	limit := int64(10 << 10)
	b := pagingBroker(t, msgs, bindings, pager, 0, AddressSettings{Match: "big", MaxSizeBytes: &limit})
	s := newSession(t, b, "")
	const n = 3000
	for i := range n {
		sendDurable(t, s, "big", Anycast, fmt.Sprint(i))
	}
	st := b.Queue("big").Stats()
	if st.Depth != n || st.Paged == 0 || st.Bytes > limit {
		t.Fatalf("stats while paging: %+v", st)
	}
	if msgs.live() >= n {
		t.Fatalf("journal holds %d records: paged messages went to it", msgs.live())
	}
	drainInOrder(t, s, "big", n)
	st = b.Queue("big").Stats()
	if st.Depth != 0 || st.Paged != 0 {
		t.Fatalf("stats after draining: %+v", st)
	}
	deadline := time.Now().Add(5 * time.Second)
	for pager.count() != 0 || msgs.live() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after draining: %d page stores, %d journal records", pager.count(), msgs.live())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPagingSurvivesRestart(t *testing.T) {
	msgs, bindings, pager := newMemJournal(), newMemJournal(), newMemPager()
	limit := int64(4 << 10)
	set := AddressSettings{Match: "big", MaxSizeBytes: &limit}
	b := pagingBroker(t, msgs, bindings, pager, 0, set)
	s, _ := b.NewSession(SessionOptions{})
	const n = 2000
	for i := range n {
		sendDurable(t, s, "big", Anycast, fmt.Sprint(i))
	}
	// Read some back (through memory and one depage), then restart.
	c, col := subscribe(t, s, ConsumerOptions{Address: "big", RoutingType: Anycast, Credit: 50})
	for i := range 700 {
		d := col.next(t)
		if body(d) != fmt.Sprint(i) {
			t.Fatalf("before restart: message %d is %q", i, body(d))
		}
		if err := c.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
		c.Flow(1)
	}
	c.Close()
	s.Close()
	qid := b.Queue("big").id
	b.Close()
	waitLive(t, msgs, msgs.live()) // settle async completions
	// An older store of the same queue, left by a crash between its
	// drain and its removal: recovery removes it unread.
	stale, _ := pager.Open(pageName(qid, 1))
	if err := stale.Append(encodeMessage(&Message{ID: 1, Address: "big", Durable: true, Body: []byte("stale")}, nil)); err != nil {
		t.Fatal(err)
	}
	stale.Close()

	b2 := pagingBroker(t, msgs, bindings, pager, 0, set)
	if r := b2.Recovered(); r.Paged == 0 {
		t.Fatalf("recovery found no paged messages: %+v", r)
	}
	s2 := newSession(t, b2, "")
	c2, col2 := subscribe(t, s2, ConsumerOptions{Address: "big", RoutingType: Anycast, Credit: 100})
	for i := 700; i < n; i++ {
		d := col2.next(t)
		if body(d) != fmt.Sprint(i) {
			t.Fatalf("after restart: message %d is %q", i, body(d))
		}
		if err := c2.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
		c2.Flow(1)
	}
	col2.none(t, 50*time.Millisecond)
	if names, _ := pager.List(); slices.Contains(names, pageName(qid, 1)) {
		t.Fatalf("the stale page store is still there: %v", names)
	}
}

func TestGlobalBudgetPagesEveryQueue(t *testing.T) {
	msgs, bindings, pager := newMemJournal(), newMemJournal(), newMemPager()
	budget := int64(200 << 10)
	b := pagingBroker(t, msgs, bindings, pager, budget)
	s := newSession(t, b, "")
	const n = 1500
	for i := range n {
		for _, a := range []string{"a", "b"} {
			sendDurable(t, s, a, Anycast, fmt.Sprint(i))
		}
	}
	// Non-durable messages over the budget are dropped, counted.
	m := &Message{Address: "a", RoutingType: Anycast, Body: []byte("x")}
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if got := b.Memory().Used; got > budget+2*depageFloor {
		t.Fatalf("memory %d over budget %d", got, budget)
	}
	if d := b.DropStats()[DropNonDurable]; d != 1 {
		t.Fatalf("non-durable drops %d, want 1", d)
	}
	for _, a := range []string{"a", "b"} {
		if st := b.Queue(a).Stats(); st.Paged == 0 {
			t.Fatalf("queue %s did not page: %+v", a, st)
		}
	}
	drainInOrder(t, s, "a", n)
	drainInOrder(t, s, "b", n)
}

func TestBlockWaitsForRoom(t *testing.T) {
	limit := int64(100)
	block := string(FullBlock)
	b := newBroker(t, AddressSettings{Match: "slow", MaxSizeBytes: &limit, FullPolicy: &block})
	s := newSession(t, b, "")
	msg := func(i int) *Message {
		return &Message{Address: "slow", RoutingType: Anycast, Body: fmt.Appendf(nil, "%040d", i)}
	}
	// A NoWait session (AMQP) is not held: its third message goes over.
	nw, _ := b.NewSession(SessionOptions{NoWait: true})
	defer nw.Close()
	for i := range 3 {
		if b.Blocked("slow") {
			t.Fatalf("Blocked before message %d", i)
		}
		if err := nw.Send(context.Background(), msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	if !b.Blocked("slow") {
		t.Fatal("Blocked reports room on a full BLOCK queue")
	}
	sent := make(chan error, 1)
	go func() { sent <- s.Send(context.Background(), msg(3)) }()
	select {
	case err := <-sent:
		t.Fatalf("send to a full BLOCK queue returned %v", err)
	case <-time.After(150 * time.Millisecond):
	}
	// A deadline ends the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Send(ctx, msg(9)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked send with a deadline: %v", err)
	}
	// A consumer makes room: the blocked send goes through, nothing lost.
	s2 := newSession(t, b, "")
	c, col := subscribe(t, s2, ConsumerOptions{Address: "slow", RoutingType: Anycast, Credit: 10})
	for i := range 4 {
		d := col.next(t)
		if want := fmt.Sprintf("%040d", i); body(d) != want {
			t.Fatalf("got %q want %q", body(d), want)
		}
		if err := c.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
		}
	}
	col.none(t, 50*time.Millisecond)
}

func TestRefusalsAndDropsAttributed(t *testing.T) {
	hundred := int64(100)
	fail := string(FullFail)
	drop := string(FullDrop)
	b := newBroker(t,
		AddressSettings{Match: "f", MaxSizeBytes: &hundred, FullPolicy: &fail},
		AddressSettings{Match: "d", MaxSizeBytes: &hundred, FullPolicy: &drop})
	s, err := b.NewSession(SessionOptions{Protocol: "test", RemoteAddr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	body := make([]byte, 60)
	for _, a := range []string{"f", "d"} {
		for range 2 {
			_ = s.Send(context.Background(), &Message{Address: a, RoutingType: Anycast, Body: body})
		}
	}
	ds := b.DropStats()
	if ds[RefusedFull] != 1 || ds[DropFull] != 1 {
		t.Fatalf("drop stats %v", ds)
	}
	var ci ConnectionInfo
	for _, c := range b.Connections() {
		if c.ID == s.ID() {
			ci = c
		}
	}
	if ci.Refused != 1 || ci.Dropped != 1 {
		t.Fatalf("connection info %+v", ci)
	}
}

func TestDiskLimitRefusesDurableSends(t *testing.T) {
	var mu sync.Mutex
	used := int64(0)
	usage := func() (int64, int64, error) {
		mu.Lock()
		defer mu.Unlock()
		return used, 1 << 40, nil
	}
	msgs, bindings := newMemJournal(), newMemJournal()
	b, err := New(Config{Messages: msgs, Bindings: bindings, ExpiryScanInterval: -1,
		Disk: DiskLimits{Usage: usage, MaxUsage: 1000, Interval: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := newSession(t, b, "")
	sendDurable(t, s, "q", Anycast, "before")
	mu.Lock()
	used = 2000
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for b.DiskFull() == "" {
		if time.Now().After(deadline) {
			t.Fatal("disk limit never seen")
		}
		time.Sleep(time.Millisecond)
	}
	err = s.Send(context.Background(), &Message{Address: "q", RoutingType: Anycast, Durable: true, Body: []byte("x")})
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("durable send past the disk limit: %v", err)
	}
	send(t, s, "q", Anycast, "non-durable still fine")
	mu.Lock()
	used = 10
	mu.Unlock()
	for b.DiskFull() != "" {
		if time.Now().After(deadline) {
			t.Fatal("disk limit never cleared")
		}
		time.Sleep(time.Millisecond)
	}
	sendDurable(t, s, "q", Anycast, "after")
	if b.DropStats()[RefusedDisk] != 1 {
		t.Fatalf("drop stats %v", b.DropStats())
	}
}

func TestSlowConsumerPolicy(t *testing.T) {
	five := int64(5)
	kill, notify := string(SlowKill), string(SlowNotify)
	b := newBroker(t,
		AddressSettings{Match: "fast.#", SlowConsumerThreshold: &five, SlowConsumerPolicy: &kill},
		AddressSettings{Match: "calm.#", SlowConsumerThreshold: &five, SlowConsumerPolicy: &notify})
	closed := make(chan string, 4)
	subscriber := func(name string) *Session {
		s, err := b.NewSession(SessionOptions{Protocol: "test", RemoteAddr: name, Close: func() { closed <- name }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	// A subscriber that takes nothing on each address, and one that is
	// given (and acks) everything, which never lags.
	for _, addr := range []string{"fast.x", "calm.x"} {
		subscribe(t, subscriber("lagging "+addr), ConsumerOptions{Address: addr, RoutingType: Multicast})
	}
	fast, fastCol := subscribe(t, subscriber("keeping up"), ConsumerOptions{Address: "fast.x", RoutingType: Multicast, Credit: 1000})
	p := newSession(t, b, "")
	for range 20 {
		send(t, p, "fast.x", Multicast, "m")
		send(t, p, "calm.x", Multicast, "m")
		if err := fast.Ack(fastCol.next(t).ID); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case who := <-closed:
		if who != "lagging fast.x" {
			t.Fatalf("disconnected %q", who)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lagging subscriber under KILL was not disconnected")
	}
	select {
	case who := <-closed:
		t.Fatalf("also disconnected %q (once per episode, NOTIFY never)", who)
	case <-time.After(100 * time.Millisecond):
	}
	var killed uint64
	for _, st := range b.QueueStats() {
		killed += st.SlowKilled
	}
	if killed != 1 {
		t.Fatalf("SlowKilled total %d, want 1", killed)
	}
}
