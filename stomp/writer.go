package stomp

import (
	"strconv"
	"time"

	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/stomp/internal/wire"
)

// autoAck collects, per auto-ack subscription, the deliveries written in
// one batch: they are acked and their credit returned after the write.
type autoAck struct {
	cons *core.Consumer
	last uint64
	n    int
}

// The connection's write side is an outbound.Writer (internal/outbound):
// it gathers a burst of queued frames into one write and runs a
// goroutine only while there is something to write. conn is its
// Encoder; these methods run on the writer's goroutine, one at a time.

// Append encodes it (outbound.Encoder). Nothing is held back: a
// subscription's deliveries are bounded by its prefetch in core. After
// an item that closes the connection, the rest is dropped.
func (c *conn) Append(buf []byte, it outItem, held bool) ([]byte, bool) {
	if c.wclosed {
		return buf, true
	}
	switch {
	case it.f != nil:
		buf = wire.Encode(buf, it.f, c.version)
	case it.sub != nil:
		buf = c.appendMessage(buf, it.d, it.sub)
		if it.d.Message.Streamed() {
			var ok bool
			if buf, ok = c.streamBody(buf, it.d.Message); !ok {
				break // the connection is closed: no auto-ack
			}
		}
		if it.sub.ack == ackAuto {
			// The delivery names its consumer: sub.consumer may not be
			// set yet when Subscribe's first deliveries arrive.
			c.acks = noteAuto(c.acks, it.d.Consumer, it.d.ID)
		}
	case it.heartBeat:
		buf = wire.EncodeHeartBeat(buf)
	}
	if it.close {
		c.wclosed = true
		if len(buf) == 0 {
			c.nc.Close() // what came before is written already
		}
	}
	return buf, true
}

// BeforeWrite has nothing to wait for (outbound.Encoder).
func (c *conn) BeforeWrite() {}

// Written notes the write for the heart-beats, acknowledges the
// auto-ack deliveries just written and returns their credit, and closes
// the connection once its last frame is out (outbound.Encoder).
func (c *conn) Written() {
	c.lastWrite.Store(time.Now().UnixNano())
	for i := range c.acks {
		a := &c.acks[i]
		if n, err := a.cons.AckUpTo(a.last); err == nil {
			a.cons.Flow(n)
		}
	}
	clear(c.acks)
	c.acks = c.acks[:0]
	if c.wclosed {
		c.nc.Close()
	}
}

func noteAuto(acks []autoAck, cons *core.Consumer, id uint64) []autoAck {
	for i := range acks {
		if acks[i].cons == cons {
			acks[i].last = id
			acks[i].n++
			return acks
		}
	}
	return append(acks, autoAck{cons: cons, last: id, n: 1})
}

// startHeartBeats sends a heart-beat whenever nothing was written for
// every: a timer, no goroutine, checks when the last write was.
func (c *conn) startHeartBeats(every time.Duration) {
	c.hbEvery = every
	c.lastWrite.Store(time.Now().UnixNano())
	c.outMu.Lock()
	c.hb = time.AfterFunc(every, c.heartBeat)
	c.outMu.Unlock()
}

// heartBeat is the heart-beat timer's function.
func (c *conn) heartBeat() {
	wait := c.hbEvery - time.Duration(time.Now().UnixNano()-c.lastWrite.Load())
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.stopping {
		return
	}
	if wait <= 0 {
		c.out.PushBounded(outItem{heartBeat: true})
		wait = c.hbEvery
	}
	c.hb.Reset(wait)
}

// appendMessage encodes a delivery as a MESSAGE frame.
func (c *conn) appendMessage(buf []byte, d core.Delivery, sub *subscription) []byte {
	m := d.Message
	v := c.version
	buf = append(buf, "MESSAGE\n"...)
	buf = wire.AppendHeader(buf, frame.Subscription, sub.id, v)
	buf = append(buf, "message-id:"...)
	buf = strconv.AppendUint(buf, m.ID, 10)
	buf = append(buf, '\n')
	buf = wire.AppendHeader(buf, frame.Destination, destinationOf(m), v)
	if v == wire.V12 {
		buf = append(buf, "ack:"...)
		buf = strconv.AppendUint(buf, sub.seq, 10)
		buf = append(buf, '-')
		buf = strconv.AppendUint(buf, d.ID, 10)
		buf = append(buf, '\n')
	} else if sub.ack != ackAuto {
		c.outMu.Lock()
		sub.legacy = append(sub.legacy, legacyAck{messageID: m.ID, deliveryID: d.ID})
		c.outMu.Unlock()
	}
	if d.Redelivered() {
		buf = append(buf, "redelivered:true\n"...)
	}
	buf = appendMessageHeaders(buf, m, v)
	buf = append(buf, "content-length:"...)
	buf = strconv.AppendInt(buf, m.Size(), 10)
	buf = append(buf, "\n\n"...)
	if m.Streamed() {
		return buf // the body and the NUL follow (streamBody)
	}
	buf = append(buf, m.Body...)
	return append(buf, 0)
}
