package amqp

import (
	"errors"
	"fmt"

	"github.com/junctionmq/junction/amqp/internal/encoding"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
)

// session is one AMQP session: a pair of channels (the broker mirrors
// the peer's channel number) with its transfer windows and links.
type session struct {
	c  *conn
	ch uint16

	// Owned by the read loop.
	links map[uint32]*link // by handle (the broker mirrors the peer's)

	// Guarded by c.mu: the windows and sequences both loops use.
	nextIncomingID       uint32
	incomingWindow       uint32
	nextOutgoingID       uint32
	nextDeliveryID       uint32
	remoteIncomingWindow uint32
	unsettled            map[uint32]outDelivery // deliveries to the client not yet settled
	ended                bool

	// waiting: the writer found the peer's window closed; the flow that
	// reopens it kicks the writer. Guarded by c.mu.
	waiting bool

	// Owned by the writer: frames held back by the peer's window.
	backlog []outItem
}

// sessionError ends the session with an AMQP error condition.
type sessionError struct{ e *frames.Error }

func (e *sessionError) Error() string { return string(e.e.Condition) + ": " + e.e.Description }

func sessionErr(cond encoding.Symbol, format string, args ...any) error {
	return &sessionError{&frames.Error{Condition: cond, Description: fmt.Sprintf(format, args...)}}
}

func newSession(c *conn, ch uint16, b *frames.Begin) *session {
	return &session{
		c:                    c,
		ch:                   ch,
		links:                make(map[uint32]*link),
		nextIncomingID:       b.NextOutgoingID,
		incomingWindow:       c.s.cfg.SessionWindow,
		remoteIncomingWindow: b.IncomingWindow,
		unsettled:            make(map[uint32]outDelivery),
	}
}

// end ends the session, with e when it is the broker's doing, and
// answers or sends end.
func (s *session) end(e *frames.Error) {
	s.detachAll()
	s.c.mu.Lock()
	s.ended = true
	clear(s.unsettled)
	s.c.mu.Unlock()
	delete(s.c.sessions, s.ch)
	s.c.enqueue(outItem{sess: s, body: &frames.End{Error: e}})
}

// detachAll closes every link of the session (without closing their
// termini: durable subscriptions survive).
func (s *session) detachAll() {
	for h, l := range s.links {
		l.close(false)
		delete(s.links, h)
	}
}

// flow handles a flow: the session part updates the peer's window; the
// link part grants credit (client receivers) or asks for the broker's
// state.
func (s *session) flow(f *frames.Flow) error {
	c := s.c
	c.mu.Lock()
	// The peer's incoming window as it applies to the broker's next
	// transfer (Part 2 §2.5.6).
	next := uint32(0)
	if f.NextIncomingID != nil {
		next = *f.NextIncomingID
	}
	s.remoteIncomingWindow = next + f.IncomingWindow - s.nextOutgoingID
	open := s.remoteIncomingWindow > 0 && s.waiting
	if open {
		s.waiting = false
	}
	c.mu.Unlock()
	if open {
		c.kick()
	}
	if f.Handle == nil {
		if f.Echo {
			c.enqueue(outItem{kind: kindFlow, sess: s, body: &frames.Flow{}})
		}
		return nil
	}
	l := s.links[*f.Handle]
	if l == nil {
		return sessionErr(frames.ErrCondUnattachedHandle, "flow for handle %d, which is not attached", *f.Handle)
	}
	return l.flow(f)
}

// transfer handles one transfer frame: the session window, then the
// link reassembles and routes the message.
func (s *session) transfer(t *frames.Transfer, payload []byte) error {
	c := s.c
	c.mu.Lock()
	if s.incomingWindow == 0 {
		c.mu.Unlock()
		return sessionErr(frames.ErrCondWindowViolation, "transfer beyond the session's incoming window")
	}
	s.incomingWindow--
	s.nextIncomingID++
	refill := s.incomingWindow <= c.s.cfg.SessionWindow/2
	if refill {
		s.incomingWindow = c.s.cfg.SessionWindow
	}
	c.mu.Unlock()
	if refill {
		c.enqueue(outItem{kind: kindFlow, sess: s, body: &frames.Flow{}})
	}
	l := s.links[t.Handle]
	if l == nil {
		return sessionErr(frames.ErrCondUnattachedHandle, "transfer on handle %d, which is not attached", t.Handle)
	}
	if l.role != frames.RoleReceiver {
		return sessionErr(frames.ErrCondErrantLink, "transfer on link %q, on which the broker sends", l.name)
	}
	return l.transfer(t, payload)
}

// disposition applies a client's outcomes for deliveries the broker sent.
func (s *session) disposition(d *frames.Disposition) error {
	if d.Role == frames.RoleSender {
		return nil // the broker settles what it receives at once
	}
	last := d.First
	if d.Last != nil {
		last = *d.Last
	}
	c := s.c
	var picked []outDelivery
	var ids []uint32
	c.mu.Lock()
	if span := uint64(last - d.First); span < uint64(len(s.unsettled)) {
		for id := d.First; ; id++ {
			if od, ok := s.unsettled[id]; ok {
				picked, ids = append(picked, od), append(ids, id)
			}
			if id == last {
				break
			}
		}
	} else {
		// A range wider than what is outstanding: walk the map instead.
		for id, od := range s.unsettled {
			if id-d.First <= last-d.First {
				picked, ids = append(picked, od), append(ids, id)
			}
		}
	}
	if d.Settled {
		for _, id := range ids {
			delete(s.unsettled, id)
		}
	}
	c.mu.Unlock()
	for _, od := range picked {
		if err := c.applyOutcome(od, d.State); err != nil {
			return err
		}
	}
	if !d.Settled && len(ids) > 0 {
		// The client settles second (rcv-settle-mode second): the
		// broker has applied the outcome and settles.
		c.mu.Lock()
		for _, id := range ids {
			delete(s.unsettled, id)
		}
		c.mu.Unlock()
		c.enqueue(outItem{sess: s, body: &frames.Disposition{
			Role: frames.RoleSender, First: d.First, Last: d.Last, Settled: true, State: d.State,
		}})
	}
	return nil
}

// applyOutcome gives a delivery its client's outcome (Part 3 §3.4).
func (c *conn) applyOutcome(od outDelivery, state frames.DeliveryState) error {
	cons := od.link.cons
	var err error
	switch st := state.(type) {
	case nil, *frames.Accepted:
		err = cons.Ack(od.id)
	case *frames.Released:
		err = cons.Release(od.id, false)
	case *frames.Modified:
		if st.UndeliverableHere {
			// Core cannot keep a message from one consumer only; as
			// RabbitMQ does, undeliverable-here dead-letters it.
			err = cons.Reject(od.id)
		} else {
			err = cons.Release(od.id, st.DeliveryFailed)
		}
	case *frames.Rejected:
		err = cons.Reject(od.id)
	case *frames.TransactionalState:
		tx := c.txs[string(st.TxnID)]
		if tx == nil {
			return sessionErr(frames.ErrCondTxUnknownID, "transaction %x is not declared", st.TxnID)
		}
		switch st.Outcome.(type) {
		case nil, *frames.Accepted:
			err = tx.Ack(cons, od.id)
		default:
			// Other outcomes inside a transaction apply at once; only
			// acks are transactional in core.
			return c.applyOutcome(od, st.Outcome)
		}
	default:
		return sessionErr(frames.ErrCondNotImplemented, "outcome %T is not supported", state)
	}
	if err != nil && !errors.Is(err, core.ErrUnknownDelivery) {
		// A delivery already settled (its link closed) is not an error.
		c.debug().Err(err).Msg("outcome not applied")
	}
	return nil
}
