package mqtt_test

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/mqtt/mqtttest"
)

// startGuarded starts a broker with bcfg and an MQTT server with cfg.
func startGuarded(t *testing.T, bcfg core.Config, cfg mqtt.Config) *mqtttest.Broker {
	t.Helper()
	b, err := core.New(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	return mqtttest.Serve(t, b, cfg)
}

// remainingLength encodes n as an MQTT Variable Byte Integer.
func remainingLength(n int) []byte {
	var b []byte
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			b = append(b, d|0x80)
			continue
		}
		return append(b, d)
	}
}

// connectHead is the start of a CONNECT declaring a remaining length of
// remaining, up to its protocol level.
func connectHead(level byte, remaining int) []byte {
	b := append([]byte{0x10}, remainingLength(remaining)...)
	return append(b, "\x00\x04MQTT"+string(level)...)
}

func mqttRefusals(b *core.Broker, reason string) uint64 {
	return b.GuardStats().PreAuthRefused["mqtt"][reason]
}

// A CONNECT declaring more than the pre-authentication limit is refused
// before its body is read: CONNACK 0x95 (packet too large) on MQTT 5, a
// plain close on 3.1.1 (it has no such code). Clients that log in may
// still publish packets up to MaxPacketSize, and others go on.
func TestPreAuthConnectTooLarge(t *testing.T) {
	tb := startGuarded(t, core.Config{}, mqtt.Config{PreAuthMaxPacketSize: 4 << 10})
	good := tb.Client(t, "good")
	ch := mqtttest.Inbox(t, good, "ok/#", 1)
	for _, tc := range []struct {
		name string
		head []byte
		want []byte
	}{
		{"3.1.1, 10 MiB", connectHead(4, 10<<20), nil},
		{"5, 10 MiB", connectHead(5, 10<<20), []byte{0x20, 0x03, 0x00, 0x95, 0x00}},
		{"5, just over", connectHead(5, 4<<10), []byte{0x20, 0x03, 0x00, 0x95, 0x00}},
		{"fixed header only", append([]byte{0x10}, remainingLength(10<<20)...), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := mqttRefusals(tb.Core, core.PreAuthFrameTooLarge)
			nc := tb.DialRaw(t)
			nc.Write(tc.head)
			if got := closedWithin(t, nc); !bytes.Equal(got, tc.want) {
				t.Fatalf("broker sent %x before closing, want %x", got, tc.want)
			}
			if got := mqttRefusals(tb.Core, core.PreAuthFrameTooLarge); got != before+1 {
				t.Fatalf("frame_too_large refusals %d, want %d", got, before+1)
			}
			mqtttest.Wait(t, good.Publish("ok/still", 1, false, tc.name))
			if m := mqtttest.Next(t, ch); string(m.Payload()) != tc.name {
				t.Fatalf("good client got %q", m.Payload())
			}
		})
	}
	big := bytes.Repeat([]byte{'b'}, 16<<10)
	mqtttest.Wait(t, good.Publish("ok/big", 1, false, big))
	if m := mqtttest.Next(t, ch); !bytes.Equal(m.Payload(), big) {
		t.Fatalf("a logged-in client's %d-byte publish delivered %d bytes", len(big), len(m.Payload()))
	}
	if held := tb.Core.GuardStats().PreAuthHeld; held != 0 {
		t.Fatalf("the budget holds %d bytes with every client logged in or gone", held)
	}
}

// CONNECTs in progress share the broker's pre-authentication budget: a
// client it has no room for gets CONNACK server busy (0x89 on MQTT 5,
// 0x03 server unavailable on 3.1.1), and once the bytes held are given
// back clients connect again.
func TestPreAuthBudget(t *testing.T) {
	tb := startGuarded(t, core.Config{PreAuthBudget: 10 << 10}, mqtt.Config{})
	hog := tb.DialRaw(t)
	// 5000 of a declared 8000 bytes: the broker's buffer has grown to
	// the whole packet, charged, while it waits for the rest.
	hog.Write(append(connectHead(4, 8000), bytes.Repeat([]byte{0}, 5000)...))
	testserve.Eventually(t, "the first client's bytes to be charged", func() bool {
		return tb.Core.GuardStats().PreAuthHeld >= 8000
	})
	for _, tc := range []struct {
		level byte
		want  []byte
	}{
		{5, []byte{0x20, 0x03, 0x00, 0x89, 0x00}},
		{4, []byte{0x20, 0x02, 0x00, 0x03}},
	} {
		nc := tb.DialRaw(t)
		nc.Write(append(connectHead(tc.level, 8000), bytes.Repeat([]byte{0}, 3000)...))
		if got := closedWithin(t, nc); !bytes.Equal(got, tc.want) {
			t.Fatalf("level %d: broker sent %x before closing, want %x", tc.level, got, tc.want)
		}
	}
	if got := mqttRefusals(tb.Core, core.PreAuthBudget); got != 2 {
		t.Fatalf("budget refusals %d, want 2", got)
	}
	hog.Close()
	testserve.Eventually(t, "the budget to be given back", func() bool { return tb.Core.GuardStats().PreAuthHeld == 0 })
	tb.Client(t, "after")
}

// publishPacket is a QoS 0 PUBLISH of payload to topic.
func publishPacket(topic string, payload []byte, v5 bool) []byte {
	vh := append([]byte{byte(len(topic) >> 8), byte(len(topic))}, topic...)
	if v5 {
		vh = append(vh, 0x00) // no properties
	}
	body := append(vh, payload...)
	return append(append([]byte{0x30}, remainingLength(len(body))...), body...)
}

// After CONNECT (keep-alive 0: mochi sets no deadline of its own), a
// packet trickled a byte at a time is cut once FrameTimeout has passed,
// after DISCONNECT 0x8D on MQTT 5; a large PUBLISH uploaded steadily
// above FrameMinRate takes far longer and is delivered.
func TestFrameTimeout(t *testing.T) {
	tb := startGuarded(t, core.Config{}, mqtt.Config{FrameTimeout: 300 * time.Millisecond, FrameMinRate: 64 << 10})
	for _, tc := range []struct {
		name, connect string
		v5            bool
		want          []byte
	}{
		{"3.1.1", "\x10\x0e\x00\x04MQTT\x04\x02\x00\x00\x00\x02v3", false, nil},
		{"5", "\x10\x0f\x00\x04MQTT\x05\x02\x00\x00\x00\x00\x02v5", true, []byte{0xe0, 0x02, 0x8d, 0x00}},
	} {
		t.Run("trickle "+tc.name, func(t *testing.T) {
			before := tb.Core.GuardStats().FrameTimeouts["mqtt"]
			nc := tb.DialRaw(t)
			nc.Write([]byte(tc.connect))
			if ack := readPacket(t, nc); ack[0] != 0x20 || ack[3] != 0 {
				t.Fatalf("CONNACK %x", ack)
			}
			stop := make(chan struct{})
			defer close(stop)
			start := time.Now()
			go trickle(nc, publishPacket("slow/t", bytes.Repeat([]byte{'z'}, 1000), tc.v5), 20*time.Millisecond, stop)
			if got := closedWithin(t, nc); !bytes.Equal(got, tc.want) {
				t.Fatalf("broker sent %x before closing, want %x", got, tc.want)
			}
			if d := time.Since(start); d < 300*time.Millisecond {
				t.Fatalf("cut after %v, before the frame timeout", d)
			}
			if n := tb.Core.GuardStats().FrameTimeouts["mqtt"]; n != before+1 {
				t.Fatalf("frame timeouts %d, want %d", n, before+1)
			}
		})
	}
	t.Run("steady upload", func(t *testing.T) {
		tb := startGuarded(t, core.Config{}, mqtt.Config{FrameTimeout: time.Second, FrameMinRate: 64 << 10})
		good := tb.Client(t, "good")
		ch := mqtttest.Inbox(t, good, "slow/#", 0)
		nc := tb.DialRaw(t)
		nc.Write([]byte("\x10\x0e\x00\x04MQTT\x04\x02\x00\x00\x00\x02up"))
		if ack := readPacket(t, nc); ack[0] != 0x20 || ack[3] != 0 {
			t.Fatalf("CONNACK %x", ack)
		}
		payload := bytes.Repeat([]byte{'s'}, 512<<10)
		pkt := publishPacket("slow/big", payload, false)
		// 8 KiB every 50ms, about 160 KiB/s: some 3.2s in all, past the
		// 1s timeout but above the minimum rate.
		start := time.Now()
		for i := 0; i < len(pkt); i += 8 << 10 {
			time.Sleep(50 * time.Millisecond)
			if _, err := nc.Write(pkt[i:min(i+8<<10, len(pkt))]); err != nil {
				t.Fatalf("upload cut after %v: %v", time.Since(start), err)
			}
		}
		if d := time.Since(start); d < 2*time.Second {
			t.Fatalf("the upload took only %v", d)
		}
		if m := mqtttest.Next(t, ch); !bytes.Equal(m.Payload(), payload) {
			t.Fatalf("delivered %d bytes", len(m.Payload()))
		}
	})
}

// trickle writes b to nc a byte every interval until stop is closed or
// the connection fails.
func trickle(nc net.Conn, b []byte, interval time.Duration, stop <-chan struct{}) {
	for i := range b {
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
		if _, err := nc.Write(b[i : i+1]); err != nil {
			return
		}
	}
}
