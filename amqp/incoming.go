package amqp

import (
	"context"
	"encoding/binary"
	"errors"
	"time"

	"github.com/junctionmq/junction/amqp/internal/encoding"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
)

// transfer takes one transfer frame of a client sender: it reassembles
// the delivery and, once complete, routes it.
func (l *link) transfer(t *frames.Transfer, payload []byte) error {
	c := l.sess.c
	p := l.partial
	if p == nil {
		if t.DeliveryID == nil {
			return connErr(frames.ErrCondInvalidField, "the first transfer of a delivery needs a delivery-id")
		}
		c.mu.Lock()
		if l.credit == 0 {
			c.mu.Unlock()
			l.detachWith(&frames.Error{Condition: frames.ErrCondTransferLimitExceeded, Description: "transfer without link credit"})
			return nil
		}
		l.credit--
		l.deliveryCount++
		settled := t.Settled != nil && *t.Settled
		if !settled {
			l.unconfirmed++
		}
		due := l.refillDueLocked()
		c.mu.Unlock()
		if due {
			if f := l.refill(); f != nil {
				c.enqueue(outItem{kind: kindFlow, sess: l.sess, body: f})
			}
		}
		p = &incoming{id: *t.DeliveryID, settled: settled}
		if ts, ok := t.State.(*frames.TransactionalState); ok {
			p.txn = append([]byte(nil), ts.TxnID...)
		}
	}
	if p.stream != nil {
		return l.streamTransfer(p, t, payload)
	}
	if t.Aborted {
		l.partial = nil // an aborted delivery is discarded, its credit spent
		l.settleIn(p, nil, false)
		return nil
	}
	if !t.More && len(p.buf) == 0 {
		l.partial = nil
		return l.receive(p, payload) // one frame: parse in place
	}
	if len(p.buf)+len(payload) > c.s.cfg.MaxMessageSize {
		l.partial = nil
		l.settleIn(p, nil, false)
		l.detachWith(&frames.Error{Condition: frames.ErrCondMessageSizeExceeded,
			Description: "message exceeds the broker's max-message-size"})
		return nil
	}
	p.buf = append(p.buf, payload...)
	if t.More {
		l.partial = p
		if th := c.core.StreamThreshold(); th > 0 && len(p.buf) > th && !p.noStream && !l.coordinator {
			return l.startStream(p)
		}
		return nil
	}
	l.partial = nil
	return l.receive(p, p.buf)
}

// settleIn answers an incoming delivery: with state (nil = accepted)
// unless it came pre-settled. send false only releases its place among
// the link's unconfirmed deliveries.
func (l *link) settleIn(p *incoming, state frames.DeliveryState, send bool) {
	if p.settled {
		return
	}
	if !send {
		c := l.sess.c
		c.mu.Lock()
		l.unconfirmed--
		c.mu.Unlock()
		return
	}
	l.sess.c.enqueue(outItem{kind: kindSettle, sess: l.sess, link: l, deliveryID: p.id, state: state, confirm: true})
}

// receive routes a complete message, confirming it once core has it (for
// a durable message, once the journal has it).
func (l *link) receive(p *incoming, raw []byte) error {
	pm, err := frames.ParseMessage(raw)
	if err != nil {
		return connErr(frames.ErrCondDecodeError, "message: %v", err)
	}
	if l.coordinator {
		l.txControl(p, pm)
		return nil
	}
	m, refusal := l.toMessage(pm)
	if refusal != nil {
		l.settleIn(p, refusal, true)
		return nil
	}
	l.route(p, m)
	return nil
}

// toMessage maps a client's message to core, resolving its address; a
// message core cannot take gets the outcome to settle it with.
func (l *link) toMessage(pm *frames.Message) (*core.Message, frames.DeliveryState) {
	c := l.sess.c
	addr, rt := l.addr, l.rt
	if addr == "" {
		if pm.Properties == nil || derefString(pm.Properties.To) == "" {
			return nil, rejected(frames.ErrCondNotFound, "the anonymous relay needs the message's to")
		}
		var err error
		addr, rt, err = c.resolve(*pm.Properties.To, jmsDestCaps(pm))
		if err != nil {
			return nil, rejectedBy(err)
		}
	}
	m, err := toCore(pm, addr, rt, time.Now())
	if err != nil {
		return nil, rejectedBy(err)
	}
	return m, nil
}

// route sends a complete message, in its transaction if it has one, and
// settles it once core has it (for a durable message, once the journal
// has it).
func (l *link) route(p *incoming, m *core.Message) {
	c := l.sess.c
	if p.txn != nil {
		tx := c.txs[string(p.txn)]
		if tx == nil {
			l.settleIn(p, rejected(frames.ErrCondTxUnknownID, "transaction is not declared"), true)
			return
		}
		var outcome frames.DeliveryState = &frames.Accepted{}
		if err := tx.Send(m); err != nil {
			outcome = rejectedBy(err)
		}
		l.settleIn(p, &frames.TransactionalState{TxnID: p.txn, Outcome: outcome}, true)
		return
	}
	if p.settled {
		c.core.SendAsync(m, c.logDropped)
		return
	}
	c.core.SendAsync(m, func(err error) {
		var st frames.DeliveryState
		if err != nil {
			st = rejectedBy(err)
		}
		l.settleIn(p, st, true)
	})
}

// logDropped notes a pre-settled message core could not take: the
// client gave up knowing.
func (c *conn) logDropped(err error) {
	if err != nil {
		c.debug().Err(err).Msg("pre-settled message dropped")
	}
}

// txControl serves the transaction coordinator: declare starts a core
// transaction, discharge commits or rolls it back (Part 4).
func (l *link) txControl(p *incoming, pm *frames.Message) {
	c := l.sess.c
	ctl, err := frames.DecodeTxControl(pm.Value)
	if err != nil {
		l.settleIn(p, rejected(frames.ErrCondDecodeError, err.Error()), true)
		return
	}
	switch x := ctl.(type) {
	case *frames.Declare:
		tx, err := c.core.Begin()
		if err != nil {
			l.settleIn(p, rejectedBy(err), true)
			return
		}
		c.nextTxn++
		id := binary.BigEndian.AppendUint32(nil, c.nextTxn)
		if c.txs == nil {
			c.txs = make(map[string]*core.Tx)
		}
		c.txs[string(id)] = tx
		l.settleIn(p, &frames.Declared{TxnID: id}, true)
	case *frames.Discharge:
		tx := c.txs[string(x.TxnID)]
		if tx == nil {
			l.settleIn(p, rejected(frames.ErrCondTxUnknownID, "transaction is not declared"), true)
			return
		}
		delete(c.txs, string(x.TxnID))
		if x.Fail {
			tx.Rollback()
			l.settleIn(p, nil, true)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.WriteTimeout)
		err := tx.Commit(ctx)
		cancel()
		if err != nil {
			l.settleIn(p, rejected(frames.ErrCondTxRollback, err.Error()), true)
			return
		}
		l.settleIn(p, nil, true)
	}
}

func rejected(cond encoding.Symbol, desc string) *frames.Rejected {
	return &frames.Rejected{Error: &frames.Error{Condition: cond, Description: desc}}
}

func rejectedBy(err error) *frames.Rejected {
	var le *linkError
	if errors.As(err, &le) {
		return &frames.Rejected{Error: le.e}
	}
	return rejected(conditionOf(err), err.Error())
}

// conditionOf maps a core error to an AMQP error condition.
func conditionOf(err error) encoding.Symbol {
	switch {
	case errors.Is(err, core.ErrAuthFailed), errors.Is(err, core.ErrUnauthorized):
		return frames.ErrCondUnauthorizedAccess
	case errors.Is(err, core.ErrAddressNotFound), errors.Is(err, core.ErrQueueNotFound):
		return frames.ErrCondNotFound
	case errors.Is(err, core.ErrAddressFull), errors.Is(err, core.ErrDiskFull), errors.Is(err, core.ErrQuotaExceeded):
		return frames.ErrCondResourceLimitExceeded
	case errors.Is(err, core.ErrInvalidAddress), errors.Is(err, core.ErrInvalidMessage),
		errors.Is(err, core.ErrRoutingMismatch), errors.Is(err, core.ErrInvalidSelector),
		errors.Is(err, core.ErrClientIDRequired):
		return frames.ErrCondInvalidField
	case errors.Is(err, core.ErrSubscriptionInUse):
		return frames.ErrCondResourceLocked
	case errors.Is(err, core.ErrClosed), errors.Is(err, core.ErrSessionClosed):
		return frames.ErrCondConnectionForced
	}
	return frames.ErrCondInternal
}
