package core

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSendDispatchAckEvents is BenchmarkSendDispatchAck with broker
// events on and a subscriber of the notification address: the send path
// pays nothing for events it does not cause.
func BenchmarkSendDispatchAckEvents(b *testing.B) {
	benchSendDispatchAck(b, Config{ExpiryScanInterval: -1, Events: EventsConfig{Enabled: true}}, SessionOptions{})
}

// BenchmarkSendDropFlood sends to a DROP queue that is always full, so
// that every send drops a message for that queue; with events on each
// drop is an event (a flood the bounded buffer sheds). Compare
// events=off and events=on: the sends must cost about the same.
func BenchmarkSendDropFlood(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "events=off"
		if on {
			name = "events=on"
		}
		b.Run(name, func(b *testing.B) {
			one := int64(1)
			drop := string(FullDrop)
			br, _ := New(Config{ExpiryScanInterval: -1, Events: EventsConfig{Enabled: on, Buffer: 1000},
				AddressSettings: []AddressSettings{{Match: "full", MaxSizeBytes: &one, FullPolicy: &drop}}})
			defer br.Close()
			s, _ := br.NewSession(SessionOptions{})
			// A subscriber of the events that takes them (credit), so
			// that publishing them is real work.
			if on {
				var c *Consumer
				c, _ = s.Subscribe(ConsumerOptions{Address: DefaultNotificationAddress, RoutingType: Multicast, Credit: 1 << 30,
					Handler: func(d Delivery) { go c.Ack(d.ID) }})
			}
			ctx := context.Background()
			s.Send(ctx, &Message{Address: "full", RoutingType: Anycast, Body: []byte("first")})
			payload := make([]byte, 128)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := s.Send(ctx, &Message{Address: "full", RoutingType: Anycast, Body: payload}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			st := br.EventStats()
			b.ReportMetric(float64(st.Dropped)/float64(b.N), "events-dropped/op")
		})
	}
}

// BenchmarkSessionOpenClose opens and closes a client's session, what
// every connection does, with events off, on with nobody subscribed to
// the notification address, and on with a subscriber. One op is one
// session; the time includes publishing its two events (the loop waits
// for the publisher at the end). Run with -cpu 1 so that the
// publisher's goroutine shares the one P with the loop and its work is
// counted in ns/op.
func BenchmarkSessionOpenClose(b *testing.B) {
	for _, mode := range []string{"events=off", "events=on", "events=on,subscriber"} {
		b.Run(mode, func(b *testing.B) {
			on := mode != "events=off"
			br, _ := New(Config{ExpiryScanInterval: -1, Events: EventsConfig{Enabled: on, Buffer: 1 << 20}})
			defer br.Close()
			if mode == "events=on,subscriber" {
				// Acked in batches by a goroutine of its own (a handler
				// runs with the queue's lock held).
				watch, _ := br.NewSession(SessionOptions{})
				var last atomic.Uint64
				c, _ := watch.Subscribe(ConsumerOptions{Address: DefaultNotificationAddress, RoutingType: Multicast, Credit: 1 << 30,
					Handler: func(d Delivery) { last.Store(d.ID) }})
				stop := make(chan struct{})
				defer close(stop)
				go func() {
					for acked := uint64(0); ; {
						select {
						case <-stop:
							return
						case <-time.After(time.Millisecond):
						}
						if l := last.Load(); l != acked {
							c.AckUpTo(l)
							acked = l
						}
					}
				}()
			}
			opts := SessionOptions{Protocol: "stomp", User: "guest", RemoteAddr: "127.0.0.1:40000"}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				s, err := br.NewSession(opts)
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
			}
			if on {
				want := uint64(2 * b.N)
				for st := br.EventStats(); st.Published+st.Dropped < want; st = br.EventStats() {
					runtime.Gosched()
				}
			}
			b.StopTimer()
			if on {
				b.ReportMetric(float64(br.EventStats().Dropped)/float64(b.N), "events-dropped/op")
			}
		})
	}
}
