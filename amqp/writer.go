package amqp

import (
	"time"

	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
)

// transferOverhead bounds the encoded size of a transfer performative
// (handle, delivery id, an 8-byte tag, format, settled, more), so that a
// frame's share of a message is its max-frame-size less this.
const transferOverhead = 64

type itemKind uint8

const (
	kindFrame     itemKind = iota // body as given, on sess's channel (or 0)
	kindFlow                      // body is a *frames.Flow; the session fields are filled at write time
	kindDelivery                  // d to the client on link
	kindSettle                    // the broker's outcome for an incoming delivery
	kindClose                     // body is a *frames.Close; the connection ends after it
	kindResume                    // a session window reopened: send the backlogs
	kindRecheck                   // time to ask core again about held links (hold.go)
	kindHeartBeat                 // an empty frame
	kindNone                      // nothing (Finish's last item)
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

// enqueue hands it to the writer (an internal/outbound Writer; conn's
// writer is its encoder). Deliveries, bounded by link credit, and the
// broker's outcomes, bounded by the client's, do not count toward the
// writer's high-water mark. After a close the items are dropped.
func (c *conn) enqueue(it outItem) {
	c.out.PushBounded(it)
}

// kick makes the writer send the backlogs of sessions whose window
// reopened.
func (c *conn) kick() {
	c.out.PushBounded(outItem{kind: kindResume})
}

// closeWith sends close (with e, if any) after what is queued, then ends
// the connection.
func (c *conn) closeWith(e *frames.Error) {
	if !c.out.PushBounded(outItem{kind: kindClose, body: &frames.Close{Error: e}}) {
		c.nc.Close()
	}
}

// closeLater answers the peer's close from the read loop, whose end
// writes it (end's Finish, on the same goroutine when no writer runs).
func (c *conn) closeLater() {
	if !c.out.PushLater(outItem{kind: kindClose, body: &frames.Close{}}) {
		c.nc.Close()
	}
}

// autoAck collects, per pre-settled link, the last delivery written in
// one batch: they are acked after the write.
type autoAck struct {
	cons *core.Consumer
	last uint64
}

// writer is the encoder's state, made at the first item after the
// handshake. Its methods run on the outbound writer's goroutine, one at
// a time.
type writer struct {
	c        *conn
	buf      []byte // the outbound buffer, while Append runs
	mbuf     []byte // scratch for encoding one message
	acks     []autoAck
	blocked  []*session // sessions with a backlog
	transfer frames.Transfer
	tag      [8]byte
	closed   bool // close was encoded: the rest is dropped
	// A pending range of accepted outcomes: one disposition for a run of
	// consecutive delivery ids.
	setSess        *session
	setFirst, setN uint32
	// Held producer links (hold.go).
	held []*link // scratch
}

// maxScratch is the largest message scratch buffer kept between bursts.
const maxScratch = 64 << 10

// Append encodes it (outbound.Encoder). It never holds an item back:
// a delivery beyond its session's remote incoming window waits in the
// session's backlog (with the later frames of that session, so that
// they keep their order) until a flow reopens the window.
func (c *conn) Append(buf []byte, it outItem, held bool) ([]byte, bool) {
	w := c.w
	if w == nil {
		w = &writer{c: c}
		c.w = w
	}
	if w.closed {
		return buf, true
	}
	w.buf = buf
	w.append(&it)
	buf = w.buf
	w.buf = nil
	return buf, true
}

func (w *writer) append(it *outItem) {
	switch it.kind {
	case kindSettle:
		w.settle(it)
		return
	case kindNone:
		return
	case kindResume:
		w.resumeBacklogs()
		return
	case kindRecheck:
		w.recheckHeld()
		return
	}
	w.flushSettles()
	if it.sess != nil && len(it.sess.backlog) > 0 && it.kind != kindClose {
		w.park(it.sess, it)
		return
	}
	switch it.kind {
	case kindFrame:
		w.buf = frames.Append(w.buf, frames.TypeAMQP, it.channel(), it.body, nil)
	case kindFlow:
		w.flow(it)
	case kindDelivery:
		w.delivery(it)
	case kindHeartBeat:
		w.buf = frames.AppendEmpty(w.buf)
	case kindClose:
		w.buf = frames.Append(w.buf, frames.TypeAMQP, 0, it.body, nil)
		w.closed = true
		if len(w.buf) == 0 {
			w.c.nc.Close()
		}
	}
}

// Flush encodes the pending range of accepted outcomes before the write
// (outbound.Flusher).
func (c *conn) Flush(buf []byte) []byte {
	w := c.w
	if w == nil || w.setN == 0 {
		return buf
	}
	w.buf = buf
	w.flushSettles()
	buf = w.buf
	w.buf = nil
	return buf
}

// BeforeWrite has nothing to wait for (outbound.Encoder).
func (c *conn) BeforeWrite() {}

// Written notes the write for the heart-beats, acknowledges the
// pre-settled deliveries just written, and closes the connection once
// close is out (outbound.Encoder).
func (c *conn) Written() {
	c.lastWrite.Store(time.Now().UnixNano())
	w := c.w
	if w == nil {
		return
	}
	for _, a := range w.acks {
		a.cons.AckUpTo(a.last) // a closed consumer already gave them back
	}
	clear(w.acks)
	w.acks = w.acks[:0]
	if cap(w.mbuf) > maxScratch {
		w.mbuf = nil // grown for one large message: let it go
	}
	if w.closed {
		c.nc.Close()
	}
}

// startHeartBeats sends an empty frame whenever nothing was written for
// every (half the peer's idle timeout): a timer, no goroutine, checks
// when the last write was.
func (c *conn) startHeartBeats(every time.Duration) {
	c.hbEvery = every
	c.lastWrite.Store(time.Now().UnixNano())
	c.timerMu.Lock()
	if !c.timersStopped {
		c.hb = time.AfterFunc(every, c.heartBeat)
	}
	c.timerMu.Unlock()
}

// heartBeat is the heart-beat timer's function.
func (c *conn) heartBeat() {
	wait := c.hbEvery - time.Duration(time.Now().UnixNano()-c.lastWrite.Load())
	if wait <= 0 {
		c.out.PushBounded(outItem{kind: kindHeartBeat})
		wait = c.hbEvery
	}
	c.timerMu.Lock()
	if !c.timersStopped {
		c.hb.Reset(wait)
	}
	c.timerMu.Unlock()
}

// armRecheck makes the writer ask core about the held links in
// holdRecheck (hold.go), unless that is planned already.
func (c *conn) armRecheck() {
	c.timerMu.Lock()
	defer c.timerMu.Unlock()
	if c.recheckArmed || c.timersStopped {
		return
	}
	c.recheckArmed = true
	if c.recheckT == nil {
		c.recheckT = time.AfterFunc(holdRecheck, c.recheckDue)
	} else {
		c.recheckT.Reset(holdRecheck)
	}
}

func (c *conn) recheckDue() {
	c.timerMu.Lock()
	c.recheckArmed = false
	c.timerMu.Unlock()
	c.out.PushBounded(outItem{kind: kindRecheck})
}

// stopTimers stops the heart-beats and the rechecks for good.
func (c *conn) stopTimers() {
	c.timerMu.Lock()
	defer c.timerMu.Unlock()
	c.timersStopped = true
	if c.hb != nil {
		c.hb.Stop()
	}
	if c.recheckT != nil {
		c.recheckT.Stop()
	}
}

func (it *outItem) channel() uint16 {
	if it.sess == nil {
		return 0
	}
	return it.sess.ch
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
			s.waiting = true // the flow that reopens it kicks
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
