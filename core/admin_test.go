package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestConnectionsAndProtocolStats(t *testing.T) {
	b := newBroker(t)
	var closed atomic.Int32
	open := func(proto, addr string, closable bool) *Session {
		t.Helper()
		o := SessionOptions{User: "u-" + addr, Protocol: proto, RemoteAddr: addr}
		if closable {
			o.Close = func() { closed.Add(1) }
		}
		s, err := b.NewSession(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	internal := newSession(t, b, "") // no Protocol: not a connection
	st := open("stomp", "10.0.0.1:1", true)
	mq := open("mqtt", "10.0.0.2:2", false)
	st2 := open("stomp", "10.0.0.3:3", true)
	if st.ID() == mq.ID() || internal.ID() == st.ID() {
		t.Fatal("session ids not unique")
	}

	_, col := subscribe(t, mq, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 10})
	send(t, st, "q", Anycast, "hello") // 5 bytes
	send(t, st, "q", Anycast, "hi")    // 2 bytes
	col.next(t)
	col.next(t)
	tx, _ := st2.Begin()
	tx.Send(&Message{Address: "q", RoutingType: Anycast, Body: []byte("abc")})
	if got := b.Connections()[2].MessagesIn; got != 0 {
		t.Fatalf("transaction send counted before commit: %d", got)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	col.next(t)
	send(t, internal, "q", Anycast, "internal")
	col.next(t)

	conns := b.Connections()
	if len(conns) != 3 {
		t.Fatalf("connections %+v", conns)
	}
	want := []ConnectionInfo{
		{ID: st.ID(), Protocol: "stomp", RemoteAddr: "10.0.0.1:1", User: "u-10.0.0.1:1", MessagesIn: 2, BytesIn: 7},
		{ID: mq.ID(), Protocol: "mqtt", RemoteAddr: "10.0.0.2:2", User: "u-10.0.0.2:2", Consumers: 1, MessagesOut: 4, BytesOut: 18},
		{ID: st2.ID(), Protocol: "stomp", RemoteAddr: "10.0.0.3:3", User: "u-10.0.0.3:3", MessagesIn: 1, BytesIn: 3},
	}
	for i, c := range conns {
		if c.Opened.IsZero() || time.Since(c.Opened) > time.Minute {
			t.Fatalf("connection %d opened %v", i, c.Opened)
		}
		c.Opened = time.Time{}
		if c != want[i] {
			t.Fatalf("connection %d:\n got %+v\nwant %+v", i, c, want[i])
		}
	}

	// Closing: through the front-end's Close; not found or not closable.
	if err := b.CloseConnection(st.ID()); err != nil || closed.Load() != 1 {
		t.Fatalf("close: %v, %d calls", err, closed.Load())
	}
	for _, id := range []uint64{mq.ID(), internal.ID(), 9999} {
		if err := b.CloseConnection(id); !errors.Is(err, ErrConnectionNotFound) {
			t.Fatalf("close %d: %v", id, err)
		}
	}

	// The totals survive the sessions.
	st.Close()
	mq.Close()
	ps := b.ProtocolStats()
	wantPS := []ProtocolStats{
		{Protocol: "mqtt", Connections: 0, ConnectionsTotal: 1, MessagesOut: 4, BytesOut: 18},
		{Protocol: "stomp", Connections: 1, ConnectionsTotal: 2, MessagesIn: 3, BytesIn: 10},
	}
	if len(ps) != 2 || ps[0] != wantPS[0] || ps[1] != wantPS[1] {
		t.Fatalf("protocol stats\n got %+v\nwant %+v", ps, wantPS)
	}
	if conns := b.Connections(); len(conns) != 1 || conns[0].ID != st2.ID() {
		t.Fatalf("connections after close %+v", conns)
	}
	if err := b.CloseConnection(st.ID()); !errors.Is(err, ErrConnectionNotFound) {
		t.Fatalf("close of a closed session: %v", err)
	}
	if s := b.Started(); s.IsZero() || time.Since(s) > time.Minute {
		t.Fatalf("started %v", s)
	}
}

func TestAddressesAndCreateQueue(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "app")
	if err := b.CreateQueue("orders", Anycast); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateQueue("orders", Anycast); !errors.Is(err, ErrQueueExists) {
		t.Fatalf("second create: %v", err)
	}
	if err := b.CreateQueue("events", Multicast); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateQueue("events", Multicast); !errors.Is(err, ErrQueueExists) {
		t.Fatalf("second multicast create: %v", err)
	}
	if err := b.CreateQueue("events", Anycast); err != nil { // an address may take both
		t.Fatal(err)
	}
	if err := b.CreateQueue("a.*", Anycast); !errors.Is(err, ErrInvalidAddress) {
		t.Fatalf("pattern: %v", err)
	}
	if err := b.CreateQueue("x", RoutingDefault); !errors.Is(err, ErrInvalidAddress) {
		t.Fatalf("routing default: %v", err)
	}
	subscribe(t, s, ConsumerOptions{Address: "events", RoutingType: Multicast, SubscriptionName: "audit", Selector: "kind = 'x'"})
	tmp, err := s.CreateTemporaryQueue()
	if err != nil {
		t.Fatal(err)
	}
	got := b.Addresses()
	want := []AddressInfo{
		{Name: "events", Anycast: true, Multicast: true, Queues: []string{"app.audit", "events"}},
		{Name: "orders", Anycast: true, Queues: []string{"orders"}},
		{Name: tmp, Anycast: true, Queues: []string{tmp}, Temporary: true},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("addresses\n got %+v\nwant %+v", got, want)
	}
	st := b.Queue("app.audit").Stats()
	if st.ClientID != "app" || st.Selector != "kind = 'x'" || !st.OldestMessage.IsZero() {
		t.Fatalf("subscription stats %+v", st)
	}
	if st := b.Queue("orders").Stats(); st.ClientID != "" || st.Selector != "" {
		t.Fatalf("queue stats %+v", st)
	}
}

func TestQueueStatsOldestMessage(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	t0 := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, p := range []uint8{1, 9, 4} {
		m := &Message{Address: "q", RoutingType: Anycast, Priority: p, Timestamp: t0.Add(time.Duration(i) * time.Hour)}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.Queue("q").Stats().OldestMessage; !got.Equal(t0) {
		t.Fatalf("oldest %v, want %v", got, t0)
	}
	// In flight still counts: the oldest is delivered (lowest priority
	// last, so take everything).
	_, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 3})
	for range 3 {
		col.next(t)
	}
	if got := b.Queue("q").Stats().OldestMessage; !got.Equal(t0) {
		t.Fatalf("oldest in flight %v, want %v", got, t0)
	}
}

func TestPurgeQueue(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	for i := range 5 {
		send(t, s, "q", Anycast, fmt.Sprint(i))
	}
	later := &Message{Address: "q", RoutingType: Anycast, DeliveryTime: time.Now().Add(time.Hour), Body: []byte("later")}
	if err := s.Send(context.Background(), later); err != nil {
		t.Fatal(err)
	}
	c, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 2})
	d0, d1 := col.next(t), col.next(t)
	n, err := b.PurgeQueue("q")
	if err != nil || n != 4 { // 3 ready + 1 scheduled; 2 in flight stay
		t.Fatalf("purge: %d, %v", n, err)
	}
	st := b.Queue("q").Stats()
	if st.Depth != 2 || st.InFlight != 2 || st.Scheduled != 0 || st.Bytes != 2 {
		t.Fatalf("stats after purge %+v", st)
	}
	if err := c.Release(d0.ID, false); err != nil {
		t.Fatal(err)
	}
	c.Flow(1)
	if d := col.next(t); body(d) != body(d0) {
		t.Fatalf("redelivered %q", body(d))
	}
	c.Ack(d1.ID)
	if _, err := b.PurgeQueue("nope"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("purge unknown: %v", err)
	}
	// A deep queue is purged in chunks.
	for i := range 3*adminChunk + 7 {
		send(t, s, "deep", Anycast, fmt.Sprint(i))
	}
	if n, err := b.PurgeQueue("deep"); err != nil || n != 3*adminChunk+7 {
		t.Fatalf("deep purge: %d, %v", n, err)
	}
	if st := b.Queue("deep").Stats(); st.Depth != 0 || st.Bytes != 0 {
		t.Fatalf("deep stats %+v", st)
	}
}

func TestPurgeDurableDeletesRecords(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s, _ := b.NewSession(SessionOptions{})
	defer s.Close()
	for i := range 3 {
		sendDurable(t, s, "q", Anycast, fmt.Sprint(i))
	}
	waitLive(t, msgs, 3)
	if n, err := b.PurgeQueue("q"); err != nil || n != 3 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	waitLive(t, msgs, 0)
}

func TestMoveMessagesFromDeadLetters(t *testing.T) {
	max := 1
	b := newBroker(t, AddressSettings{Match: "work", MaxDeliveryAttempts: &max})
	s := newSession(t, b, "")
	c, col := subscribe(t, s, ConsumerOptions{Address: "work", RoutingType: Anycast, Credit: 10})
	for i := range 4 {
		m := &Message{Address: "work", RoutingType: Anycast, Priority: DefaultPriority, Body: []byte(fmt.Sprint(i)),
			Properties: map[string]any{"k": int64(i)}, CorrelationID: "c"}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		c.Reject(col.next(t).ID)
	}
	if st := b.Queue("DLQ").Stats(); st.Depth != 4 {
		t.Fatalf("DLQ %+v", st)
	}
	if _, err := b.MoveMessages("DLQ", "nowhere", 0); !errors.Is(err, ErrAddressNotFound) {
		t.Fatalf("to unknown: %v", err)
	}
	if _, err := b.MoveMessages("none", "work", 0); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("from unknown: %v", err)
	}
	if _, err := b.MoveMessages("DLQ", "DLQ", 0); !errors.Is(err, ErrInvalidAddress) {
		t.Fatalf("to itself: %v", err)
	}
	n, err := b.MoveMessages("DLQ", "work", 3)
	if err != nil || n != 3 {
		t.Fatalf("move: %d, %v", n, err)
	}
	for i := range 3 {
		d := col.next(t)
		m := d.Message
		if body(d) != fmt.Sprint(i) || m.Properties["k"] != int64(i) || m.Properties[PropOriginalAddress] != "work" ||
			m.CorrelationID != "c" || m.UserID != "u" || m.RoutingType != Anycast || d.DeliveryCount != 0 {
			t.Fatalf("moved %d: %q %+v", i, body(d), m)
		}
		c.Ack(d.ID)
	}
	if st := b.Queue("DLQ").Stats(); st.Depth != 1 || st.Bytes != 1 {
		t.Fatalf("DLQ after move %+v", st)
	}
	if n, err := b.MoveMessages("DLQ", "work", 0); err != nil || n != 1 {
		t.Fatalf("move rest: %d, %v", n, err)
	}
	col.next(t)
}

func TestMoveMessagesDurable(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s, _ := b.NewSession(SessionOptions{})
	for i := range 3 {
		sendDurable(t, s, "src", Anycast, fmt.Sprint(i))
	}
	if err := b.CreateQueue("dst", Anycast); err != nil {
		t.Fatal(err)
	}
	if n, err := b.MoveMessages("src", "dst", 0); err != nil || n != 3 {
		t.Fatalf("move: %d, %v", n, err)
	}
	waitLive(t, msgs, 3) // three copies added, three originals deleted
	s.Close()
	b.Close()
	b2 := durableBroker(t, msgs, bindings)
	if d, s := b2.Queue("dst").Stats().Depth, b2.Queue("src").Stats().Depth; d != 3 || s != 0 {
		t.Fatalf("after restart: dst %d, src %d", d, s)
	}
	page, _, _ := b2.Browse("dst", 0, 10)
	for i, bm := range page {
		if string(bm.Message.Body) != fmt.Sprint(i) || !bm.Message.Durable {
			t.Fatalf("restored %d: %+v", i, bm.Message)
		}
	}
}

func TestMoveMessagesRefusedPutsBack(t *testing.T) {
	fail := string(FullFail)
	var maxBytes int64 = 2
	b := newBroker(t, AddressSettings{Match: "small", MaxSizeBytes: &maxBytes, FullPolicy: &fail})
	s := newSession(t, b, "")
	for i := range 4 {
		send(t, s, "src", Anycast, fmt.Sprint(i))
	}
	if err := b.CreateQueue("small", Anycast); err != nil {
		t.Fatal(err)
	}
	n, err := b.MoveMessages("src", "small", 0)
	if !errors.Is(err, ErrAddressFull) || n != 2 {
		t.Fatalf("move into a full queue: %d, %v", n, err)
	}
	page, total, _ := b.Browse("src", 0, 10)
	if total != 2 || string(page[0].Message.Body) != "2" || string(page[1].Message.Body) != "3" {
		t.Fatalf("src after refusal: %d %+v", total, page)
	}
	if st := b.Queue("src").Stats(); st.Depth != 2 || st.Bytes != 2 {
		t.Fatalf("src stats %+v", st)
	}
}

// TestMoveMessagesUnroutableStays: a move to an address where no queue
// takes the message (a multicast address without subscriptions) fails
// and leaves the message where it was; it was dropped and counted as
// moved.
func TestMoveMessagesUnroutableStays(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	send(t, s, "src", Anycast, "precious")
	if err := b.CreateAddress("mcx", Multicast); err != nil {
		t.Fatal(err)
	}
	n, err := b.MoveMessages("src", "mcx", 0)
	if !errors.Is(err, ErrUnroutable) || n != 0 {
		t.Fatalf("move to an address without queues: %d, %v", n, err)
	}
	page, total, _ := b.Browse("src", 0, 10)
	if total != 1 || string(page[0].Message.Body) != "precious" {
		t.Fatalf("src after the refused move: %d %+v", total, page)
	}
}

func TestBrowse(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	sendP := func(body string, p uint8, due time.Duration) {
		t.Helper()
		m := &Message{Address: "q", RoutingType: Anycast, Priority: p, Body: []byte(body)}
		if due > 0 {
			m.DeliveryTime = time.Now().Add(due)
		}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	sendP("a4", 4, 0)
	sendP("b9", 9, 0)
	sendP("c4", 4, 0)
	sendP("d0", 0, 0)
	sendP("late2", 4, 2*time.Hour)
	sendP("late1", 4, time.Hour)
	sendP("e9", 9, 0)
	// Deliver one (the first by queue order: b9).
	_, col := subscribe(t, s, ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 1})
	if d := col.next(t); body(d) != "b9" {
		t.Fatalf("delivered %q", body(d))
	}
	before := b.Queue("q").Stats()
	all, total, err := b.Browse("q", 0, 0)
	if err != nil || total != 7 {
		t.Fatalf("browse: %d, %v", total, err)
	}
	var got []string
	for _, bm := range all {
		got = append(got, fmt.Sprintf("%s/%v/%v", bm.Message.Body, bm.InFlight, bm.Scheduled))
	}
	want := "[b9/true/false e9/false/false a4/false/false c4/false/false d0/false/false late1/false/true late2/false/true]"
	if fmt.Sprint(got) != want {
		t.Fatalf("browse order\n got %v\nwant %s", got, want)
	}
	// Pages agree with the whole.
	for off := 0; off <= 8; off++ {
		for lim := 1; lim <= 3; lim++ {
			page, n, _ := b.Browse("q", off, lim)
			if n != 7 {
				t.Fatalf("total %d", n)
			}
			end := min(off+lim, 7)
			if off >= 7 {
				if len(page) != 0 {
					t.Fatalf("page past the end: %v", page)
				}
				continue
			}
			if len(page) != end-off {
				t.Fatalf("page %d+%d has %d", off, lim, len(page))
			}
			for i, bm := range page {
				if bm != all[off+i] {
					t.Fatalf("page %d+%d item %d: %+v, want %+v", off, lim, i, bm, all[off+i])
				}
			}
		}
	}
	if after := b.Queue("q").Stats(); after != before {
		t.Fatalf("browse changed the queue:\n%+v\n%+v", before, after)
	}
	if _, _, err := b.Browse("none", 0, 1); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("browse unknown: %v", err)
	}
}

// TestAdminRace runs Browse, Purge, Move and the statistics against
// producers and consumers (for the race detector), then checks that
// every message is accounted for: consumed, purged, or still queued.
func TestAdminRace(t *testing.T) {
	b := newBroker(t)
	const producers, perProducer = 4, 500
	var consumed atomic.Int64
	var wg sync.WaitGroup
	for i := range producers {
		s, err := b.NewSession(SessionOptions{Protocol: "stomp", RemoteAddr: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perProducer {
				m := &Message{Address: "a", RoutingType: Anycast, Priority: uint8(j % 10), Body: []byte("x")}
				if err := s.Send(context.Background(), m); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	cs, _ := b.NewSession(SessionOptions{Protocol: "amqp"})
	defer cs.Close()
	for range 2 {
		ch := make(chan Delivery, 64)
		c, err := cs.Subscribe(ConsumerOptions{Address: "a", RoutingType: Anycast, Credit: 16, Handler: func(d Delivery) { ch <- d }})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for d := range ch {
				if d.ID%7 == 0 {
					c.Release(d.ID, false)
				} else {
					c.Ack(d.ID)
					consumed.Add(1)
				}
				c.Flow(1)
			}
		}()
	}
	if err := b.CreateQueue("b", Anycast); err != nil {
		t.Fatal(err)
	}
	var purged, movedBack atomic.Int64
	stop := make(chan struct{})
	var admin sync.WaitGroup
	admin.Add(3)
	go func() {
		defer admin.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			b.Browse("a", 3, 20)
			b.Browse("b", 0, 5)
			b.QueueStats()
			b.Connections()
			b.ProtocolStats()
			b.Addresses()
		}
	}()
	go func() {
		defer admin.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := b.MoveMessages("a", "b", 50); err != nil {
				t.Error(err)
			}
			n, err := b.MoveMessages("b", "a", 0)
			if err != nil {
				t.Error(err)
			}
			movedBack.Add(int64(n))
			time.Sleep(time.Millisecond)
		}
	}()
	go func() {
		defer admin.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := b.PurgeQueue("b")
			if err != nil {
				t.Error(err)
			}
			purged.Add(int64(n))
			time.Sleep(3 * time.Millisecond)
		}
	}()
	wg.Wait()
	time.Sleep(50 * time.Millisecond)
	close(stop)
	admin.Wait()
	// Whatever is left in b goes back to a and is consumed.
	if _, err := b.MoveMessages("b", "a", 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for consumed.Load()+purged.Load() != producers*perProducer {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d + purged %d != sent %d; a: %+v b: %+v", consumed.Load(), purged.Load(),
				producers*perProducer, b.Queue("a").Stats(), b.Queue("b").Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, name := range []string{"a", "b"} {
		if st := b.Queue(name).Stats(); st.Depth != 0 || st.Bytes != 0 {
			t.Fatalf("%s: %+v", name, st)
		}
	}
	var in uint64
	for _, p := range b.ProtocolStats() {
		if p.Protocol == "stomp" {
			in = p.MessagesIn
		}
	}
	if in != producers*perProducer {
		t.Fatalf("stomp messages in %d", in)
	}
}
