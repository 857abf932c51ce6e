package mqtt_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/mqtt/mqtttest"
)

// limited is address settings bounding addr's queues to max body bytes
// with the given address-full-policy.
func limited(addr string, max int64, policy string) core.AddressSettings {
	return core.AddressSettings{Match: addr, MaxSizeBytes: &max, FullPolicy: &policy}
}

func limitedConfig(addr string, max int64, policy string) core.Config {
	return core.Config{AddressSettings: []core.AddressSettings{limited(addr, max, policy)}}
}

func depth(tb *mqtttest.Broker, queue string) int64 {
	if q := tb.Core.Queue(queue); q != nil {
		return q.Stats().Depth
	}
	return -1
}

// mqttConns sums the dropped and refused counts of the MQTT connections.
func mqttConns(b *core.Broker) (dropped, refused uint64) {
	for _, c := range b.Connections() {
		if c.Protocol == "mqtt" {
			dropped += c.Dropped
			refused += c.Refused
		}
	}
	return dropped, refused
}

// drain consumes n messages from the anycast address addr through core,
// acking each, and returns their bodies.
func drain(t *testing.T, b *core.Broker, addr string, n int) []string {
	t.Helper()
	s, err := b.NewSession(core.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ch := make(chan core.Delivery, n)
	c, err := s.Subscribe(core.ConsumerOptions{Address: addr, RoutingType: core.Anycast, Credit: 5,
		Handler: func(d core.Delivery) { ch <- d }})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for range n {
		select {
		case d := <-ch:
			out = append(out, string(d.Message.Body))
			if err := c.Ack(d.ID); err != nil {
				t.Fatal(err)
			}
			c.Flow(1)
		case <-time.After(5 * time.Second):
			t.Fatalf("drained %d of %d messages", len(out), n)
		}
	}
	return out
}

// An MQTT 5 publish to a full FAIL address is answered with reason 0x97
// (quota exceeded), in the PUBACK of QoS 1 (pipelined or not) and the
// PUBREC of QoS 2; a QoS 0 publish is dropped. The connection stays up.
func TestFullFailQuotaExceededMQTT5(t *testing.T) {
	tb := mqtttest.StartFull(t, mqtt.Config{}, limitedConfig("fail", 10, "FAIL"), "fail")
	pub := tb.Client5(t, "p", 0)
	if r := pub.Publish(t, &paho5.Publish{Topic: "fail", QoS: 1, Payload: []byte("12345678")}); r == nil || r.ReasonCode != 0 {
		t.Fatalf("first publish: %+v", r)
	}
	for _, p := range []*paho5.Publish{
		{Topic: "fail", QoS: 1, Payload: []byte("pipelined")},
		{Topic: "fail", QoS: 1, Retain: true, Payload: []byte("retained")},
		{Topic: "fail", QoS: 2, Payload: []byte("exactly once")},
	} {
		if r := pub.Publish(t, p); r == nil || r.ReasonCode != 0x97 {
			t.Fatalf("publish QoS %d retain %v to a full address: %+v, want reason 0x97", p.QoS, p.Retain, r)
		}
	}
	pub.Publish(t, &paho5.Publish{Topic: "fail", QoS: 0, Payload: []byte("at most once")})
	// Still connected: a publish elsewhere goes through.
	if r := pub.Publish(t, &paho5.Publish{Topic: "other", QoS: 1, Payload: []byte("x")}); r == nil || r.ReasonCode != 0 {
		t.Fatalf("publish after the refusals: %+v", r)
	}
	if got := tb.Core.DropStats()[core.RefusedFull]; got != 4 {
		t.Fatalf("refused_full = %d, want 4", got)
	}
	if _, refused := mqttConns(tb.Core); refused != 4 {
		t.Fatalf("connection refused %d, want 4", refused)
	}
	if d := depth(tb, "fail"); d != 1 {
		t.Fatalf("depth %d, want 1", d)
	}
}

// MQTT 3.1.1 has no negative PUBACK: a QoS 1 publisher whose publish is
// refused (FAIL) is disconnected rather than told it was stored.
func TestFullFailDisconnectsMQTT311(t *testing.T) {
	tb := mqtttest.StartFull(t, mqtt.Config{}, limitedConfig("fail", 10, "FAIL"), "fail")
	lost := make(chan error, 1)
	c := tb.Client(t, "p311", func(o *paho.ClientOptions) {
		o.SetProtocolVersion(4).SetConnectionLostHandler(func(_ paho.Client, err error) { lost <- err })
	})
	mqtttest.Wait(t, c.Publish("fail", 1, false, "12345678"))
	c.Publish("fail", 1, false, "12345678") // its token may never complete
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("the MQTT 3.1.1 client was not disconnected")
	}
	if got := tb.Core.DropStats()[core.RefusedFull]; got != 1 {
		t.Fatalf("refused_full = %d, want 1", got)
	}
}

// With DROP, publishes to a full address are acknowledged and the
// messages dropped, counted for the broker and the connection.
func TestFullDropCounts(t *testing.T) {
	tb := mqtttest.StartFull(t, mqtt.Config{}, limitedConfig("drop", 10, "DROP"), "drop")
	pub := tb.Client5(t, "p", 0)
	for i := range 3 {
		if r := pub.Publish(t, &paho5.Publish{Topic: "drop", QoS: 1, Payload: fmt.Appendf(nil, "message%d", i)}); r == nil || r.ReasonCode != 0 {
			t.Fatalf("publish %d: %+v", i, r)
		}
	}
	if d := depth(tb, "drop"); d != 1 {
		t.Fatalf("depth %d, want 1", d)
	}
	if got := tb.Core.DropStats()[core.DropFull]; got != 2 {
		t.Fatalf("queue_full drops = %d, want 2", got)
	}
	if dropped, refused := mqttConns(tb.Core); dropped != 2 || refused != 0 {
		t.Fatalf("connection dropped %d refused %d, want 2 and 0", dropped, refused)
	}
	if got := drain(t, tb.Core, "drop", 1); got[0] != "message0" {
		t.Fatalf("got %q, want message0", got[0])
	}
}

// With BLOCK, the bridge's hook waits in core while the address is full,
// so mochi stops reading the publisher's connection: a QoS 1 publish gets
// no PUBACK until a consumer makes room; then every message arrives, in
// order.
func TestFullBlockStallsPublisher(t *testing.T) {
	for _, qos := range []byte{1, 2} {
		t.Run(fmt.Sprintf("qos=%d", qos), func(t *testing.T) {
			const n = 40
			tb := mqtttest.StartFull(t, mqtt.Config{}, limitedConfig("block", 100, "BLOCK"), "block")
			pub := tb.Client5(t, "p", 0)
			var sent atomic.Int32
			errc := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				for i := range n {
					r, err := pub.Client.Publish(ctx, &paho5.Publish{Topic: "block", QoS: qos, Payload: fmt.Appendf(nil, "message%03d", i)})
					if err == nil && r != nil && r.ReasonCode >= 0x80 {
						err = fmt.Errorf("reason %#x", r.ReasonCode)
					}
					if err != nil {
						errc <- fmt.Errorf("publish %d: %w", i, err)
						return
					}
					sent.Add(1)
				}
				errc <- nil
			}()
			// Ten 10-byte messages fill the queue.
			testserve.Eventually(t, "the queue to fill", func() bool { return depth(tb, "block") >= 10 })
			select {
			case err := <-errc:
				t.Fatalf("the publisher finished (%v) while the address was full; %d sent", err, sent.Load())
			case <-time.After(500 * time.Millisecond):
			}
			if d := depth(tb, "block"); d != 10 {
				t.Fatalf("depth %d while blocked, want 10", d)
			}
			for i, got := range drain(t, tb.Core, "block", n) {
				if want := fmt.Sprintf("message%03d", i); got != want {
					t.Fatalf("message %d: got %q, want %q", i, got, want)
				}
			}
			select {
			case err := <-errc:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the publisher did not resume: %d of %d sent", sent.Load(), n)
			}
		})
	}
}

// A publisher waiting for room (BLOCK) can still be closed by an
// administrator, and does not hold up the server's Close.
func TestFullBlockedPublisherCanBeClosed(t *testing.T) {
	blocked := func(t *testing.T, tb *mqtttest.Broker) {
		t.Helper()
		pub := tb.Client5(t, "p", 0)
		if r := pub.Publish(t, &paho5.Publish{Topic: "block", QoS: 1, Payload: []byte("12345678")}); r == nil || r.ReasonCode != 0 {
			t.Fatalf("first publish: %+v", r)
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pub.Client.Publish(ctx, &paho5.Publish{Topic: "block", QoS: 1, Payload: []byte("12345678")})
		}()
		time.Sleep(100 * time.Millisecond) // let the publish reach core's wait
	}
	t.Run("admin", func(t *testing.T) {
		tb := mqtttest.StartFull(t, mqtt.Config{}, limitedConfig("block", 10, "BLOCK"), "block")
		blocked(t, tb)
		var id uint64
		for _, c := range tb.Core.Connections() {
			id = c.ID
		}
		if err := tb.Core.CloseConnection(id); err != nil {
			t.Fatal(err)
		}
		testserve.Eventually(t, "the session to close", func() bool { return len(tb.Core.Connections()) == 0 })
		if d := depth(tb, "block"); d != 1 {
			t.Fatalf("depth %d, want 1: the blocked message must not be taken", d)
		}
	})
	t.Run("server close", func(t *testing.T) {
		tb := mqtttest.StartFull(t, mqtt.Config{}, limitedConfig("block", 10, "BLOCK"), "block")
		blocked(t, tb)
		done := make(chan struct{})
		go func() { tb.Server.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Close waits for a publisher blocked on a full address")
		}
	})
}
