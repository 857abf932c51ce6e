package mqtt_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/junctionmq/junction/internal/e2e/e2etest"
	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/mqtt/mqtttest"
)

// startLargeBroker starts a broker with a journal and a large-message
// store (threshold 64 KiB); it returns the store's directory.
func startLargeBroker(t *testing.T, cfg mqtt.Config) (*mqtttest.Broker, string) {
	t.Helper()
	bcfg, dir := e2etest.Large(t)
	return mqtttest.StartFull(t, cfg, bcfg), dir
}

// waitNoFiles waits up to 10 s for the large-message store dir to be
// empty, running the collector (a delivered body's file goes once
// nothing references its message).
func waitNoFiles(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e2etest.CountFiles(t, dir) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d large-message files left", e2etest.CountFiles(t, dir))
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// Payloads above the threshold, and above MaxPacketSize, go to their
// files as they arrive and come back to paho subscribers from the files,
// at QoS 0, 1 and 2, MQTT 3.1.1 and 5 (with properties); a retained
// large message reaches a later subscriber. The files go once delivered.
func TestLargePublishStreamed(t *testing.T) {
	tb, dir := startLargeBroker(t, mqtt.Config{MaxPacketSize: 1 << 20})
	body := e2etest.Pattern(12<<20 + 9)
	sum := sha256.Sum256(body)
	sub := tb.Client(t, "sub")
	in := mqtttest.Inbox(t, sub, "big/#", 2)
	pub := tb.Client(t, "pub")
	for qos := byte(0); qos <= 2; qos++ {
		mqtttest.Wait(t, pub.Publish("big/a", qos, false, body))
		select {
		case m := <-in:
			if sha256.Sum256(m.Payload()) != sum {
				t.Fatalf("QoS %d: payload of %d bytes differs", qos, len(m.Payload()))
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("QoS %d: no message", qos)
		}
	}
	waitNoFiles(t, dir)

	// MQTT 5, user properties and content type with the large payload.
	c5 := tb.Connect5(t, "c5", 0, true)
	if code := c5.Subscribe(t, "big5", 1); code != 1 {
		t.Fatalf("SUBACK %#x", code)
	}
	p5 := tb.Connect5(t, "p5", 0, true)
	ct := "application/octet-stream"
	r := p5.Publish(t, &paho5.Publish{Topic: "big5", QoS: 1, Payload: body,
		Properties: &paho5.PublishProperties{ContentType: ct, User: paho5.UserProperties{{Key: "k", Value: "v"}}}})
	if r.ReasonCode != 0 {
		t.Fatalf("PUBACK %#x", r.ReasonCode)
	}
	select {
	case m := <-c5.Inbox:
		if sha256.Sum256(m.Payload) != sum || m.Properties.ContentType != ct || m.Properties.User.Get("k") != "v" {
			t.Fatalf("MQTT 5: %d bytes, properties %+v", len(m.Payload), m.Properties)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("MQTT 5: no message")
	}

	// Retained: kept by reference in a file of its own, given to a later
	// subscriber; cleared, its file goes.
	mqtttest.Wait(t, pub.Publish("big/retained", 1, true, body[:3<<20]))
	late := tb.Client(t, "late")
	lin := mqtttest.Inbox(t, late, "big/retained", 1)
	if m := mqtttest.Next(t, lin); !bytes.Equal(m.Payload(), body[:3<<20]) || !m.Retained() {
		t.Fatalf("retained: %d bytes, retained %v", len(m.Payload()), m.Retained())
	}
	for _, m := range tb.Core.Retained() {
		if m.Size() > 1000 && !m.Streamed() {
			t.Fatalf("the retained large message on %s is not held by reference", m.Address)
		}
	}
	mqtttest.Wait(t, pub.Publish("big/retained", 1, true, []byte{}))
	waitNoFiles(t, dir)
}

// rawConnect opens a connection and logs in as MQTT 3.1.1 client id.
func rawConnect(t *testing.T, addr, id string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	vh := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60}
	pl := binary.BigEndian.AppendUint16(nil, uint16(len(id)))
	pl = append(pl, id...)
	pkt := append([]byte{0x10, byte(len(vh) + len(pl))}, append(vh, pl...)...)
	if _, err := nc.Write(pkt); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 4)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(nc, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 {
		t.Fatalf("CONNACK % x %v", ack, err)
	}
	return nc
}

// publishHead is a QoS 1 PUBLISH's fixed and variable header announcing
// a payload of n bytes.
func publishHead(topic string, n int) []byte {
	vh := binary.BigEndian.AppendUint16(nil, uint16(len(topic)))
	vh = append(vh, topic...)
	vh = append(vh, 0, 1) // packet id
	rem := len(vh) + n
	h := []byte{0x32}
	for {
		b := byte(rem % 128)
		rem /= 128
		if rem > 0 {
			b |= 0x80
		}
		h = append(h, b)
		if rem == 0 {
			break
		}
	}
	return append(h, vh...)
}

// A publisher cut off mid-payload leaves no file and no message, and
// gets no PUBACK; a PUBLISH over MaxMessageSize closes the connection
// before its payload is read.
func TestLargePublishCutAndLimit(t *testing.T) {
	tb, dir := startLargeBroker(t, mqtt.Config{MaxMessageSize: 8 << 20})
	sub := tb.Client(t, "watch")
	in := mqtttest.Inbox(t, sub, "cut", 1)
	nc := rawConnect(t, tb.Addr, "cutter")
	nc.Write(publishHead("cut", 5<<20))
	nc.Write(e2etest.Pattern(2 << 20))
	time.Sleep(50 * time.Millisecond)
	nc.Close()
	waitNoFiles(t, dir)
	mqtttest.None(t, in, 200*time.Millisecond)

	nc = rawConnect(t, tb.Addr, "toolarge")
	nc.Write(publishHead("cut", 9<<20))
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Read(make([]byte, 16)); err == nil {
		t.Fatal("a PUBLISH over MaxMessageSize was answered")
	}
	// A whole one still goes through.
	pub := tb.Client(t, "pub")
	mqtttest.Wait(t, pub.Publish("cut", 1, false, e2etest.Pattern(3<<20)))
	if m := mqtttest.Next(t, in); len(m.Payload()) != 3<<20 {
		t.Fatalf("%d bytes", len(m.Payload()))
	}
	_ = paho.ErrNotConnected
	_ = context.Background
}

// A streaming broker takes MQTT's largest packets, and says so in its
// CONNACK within the range clients check (a remaining length's largest:
// paho for Python refuses a CONNACK above it).
func TestLargeMaximumPacketSizeAdvertised(t *testing.T) {
	tb, _ := startLargeBroker(t, mqtt.Config{MaxPacketSize: 1 << 20})
	nc, err := net.Dial("tcp", tb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho5.NewClient(paho5.ClientConfig{Conn: nc})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho5.Connect{ClientID: "maxpacket", KeepAlive: 30, CleanStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(&paho5.Disconnect{})
	if mp := ca.Properties.MaximumPacketSize; mp == nil || *mp != 268435455 {
		t.Fatalf("CONNACK Maximum Packet Size %v, want 268435455", mp)
	}
}
