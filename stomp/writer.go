package stomp

import (
	"strconv"
	"time"

	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/stomp/internal/wire"
)

// flushSize is how much encoded output the writer collects before it
// writes even though more is queued.
const flushSize = 64 << 10

// autoAck collects, per auto-ack subscription, the deliveries written in
// one batch: they are acked and their credit returned after the write.
type autoAck struct {
	cons *core.Consumer
	last uint64
	n    int
}

// writeLoop owns the socket's write side. It takes everything queued,
// encodes it into one buffer and writes it when the queue is empty (or
// the buffer is large), so a burst of frames costs one syscall. It sends
// heart-beats when the connection has been silent for the negotiated
// interval.
func (c *conn) writeLoop() {
	defer close(c.wdone)
	buf := make([]byte, 0, flushSize)
	var items []outItem
	var acks []autoAck
	var hb *time.Timer
	lastWrite := time.Now()
	for {
		c.outMu.Lock()
		items, c.out = c.out, items[:0]
		c.ctrl = 0
		idle := c.writeIdle
		c.drained.Broadcast()
		c.outMu.Unlock()

		if len(items) == 0 {
			var hbC <-chan time.Time
			if idle > 0 {
				wait := idle - time.Since(lastWrite)
				if wait <= 0 {
					buf = wire.EncodeHeartBeat(buf)
					if !c.write(&buf) {
						return
					}
					lastWrite = time.Now()
					wait = idle
				}
				if hb == nil {
					hb = time.NewTimer(wait)
					defer hb.Stop()
				} else {
					hb.Reset(wait)
				}
				hbC = hb.C
			}
			select {
			case <-c.wake:
			case <-hbC:
			}
			continue
		}

		closing := false
		for i := range items {
			it := &items[i]
			if it.f != nil {
				buf = wire.Encode(buf, it.f, c.version)
			} else if it.sub != nil {
				buf = c.appendMessage(buf, it.d, it.sub)
				if it.d.Message.Streamed() && !c.streamBody(&buf, it.d.Message) {
					return
				}
				if it.sub.ack == ackAuto {
					// The delivery names its consumer: sub.consumer may not
					// be set yet when Subscribe's first deliveries arrive.
					acks = noteAuto(acks, it.d.Consumer, it.d.ID)
				}
			}
			if it.close {
				closing = true
				break
			}
			if len(buf) >= flushSize {
				if !c.write(&buf) {
					return
				}
			}
		}
		clear(items)
		if len(buf) > 0 {
			if !c.write(&buf) {
				return
			}
			lastWrite = time.Now()
		}
		for i := range acks {
			a := &acks[i]
			if n, err := a.cons.AckUpTo(a.last); err == nil {
				a.cons.Flow(n)
			}
		}
		clear(acks)
		acks = acks[:0]
		if closing {
			c.stopWriter(nil)
			return
		}
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

// write sends buf and empties it. On failure it stops the writer and
// reports false.
func (c *conn) write(buf *[]byte) bool {
	c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	_, err := c.nc.Write(*buf)
	*buf = (*buf)[:0]
	if err != nil {
		c.stopWriter(err)
		return false
	}
	return true
}

// stopWriter records why the writer ended, refuses further output and
// closes the socket so the read loop ends too.
func (c *conn) stopWriter(err error) {
	c.outMu.Lock()
	c.stopping = true
	if c.werr == nil {
		c.werr = err
		if err == nil {
			c.werr = errConnClosing
		}
	}
	c.out = nil
	c.drained.Broadcast()
	c.outMu.Unlock()
	c.nc.Close()
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
