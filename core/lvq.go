package core

import (
	"slices"
	"strconv"
	"sync/atomic"
)

// Last-value and ring queues, as in ActiveMQ Artemis.
//
// A message with a last-value key (the property PropLastValue,
// _AMQ_LVQ_NAME, or the property the address setting last-value-key
// names) replaces the message with the same key that waits in the queue
// (ready or scheduled), which is removed as if consumed: only the latest
// value of each key waits. A message already delivered and not yet acked
// is not replaced; the new one waits behind it. Each queue of an address
// (each subscription of a topic) keeps its own last values.
//
// A queue of an address with ring-size N holds at most N messages: when
// a new one takes it past N, the oldest waiting one (ready, else
// scheduled) is dropped, counted as a drop with reason DropRing. Messages
// in flight are never dropped: while they are, the queue may hold more
// than N.
//
// Both act on the messages a queue holds in memory; a queue that pages
// (address-full-policy PAGE over its limit) applies them to messages as
// they are read back from its page store, not to those still on disk.
// Replacements and ring drops of durable messages are journaled as acks,
// so they hold across a restart; recovery replays sends in order, so a
// key's latest value is the one that survives.

// PropLastValue is Artemis' last-value key property.
const PropLastValue = "_AMQ_LVQ_NAME"

// lastValues is a queue's last-value state, guarded by Queue.mu.
type lastValues struct {
	byKey map[string]*ref // the waiting message of each key (entries may be stale)
	// evicted are refs replaced or dropped while the lock was held, for
	// the caller to carry out once it is released (evictedLocked).
	evicted []move
	// replaced counts messages replaced by a newer value.
	replaced atomic.Uint64
}

// lastValueKey returns m's last-value key for q, "" for none.
func (q *Queue) lastValueKey(m *Message) string {
	if len(m.Properties) == 0 {
		return ""
	}
	name := PropLastValue
	v, ok := m.Properties[name]
	if !ok && q.settings().LastValueKey != "" {
		name = q.settings().LastValueKey
		v, ok = m.Properties[name]
	}
	if !ok {
		return ""
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case []byte:
		s = string(x)
	case int64:
		s = strconv.FormatInt(x, 10)
	case float64:
		s = strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		s = strconv.FormatBool(x)
	default:
		return "" // nil: no key
	}
	return name + "\x00" + s
}

// lastValueLocked applies the last-value and ring rules to r, which has
// just been placed in q (ready or scheduled). The refs it removes are
// left in q.lv.evicted.
func (q *Queue) lastValueLocked(r *ref) {
	if q.up != nil {
		return // a mirror holds what its upstream holds
	}
	if key := q.lastValueKey(r.msg); key != "" {
		if q.lv.byKey == nil {
			q.lv.byKey = make(map[string]*ref)
		}
		if old := q.lv.byKey[key]; old != nil && old != r && q.unqueueLocked(old) {
			q.lv.replaced.Add(1)
			q.evictLocked(old)
		}
		q.lv.byKey[key] = r
		if n := len(q.lv.byKey); n > 64 && n > 2*(q.nready+len(q.sched)) {
			q.sweepLastValuesLocked()
		}
	}
	if max := q.settings().RingSize; max > 0 {
		// A non-destructive queue's deliveries are copies of messages
		// still waiting: they hold no room of their own.
		inflight := q.stats.inflight.Load()
		if q.nd {
			inflight = 0
		}
		for int64(q.nready+len(q.sched))+inflight > max {
			old := q.oldestWaitingLocked(r)
			if old == nil || !q.unqueueLocked(old) {
				break // only r, or messages in flight: over for now
			}
			q.b.dropped(q, old.msg, nil, DropRing)
			q.evictLocked(old)
		}
	}
}

// evictLocked accounts for old leaving q for good (it is out of the
// ready lists and the schedule); its journal record is settled once the
// lock is released.
func (q *Queue) evictLocked(old *ref) {
	q.gone(old)
	if old.durable {
		q.lv.evicted = append(q.lv.evicted, move{old, settled})
	}
}

// evictedLocked appends to moves what lastValueLocked left to do.
func (q *Queue) evictedLocked(moves []move) []move {
	if len(q.lv.evicted) == 0 {
		return moves
	}
	moves = append(moves, q.lv.evicted...)
	clear(q.lv.evicted)
	q.lv.evicted = q.lv.evicted[:0]
	return moves
}

// unqueueLocked takes r out of the ready lists or the schedule and
// reports whether it was waiting there (not in flight, not gone).
func (q *Queue) unqueueLocked(r *ref) bool {
	if r.consumer != nil {
		return false
	}
	if r.due != 0 {
		for i, x := range q.sched {
			if x == r {
				last := len(q.sched) - 1
				q.sched[i] = q.sched[last]
				q.sched[last] = nil
				q.sched = q.sched[:last]
				q.sched.init()
				r.due = 0
				q.stats.scheduled.Add(-1)
				return true
			}
		}
		return false
	}
	d := &q.ready[r.msg.Priority]
	i := d.search(r.seq)
	if i == d.len() || d.at(i) != r {
		return false
	}
	d.removeAt(i)
	q.nready--
	for j, x := range q.fresh {
		if x == r {
			q.fresh = slices.Delete(q.fresh, j, j+1)
			break
		}
	}
	return true
}

// oldestWaitingLocked returns the ready ref sent first (lowest seq across
// the priorities), else the scheduled one, never except.
func (q *Queue) oldestWaitingLocked(except *ref) *ref {
	var best *ref
	for p := range q.ready {
		d := &q.ready[p]
		for i := 0; i < d.len() && i < 2; i++ {
			if r := d.at(i); r != except {
				if best == nil || r.seq < best.seq {
					best = r
				}
				break
			}
		}
	}
	if best != nil {
		return best
	}
	for _, r := range q.sched {
		if r != except && (best == nil || r.seq < best.seq) {
			best = r
		}
	}
	return best
}

// sweepLastValuesLocked rebuilds the key index from the waiting
// messages, dropping the entries of messages consumed since.
func (q *Queue) sweepLastValuesLocked() {
	m := make(map[string]*ref, q.nready+len(q.sched))
	see := func(r *ref) {
		if k := q.lastValueKey(r.msg); k != "" {
			if old := m[k]; old == nil || old.seq < r.seq {
				m[k] = r
			}
		}
	}
	for p := range q.ready {
		d := &q.ready[p]
		for i := range d.len() {
			see(d.at(i))
		}
	}
	for _, r := range q.sched {
		see(r)
	}
	q.lv.byKey = m
}
