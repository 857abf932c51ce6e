// Package mqtttest is the harness of the MQTT tests: a broker with an
// MQTT listener on a loopback port, MQTT 3.1.1 (paho.mqtt.golang) and
// MQTT 5 (paho.golang) clients dialled to it, and a raw MQTT 5
// connection for what no client library lets a test do. Package mqtt's
// tests and the integration tests of internal/e2e share it; no
// production code may import it (internal/lint).
package mqtttest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/mqtt"
)

// Broker is a broker with an MQTT listener on a loopback port.
type Broker struct {
	Addr   string       // host:port
	Core   *core.Broker // the broker
	Server *mqtt.Server // its MQTT server
}

// DenyBob is an authenticator that turns away the user bob.
type DenyBob struct{}

func (DenyBob) Authenticate(_ context.Context, login, _ string) (string, error) {
	if login == "bob" {
		return "", core.ErrAuthFailed
	}
	return login, nil
}

// Start starts a broker that turns away the user bob (DenyBob) and an
// MQTT server over it, both stopped when the test ends.
func Start(t *testing.T) *Broker {
	t.Helper()
	return StartWith(t, mqtt.Config{})
}

// StartWith is Start with an MQTT server configured by cfg.
func StartWith(t *testing.T, cfg mqtt.Config) *Broker {
	t.Helper()
	b, err := core.New(core.Config{Authenticator: DenyBob{}})
	if err != nil {
		t.Fatal(err)
	}
	return Serve(t, b, cfg)
}

// StartFull starts a broker with bcfg, creates each address of anycast
// anycast (so that MQTT publishes to it reach its queue), and serves an
// MQTT server with cfg over it.
func StartFull(t *testing.T, cfg mqtt.Config, bcfg core.Config, anycast ...string) *Broker {
	t.Helper()
	b, err := core.New(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range anycast {
		if err := b.CreateAddress(a, core.Anycast); err != nil {
			t.Fatal(err)
		}
	}
	return Serve(t, b, cfg)
}

// Serve serves an MQTT server with cfg over b on a loopback port. When
// the test ends the server is closed, the listener stopped, then b
// closed.
func Serve(t *testing.T, b *core.Broker, cfg mqtt.Config) *Broker {
	t.Helper()
	srv, err := mqtt.New(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	addr, stop := testserve.Serve(t, srv.ServeConn)
	t.Cleanup(func() {
		srv.Close() // disconnects the clients, so the handlers return
		stop()
	})
	return &Broker{Addr: addr, Core: b, Server: srv}
}

// Client connects an MQTT 3.1.1 client (no reconnection), disconnected
// when the test ends.
func (tb *Broker) Client(t *testing.T, id string, opts ...func(*paho.ClientOptions)) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + tb.Addr).SetClientID(id).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second)
	for _, f := range opts {
		f(o)
	}
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// Wait waits up to 5 s for tok, failing the test on a timeout or an error.
func Wait(t *testing.T, tok paho.Token) {
	t.Helper()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("token: %v", tok.Error())
	}
}

// Inbox collects messages of a subscription.
func Inbox(t *testing.T, c paho.Client, filter string, qos byte) chan paho.Message {
	t.Helper()
	ch := make(chan paho.Message, 1000)
	Wait(t, c.Subscribe(filter, qos, func(_ paho.Client, m paho.Message) { ch <- m }))
	return ch
}

// Next waits up to 5 s for a message on ch.
func Next(t *testing.T, ch chan paho.Message) paho.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5s")
	}
	return nil
}

// None checks that nothing arrives on ch within d.
func None(t *testing.T, ch chan paho.Message, d time.Duration) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("unexpected message %q on %s", m.Payload(), m.Topic())
	case <-time.After(d):
	}
}

// Client5 is an MQTT 5 client (paho.golang) with an inbox.
type Client5 struct {
	Client *paho5.Client
	Inbox  chan *paho5.Publish
}

// Client5 connects a clean MQTT 5 client with a session expiry interval,
// disconnected when the test ends.
func (tb *Broker) Client5(t *testing.T, id string, expiry uint32) *Client5 {
	return tb.Connect5(t, id, expiry, true)
}

// Connect5 is Client5 with the choice of a clean start.
func (tb *Broker) Connect5(t *testing.T, id string, expiry uint32, clean bool) *Client5 {
	t.Helper()
	return tb.connect5(t, &paho5.Connect{ClientID: id, KeepAlive: 30, CleanStart: clean,
		Properties: &paho5.ConnectProperties{SessionExpiryInterval: &expiry}})
}

// Connect5As is Client5 logging in as user.
func (tb *Broker) Connect5As(t *testing.T, id, user string, expiry uint32) *Client5 {
	t.Helper()
	return tb.connect5(t, &paho5.Connect{ClientID: id, KeepAlive: 30, CleanStart: true, Username: user, UsernameFlag: true,
		Properties: &paho5.ConnectProperties{SessionExpiryInterval: &expiry}})
}

func (tb *Broker) connect5(t *testing.T, cp *paho5.Connect) *Client5 {
	t.Helper()
	nc, err := net.Dial("tcp", tb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cl := &Client5{Inbox: make(chan *paho5.Publish, 1000)}
	cl.Client = paho5.NewClient(paho5.ClientConfig{
		Conn: nc,
		OnPublishReceived: []func(paho5.PublishReceived) (bool, error){
			func(r paho5.PublishReceived) (bool, error) { cl.Inbox <- r.Packet; return true, nil },
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := cl.Client.Connect(ctx, cp)
	if err != nil || ca.ReasonCode != 0 {
		t.Fatalf("mqtt 5 connect %s: %v %+v", cp.ClientID, err, ca)
	}
	t.Cleanup(func() { cl.Client.Disconnect(&paho5.Disconnect{}) })
	return cl
}

// Subscribe subscribes to filter and returns the SUBACK's reason code.
func (cl *Client5) Subscribe(t *testing.T, filter string, qos byte) byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := cl.Client.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if err != nil && sa == nil {
		t.Fatal(err)
	}
	return sa.Reasons[0]
}

// Publish publishes p and returns the broker's response (nil for QoS 0).
func (cl *Client5) Publish(t *testing.T, p *paho5.Publish) *paho5.PublishResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cl.Client.Publish(ctx, p)
	if err != nil && r == nil {
		t.Fatal(err)
	}
	return r
}

// Next waits up to 5 s for a message.
func (cl *Client5) Next(t *testing.T) *paho5.Publish {
	t.Helper()
	select {
	case p := <-cl.Inbox:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5s")
	}
	return nil
}

// Raw is an MQTT 5 client that sends and reads packets one by one, with
// paho.golang's packet codec (independent of the broker's): for what no
// client library lets a test do (withhold an answer, resend a packet
// id, read the exact packets the broker sends).
type Raw struct {
	t    *testing.T
	Conn net.Conn
}

// Raw opens a Raw connection, closed when the test ends.
func (tb *Broker) Raw(t *testing.T) *Raw {
	t.Helper()
	return &Raw{t: t, Conn: tb.DialRaw(t)}
}

// DialRaw opens a TCP connection to the broker, closed when the test ends.
func (tb *Broker) DialRaw(t *testing.T) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", tb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// Send writes cp within 5 s.
func (r *Raw) Send(cp *packets.ControlPacket) {
	r.t.Helper()
	r.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := cp.WriteTo(r.Conn); err != nil {
		r.t.Fatalf("send %s: %v", cp.PacketType(), err)
	}
}

// Recv reads the next packet, failing the test after 5s.
func (r *Raw) Recv() *packets.ControlPacket {
	r.t.Helper()
	r.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	cp, err := packets.ReadPacket(r.Conn)
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	return cp
}

// Silent checks that nothing arrives for d.
func (r *Raw) Silent(d time.Duration) {
	r.t.Helper()
	r.Conn.SetReadDeadline(time.Now().Add(d))
	cp, err := packets.ReadPacket(r.Conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return
	}
	if err != nil {
		r.t.Fatalf("connection ended: %v", err)
	}
	r.t.Fatalf("unexpected %s", cp.PacketType())
}

// Closed checks that the broker closes the connection, returning what it
// sent before.
func (r *Raw) Closed() []*packets.ControlPacket {
	r.t.Helper()
	r.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []*packets.ControlPacket
	for {
		cp, err := packets.ReadPacket(r.Conn)
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

// Connect sends an MQTT 5 CONNECT and returns the CONNACK.
func (r *Raw) Connect(c *packets.Connect) *packets.Connack {
	r.t.Helper()
	cp := packets.NewControlPacket(packets.CONNECT)
	c.ProtocolName, c.ProtocolVersion = "MQTT", 5
	if c.KeepAlive == 0 {
		c.KeepAlive = 60
	}
	cp.Content = c
	r.Send(cp)
	ack, ok := r.Recv().Content.(*packets.Connack)
	if !ok {
		r.t.Fatal("no CONNACK")
	}
	return ack
}

// Session connects an MQTT 5 client with a Session expiry interval and
// fails unless it is accepted.
func (r *Raw) Session(id string, clean bool, expiry uint32) *packets.Connack {
	r.t.Helper()
	ack := r.Connect(&packets.Connect{ClientID: id, CleanStart: clean,
		Properties: &packets.Properties{SessionExpiryInterval: &expiry}})
	if ack.ReasonCode != 0 {
		r.t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	return ack
}

// Subscribe sends a SUBSCRIBE and returns the SUBACK.
func (r *Raw) Subscribe(id uint16, props *packets.Properties, subs ...packets.SubOptions) *packets.Suback {
	r.t.Helper()
	cp := packets.NewControlPacket(packets.SUBSCRIBE)
	cp.Content = &packets.Subscribe{PacketID: id, Subscriptions: subs, Properties: props}
	r.Send(cp)
	sa, ok := r.Recv().Content.(*packets.Suback)
	if !ok {
		r.t.Fatal("no SUBACK")
	}
	return sa
}

// Publish sends a PUBLISH.
func (r *Raw) Publish(p *packets.Publish) {
	r.t.Helper()
	cp := packets.NewControlPacket(packets.PUBLISH)
	cp.Content = p
	r.Send(cp)
}

// Ack sends PUBACK, PUBREC, PUBREL or PUBCOMP for id.
func (r *Raw) Ack(typ byte, id uint16) {
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
	r.Send(cp)
}

// PublishOf reads the next packet and checks it is a PUBLISH.
func (r *Raw) PublishOf() *packets.Publish {
	r.t.Helper()
	cp := r.Recv()
	p, ok := cp.Content.(*packets.Publish)
	if !ok {
		r.t.Fatalf("got %s, want PUBLISH", cp.PacketType())
	}
	return p
}

// Expect reads the next packet and checks its type.
func (r *Raw) Expect(typ byte) *packets.ControlPacket {
	r.t.Helper()
	cp := r.Recv()
	if cp.FixedHeader.Type != typ {
		r.t.Fatalf("got %s, want %s", cp.PacketType(), packets.NewControlPacket(typ).PacketType())
	}
	return cp
}

// Disconnect sends DISCONNECT (reason 0) and closes.
func (r *Raw) Disconnect() {
	r.t.Helper()
	r.Send(packets.NewControlPacket(packets.DISCONNECT))
	r.Conn.Close()
}

// ReadAll reads nc until it closes or stays silent for d.
func ReadAll(nc net.Conn, d time.Duration) []byte {
	nc.SetReadDeadline(time.Now().Add(d))
	var b bytes.Buffer
	io.Copy(&b, nc)
	return b.Bytes()
}
