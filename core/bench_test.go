package core

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkSendDispatchAck measures core alone: one message sent to an
// anycast queue, dispatched to a consumer with credit, acked, and the
// credit returned. One op is one message; allocs/op counts the Message
// itself.
func BenchmarkSendDispatchAck(b *testing.B) {
	benchSendDispatchAck(b, Config{ExpiryScanInterval: -1}, SessionOptions{})
}

// benchSendDispatchAck is BenchmarkSendDispatchAck on a broker and
// session configured by cfg and opts.
func benchSendDispatchAck(b *testing.B, cfg Config, opts SessionOptions) {
	br, _ := New(cfg)
	defer br.Close()
	s, _ := br.NewSession(opts)
	var last uint64
	c, err := s.Subscribe(ConsumerOptions{Address: "bench", RoutingType: Anycast, Credit: 1000,
		Handler: func(d Delivery) { last = d.ID }})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := s.Send(ctx, &Message{Address: "bench", RoutingType: Anycast, Body: payload}); err != nil {
			b.Fatal(err)
		}
		if err := c.Ack(last); err != nil {
			b.Fatal(err)
		}
		c.Flow(1)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkFanout10 sends to a multicast address with ten subscribers and
// acks every delivery; one op is one message sent (ten deliveries).
func BenchmarkFanout10(b *testing.B) {
	br, _ := New(Config{ExpiryScanInterval: -1})
	defer br.Close()
	s, _ := br.NewSession(SessionOptions{})
	type sub struct {
		c    *Consumer
		last uint64
	}
	subs := make([]*sub, 10)
	for i := range subs {
		x := &sub{}
		c, err := s.Subscribe(ConsumerOptions{Address: "fan", RoutingType: Multicast, Credit: 1000,
			Handler: func(d Delivery) { x.last = d.ID }})
		if err != nil {
			b.Fatal(err)
		}
		x.c = c
		subs[i] = x
	}
	payload := make([]byte, 1024)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Send(ctx, &Message{Address: "fan", RoutingType: Multicast, Body: payload}); err != nil {
			b.Fatal(err)
		}
		for _, x := range subs {
			if err := x.c.Ack(x.last); err != nil {
				b.Fatal(err)
			}
			x.c.Flow(1)
		}
	}
	b.ReportMetric(float64(b.N*10)/b.Elapsed().Seconds(), "deliveries/s")
}

// BenchmarkSelectiveDeepQueue sends one message a selective consumer
// takes to a queue that also holds depth messages it does not, then acks
// it and returns the credit. The cost per message must not grow with
// depth: sends are offered alone and the consumer does not look at the
// backlog again.
func BenchmarkSelectiveDeepQueue(b *testing.B) {
	for _, depth := range []int{0, 10000, 100000} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			br, _ := New(Config{ExpiryScanInterval: -1})
			defer br.Close()
			s, _ := br.NewSession(SessionOptions{})
			ctx := context.Background()
			blue := map[string]any{"color": "blue"}
			for range depth {
				if err := s.Send(ctx, &Message{Address: "q", RoutingType: Anycast, Priority: DefaultPriority, Properties: blue}); err != nil {
					b.Fatal(err)
				}
			}
			var last uint64
			c, err := s.Subscribe(ConsumerOptions{Address: "q", RoutingType: Anycast, Credit: 1, Selector: "color = 'red'",
				Handler: func(d Delivery) { last = d.ID }})
			if err != nil {
				b.Fatal(err)
			}
			red := map[string]any{"color": "red"}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := s.Send(ctx, &Message{Address: "q", RoutingType: Anycast, Priority: DefaultPriority, Properties: red}); err != nil {
					b.Fatal(err)
				}
				if err := c.Ack(last); err != nil {
					b.Fatal(err)
				}
				c.Flow(1)
			}
		})
	}
}

// allowAll is an Authorizer that grants everything, for measuring the
// cost of the checks.
type allowAllAuthz struct{}

func (allowAllAuthz) Authorize(string, Permission, string) bool { return true }

// BenchmarkSendDispatchAckAuthz is BenchmarkSendDispatchAck with an
// Authorizer and a client session (one that core checks): the send
// permission comes from the session's cache after the first send.
func BenchmarkSendDispatchAckAuthz(b *testing.B) {
	benchSendDispatchAck(b, Config{ExpiryScanInterval: -1, Authorizer: allowAllAuthz{}}, SessionOptions{User: "bench", Protocol: "bench"})
}

// BenchmarkWildcardSendDispatchAck is BenchmarkSendDispatchAck through a
// subscription bound to a wildcard pattern: one message sent to a
// multicast address, routed to the subscription on bench.#, dispatched,
// acked and the credit returned.
func BenchmarkWildcardSendDispatchAck(b *testing.B) {
	benchWildcard(b, Config{ExpiryScanInterval: -1}, SessionOptions{})
}

// BenchmarkWildcardSendDispatchAckAuthz is BenchmarkWildcardSendDispatchAck
// with an Authorizer and a client session: each message is checked for
// the subscriber at routing and for the consumer at dispatch, both from
// the subscription's cache after the first message.
func BenchmarkWildcardSendDispatchAckAuthz(b *testing.B) {
	benchWildcard(b, Config{ExpiryScanInterval: -1, Authorizer: allowAllAuthz{}}, SessionOptions{User: "bench", Protocol: "bench"})
}

func benchWildcard(b *testing.B, cfg Config, opts SessionOptions) {
	br, _ := New(cfg)
	defer br.Close()
	s, _ := br.NewSession(opts)
	var last uint64
	c, err := s.Subscribe(ConsumerOptions{Address: "bench.#", RoutingType: Multicast, Credit: 1000,
		Handler: func(d Delivery) { last = d.ID }})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := s.Send(ctx, &Message{Address: "bench.x", RoutingType: Multicast, Body: payload}); err != nil {
			b.Fatal(err)
		}
		if err := c.Ack(last); err != nil {
			b.Fatal(err)
		}
		c.Flow(1)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
