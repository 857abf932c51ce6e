package stomp_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/stomp"
)

func withSelector(sel string) func(*frame.Frame) error {
	return gostomp.SubscribeOpt.Header("selector", sel)
}

func colour(c string) func(*frame.Frame) error { return gostomp.SendOpt.Header("colour", c) }

// A queue subscriber with a selector receives only what it selects; the
// rest stays in the queue, in order, for a plain subscriber.
func TestSelectorOnQueueSubscription(t *testing.T) {
	tb := startBroker(t, stomp.Config{})
	p := tb.dial(t)
	c1, c2 := tb.dial(t), tb.dial(t)
	reds := subscribe(t, c1, "/queue/paint", gostomp.AckClientIndividual, withSelector("colour = 'red'"))
	for i := range 10 {
		c := "blue"
		if i%3 == 0 {
			c = "red"
		}
		send(t, p, "/queue/paint", fmt.Sprint(i), colour(c))
	}
	barrier(t, p)
	for _, want := range []string{"0", "3", "6", "9"} {
		m := next(t, reds)
		if string(m.Body) != want || m.Header.Get("colour") != "red" {
			t.Fatalf("selective subscriber got %q (%s), want %s", m.Body, m.Header.Get("colour"), want)
		}
		if err := c1.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	none(t, reds, 50*time.Millisecond)
	if st := tb.broker.Queue("paint").Stats(); st.Depth != 6 {
		t.Fatalf("queue holds %d messages, want the 6 blue ones", st.Depth)
	}
	plain := subscribe(t, c2, "/queue/paint", gostomp.AckAuto)
	for _, want := range []string{"1", "2", "4", "5", "7", "8"} {
		if m := next(t, plain); string(m.Body) != want {
			t.Fatalf("plain subscriber got %q want %s", m.Body, want)
		}
	}
	// New messages keep going where they belong.
	send(t, p, "/queue/paint", "red-late", colour("red"))
	if m := next(t, reds); string(m.Body) != "red-late" {
		t.Fatalf("got %q", m.Body)
	}
	none(t, plain, 30*time.Millisecond)
}

// A topic subscription with a selector; mapped headers such as the
// priority are numbers, headers that become properties are strings.
func TestSelectorOnTopicSubscription(t *testing.T) {
	tb := startBroker(t, stomp.Config{})
	p := tb.dial(t)
	c := tb.dial(t)
	sel := subscribe(t, c, "/topic/prices", gostomp.AckAuto, withSelector("symbol LIKE 'A%' AND JMSPriority > 4 AND price <> '0'"))
	all := subscribe(t, c, "/topic/prices", gostomp.AckAuto)
	sends := []struct{ symbol, priority, price string }{
		{"AAPL", "9", "20"}, {"MSFT", "9", "30"}, {"AMZN", "1", "40"}, {"ABC", "5", "0"}, {"AXE", "7", "1"},
	}
	for i, s := range sends {
		send(t, p, "/topic/prices", fmt.Sprint(i), gostomp.SendOpt.Header("symbol", s.symbol),
			gostomp.SendOpt.Header("priority", s.priority), gostomp.SendOpt.Header("price", s.price))
	}
	for _, want := range []string{"0", "4"} {
		if m := next(t, sel); string(m.Body) != want {
			t.Fatalf("got %q want %s", m.Body, want)
		}
	}
	none(t, sel, 50*time.Millisecond)
	for range sends {
		next(t, all)
	}
}

// A durable subscription with a selector keeps only what it selects
// while its subscriber is away.
func TestDurableSubscriptionWithSelector(t *testing.T) {
	tb := startBroker(t, stomp.Config{})
	p := tb.dial(t)
	opts := []func(*frame.Frame) error{gostomp.SubscribeOpt.Header("durable-subscription-name", "eu"), withSelector("region = 'eu'")}
	c1, err := gostomp.Dial("tcp", tb.addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet, gostomp.ConnOpt.Header("client-id", "shop"))
	if err != nil {
		t.Fatal(err)
	}
	subscribe(t, c1, "/topic/orders", gostomp.AckClientIndividual, opts...)
	if err := c1.Disconnect(); err != nil {
		t.Fatal(err)
	}
	for i, r := range []string{"eu", "us", "eu", "asia"} {
		send(t, p, "/topic/orders", fmt.Sprint(i), gostomp.SendOpt.Header("region", r), gostomp.SendOpt.Header("persistent", "true"))
	}
	barrier(t, p)
	if st := tb.broker.Queue("shop.eu").Stats(); st.Depth != 2 {
		t.Fatalf("durable subscription holds %d messages while away, want 2", st.Depth)
	}
	c2 := tb.dial(t, gostomp.ConnOpt.Header("client-id", "shop"))
	s2 := subscribe(t, c2, "/topic/orders", gostomp.AckClientIndividual, opts...)
	for _, want := range []string{"0", "2"} {
		m := next(t, s2)
		if string(m.Body) != want || m.Header.Get("region") != "eu" {
			t.Fatalf("got %q (%s) want %s", m.Body, m.Header.Get("region"), want)
		}
		if err := c2.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	none(t, s2, 50*time.Millisecond)
}

func TestInvalidSelectorGetsError(t *testing.T) {
	tb := startBroker(t, stomp.Config{})
	for _, sel := range []string{"colour = ", "colour = 'red", "price > 'ten'", "a LIKE 5"} {
		r := tb.raw(t)
		r.connect("")
		r.write("SUBSCRIBE\ndestination:/queue/x\nid:1\nreceipt:r1\nselector:" + sel + "\n\n\x00")
		f := r.frame()
		if !strings.HasPrefix(f, "ERROR\n") || header(f, "message") != "invalid selector" || header(f, "receipt-id") != "r1" {
			t.Fatalf("selector %q: got %q", sel, f)
		}
		if _, body, _ := strings.Cut(f, "\n\n"); !strings.Contains(body, sel) || !strings.Contains(body, "offset") {
			t.Fatalf("selector %q: ERROR body %q does not say what and where", sel, body)
		}
		r.closed()
	}
	if q := tb.broker.Queue("x"); q != nil && q.Stats().Consumers != 0 {
		t.Fatal("a refused SUBSCRIBE left a consumer")
	}
}
