package core

import (
	"sort"
	"time"

	"github.com/junctionmq/junction/core/selector"
)

// Delivery is one message handed to a consumer. It is passed by value;
// the Message is shared and must not be changed.
type Delivery struct {
	// ID identifies the delivery for Ack, Release and Reject. IDs grow by
	// one per delivery of a consumer.
	ID uint64
	// Message delivered.
	Message *Message
	// DeliveryCount is the number of earlier failed attempts to deliver
	// this message from this queue (AMQP's delivery-count; JMS's
	// JMSXDeliveryCount is DeliveryCount+1).
	DeliveryCount uint32
	// Mark is what a consumer of this queue marked an earlier delivery of
	// the message with (Consumer.Mark), kept with the message in its
	// queue (journaled for a durable one) until it is acked; 0 when it
	// was never marked.
	Mark uint32
	// Consumer the message was delivered to.
	Consumer *Consumer

	recovered bool
}

// Redelivered reports whether the message may have been delivered
// before: an earlier delivery failed, or the message was recovered from
// the journal after a restart (it may have been delivered, unacked,
// before the broker stopped).
func (d Delivery) Redelivered() bool { return d.DeliveryCount > 0 || d.recovered }

// Handler receives deliveries. It is called with the queue's lock held,
// so that a consumer sees messages in queue order: it must not block and
// must not call back into the broker (hand the delivery to the
// connection's writer and return).
type Handler func(Delivery)

// Consumer receives messages from one queue within its credit. Its
// methods may be called from any goroutine.
//
// Credit is the number of further messages the consumer may be sent. It
// only grows through [Consumer.Flow]: acks do not restore it, so a
// front-end decides when to grant more (STOMP on ack, AMQP by flow
// frames, MQTT by its receive maximum).
type Consumer struct {
	q         *Queue
	s         *Session
	handler   Handler
	exclusive bool
	sel       *selector.Selector // consumer-side selector (anycast queues); nil = everything
	noLocal   bool               // set q.noLocal while attached
	rd        *readAuthz         // q.rd when the session is checked: its user may consume each message's address
	ev        mirrorEvent        // a mirror's consumer (cluster.go): what its events say of its queue

	// Guarded by q.mu:
	credit   int
	nextID   uint64
	inflight []slot // by ascending delivery id; r is nil once settled
	live     int    // entries of inflight not yet settled
	closed   bool
	// seen[p] is the seq up to which the ready list of priority p holds
	// nothing this consumer may take (see Queue.scanForLocked).
	seen [MaxPriority + 1]uint64
	// On a non-destructive queue (nondestructive.go): given[p] is the seq
	// up to which the ready list of priority p has been given to (or
	// passed by) this consumer, and again holds its deliveries returned
	// to be offered again.
	given [MaxPriority + 1]uint64
	again []*ref
}

// Queue returns the queue the consumer reads.
func (c *Consumer) Queue() *Queue { return c.q }

// Flow grants n more credit (n > 0) and dispatches what it allows.
func (c *Consumer) Flow(n int) {
	if n <= 0 {
		return
	}
	q := c.q
	var moves []move
	var flow int
	var drain bool
	q.mu.Lock()
	if !c.closed {
		if c.credit == 0 {
			q.withCred++
		}
		c.credit += n
		moves = q.creditedLocked(c, time.Now(), moves)
		if q.up != nil {
			flow, drain = q.upCreditLocked()
		}
	}
	q.mu.Unlock()
	q.b.carryOut(moves)
	if q.up != nil {
		q.tellUpstream(flow, drain)
	}
}

// SetCredit sets the consumer's credit to n (n >= 0) and dispatches, for
// protocols that state credit absolutely.
func (c *Consumer) SetCredit(n int) {
	if n >= 0 {
		c.UpdateCredit(func(uint64) int { return n })
	}
}

// Credit returns the consumer's remaining credit.
func (c *Consumer) Credit() int {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	return c.credit
}

// slot is one delivery in a consumer's in-flight list.
type slot struct {
	id uint64
	r  *ref
}

// takeLocked removes delivery id from the in-flight list.
func (c *Consumer) takeLocked(id uint64) *ref {
	i := sort.Search(len(c.inflight), func(i int) bool { return c.inflight[i].id >= id })
	if i == len(c.inflight) || c.inflight[i].id != id || c.inflight[i].r == nil {
		return nil
	}
	r := c.inflight[i].r
	c.inflight[i].r = nil
	c.live--
	c.compactLocked()
	return r
}

// compactLocked drops settled entries at the front, and squeezes out the
// rest once they are half the list, keeping the list bounded by what is
// really in flight.
func (c *Consumer) compactLocked() {
	i := 0
	for i < len(c.inflight) && c.inflight[i].r == nil {
		i++
	}
	if i == len(c.inflight) {
		c.inflight = c.inflight[:0]
		return
	}
	if i > 0 {
		n := copy(c.inflight, c.inflight[i:])
		clear(c.inflight[n:])
		c.inflight = c.inflight[:n]
	}
	if len(c.inflight) > 32 && c.live < len(c.inflight)/2 {
		n := 0
		for _, e := range c.inflight {
			if e.r != nil {
				c.inflight[n] = e
				n++
			}
		}
		clear(c.inflight[n:])
		c.inflight = c.inflight[:n]
	}
}

// Mark stamps in-flight delivery id with mark (not 0), which the
// message keeps in its queue until it is acked: a later delivery of it
// (after a release, the consumer's close, or a restart) carries it as
// Delivery.Mark. A front-end whose protocol names a delivery by an id of
// its own, which it must use again when it resends (MQTT's packet ids,
// MQTT-4.4.0-1), marks the delivery with it. On a durable queue the mark
// is journaled with the message: done, if not nil, is called once it is
// on disk (at once otherwise) and must not block; with done nil it is
// written without waiting. A mark means something only to the front-end
// that set it: it is meant for queues one client reads (durable
// subscriptions).
func (c *Consumer) Mark(id uint64, mark uint32, done func(error)) error {
	q := c.q
	q.mu.Lock()
	r := c.inflightLocked(id)
	if r == nil {
		q.mu.Unlock()
		return ErrUnknownDelivery
	}
	r.mark = mark
	q.mu.Unlock()
	if q.up != nil {
		// A mirror's delivery: the mark is kept upstream, where the
		// message is (see MarkingUpstream).
		if mu, ok := q.up.(MarkingUpstream); ok {
			if done == nil {
				done = func(error) {}
			}
			mu.Mark(r.tag, mark, done)
		} else if done != nil {
			done(nil)
		}
		return nil
	}
	q.b.persistMark(r, mark, done)
	return nil
}

// inflightLocked returns in-flight delivery id, or nil.
func (c *Consumer) inflightLocked(id uint64) *ref {
	i := sort.Search(len(c.inflight), func(i int) bool { return c.inflight[i].id >= id })
	if i == len(c.inflight) || c.inflight[i].id != id {
		return nil
	}
	return c.inflight[i].r
}

// Ack consumes delivery id for good.
func (c *Consumer) Ack(id uint64) error {
	q := c.q
	q.mu.Lock()
	r := c.takeLocked(id)
	if r == nil {
		q.mu.Unlock()
		return ErrUnknownDelivery
	}
	var moves [1]move
	m := q.ackedLocked(r, moves[:0])
	q.mu.Unlock()
	q.b.carryOut(m)
	return nil
}

// AckUpTo acks every in-flight delivery with an ID up to and including
// id (STOMP's cumulative "client" mode) and returns how many it acked.
func (c *Consumer) AckUpTo(id uint64) (int, error) {
	q := c.q
	var moves []move
	q.mu.Lock()
	refs := c.takeUpToLocked(id)
	for _, r := range refs {
		moves = q.ackedLocked(r, moves)
	}
	q.mu.Unlock()
	q.b.carryOut(moves)
	if len(refs) == 0 {
		return 0, ErrUnknownDelivery
	}
	return len(refs), nil
}

func (c *Consumer) takeUpToLocked(id uint64) []*ref {
	var refs []*ref
	n := 0
	for n < len(c.inflight) && c.inflight[n].id <= id {
		if r := c.inflight[n].r; r != nil {
			refs = append(refs, r)
			c.live--
		}
		n++
	}
	if n > 0 {
		k := copy(c.inflight, c.inflight[n:])
		clear(c.inflight[k:])
		c.inflight = c.inflight[:k]
	}
	return refs
}

// Release gives delivery id back to the queue for another consumer. With
// failed set the attempt counts toward the address's max delivery
// attempts and redelivery delay (AMQP modified with delivery-failed,
// STOMP NACK); without, it does not (AMQP released).
func (c *Consumer) Release(id uint64, failed bool) error {
	q := c.q
	var moves []move
	now := time.Now()
	q.mu.Lock()
	r := c.takeLocked(id)
	if r == nil {
		q.mu.Unlock()
		return ErrUnknownDelivery
	}
	moves = q.returnLocked(r, failed, now, moves)
	moves = q.dispatchFreshLocked(now, moves)
	q.mu.Unlock()
	q.b.carryOut(moves)
	return nil
}

// Reject sends delivery id to the dead-letter address at once.
func (c *Consumer) Reject(id uint64) error {
	q := c.q
	q.mu.Lock()
	r := c.takeLocked(id)
	if r == nil {
		q.mu.Unlock()
		return ErrUnknownDelivery
	}
	if r.of != nil {
		q.ndSettleLocked(r, false) // the message stays, for the others
		q.mu.Unlock()
		return nil
	}
	r.consumer = nil
	q.stats.inflight.Add(-1)
	q.mu.Unlock()
	q.b.carryOut([]move{{r, moveRejected}})
	return nil
}

// Close detaches the consumer. Its unacked messages go back to the queue
// in order, each counted as a failed attempt (it may have been
// processed). Close is idempotent.
func (c *Consumer) Close() {
	c.s.forget(c)
	c.close(true)
}

func (c *Consumer) close(countFailure bool) {
	q := c.q
	var moves []move
	now := time.Now()
	q.mu.Lock()
	if c.closed {
		q.mu.Unlock()
		return
	}
	c.closed = true
	if c.credit > 0 {
		q.withCred--
	}
	c.credit = 0
	for i, x := range q.consumers {
		if x == c {
			q.consumers = append(q.consumers[:i], q.consumers[i+1:]...)
			break
		}
	}
	q.stats.consumers.Add(-1)
	q.b.emitConsumer(EventConsumerClosed, c, q)
	if q.rr >= len(q.consumers) {
		q.rr = 0
	}
	if q.exclusive == c {
		q.exclusive = nil
		for _, x := range q.consumers {
			if x.exclusive {
				q.exclusive = x
				break
			}
		}
	}
	for g, owner := range q.groups {
		if owner == c {
			delete(q.groups, g) // reassigned on the group's next message
		}
	}
	if c.noLocal {
		q.noLocal.CompareAndSwap(c.s.id, 0)
	}
	q.setReadersLocked()
	// Groups and exclusivity may have moved: what waited may be taken
	// now, by anyone.
	q.dirtyLocked()
	for _, x := range q.consumers {
		x.seen = [MaxPriority + 1]uint64{}
	}
	// Return in reverse so that each insert lands in front of the later ones.
	for i := len(c.inflight) - 1; i >= 0; i-- {
		r := c.inflight[i].r
		switch {
		case r == nil:
		case q.up != nil:
			// A mirror's consumer: closing the upstream below returns
			// these there, counted once.
			r.consumer = nil
			q.stats.inflight.Add(-1)
			q.gone(r)
		default:
			moves = q.returnLocked(r, countFailure, now, moves)
		}
	}
	c.inflight, c.live = nil, 0
	clear(c.again)
	c.again = nil
	drop := q.temporary && len(q.consumers) == 0
	if !drop {
		moves = q.dispatchLocked(now, moves)
	}
	q.mu.Unlock()
	q.b.carryOut(moves)
	if drop {
		q.b.deleteQueue(q)
	}
	if q.up != nil {
		q.up.Close()
	}
}
