package core

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/junctionmq/junction/core/selector"
)

// ref is a queue's reference to a message. A multicast message has one
// ref per subscription; the Message itself is shared. Every field is
// guarded by the owning queue's mu.
type ref struct {
	msg      *Message
	q        *Queue
	seq      uint64 // enqueue order within the queue
	failures uint32 // failed delivery attempts so far
	mark     uint32 // the consumer's mark of an earlier delivery (Consumer.Mark); 0 = none
	due      int64  // unix nanos when scheduled; 0 when ready

	durable   bool // on a durable queue, and journaled
	recovered bool // restored at start: it may have been delivered before

	// While in flight:
	consumer   *Consumer
	deliveryID uint64

	// tag is a mirror queue's upstream delivery tag (cluster.go).
	tag uint64

	// of is, for a delivery from a non-destructive queue, the queued ref
	// it was made from, which stays queued (nondestructive.go); nil for
	// every other ref.
	of *ref
}

// effectKind says what must follow a change made under a queue lock.
type effectKind uint8

const (
	moveExpired     effectKind = iota + 1 // to the expiry address
	moveRejected                          // to the dead-letter address
	moveMaxAttempts                       // to the dead-letter address
	settled                               // acked: journal it
	counted                               // failed attempt: journal the count
	moveUnreadable                        // no reader of a wildcard subscription may read it: remove it
	upAccepted                            // a mirror's delivery acked: settle it upstream
	upReleased                            // a mirror's delivery released: upstream
	upFailed                              // a mirror's delivery failed: upstream
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
	st        atomic.Pointer[Settings] // its address's settings; replaced by a reload (settings())
	owner     *Session                 // a temporary queue's session, which deletes it on close; nil otherwise
	filter    *selector.Selector       // a subscription's selector, applied as messages are routed to it
	// up is a mirror queue's upstream (cluster mode, cluster.go); nil
	// for every other queue. A mirror is fed only by its upstream, and
	// settles its deliveries there.
	up Upstream
	// doubt is up when it can tell deliveries that may have gone to
	// another consumer meanwhile (DoubtingUpstream).
	doubt DoubtingUpstream

	// subscriber is the identity of the session that created a
	// subscription, recorded in a durable one's binding; subKnown is
	// false for one recovered from a binding written before subscribers
	// were recorded, until a session attaches (guarded by Broker.mu
	// after creation). rd, set before the queue is bound, holds the read
	// checks of a subscription bound to a wildcard pattern; nil without
	// an Authorizer and for every other queue (readauthz.go).
	subscriber subscriber
	subKnown   bool
	rd         *readAuthz

	// noLocal is the id of the session whose own messages this
	// subscription refuses (its consumer asked for no-local); 0 = none.
	// It follows the attached consumer, so it is atomic for routing.
	noLocal atomic.Uint64

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
	// clean (guarded by mu) says that the last dispatch left nothing a
	// consumer could take: every ready ref waits for credit, for its
	// group's owner, or for a consumer whose selector it matches. Until
	// something changes that, a dispatch need only offer the refs made
	// ready since (fresh, guarded by mu), and a consumer given credit
	// need only look for itself (scanForLocked). Closing a consumer, and
	// more than maxFresh new refs at once, end it.
	clean bool
	fresh []*ref
	slow  bool // guarded by mu: lagging past the slow-consumer threshold (reported)
	// upWant (guarded by mu) is the credit a mirror's upstream has been
	// asked for and not used yet.
	upWant int

	// pg is the page store while the queue pages (guarded by mu); paging
	// mirrors pg != nil for the send path's lock-free look.
	pg     *pageState
	paging atomic.Bool

	// lv is the last-value and ring state (lvq.go), guarded by mu.
	lv lastValues
	// nd (guarded by mu) says consumers are given copies of the messages
	// and leave them queued (non-destructive, nondestructive.go). From
	// the settings at creation and at each reload; never on a mirror.
	nd bool

	maxBytes    atomic.Int64 // bound on bytes; 0 = none (settings, or the consumer that created it)
	capped      atomic.Bool  // maxBytes is a front-end's per-client budget (ConsumerOptions.MaxBytes)
	bytes       atomic.Int64
	mem         atomic.Int64                 // estimated memory of the messages held (memSize), for the depage floor
	lastDropLog [numDropReasons]atomic.Int64 // unix nanos of the last drop warning, per reason

	stats queueCounters
}

// queueCounters are updated under mu but read without it.
type queueCounters struct {
	depth, inflight, scheduled, consumers, paged    atomic.Int64
	enqueued, acked, expired, deadLettered, dropped atomic.Uint64
	slowKilled                                      atomic.Uint64
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
		q.capped.Store(true)
	}
}

// full reports whether m would take q over its byte bound.
func (q *Queue) full(m *Message) bool {
	max := q.maxBytes.Load()
	return max > 0 && q.bytes.Load()+int64(len(m.Body)) > max
}

// marks returns the marks of the messages q holds in memory (ready,
// scheduled and in flight). Marked messages are never paged out: a mark
// is set on a delivered message, which goes back to the ready lists.
func (q *Queue) marks() []uint32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []uint32
	for p := range q.ready {
		d := &q.ready[p]
		for i := range d.len() {
			if r := d.at(i); r.mark != 0 {
				out = append(out, r.mark)
			}
		}
	}
	for _, r := range q.sched {
		if r.mark != 0 {
			out = append(out, r.mark)
		}
	}
	for _, c := range q.consumers {
		for _, sl := range c.inflight {
			if sl.r != nil && sl.r.mark != 0 {
				out = append(out, sl.r.mark)
			}
		}
	}
	return out
}

// hold accounts for a message joining the queue's memory.
func (q *Queue) hold(r *ref) {
	q.stats.depth.Add(1)
	q.bytes.Add(int64(len(r.msg.Body)))
	q.mem.Add(memSize(r.msg) + refOverhead)
	q.b.hold(r.msg)
}

// gone accounts for a message leaving the queue for good.
func (q *Queue) gone(r *ref) {
	q.stats.depth.Add(-1)
	q.bytes.Add(-int64(len(r.msg.Body)))
	q.mem.Add(-memSize(r.msg) - refOverhead)
	q.b.release(r.msg)
}

// enqueue adds a fresh reference to m and dispatches.
func (q *Queue) enqueue(m *Message, now time.Time) {
	r := &ref{msg: m, q: q, durable: q.durable && m.Durable && q.b.msgs != nil}
	var moves []move
	q.mu.Lock()
	if q.addLocked(r, now) {
		moves = q.dispatchFreshLocked(now, moves)
	}
	moves = q.evictedLocked(moves)
	closers := q.checkSlowLocked()
	q.mu.Unlock()
	q.b.carryOut(moves)
	for _, close := range closers {
		close()
	}
}

// addLocked appends a new reference, held back until its delivery time
// if it has one. It reports whether r is ready for dispatch.
func (q *Queue) addLocked(r *ref, now time.Time) bool {
	if q.deleted {
		return false
	}
	q.stats.enqueued.Add(1)
	return q.placeLocked(r, now)
}

// placeLocked is addLocked for a message already counted as enqueued (one
// read back from the page store).
func (q *Queue) placeLocked(r *ref, now time.Time) bool {
	q.seq++
	r.seq = q.seq
	q.hold(r)
	m := r.msg
	// A mirror's messages are due: its group broker, whose clock
	// decides, has delivered them.
	if q.up == nil && !m.DeliveryTime.IsZero() && m.DeliveryTime.After(now) {
		q.scheduleLocked(r, m.DeliveryTime.UnixNano())
		q.lastValueLocked(r)
		return false
	}
	q.ready[m.Priority].pushBack(r)
	q.nready++
	q.freshLocked(r)
	q.lastValueLocked(r)
	return true
}

// maxFresh bounds the refs offered one by one after a clean dispatch;
// more than that (a burst of scheduled messages falling due) is a full
// dispatch.
const maxFresh = 16

// freshLocked notes a ref made ready: while q is clean, the next
// dispatch offers it alone.
func (q *Queue) freshLocked(r *ref) {
	if !q.clean {
		return
	}
	if len(q.fresh) == maxFresh {
		q.dirtyLocked()
		return
	}
	q.fresh = append(q.fresh, r)
}

// dirtyLocked makes the next dispatch look at every ready ref.
func (q *Queue) dirtyLocked() {
	q.clean = false
	clear(q.fresh)
	q.fresh = q.fresh[:0]
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
	moves = q.dispatchFreshLocked(now, moves)
	q.mu.Unlock()
	q.b.carryOut(moves)
}

// readyLocked makes r available: a redelivery goes back to its place in
// queue order, a new message to the back.
func (q *Queue) readyLocked(r *ref) {
	p := r.msg.Priority
	if r.failures > 0 || r.deliveryID != 0 {
		q.ready[p].insertOrdered(r)
		// Consumers that had looked past r's place must look at it.
		for _, c := range q.consumers {
			if c.seen[p] >= r.seq {
				c.seen[p] = r.seq - 1
			}
		}
	} else {
		// A scheduled message that fell due joins the back like a new
		// one, renumbered so that every ready list stays sorted by seq
		// (deque.search depends on it).
		q.seq++
		r.seq = q.seq
		q.ready[p].pushBack(r)
	}
	q.nready++
	q.freshLocked(r)
}

// Dispatch comes in three sizes. dispatchLocked is a full pass: one
// look per ready message (and, with selectors, one evaluation per
// consumer with credit), after which the queue is clean. On a clean
// queue, dispatchFreshLocked offers only the refs made ready since (a
// send, a release, a scheduled message falling due), and creditedLocked
// lets only the consumer given credit look, from where it stopped. So a
// send costs O(1) however many messages wait for a selective consumer,
// and a consumer passes each message it does not select once; a full
// pass happens when consumers leave, and whenever a caller changes
// state without saying what changed (dispatchLocked is always correct).

// dispatchLocked hands ready messages to consumers with credit, highest
// priority first and FIFO within a priority. A message whose group owner
// has no credit, or that no consumer with credit selects, is skipped,
// not blocking the others. Expired messages found on the way are
// collected for the expiry address.
func (q *Queue) dispatchLocked(now time.Time, moves []move) []move {
	if q.nd {
		return q.ndDispatchLocked(now, moves)
	}
	// Whatever the pass below leaves, nobody can take: clean.
	q.clean = true
	clear(q.fresh)
	q.fresh = q.fresh[:0]
	if q.withCred == 0 || q.nready == 0 {
		return moves
	}
	for p := MaxPriority; p >= 0 && q.withCred > 0; p-- {
		d := &q.ready[p]
		for i := 0; i < d.len() && q.withCred > 0; {
			r := d.at(i)
			if q.expiredLocked(r, now) {
				moves = q.dropReadyLocked(d, i, r, moveExpired, moves)
				continue
			}
			c, stop := q.pickLocked(r)
			if stop {
				return moves
			}
			if c == nil {
				if q.unreadableLocked(r) {
					moves = q.dropReadyLocked(d, i, r, moveUnreadable, moves)
					continue
				}
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

// dispatchFreshLocked dispatches after refs were made ready and nothing
// else changed: on a clean queue it offers only them.
func (q *Queue) dispatchFreshLocked(now time.Time, moves []move) []move {
	if !q.clean || q.nd {
		return q.dispatchLocked(now, moves)
	}
	fresh := q.fresh
	sortFresh(fresh)
	for _, r := range fresh {
		if q.withCred == 0 {
			break
		}
		moves = q.offerLocked(r, now, moves)
	}
	clear(fresh)
	q.fresh = fresh[:0]
	return moves
}

// sortFresh orders refs as a full pass would meet them: by priority,
// then queue order. There are at most maxFresh, so insertion sort.
func sortFresh(rs []*ref) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && freshBefore(rs[j], rs[j-1]); j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

func freshBefore(a, b *ref) bool {
	if a.msg.Priority != b.msg.Priority {
		return a.msg.Priority > b.msg.Priority
	}
	return a.seq < b.seq
}

// offerLocked tries to deliver one ready ref of a clean queue; the
// others are known to wait, so r may go first.
func (q *Queue) offerLocked(r *ref, now time.Time, moves []move) []move {
	d := &q.ready[r.msg.Priority]
	i := d.len() - 1
	if i < 0 || d.at(i) != r { // not the newest: find its place
		i = d.search(r.seq)
		if i == d.len() || d.at(i) != r {
			return moves // no longer ready
		}
	}
	if q.expiredLocked(r, now) {
		return q.dropReadyLocked(d, i, r, moveExpired, moves)
	}
	c, _ := q.pickLocked(r)
	if c == nil {
		if q.unreadableLocked(r) {
			moves = q.dropReadyLocked(d, i, r, moveUnreadable, moves)
		}
		return moves
	}
	d.removeAt(i)
	q.nready--
	q.deliverLocked(c, r)
	return moves
}

// creditedLocked dispatches after c was given credit. On a clean queue
// only c can take anything new, so only c looks, from where it stopped.
func (q *Queue) creditedLocked(c *Consumer, now time.Time, moves []move) []move {
	q.kickDepageLocked()
	if q.nd {
		return q.ndScanLocked(c, now, moves)
	}
	if q.clean && len(q.fresh) == 0 {
		return q.scanForLocked(c, now, moves)
	}
	return q.dispatchLocked(now, moves)
}

// scanForLocked delivers to c what it may take from a clean queue,
// within its credit. c.seen[p] remembers how far c has looked in each
// ready list: the refs up to there wait for reasons only closing a
// consumer changes (c's selector, another consumer's group or
// exclusivity), so a selective consumer on a deep queue passes each
// message it does not select once, not on every grant of credit.
func (q *Queue) scanForLocked(c *Consumer, now time.Time, moves []move) []move {
	if q.exclusive != nil && q.exclusive != c {
		return moves
	}
	for p := MaxPriority; p >= 0 && c.credit > 0; p-- {
		d := &q.ready[p]
		if d.len() == 0 {
			continue
		}
		for i := d.search(c.seen[p] + 1); i < d.len() && c.credit > 0; {
			r := d.at(i)
			if q.expiredLocked(r, now) {
				moves = q.dropReadyLocked(d, i, r, moveExpired, moves)
				continue
			}
			if !q.takesLocked(c, r) {
				if q.unreadableLocked(r) {
					moves = q.dropReadyLocked(d, i, r, moveUnreadable, moves)
					continue
				}
				c.seen[p] = r.seq
				i++
				continue
			}
			d.removeAt(i)
			q.nready--
			if gid := r.msg.GroupID; gid != "" && q.groups[gid] == nil {
				q.claimGroupLocked(gid, c)
			}
			q.deliverLocked(c, r)
		}
	}
	return moves
}

// dropReadyLocked takes r, ready ref i of d (one of q.ready), off the queue
// and adds its move (moveExpired, moveUnreadable) to moves: the step
// every pass over the ready lists takes for a ref met that must go.
func (q *Queue) dropReadyLocked(d *deque, i int, r *ref, why effectKind, moves []move) []move {
	d.removeAt(i)
	q.nready--
	return append(moves, move{r, why})
}

// expiredLocked reports whether r must go to the expiry address rather
// than to a consumer. A mirror queue never expires what it holds: its
// group broker has just delivered it, and moves expired messages itself.
func (q *Queue) expiredLocked(r *ref, now time.Time) bool {
	return q.up == nil && r.msg.Expired(now)
}

// takesLocked reports whether c may be given r, credit aside: c selects
// r, and r's group, if owned, is c's (or its owner does not select r).
func (q *Queue) takesLocked(c *Consumer, r *ref) bool {
	if !c.accepts(r) {
		return false
	}
	if gid := r.msg.GroupID; gid != "" {
		if owner := q.groups[gid]; owner != nil && owner != c && owner.accepts(r) {
			return false
		}
	}
	return true
}

func (q *Queue) claimGroupLocked(gid string, c *Consumer) {
	if q.groups == nil {
		q.groups = make(map[string]*Consumer)
	}
	q.groups[gid] = c
}

// pickLocked chooses the consumer for r. It returns stop when no message
// can be delivered now (the exclusive consumer has no credit), or nil when
// only r must wait: its group's owner has no credit, or no consumer with
// credit selects it.
//
// A group's messages go to its owner; one the owner's selector does not
// select goes to another consumer that selects it, without moving the
// group (rather than waiting for an owner that will never take it).
func (q *Queue) pickLocked(r *ref) (c *Consumer, stop bool) {
	if ex := q.exclusive; ex != nil {
		switch {
		case ex.credit == 0:
			return nil, true
		case !ex.accepts(r):
			return nil, false
		}
		return ex, false
	}
	gid := r.msg.GroupID
	var owner *Consumer
	if gid != "" {
		if owner = q.groups[gid]; owner != nil && owner.accepts(r) {
			if owner.credit > 0 {
				return owner, false
			}
			return nil, false
		}
	}
	n := len(q.consumers)
	for k := 0; k < n; k++ {
		i := (q.rr + k) % n
		if c := q.consumers[i]; c.credit > 0 && c.accepts(r) {
			q.rr = (i + 1) % n
			if gid != "" && owner == nil {
				q.claimGroupLocked(gid, c)
			}
			return c, false
		}
	}
	return nil, false
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
	c.s.msgsOut.Add(1)
	c.s.bytesOut.Add(uint64(r.msg.Size()))
	if q.doubt != nil && !r.recovered && q.doubt.Doubtful(r.tag) {
		r.recovered = true // maybe a duplicate: say so
	}
	c.handler(Delivery{ID: r.deliveryID, Message: r.msg, DeliveryCount: r.failures, Mark: r.mark, Consumer: c, recovered: r.recovered})
}

// returnLocked puts an unacked message back after a failed or abandoned
// delivery. failed counts the attempt: past the address's max delivery
// attempts the message is dead-lettered, otherwise it waits out the
// redelivery delay.
func (q *Queue) returnLocked(r *ref, failed bool, now time.Time, moves []move) []move {
	if r.of != nil {
		q.ndReturnLocked(r, failed)
		return moves
	}
	r.consumer = nil
	q.stats.inflight.Add(-1)
	if q.up != nil {
		// A mirror gives it back upstream, which redelivers it (maybe to
		// another consumer) and counts the attempt.
		q.gone(r)
		if failed {
			return append(moves, move{r, upFailed})
		}
		return append(moves, move{r, upReleased})
	}
	if q.deleted {
		q.gone(r)
		return moves
	}
	if failed {
		r.failures++
		if r.durable {
			moves = append(moves, move{r, counted})
		}
		if max := q.settings().MaxDeliveryAttempts; max > 0 && int(r.failures) >= max {
			return append(moves, move{r, moveMaxAttempts})
		}
		if d := q.settings().redeliveryDelay(r.failures); d > 0 {
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
	if r.of != nil {
		q.ndSettleLocked(r, true)
		return moves
	}
	r.consumer = nil
	q.stats.inflight.Add(-1)
	q.gone(r)
	q.stats.acked.Add(1)
	q.kickDepageLocked()
	switch {
	case r.durable:
		moves = append(moves, move{r, settled})
	case q.up != nil:
		moves = append(moves, move{r, upAccepted})
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
				moves = q.dropReadyLocked(d, i, r, moveExpired, moves)
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
			r := d.at(i)
			q.gone(r)
			if r.durable {
				moves = append(moves, move{r, settled})
			}
		}
		q.ready[p] = deque{}
	}
	for _, r := range q.sched {
		q.gone(r)
		if r.durable {
			moves = append(moves, move{r, settled})
		}
	}
	q.nready = 0
	q.sched = nil
	q.stats.scheduled.Store(0)
	// In-flight refs leave as they are acked or returned (returnLocked).
	q.dropPagesLocked()
	return moves
}

// QueueStats is a snapshot of a queue's counters.
type QueueStats struct {
	Name         string
	Address      string
	RoutingType  RoutingType
	Durable      bool
	Temporary    bool   // deleted with its consumer or session
	Depth        int64  // messages in the queue: ready, scheduled and in flight
	InFlight     int64  // delivered, not yet acked
	Scheduled    int64  // waiting for their delivery time or redelivery delay
	Consumers    int64  // attached consumers
	Enqueued     uint64 // messages added since start
	Dequeued     uint64 // messages acked since start
	Expired      uint64 // messages moved to the expiry address (or dropped)
	DeadLettered uint64 // messages moved to the dead-letter address (or dropped)
	Bytes        int64  // body bytes held in memory
	MaxBytes     int64  // bound on Bytes; 0 = none
	Paged        int64  // of Depth, the messages in the page store on disk
	Dropped      uint64 // messages not taken because the queue was full, or dropped from a full ring (ring-size)
	Replaced     uint64 // messages replaced by a newer one with their last-value key (lvq.go)
	SlowKilled   uint64 // subscribers disconnected by slow-consumer-policy KILL
	// OldestMessage is the send timestamp (Message.Timestamp) of the
	// queue's oldest message, zero when it holds none: the earliest of
	// each priority's first ready message, the unacked deliveries and
	// the next scheduled message (so a message scheduled further ahead
	// is not looked at).
	OldestMessage time.Time
	ClientID      string // a durable subscription's client id; "" otherwise
	Selector      string // a subscription's selector; "" for none and for queues (selectors are their consumers')
	// NonDestructive: consumers leave the messages queued (the address
	// setting non-destructive, nondestructive.go).
	NonDestructive bool
}

// Stats returns a snapshot of q's counters. It holds q's lock only to
// find OldestMessage, for a look per priority and per message in flight.
func (q *Queue) Stats() QueueStats {
	return QueueStats{
		OldestMessage:  q.oldest(),
		NonDestructive: q.up == nil && q.settings().NonDestructive,
		ClientID:       q.clientID,
		Selector:       q.filter.String(),
		Name:           q.name, Address: q.address, RoutingType: q.routing,
		Durable: q.durable, Temporary: q.temporary || q.owner != nil,
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
		Paged:        q.stats.paged.Load(),
		Dropped:      q.stats.dropped.Load(),
		Replaced:     q.lv.replaced.Load(),
		SlowKilled:   q.stats.slowKilled.Load(),
	}
}

// oldest returns the earliest timestamp among the messages at the
// front of q: see QueueStats.OldestMessage.
func (q *Queue) oldest() time.Time {
	var t time.Time
	see := func(m *Message) {
		if t.IsZero() || m.Timestamp.Before(t) {
			t = m.Timestamp
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for p := range q.ready {
		if d := &q.ready[p]; d.len() > 0 {
			see(d.at(0).msg)
		}
	}
	for _, c := range q.consumers {
		if q.nd {
			break // its deliveries are copies of what it holds
		}
		for _, sl := range c.inflight { // bounded by the consumer's credit
			if sl.r != nil {
				see(sl.r.msg)
			}
		}
	}
	if len(q.sched) > 0 {
		see(q.sched[0].msg)
	}
	return t
}

// RoutingType returns Anycast for an address's queue, Multicast for a
// subscription.
func (q *Queue) RoutingType() RoutingType { return q.routing }

// settings returns the queue's settings in force: its address's, as the
// address settings resolve them (at creation, and again at each reload).
func (q *Queue) settings() *Settings { return q.st.Load() }
