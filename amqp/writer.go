package amqp

import (
	"time"

	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
)

// flushSize is how much encoded output the writer collects before it
// writes even though more is queued.
const flushSize = 64 << 10

// transferOverhead bounds the encoded size of a transfer performative
// (handle, delivery id, an 8-byte tag, format, settled, more), so that a
// frame's share of a message is its max-frame-size less this.
const transferOverhead = 64

type itemKind uint8

const (
	kindFrame    itemKind = iota // body as given, on sess's channel (or 0)
	kindFlow                     // body is a *frames.Flow; the session fields are filled at write time
	kindDelivery                 // d to the client on link
	kindSettle                   // the broker's outcome for an incoming delivery
	kindClose                    // body is a *frames.Close; the connection ends after it
)

// outItem is one thing for the writer to send.
type outItem struct {
	kind itemKind
	sess *session
	body frames.Body
	link *link
	d    core.Delivery

	// kindSettle: the incoming delivery and the broker's outcome (nil
	// means accepted).
	deliveryID uint32
	state      frames.DeliveryState
	confirm    bool // counts against the link's unconfirmed deliveries

	// kindDelivery in a session backlog: the encoded message, what was
	// sent of it, and its delivery id once started.
	msg     []byte
	off     int
	started bool
	owned   bool // msg is the item's own, not the writer's scratch
	// kindDelivery of a streamed body: what is left of it (stream.go).
	stream *outStream
}

// outDelivery is a delivery sent to a client and not yet settled by it.
type outDelivery struct {
	link *link
	id   uint64 // core delivery id
}

// enqueue hands it to the writer. It reports false when the connection
// is closing.
func (c *conn) enqueue(it outItem) bool {
	c.outMu.Lock()
	if c.stopping {
		c.outMu.Unlock()
		return false
	}
	c.out = append(c.out, it)
	c.outMu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return true
}

// kick wakes the writer (a session window reopened).
func (c *conn) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// closeWith sends close (with e, if any) after what is queued, then ends
// the connection.
func (c *conn) closeWith(e *frames.Error) {
	if !c.enqueue(outItem{kind: kindClose, body: &frames.Close{Error: e}}) {
		c.nc.Close()
	}
}

// autoAck collects, per pre-settled link, the last delivery written in
// one batch: they are acked after the write.
type autoAck struct {
	cons *core.Consumer
	last uint64
}

// writer is the state of the write loop.
type writer struct {
	c        *conn
	buf      []byte
	mbuf     []byte // scratch for encoding one message
	acks     []autoAck
	blocked  []*session // sessions with a backlog
	transfer frames.Transfer
	tag      [8]byte
	// A pending range of accepted outcomes: one disposition for a run of
	// consecutive delivery ids.
	setSess        *session
	setFirst, setN uint32
	lastWrite      time.Time
	// Held producer links (hold.go).
	held        []*link // scratch
	lastRecheck time.Time
	holdT       *time.Timer
}

// writeLoop owns the socket's write side. It takes everything queued,
// encodes it into one buffer and writes it when the queue is empty (or
// the buffer is large), so a burst of frames costs one syscall. It sends
// an empty frame when the connection has been silent for half the peer's
// idle timeout.
func (c *conn) writeLoop() {
	defer close(c.wdone)
	w := &writer{c: c, buf: make([]byte, 0, flushSize), lastWrite: time.Now()}
	defer func() {
		if w.holdT != nil {
			w.holdT.Stop()
		}
	}()
	var items []outItem
	var hb *time.Timer
	for {
		c.outMu.Lock()
		if c.stopping {
			c.outMu.Unlock()
			return
		}
		items, c.out = c.out, items[:0]
		c.outMu.Unlock()

		w.resumeBacklogs()
		w.recheckHeld()
		if len(items) == 0 && len(w.buf) == 0 {
			var hbC <-chan time.Time
			if iv := c.peerIdle / 2; iv > 0 {
				wait := iv - time.Since(w.lastWrite)
				if wait <= 0 {
					w.buf = frames.AppendEmpty(w.buf)
					if !w.write() {
						return
					}
					wait = iv
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
			case <-w.holdTimer():
			}
			continue
		}

		closing := false
		for i := range items {
			it := &items[i]
			if it.kind == kindSettle {
				w.settle(it)
				continue
			}
			w.flushSettles()
			if it.sess != nil && len(it.sess.backlog) > 0 && it.kind != kindClose {
				w.park(it.sess, it)
				continue
			}
			switch it.kind {
			case kindFrame:
				w.buf = frames.Append(w.buf, frames.TypeAMQP, it.channel(), it.body, nil)
			case kindFlow:
				w.flow(it)
			case kindDelivery:
				w.delivery(it)
			case kindClose:
				w.buf = frames.Append(w.buf, frames.TypeAMQP, 0, it.body, nil)
				closing = true
			}
			if closing {
				break
			}
			if len(w.buf) >= flushSize && !w.write() {
				return
			}
		}
		clear(items)
		w.flushSettles()
		if len(w.buf) > 0 && !w.write() {
			return
		}
		for _, a := range w.acks {
			a.cons.AckUpTo(a.last) // a closed consumer already gave them back
		}
		clear(w.acks)
		w.acks = w.acks[:0]
		if closing {
			c.stopWriter(nil)
			return
		}
	}
}

func (it *outItem) channel() uint16 {
	if it.sess == nil {
		return 0
	}
	return it.sess.ch
}

// write sends the buffer and empties it. On failure it stops the writer
// and reports false.
func (w *writer) write() bool {
	c := w.c
	c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	_, err := c.nc.Write(w.buf)
	w.buf = w.buf[:0]
	w.lastWrite = time.Now()
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
	}
	c.out = nil
	c.outMu.Unlock()
	c.kick() // a writer waiting for work ends
	c.nc.Close()
}

// flow fills in the session's part of a flow and encodes it.
func (w *writer) flow(it *outItem) {
	f := it.body.(*frames.Flow)
	s := it.sess
	w.c.mu.Lock()
	if s.ended {
		w.c.mu.Unlock()
		return
	}
	nii := s.nextIncomingID
	f.NextIncomingID = &nii
	f.IncomingWindow = s.incomingWindow
	f.NextOutgoingID = s.nextOutgoingID
	f.OutgoingWindow = maxWindow
	w.c.mu.Unlock()
	w.buf = frames.Append(w.buf, frames.TypeAMQP, s.ch, f, nil)
}

// settle adds the broker's outcome for an incoming delivery: accepted
// ones are gathered into ranges of consecutive ids.
func (w *writer) settle(it *outItem) {
	c := w.c
	c.mu.Lock()
	ended := it.sess.ended
	due := false
	if it.confirm && it.link != nil {
		it.link.unconfirmed--
		due = it.link.refillDueLocked()
	}
	c.mu.Unlock()
	if ended {
		return // a confirmation arriving after its session ended
	}
	if due {
		if f := it.link.refill(); f != nil {
			w.flushSettles()
			w.flow(&outItem{sess: it.sess, body: f})
		}
	}
	if it.state == nil {
		if w.setSess == it.sess && w.setN > 0 && it.deliveryID == w.setFirst+w.setN {
			w.setN++
			return
		}
		w.flushSettles()
		w.setSess, w.setFirst, w.setN = it.sess, it.deliveryID, 1
		return
	}
	w.flushSettles()
	w.buf = frames.Append(w.buf, frames.TypeAMQP, it.sess.ch, &frames.Disposition{
		Role: frames.RoleReceiver, First: it.deliveryID, Settled: true, State: it.state,
	}, nil)
}

// flushSettles encodes the pending range of accepted outcomes.
func (w *writer) flushSettles() {
	if w.setN == 0 {
		return
	}
	d := &frames.Disposition{Role: frames.RoleReceiver, First: w.setFirst, Settled: true, State: &frames.Accepted{}}
	if w.setN > 1 {
		last := w.setFirst + w.setN - 1
		d.Last = &last
	}
	w.buf = frames.Append(w.buf, frames.TypeAMQP, w.setSess.ch, d, nil)
	w.setSess, w.setN = nil, 0
}

// delivery sends a message to a client, as far as the session's remote
// incoming window allows; the rest waits in the session's backlog, as do
// later frames of that session, so that they keep their order.
func (w *writer) delivery(it *outItem) {
	if !w.send(it) {
		w.park(it.sess, it)
	}
}

// park appends it to s's backlog.
func (w *writer) park(s *session, it *outItem) {
	if len(s.backlog) == 0 {
		w.blocked = append(w.blocked, s)
	}
	s.backlog = append(s.backlog, *it)
}

// resumeBacklogs sends what the reopened windows of blocked sessions
// allow, in order.
func (w *writer) resumeBacklogs() {
	if len(w.blocked) == 0 {
		return
	}
	still := w.blocked[:0]
	for _, s := range w.blocked {
		i := 0
		for ; i < len(s.backlog); i++ {
			it := &s.backlog[i]
			if it.kind == kindDelivery {
				if !w.send(it) {
					break
				}
			} else if it.kind == kindFlow {
				w.flow(it)
			} else {
				w.buf = frames.Append(w.buf, frames.TypeAMQP, s.ch, it.body, nil)
			}
		}
		clear(s.backlog[:i])
		s.backlog = s.backlog[i:]
		if len(s.backlog) > 0 {
			still = append(still, s)
		} else {
			s.backlog = nil
		}
	}
	clear(w.blocked[len(still):])
	w.blocked = still
}

// send encodes it's transfer frames while the session's remote incoming
// window lasts. It reports whether the delivery is done (sent whole, or
// dropped because its link or session is gone).
func (w *writer) send(it *outItem) bool {
	if it.d.Message.Streamed() {
		return w.sendStreamed(it)
	}
	c := w.c
	l := it.link
	s := l.sess
	if !it.started {
		w.mbuf = appendDelivery(w.mbuf[:0], it.d)
		it.msg = w.mbuf
	}
	chunk := int(c.peerMaxFrame) - frames.HeaderSize - transferOverhead
	c.mu.Lock()
	if s.ended || l.detached {
		c.mu.Unlock()
		return true
	}
	t := &w.transfer
	*t = frames.Transfer{Handle: l.handle}
	for {
		if s.remoteIncomingWindow == 0 {
			c.mu.Unlock()
			if !it.started {
				it.msg = nil // encoded again when the window opens
			} else if !it.owned {
				it.msg, it.off, it.owned = append([]byte(nil), it.msg[it.off:]...), 0, true
			}
			return false
		}
		if !it.started {
			it.started = true
			it.deliveryID = s.nextDeliveryID
			s.nextDeliveryID++
			if !l.settled {
				s.unsettled[it.deliveryID] = outDelivery{link: l, id: it.d.ID}
			}
			t.DeliveryID = &it.deliveryID
			t.DeliveryTag = deliveryTag(w.tag[:0], it.d.ID)
			t.MessageFormat = &zero32
			t.Settled = &l.settled
		} else {
			t.DeliveryID, t.DeliveryTag, t.MessageFormat, t.Settled = nil, nil, nil, nil
		}
		end := min(it.off+chunk, len(it.msg))
		t.More = end < len(it.msg)
		s.remoteIncomingWindow--
		s.nextOutgoingID++
		w.buf = frames.Append(w.buf, frames.TypeAMQP, s.ch, t, it.msg[it.off:end])
		it.off = end
		if !t.More {
			break
		}
	}
	c.mu.Unlock()
	if l.settled {
		w.noteAuto(l.cons, it.d.ID)
	}
	it.msg, it.owned = nil, false
	return true
}

var zero32 uint32

func (w *writer) noteAuto(cons *core.Consumer, id uint64) {
	for i := range w.acks {
		if w.acks[i].cons == cons {
			w.acks[i].last = id
			return
		}
	}
	w.acks = append(w.acks, autoAck{cons: cons, last: id})
}
