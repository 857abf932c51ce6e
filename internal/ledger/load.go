package ledger

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/internal/stompclient"
)

// Dialer opens a connection to addr (host:port).
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

// Load is what a load client needs: where the brokers are, how to reach
// them, the ledger it records into and when to stop.
type Load struct {
	// Addrs are the brokers, in the order a client tries them at each
	// (re)connection.
	Addrs []string
	// Dial connects to a broker (nil: TCP from this process).
	Dial Dialer
	// Ledger records every message.
	Ledger *Ledger
	// Stop ends the client when closed.
	Stop <-chan struct{}
	// Timeout bounds each send and each acknowledgement (0: 5 s); a
	// client whose send times out drops its connection and fails over.
	Timeout time.Duration
	// Hold: a consumer on its first connection leaves one delivery in
	// twenty unacknowledged, up to Hold of them; they must come back,
	// flagged, once the connection ends.
	Hold int
	// Bounce, when closed, makes a consumer drop its connection once and
	// connect again (so that what it holds is delivered again).
	Bounce <-chan struct{}
}

func (l Load) timeout() time.Duration {
	if l.Timeout > 0 {
		return l.Timeout
	}
	return 5 * time.Second
}

func (l Load) dial(addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if l.Dial != nil {
		return l.Dial(ctx, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// FailoverDial tries each address in turn until dial succeeds, stop is
// closed, or a minute passes.
func FailoverDial[C any](addrs []string, stop <-chan struct{}, dial func(addr string) (C, error)) (C, bool) {
	var zero C
	deadline := time.Now().Add(time.Minute)
	for i := 0; time.Now().Before(deadline); i++ {
		if Stopped(stop) {
			return zero, false
		}
		c, err := dial(addrs[i%len(addrs)])
		if err == nil {
			return c, true
		}
		if i%len(addrs) == len(addrs)-1 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return zero, false
}

// withTimeout runs f, and closes c if f has not returned within d (f
// then fails with the connection); it returns f's error, or a timeout.
func withTimeout(c net.Conn, d time.Duration, f func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-errc:
		return err
	case <-t.C:
		c.Close()
		<-errc
		return fmt.Errorf("no answer within %v", d)
	}
}

type stompConn struct {
	nc   net.Conn
	c    *gostomp.Conn
	addr string
}

func (l Load) stompDial(addr string) (*stompConn, error) {
	nc, err := l.dial(addr)
	if err != nil {
		return nil, err
	}
	var c *gostomp.Conn
	err = withTimeout(nc, l.timeout(), func() (err error) {
		c, err = gostomp.Connect(nc, gostomp.ConnOpt.HeartBeat(0, 0), gostomp.ConnOpt.Host("/"), stompclient.Quiet)
		return err
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &stompConn{nc, c, addr}, nil
}

// StompProducer sends durable messages to dest with a receipt each,
// until l.Stop; a send that fails or times out is left unconfirmed and
// the next goes to whichever broker answers.
func StompProducer(id int, dest string, l Load) {
	var sc *stompConn
	defer func() {
		if sc != nil {
			sc.nc.Close()
		}
	}()
	for seq := 0; !Stopped(l.Stop); seq++ {
		if sc == nil {
			var ok bool
			if sc, ok = FailoverDial(l.Addrs, l.Stop, l.stompDial); !ok {
				return
			}
		}
		key, body := Body("stomp", id, seq)
		l.Ledger.Send(key, body)
		err := withTimeout(sc.nc, l.timeout(), func() error {
			return sc.c.Send(dest, "text/plain", []byte(body), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true"))
		})
		if err != nil {
			sc.nc.Close() // this one is unconfirmed
			sc = nil
			continue
		}
		l.Ledger.Confirm(key, "stomp", sc.addr)
	}
}

// mqttOptions are paho's options for the brokers of l, recording in
// *addr (under mu) the broker of the last connection attempt: the
// connected one once Connect succeeds.
func (l Load) mqttOptions(clientID string, mu *sync.Mutex, addr *string) *paho.ClientOptions {
	o := paho.NewClientOptions().SetClientID(clientID).
		SetConnectTimeout(2 * time.Second).SetWriteTimeout(l.timeout()).
		SetConnectionAttemptHandler(func(u *url.URL, tc *tls.Config) *tls.Config {
			mu.Lock()
			*addr = u.Host
			mu.Unlock()
			return tc
		})
	if l.Dial != nil {
		o.SetCustomOpenConnectionFn(func(u *url.URL, _ paho.ClientOptions) (net.Conn, error) {
			return l.dial(u.Host)
		})
	}
	for _, a := range l.Addrs {
		o.AddBroker("tcp://" + a)
	}
	return o
}

// MQTTProducer publishes at QoS 1 to topic, listing every broker in one
// paho client (paho tries them in order on Connect); it reconnects
// itself, with a new client, so that a publish is never resent under the
// same key.
func MQTTProducer(id int, topic string, l Load) {
	var c paho.Client
	var mu sync.Mutex
	var addr string
	defer func() {
		if c != nil {
			c.Disconnect(0)
		}
	}()
	for seq := 0; !Stopped(l.Stop); seq++ {
		if c == nil {
			var ok bool
			if c, ok = FailoverDial([]string{"all"}, l.Stop, func(string) (paho.Client, error) {
				o := l.mqttOptions(fmt.Sprintf("ledger-pub-%d", id), &mu, &addr).
					SetCleanSession(true).SetAutoReconnect(false).SetConnectRetry(false)
				c := paho.NewClient(o)
				tok := c.Connect()
				if !tok.WaitTimeout(5 * time.Second) {
					c.Disconnect(0)
					return nil, fmt.Errorf("connect: timeout")
				}
				return c, tok.Error()
			}); !ok {
				return
			}
		}
		key, body := Body("mqtt", id, seq)
		l.Ledger.Send(key, body)
		tok := c.Publish(topic, 1, false, body)
		if !tok.WaitTimeout(l.timeout()) || tok.Error() != nil {
			c.Disconnect(0)
			c = nil
			continue
		}
		mu.Lock()
		a := addr
		mu.Unlock()
		l.Ledger.Confirm(key, "mqtt", a)
	}
}

type amqpConn struct {
	nc   net.Conn
	c    *goamqp.Conn
	s    *goamqp.Session
	addr string
}

func (l Load) amqpDial(addr string) (*amqpConn, error) {
	nc, err := l.dial(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout())
	defer cancel()
	c, err := goamqp.NewConn(ctx, nc, &goamqp.ConnOptions{HostName: "localhost"})
	if err != nil {
		nc.Close()
		return nil, err
	}
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		c.Close()
		nc.Close()
		return nil, err
	}
	return &amqpConn{nc, c, s, addr}, nil
}

func (a *amqpConn) close() {
	a.nc.Close()
	a.c.Close()
}

// AMQPProducer sends durable messages to address ("queue://name") and
// waits for each to be accepted.
func AMQPProducer(id int, address string, l Load) {
	var ac *amqpConn
	var snd *goamqp.Sender
	defer func() {
		if ac != nil {
			ac.close()
		}
	}()
	for seq := 0; !Stopped(l.Stop); seq++ {
		if ac == nil {
			var ok bool
			if ac, ok = FailoverDial(l.Addrs, l.Stop, func(a string) (*amqpConn, error) {
				ac, err := l.amqpDial(a)
				if err != nil {
					return nil, err
				}
				ctx, cancel := context.WithTimeout(context.Background(), l.timeout())
				defer cancel()
				if snd, err = ac.s.NewSender(ctx, address, nil); err != nil {
					ac.close()
					return nil, err
				}
				return ac, nil
			}); !ok {
				return
			}
		}
		key, body := Body("amqp", id, seq)
		l.Ledger.Send(key, body)
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout())
		err := snd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte(body)}}, nil)
		cancel()
		if err != nil {
			ac.close()
			ac = nil
			continue
		}
		l.Ledger.Confirm(key, "amqp", ac.addr)
	}
}

// holder decides which deliveries a consumer leaves unacknowledged: one
// in twenty on its first connection, up to l.Hold.
type holder struct {
	max, n, held int
}

func (h *holder) hold(gen int) bool {
	h.n++
	if gen == 0 && h.n%20 == 0 && h.held < h.max {
		h.held++
		return true
	}
	return false
}

// bounced returns l.Bounce until the consumer has bounced once, then
// nil (the consumer drops its connection once).
func (l Load) bounced(bounces int) <-chan struct{} {
	if l.Bounce == nil || bounces > 0 {
		return nil
	}
	return l.Bounce
}

// StompConsumer subscribes to dest with client-individual acks and
// acknowledges everything it gets (but what Hold keeps), reconnecting to
// the next broker whenever its connection or subscription ends.
func StompConsumer(dest string, l Load) {
	h := holder{max: l.Hold}
	bounces := 0
	for gen := 0; !Stopped(l.Stop); gen++ {
		sc, ok := FailoverDial(l.Addrs, l.Stop, l.stompDial)
		if !ok {
			return
		}
		var sub *gostomp.Subscription
		err := withTimeout(sc.nc, l.timeout(), func() (err error) {
			sub, err = sc.c.Subscribe(dest, gostomp.AckClientIndividual, gostomp.SubscribeOpt.Header("activemq.prefetchSize", "300"))
			return err
		})
		if err != nil {
			sc.nc.Close()
			continue
		}
		// go-stomp deadlocks if Ack is called from the goroutine reading
		// sub.C while deliveries are fast; a second goroutine acks.
		toAck := make(chan *gostomp.Message, 1000)
		var ackWG sync.WaitGroup
		ackWG.Add(1)
		go func() {
			defer ackWG.Done()
			for m := range toAck {
				if withTimeout(sc.nc, l.timeout(), func() error { return sc.c.Ack(m) }) != nil {
					for range toAck {
					}
					return
				}
			}
		}()
		via := fmt.Sprintf("stomp@%s#%d", sc.addr, gen)
		bounce := l.bounced(bounces)
	read:
		for {
			select {
			case <-l.Stop:
				break read
			case <-bounce:
				bounces++
				break read
			case m, ok := <-sub.C:
				if !ok || m.Err != nil {
					break read
				}
				key, _ := l.Ledger.Deliver(m.Body, m.Header.Get("redelivered") == "true", via)
				if h.hold(gen) {
					l.Ledger.Hold(key)
					continue
				}
				toAck <- m
			}
		}
		close(toAck)
		ackWG.Wait()
		sc.nc.Close()
	}
}

// AMQPConsumer receives from address ("queue://name") with a credit of
// 200 and accepts (settles) each message, but what Hold keeps; delivery
// count ≥ 1 is the redelivered flag.
func AMQPConsumer(address string, l Load) {
	h := holder{max: l.Hold}
	bounces := 0
	for gen := 0; !Stopped(l.Stop); gen++ {
		var r *goamqp.Receiver
		ac, ok := FailoverDial(l.Addrs, l.Stop, func(a string) (*amqpConn, error) {
			ac, err := l.amqpDial(a)
			if err != nil {
				return nil, err
			}
			ctx, cancel := context.WithTimeout(context.Background(), l.timeout())
			defer cancel()
			if r, err = ac.s.NewReceiver(ctx, address, &goamqp.ReceiverOptions{Credit: 200}); err != nil {
				ac.close()
				return nil, err
			}
			return ac, nil
		})
		if !ok {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		bounce := l.bounced(bounces)
		go func() {
			select {
			case <-l.Stop:
			case <-bounce:
				bounces++
			case <-ctx.Done():
			}
			cancel()
		}()
		via := fmt.Sprintf("amqp@%s#%d", ac.addr, gen)
		for {
			m, err := r.Receive(ctx, nil)
			if err != nil {
				break
			}
			redelivered := m.Header != nil && m.Header.DeliveryCount > 0
			key, _ := l.Ledger.Deliver(m.GetData(), redelivered, via)
			if h.hold(gen) {
				l.Ledger.Hold(key)
				continue
			}
			actx, acancel := context.WithTimeout(ctx, l.timeout())
			err = r.AcceptMessage(actx, m)
			acancel()
			if err != nil {
				break
			}
		}
		cancel()
		ac.close()
	}
}

// MQTTConsumer subscribes to topic at QoS 1 in a persistent session
// (clean session false, a fixed client id), subscribing again at every
// connection, and acknowledges everything it gets but what Hold keeps;
// DUP is the redelivered flag. paho reconnects by itself, trying the
// brokers in order. It returns once the first subscription is granted
// (or with the error), and runs until l.Stop.
func MQTTConsumer(clientID, topic string, l Load) error {
	h := holder{max: l.Hold}
	var mu sync.Mutex
	var addr string
	gen := 0
	handler := func(_ paho.Client, m paho.Message) {
		mu.Lock()
		via, g := fmt.Sprintf("mqtt@%s#%d", addr, gen), gen
		mu.Unlock()
		key, _ := l.Ledger.Deliver(m.Payload(), m.Duplicate(), via)
		mu.Lock()
		hold := h.hold(g)
		mu.Unlock()
		if hold {
			l.Ledger.Hold(key)
			return
		}
		m.Ack()
	}
	connect := func() (paho.Client, error) {
		o := l.mqttOptions(clientID, &mu, &addr).SetCleanSession(false).SetAutoAckDisabled(true).
			SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(200 * time.Millisecond).
			SetMaxReconnectInterval(500 * time.Millisecond).
			SetOnConnectHandler(func(c paho.Client) { c.Subscribe(topic, 1, handler) }).
			SetConnectionLostHandler(func(paho.Client, error) {
				mu.Lock()
				gen++
				mu.Unlock()
			})
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
			c.Disconnect(0)
			return nil, errors.Join(errors.New("mqtt consumer: connect"), tok.Error())
		}
		if tok := c.Subscribe(topic, 1, handler); !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
			c.Disconnect(0)
			return nil, errors.Join(errors.New("mqtt consumer: subscribe"), tok.Error())
		}
		return c, nil
	}
	c, err := connect()
	if err != nil {
		return err
	}
	go func() {
		if l.Bounce != nil {
			select {
			case <-l.Bounce:
				c.Disconnect(0)
				mu.Lock()
				gen++
				mu.Unlock()
				var err error
				if c, err = connect(); err != nil {
					return
				}
			case <-l.Stop:
			}
		}
		<-l.Stop
		c.Disconnect(100)
	}()
	return nil
}
