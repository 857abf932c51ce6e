package core

import (
	"context"
	"fmt"
)

// GroupSession is a group broker's side of an access broker's session
// (cluster mode, cluster.go): the cluster opens one on the group broker
// for each client session that uses the group, and it implements
// RemoteSession over the group broker's own Session and Consumers. Its
// sends never wait for room (a BLOCK address takes them over its limit):
// waiting would stall every other session the cluster carries for the
// same node.
type GroupSession struct {
	s *Session
}

// OpenGroupSession opens a GroupSession for a client session of an
// access broker: opts are the client's (user, client id, protocol), so
// that the group broker checks the client's permissions.
func (b *Broker) OpenGroupSession(opts SessionOptions) (*GroupSession, error) {
	opts.NoWait = true
	s, err := b.NewSession(opts)
	if err != nil {
		return nil, err
	}
	return &GroupSession{s: s}, nil
}

// Session returns the group broker's session.
func (g *GroupSession) Session() *Session { return g.s }

// Send routes m like Session.SendAsync; done may be nil. The group
// broker routes a copy of m: the access side keeps m to send it again
// if the answer is lost (a leader change), and the try that an earlier
// leader may still hold must not share the fields that routing the next
// try sets (its id, its timestamp).
func (g *GroupSession) Send(m *Message, done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	g.s.SendAsync(m.shallowCopy(), done)
}

// Blocked reports whether a send to address would wait for room on the
// group broker (Broker.Blocked): its sends do not wait, and the access
// side is told to hold its producers instead.
func (g *GroupSession) Blocked(address string) bool { return g.s.b.Blocked(address) }

// Attach subscribes a consumer with o whose deliveries go to sink,
// tagged with their delivery ids.
func (g *GroupSession) Attach(o ConsumerOptions, sink Sink) (Upstream, error) {
	o.Credit = 0
	ms, marks := sink.(MarkSink)
	o.Handler = func(d Delivery) {
		if marks && d.Mark != 0 {
			ms.DeliverMarked(d.ID, d.Message, d.DeliveryCount, d.Redelivered(), d.Mark)
			return
		}
		sink.Deliver(d.ID, d.Message, d.DeliveryCount, d.Redelivered())
	}
	c, err := g.s.Subscribe(o)
	if err != nil {
		return nil, err
	}
	return groupUpstream{c}, nil
}

// Commit runs a transaction of sends and acks of this session's
// upstream consumers.
func (g *GroupSession) Commit(ctx context.Context, sends []*Message, acks []TxAck) error {
	tx, err := g.s.Begin()
	if err != nil {
		return err
	}
	for _, m := range sends {
		if err := tx.Send(m); err != nil {
			tx.Rollback()
			return err
		}
	}
	for _, a := range acks {
		up, ok := a.Upstream.(groupUpstream)
		if !ok || up.c.s != g.s {
			tx.Rollback()
			return fmt.Errorf("%w: ack of another session's delivery", ErrUnknownDelivery)
		}
		if err := tx.Ack(up.c, a.Tag); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit(ctx)
}

// CommitRecords is Commit with client records of the session's client
// id in the transaction (RecordsSession).
func (g *GroupSession) CommitRecords(ctx context.Context, sends []*Message, acks []TxAck, records []ClientRecord) error {
	tx, err := g.s.Begin()
	if err != nil {
		return err
	}
	for _, r := range records {
		if err := tx.SetClientRecord(r.Key, r.Value); err != nil {
			tx.Rollback()
			return err
		}
	}
	for _, m := range sends {
		if err := tx.Send(m); err != nil {
			tx.Rollback()
			return err
		}
	}
	for _, a := range acks {
		up, ok := a.Upstream.(groupUpstream)
		if !ok || up.c.s != g.s {
			tx.Rollback()
			return fmt.Errorf("%w: ack of another session's delivery", ErrUnknownDelivery)
		}
		if err := tx.Ack(up.c, a.Tag); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit(ctx)
}

// SetClientRecord is Session.SetClientRecord (RecordsSession).
func (g *GroupSession) SetClientRecord(key string, value []byte, done func(error)) {
	if err := g.s.SetClientRecord(key, value, done); err != nil {
		done(err)
	}
}

// ClearClientRecords is Session.ClearClientRecords (RecordsSession).
func (g *GroupSession) ClearClientRecords(prefix string, done func(error)) {
	if err := g.s.ClearClientRecords(prefix, done); err != nil {
		done(err)
	}
}

// Unsubscribe is Session.Unsubscribe.
func (g *GroupSession) Unsubscribe(name string) error { return g.s.Unsubscribe(name) }

// CreateTemporaryQueue is Session.CreateTemporaryQueue.
func (g *GroupSession) CreateTemporaryQueue() (string, error) { return g.s.CreateTemporaryQueue() }

// Close is Session.Close.
func (g *GroupSession) Close() { g.s.Close() }

// groupUpstream is an upstream consumer on its group broker.
type groupUpstream struct{ c *Consumer }

func (u groupUpstream) Flow(n int) { u.c.Flow(n) }
func (u groupUpstream) Drain()     { u.c.Drain() }
func (u groupUpstream) Close()     { u.c.Close() }

// Mark is Consumer.Mark of the delivery tagged tag (MarkingUpstream).
func (u groupUpstream) Mark(tag uint64, mark uint32, done func(error)) {
	if err := u.c.Mark(tag, mark, done); err != nil {
		done(err)
	}
}

// Settle applies a mirror's outcome; an unknown tag (settled already,
// or delivered before a release) is ignored.
func (u groupUpstream) Settle(tag uint64, o Outcome) {
	switch o {
	case OutcomeAccepted:
		u.c.Ack(tag)
	case OutcomeReleased:
		u.c.Release(tag, false)
	case OutcomeFailed:
		u.c.Release(tag, true)
	case OutcomeRejected:
		u.c.Reject(tag)
	}
}
