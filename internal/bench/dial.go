package bench

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/Azure/go-amqp"
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/internal/stompclient"
)

// How the free-form runs of this package and the fixed scenarios of
// package scenario connect: one place for each client's options.

// STOMPDial describes a go-stomp connection.
type STOMPDial struct {
	Addr            string // host:port to dial
	Host            string // CONNECT's host header (RabbitMQ: the vhost)
	Login, Passcode string
	Version         string // accept-version; empty: what go-stomp offers
	// Timeout bounds the TCP connect plus CONNECT; SendTimeout a Send
	// waiting for go-stomp's write queue; ReceiptTimeout a RECEIPT;
	// CloseTimeout DISCONNECT's.
	Timeout, SendTimeout, ReceiptTimeout, CloseTimeout time.Duration
}

// DialSTOMP connects with heart-beats off (go-stomp asks for one-minute
// beats by default and drops the connection when a loaded broker is
// late) and go-stomp's logging silenced (a run reports its errors
// itself). It returns the socket too, for closing when DISCONNECT
// stalls.
func DialSTOMP(ctx context.Context, d STOMPDial) (net.Conn, *stomp.Conn, error) {
	nd := net.Dialer{Timeout: d.Timeout}
	nc, err := nd.DialContext(ctx, "tcp", d.Addr)
	if err != nil {
		return nil, nil, err
	}
	opts := []func(*stomp.Conn) error{
		stomp.ConnOpt.HeartBeat(0, 0),
		stomp.ConnOpt.Host(d.Host),
		stomp.ConnOpt.MsgSendTimeout(d.SendTimeout),
		stomp.ConnOpt.RcvReceiptTimeout(d.ReceiptTimeout),
		stomp.ConnOpt.DisconnectReceiptTimeout(d.CloseTimeout),
		stompclient.Quiet,
	}
	if d.Version != "" {
		opts = append(opts, stomp.ConnOpt.AcceptVersion(stomp.Version(d.Version)))
	}
	if d.Login != "" || d.Passcode != "" {
		opts = append(opts, stomp.ConnOpt.Login(d.Login, d.Passcode))
	}
	cctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	conn, err := stomp.ConnectWithContext(cctx, nc, opts...)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("STOMP CONNECT: %w", err)
	}
	return nc, conn, nil
}

// STOMPAcker acknowledges messages on a goroutine of its own, fed by an
// unbounded queue, so the goroutine reading a subscription's channel
// never calls Ack. go-stomp v3.1.3 has one goroutine that both hands
// MESSAGEs to the subscription's channel (16 deep, behind another 16) and
// writes the frames queued by Send and Ack (20 deep): once the broker has
// more messages out than those hold, that goroutine blocks on the full
// channel, and an Ack made by the channel's reader blocks on the full
// write queue that only the blocked goroutine drains: a deadlock that no
// socket close undoes. Each message is handed to the callback once
// acknowledged. Done is closed when the acker stops.
type STOMPAcker struct {
	conn  *stomp.Conn
	acked func(body []byte)
	fail  func(error)

	mu     sync.Mutex
	q      []*stomp.Message // guarded by mu
	closed bool             // guarded by mu
	kick   chan struct{}    // capacity 1
	Done   chan struct{}
}

// NewSTOMPAcker starts an acker for conn's messages: acked is called
// after each Ack, fail on the first error (then the acker stops).
func NewSTOMPAcker(conn *stomp.Conn, acked func(body []byte), fail func(error)) *STOMPAcker {
	a := &STOMPAcker{conn: conn, acked: acked, fail: fail, kick: make(chan struct{}, 1), Done: make(chan struct{})}
	go a.loop()
	return a
}

// Push queues m for acknowledgement; it never blocks.
func (a *STOMPAcker) Push(m *stomp.Message) {
	a.mu.Lock()
	a.q = append(a.q, m)
	a.mu.Unlock()
	a.wake()
}

// Stop ends the acker once it has acknowledged what is queued.
func (a *STOMPAcker) Stop() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.wake()
}

func (a *STOMPAcker) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *STOMPAcker) loop() {
	defer close(a.Done)
	var batch []*stomp.Message
	for range a.kick {
		a.mu.Lock()
		batch, a.q = a.q, batch[:0]
		closed := a.closed
		a.mu.Unlock()
		for i, m := range batch {
			batch[i] = nil
			if err := a.conn.Ack(m); err != nil {
				a.fail(fmt.Errorf("STOMP ACK: %w", err))
				return
			}
			a.acked(m.Body)
		}
		if closed {
			return
		}
	}
}

// MQTTDial describes a paho (MQTT 3.1.1) client.
type MQTTDial struct {
	Addr               string // host:port
	ClientID           string
	Username, Password string
	Clean              bool
	// OrderMatters: paho hands messages to the handler in order, one at
	// a time (false: a goroutine per message).
	OrderMatters bool
	// Timeout bounds CONNECT; KeepAlive, PingTimeout and WriteTimeout
	// are paho's.
	Timeout, KeepAlive, PingTimeout, WriteTimeout time.Duration
	// MaxResumePubInFlight is paho's; 0 leaves its default.
	MaxResumePubInFlight int
	// Lost, when set, is called when the connection is lost.
	Lost func(error)
}

// MQTTClient returns an unconnected paho client speaking MQTT 3.1.1 with
// no automatic reconnect: a lost connection ends a run.
func MQTTClient(d MQTTDial) mqtt.Client {
	o := mqtt.NewClientOptions().
		AddBroker("tcp://" + d.Addr).
		SetClientID(d.ClientID).
		SetProtocolVersion(4).
		SetCleanSession(d.Clean).
		SetOrderMatters(d.OrderMatters).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(d.Timeout).
		SetKeepAlive(d.KeepAlive).
		SetPingTimeout(d.PingTimeout).
		SetWriteTimeout(d.WriteTimeout)
	if d.MaxResumePubInFlight > 0 {
		o.SetMaxResumePubInFlight(d.MaxResumePubInFlight)
	}
	if d.Username != "" {
		o.SetUsername(d.Username).SetPassword(d.Password)
	}
	if d.Lost != nil {
		lost := d.Lost
		o.SetConnectionLostHandler(func(_ mqtt.Client, err error) { lost(err) })
	}
	return mqtt.NewClient(o)
}

// WaitToken waits for t for at most d, or until ctx ends.
func WaitToken(ctx context.Context, t mqtt.Token, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-t.Done():
		return t.Error()
	case <-tm.C:
		return fmt.Errorf("no answer within %v", d)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AMQPDial describes a go-amqp connection.
type AMQPDial struct {
	Addr       string // host:port
	Host       string // open's hostname; empty: none
	User, Pass string // SASL PLAIN when User is set, else ANONYMOUS
	Timeout    time.Duration
}

// DialAMQP opens a connection and a session on it, within d.Timeout. No
// idle timeout is asked of the broker: a loaded broker late with an
// empty frame must not fail a run (as heart-beat:0,0 for STOMP); go-amqp
// still answers the broker's own. It returns the socket too, for closing
// when the close handshake stalls.
func DialAMQP(ctx context.Context, d AMQPDial) (net.Conn, *amqp.Conn, *amqp.Session, error) {
	dctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	var nd net.Dialer
	nc, err := nd.DialContext(dctx, "tcp", d.Addr)
	if err != nil {
		return nil, nil, nil, err
	}
	opts := &amqp.ConnOptions{IdleTimeout: -1, SASLType: amqp.SASLTypeAnonymous(), HostName: d.Host}
	if d.User != "" {
		opts.SASLType = amqp.SASLTypePlain(d.User, d.Pass)
	}
	conn, err := amqp.NewConn(dctx, nc, opts)
	if err != nil {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("AMQP open: %w", err)
	}
	sess, err := conn.NewSession(dctx, nil)
	if err != nil {
		conn.Close()
		nc.Close()
		return nil, nil, nil, fmt.Errorf("AMQP begin: %w", err)
	}
	return nc, conn, sess, nil
}
