package amqp_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/amqptest"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
)

func amqpRefusals(b *core.Broker, reason string) uint64 {
	return b.GuardStats().PreAuthRefused["amqp"][reason]
}

// saslHeader sends the SASL protocol header and reads the broker's
// header and mechanisms.
func (c *rawClient) saslHeader() {
	c.t.Helper()
	c.write(frames.ProtoSASL[:])
	if h := c.header(); h != frames.ProtoSASL {
		c.t.Fatalf("header % x", h)
	}
	expectSASL[*frames.SASLMechanisms](c)
}

// closedAfter reads until the broker closes the connection and fails if
// it sends anything.
func (c *rawClient) closedAfter() {
	c.t.Helper()
	b, err := io.ReadAll(c.br)
	if err != nil && !isReset(err) {
		c.t.Fatalf("want the connection closed, got %v", err)
	}
	if len(b) > 0 {
		c.t.Fatalf("broker sent % x before closing", b)
	}
}

// A SASL frame over 512 bytes (MIN-MAX-FRAME-SIZE, the most a SASL frame
// may be) is refused before its body is read: sasl-outcome sys-perm,
// then close; others go on.
func TestPreAuthSASLFrameTooLarge(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{})
	bs := tb.Session(t, nil)
	bsnd := amqptest.NewSender(t, bs, "bystander", nil)
	for _, size := range []uint32{513, 10 << 20} {
		c := dialRaw(t, tb)
		c.saslHeader()
		var hb [8]byte
		binary.BigEndian.PutUint32(hb[:], size)
		hb[4], hb[5] = 2, frames.TypeSASL
		c.write(hb[:])
		c.write(make([]byte, 100))
		if o := expectSASL[*frames.SASLOutcome](c); o.Code != frames.SASLCodeSysPerm {
			t.Fatalf("%d-byte SASL frame: outcome %d, want sys-perm (3)", size, o.Code)
		}
		c.closedAfter()
		amqptest.Send(t, bsnd, amqptest.Text("after"))
	}
	if got := amqpRefusals(tb.Core, core.PreAuthFrameTooLarge); got != 2 {
		t.Fatalf("frame_too_large refusals %d, want 2", got)
	}
	if held := tb.Core.GuardStats().PreAuthHeld; held != 0 {
		t.Fatalf("the budget holds %d bytes with every client logged in or gone", held)
	}
}

// Connections in their SASL exchange share the broker's
// pre-authentication budget: one it has no room for gets sasl-outcome
// sys-temp and is closed; once the bytes are given back, clients log in.
func TestPreAuthBudget(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{PreAuthBudget: 600})
	hog := dialRaw(t, tb)
	hog.saslHeader()
	// 400 bytes of a sasl-init that never completes.
	var hb [8]byte
	binary.BigEndian.PutUint32(hb[:], 500)
	hb[4], hb[5] = 2, frames.TypeSASL
	hog.write(append(hb[:], make([]byte, 392)...))
	testserve.Eventually(t, "the first client's bytes to be charged", func() bool {
		return tb.Core.GuardStats().PreAuthHeld >= 400
	})
	c := dialRaw(t, tb)
	c.saslHeader()
	c.write(append(hb[:], make([]byte, 392)...))
	if o := expectSASL[*frames.SASLOutcome](c); o.Code != frames.SASLCodeSysTemp {
		t.Fatalf("outcome %d, want sys-temp (4)", o.Code)
	}
	c.closedAfter()
	if got := amqpRefusals(tb.Core, core.PreAuthBudget); got != 1 {
		t.Fatalf("budget refusals %d, want 1", got)
	}
	hog.nc.Close()
	testserve.Eventually(t, "the budget to be given back", func() bool { return tb.Core.GuardStats().PreAuthHeld == 0 })
	tb.Session(t, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "secret")})
}

// After open, a frame trickled a byte at a time is cut once
// FrameTimeout has passed: close with amqp:resource-limit-exceeded. A
// large transfer uploaded steadily above FrameMinRate takes far longer
// and is delivered.
func TestFrameTimeout(t *testing.T) {
	t.Run("trickle", func(t *testing.T) {
		tb := amqptest.Start(t, amqp.Config{FrameTimeout: 300 * time.Millisecond, FrameMinRate: 64 << 10, IdleTimeout: -1}, core.Config{})
		c := dialRaw(t, tb)
		c.open(0)
		begin := frames.Append(nil, frames.TypeAMQP, 1, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 1000, OutgoingWindow: 1000}, nil)
		stop := make(chan struct{})
		defer close(stop)
		start := time.Now()
		go func() {
			for i := range begin {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := c.nc.Write(begin[i : i+1]); err != nil {
					return
				}
			}
		}()
		e := c.expectClosed()
		if e == nil || e.Condition != frames.ErrCondResourceLimitExceeded {
			t.Fatalf("close error %+v, want amqp:resource-limit-exceeded", e)
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Fatalf("cut after %v, before the frame timeout", d)
		}
		if n := tb.Core.GuardStats().FrameTimeouts["amqp"]; n != 1 {
			t.Fatalf("frame timeouts %d, want 1", n)
		}
	})

	t.Run("steady upload", func(t *testing.T) {
		tb := amqptest.Start(t, amqp.Config{FrameTimeout: time.Second, FrameMinRate: 32 << 10, IdleTimeout: -1}, core.Config{})
		rs := tb.Session(t, nil)
		rcv := amqptest.NewReceiver(t, rs, "slow", nil)
		c := dialRaw(t, tb)
		c.open(0)
		c.send(0, &frames.Attach{Name: "snd", Handle: 0, Role: frames.RoleSender, InitialDeliveryCount: u32(0),
			Source: &frames.Source{}, Target: &frames.Target{Address: addr("slow")}}, nil)
		expect[*frames.Attach](c)
		expect[*frames.Flow](c)
		body := bytes.Repeat([]byte{'s'}, 240<<10) // one frame: the broker's max-frame-size is 256 KiB
		settled := true
		frame := frames.Append(nil, frames.TypeAMQP, 0, &frames.Transfer{Handle: 0, DeliveryID: u32(0), DeliveryTag: []byte{0}, Settled: &settled},
			encodeMessage(&frames.Message{BodyKind: frames.BodyData, Data: [][]byte{body}}))
		// 8 KiB every 100ms, about 80 KiB/s: some 3s in all, past the 1s
		// timeout but above the minimum rate.
		start := time.Now()
		for i := 0; i < len(frame); i += 8 << 10 {
			time.Sleep(100 * time.Millisecond)
			if _, err := c.nc.Write(frame[i:min(i+8<<10, len(frame))]); err != nil {
				t.Fatalf("upload cut after %v: %v", time.Since(start), err)
			}
		}
		if d := time.Since(start); d < 2*time.Second {
			t.Fatalf("the upload took only %v", d)
		}
		m, err := rcv.Receive(amqptest.Ctx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.GetData(), body) {
			t.Fatalf("delivered %d bytes", len(m.GetData()))
		}
		rcv.AcceptMessage(amqptest.Ctx(t), m)
	})
}
