package core

import "time"

// UpdateCredit sets the consumer's credit to what f returns and
// dispatches. f is called with the queue's lock held and gets the number
// of deliveries the consumer has been handed so far, so a protocol whose
// credit is relative to a delivery count it shares with the peer (AMQP:
// credit = receiver's delivery-count + link-credit − sender's
// delivery-count) computes it without racing a delivery in progress. f
// must not call into the broker. A negative result counts as zero.
func (c *Consumer) UpdateCredit(f func(delivered uint64) int) {
	q := c.q
	var moves []move
	var flow int
	var drain bool
	q.mu.Lock()
	if !c.closed {
		n := max(f(c.nextID), 0)
		if c.credit == 0 && n > 0 {
			q.withCred++
		} else if c.credit > 0 && n == 0 {
			q.withCred--
		}
		c.credit = n
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

// Drain hands the consumer whatever its credit allows now, then takes
// the rest of its credit away and returns how much was unused, with the
// number of deliveries handed so far (AMQP's drain: the sender uses up
// or gives up the credit at once).
func (c *Consumer) Drain() (unused int, delivered uint64) {
	q := c.q
	var moves []move
	var drain bool
	q.mu.Lock()
	if !c.closed {
		moves = q.creditedLocked(c, time.Now(), moves)
		unused = c.credit
		if c.credit > 0 {
			q.withCred--
			c.credit = 0
		}
		if q.up != nil {
			_, drain = q.upCreditLocked()
		}
	}
	delivered = c.nextID
	q.mu.Unlock()
	q.b.carryOut(moves)
	if drain {
		// A mirror drains what it holds; its upstream stops sending.
		// What the upstream sends meanwhile waits in the mirror for
		// the next credit.
		q.up.Drain()
	}
	return unused, delivered
}

// Delivered returns the number of deliveries the consumer has been
// handed.
func (c *Consumer) Delivered() uint64 {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	return c.nextID
}

// Available returns the number of messages ready in the consumer's queue
// (AMQP's available hint).
func (c *Consumer) Available() int {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	return c.q.nready
}
