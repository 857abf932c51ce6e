package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
	gws "github.com/gorilla/websocket"
)

// The cross-protocol matrix: every ordered pair of STOMP, MQTT 3.1.1,
// MQTT 5 and AMQP 1.0 clients, over TCP and over WebSockets, sends a
// binary body, a text body and a message with every mappable field set,
// on a queue and on a topic, and checks what arrives against
// docs/protocol-mapping.md: what each protocol carries, and what it
// documents as lost.

// mxProto is one of the matrix's client protocols.
type mxProto int

const (
	mxSTOMP mxProto = iota
	mxMQTT3
	mxMQTT5
	mxAMQP
)

var mxProtos = []mxProto{mxSTOMP, mxMQTT3, mxMQTT5, mxAMQP}

func (p mxProto) String() string {
	return [...]string{"stomp", "mqtt3", "mqtt5", "amqp"}[p]
}

func (p mxProto) mqtt() bool { return p == mxMQTT3 || p == mxMQTT5 }

// What each protocol has a place for (docs/protocol-mapping.md, Fields).
func (p mxProto) hasPriority() bool { return p == mxSTOMP || p == mxAMQP }
func (p mxProto) hasGroupID() bool  { return p == mxSTOMP || p == mxAMQP }
func (p mxProto) hasSubject() bool  { return p == mxAMQP }

// MQTT 3.1.1 has only the payload (and QoS, retain); MQTT 5 properties
// carry the rest.
func (p mxProto) hasMQTT5Fields() bool { return p != mxMQTT3 }

// mxDest is where a subtest sends: a core address (words separated by
// '.') that is either a queue (anycast) or a topic (multicast).
type mxDest struct {
	addr  string
	queue bool
}

func (d mxDest) topic() string { return strings.ReplaceAll(d.addr, ".", "/") }

// mxOut is a message to send, in core's terms; each endpoint writes it
// in its protocol.
type mxOut struct {
	body          []byte
	text          bool // AMQP sends the body as an amqp-value string
	durable       bool
	priority      uint8     // 0: not set (core's default is 4)
	expires       time.Time // zero: never; whole milliseconds
	contentType   string
	correlationID string
	replyTo       string // a core address; MQTT sends it as a topic
	groupID       string
	subject       string
	props         map[string]string
	typedProps    map[string]any // properties only AMQP can send with their type
}

// mxIn is a received message, normalized.
type mxIn struct {
	recvAt        time.Time
	dest          string // STOMP destination, MQTT topic, AMQP to
	body          []byte
	amqpBody      string // AMQP: data, string or binary
	messageID     any    // AMQP
	durable       bool   // STOMP persistent, AMQP durable
	qos           byte   // MQTT
	retained      bool   // MQTT
	priority      int    // -1: none
	expires       time.Time
	ttl           time.Duration // AMQP ttl, MQTT 5 message expiry interval
	contentType   string
	correlationID string
	replyTo       string
	groupID       string
	subject       string
	props         map[string]any
}

// mxEndpoint is one protocol's client pair: a producer connection and a
// consumer connection.
type mxEndpoint interface {
	// send sends m to d and returns once the broker has it (or, for an
	// unconfirmed send, once it is written).
	send(ctx context.Context, d mxDest, m *mxOut) error
	// subscribe consumes from d; the subscription is in place on return.
	subscribe(ctx context.Context, d mxDest) (<-chan mxIn, func(), error)
}

// wsConn adapts a gorilla client connection to net.Conn: reads stream
// the payloads of data messages, each Write is one binary message.
//
// It is also a sync.Locker, held across the writes of one packet by a
// client that writes a packet in several Writes and takes the lock when
// its connection offers one: paho.golang writes an MQTT 5 packet as its
// fixed header and then each part, and its pinger writes the first
// PINGREQ from another goroutine as soon as the client is connected.
// Over TCP a packet's parts go out in one writev; here each is a
// message, and without the lock a PINGREQ landed inside a SUBSCRIBE,
// which the broker rightly refused as malformed
// (TestMQTT5OverWebSocketKeepsPacketsWhole).
type wsConn struct {
	ws  *gws.Conn
	r   io.Reader  // the message being read; only the reading goroutine uses it
	wmu sync.Mutex // one message at a time (gorilla allows one writer)
	pmu sync.Mutex // one packet at a time: Lock and Unlock
}

var _ sync.Locker = (*wsConn)(nil)

func (c *wsConn) Lock()   { c.pmu.Lock() }
func (c *wsConn) Unlock() { c.pmu.Unlock() }

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.r != nil {
			n, err := c.r.Read(p)
			if err == io.EOF {
				c.r = nil
				if n > 0 {
					return n, nil
				}
				continue
			}
			return n, err
		}
		_, r, err := c.ws.NextReader()
		if err != nil {
			var ce *gws.CloseError
			if errors.As(err, &ce) {
				return 0, io.EOF
			}
			return 0, err
		}
		c.r = r
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.WriteMessage(gws.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsConn) Close() error {
	c.ws.WriteControl(gws.CloseMessage, gws.FormatCloseMessage(gws.CloseNormalClosure, ""), time.Now().Add(time.Second))
	return c.ws.Close()
}

func (c *wsConn) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
func (c *wsConn) SetDeadline(t time.Time) error {
	c.ws.SetReadDeadline(t)
	return c.ws.SetWriteDeadline(t)
}

// mxDialer opens a connection for a protocol over one transport.
type mxDialer struct {
	name string // tcp or ws
	conn func(t *testing.T, p mxProto) net.Conn
	mqtt string // the broker URL for paho 3
}

func mxDialers() []mxDialer {
	addr := func(name string) string { return lastInstance.addrs[name].String() }
	tcp := mxDialer{name: "tcp", mqtt: "tcp://" + addr("mqtt"), conn: func(t *testing.T, p mxProto) net.Conn {
		t.Helper()
		listener := map[mxProto]string{mxSTOMP: "stomp", mxMQTT5: "mqtt", mxAMQP: "amqp"}[p]
		c, err := net.Dial("tcp", addr(listener))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}}
	ws := mxDialer{name: "ws", mqtt: "ws://" + addr("websocket") + "/mqtt", conn: func(t *testing.T, p mxProto) net.Conn {
		t.Helper()
		sub := map[mxProto]string{mxSTOMP: "v12.stomp", mxMQTT5: "mqtt", mxAMQP: "amqp"}[p]
		d := gws.Dialer{Subprotocols: []string{sub}, HandshakeTimeout: 5 * time.Second}
		c, _, err := d.Dial("ws://"+addr("websocket")+"/", nil)
		if err != nil {
			t.Fatalf("%s over WebSocket: %v", p, err)
		}
		if c.Subprotocol() != sub {
			t.Fatalf("subprotocol %q, want %q", c.Subprotocol(), sub)
		}
		return &wsConn{ws: c}
	}}
	return []mxDialer{tcp, ws}
}

// deliver hands a received message on without blocking the client's
// reader; a subtest expects one message, so the buffer never fills.
func deliver(ch chan mxIn, m mxIn) {
	select {
	case ch <- m:
	default:
	}
}

// ---- STOMP (go-stomp) ----

type stompEndpoint struct{ snd, rcv *gostomp.Conn }

func newStompEndpoint(t *testing.T, d mxDialer) mxEndpoint {
	t.Helper()
	conn := func() *gostomp.Conn {
		c, err := gostomp.Connect(d.conn(t, mxSTOMP), gostomp.ConnOpt.HeartBeat(0, 0), quiet)
		if err != nil {
			t.Fatalf("stomp connect: %v", err)
		}
		t.Cleanup(func() { c.Disconnect() })
		return c
	}
	return &stompEndpoint{snd: conn(), rcv: conn()}
}

func stompDest(d mxDest) string {
	if d.queue {
		return "/queue/" + d.addr
	}
	return "/topic/" + d.addr
}

func (e *stompEndpoint) send(_ context.Context, d mxDest, m *mxOut) error {
	opts := []func(*frame.Frame) error{gostomp.SendOpt.Receipt}
	h := func(k, v string) { opts = append(opts, gostomp.SendOpt.Header(k, v)) }
	if m.durable {
		h("persistent", "true")
	}
	if m.priority != 0 {
		h("priority", strconv.Itoa(int(m.priority)))
	}
	if !m.expires.IsZero() {
		h("expires", strconv.FormatInt(m.expires.UnixMilli(), 10))
	}
	if m.correlationID != "" {
		h("correlation-id", m.correlationID)
	}
	if m.replyTo != "" {
		h("reply-to", m.replyTo)
	}
	if m.groupID != "" {
		h("JMSXGroupID", m.groupID)
	}
	for _, k := range slices.Sorted(maps.Keys(m.props)) {
		h(k, m.props[k])
	}
	return e.snd.Send(stompDest(d), m.contentType, m.body, opts...)
}

// stompMapped are the MESSAGE headers that are not properties.
var stompMapped = map[string]bool{
	"destination": true, "message-id": true, "subscription": true, "ack": true,
	"content-length": true, "content-type": true, "redelivered": true, "timestamp": true,
	"persistent": true, "priority": true, "expires": true, "correlation-id": true,
	"reply-to": true, "JMSXGroupID": true,
}

func (e *stompEndpoint) subscribe(_ context.Context, d mxDest) (<-chan mxIn, func(), error) {
	sub, err := e.rcv.Subscribe(stompDest(d), gostomp.AckAuto)
	if err != nil {
		return nil, nil, err
	}
	// In place once a later frame's receipt is back.
	if err := e.rcv.Send("/topic/mx.barrier", "", nil, gostomp.SendOpt.Receipt); err != nil {
		return nil, nil, err
	}
	out := make(chan mxIn, 8)
	go func() {
		for msg := range sub.C {
			if msg.Err != nil {
				return
			}
			h := msg.Header
			in := mxIn{recvAt: time.Now(), dest: h.Get("destination"), body: msg.Body, contentType: h.Get("content-type"),
				durable: h.Get("persistent") == "true", priority: -1, correlationID: h.Get("correlation-id"),
				replyTo: h.Get("reply-to"), groupID: h.Get("JMSXGroupID"), props: map[string]any{}}
			if v, ok := h.Contains("priority"); ok {
				p, err := strconv.Atoi(v)
				if err != nil {
					p = -2
				}
				in.priority = p
			}
			if v, ok := h.Contains("expires"); ok {
				ms, _ := strconv.ParseInt(v, 10, 64)
				in.expires = time.UnixMilli(ms)
			}
			for i := 0; i < h.Len(); i++ {
				if k, v := h.GetAt(i); !stompMapped[k] {
					in.props[k] = v
				}
			}
			deliver(out, in)
		}
	}()
	// Not unsubscribed: go-stomp's Unsubscribe can miss its own wake-up
	// and wait out its 30 s receipt timeout. The address is the
	// subtest's alone; the connection's end drops the subscription.
	return out, func() {}, nil
}

// ---- MQTT 3.1.1 (paho.mqtt.golang) ----

type mqtt3Endpoint struct{ snd, rcv paho.Client }

func newMQTT3Endpoint(t *testing.T, d mxDialer) mxEndpoint {
	t.Helper()
	conn := func(id string) paho.Client {
		o := paho.NewClientOptions().AddBroker(d.mqtt).SetClientID(id).SetProtocolVersion(4).
			SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second)
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("mqtt connect %s: %v", id, tok.Error())
		}
		t.Cleanup(func() { c.Disconnect(100) })
		return c
	}
	return &mqtt3Endpoint{snd: conn("mx-" + d.name + "-mqtt3-snd"), rcv: conn("mx-" + d.name + "-mqtt3-rcv")}
}

func mqttWait(tok paho.Token) error {
	if !tok.WaitTimeout(5 * time.Second) {
		return errors.New("mqtt: no answer within 5s")
	}
	return tok.Error()
}

func (e *mqtt3Endpoint) send(_ context.Context, d mxDest, m *mxOut) error {
	var qos byte
	if m.durable {
		qos = 1
	}
	return mqttWait(e.snd.Publish(d.topic(), qos, false, m.body))
}

func (e *mqtt3Endpoint) subscribe(_ context.Context, d mxDest) (<-chan mxIn, func(), error) {
	out := make(chan mxIn, 8)
	err := mqttWait(e.rcv.Subscribe(d.topic(), 1, func(_ paho.Client, m paho.Message) {
		deliver(out, mxIn{recvAt: time.Now(), dest: m.Topic(), body: m.Payload(), qos: m.Qos(), retained: m.Retained(), priority: -1})
	}))
	if err != nil {
		return nil, nil, err
	}
	return out, func() { e.rcv.Unsubscribe(d.topic()) }, nil
}

// ---- MQTT 5 (paho.golang) ----

type mqtt5Endpoint struct {
	snd, rcv *paho5.Client
	mu       sync.Mutex
	subs     map[string]chan mxIn // by topic
}

func newMQTT5Endpoint(t *testing.T, d mxDialer) mxEndpoint {
	t.Helper()
	e := &mqtt5Endpoint{subs: make(map[string]chan mxIn)}
	conn := func(id string, h func(paho5.PublishReceived) (bool, error)) *paho5.Client {
		cfg := paho5.ClientConfig{ClientID: id, Conn: d.conn(t, mxMQTT5)}
		if h != nil {
			cfg.OnPublishReceived = []func(paho5.PublishReceived) (bool, error){h}
		}
		c := paho5.NewClient(cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.Connect(ctx, &paho5.Connect{ClientID: id, KeepAlive: 30, CleanStart: true}); err != nil {
			t.Fatalf("mqtt5 connect %s: %v", id, err)
		}
		t.Cleanup(func() { c.Disconnect(&paho5.Disconnect{}) })
		return c
	}
	e.snd = conn("mx-"+d.name+"-mqtt5-snd", nil)
	e.rcv = conn("mx-"+d.name+"-mqtt5-rcv", func(r paho5.PublishReceived) (bool, error) {
		p := r.Packet
		in := mxIn{recvAt: time.Now(), dest: p.Topic, body: p.Payload, qos: p.QoS, retained: p.Retain, priority: -1, props: map[string]any{}}
		if pp := p.Properties; pp != nil {
			in.contentType, in.correlationID, in.replyTo = pp.ContentType, string(pp.CorrelationData), pp.ResponseTopic
			if pp.MessageExpiry != nil {
				in.ttl = time.Duration(*pp.MessageExpiry) * time.Second
			}
			for _, u := range pp.User {
				if _, dup := in.props[u.Key]; dup {
					in.props[u.Key] = "(repeated)"
					continue
				}
				in.props[u.Key] = u.Value
			}
		}
		e.mu.Lock()
		ch := e.subs[p.Topic]
		e.mu.Unlock()
		if ch != nil {
			deliver(ch, in)
		}
		return true, nil
	})
	return e
}

func (e *mqtt5Endpoint) send(ctx context.Context, d mxDest, m *mxOut) error {
	p := &paho5.Publish{Topic: d.topic(), Payload: m.body, Properties: &paho5.PublishProperties{
		ContentType: m.contentType, ResponseTopic: strings.ReplaceAll(m.replyTo, ".", "/"),
	}}
	if m.durable {
		p.QoS = 1
	}
	if m.correlationID != "" {
		p.Properties.CorrelationData = []byte(m.correlationID)
	}
	if !m.expires.IsZero() {
		s := uint32((time.Until(m.expires) + time.Second/2) / time.Second)
		p.Properties.MessageExpiry = &s
	}
	for _, k := range slices.Sorted(maps.Keys(m.props)) {
		p.Properties.User.Add(k, m.props[k])
	}
	_, err := e.snd.Publish(ctx, p)
	return err
}

func (e *mqtt5Endpoint) subscribe(ctx context.Context, d mxDest) (<-chan mxIn, func(), error) {
	out := make(chan mxIn, 8)
	e.mu.Lock()
	e.subs[d.topic()] = out
	e.mu.Unlock()
	if _, err := e.rcv.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: d.topic(), QoS: 1}}}); err != nil {
		return nil, nil, err
	}
	return out, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.rcv.Unsubscribe(ctx, &paho5.Unsubscribe{Topics: []string{d.topic()}})
		e.mu.Lock()
		delete(e.subs, d.topic())
		e.mu.Unlock()
	}, nil
}

// ---- AMQP 1.0 (go-amqp) ----

type amqpEndpoint struct{ snd, rcv *goamqp.Session }

func newAMQPEndpoint(t *testing.T, d mxDialer) mxEndpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	session := func() *goamqp.Session {
		c, err := goamqp.NewConn(ctx, d.conn(t, mxAMQP), nil)
		if err != nil {
			t.Fatalf("amqp connect: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := c.NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return &amqpEndpoint{snd: session(), rcv: session()}
}

func amqpDest(d mxDest) string {
	if d.queue {
		return "queue://" + d.addr
	}
	return "topic://" + d.addr
}

func (e *amqpEndpoint) send(ctx context.Context, d mxDest, m *mxOut) error {
	msg := &goamqp.Message{Header: &goamqp.MessageHeader{Durable: m.durable, Priority: 4}, Properties: &goamqp.MessageProperties{}}
	if m.priority != 0 {
		msg.Header.Priority = m.priority
	}
	if !m.expires.IsZero() {
		// Both; the broker keeps the earlier. The ttl, whole milliseconds
		// rounded up, ends no earlier than the absolute time, which is the
		// one that counts.
		msg.Header.TTL = (time.Until(m.expires) + time.Millisecond).Truncate(time.Millisecond)
		msg.Properties.AbsoluteExpiryTime = &m.expires
	}
	str := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	msg.Properties.ContentType = str(m.contentType)
	msg.Properties.ReplyTo = str(m.replyTo)
	msg.Properties.GroupID = str(m.groupID)
	msg.Properties.Subject = str(m.subject)
	if m.correlationID != "" {
		msg.Properties.CorrelationID = m.correlationID
	}
	if len(m.props)+len(m.typedProps) > 0 {
		msg.ApplicationProperties = map[string]any{}
		for k, v := range m.props {
			msg.ApplicationProperties[k] = v
		}
		maps.Copy(msg.ApplicationProperties, m.typedProps)
	}
	if m.text {
		msg.Value = string(m.body)
	} else {
		msg.Data = [][]byte{m.body}
	}
	snd, err := e.snd.NewSender(ctx, amqpDest(d), nil)
	if err != nil {
		return err
	}
	defer snd.Close(ctx)
	return snd.Send(ctx, msg, nil)
}

func (e *amqpEndpoint) subscribe(ctx context.Context, d mxDest) (<-chan mxIn, func(), error) {
	r, err := e.rcv.NewReceiver(ctx, amqpDest(d), &goamqp.ReceiverOptions{Credit: 10})
	if err != nil {
		return nil, nil, err
	}
	out := make(chan mxIn, 8)
	go func() {
		for {
			m, err := r.Receive(context.Background(), nil)
			if err != nil {
				return
			}
			r.AcceptMessage(context.Background(), m)
			deliver(out, amqpIn(m))
		}
	}()
	return out, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.Close(ctx)
	}, nil
}

func amqpIn(m *goamqp.Message) mxIn {
	in := mxIn{recvAt: time.Now(), priority: 4, props: map[string]any{}}
	switch v := m.Value.(type) {
	case string:
		in.body, in.amqpBody = []byte(v), "string"
	case []byte:
		in.body, in.amqpBody = v, "binary"
	default:
		if len(m.Data) == 1 {
			in.body, in.amqpBody = m.Data[0], "data"
		} else {
			in.amqpBody = fmt.Sprintf("%d data sections, value %T", len(m.Data), m.Value)
		}
	}
	if h := m.Header; h != nil {
		in.durable, in.priority, in.ttl = h.Durable, int(h.Priority), h.TTL
	}
	deref := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	if p := m.Properties; p != nil {
		in.dest, in.contentType, in.replyTo = deref(p.To), deref(p.ContentType), deref(p.ReplyTo)
		in.groupID, in.subject, in.messageID = deref(p.GroupID), deref(p.Subject), p.MessageID
		switch c := p.CorrelationID.(type) {
		case nil:
		case string:
			in.correlationID = c
		default:
			in.correlationID = fmt.Sprintf("(%T) %v", c, c)
		}
		if p.AbsoluteExpiryTime != nil {
			in.expires = *p.AbsoluteExpiryTime
		}
	}
	maps.Copy(in.props, m.ApplicationProperties)
	return in
}

// ---- the matrix ----

type mxCase struct {
	name string
	msg  func(n int) *mxOut
}

// textPlainUTF8 is the content type the broker gives an AMQP
// amqp-value string for the other protocols.
const textPlainUTF8 = "text/plain; charset=utf-8"

func mxCases() []mxCase {
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	return []mxCase{
		{"binary", func(int) *mxOut { return &mxOut{body: every} }},
		{"text", func(int) *mxOut {
			return &mxOut{body: []byte("Grüße, 世界! Ελληνικά — ñ € 🚀"), text: true}
		}},
		{"fields", func(n int) *mxOut {
			return &mxOut{
				body:          []byte(`{"order":7,"note":"ü"}`),
				durable:       true,
				priority:      7,
				expires:       time.UnixMilli(time.Now().Add(time.Hour).UnixMilli()),
				contentType:   "application/json",
				correlationID: fmt.Sprintf("corr-%d", n),
				replyTo:       fmt.Sprintf("mx.%d.replies", n),
				groupID:       "group-a",
				subject:       "the-subject",
				props:         map[string]string{"region": "eu-west", "greeting": "grüße 世界", "path": `a:b\c`},
				typedProps:    map[string]any{"count": int64(42), "ratio": 0.5, "flag": true},
			}
		}},
	}
}

func TestMatrix(t *testing.T) {
	startServe(t, testConfig(t))
	var seq atomic.Int64
	for _, d := range mxDialers() {
		t.Run(d.name, func(t *testing.T) {
			eps := map[mxProto]mxEndpoint{
				mxSTOMP: newStompEndpoint(t, d),
				mxMQTT3: newMQTT3Endpoint(t, d),
				mxMQTT5: newMQTT5Endpoint(t, d),
				mxAMQP:  newAMQPEndpoint(t, d),
			}
			for _, s := range mxProtos {
				for _, r := range mxProtos {
					t.Run(s.String()+"→"+r.String(), func(t *testing.T) {
						for _, kind := range []string{"queue", "topic"} {
							if kind == "queue" && r.mqtt() {
								continue // MQTT cannot subscribe to a queue
							}
							t.Run(kind, func(t *testing.T) {
								for _, c := range mxCases() {
									t.Run(c.name, func(t *testing.T) {
										n := int(seq.Add(1))
										dest := mxDest{addr: fmt.Sprintf("mx.%d.%s", n, kind), queue: kind == "queue"}
										mxRun(t, eps[s], eps[r], s, r, dest, c.msg(n))
									})
								}
							})
						}
					})
				}
			}
		})
	}
}

func mxRun(t *testing.T, se, re mxEndpoint, s, r mxProto, d mxDest, m *mxOut) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, unsubscribe, err := re.subscribe(ctx, d)
	if err != nil {
		t.Fatalf("%s subscribe %s: %v", r, d.addr, err)
	}
	defer unsubscribe()
	if err := se.send(ctx, d, m); err != nil {
		t.Fatalf("%s send %s: %v", s, d.addr, err)
	}
	var got mxIn
	select {
	case got = <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not receive what %s sent to %s", r, s, d.addr)
	}
	mxCheck(t, s, r, d, m, got)
	if !d.queue {
		select {
		case dup := <-ch:
			t.Errorf("delivered twice: %q", dup.body)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// mxCheck compares what r received with what docs/protocol-mapping.md
// says arrives from s.
func mxCheck(t *testing.T, s, r mxProto, d mxDest, m *mxOut, got mxIn) {
	t.Helper()
	eq := func(field string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %#v, want %#v", field, got, want)
		}
	}
	if !bytes.Equal(got.body, m.body) {
		t.Errorf("body: got %q, want %q", got.body, m.body)
	}
	// Destination.
	switch {
	case r == mxSTOMP:
		eq("destination", got.dest, stompDest(d))
	case r.mqtt():
		eq("topic", got.dest, d.topic())
		eq("retain", got.retained, false)
	case r == mxAMQP:
		eq("to", got.dest, d.addr)
		// An amqp-value string comes back as one; anything else is a
		// single data section.
		want := "data"
		if s == mxAMQP && m.text {
			want = "string"
		}
		eq("AMQP body section", got.amqpBody, want)
		// No sender here sets a message-id: core's id is sent.
		if _, ok := got.messageID.(uint64); !ok {
			t.Errorf("message-id: got %#v, want core's id (a ulong)", got.messageID)
		}
	}
	// Durable: STOMP persistent, AMQP durable, MQTT QoS 1 (the
	// subscription's QoS) when durable, else 0.
	if r.mqtt() {
		want := byte(0)
		if m.durable {
			want = 1
		}
		eq("QoS", got.qos, want)
	} else {
		eq("durable", got.durable, m.durable)
	}
	if r == mxMQTT3 {
		return // MQTT 3.1.1 has only the payload
	}
	// Priority: MQTT has none (core's default 4).
	if r.hasPriority() {
		want := 4
		if s.hasPriority() && m.priority != 0 {
			want = int(m.priority)
		}
		eq("priority", got.priority, want)
	}
	// Content type: none from MQTT 3; an AMQP string body gets
	// text/plain for the others.
	wantCT := m.contentType
	switch {
	case !s.hasMQTT5Fields():
		wantCT = ""
	case s == mxAMQP && m.text && m.contentType == "" && r != mxAMQP:
		wantCT = textPlainUTF8
	}
	eq("content type", got.contentType, wantCT)
	// Correlation id, reply-to: STOMP, MQTT 5 and AMQP have them; MQTT
	// maps reply-to as a topic (docs/protocol-mapping.md, ReplyTo).
	wantCorr, wantReply := m.correlationID, m.replyTo
	if !s.hasMQTT5Fields() {
		wantCorr, wantReply = "", ""
	}
	switch {
	case r.mqtt():
		wantReply = strings.ReplaceAll(wantReply, ".", "/")
	case wantReply != "" && s.mqtt():
		// A response topic is a topic: the reply-to carries the routing
		// type in the receiver's terms.
		if r == mxSTOMP {
			wantReply = "/topic/" + wantReply
		} else {
			wantReply = "topic://" + wantReply
		}
	}
	eq("correlation id", got.correlationID, wantCorr)
	eq("reply-to", got.replyTo, wantReply)
	// Group id: STOMP and AMQP; subject: AMQP only (carried internally,
	// shown to nobody else).
	if r.hasGroupID() {
		want := m.groupID
		if !s.hasGroupID() {
			want = ""
		}
		eq("group id", got.groupID, want)
	}
	if r.hasSubject() {
		want := m.subject
		if !s.hasSubject() {
			want = ""
		}
		eq("subject", got.subject, want)
	}
	// Expiration: STOMP expires (absolute), AMQP absolute-expiry-time and
	// ttl, MQTT 5 message expiry interval (seconds). Exact where both
	// sides are absolute; else within the rounding of a relative value.
	mxCheckExpiry(t, s, r, m, got)
	// Properties: strings everywhere; other AMQP types as text in STOMP,
	// not sent to MQTT. No internal property shows.
	want := map[string]any{}
	if s.hasMQTT5Fields() {
		for k, v := range m.props {
			want[k] = v
		}
	}
	if s == mxAMQP {
		for k, v := range m.typedProps {
			switch r {
			case mxSTOMP:
				want[k] = fmt.Sprint(v)
			case mxAMQP:
				want[k] = v
			}
		}
	}
	// An MQTT publish's QoS, as ActiveMQ names it (an integer: not sent
	// to MQTT 5's string user properties).
	if s.mqtt() && !r.mqtt() {
		qos := int64(0)
		if m.durable {
			qos = 1
		}
		if r == mxSTOMP {
			want["ActiveMQ.MQTT.QoS"] = fmt.Sprint(qos)
		} else {
			want["ActiveMQ.MQTT.QoS"] = qos
		}
	}
	eq("properties", got.props, want)
}

func mxCheckExpiry(t *testing.T, s, r mxProto, m *mxOut, got mxIn) {
	t.Helper()
	if m.expires.IsZero() || !s.hasMQTT5Fields() {
		if !got.expires.IsZero() || got.ttl != 0 {
			t.Errorf("expiry: got %v (ttl %v), want none", got.expires, got.ttl)
		}
		return
	}
	const slack = 2 * time.Second
	near := func(field string, at time.Time, exact bool) {
		t.Helper()
		diff := at.Sub(m.expires)
		if exact && diff != 0 || diff < -slack || diff > slack {
			t.Errorf("%s: %v, want %v (off by %v)", field, at, m.expires, diff)
		}
	}
	absolute := s != mxMQTT5 // STOMP and AMQP send an absolute expiry
	switch r {
	case mxSTOMP:
		if got.expires.IsZero() {
			t.Errorf("expires: missing")
		} else {
			near("expires", got.expires, absolute)
		}
	case mxAMQP:
		if got.expires.IsZero() || got.ttl == 0 {
			t.Errorf("expiry: absolute-expiry-time %v, ttl %v: want both", got.expires, got.ttl)
			return
		}
		near("absolute-expiry-time", got.expires, absolute)
		near("ttl", got.recvAt.Add(got.ttl), false)
	case mxMQTT5:
		if got.ttl == 0 {
			t.Errorf("message expiry interval: missing")
		} else {
			near("message expiry interval", got.recvAt.Add(got.ttl), false)
		}
	}
}
