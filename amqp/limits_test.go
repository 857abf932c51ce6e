package amqp_test

import (
	"errors"
	"io"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/amqptest"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
)

// A client that does not finish the handshake (headers, SASL, open) in
// HandshakeTimeout is closed; other clients are not affected.
func TestHandshakeTimeout(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{HandshakeTimeout: 200 * time.Millisecond}, core.Config{})
	bs := tb.Session(t, nil)
	bsnd := amqptest.NewSender(t, bs, "bystander", nil)
	cases := map[string]func(c *rawClient){
		"silent": func(*rawClient) {},
		"header only": func(c *rawClient) {
			c.write(frames.ProtoAMQP[:])
			c.header()
		},
		"SASL then nothing": func(c *rawClient) {
			c.write(frames.ProtoSASL[:])
			c.header()
			expectSASL[*frames.SASLMechanisms](c)
		},
		"half an open": func(c *rawClient) {
			c.write(frames.ProtoAMQP[:])
			c.header()
			open := frames.Append(nil, frames.TypeAMQP, 0, &frames.Open{ContainerID: "slow"}, nil)
			c.write(open[:len(open)/2])
		},
	}
	for name, step := range cases {
		t.Run(name, func(t *testing.T) {
			start := time.Now() // before dialing: the broker's clock starts at accept
			c := dialRaw(t, tb)
			step(c)
			if _, err := io.ReadAll(c.br); err != nil && !isReset(err) {
				t.Fatalf("want the connection closed, got %v", err)
			}
			if d := time.Since(start); d < 200*time.Millisecond {
				t.Fatalf("closed after %v, before the timeout", d)
			}
			amqptest.Send(t, bsnd, amqptest.Text(name))
		})
	}
}

func isReset(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && !ne.Timeout()
}

// expectSASL reads one SASL frame of type T.
func expectSASL[T frames.Body](c *rawClient) T {
	c.t.Helper()
	_, perf, _ := c.nextFrame()
	v, ok := perf.(T)
	if !ok {
		c.t.Fatalf("got %T, want %T", perf, v)
	}
	return v
}

// Past MaxLinks on one connection, an attach is refused with
// amqp:resource-limit-exceeded; the connection and its links go on.
func TestMaxLinks(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{MaxLinks: 3}, core.Config{})
	c := tb.Dial(t, nil)
	s1, err := c.NewSession(amqptest.Ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.NewSession(amqptest.Ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	snd := amqptest.NewSender(t, s1, "links.q", nil)
	amqptest.NewSender(t, s2, "links.q", nil)
	rcv := amqptest.NewReceiver(t, s2, "links.q", nil) // the limit counts across sessions

	for _, attach := range []func() error{
		func() error { _, err := s1.NewSender(amqptest.Ctx(t), "links.q", nil); return err },
		func() error { _, err := s1.NewReceiver(amqptest.Ctx(t), "links.q", nil); return err },
	} {
		err := attach()
		var ae *goamqp.Error
		if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondResourceLimitExceeded {
			t.Fatalf("attach past the limit: %v, want %s", err, goamqp.ErrCondResourceLimitExceeded)
		}
	}
	// The links attached before still work.
	amqptest.Send(t, snd, amqptest.Text("after refusal"))
	if m := amqptest.Receive(t, rcv); string(m.GetData()) != "after refusal" {
		t.Fatalf("got %q", m.GetData())
	}
	// Detaching frees a slot.
	if err := snd.Close(amqptest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	amqptest.NewSender(t, s1, "links.q", nil)
}

// A message over MaxMessageSize, sent in frames within the frame size,
// makes the broker detach the link with amqp:link:message-size-exceeded
// (go-amqp never sends one: it honours the max-message-size of the
// broker's attach); the connection goes on.
func TestMessageSizeExceeded(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{MaxFrameSize: 4 << 10, MaxMessageSize: 64 << 10}, core.Config{})
	c := dialRaw(t, tb)
	c.open(0)
	c.send(0, &frames.Attach{Name: "big", Handle: 0, Role: frames.RoleSender, InitialDeliveryCount: u32(0),
		Source: &frames.Source{}, Target: &frames.Target{Address: addr("limit.q")}}, nil)
	if a, _ := expect[*frames.Attach](c); a.MaxMessageSize != 64<<10 {
		t.Fatalf("attach advertises max-message-size %d, want %d", a.MaxMessageSize, 64<<10)
	}
	expect[*frames.Flow](c)
	chunk := make([]byte, 3000)
	for i := range 22 { // the 22nd takes it past 65,536 bytes
		tr := &frames.Transfer{Handle: 0, More: true}
		if i == 0 {
			tr.DeliveryID, tr.DeliveryTag = u32(0), []byte{0}
		}
		c.send(0, tr, chunk)
	}
	for {
		perf, _ := c.next()
		if d, ok := perf.(*frames.Detach); ok {
			if d.Error == nil || d.Error.Condition != frames.ErrCondMessageSizeExceeded || !d.Closed {
				t.Fatalf("detach %+v, want closed with %s", d, frames.ErrCondMessageSizeExceeded)
			}
			break
		}
	}
	// The session goes on.
	c.send(0, &frames.Attach{Name: "small", Handle: 1, Role: frames.RoleSender, InitialDeliveryCount: u32(0),
		Source: &frames.Source{}, Target: &frames.Target{Address: addr("limit.q")}}, nil)
	expect[*frames.Attach](c)
}
