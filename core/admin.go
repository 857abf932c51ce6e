package core

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the management side of the broker: connections and
// per-protocol traffic, addresses, and the operations on a queue's
// messages an administrator needs (create, purge, move, browse).

// protoCounters are one protocol's monotonic totals of the sessions that
// have closed; the open ones are added on read. Written under
// Broker.sessMu (fold), read under it too.
type protoCounters struct {
	name                               string
	opened                             atomic.Uint64
	msgsIn, bytesIn, msgsOut, bytesOut atomic.Uint64
}

// protoLocked returns the counters of protocol p, creating them.
// b.sessMu must be held.
func (b *Broker) protoLocked(p string) *protoCounters {
	pc := b.protos[p]
	if pc == nil {
		pc = &protoCounters{name: p}
		b.protos[p] = pc
	}
	return pc
}

// fold adds a closing session's traffic to the totals. b.sessMu is held
// and s is leaving the registry in the same critical section.
func (pc *protoCounters) fold(s *Session) {
	pc.msgsIn.Add(s.msgsIn.Load())
	pc.bytesIn.Add(s.bytesIn.Load())
	pc.msgsOut.Add(s.msgsOut.Load())
	pc.bytesOut.Add(s.bytesOut.Load())
}

// ConnectionInfo describes an open client connection: a session opened
// with a Protocol.
type ConnectionInfo struct {
	ID         uint64 // Session.ID
	Protocol   string
	RemoteAddr string
	User       string
	ClientID   string
	Opened     time.Time
	Consumers  int
	// MessagesIn counts the messages the session sent (each transaction
	// send on commit), MessagesOut the deliveries to its consumers
	// (redeliveries included). BytesIn and BytesOut are their body bytes:
	// core does not see the wire, so headers and framing are not counted.
	MessagesIn, MessagesOut uint64
	BytesIn, BytesOut       uint64
	// Dropped counts the session's messages a queue dropped (DROP, or
	// non-durable over a PAGE limit); Refused its sends refused (FAIL, a
	// full disk). See DropReason.
	Dropped, Refused uint64
}

// Connections lists the open sessions that have a Protocol (front-ends'
// internal sessions have none), sorted by ID.
func (b *Broker) Connections() []ConnectionInfo {
	b.sessMu.Lock()
	ss := make([]*Session, 0, len(b.sessions))
	for _, s := range b.sessions {
		ss = append(ss, s)
	}
	b.sessMu.Unlock()
	slices.SortFunc(ss, func(x, y *Session) int { return cmpUint(x.id, y.id) })
	out := make([]ConnectionInfo, 0, len(ss))
	for _, s := range ss {
		s.mu.Lock() // alone: Session.mu is never held with another lock
		n := len(s.consumers)
		s.mu.Unlock()
		out = append(out, ConnectionInfo{
			ID: s.id, Protocol: s.opts.Protocol, RemoteAddr: s.opts.RemoteAddr,
			User: s.opts.User, ClientID: s.opts.ClientID, Opened: s.opened, Consumers: n,
			MessagesIn: s.msgsIn.Load(), MessagesOut: s.msgsOut.Load(),
			BytesIn: s.bytesIn.Load(), BytesOut: s.bytesOut.Load(),
			Dropped: s.dropped.Load(), Refused: s.refused.Load(),
		})
	}
	return out
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// CloseConnection closes connection id through the Close function its
// front-end gave (SessionOptions.Close), which closes the client's
// network connection; the front-end then closes the session as for any
// lost connection (unacked messages go back to their queues). It returns
// ErrConnectionNotFound if no open connection has that id or it has no
// Close. It returns once Close has returned, possibly before the session
// is gone from Connections.
func (b *Broker) CloseConnection(id uint64) error {
	return b.endConnection(id, func(s *Session) func() { return s.opts.Close })
}

// endConnection calls the function how picks of open connection id.
func (b *Broker) endConnection(id uint64, how func(*Session) func()) error {
	b.sessMu.Lock()
	s := b.sessions[id]
	b.sessMu.Unlock()
	var end func()
	if s != nil {
		end = how(s)
	}
	if end == nil {
		return fmt.Errorf("%w: %d", ErrConnectionNotFound, id)
	}
	end()
	return nil
}

// AbortConnection is CloseConnection through SessionOptions.Abort: the
// connection is reset, and what was queued for the client is dropped
// (what the cluster's fence does, FenceDoubtful). It returns
// ErrConnectionNotFound if no open connection has that id or it has no
// Abort.
func (b *Broker) AbortConnection(id uint64) error {
	return b.endConnection(id, func(s *Session) func() { return s.opts.Abort })
}

// ProtocolStats is the traffic of one protocol's connections.
type ProtocolStats struct {
	Protocol    string
	Connections int // open now
	// Monotonic since the broker started, closed connections included.
	ConnectionsTotal                           uint64
	MessagesIn, MessagesOut, BytesIn, BytesOut uint64
}

// ProtocolStats returns the traffic of each protocol that has had a
// connection since the broker started, sorted by protocol. The counters
// are monotonic: a closing connection's traffic stays in them.
func (b *Broker) ProtocolStats() []ProtocolStats {
	b.sessMu.Lock()
	defer b.sessMu.Unlock()
	by := make(map[string]*ProtocolStats, len(b.protos))
	out := make([]ProtocolStats, 0, len(b.protos))
	for name, pc := range b.protos {
		out = append(out, ProtocolStats{
			Protocol: name, ConnectionsTotal: pc.opened.Load(),
			MessagesIn: pc.msgsIn.Load(), MessagesOut: pc.msgsOut.Load(),
			BytesIn: pc.bytesIn.Load(), BytesOut: pc.bytesOut.Load(),
		})
	}
	for i := range out {
		by[out[i].Protocol] = &out[i]
	}
	for _, s := range b.sessions {
		ps := by[s.opts.Protocol]
		ps.Connections++
		ps.MessagesIn += s.msgsIn.Load()
		ps.MessagesOut += s.msgsOut.Load()
		ps.BytesIn += s.bytesIn.Load()
		ps.BytesOut += s.bytesOut.Load()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Protocol < out[j].Protocol })
	return out
}

// SubscriptionCount returns the number of subscriptions (multicast
// queues: durable, non-durable and shared) of every protocol.
func (b *Broker) SubscriptionCount() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	n := 0
	for _, q := range b.queues {
		if q.routing == Multicast {
			n++
		}
	}
	return n
}

// Started returns when the broker was created.
func (b *Broker) Started() time.Time { return b.started }

// AddressInfo describes an address.
type AddressInfo struct {
	Name      string
	Anycast   bool     // has its anycast queue
	Multicast bool     // accepts multicast sends
	Queues    []string // its anycast queue and the subscriptions bound to exactly it, sorted
	Temporary bool     // a temporary queue's address (Session.CreateTemporaryQueue)
}

// Addresses describes every address, sorted by name. Subscriptions bound
// to a wildcard pattern belong to no address and are not listed in
// Queues (QueueStats has them).
func (b *Broker) Addresses() []AddressInfo {
	if a := b.clusterAdmin(); a != nil {
		return a.Addresses()
	}
	b.mu.RLock()
	out := make([]AddressInfo, 0, len(b.addresses))
	for _, a := range b.addresses {
		ai := AddressInfo{Name: a.name, Anycast: a.anycast != nil, Multicast: a.isMulti,
			Queues: make([]string, 0, len(a.multicast)+1)}
		if a.anycast != nil {
			ai.Queues = append(ai.Queues, a.anycast.name)
			ai.Temporary = a.anycast.owner != nil
		}
		for _, q := range a.multicast {
			ai.Queues = append(ai.Queues, q.name)
		}
		out = append(out, ai)
	}
	b.mu.RUnlock()
	for i := range out {
		slices.Sort(out[i].Queues)
	}
	slices.SortFunc(out, func(x, y AddressInfo) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// CreateQueue is CreateAddress for an administrator who wants to know
// whether it was there. Anycast creates the address (if needed) and its
// queue, named as the address; it fails with ErrQueueExists if a queue of
// that name exists. Multicast makes the address accept multicast sends
// (its queues are the subscriptions consumers make); it fails with
// ErrQueueExists if it already does.
func (b *Broker) CreateQueue(name string, rt RoutingType) error {
	if a := b.clusterAdmin(); a != nil {
		return a.CreateQueue(name, rt)
	}
	if err := b.lockToCreate(name, rt); err != nil {
		return err
	}
	defer b.mu.Unlock()
	a := b.addresses[name]
	switch {
	case rt == Anycast && b.queues[name] != nil:
		return fmt.Errorf("%w: %q", ErrQueueExists, name)
	case rt == Multicast && a != nil && a.isMulti:
		return fmt.Errorf("%w: %q already accepts multicast", ErrQueueExists, name)
	}
	return b.addRoutingLocked(b.addressLocked(name, false), rt)
}

// adminChunk bounds the messages an administrative operation handles per
// hold of a queue's lock, so that producers and consumers of a deep
// queue are not stalled while it is purged or moved.
const adminChunk = 1024

// PurgeQueue removes every message of queue name that is not in flight
// (ready and scheduled ones; delivered, unacked ones stay) and returns
// how many. Durable ones are deleted from the journal as if acked. The
// queue is emptied in chunks, holding its lock for at most adminChunk
// messages at a time; messages sent during the purge are kept.
func (b *Broker) PurgeQueue(name string) (int, error) {
	if a := b.clusterAdmin(); a != nil {
		return a.PurgeQueue(name)
	}
	q := b.Queue(name)
	if q == nil {
		return 0, fmt.Errorf("%w: %q", ErrQueueNotFound, name)
	}
	total := 0
	var limit uint64
	for first := true; ; first = false {
		var moves []move
		q.mu.Lock()
		if first {
			limit = q.seq // what was there when the purge began
		}
		rs := q.takeReadyLocked(limit, adminChunk, nil)
		if len(rs) < adminChunk {
			rs = q.takeScheduledLocked(limit, adminChunk-len(rs), rs)
		}
		for _, r := range rs {
			q.gone(r)
			if r.durable {
				moves = append(moves, move{r, settled})
			}
		}
		q.mu.Unlock()
		b.carryOut(moves)
		total += len(rs)
		if len(rs) < adminChunk {
			return total, nil
		}
	}
}

// takeReadyLocked removes up to n ready refs numbered up to limit, in
// queue order (priority, then FIFO), appending them to rs.
func (q *Queue) takeReadyLocked(limit uint64, n int, rs []*ref) []*ref {
	for p := MaxPriority; p >= 0 && n > 0; p-- {
		d := &q.ready[p]
		for i := 0; i < d.len() && n > 0; {
			r := d.at(i)
			if r.seq > limit {
				break // sorted by seq: the rest came later
			}
			d.removeAt(i)
			q.nready--
			rs = append(rs, r)
			n--
		}
	}
	return rs
}

// takeScheduledLocked removes up to n scheduled refs numbered up to
// limit, appending them to rs.
func (q *Queue) takeScheduledLocked(limit uint64, n int, rs []*ref) []*ref {
	if n <= 0 || len(q.sched) == 0 {
		return rs
	}
	keep := q.sched[:0]
	for _, r := range q.sched {
		if n > 0 && r.seq <= limit {
			r.due = 0
			q.stats.scheduled.Add(-1)
			rs = append(rs, r)
			n--
			continue
		}
		keep = append(keep, r)
	}
	clear(q.sched[len(keep):])
	q.sched = keep
	q.sched.init()
	return rs
}

// MoveMessages moves up to max (0 = all) messages waiting in queue from
// (ready ones, in queue order; not those in flight, nor scheduled ones,
// which wait for their delivery time or redelivery delay) to the address
// to, and returns how many. Each is sent again, as a copy with the same
// body, properties, headers, priority, timestamp, user and durability
// and a new id, to address to with that address's routing type (as a
// send without a routing type: its queue if it has one, else its
// subscriptions), and leaves from once the copy is on its queues. The
// main use is sending dead letters back to their original address (the
// _AMQ_ORIG_ADDRESS property) once the fault is fixed.
//
// to must exist (ErrAddressNotFound), and from must not be to's anycast
// queue. A durable copy is journaled, and synced, before the original's
// delete is written: a crash between the two keeps both, never neither.
// If a send fails (to is full with the FAIL policy, no queue of to takes
// the message: ErrUnroutable, a journal error), the messages not moved
// go back to their place in from and the error is returned with the
// count so far. Like PurgeQueue it works in chunks.
func (b *Broker) MoveMessages(from, to string, max int) (int, error) {
	if a := b.clusterAdmin(); a != nil {
		return a.MoveMessages(from, to, max)
	}
	q := b.Queue(from)
	if q == nil {
		return 0, fmt.Errorf("%w: %q", ErrQueueNotFound, from)
	}
	if err := validAddress(to); err != nil {
		return 0, err
	}
	b.mu.RLock()
	a := b.addresses[to]
	self := a != nil && a.anycast == q
	b.mu.RUnlock()
	if a == nil {
		return 0, fmt.Errorf("%w: %q", ErrAddressNotFound, to)
	}
	if self {
		return 0, fmt.Errorf("%w: cannot move queue %q to itself", ErrInvalidAddress, from)
	}
	total := 0
	var limit uint64
	for first := true; max == 0 || total < max; first = false {
		n := adminChunk
		if max > 0 {
			n = min(n, max-total)
		}
		q.mu.Lock()
		if first {
			limit = q.seq
		}
		rs := q.takeReadyLocked(limit, n, nil)
		for _, r := range rs {
			q.gone(r)
		}
		q.mu.Unlock()
		moved, err := b.moveRefs(rs, to)
		total += moved
		if err != nil {
			q.putBack(rs[moved:])
			return total, err
		}
		if len(rs) < n {
			break
		}
	}
	return total, nil
}

// moveRefs sends copies of rs's messages to address to, in order,
// stopping at the first failure, waits for the durable ones' journal
// syncs, then settles the originals. It returns how many were sent.
//
// A copy the journal failed to write is on its queues in memory (a
// durable message is visible before its sync) but would not survive a
// restart, so its original is not deleted from the journal: after a
// restart both are there, never neither. It counts as moved, and the
// journal's error is returned.
func (b *Broker) moveRefs(rs []*ref, to string) (int, error) {
	var wg sync.WaitGroup
	jerr := make([]error, len(rs)) // journal results, each written by one callback before wg.Done
	now := time.Now()
	sent := 0
	var err error
	for i, r := range rs {
		m := r.msg
		c := m.copyFor(to, nil)
		c.RoutingType = RoutingDefault // the address decides
		c.Expiration, c.DeliveryTime = m.Expiration, m.DeliveryTime
		if err = b.prepare(c, m.UserID, now); err != nil {
			break
		}
		wg.Add(1)
		var pending bool
		pending, err = b.routeWith(c, now, sendOpts{done: func(e error) {
			jerr[i] = e
			wg.Done()
		}, mustRoute: true})
		if err != nil || !pending {
			wg.Done()
		}
		if err != nil {
			break
		}
		sent++
	}
	wg.Wait()
	for i := range sent {
		if e := jerr[i]; e != nil {
			b.log.Warn().Err(e).Uint64("message", rs[i].msg.ID).Str("target", to).
				Msg("moving a message: its copy was not journaled, so the original stays in the journal")
			if err == nil {
				err = e
			}
			continue
		}
		b.persistSettled(rs[i])
	}
	return sent, err
}

// putBack returns refs taken by MoveMessages and not moved to their
// place in q, or settles them if q was deleted meanwhile.
func (q *Queue) putBack(rs []*ref) {
	if len(rs) == 0 {
		return
	}
	var moves []move
	now := time.Now()
	q.mu.Lock()
	for _, r := range rs {
		if q.deleted {
			if r.durable {
				moves = append(moves, move{r, settled})
			}
			continue
		}
		q.hold(r)
		p := r.msg.Priority
		q.ready[p].insertOrdered(r)
		for _, c := range q.consumers {
			if c.seen[p] >= r.seq {
				c.seen[p] = r.seq - 1
			}
		}
		q.nready++
		q.freshLocked(r)
	}
	if !q.deleted {
		moves = q.dispatchFreshLocked(now, moves)
	}
	q.mu.Unlock()
	q.b.carryOut(moves)
}

// BrowsedMessage is one message of a queue as Browse sees it. Message is
// shared: it must not be changed.
type BrowsedMessage struct {
	Message       *Message
	DeliveryCount uint32 // failed delivery attempts from this queue
	InFlight      bool   // delivered to a consumer, not yet acked
	Scheduled     bool   // waiting for its delivery time or redelivery delay
}

// Browse returns a page of the messages of queue name without consuming
// or changing anything, and how many there are in all. The queue is seen
// in this order: messages in flight (by consumer, then delivery order),
// ready ones (priority, then FIFO: the order they will be delivered in),
// then scheduled ones (by due time). offset and limit select the page
// (limit <= 0 means 100). The page is a snapshot taken under the queue's
// lock, which is held for the page's length plus the queue's priorities
// and in-flight messages; a page that reaches the scheduled messages
// also copies their order (O(scheduled)).
func (b *Broker) Browse(name string, offset, limit int) ([]BrowsedMessage, int, error) {
	if a := b.clusterAdmin(); a != nil {
		return a.Browse(name, offset, limit)
	}
	q := b.Queue(name)
	if q == nil {
		return nil, 0, fmt.Errorf("%w: %q", ErrQueueNotFound, name)
	}
	if offset < 0 {
		offset = 0
	}
	if limit <= 0 {
		limit = 100
	}
	var out []BrowsedMessage
	q.mu.Lock()
	defer q.mu.Unlock()
	inflight := 0
	// A non-destructive queue's deliveries are copies of the messages it
	// holds, which are listed as ready.
	for _, c := range q.consumers {
		if !q.nd {
			inflight += c.live
		}
	}
	total := inflight + q.nready + len(q.sched)
	if offset >= total {
		return nil, total, nil
	}
	out = make([]BrowsedMessage, 0, min(limit, total-offset))
	skip := offset
	// In flight.
	if skip < inflight {
		for _, c := range q.consumers {
			for _, sl := range c.inflight {
				if len(out) == limit {
					break
				}
				if sl.r == nil {
					continue
				}
				if skip > 0 {
					skip--
					continue
				}
				out = append(out, BrowsedMessage{Message: sl.r.msg, DeliveryCount: sl.r.failures, InFlight: true})
			}
		}
	} else {
		skip -= inflight
	}
	// Ready.
	for p := MaxPriority; p >= 0 && len(out) < limit; p-- {
		d := &q.ready[p]
		if skip >= d.len() {
			skip -= d.len()
			continue
		}
		for i := skip; i < d.len() && len(out) < limit; i++ {
			r := d.at(i)
			out = append(out, BrowsedMessage{Message: r.msg, DeliveryCount: r.failures})
		}
		skip = 0
	}
	// Scheduled.
	if len(out) < limit && len(q.sched) > 0 {
		s := slices.Clone(q.sched)
		slices.SortFunc(s, func(x, y *ref) int {
			if x.due != y.due {
				return cmpInt64(x.due, y.due)
			}
			return cmpUint(x.seq, y.seq)
		})
		for i := skip; i < len(s) && len(out) < limit; i++ {
			out = append(out, BrowsedMessage{Message: s[i].msg, DeliveryCount: s[i].failures, Scheduled: true})
		}
	}
	return out, total, nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
