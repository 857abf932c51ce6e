package stomp_test

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

func TestQueueSendReceive(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	c := tb.Dial(t)
	sub := stomptest.Subscribe(t, c, "/queue/orders", gostomp.AckAuto)
	for i := range 10 {
		stomptest.Send(t, p, "/queue/orders", fmt.Sprint(i))
	}
	for i := range 10 {
		m := stomptest.Next(t, sub)
		if string(m.Body) != fmt.Sprint(i) {
			t.Fatalf("got %q want %d", m.Body, i)
		}
		if m.Destination != "/queue/orders" || m.Header.Get("message-id") == "" || m.Header.Get("subscription") != sub.Id() {
			t.Fatalf("headers %v", m.Header)
		}
	}
	// Auto-acked messages leave the queue once written.
	deadline := time.Now().Add(5 * time.Second)
	for tb.Core.Queue("orders").Stats().Dequeued != 10 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := tb.Core.Queue("orders").Stats(); st.Depth != 0 || st.Dequeued != 10 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCompetingConsumersAndTopicFanout(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	c1, c2 := tb.Dial(t), tb.Dial(t)
	q1 := stomptest.Subscribe(t, c1, "/queue/work", gostomp.AckAuto)
	q2 := stomptest.Subscribe(t, c2, "/queue/work", gostomp.AckAuto)
	t1 := stomptest.Subscribe(t, c1, "/topic/news", gostomp.AckAuto)
	t2 := stomptest.Subscribe(t, c2, "/topic/news", gostomp.AckAuto)
	for i := range 4 {
		stomptest.Send(t, p, "/queue/work", fmt.Sprint(i))
	}
	stomptest.Send(t, p, "/topic/news", "hello")
	got := map[string]bool{}
	for range 2 {
		got[string(stomptest.Next(t, q1).Body)] = true
		got[string(stomptest.Next(t, q2).Body)] = true
	}
	if len(got) != 4 {
		t.Fatalf("competing consumers got %v", got)
	}
	for _, s := range []*gostomp.Subscription{t1, t2} {
		m := stomptest.Next(t, s)
		if string(m.Body) != "hello" || m.Destination != "/topic/news" {
			t.Fatalf("topic got %q at %s", m.Body, m.Destination)
		}
	}
}

func TestWildcardTopicSubscription(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	c := tb.Dial(t)
	hash := stomptest.Subscribe(t, c, "/topic/sensors.#", gostomp.AckAuto)
	star := stomptest.Subscribe(t, c, "/topic/sensors.*.temp", gostomp.AckAuto)
	gt := stomptest.Subscribe(t, c, "/topic/sensors.>", gostomp.AckAuto)
	stomptest.Send(t, p, "/topic/sensors.kitchen.temp", "21")
	stomptest.Send(t, p, "/topic/sensors.kitchen.humidity", "40")
	for _, s := range []*gostomp.Subscription{hash, gt} {
		if m := stomptest.Next(t, s); string(m.Body) != "21" || m.Destination != "/topic/sensors.kitchen.temp" {
			t.Fatalf("got %q at %s", m.Body, m.Destination)
		}
		if m := stomptest.Next(t, s); string(m.Body) != "40" {
			t.Fatalf("got %q", m.Body)
		}
	}
	if m := stomptest.Next(t, star); string(m.Body) != "21" {
		t.Fatalf("got %q", m.Body)
	}
	stomptest.None(t, star, 50*time.Millisecond)
}

func TestClientIndividualAckAndRedeliveryOnDisconnect(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	for i := range 3 {
		stomptest.Send(t, p, "/queue/jobs", fmt.Sprint(i))
	}
	c1, err := gostomp.Dial("tcp", tb.Addr, gostomp.ConnOpt.HeartBeat(0, 0), stomptest.Quiet)
	if err != nil {
		t.Fatal(err)
	}
	s1 := stomptest.Subscribe(t, c1, "/queue/jobs", gostomp.AckClientIndividual)
	m0, m1, m2 := stomptest.Next(t, s1), stomptest.Next(t, s1), stomptest.Next(t, s1)
	if m0.Header.Get("ack") == "" {
		t.Fatal("STOMP 1.2 MESSAGE without ack header")
	}
	if err := c1.Ack(m1); err != nil {
		t.Fatal(err)
	}
	_ = m0
	_ = m2
	c1.Disconnect()
	c2 := tb.Dial(t)
	s2 := stomptest.Subscribe(t, c2, "/queue/jobs", gostomp.AckClientIndividual)
	for _, want := range []string{"0", "2"} {
		m := stomptest.Next(t, s2)
		if string(m.Body) != want || m.Header.Get("redelivered") != "true" {
			t.Fatalf("got %q redelivered=%q, want %q redelivered", m.Body, m.Header.Get("redelivered"), want)
		}
		if err := c2.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	stomptest.None(t, s2, 50*time.Millisecond)
}

func TestClientAckIsCumulative(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	for i := range 5 {
		stomptest.Send(t, p, "/queue/cum", fmt.Sprint(i))
	}
	c1, err := gostomp.Dial("tcp", tb.Addr, gostomp.ConnOpt.HeartBeat(0, 0), stomptest.Quiet)
	if err != nil {
		t.Fatal(err)
	}
	s1 := stomptest.Subscribe(t, c1, "/queue/cum", gostomp.AckClient)
	var ms []*gostomp.Message
	for range 5 {
		ms = append(ms, stomptest.Next(t, s1))
	}
	// Acking the fourth acks the first four.
	if err := c1.Ack(ms[3]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return tb.Core.Queue("cum").Stats().Dequeued == 4 })
	c1.Disconnect()
	c2 := tb.Dial(t)
	s2 := stomptest.Subscribe(t, c2, "/queue/cum", gostomp.AckClient)
	if m := stomptest.Next(t, s2); string(m.Body) != "4" {
		t.Fatalf("got %q", m.Body)
	}
	stomptest.None(t, s2, 50*time.Millisecond)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestPrefetchWindow(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	for i := range 3 {
		stomptest.Send(t, p, "/queue/pf", fmt.Sprint(i))
	}
	c := tb.Dial(t)
	s := stomptest.Subscribe(t, c, "/queue/pf", gostomp.AckClientIndividual, gostomp.SubscribeOpt.Header("activemq.prefetchSize", "1"))
	m := stomptest.Next(t, s)
	stomptest.None(t, s, 50*time.Millisecond)
	if st := tb.Core.Queue("pf").Stats(); st.InFlight != 1 {
		t.Fatalf("in flight %d with prefetch 1", st.InFlight)
	}
	if err := c.Ack(m); err != nil {
		t.Fatal(err)
	}
	if m := stomptest.Next(t, s); string(m.Body) != "1" {
		t.Fatalf("got %q", m.Body)
	}
}

func TestNackRedeliversThenDeadLetters(t *testing.T) {
	two := 2
	tb := stomptest.Start(t, stomp.Config{}, core.AddressSettings{Match: "fragile", MaxDeliveryAttempts: &two})
	p := tb.Dial(t)
	c := tb.Dial(t)
	dlq := stomptest.Subscribe(t, c, "/queue/DLQ", gostomp.AckAuto)
	s := stomptest.Subscribe(t, c, "/queue/fragile", gostomp.AckClientIndividual)
	stomptest.Send(t, p, "/queue/fragile", "poison")
	m := stomptest.Next(t, s)
	if err := c.Nack(m); err != nil {
		t.Fatal(err)
	}
	m = stomptest.Next(t, s)
	if m.Header.Get("redelivered") != "true" {
		t.Fatal("redelivery not flagged")
	}
	if err := c.Nack(m); err != nil {
		t.Fatal(err)
	}
	d := stomptest.Next(t, dlq)
	if string(d.Body) != "poison" || d.Header.Get("_AMQ_ORIG_ADDRESS") != "fragile" {
		t.Fatalf("dead letter %q headers %v", d.Body, d.Header)
	}
	stomptest.None(t, s, 50*time.Millisecond)
}

func TestTransactions(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	c := tb.Dial(t)
	s := stomptest.Subscribe(t, c, "/queue/tx", gostomp.AckClientIndividual)

	tx := p.Begin()
	if err := tx.Send("/queue/tx", "text/plain", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Send("/queue/tx", "text/plain", []byte("b")); err != nil {
		t.Fatal(err)
	}
	stomptest.None(t, s, 50*time.Millisecond)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	a, b := stomptest.Next(t, s), stomptest.Next(t, s)
	if string(a.Body) != "a" || string(b.Body) != "b" {
		t.Fatalf("got %q %q", a.Body, b.Body)
	}

	tx2 := p.Begin()
	if err := tx2.Send("/queue/tx", "text/plain", []byte("never")); err != nil {
		t.Fatal(err)
	}
	if err := tx2.Abort(); err != nil {
		t.Fatal(err)
	}

	// Acks in an aborted transaction are redelivered.
	ctx := c.Begin()
	if err := ctx.Ack(a); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Abort(); err != nil {
		t.Fatal(err)
	}
	if m := stomptest.Next(t, s); string(m.Body) != "a" || m.Header.Get("redelivered") != "true" {
		t.Fatalf("after abort got %q redelivered=%q", m.Body, m.Header.Get("redelivered"))
	}
	stomptest.None(t, s, 50*time.Millisecond)

	// Committed acks are consumed.
	ctx2 := c.Begin()
	if err := ctx2.Ack(b); err != nil {
		t.Fatal(err)
	}
	if err := ctx2.Commit(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return tb.Core.Queue("tx").Stats().Dequeued == 1 })
}

func TestReceiptsAndDisconnect(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	r := tb.Raw(t)
	r.Connect("")
	r.Write("SEND\ndestination:/queue/r\nreceipt:s-1\n\nhi\x00")
	if f := r.Frame(); !strings.HasPrefix(f, "RECEIPT\n") || stomptest.Header(f, "receipt-id") != "s-1" {
		t.Fatalf("got %q", f)
	}
	r.Write("SUBSCRIBE\ndestination:/queue/r\nid:0\nreceipt:sub-1\n\n\x00")
	// The receipt and the message may come in either order.
	f1, f2 := r.Frame(), r.Frame()
	if !(strings.HasPrefix(f1, "RECEIPT\n") && strings.HasPrefix(f2, "MESSAGE\n") ||
		strings.HasPrefix(f2, "RECEIPT\n") && strings.HasPrefix(f1, "MESSAGE\n")) {
		t.Fatalf("got %q and %q", f1, f2)
	}
	r.Write("DISCONNECT\nreceipt:bye\n\n\x00")
	if f := r.Frame(); stomptest.Header(f, "receipt-id") != "bye" {
		t.Fatalf("got %q", f)
	}
	r.Closed()
}

func TestLargeBodyWithNulBytes(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	c := tb.Dial(t)
	s := stomptest.Subscribe(t, c, "/queue/big", gostomp.AckAuto)
	body := make([]byte, 1<<20)
	for i := range body {
		body[i] = byte(i % 7) // every seventh byte is NUL
	}
	if err := p.Send("/queue/big", "application/octet-stream", body, gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	m := stomptest.Next(t, s)
	if !bytes.Equal(m.Body, body) || m.ContentType != "application/octet-stream" {
		t.Fatalf("body of %d bytes differs (content-type %q)", len(m.Body), m.ContentType)
	}
}

func TestHeaderMapping(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	c := tb.Dial(t)
	s := stomptest.Subscribe(t, c, "/queue/map", gostomp.AckAuto)
	exp := time.Now().Add(time.Hour).UnixMilli()
	stomptest.Send(t, p, "/queue/map", "x",
		gostomp.SendOpt.Header("correlation-id", "corr-1"),
		gostomp.SendOpt.Header("reply-to", "/queue/replies"),
		gostomp.SendOpt.Header("persistent", "true"),
		gostomp.SendOpt.Header("priority", "7"),
		gostomp.SendOpt.Header("expires", strconv.FormatInt(exp, 10)),
		gostomp.SendOpt.Header("JMSXGroupID", "g1"),
		gostomp.SendOpt.Header("colour", "blue: really\nblue"),
	)
	m := stomptest.Next(t, s)
	want := map[string]string{
		"correlation-id": "corr-1", "reply-to": "/queue/replies", "persistent": "true",
		"priority": "7", "expires": strconv.FormatInt(exp, 10), "JMSXGroupID": "g1",
		"colour": "blue: really\nblue", "content-type": "text/plain",
	}
	for k, v := range want {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if m.Header.Get("timestamp") == "" {
		t.Error("no timestamp header")
	}
}

func TestPriorityOrder(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	for i, pr := range []string{"1", "9", "5"} {
		stomptest.Send(t, p, "/queue/prio", fmt.Sprint(i), gostomp.SendOpt.Header("priority", pr))
	}
	stomptest.Barrier(t, p) // all three are queued before the consumer comes
	c := tb.Dial(t)
	s := stomptest.Subscribe(t, c, "/queue/prio", gostomp.AckAuto)
	for _, want := range []string{"1", "2", "0"} {
		if m := stomptest.Next(t, s); string(m.Body) != want {
			t.Fatalf("got %q want %q", m.Body, want)
		}
	}
}

func TestScheduledDelay(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	c := tb.Dial(t)
	s := stomptest.Subscribe(t, c, "/queue/later", gostomp.AckAuto)
	start := time.Now()
	stomptest.Send(t, p, "/queue/later", "late", gostomp.SendOpt.Header("AMQ_SCHEDULED_DELAY", "200"))
	stomptest.Send(t, p, "/queue/later", "now")
	if m := stomptest.Next(t, s); string(m.Body) != "now" {
		t.Fatalf("got %q", m.Body)
	}
	m := stomptest.Next(t, s)
	if string(m.Body) != "late" || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("got %q after %v", m.Body, time.Since(start))
	}
}

func TestExpiredMessageIsNotDelivered(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	c := tb.Dial(t)
	s := stomptest.Subscribe(t, c, "/queue/fresh", gostomp.AckAuto)
	exq := stomptest.Subscribe(t, c, "/queue/ExpiryQueue", gostomp.AckAuto)
	stomptest.Send(t, p, "/queue/fresh", "stale", gostomp.SendOpt.Header("expires", strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10)))
	stomptest.Send(t, p, "/queue/fresh", "ok")
	if m := stomptest.Next(t, s); string(m.Body) != "ok" {
		t.Fatalf("got %q", m.Body)
	}
	if m := stomptest.Next(t, exq); string(m.Body) != "stale" {
		t.Fatalf("expiry queue got %q", m.Body)
	}
}

func TestDurableSubscriptionOfflineDelivery(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	// UNSUBSCRIBE is driven by hand: go-stomp's Subscription.Unsubscribe
	// can miss the RECEIPT's wake-up (its waitWithTimeout starts the
	// cond.Wait in a new goroutine, after the Broadcast may have happened)
	// and then times out after 30s.
	r := tb.Raw(t)
	r.Connect("client-id:auditor\n")
	r.Write("SUBSCRIBE\ndestination:/topic/events\nid:1\nack:client-individual\nactivemq.subscriptionName:audit\nreceipt:s\n\n\x00")
	if f := r.Frame(); stomptest.Header(f, "receipt-id") != "s" {
		t.Fatalf("got %q", f)
	}
	stomptest.Send(t, p, "/topic/events", "1")
	f := r.Frame()
	if !strings.HasSuffix(f, "\n\n1") {
		t.Fatalf("got %q", f)
	}
	// A plain UNSUBSCRIBE detaches but keeps the subscription.
	r.Write("ACK\nid:" + stomptest.Header(f, "ack") + "\n\n\x00UNSUBSCRIBE\nid:1\nreceipt:u\n\n\x00")
	if f := r.Frame(); stomptest.Header(f, "receipt-id") != "u" {
		t.Fatalf("got %q", f)
	}
	stomptest.Send(t, p, "/topic/events", "2")
	r.Write("DISCONNECT\nreceipt:d\n\n\x00")
	r.Frame()
	stomptest.Send(t, p, "/topic/events", "3", gostomp.SendOpt.Receipt)
	if st := tb.Core.Queue("auditor.audit").Stats(); st.Depth != 2 {
		t.Fatalf("durable subscription holds %d messages while away, want 2", st.Depth)
	}
	c2 := tb.Dial(t, gostomp.ConnOpt.Header("client-id", "auditor"))
	s2 := stomptest.Subscribe(t, c2, "/topic/events", gostomp.AckClientIndividual, gostomp.SubscribeOpt.Header("durable-subscription-name", "audit"))
	for _, want := range []string{"2", "3"} {
		m := stomptest.Next(t, s2)
		if string(m.Body) != want {
			t.Fatalf("got %q want %q", m.Body, want)
		}
		if err := c2.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	c2.Disconnect()
	// UNSUBSCRIBE naming the subscription deletes it.
	r2 := tb.Raw(t)
	r2.Connect("client-id:auditor\n")
	r2.Write("UNSUBSCRIBE\nactivemq.subscriptionName:audit\nreceipt:del\n\n\x00")
	if f := r2.Frame(); stomptest.Header(f, "receipt-id") != "del" {
		t.Fatalf("got %q", f)
	}
	if tb.Core.Queue("auditor.audit") != nil {
		t.Fatal("UNSUBSCRIBE with the subscription name left the durable subscription")
	}
}

func TestVersions(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	for _, v := range []gostomp.Version{gostomp.V10, gostomp.V11, gostomp.V12} {
		t.Run(string(v), func(t *testing.T) {
			c := tb.Dial(t, gostomp.ConnOpt.AcceptVersion(v))
			if c.Version() != v {
				t.Fatalf("negotiated %s", c.Version())
			}
			dest := "/queue/v" + strings.ReplaceAll(string(v), ".", "")
			s := stomptest.Subscribe(t, c, dest, gostomp.AckClientIndividual, gostomp.SubscribeOpt.Id("s1"))
			stomptest.Send(t, c, dest, "a")
			stomptest.Send(t, c, dest, "b")
			a := stomptest.Next(t, s)
			if err := c.Ack(a); err != nil {
				t.Fatal(err)
			}
			b := stomptest.Next(t, s)
			if v != gostomp.V10 {
				if err := c.Nack(b); err != nil {
					t.Fatal(err)
				}
				b = stomptest.Next(t, s)
			}
			if err := c.Ack(b); err != nil {
				t.Fatal(err)
			}
			q := strings.TrimPrefix(dest, "/queue/")
			waitFor(t, func() bool { return tb.Core.Queue(q).Stats().Dequeued == 2 })
		})
	}
	r := tb.Raw(t)
	r.Write("CONNECT\naccept-version:2.0\n\n\x00")
	if f := r.Frame(); !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "version") != "1.0,1.1,1.2" {
		t.Fatalf("got %q", f)
	}
	r.Closed()
}

func TestHeartBeatNegotiationAndTimeout(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{HeartBeatSend: 50 * time.Millisecond, HeartBeatReceive: 100 * time.Millisecond, HeartBeatGrace: 2})
	// The server can send every 50ms and the client wants 200ms: 200.
	// The client can send every 300ms and the server wants 100ms: 300.
	r := tb.Raw(t)
	f := r.Connect("heart-beat:300,200\n")
	if hb := stomptest.Header(f, "heart-beat"); hb != "200,300" {
		t.Fatalf("negotiated heart-beat %q, want 200,300", hb)
	}
	// Either side 0 disables that direction.
	r2 := tb.Raw(t)
	if hb := stomptest.Header(r2.Connect("heart-beat:0,0\n"), "heart-beat"); hb != "0,0" {
		t.Fatalf("heart-beat %q, want 0,0", hb)
	}
	// A client that promised 100ms beats and falls silent is cut off
	// after the grace period, with an ERROR.
	r3 := tb.Raw(t)
	r3.Connect("heart-beat:100,0\n")
	start := time.Now()
	f = r3.Frame()
	if !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "message") != "heart-beat timeout" {
		t.Fatalf("got %q", f)
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Fatalf("disconnected after %v, before the grace period", el)
	}
	r3.Closed()
	// The server beats to a client that asked for it.
	r4 := tb.Raw(t)
	r4.Connect("heart-beat:0,50\n")
	r4.Conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, err := r4.Reader.ReadByte()
	if err != nil || b != '\n' {
		t.Fatalf("heart-beat: %q %v", b, err)
	}
	// A client that beats stays connected: four beats and more, to a
	// server that cuts a silent client after ten missed ones (go-stomp's
	// beats come from a goroutine of its own, which a loaded machine may
	// run a couple of hundred milliseconds late).
	patient := stomptest.Start(t, stomp.Config{HeartBeatReceive: 100 * time.Millisecond, HeartBeatGrace: 10})
	c := patient.Dial(t, gostomp.ConnOpt.HeartBeat(50*time.Millisecond, 0))
	time.Sleep(400 * time.Millisecond)
	stomptest.Send(t, c, "/queue/alive", "x", gostomp.SendOpt.Receipt)
}

func TestMalformedFramesGetErrorThenClose(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{MaxFrameSize: 64 << 10, MaxHeaders: 10, MaxHeaderLength: 1024})
	// A well-behaved client keeps working throughout.
	good := tb.Dial(t)
	gs := stomptest.Subscribe(t, good, "/queue/good", gostomp.AckAuto)
	cases := []struct {
		name, connect, frame, message string
	}{
		{"frame before CONNECT", "-", "SEND\ndestination:/queue/x\n\nhi\x00", "not connected"},
		{"unknown command", "", "FLY\n\n\x00", "malformed frame"},
		{"missing destination", "", "SEND\n\nhi\x00", "missing destination"},
		{"undefined escape", "", "SEND\ndestination:/queue/x\nx:a\\tb\n\n\x00", "malformed frame"},
		{"content-length over the limit", "", "SEND\ndestination:/queue/x\ncontent-length:500000000\n\n", "malformed frame"},
		{"body over the limit", "", "SEND\ndestination:/queue/x\n\n" + strings.Repeat("x", 70<<10) + "\x00", "malformed frame"},
		{"bad content-length", "", "SEND\ndestination:/queue/x\ncontent-length:ten\n\nhi\x00", "malformed frame"},
		{"too many headers", "", "SEND\ndestination:/queue/x\n" + strings.Repeat("h:v\n", 11) + "\n\x00", "malformed frame"},
		{"header too long", "", "SEND\ndestination:/queue/x\nh:" + strings.Repeat("v", 2000) + "\n\n\x00", "malformed frame"},
		{"header without colon", "", "SEND\ndestination:/queue/x\nnocolon\n\n\x00", "malformed frame"},
		{"invalid priority", "", "SEND\ndestination:/queue/x\npriority:12\n\n\x00", "invalid priority"},
		{"unknown ack id", "", "ACK\nid:9-9\n\n\x00", "unknown ack id"},
		{"unknown transaction", "", "COMMIT\ntransaction:nope\n\n\x00", "unknown transaction"},
		{"subscribe without id", "", "SUBSCRIBE\ndestination:/queue/x\n\n\x00", "missing id"},
		{"bad ack mode", "", "SUBSCRIBE\ndestination:/queue/x\nid:1\nack:sometimes\n\n\x00", "invalid ack mode"},
		{"second CONNECT", "", "CONNECT\naccept-version:1.2\n\n\x00", "already connected"},
		{"bad heart-beat", "-", "CONNECT\naccept-version:1.2\nheart-beat:soon\n\n\x00", "invalid heart-beat header"},
		{"server frame from client", "", "MESSAGE\n\n\x00", "unexpected frame"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tb.Raw(t)
			if tc.connect != "-" {
				r.Connect(tc.connect)
			}
			r.Write(tc.frame)
			f := r.Frame()
			if !strings.HasPrefix(f, "ERROR\n") {
				t.Fatalf("want ERROR, got %q", f)
			}
			if msg := stomptest.Header(f, "message"); msg != tc.message {
				t.Fatalf("message %q, want %q (frame %q)", msg, tc.message, f)
			}
			if _, body, _ := strings.Cut(f, "\n\n"); body == "" {
				t.Fatal("ERROR without a body explaining it")
			}
			r.Closed()
			// The other client is unaffected.
			stomptest.Send(t, good, "/queue/good", fmt.Sprint(i))
			if m := stomptest.Next(t, gs); string(m.Body) != fmt.Sprint(i) {
				t.Fatalf("good client got %q", m.Body)
			}
		})
	}
}

func TestErrorCarriesReceiptID(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	r := tb.Raw(t)
	r.Connect("")
	r.Write("SEND\nreceipt:77\n\nx\x00")
	f := r.Frame()
	if stomptest.Header(f, "receipt-id") != "77" || stomptest.Header(f, "message") != "missing destination" {
		t.Fatalf("got %q", f)
	}
}

func TestMessageGroupsAndExclusiveConsumer(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	c1, c2 := tb.Dial(t), tb.Dial(t)
	s1 := stomptest.Subscribe(t, c1, "/queue/grp", gostomp.AckAuto)
	s2 := stomptest.Subscribe(t, c2, "/queue/grp", gostomp.AckAuto)
	for i := range 6 {
		stomptest.Send(t, p, "/queue/grp", fmt.Sprint(i), gostomp.SendOpt.Header("JMSXGroupID", "g"), gostomp.SendOpt.Receipt)
	}
	// The first consumer takes the group; every message of it follows.
	for i := range 6 {
		if m := stomptest.Next(t, s1); string(m.Body) != fmt.Sprint(i) {
			t.Fatalf("group message %d went elsewhere (got %q)", i, m.Body)
		}
	}
	stomptest.None(t, s2, 30*time.Millisecond)

	ex := tb.Dial(t)
	se := stomptest.Subscribe(t, ex, "/queue/excl", gostomp.AckAuto, gostomp.SubscribeOpt.Header("activemq.exclusive", "true"))
	other := stomptest.Subscribe(t, c1, "/queue/excl", gostomp.AckAuto)
	for i := range 4 {
		stomptest.Send(t, p, "/queue/excl", fmt.Sprint(i))
	}
	for i := range 4 {
		if m := stomptest.Next(t, se); string(m.Body) != fmt.Sprint(i) {
			t.Fatalf("exclusive got %q", m.Body)
		}
	}
	stomptest.None(t, other, 30*time.Millisecond)
}

func TestDetect(t *testing.T) {
	for in, want := range map[string]bool{
		"CONNECT\naccept-version:1.2\n": true,
		"STOMP\r\nhost:x\r\n":           true,
		"\nCONNECT\n":                   true,
		"GET / HTTP/1.1\r\n":            false,
		"CONN":                          false,
		"\x10\x0c\x00\x04MQTT":          false,
	} {
		if got := stomp.Detect([]byte(in)); got != want {
			t.Errorf("Detect(%q) = %v", in, got)
		}
	}
}

// A subscription on a queue that already holds messages is sent some
// during SUBSCRIBE itself, before the connection has recorded the
// consumer; the writer must still ack them (auto mode) through the
// delivery's own consumer. (Found by the crash test: a nil consumer.)
func TestAutoAckOfDeliveriesDuringSubscribe(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	for i := range 500 {
		stomptest.Send(t, p, "/queue/backlog", fmt.Sprint(i))
	}
	stomptest.Barrier(t, p)
	c := tb.Dial(t)
	// No barrier here: go-stomp cannot take a RECEIPT while its
	// subscription channel is full of the backlog we have not read yet.
	s, err := c.Subscribe("/queue/backlog", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if m := stomptest.Next(t, s); string(m.Body) != fmt.Sprint(i) {
			t.Fatalf("got %q want %d", m.Body, i)
		}
	}
	waitFor(t, func() bool { return tb.Core.Queue("backlog").Stats().Dequeued == 500 })
}
