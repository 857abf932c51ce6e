package core

import "time"

// Non-destructive queues, as in ActiveMQ Artemis (the queue attribute
// non-destructive, most often on a last-value queue).
//
// With the address setting non-destructive, a queue's messages are not
// taken by consumers: each consumer is given every message the queue
// holds once, in queue order (priority first), and its acknowledgement
// settles only its own delivery; the message stays for the others and
// for consumers still to come. A new consumer therefore starts with
// everything the queue holds: on a last-value queue, a snapshot of the
// latest value of each key. A newer value replaces the waiting one as
// usual (lvq.go), and, being a new message, is delivered to every
// consumer again.
//
// Messages leave only as they would without a consumer: expiry, a
// last-value replacement, a full ring (ring-size), the API's purge,
// move and delete, or the queue's deletion. So a non-destructive queue
// that is neither last-value nor a ring grows until its messages expire;
// its size is bounded like any queue's (max-size-bytes and the address
// full policy, the broker's memory budget), but an ack frees nothing, so
// a paged message waits on disk until one of the above makes room.
//
// Each delivery is a ref of its own (ref.of points at the queued one),
// never journaled: an ack, a transaction's ack, a failed attempt or a
// mark writes nothing, and a restart gives the queue back what its
// journal holds, every message of it, flagged redelivered as usual.
//
// The outcomes of a delivery, for the consumer that had it:
//   - Ack (in a transaction: on commit): done; it is not delivered to
//     that consumer again.
//   - Release, and a failed delivery (NACK, AMQP modified, a rolled back
//     transaction's acks): offered to the same consumer again, before
//     newer messages, if the message still waits (not replaced, expired
//     or purged meanwhile). A failed attempt counts toward
//     max-delivery-attempts; past it the consumer is not offered the
//     message again, and it is not dead-lettered, since it is not the
//     consumer's to move. The redelivery delay does not apply.
//   - Reject: not offered to that consumer again; not dead-lettered
//     either (no move loop: the message stays for the others).
//   - The consumer's close: its deliveries are dropped, the messages
//     stay.
//
// An exclusive consumer, while attached, is the only one given messages;
// the next exclusive one starts from the beginning, as a new consumer.
// Message groups do not divide a non-destructive queue (every consumer
// has every group, in order), so no group is claimed. A consumer's
// selector skips what it does not select. Slow-consumer detection does
// not apply: a queue's depth is not what a consumer lags by. A mirror
// queue (cluster mode) is never non-destructive itself: its group
// broker's queue is.

// ndScanLocked gives consumer c, within its credit, what it was not
// given yet: first its returned deliveries, then the ready lists from
// where it stopped. Expired messages met on the way are collected.
func (q *Queue) ndScanLocked(c *Consumer, now time.Time, moves []move) []move {
	if c.closed || (q.exclusive != nil && q.exclusive != c) {
		return moves
	}
	for len(c.again) > 0 && c.credit > 0 {
		r := c.again[0]
		c.again[0] = nil
		c.again = c.again[1:]
		if q.waitingLocked(r.of) {
			q.deliverLocked(c, r)
		}
	}
	if len(c.again) == 0 {
		c.again = nil // let the backing array go
	}
	for p := MaxPriority; p >= 0 && c.credit > 0; p-- {
		d := &q.ready[p]
		for i := d.search(c.given[p] + 1); i < d.len() && c.credit > 0; {
			r := d.at(i)
			if q.expiredLocked(r, now) {
				moves = q.dropReadyLocked(d, i, r, moveExpired, moves)
				continue
			}
			ok := c.accepts(r)
			if !ok && q.unreadableLocked(r) {
				moves = q.dropReadyLocked(d, i, r, moveUnreadable, moves)
				continue
			}
			c.given[p] = r.seq
			i++
			if ok {
				q.deliverLocked(c, &ref{msg: r.msg, q: q, seq: r.seq, mark: r.mark, recovered: r.recovered, of: r})
			}
		}
	}
	return moves
}

// ndDispatchLocked is dispatchLocked for a non-destructive queue: each
// consumer with credit looks from where it stopped.
func (q *Queue) ndDispatchLocked(now time.Time, moves []move) []move {
	if q.withCred == 0 || (q.nready == 0 && !q.ndAgainLocked()) {
		return moves
	}
	if ex := q.exclusive; ex != nil {
		return q.ndScanLocked(ex, now, moves)
	}
	for _, c := range q.consumers {
		if c.credit > 0 {
			moves = q.ndScanLocked(c, now, moves)
		}
	}
	return moves
}

// ndAgainLocked reports whether a consumer has returned deliveries to be
// offered again.
func (q *Queue) ndAgainLocked() bool {
	for _, c := range q.consumers {
		if len(c.again) > 0 {
			return true
		}
	}
	return false
}

// waitingLocked reports whether r is still in q's ready lists.
func (q *Queue) waitingLocked(r *ref) bool {
	d := &q.ready[r.msg.Priority]
	i := d.search(r.seq)
	return i < d.len() && d.at(i) == r
}

// ndReturnLocked handles a delivery r of a non-destructive queue that
// was not acked: see the outcomes above. The queued message is not
// touched.
func (q *Queue) ndReturnLocked(r *ref, failed bool) {
	c := r.consumer
	r.consumer = nil
	q.stats.inflight.Add(-1)
	if failed {
		r.failures++
		if max := q.settings().MaxDeliveryAttempts; max > 0 && int(r.failures) >= max {
			return
		}
	}
	if c != nil && !c.closed && q.nd {
		c.again = append(c.again, r)
	}
}

// ndSettleLocked ends delivery r of a non-destructive queue without
// offering it again (an ack, or a reject): the message stays.
func (q *Queue) ndSettleLocked(r *ref, acked bool) {
	r.consumer = nil
	q.stats.inflight.Add(-1)
	if acked {
		q.stats.acked.Add(1)
	}
}

// setNonDestructive switches q's consumption at a reload of the address
// settings. Each consumer starts again from the beginning: after a
// switch to non-destructive it is given every message the queue holds
// (what was acked before is gone); after a switch back, messages are
// taken as usual, so a consumer may be given again what it had. A
// delivery in flight keeps the meaning it was made with: an ack of a
// non-destructive one removes nothing.
func (q *Queue) setNonDestructive(on bool) {
	if q.up != nil {
		return // a mirror: its group broker's queue decides
	}
	var moves []move
	q.mu.Lock()
	if q.nd == on || q.deleted {
		q.mu.Unlock()
		return
	}
	q.nd = on
	q.dirtyLocked()
	for _, c := range q.consumers {
		c.seen = [MaxPriority + 1]uint64{}
		c.given = [MaxPriority + 1]uint64{}
		clear(c.again)
		c.again = nil
	}
	moves = q.dispatchLocked(time.Now(), moves)
	q.mu.Unlock()
	q.b.carryOut(moves)
}
