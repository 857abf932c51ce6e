package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/Azure/go-amqp"
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/go-stomp/stomp/v3"
)

const closeTimeout = 2 * time.Second

// closeWithin runs fn for at most closeTimeout, then after (the socket
// close) whatever happened.
func closeWithin(fn func(), after func()) {
	done := make(chan struct{})
	go func() {
		fn()
		close(done)
	}()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	if after != nil {
		after()
	}
}

// Senders must not keep body after send returns: the caller reuses it.

// ---- STOMP (go-stomp) ----

type stompClient struct{ clientBase }

type stompConn struct {
	nc      net.Conn
	conn    *stomp.Conn
	sub     *stomp.Subscription
	done    chan struct{} // closed when the subscription's reader returns
	ackDone chan struct{} // closed when its acknowledger returns, if any
}

func (c *stompClient) connect(ctx context.Context) (*stompConn, error) {
	nc, conn, err := DialSTOMP(ctx, STOMPDial{Addr: c.addr, Host: c.host, Login: c.user, Passcode: c.pass,
		Timeout: c.o.DialTimeout, SendTimeout: 30 * time.Second, ReceiptTimeout: 30 * time.Second, CloseTimeout: closeTimeout})
	if err != nil {
		return nil, err
	}
	return &stompConn{nc: nc, conn: conn}, nil
}

func (c *stompClient) fanout() bool { return false }

// sender opens the producer's connections. go-stomp holds a connection's
// lock while it waits for a receipt, so receipted sends on one
// connection go one at a time: a durable producer gets a connection per
// window slot, which is how its window of unconfirmed sends is reached.
func (c *stompClient) sender(ctx context.Context, _ int) (sender, error) {
	n := 1
	if c.o.Durable {
		n = c.o.Window
	}
	s := &stompSender{conns: make(chan *stompConn, n), dest: c.o.Destination, durable: c.o.Durable}
	for range n {
		sc, err := c.connect(ctx)
		if err != nil {
			s.close()
			return nil, err
		}
		s.all = append(s.all, sc)
		s.conns <- sc
	}
	return s, nil
}

type stompSender struct {
	conns   chan *stompConn // idle connections
	all     []*stompConn
	dest    string
	durable bool
}

func (s *stompSender) send(ctx context.Context, body []byte) error {
	var sc *stompConn
	select {
	case sc = <-s.conns:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { s.conns <- sc }()
	if s.durable {
		return sc.conn.Send(s.dest, "application/octet-stream", body,
			stomp.SendOpt.Header("persistent", "true"), stomp.SendOpt.Receipt)
	}
	// Without a receipt go-stomp returns before its writer goroutine has
	// written the frame: hand it a copy, as the caller reuses body.
	return sc.conn.Send(s.dest, "application/octet-stream", bytes.Clone(body))
}

func (s *stompSender) abort() {
	for _, sc := range s.all {
		sc.abort()
	}
}

func (s *stompConn) abort() { s.nc.Close() }

func (s *stompSender) close() {
	var wg sync.WaitGroup
	for _, sc := range s.all {
		wg.Go(sc.close)
	}
	wg.Wait()
}

func (s *stompConn) close() {
	if s.sub != nil {
		closeWithin(func() { s.sub.Unsubscribe() }, nil)
	}
	closeWithin(func() { s.conn.Disconnect() }, func() { s.nc.Close() })
	// With the socket closed the reader ends; an Ack blocked inside
	// go-stomp may never return, so neither wait is unbounded.
	waitWithin(s.done, closeTimeout)
	waitWithin(s.ackDone, closeTimeout)
}

// waitWithin waits for ch to close, for at most d; a nil ch is done.
func waitWithin(ch <-chan struct{}, d time.Duration) {
	if ch == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

func (c *stompClient) receiver(ctx context.Context, _ int, fn deliver, fail func(error)) (receiver, error) {
	sc, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	ack := stomp.AckAuto
	if c.o.Durable {
		ack = stomp.AckClientIndividual
	}
	sub, err := sc.conn.Subscribe(c.o.Destination, ack)
	if err != nil {
		sc.close()
		return nil, fmt.Errorf("SUBSCRIBE: %w", err)
	}
	sc.sub, sc.done = sub, make(chan struct{})
	var acks *STOMPAcker
	if ack != stomp.AckAuto {
		acks = NewSTOMPAcker(sc.conn, fn, fail)
		sc.ackDone = acks.Done
	}
	go func() {
		defer close(sc.done)
		if acks != nil {
			defer acks.Stop()
		}
		for msg := range sub.C {
			if msg.Err != nil {
				fail(fmt.Errorf("STOMP receive: %w", msg.Err))
				continue // keep reading: go-stomp must never block on sub.C
			}
			if acks != nil {
				acks.Push(msg)
				continue
			}
			fn(msg.Body)
		}
	}()
	return sc, nil
}

// ---- MQTT 3.1.1 (paho) ----

type mqttClient struct {
	clientBase
	fail func(error)
}

func (c *mqttClient) fanout() bool { return true }

func (c *mqttClient) qos() byte {
	if c.o.Durable {
		return 1
	}
	return 0
}

func (c *mqttClient) connect(ctx context.Context, role string, i int, clean bool) (mqtt.Client, error) {
	var tag [4]byte
	randRead(tag[:])
	id := fmt.Sprintf("bench-%s-%d-%x", role, i, tag)
	cl := MQTTClient(MQTTDial{Addr: c.addr, ClientID: id, Username: c.user, Password: c.pass, Clean: clean,
		Timeout: c.o.DialTimeout, KeepAlive: 60 * time.Second, PingTimeout: 20 * time.Second, WriteTimeout: 30 * time.Second,
		MaxResumePubInFlight: c.o.Window, Lost: func(err error) { c.fail(fmt.Errorf("MQTT connection lost: %w", err)) }})
	if err := WaitToken(ctx, cl.Connect(), c.o.DialTimeout); err != nil {
		return nil, fmt.Errorf("MQTT CONNECT: %w", err)
	}
	return cl, nil
}

type mqttConn struct {
	cl    mqtt.Client
	topic string
	qos   byte
	unsub bool
}

func (m *mqttConn) send(ctx context.Context, body []byte) error {
	// paho keeps the payload (for QoS 1, until PUBACK; it may resend):
	// hand it a copy, as the caller reuses body.
	return WaitToken(ctx, m.cl.Publish(m.topic, m.qos, false, bytes.Clone(body)), 30*time.Second)
}

func (m *mqttConn) abort() { m.cl.Disconnect(0) }

func (m *mqttConn) close() {
	if m.unsub {
		// Leave no persistent session behind.
		closeWithin(func() { m.cl.Unsubscribe(m.topic).WaitTimeout(closeTimeout) }, nil)
	}
	m.cl.Disconnect(250)
}

func (c *mqttClient) sender(ctx context.Context, i int) (sender, error) {
	cl, err := c.connect(ctx, "p", i, true)
	if err != nil {
		return nil, err
	}
	return &mqttConn{cl: cl, topic: c.o.Destination, qos: c.qos()}, nil
}

func (c *mqttClient) receiver(ctx context.Context, i int, fn deliver, _ func(error)) (receiver, error) {
	cl, err := c.connect(ctx, "c", i, !c.o.Durable)
	if err != nil {
		return nil, err
	}
	t := cl.Subscribe(c.o.Destination, c.qos(), func(_ mqtt.Client, m mqtt.Message) { fn(m.Payload()) })
	if err := WaitToken(ctx, t, c.o.DialTimeout); err != nil {
		cl.Disconnect(0)
		return nil, fmt.Errorf("SUBSCRIBE: %w", err)
	}
	return &mqttConn{cl: cl, topic: c.o.Destination, unsub: c.o.Durable}, nil
}

// ---- AMQP 1.0 (go-amqp) ----

type amqpClient struct{ clientBase }

func (c *amqpClient) fanout() bool { return false }

type amqpConn struct {
	nc   net.Conn
	conn *amqp.Conn
	sess *amqp.Session
	s    *amqp.Sender
	msg  func([]byte) *amqp.Message
	done chan struct{}
	stop context.CancelFunc
}

func (c *amqpClient) connect(ctx context.Context) (*amqpConn, error) {
	nc, conn, sess, err := DialAMQP(ctx, AMQPDial{Addr: c.addr, Host: c.host, User: c.user, Pass: c.pass, Timeout: c.o.DialTimeout})
	if err != nil {
		return nil, err
	}
	return &amqpConn{nc: nc, conn: conn, sess: sess}, nil
}

// durability: RabbitMQ declares a queue durable only when links ask for
// configuration durability; Junction ignores it.
func (c *amqpClient) durability() amqp.Durability {
	if c.o.Durable {
		return amqp.DurabilityConfiguration
	}
	return amqp.DurabilityNone
}

func (c *amqpClient) sender(ctx context.Context, _ int) (sender, error) {
	ac, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	opts := &amqp.SenderOptions{TargetDurability: c.durability()}
	if !c.o.Durable {
		opts.SettlementMode = amqp.SenderSettleModeSettled.Ptr()
	}
	actx, cancel := context.WithTimeout(ctx, c.o.DialTimeout)
	defer cancel()
	s, err := ac.sess.NewSender(actx, c.o.Destination, opts)
	if err != nil {
		ac.close()
		return nil, fmt.Errorf("attach sender: %w", err)
	}
	ac.s = s
	durable := c.o.Durable
	ac.msg = func(body []byte) *amqp.Message {
		m := amqp.NewMessage(body)
		if durable {
			m.Header = &amqp.MessageHeader{Durable: true}
		}
		return m
	}
	return ac, nil
}

func (a *amqpConn) send(ctx context.Context, body []byte) error {
	// go-amqp encodes the message inside Send: the body may be reused.
	return a.s.Send(ctx, a.msg(body), nil)
}

func (a *amqpConn) abort() { a.nc.Close() }

func (a *amqpConn) close() {
	if a.stop != nil {
		a.stop()
	}
	closeWithin(func() { a.conn.Close() }, func() { a.nc.Close() })
	waitWithin(a.done, closeTimeout)
}

func (c *amqpClient) receiver(ctx context.Context, _ int, fn deliver, fail func(error)) (receiver, error) {
	ac, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	opts := &amqp.ReceiverOptions{Credit: 500, SourceDurability: c.durability()}
	if !c.o.Durable {
		opts.RequestedSenderSettleMode = amqp.SenderSettleModeSettled.Ptr()
	}
	actx, cancel := context.WithTimeout(ctx, c.o.DialTimeout)
	defer cancel()
	r, err := ac.sess.NewReceiver(actx, c.o.Destination, opts)
	if err != nil {
		ac.close()
		return nil, fmt.Errorf("attach receiver: %w", err)
	}
	rctx, stop := context.WithCancel(context.Background())
	ac.stop, ac.done = stop, make(chan struct{})
	durable := c.o.Durable
	go func() {
		defer close(ac.done)
		for {
			msg, err := r.Receive(rctx, nil)
			if err != nil {
				if rctx.Err() == nil {
					fail(fmt.Errorf("AMQP receive: %w", err))
				}
				return
			}
			if durable {
				if err := r.AcceptMessage(rctx, msg); err != nil {
					if rctx.Err() == nil {
						fail(fmt.Errorf("AMQP accept: %w", err))
					}
					return
				}
			}
			fn(msg.GetData())
		}
	}()
	return ac, nil
}

func randRead(b []byte) { rand.Read(b) }
