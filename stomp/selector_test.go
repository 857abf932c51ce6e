package stomp_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

func withSelector(sel string) func(*frame.Frame) error {
	return gostomp.SubscribeOpt.Header("selector", sel)
}

func colour(c string) func(*frame.Frame) error { return gostomp.SendOpt.Header("colour", c) }

// A queue subscriber with a selector receives only what it selects; the
// rest stays in the queue, in order, for a plain subscriber.
func TestSelectorOnQueueSubscription(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	c1, c2 := tb.Dial(t), tb.Dial(t)
	reds := stomptest.Subscribe(t, c1, "/queue/paint", gostomp.AckClientIndividual, withSelector("colour = 'red'"))
	for i := range 10 {
		c := "blue"
		if i%3 == 0 {
			c = "red"
		}
		stomptest.Send(t, p, "/queue/paint", fmt.Sprint(i), colour(c))
	}
	stomptest.Barrier(t, p)
	for _, want := range []string{"0", "3", "6", "9"} {
		m := stomptest.Next(t, reds)
		if string(m.Body) != want || m.Header.Get("colour") != "red" {
			t.Fatalf("selective subscriber got %q (%s), want %s", m.Body, m.Header.Get("colour"), want)
		}
		if err := c1.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	stomptest.None(t, reds, 50*time.Millisecond)
	if st := tb.Core.Queue("paint").Stats(); st.Depth != 6 {
		t.Fatalf("queue holds %d messages, want the 6 blue ones", st.Depth)
	}
	plain := stomptest.Subscribe(t, c2, "/queue/paint", gostomp.AckAuto)
	for _, want := range []string{"1", "2", "4", "5", "7", "8"} {
		if m := stomptest.Next(t, plain); string(m.Body) != want {
			t.Fatalf("plain subscriber got %q want %s", m.Body, want)
		}
	}
	// New messages keep going where they belong.
	stomptest.Send(t, p, "/queue/paint", "red-late", colour("red"))
	if m := stomptest.Next(t, reds); string(m.Body) != "red-late" {
		t.Fatalf("got %q", m.Body)
	}
	stomptest.None(t, plain, 30*time.Millisecond)
}

// A topic subscription with a selector; mapped headers such as the
// priority are numbers, headers that become properties are strings.
func TestSelectorOnTopicSubscription(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	c := tb.Dial(t)
	sel := stomptest.Subscribe(t, c, "/topic/prices", gostomp.AckAuto, withSelector("symbol LIKE 'A%' AND JMSPriority > 4 AND price <> '0'"))
	all := stomptest.Subscribe(t, c, "/topic/prices", gostomp.AckAuto)
	sends := []struct{ symbol, priority, price string }{
		{"AAPL", "9", "20"}, {"MSFT", "9", "30"}, {"AMZN", "1", "40"}, {"ABC", "5", "0"}, {"AXE", "7", "1"},
	}
	for i, s := range sends {
		stomptest.Send(t, p, "/topic/prices", fmt.Sprint(i), gostomp.SendOpt.Header("symbol", s.symbol),
			gostomp.SendOpt.Header("priority", s.priority), gostomp.SendOpt.Header("price", s.price))
	}
	for _, want := range []string{"0", "4"} {
		if m := stomptest.Next(t, sel); string(m.Body) != want {
			t.Fatalf("got %q want %s", m.Body, want)
		}
	}
	stomptest.None(t, sel, 50*time.Millisecond)
	for range sends {
		stomptest.Next(t, all)
	}
}

// A durable subscription with a selector keeps only what it selects
// while its subscriber is away.
func TestDurableSubscriptionWithSelector(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	p := tb.Dial(t)
	opts := []func(*frame.Frame) error{gostomp.SubscribeOpt.Header("durable-subscription-name", "eu"), withSelector("region = 'eu'")}
	c1, err := gostomp.Dial("tcp", tb.Addr, gostomp.ConnOpt.HeartBeat(0, 0), stomptest.Quiet, gostomp.ConnOpt.Header("client-id", "shop"))
	if err != nil {
		t.Fatal(err)
	}
	stomptest.Subscribe(t, c1, "/topic/orders", gostomp.AckClientIndividual, opts...)
	if err := c1.Disconnect(); err != nil {
		t.Fatal(err)
	}
	for i, r := range []string{"eu", "us", "eu", "asia"} {
		stomptest.Send(t, p, "/topic/orders", fmt.Sprint(i), gostomp.SendOpt.Header("region", r), gostomp.SendOpt.Header("persistent", "true"))
	}
	stomptest.Barrier(t, p)
	if st := tb.Core.Queue("shop.eu").Stats(); st.Depth != 2 {
		t.Fatalf("durable subscription holds %d messages while away, want 2", st.Depth)
	}
	c2 := tb.Dial(t, gostomp.ConnOpt.Header("client-id", "shop"))
	s2 := stomptest.Subscribe(t, c2, "/topic/orders", gostomp.AckClientIndividual, opts...)
	for _, want := range []string{"0", "2"} {
		m := stomptest.Next(t, s2)
		if string(m.Body) != want || m.Header.Get("region") != "eu" {
			t.Fatalf("got %q (%s) want %s", m.Body, m.Header.Get("region"), want)
		}
		if err := c2.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	stomptest.None(t, s2, 50*time.Millisecond)
}

func TestInvalidSelectorGetsError(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	for _, sel := range []string{"colour = ", "colour = 'red", "price > 'ten'", "a LIKE 5"} {
		r := tb.Raw(t)
		r.Connect("")
		r.Write("SUBSCRIBE\ndestination:/queue/x\nid:1\nreceipt:r1\nselector:" + sel + "\n\n\x00")
		f := r.Frame()
		if !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "message") != "invalid selector" || stomptest.Header(f, "receipt-id") != "r1" {
			t.Fatalf("selector %q: got %q", sel, f)
		}
		if _, body, _ := strings.Cut(f, "\n\n"); !strings.Contains(body, sel) || !strings.Contains(body, "offset") {
			t.Fatalf("selector %q: ERROR body %q does not say what and where", sel, body)
		}
		r.Closed()
	}
	if q := tb.Core.Queue("x"); q != nil && q.Stats().Consumers != 0 {
		t.Fatal("a refused SUBSCRIBE left a consumer")
	}
}
