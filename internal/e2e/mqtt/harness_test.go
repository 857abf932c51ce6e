package mqtt_test

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

// The helpers of package mqtt's tests (mqtt_test.go, mqtt5_test.go,
// raw_test.go), for the tests that need a journal.

type testBroker struct {
	addr   string
	broker *core.Broker
	srv    *mqtt.Server
}

// denyBob is an authenticator that turns away the user bob.
type denyBob struct{}

func (denyBob) Authenticate(_ context.Context, login, _ string) (string, error) {
	if login == "bob" {
		return "", core.ErrAuthFailed
	}
	return login, nil
}

func startBroker(t *testing.T) *testBroker {
	t.Helper()
	return startBrokerWith(t, mqtt.Config{})
}

func startBrokerWith(t *testing.T, cfg mqtt.Config) *testBroker {
	t.Helper()
	b, err := core.New(core.Config{Authenticator: denyBob{}})
	if err != nil {
		t.Fatal(err)
	}
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
	return &testBroker{addr: addr, broker: b, srv: srv}
}

func (tb *testBroker) client(t *testing.T, id string, opts ...func(*paho.ClientOptions)) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + tb.addr).SetClientID(id).
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

func wait(t *testing.T, tok paho.Token) {
	t.Helper()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("token: %v", tok.Error())
	}
}

// inbox collects messages of a subscription.
func inbox(t *testing.T, c paho.Client, filter string, qos byte) chan paho.Message {
	t.Helper()
	ch := make(chan paho.Message, 1000)
	wait(t, c.Subscribe(filter, qos, func(_ paho.Client, m paho.Message) { ch <- m }))
	return ch
}

func next(t *testing.T, ch chan paho.Message) paho.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5s")
	}
	return nil
}

func none(t *testing.T, ch chan paho.Message, d time.Duration) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("unexpected message %q on %s", m.Payload(), m.Topic())
	case <-time.After(d):
	}
}

// client5 is an MQTT 5 client (paho.golang) with an inbox.
type client5 struct {
	c     *paho5.Client
	inbox chan *paho5.Publish
}

func (tb *testBroker) client5(t *testing.T, id string, expiry uint32) *client5 {
	return tb.connect5(t, id, expiry, true)
}

func (tb *testBroker) connect5(t *testing.T, id string, expiry uint32, clean bool) *client5 {
	t.Helper()
	nc, err := net.Dial("tcp", tb.addr)
	if err != nil {
		t.Fatal(err)
	}
	cl := &client5{inbox: make(chan *paho5.Publish, 1000)}
	cl.c = paho5.NewClient(paho5.ClientConfig{
		Conn: nc,
		OnPublishReceived: []func(paho5.PublishReceived) (bool, error){
			func(r paho5.PublishReceived) (bool, error) { cl.inbox <- r.Packet; return true, nil },
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cp := &paho5.Connect{ClientID: id, KeepAlive: 30, CleanStart: clean,
		Properties: &paho5.ConnectProperties{SessionExpiryInterval: &expiry}}
	ca, err := cl.c.Connect(ctx, cp)
	if err != nil || ca.ReasonCode != 0 {
		t.Fatalf("mqtt 5 connect %s: %v %+v", id, err, ca)
	}
	t.Cleanup(func() { cl.c.Disconnect(&paho5.Disconnect{}) })
	return cl
}

func (cl *client5) subscribe(t *testing.T, filter string, qos byte) byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := cl.c.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if err != nil && sa == nil {
		t.Fatal(err)
	}
	return sa.Reasons[0]
}

func (cl *client5) publish(t *testing.T, p *paho5.Publish) *paho5.PublishResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cl.c.Publish(ctx, p)
	if err != nil && r == nil {
		t.Fatal(err)
	}
	return r
}

func (cl *client5) next(t *testing.T) *paho5.Publish {
	t.Helper()
	select {
	case p := <-cl.inbox:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5s")
	}
	return nil
}

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
