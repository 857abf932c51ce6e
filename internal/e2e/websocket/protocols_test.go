// Package websocket_test runs STOMP, MQTT and AMQP 1.0 over Junction's
// WebSocket handler with real clients: it needs the three front-ends and
// core, which package websocket may not import, even in its tests.
package websocket_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho "github.com/eclipse/paho.mqtt.golang"
	gws "github.com/gorilla/websocket"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/stomp"
	jws "github.com/junctionmq/junction/websocket"
	"github.com/junctionmq/junction/websocket/wstest"
)

// brokerServers are the three protocol servers over one broker.
type brokerServers struct {
	broker *core.Broker
	stomp  *stomp.Server
	mqtt   *mqtt.Server
	amqp   *amqp.Server
}

func newBroker(t *testing.T) *brokerServers {
	t.Helper()
	b, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := mqtt.New(mqtt.Config{}, b)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: the Handler (registered later)
	// closes first, then MQTT, then the broker.
	t.Cleanup(func() { b.Close() })
	t.Cleanup(func() { ms.Close() })
	return &brokerServers{broker: b, stomp: stomp.New(stomp.Config{}, b), mqtt: ms, amqp: amqp.New(amqp.Config{}, b)}
}

func (bs *brokerServers) handlers() map[string]func(context.Context, net.Conn) {
	return map[string]func(context.Context, net.Conn){jws.STOMP: bs.stomp.ServeConn, jws.MQTT: bs.mqtt.ServeConn, jws.AMQP: bs.amqp.ServeConn}
}

// stompClient reads STOMP frames from WebSocket messages, which may hold
// several frames or part of one.
type stompClient struct {
	t     *testing.T
	ws    *gws.Conn
	buf   []byte
	kinds []int // message kinds received
}

// next returns the next frame (command, headers and body, without the
// NUL), skipping heart-beats.
func (c *stompClient) next() string {
	c.t.Helper()
	for {
		c.buf = bytes.TrimLeft(c.buf, "\r\n")
		if i := bytes.IndexByte(c.buf, 0); i >= 0 {
			f := string(c.buf[:i])
			c.buf = c.buf[i+1:]
			return f
		}
		typ, p := wstest.ReadMessage(c.t, c.ws)
		c.kinds = append(c.kinds, typ)
		c.buf = append(c.buf, p...)
	}
}

func (c *stompClient) send(kind int, parts ...string) {
	c.t.Helper()
	for _, p := range parts {
		if err := c.ws.WriteMessage(kind, []byte(p)); err != nil {
			c.t.Fatal(err)
		}
	}
}

func stompConnect(t *testing.T, url string, kind int) *stompClient {
	t.Helper()
	ws := wstest.Dial(t, url, "v12.stomp", "v11.stomp", "v10.stomp") // as stompjs offers
	if ws.Subprotocol() != "v12.stomp" {
		t.Fatalf("subprotocol %q, want v12.stomp", ws.Subprotocol())
	}
	c := &stompClient{t: t, ws: ws}
	c.send(kind, "CONNECT\naccept-version:1.2\nhost:/\nheart-beat:0,0\n\n\x00")
	if f := c.next(); !strings.HasPrefix(f, "CONNECTED\n") || !strings.Contains(f, "version:1.2") {
		t.Fatalf("got %q, want CONNECTED", f)
	}
	return c
}

func TestSTOMP(t *testing.T) {
	bs := newBroker(t)
	s := serve(t, jws.Config{Handlers: bs.handlers()})
	c := stompConnect(t, s.url("/ws"), gws.TextMessage)
	if c.kinds[0] != gws.TextMessage {
		t.Errorf("CONNECTED came as kind %d, want text like the CONNECT", c.kinds[0])
	}

	// One frame split across two messages.
	c.send(gws.TextMessage, "SUBSCRIBE\nid:0\ndestination:/queue/a\nre", "ceipt:r1\n\n\x00")
	if f := c.next(); !strings.HasPrefix(f, "RECEIPT\n") || !strings.Contains(f, "receipt-id:r1") {
		t.Fatalf("got %q, want RECEIPT r1", f)
	}
	// Two frames in one message.
	c.send(gws.TextMessage, "SEND\ndestination:/queue/a\n\nhello\x00SEND\ndestination:/queue/a\nreceipt:r2\n\nworld\x00")
	var bodies []string
	receipt := false
	for len(bodies) < 2 || !receipt {
		f := c.next()
		switch {
		case strings.HasPrefix(f, "MESSAGE\n"):
			bodies = append(bodies, f[strings.Index(f, "\n\n")+2:])
		case strings.HasPrefix(f, "RECEIPT\n") && strings.Contains(f, "receipt-id:r2"):
			receipt = true
		default:
			t.Fatalf("unexpected frame %q", f)
		}
	}
	if bodies[0] != "hello" || bodies[1] != "world" {
		t.Fatalf("bodies %q, want hello, world", bodies)
	}

	// A binary body (not UTF-8) is delivered in a binary message, even
	// to a client that writes text.
	body := "\xff\x00\xfe"
	c.send(gws.BinaryMessage, "SEND\ndestination:/queue/bin\ncontent-length:3\nreceipt:r3\n\n"+body+"\x00")
	if f := c.next(); !strings.Contains(f, "receipt-id:r3") {
		t.Fatalf("got %q, want RECEIPT r3", f)
	}
	c.send(gws.TextMessage, "SUBSCRIBE\nid:1\ndestination:/queue/bin\n\n\x00")
	c.ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	typ, p, err := c.ws.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	if typ != gws.BinaryMessage || !bytes.HasPrefix(p, []byte("MESSAGE\n")) || !bytes.Contains(p, []byte("\n\n"+body+"\x00")) {
		t.Fatalf("got %q as kind %d, want the MESSAGE in a binary message", p, typ)
	}

	// A client writing binary is answered in binary.
	c2 := stompConnect(t, s.url("/stomp"), gws.BinaryMessage)
	if c2.kinds[0] != gws.BinaryMessage {
		t.Errorf("CONNECTED came as kind %d, want binary like the CONNECT", c2.kinds[0])
	}

	// DISCONNECT: the server closes with 1000.
	c.send(gws.TextMessage, "DISCONNECT\nreceipt:bye\n\n\x00")
	if f := c.next(); !strings.Contains(f, "receipt-id:bye") {
		t.Fatalf("got %q, want RECEIPT bye", f)
	}
	wstest.ExpectClose(t, c.ws, gws.CloseNormalClosure)
}

func pahoClient(t *testing.T, url, id string, lost chan<- error) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker(url).SetClientID(id).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second).
		SetKeepAlive(30 * time.Second)
	if lost != nil {
		o.SetConnectionLostHandler(func(_ paho.Client, err error) { lost <- err })
	}
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

func waitToken(t *testing.T, tok paho.Token) {
	t.Helper()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("token: %v", tok.Error())
	}
}

func TestMQTT(t *testing.T) {
	bs := newBroker(t)
	s := serve(t, jws.Config{Handlers: bs.handlers()})
	got := make(chan string, 10)
	sub := pahoClient(t, s.url("/mqtt"), "sub", nil) // paho offers "mqtt"
	waitToken(t, sub.Subscribe("a/+", 1, func(_ paho.Client, m paho.Message) {
		got <- m.Topic() + " " + string(m.Payload())
	}))
	pub := pahoClient(t, s.url("/"), "pub", nil)
	for i := range 3 {
		waitToken(t, pub.Publish("a/b", byte(i%2), false, strings.Repeat("x", i*70000)+"end"))
	}
	for i := range 3 {
		select {
		case m := <-got:
			if want := "a/b " + strings.Repeat("x", i*70000) + "end"; m != want {
				t.Fatalf("message %d: %d bytes, want %d", i, len(m), len(want))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("message %d not delivered", i)
		}
	}
}

// amqpDial connects go-amqp through a WebSocket client connection,
// wrapped as a net.Conn (binary messages).
func amqpDial(t *testing.T, url string) *goamqp.Conn {
	t.Helper()
	ws := wstest.Dial(t, url, "amqp")
	nc := wstest.NewConn(ws)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := goamqp.NewConn(ctx, nc, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestAMQP(t *testing.T) {
	bs := newBroker(t)
	s := serve(t, jws.Config{Handlers: bs.handlers()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := amqpDial(t, s.url("/")).NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "/queue/q", nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "/queue/q", nil)
	if err != nil {
		t.Fatal(err)
	}
	bodies := []string{"one", strings.Repeat("y", 300000)} // the second spans frames and messages
	for _, b := range bodies {
		if err := snd.Send(ctx, goamqp.NewMessage([]byte(b)), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range bodies {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.GetData()) != want {
			t.Fatalf("received %d bytes, want %d", len(m.GetData()), len(want))
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestShutdown: live sessions of the three protocols are told goodbye,
// each its own way, and Shutdown returns promptly.
func TestShutdown(t *testing.T) {
	bs := newBroker(t)
	s := serve(t, jws.Config{Handlers: bs.handlers()})

	st := stompConnect(t, s.url("/"), gws.TextMessage)
	lost := make(chan error, 1)
	pahoClient(t, s.url("/mqtt"), "m1", lost)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := amqpDial(t, s.url("/amqp")).NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "/queue/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	testserve.Eventually(t, "three sessions", func() bool { return s.h.Connections() == 3 })

	begin := time.Now()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := s.h.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if el := time.Since(begin); el > 2*time.Second {
		t.Errorf("Shutdown took %v", el)
	}
	if n := s.h.Connections(); n != 0 {
		t.Errorf("Connections = %d after Shutdown", n)
	}

	// STOMP: an ERROR frame, then close 1001.
	if f := st.next(); !strings.HasPrefix(f, "ERROR\n") || !strings.Contains(f, "message:server shutting down") {
		t.Fatalf("STOMP got %q, want ERROR server shutting down", f)
	}
	wstest.ExpectClose(t, st.ws, gws.CloseGoingAway)

	// AMQP: a close with amqp:connection:forced.
	_, err = rcv.Receive(ctx, nil)
	var ce *goamqp.ConnError
	if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCondConnectionForced {
		t.Fatalf("AMQP receive = %v, want a close with amqp:connection:forced", err)
	}

	// MQTT: the connection is closed.
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("MQTT client not disconnected")
	}

	// Idempotent, and no upgrade afterwards.
	if err := s.h.Shutdown(sctx); err != nil {
		t.Fatalf("second Shutdown = %v", err)
	}
	if err := s.h.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := s.h.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, _, err := wstest.Dialer("mqtt").Dial(s.url("/"), nil); err == nil {
		t.Fatal("dial after Shutdown succeeded")
	}
}
