package core

import (
	"sync"
	"sync/atomic"
	"time"
)

// ref is a queue's reference to a message. A multicast message has one
// ref per subscription; the Message itself is shared. Every field is
// guarded by the owning queue's mu.
type ref struct {
	msg      *Message
	q        *Queue
	seq      uint64 // enqueue order within the queue
	failures uint32 // failed delivery attempts so far
	due      int64  // unix nanos when scheduled; 0 when ready

	durable   bool // on a durable queue, and journaled
	recovered bool // restored at start: it may have been delivered before

	// While in flight:
	consumer   *Consumer
	deliveryID uint64
}

// effectKind says what must follow a change made under a queue lock.
type effectKind uint8

const (
	moveExpired     effectKind = iota + 1 // to the expiry address
	moveRejected                          // to the dead-letter address
	moveMaxAttempts                       // to the dead-letter address
	settled                               // acked: journal it
	counted                               // failed attempt: journal the count
)

func (k effectKind) String() string {
	switch k {
	case moveExpired:
		return "expired"
	case moveRejected:
		return "rejected"
	}
	return "max delivery attempts exceeded"
}

// move is a consequence of a queue change that must happen outside the
// queue's lock: sending a message to another address, or a journal
// write (which may block on back-pressure). Moves are collected under
// the lock and carried out by Broker.carryOut after it is released.
type move struct {
	r      *ref
	reason effectKind
}

// Queue holds messages for its consumers: an anycast address's queue or
// one subscription of a multicast address.
type Queue struct {
	b         *Broker
	id        uint64 // in the bindings journal; 0 when not persisted
	name      string
	address   string // address, or wildcard pattern for a wildcard subscription
	routing   RoutingType
	durable   bool
	temporary bool // deleted when its last consumer leaves (non-durable subscription)
	shared    bool // a shared subscription: several competing consumers
	clientID  string
	settings  Settings

	mu        sync.Mutex
	ready     [MaxPriority + 1]deque // guarded by mu
	nready    int                    // guarded by mu
	sched     schedHeap              // guarded by mu
	timer     *time.Timer            // guarded by mu; fires at sched[0].due
	timerDue  int64                  // guarded by mu
	consumers []*Consumer            // guarded by mu, in attach order
	rr        int                    // guarded by mu: next round-robin index
	withCred  int                    // guarded by mu: consumers with credit > 0
	exclusive *Consumer              // guarded by mu: the active exclusive consumer
	groups    map[string]*Consumer   // guarded by mu: message group owners
	seq       uint64                 // guarded by mu
	deleted   bool                   // guarded by mu

	maxBytes    atomic.Int64 // bound on bytes; 0 = none (settings, or the consumer that created it)
	bytes       atomic.Int64
	lastDropLog atomic.Int64 // unix nanos of the last drop warning

	stats queueCounters
}

// queueCounters are updated under mu but read without it.
type queueCounters struct {
	depth, inflight, scheduled, consumers           atomic.Int64
	enqueued, acked, expired, deadLettered, dropped atomic.Uint64
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Address returns the address (or wildcard pattern) the queue is bound to.
func (q *Queue) Address() string { return q.address }

// Durable reports whether the queue survives a restart.
func (q *Queue) Durable() bool { return q.durable }

// limit sets q's byte bound when one is given.
func (q *Queue) limit(n int64) {
	if n > 0 {
		q.maxBytes.Store(n)
	}
}

// full reports whether m would take q over its byte bound.
func (q *Queue) full(m *Message) bool {
	max := q.maxBytes.Load()
	return max > 0 && q.bytes.Load()+int64(len(m.Body)) > max
}

// dropFull counts (and logs, at most once a minute per queue) a message
// dropped because q is full: never silent.
func (q *Queue) dropFull(m *Message) {
	q.stats.dropped.Add(1)
	now := time.Now().UnixNano()
	if last := q.lastDropLog.Load(); now-last > int64(time.Minute) && q.lastDropLog.CompareAndSwap(last, now) {
		q.b.log.Warn().Str("queue", q.name).Int64("max_bytes", q.maxBytes.Load()).Uint64("dropped_so_far", q.stats.dropped.Load()).
			Msg("queue full: dropping messages (address-full-policy DROP)")
	}
}

// gone accounts for a message leaving the queue for good.
func (q *Queue) gone(r *ref) {
	q.stats.depth.Add(-1)
	q.bytes.Add(-int64(len(r.msg.Body)))
}

// enqueue adds a fresh reference to m and dispatches.
func (q *Queue) enqueue(m *Message, now time.Time) {
	r := &ref{msg: m, q: q, durable: q.durable && m.Durable && q.b.msgs != nil}
	var moves []move
	q.mu.Lock()
	if q.addLocked(r, now) {
		moves = q.dispatchLocked(now, moves)
	}
	q.mu.Unlock()
	q.b.carryOut(moves)
}

// addLocked appends a new reference, held back until its delivery time
// if it has one. It reports whether r is ready for dispatch.
func (q *Queue) addLocked(r *ref, now time.Time) bool {
	if q.deleted {
		return false
	}
	q.seq++
	r.seq = q.seq
	q.stats.enqueued.Add(1)
	q.stats.depth.Add(1)
	m := r.msg
	q.bytes.Add(int64(len(m.Body)))
	if !m.DeliveryTime.IsZero() && m.DeliveryTime.After(now) {
		q.scheduleLocked(r, m.DeliveryTime.UnixNano())
		return false
	}
	q.ready[m.Priority].pushBack(r)
	q.nready++
	return true
}

// scheduleLocked holds r back until due and arms the timer if r is now
// the earliest.
func (q *Queue) scheduleLocked(r *ref, due int64) {
	r.due = due
	q.sched.push(r)
	q.stats.scheduled.Add(1)
	q.armTimerLocked()
}

func (q *Queue) armTimerLocked() {
	if len(q.sched) == 0 || q.deleted {
		return
	}
	due := q.sched[0].due
	if q.timer != nil && q.timerDue == due {
		return
	}
	d := time.Until(time.Unix(0, due))
	q.timerDue = due
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.onTimer)
	} else {
		q.timer.Reset(d)
	}
}

// onTimer moves due scheduled messages to the ready lists, in due order.
func (q *Queue) onTimer() {
	now := time.Now()
	var moves []move
	q.mu.Lock()
	q.timerDue = 0
	for len(q.sched) > 0 && q.sched[0].due <= now.UnixNano() {
		r := q.sched.pop()
		r.due = 0
		q.stats.scheduled.Add(-1)
		q.readyLocked(r)
	}
	q.armTimerLocked()
	moves = q.dispatchLocked(now, moves)
	q.mu.Unlock()
	q.b.carryOut(moves)
}

// readyLocked makes r available: a redelivery goes back to its place in
// queue order, a new message to the back.
func (q *Queue) readyLocked(r *ref) {
	if r.failures > 0 || r.deliveryID != 0 {
		q.ready[r.msg.Priority].insertOrdered(r)
	} else {
		q.ready[r.msg.Priority].pushBack(r)
	}
	q.nready++
}

// dispatchLocked hands ready messages to consumers with credit, highest
// priority first and FIFO within a priority. A message whose group owner
// has no credit is skipped, not blocking the others. Expired messages
// found on the way are collected for the expiry address.
func (q *Queue) dispatchLocked(now time.Time, moves []move) []move {
	if q.withCred == 0 || q.nready == 0 {
		return moves
	}
	for p := MaxPriority; p >= 0 && q.withCred > 0; p-- {
		d := &q.ready[p]
		for i := 0; i < d.len() && q.withCred > 0; {
			r := d.at(i)
			if r.msg.Expired(now) {
				d.removeAt(i)
				q.nready--
				moves = append(moves, move{r, moveExpired})
				continue
			}
			c, stop := q.pickLocked(r)
			if stop {
				return moves
			}
			if c == nil {
				i++
				continue
			}
			d.removeAt(i)
			q.nready--
			q.deliverLocked(c, r)
		}
	}
	return moves
}

// pickLocked chooses the consumer for r. It returns stop when no message
// can be delivered now (the exclusive consumer has no credit), or nil when
// only r must wait (its group's owner has no credit).
func (q *Queue) pickLocked(r *ref) (c *Consumer, stop bool) {
	if q.exclusive != nil {
		if q.exclusive.credit > 0 {
			return q.exclusive, false
		}
		return nil, true
	}
	gid := r.msg.GroupID
	if gid != "" {
		if owner := q.groups[gid]; owner != nil {
			if owner.credit > 0 {
				return owner, false
			}
			return nil, false
		}
	}
	n := len(q.consumers)
	for k := 0; k < n; k++ {
		i := (q.rr + k) % n
		if c := q.consumers[i]; c.credit > 0 {
			q.rr = (i + 1) % n
			if gid != "" {
				if q.groups == nil {
					q.groups = make(map[string]*Consumer)
				}
				q.groups[gid] = c
			}
			return c, false
		}
	}
	return nil, true
}

func (q *Queue) deliverLocked(c *Consumer, r *ref) {
	c.credit--
	if c.credit == 0 {
		q.withCred--
	}
	c.nextID++
	r.deliveryID = c.nextID
	r.consumer = c
	c.inflight = append(c.inflight, slot{r.deliveryID, r})
	c.live++
	q.stats.inflight.Add(1)
	c.handler(Delivery{ID: r.deliveryID, Message: r.msg, DeliveryCount: r.failures, Consumer: c, recovered: r.recovered})
}

// returnLocked puts an unacked message back after a failed or abandoned
// delivery. failed counts the attempt: past the address's max delivery
// attempts the message is dead-lettered, otherwise it waits out the
// redelivery delay.
func (q *Queue) returnLocked(r *ref, failed bool, now time.Time, moves []move) []move {
	r.consumer = nil
	q.stats.inflight.Add(-1)
	if q.deleted {
		q.gone(r)
		return moves
	}
	if failed {
		r.failures++
		if r.durable {
			moves = append(moves, move{r, counted})
		}
		if max := q.settings.MaxDeliveryAttempts; max > 0 && int(r.failures) >= max {
			return append(moves, move{r, moveMaxAttempts})
		}
		if d := q.settings.redeliveryDelay(r.failures); d > 0 {
			q.scheduleLocked(r, now.Add(d).UnixNano())
			return moves
		}
	}
	q.readyLocked(r)
	return moves
}

// ackedLocked counts a message consumed for good; a durable one is
// journaled after the lock is released.
func (q *Queue) ackedLocked(r *ref, moves []move) []move {
	r.consumer = nil
	q.stats.inflight.Add(-1)
	q.gone(r)
	q.stats.acked.Add(1)
	if r.durable {
		moves = append(moves, move{r, settled})
	}
	return moves
}

// expireScan moves expired messages that wait in the ready lists; those
// nobody tries to deliver would otherwise stay forever.
func (q *Queue) expireScan(now time.Time) {
	var moves []move
	q.mu.Lock()
	for p := range q.ready {
		d := &q.ready[p]
		for i := 0; i < d.len(); {
			if r := d.at(i); r.msg.Expired(now) {
				d.removeAt(i)
				q.nready--
				moves = append(moves, move{r, moveExpired})
				continue
			}
			i++
		}
	}
	q.mu.Unlock()
	q.b.carryOut(moves)
}

// deleteLocked drops every message and stops the timer; the queue is
// being deleted. Durable messages it held are returned as settled moves.
func (q *Queue) deleteLocked(moves []move) []move {
	q.deleted = true
	if q.timer != nil {
		q.timer.Stop()
	}
	for p := range q.ready {
		d := &q.ready[p]
		for i := 0; i < d.len(); i++ {
			if r := d.at(i); r.durable {
				moves = append(moves, move{r, settled})
			}
		}
		q.ready[p] = deque{}
	}
	for _, r := range q.sched {
		if r.durable {
			moves = append(moves, move{r, settled})
		}
	}
	q.nready = 0
	q.sched = nil
	q.stats.depth.Store(q.stats.inflight.Load())
	q.bytes.Store(0)
	q.stats.scheduled.Store(0)
	return moves
}

// QueueStats is a snapshot of a queue's counters.
type QueueStats struct {
	Name         string
	Address      string
	RoutingType  RoutingType
	Durable      bool
	Temporary    bool
	Depth        int64  // messages in the queue: ready, scheduled and in flight
	InFlight     int64  // delivered, not yet acked
	Scheduled    int64  // waiting for their delivery time or redelivery delay
	Consumers    int64  // attached consumers
	Enqueued     uint64 // messages added since start
	Dequeued     uint64 // messages acked since start
	Expired      uint64 // messages moved to the expiry address (or dropped)
	DeadLettered uint64 // messages moved to the dead-letter address (or dropped)
	Bytes        int64  // body bytes held
	MaxBytes     int64  // bound on Bytes; 0 = none
	Dropped      uint64 // messages not taken because the queue was full
}

// Stats returns a snapshot of q's counters without taking its lock.
func (q *Queue) Stats() QueueStats {
	return QueueStats{
		Name: q.name, Address: q.address, RoutingType: q.routing,
		Durable: q.durable, Temporary: q.temporary,
		Depth:        q.stats.depth.Load(),
		InFlight:     q.stats.inflight.Load(),
		Scheduled:    q.stats.scheduled.Load(),
		Consumers:    q.stats.consumers.Load(),
		Enqueued:     q.stats.enqueued.Load(),
		Dequeued:     q.stats.acked.Load(),
		Expired:      q.stats.expired.Load(),
		DeadLettered: q.stats.deadLettered.Load(),
		Bytes:        q.bytes.Load(),
		MaxBytes:     q.maxBytes.Load(),
		Dropped:      q.stats.dropped.Load(),
	}
}

// RoutingType returns Anycast for an address's queue, Multicast for a
// subscription.
func (q *Queue) RoutingType() RoutingType { return q.routing }
