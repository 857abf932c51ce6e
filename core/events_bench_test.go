package core

import (
	"context"
	"testing"
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
