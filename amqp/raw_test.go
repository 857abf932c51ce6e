package amqp_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/amqptest"
	"github.com/junctionmq/junction/amqp/internal/encoding"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
)

// rawClient speaks AMQP frame by frame, for what go-amqp cannot send:
// transactions, malformed frames, silence.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, tb *amqptest.Broker) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(tb.Addr, "amqp://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *rawClient) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) send(ch uint16, b frames.Body, payload []byte) {
	c.t.Helper()
	c.write(frames.Append(nil, frames.TypeAMQP, ch, b, payload))
}

func (c *rawClient) header() [8]byte {
	c.t.Helper()
	var h [8]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		c.t.Fatal(err)
	}
	return h
}

// next reads the next non-empty frame's performative and payload.
func (c *rawClient) next() (frames.Body, []byte) {
	c.t.Helper()
	_, perf, payload := c.nextFrame()
	return perf, payload
}

// nextOnChannel reads the next non-empty frame's channel and
// performative.
func (c *rawClient) nextOnChannel() (uint16, frames.Body) {
	c.t.Helper()
	ch, perf, _ := c.nextFrame()
	return ch, perf
}

func (c *rawClient) nextFrame() (uint16, frames.Body, []byte) {
	c.t.Helper()
	for {
		var hb [8]byte
		if _, err := io.ReadFull(c.br, hb[:]); err != nil {
			c.t.Fatalf("read: %v", err)
		}
		h, err := frames.ParseHeader(hb[:])
		if err != nil {
			c.t.Fatal(err)
		}
		body := make([]byte, h.Size-8)
		if _, err := io.ReadFull(c.br, body); err != nil {
			c.t.Fatal(err)
		}
		perf, payload, err := frames.Decode(h.Type, body[int(h.DataOffset)*4-8:])
		if err != nil {
			c.t.Fatal(err)
		}
		if perf != nil {
			return h.Channel, perf, payload
		}
	}
}

// open connects without SASL and opens the connection and one session.
func (c *rawClient) open(idle time.Duration) {
	c.t.Helper()
	c.write(frames.ProtoAMQP[:])
	if h := c.header(); h != frames.ProtoAMQP {
		c.t.Fatalf("header % x", h)
	}
	c.send(0, &frames.Open{ContainerID: "raw", MaxFrameSize: 65536, ChannelMax: 10, IdleTimeout: idle}, nil)
	expect[*frames.Open](c)
	c.send(0, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 1000, OutgoingWindow: 1000}, nil)
	expect[*frames.Begin](c)
}

// expect reads frames until one of type T (skipping flows and
// dispositions the test does not look at is not allowed: it fails on
// anything else).
func expect[T frames.Body](c *rawClient) (T, []byte) {
	c.t.Helper()
	perf, payload := c.next()
	v, ok := perf.(T)
	if !ok {
		var zero T
		c.t.Fatalf("got %T %+v, want %T", perf, perf, zero)
	}
	return v, payload
}

// expectClosed reads until the broker's close and then EOF, and returns
// the close's error.
func (c *rawClient) expectClosed() *frames.Error {
	c.t.Helper()
	for {
		perf, _ := c.next()
		if cl, ok := perf.(*frames.Close); ok {
			if _, err := c.br.ReadByte(); err != io.EOF {
				c.t.Fatalf("after close: %v, want EOF", err)
			}
			return cl.Error
		}
	}
}

func u32(n uint32) *uint32  { return &n }
func addr(s string) *string { return &s }

func encodeMessage(m *frames.Message) []byte { return frames.AppendMessage(nil, m) }

func TestTransactions(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{})
	c := dialRaw(t, tb)
	c.open(0)
	// Coordinator link on handle 0, a sender to tx.q on handle 1.
	c.send(0, &frames.Attach{Name: "coord", Handle: 0, Role: frames.RoleSender, InitialDeliveryCount: u32(0),
		Source:      &frames.Source{},
		Coordinator: &frames.Coordinator{Capabilities: []encoding.Symbol{"amqp:local-transactions"}}}, nil)
	if a, _ := expect[*frames.Attach](c); a.Coordinator == nil {
		t.Fatal("coordinator refused")
	}
	expect[*frames.Flow](c)
	c.send(0, &frames.Attach{Name: "snd", Handle: 1, Role: frames.RoleSender, InitialDeliveryCount: u32(0),
		Source: &frames.Source{}, Target: &frames.Target{Address: addr("tx.q")}}, nil)
	expect[*frames.Attach](c)
	expect[*frames.Flow](c)

	var deliveryID uint32
	control := func(v any) frames.DeliveryState {
		t.Helper()
		settled := false
		c.send(0, &frames.Transfer{Handle: 0, DeliveryID: u32(deliveryID), DeliveryTag: []byte{byte(deliveryID)}, Settled: &settled},
			encodeMessage(&frames.Message{BodyKind: frames.BodyValue, Value: v}))
		deliveryID++
		d, _ := expect[*frames.Disposition](c)
		return d.State
	}
	declare := func() []byte {
		t.Helper()
		st, ok := control(&encoding.Described{Descriptor: uint64(0x31), Value: []any{}}).(*frames.Declared)
		if !ok {
			t.Fatalf("declare: %T", st)
		}
		return st.TxnID
	}
	post := func(txn []byte, body string) {
		t.Helper()
		settled := false
		c.send(0, &frames.Transfer{Handle: 1, DeliveryID: u32(deliveryID), DeliveryTag: []byte{byte(deliveryID)}, Settled: &settled,
			State: &frames.TransactionalState{TxnID: txn}},
			encodeMessage(&frames.Message{BodyKind: frames.BodyData, Data: [][]byte{[]byte(body)}}))
		deliveryID++
		d, _ := expect[*frames.Disposition](c)
		ts, ok := d.State.(*frames.TransactionalState)
		if !ok {
			t.Fatalf("transactional post: %T", d.State)
		}
		if _, ok := ts.Outcome.(*frames.Accepted); !ok {
			t.Fatalf("transactional post outcome: %T", ts.Outcome)
		}
	}
	discharge := func(txn []byte, fail bool) frames.DeliveryState {
		return control(&encoding.Described{Descriptor: uint64(0x32), Value: []any{txn, fail}})
	}

	// Rolled back: nothing arrives.
	txn := declare()
	post(txn, "rolled-back")
	if _, ok := discharge(txn, true).(*frames.Accepted); !ok {
		t.Fatal("rollback not accepted")
	}
	if d := amqptest.QueueDepth(tb, "tx.q"); d > 0 {
		t.Fatalf("depth %d after rollback", d)
	}
	// Committed: both arrive together.
	txn = declare()
	post(txn, "one")
	post(txn, "two")
	if d := amqptest.QueueDepth(tb, "tx.q"); d > 0 {
		t.Fatalf("depth %d before commit", d)
	}
	if _, ok := discharge(txn, false).(*frames.Accepted); !ok {
		t.Fatal("commit not accepted")
	}
	if d := amqptest.QueueDepth(tb, "tx.q"); d != 2 {
		t.Fatalf("depth %d after commit", d)
	}
	// Unknown transaction.
	if r, ok := discharge([]byte{9, 9}, false).(*frames.Rejected); !ok || r.Error.Condition != frames.ErrCondTxUnknownID {
		t.Fatalf("unknown txn: %+v", r)
	}

	// A transactional ack: the message stays until commit, returns on
	// rollback.
	c.send(0, &frames.Attach{Name: "rcv", Handle: 2, Role: frames.RoleReceiver,
		Source: &frames.Source{Address: addr("tx.q")}, Target: &frames.Target{}}, nil)
	expect[*frames.Attach](c)
	c.send(0, &frames.Flow{NextIncomingID: u32(0), IncomingWindow: 1000, NextOutgoingID: deliveryID, OutgoingWindow: 1000,
		Handle: u32(2), DeliveryCount: u32(0), LinkCredit: u32(1)}, nil)
	tr, _ := expect[*frames.Transfer](c)
	txn = declare()
	c.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: *tr.DeliveryID, Settled: true,
		State: &frames.TransactionalState{TxnID: txn, Outcome: &frames.Accepted{}}}, nil)
	if _, ok := discharge(txn, false).(*frames.Accepted); !ok {
		t.Fatal("commit of the ack not accepted")
	}
	testserve.Eventually(t, "one left", func() bool { return amqptest.QueueDepth(tb, "tx.q") == 1 })

	// A duplicate id (_AMQ_DUPL_ID) already sent to the address fails
	// the discharge, rolled back with the id named; nothing of the
	// transaction is stored (docs/artemis-features.md).
	c.send(0, &frames.Attach{Name: "dup", Handle: 3, Role: frames.RoleSender, InitialDeliveryCount: u32(0),
		Source: &frames.Source{}, Target: &frames.Target{Address: addr("tx.dup")}}, nil)
	expect[*frames.Attach](c)
	expect[*frames.Flow](c)
	postDup := func(txn []byte, id string) {
		t.Helper()
		settled := false
		c.send(0, &frames.Transfer{Handle: 3, DeliveryID: u32(deliveryID), DeliveryTag: []byte{byte(deliveryID)}, Settled: &settled,
			State: &frames.TransactionalState{TxnID: txn}},
			encodeMessage(&frames.Message{BodyKind: frames.BodyData, Data: [][]byte{[]byte(id)},
				ApplicationProperties: encoding.Map{{Key: core.PropDuplicateID, Value: id}}}))
		deliveryID++
		expect[*frames.Disposition](c)
	}
	txn = declare()
	postDup(txn, "d1")
	if _, ok := discharge(txn, false).(*frames.Accepted); !ok {
		t.Fatal("commit of d1 not accepted")
	}
	txn = declare()
	postDup(txn, "d2")
	postDup(txn, "d1")
	r, ok := discharge(txn, false).(*frames.Rejected)
	if !ok || r.Error.Condition != frames.ErrCondTxRollback || !strings.Contains(r.Error.Description, `duplicate id already sent to this address: "d1"`) {
		t.Fatalf("commit with a duplicate id: %+v", r)
	}
	if d := amqptest.QueueDepth(tb, "tx.dup"); d != 1 {
		t.Fatalf("tx.dup holds %d messages, want d1 alone", d)
	}
}

func TestIdleTimeout(t *testing.T) {
	// Client and broker are one process, which a loaded machine may
	// stall for a few hundred milliseconds; the timeout is long enough
	// that only a longer stall can reorder what the test expects (an
	// empty frame before the close; a heartbeat before the deadline).
	const idle = time.Second
	tb := amqptest.Start(t, amqp.Config{IdleTimeout: idle}, core.Config{})
	c := dialRaw(t, tb)
	c.write(frames.ProtoAMQP[:])
	c.header()
	// The client's open is the last thing it sends: the broker's idle
	// timer starts when it arrives, so no earlier than now.
	start := time.Now()
	c.send(0, &frames.Open{ContainerID: "quiet", MaxFrameSize: 65536, ChannelMax: 1, IdleTimeout: 100 * time.Millisecond}, nil)
	o, _ := expect[*frames.Open](c)
	if o.IdleTimeout != idle/2 {
		t.Fatalf("advertised idle timeout %v, want half of %v", o.IdleTimeout, idle)
	}
	// The broker sends empty frames at half the client's 100ms, and
	// closes the silent client once its own timeout has passed since the
	// last byte it received (never before; up to an eighth after).
	var hb [8]byte
	if _, err := io.ReadFull(c.br, hb[:]); err != nil || binary.BigEndian.Uint32(hb[:4]) != 8 {
		t.Fatalf("expected an empty frame, got % x (%v)", hb, err)
	}
	if e := c.expectClosed(); e == nil || e.Condition != frames.ErrCondResourceLimitExceeded {
		t.Fatalf("close error %+v", e)
	}
	if el := time.Since(start); el < idle {
		t.Fatalf("closed %v after the open, want at least %v", el, idle)
	}

	// A client that sends heartbeats (go-amqp: at half the advertised
	// half) stays past the idle timeout. Its own idle timeout is
	// go-amqp's default (a minute): it is not under test, and a short
	// one would have go-amqp itself close the connection whenever the
	// broker's empty frames come late.
	gc := tb.Dial(t, nil)
	time.Sleep(idle + idle/2)
	s, err := gc.NewSession(amqptest.Ctx(t), nil)
	if err != nil {
		t.Fatalf("session after idle period: %v", err)
	}
	s.Close(amqptest.Ctx(t))
}

// The idle timeout counts from the last byte received: an empty frame
// sent soon after the open (before the broker's deadline was due to
// move, when readLoop moved it only every eighth of the timeout) puts
// the close at least a whole timeout after that frame.
func TestIdleTimeoutCountsFromLastByte(t *testing.T) {
	const idle = time.Second
	tb := amqptest.Start(t, amqp.Config{IdleTimeout: idle}, core.Config{})
	c := dialRaw(t, tb)
	c.write(frames.ProtoAMQP[:])
	c.header()
	c.send(0, &frames.Open{ContainerID: "quiet", MaxFrameSize: 65536, ChannelMax: 1}, nil)
	expect[*frames.Open](c)
	time.Sleep(idle / 20)
	// An empty frame (AMQP 1.0 §2.3.2): size 8, doff 2, type 0, channel 0.
	c.write([]byte{0, 0, 0, 8, 2, 0, 0, 0})
	last := time.Now() // the broker reads it no earlier
	if e := c.expectClosed(); e == nil || e.Condition != frames.ErrCondResourceLimitExceeded {
		t.Fatalf("close error %+v", e)
	}
	if el := time.Since(last); el < idle {
		t.Fatalf("closed %v after the client's last byte, want at least %v", el, idle)
	}
}

func TestBadInputClosesWithCondition(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{MaxFrameSize: 4096}, core.Config{})
	// A bystander keeps working throughout.
	bs := tb.Session(t, nil)
	bsnd := amqptest.NewSender(t, bs, "bystander", nil)

	cases := map[string]struct {
		frame []byte
		cond  encoding.Symbol
	}{
		"oversized frame": {append(binary.BigEndian.AppendUint32(nil, 1<<20), 2, 0, 0, 0), frames.ErrCondFramingError},
		"undecodable":     {[]byte{0, 0, 0, 12, 2, 0, 0, 0, 0x00, 0x53, 0x10, 0xff}, frames.ErrCondDecodeError},
		"sasl after open": {frames.Append(nil, frames.TypeSASL, 0, &frames.SASLInit{Mechanism: "PLAIN"}, nil), frames.ErrCondFramingError},
		"second open":     {frames.Append(nil, frames.TypeAMQP, 0, &frames.Open{ContainerID: "x"}, nil), frames.ErrCondIllegalState},
		"unknown channel": {frames.Append(nil, frames.TypeAMQP, 7, &frames.End{}, nil), frames.ErrCondIllegalState},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, tb)
			c.open(0)
			c.write(tc.frame)
			if e := c.expectClosed(); e == nil || e.Condition != tc.cond {
				t.Fatalf("close error %+v, want %s", e, tc.cond)
			}
			amqptest.Send(t, bsnd, amqptest.Text(name))
		})
	}
	testserve.Eventually(t, "bystander's messages", func() bool { return amqptest.QueueDepth(tb, "bystander") == int64(len(cases)) })

	// A protocol header the broker does not speak gets the one it does.
	c := dialRaw(t, tb)
	c.write([]byte("AMQP\x01\x01\x00\x00"))
	if h := c.header(); h != frames.ProtoSASL {
		t.Fatalf("answered % x", h)
	}
}

func TestConnectionLimitRefusal(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{})
	a, b := net.Pipe()
	go func() { tb.Server.Reject(a); a.Close() }()
	br := bufio.NewReader(b)
	c := &rawClient{t: t, nc: b, br: br}
	if h := c.header(); h != frames.ProtoAMQP {
		t.Fatalf("header % x", h)
	}
	o, _ := expect[*frames.Open](c)
	found := false
	for _, e := range o.Properties {
		if e.Key == encoding.Symbol("amqp:connection-establishment-failed") && e.Value == true {
			found = true
		}
	}
	if !found {
		t.Fatalf("open properties %v", o.Properties)
	}
	cl, _ := expect[*frames.Close](c)
	if cl.Error == nil || cl.Error.Condition != frames.ErrCondResourceLimitExceeded {
		t.Fatalf("close %+v", cl.Error)
	}
}

func TestSessionWindowRespected(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{})
	snd := amqptest.NewSender(t, tb.Session(t, nil), "win.q", nil)
	for i := 0; i < 5; i++ {
		amqptest.Send(t, snd, amqptest.Text("w"))
	}
	c := dialRaw(t, tb)
	c.write(frames.ProtoAMQP[:])
	c.header()
	c.send(0, &frames.Open{ContainerID: "win", MaxFrameSize: 65536, ChannelMax: 1}, nil)
	expect[*frames.Open](c)
	// An incoming window of 2 transfer frames.
	c.send(0, &frames.Begin{IncomingWindow: 2, OutgoingWindow: 10}, nil)
	expect[*frames.Begin](c)
	c.send(0, &frames.Attach{Name: "r", Handle: 0, Role: frames.RoleReceiver, Source: &frames.Source{Address: addr("win.q")}, Target: &frames.Target{}}, nil)
	expect[*frames.Attach](c)
	c.send(0, &frames.Flow{NextIncomingID: u32(0), IncomingWindow: 2, OutgoingWindow: 10, Handle: u32(0), DeliveryCount: u32(0), LinkCredit: u32(5)}, nil)
	for i := 0; i < 2; i++ {
		expect[*frames.Transfer](c)
	}
	c.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.br.ReadByte(); err == nil {
		t.Fatal("the broker sent beyond the session window")
	}
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	// Widening the window lets the rest through.
	c.send(0, &frames.Flow{NextIncomingID: u32(2), IncomingWindow: 10, OutgoingWindow: 10}, nil)
	for i := 0; i < 3; i++ {
		expect[*frames.Transfer](c)
	}
}

// Drain with more credit than messages: the broker sends what it has,
// then advances the delivery-count over the unused credit and answers
// with drain set (Part 2 §2.6.7). go-amqp drains only after giving up
// its credit itself, so this needs the raw client.
func TestDrainGivesUpUnusedCredit(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{})
	snd := amqptest.NewSender(t, tb.Session(t, nil), "drain.q", nil)
	for i := 0; i < 2; i++ {
		amqptest.Send(t, snd, amqptest.Text("d"))
	}
	c := dialRaw(t, tb)
	c.open(0)
	c.send(0, &frames.Attach{Name: "r", Handle: 0, Role: frames.RoleReceiver, Source: &frames.Source{Address: addr("drain.q")}, Target: &frames.Target{}}, nil)
	expect[*frames.Attach](c)
	c.send(0, &frames.Flow{NextIncomingID: u32(0), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: u32(0), DeliveryCount: u32(0), LinkCredit: u32(5), Drain: true}, nil)
	for i := 0; i < 2; i++ {
		expect[*frames.Transfer](c)
	}
	f, _ := expect[*frames.Flow](c)
	if !f.Drain || f.LinkCredit == nil || *f.LinkCredit != 0 || f.DeliveryCount == nil || *f.DeliveryCount != 5 {
		t.Fatalf("drain answer %+v", f)
	}
	// Nothing more flows until new credit.
	amqptest.Send(t, snd, amqptest.Text("late"))
	c.nc.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	if _, err := c.br.ReadByte(); err == nil {
		t.Fatal("the broker sent after the drain")
	}
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	c.send(0, &frames.Flow{NextIncomingID: u32(2), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: u32(0), DeliveryCount: u32(5), LinkCredit: u32(1), Echo: true}, nil)
	expect[*frames.Transfer](c)
}
