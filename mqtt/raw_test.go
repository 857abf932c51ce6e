package mqtt_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
)

// raw is an MQTT 5 client that sends and reads packets one by one, with
// paho.golang's packet codec (independent of the broker's): for what no
// client library lets a test do (withhold an answer, resend a packet
// id, read the exact packets the broker sends).
type raw struct {
	t  *testing.T
	nc net.Conn
}

func (tb *testBroker) raw(t *testing.T) *raw {
	t.Helper()
	nc, err := net.Dial("tcp", tb.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &raw{t: t, nc: nc}
}

func (r *raw) send(cp *packets.ControlPacket) {
	r.t.Helper()
	r.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := cp.WriteTo(r.nc); err != nil {
		r.t.Fatalf("send %s: %v", cp.PacketType(), err)
	}
}

// recv reads the next packet, failing the test after 5s.
func (r *raw) recv() *packets.ControlPacket {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	cp, err := packets.ReadPacket(r.nc)
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	return cp
}

// silent checks that nothing arrives for d.
func (r *raw) silent(d time.Duration) {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(d))
	cp, err := packets.ReadPacket(r.nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return
	}
	if err != nil {
		r.t.Fatalf("connection ended: %v", err)
	}
	r.t.Fatalf("unexpected %s", cp.PacketType())
}

// closed checks that the broker closes the connection, returning what it
// sent before.
func (r *raw) closed() []*packets.ControlPacket {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []*packets.ControlPacket
	for {
		cp, err := packets.ReadPacket(r.nc)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			r.t.Fatalf("connection not closed (got %d packets)", len(got))
		case err != nil:
			return got
		}
		got = append(got, cp)
	}
}

// connect sends an MQTT 5 CONNECT and returns the CONNACK.
func (r *raw) connect(c *packets.Connect) *packets.Connack {
	r.t.Helper()
	cp := packets.NewControlPacket(packets.CONNECT)
	c.ProtocolName, c.ProtocolVersion = "MQTT", 5
	if c.KeepAlive == 0 {
		c.KeepAlive = 60
	}
	cp.Content = c
	r.send(cp)
	ack, ok := r.recv().Content.(*packets.Connack)
	if !ok {
		r.t.Fatal("no CONNACK")
	}
	return ack
}

// session connects an MQTT 5 client with a session expiry interval and
// fails unless it is accepted.
func (r *raw) session(id string, clean bool, expiry uint32) *packets.Connack {
	r.t.Helper()
	ack := r.connect(&packets.Connect{ClientID: id, CleanStart: clean,
		Properties: &packets.Properties{SessionExpiryInterval: &expiry}})
	if ack.ReasonCode != 0 {
		r.t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	return ack
}

func (r *raw) subscribe(id uint16, props *packets.Properties, subs ...packets.SubOptions) *packets.Suback {
	r.t.Helper()
	cp := packets.NewControlPacket(packets.SUBSCRIBE)
	cp.Content = &packets.Subscribe{PacketID: id, Subscriptions: subs, Properties: props}
	r.send(cp)
	sa, ok := r.recv().Content.(*packets.Suback)
	if !ok {
		r.t.Fatal("no SUBACK")
	}
	return sa
}

func (r *raw) publish(p *packets.Publish) {
	r.t.Helper()
	cp := packets.NewControlPacket(packets.PUBLISH)
	cp.Content = p
	r.send(cp)
}

// ack sends PUBACK, PUBREC, PUBREL or PUBCOMP for id.
func (r *raw) ack(typ byte, id uint16) {
	r.t.Helper()
	cp := packets.NewControlPacket(typ)
	switch typ {
	case packets.PUBACK:
		cp.Content.(*packets.Puback).PacketID = id
	case packets.PUBREC:
		cp.Content.(*packets.Pubrec).PacketID = id
	case packets.PUBREL:
		cp.Content.(*packets.Pubrel).PacketID = id
	case packets.PUBCOMP:
		cp.Content.(*packets.Pubcomp).PacketID = id
	}
	r.send(cp)
}

// publishOf reads the next packet and checks it is a PUBLISH.
func (r *raw) publishOf() *packets.Publish {
	r.t.Helper()
	cp := r.recv()
	p, ok := cp.Content.(*packets.Publish)
	if !ok {
		r.t.Fatalf("got %s, want PUBLISH", cp.PacketType())
	}
	return p
}

// expect reads the next packet and checks its type.
func (r *raw) expect(typ byte) *packets.ControlPacket {
	r.t.Helper()
	cp := r.recv()
	if cp.FixedHeader.Type != typ {
		r.t.Fatalf("got %s, want %s", cp.PacketType(), packets.NewControlPacket(typ).PacketType())
	}
	return cp
}

// disconnect sends DISCONNECT (reason 0) and closes.
func (r *raw) disconnect() {
	r.t.Helper()
	r.send(packets.NewControlPacket(packets.DISCONNECT))
	r.nc.Close()
}

// readAll reads nc until it closes or stays silent for d.
func readAll(nc net.Conn, d time.Duration) []byte {
	nc.SetReadDeadline(time.Now().Add(d))
	var b bytes.Buffer
	io.Copy(&b, nc)
	return b.Bytes()
}
