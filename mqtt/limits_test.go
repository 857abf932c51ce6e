package mqtt_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/mqtt/mqtttest"
)

// closedWithin reads nc until the broker closes it and returns what it
// sent; it fails if nothing closes nc within 5 seconds.
func closedWithin(t *testing.T, nc net.Conn) []byte {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got bytes.Buffer
	_, err := io.Copy(&got, nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection not closed (read %x)", got.Bytes())
	}
	return got.Bytes()
}

// A client that has not sent all of its CONNECT within ConnectTimeout
// is closed; mochi alone would wait forever.
func TestConnectTimeout(t *testing.T) {
	tb := mqtttest.StartWith(t, mqtt.Config{ConnectTimeout: 200 * time.Millisecond})
	good := tb.Client(t, "good")
	ch := mqtttest.Inbox(t, good, "ok/#", 1)
	connect := []byte("\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00")
	for name, prefix := range map[string][]byte{
		"silent":       nil,
		"half CONNECT": connect[:6],
		"fixed header": connect[:2],
	} {
		t.Run(name, func(t *testing.T) {
			// Before dialing: the broker's clock starts at accept, which
			// can come before the dial returns here.
			start := time.Now()
			nc, err := net.Dial("tcp", tb.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Write(prefix)
			if got := closedWithin(t, nc); len(got) > 0 {
				t.Fatalf("broker sent %x", got)
			}
			if d := time.Since(start); d < 200*time.Millisecond {
				t.Fatalf("closed after %v, before the timeout", d)
			}
			mqtttest.Wait(t, good.Publish("ok/still", 1, false, name))
			if m := mqtttest.Next(t, ch); string(m.Payload()) != name {
				t.Fatalf("good client got %q", m.Payload())
			}
		})
	}
	// A client that connects in time is not cut off by the connect
	// timeout: mochi's keep-alive deadline replaces it.
	c := tb.Client(t, "slow-starter", func(o *paho.ClientOptions) { o.SetKeepAlive(30 * time.Second) })
	time.Sleep(400 * time.Millisecond)
	mqtttest.Wait(t, c.Publish("ok/later", 1, false, "later"))
	if m := mqtttest.Next(t, ch); string(m.Payload()) != "later" {
		t.Fatalf("good client got %q", m.Payload())
	}
}

func TestMaxSubscriptions(t *testing.T) {
	tb := mqtttest.StartWith(t, mqtt.Config{MaxSubscriptions: 2})

	// MQTT 3.1.1: 0x80, the only failure code.
	c := tb.Client(t, "v3")
	mqtttest.Wait(t, c.Subscribe("a", 1, nil))
	mqtttest.Wait(t, c.Subscribe("b", 1, nil))
	mqtttest.Wait(t, c.Subscribe("a", 0, nil)) // replaces a subscription: not counted
	tok := c.Subscribe("c", 1, nil)
	tok.WaitTimeout(5 * time.Second)
	st := tok.(*paho.SubscribeToken)
	if code := st.Result()["c"]; code != 0x80 {
		t.Fatalf("SUBACK code %#x past the limit, want 0x80", code)
	}
	mqtttest.Wait(t, c.Unsubscribe("a"))
	mqtttest.Wait(t, c.Subscribe("c", 1, nil))

	// MQTT 5: 0x97 quota exceeded, filter by filter.
	c5 := tb.Client5(t, "v5", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := c5.Client.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{
		{Topic: "x", QoS: 1}, {Topic: "y", QoS: 1}, {Topic: "z", QoS: 1},
	}})
	if sa == nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("% x", sa.Reasons); got != "01 01 97" {
		t.Fatalf("SUBACK reasons %s, want 01 01 97", got)
	}
	// The refused filter subscribed nothing; the others work.
	pub := tb.Client(t, "pub")
	mqtttest.Wait(t, pub.Publish("z", 1, false, "not for v5"))
	mqtttest.Wait(t, pub.Publish("y", 1, false, "for v5"))
	if p := c5.Next(t); p.Topic != "y" || string(p.Payload) != "for v5" {
		t.Fatalf("v5 client got %q on %s", p.Payload, p.Topic)
	}
}

// readPacket reads one MQTT packet and returns it whole.
func readPacket(t *testing.T, nc net.Conn) []byte {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 1, 5)
	if _, err := io.ReadFull(nc, hdr); err != nil {
		t.Fatal(err)
	}
	n, mult := 0, 1
	for {
		var b [1]byte
		if _, err := io.ReadFull(nc, b[:]); err != nil {
			t.Fatal(err)
		}
		hdr = append(hdr, b[0])
		n += int(b[0]&0x7f) * mult
		mult *= 128
		if b[0]&0x80 == 0 {
			break
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(nc, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// A packet over MaxPacketSize closes the connection: after DISCONNECT
// 0x95 (packet too large) on MQTT 5, without a word on 3.1.1, as the
// versions have it. Packets before it are served; other clients go on.
func TestPacketTooLarge(t *testing.T) {
	tb := mqtttest.StartWith(t, mqtt.Config{MaxPacketSize: 1024})
	good := tb.Client(t, "good")
	ch := mqtttest.Inbox(t, good, "ok/#", 1)
	// A PUBLISH with a remaining length of 2000 (varint d0 0f), of which
	// a few bytes are sent.
	tooLarge := []byte("\x30\xd0\x0f\x00\x09ok/bigxxxxxxxxx")
	for _, tc := range []struct {
		name, connect string
		before        string // a PUBLISH QoS 0 of "hi" to ok/before
		want          []byte
	}{
		{"3.1.1", "\x10\x0e\x00\x04MQTT\x04\x02\x00\x3c\x00\x02v3", "\x30\x0d\x00\x09ok/beforehi", nil},
		{"5", "\x10\x0f\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x02v5", "\x30\x0e\x00\x09ok/before\x00hi", []byte{0xe0, 0x02, 0x95, 0x00}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", tb.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Write([]byte(tc.connect))
			if ack := readPacket(t, nc); ack[0] != 0x20 || ack[3] != 0 {
				t.Fatalf("CONNACK %x", ack)
			}
			// Both in one write: the broker cuts between them.
			nc.Write(append([]byte(tc.before), tooLarge...))
			if got := closedWithin(t, nc); !bytes.Equal(got, tc.want) {
				t.Fatalf("broker sent %x before closing, want %x", got, tc.want)
			}
			if m := mqtttest.Next(t, ch); m.Topic() != "ok/before" || string(m.Payload()) != "hi" {
				t.Fatalf("the packet before the large one: %q on %s", m.Payload(), m.Topic())
			}
			mqtttest.Wait(t, good.Publish("ok/still", 1, false, tc.name))
			if m := mqtttest.Next(t, ch); string(m.Payload()) != tc.name {
				t.Fatalf("good client got %q", m.Payload())
			}
		})
	}
}

// Close does not wait for a connection still in its handshake (mochi's
// own Close waits for every connection it was given, and would wait for
// the connect timeout), and a connection arriving after Close is turned
// away.
func TestCloseDuringHandshake(t *testing.T) {
	tb := mqtttest.StartWith(t, mqtt.Config{ConnectTimeout: time.Minute})
	tb.Client(t, "good") // an established client too, which mochi disconnects
	nc, err := net.Dial("tcp", tb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write([]byte("\x10\x0c\x00\x04MQ")) // half a CONNECT
	time.Sleep(50 * time.Millisecond)      // let ServeConn take it (not asserted)
	done := make(chan struct{})
	go func() {
		tb.Server.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a connection in its handshake")
	}
	closedWithin(t, nc)
	late, err := net.Dial("tcp", tb.Addr)
	if err != nil {
		return // the listener may be gone already
	}
	defer late.Close()
	late.Write([]byte("\x10\x0e\x00\x04MQTT\x04\x02\x00\x3c\x00\x02v3"))
	closedWithin(t, late)
}
