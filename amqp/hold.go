package amqp

import (
	"sync/atomic"
	"time"

	"github.com/junctionmq/junction/amqp/internal/frames"
)

// Producer flow control. With address-full-policy BLOCK core does not
// make an AMQP producer wait: the connection's core session is NoWait,
// because waiting would stop the read loop, and with it the
// dispositions and flows that make room. Instead the broker stops
// granting link credit to a client sender while core.Broker.Blocked says
// a send to the link's address would wait. Blocked is asked when the
// credit is due to be topped up (less than a third of LinkCredit left),
// and a held link keeps the credit it has left, so a producer overshoots
// the limit by at most LinkCredit per link. (In a cluster, core holds
// such sends unconfirmed on the node instead: core.SessionOptions.NoWait.) The writer checks the held links again every holdRecheck
// (a timer queues the check)
// and grants credit once their address has room. Anonymous-relay links
// (no fixed address) and the transaction coordinator are never held:
// core takes their messages over the limit.

// holdRecheck is how often the writer asks core whether held links'
// addresses have room again.
const holdRecheck = 75 * time.Millisecond

// holdState lists the connection's held links.
type holdState struct {
	links []*link      // guarded by c.mu; a link may have been detached since
	n     atomic.Int32 // len(links), read by the writer without c.mu
}

// blocked reports whether a send to the link's address would wait in
// core. c.mu must not be held: it calls into core.
func (l *link) blocked() bool {
	return l.addr != "" && !l.coordinator && l.sess.c.s.broker.Blocked(l.addr)
}

// holdLocked marks l held, reporting whether it was not already. c.mu
// is held.
func (l *link) holdLocked() bool {
	if l.held {
		return false
	}
	l.held = true
	h := &l.sess.c.hold
	h.links = append(h.links, l)
	h.n.Store(int32(len(h.links)))
	return true
}

// grant gives a client sender its initial credit: all of it, or none
// while its address is blocked. c.mu must not be held.
func (l *link) grant() *frames.Flow {
	blocked := l.blocked()
	c := l.sess.c
	c.mu.Lock()
	var newly bool
	if blocked {
		l.credit = 0
		newly = l.holdLocked()
	} else {
		l.credit = c.s.cfg.LinkCredit
	}
	f := l.flowLocked()
	c.mu.Unlock()
	if newly {
		c.armRecheck()
	}
	return f
}

// refillDueLocked reports whether refillLocked would top up the credit.
// c.mu is held.
func (l *link) refillDueLocked() bool {
	window := l.sess.c.s.cfg.LinkCredit
	if l.detached || l.credit >= window/3 {
		return false
	}
	return int(window)-l.unconfirmed-int(l.credit) >= int(window/3)
}

// refill tops up the credit when due (see refillLocked), unless the
// link's address is blocked: the link is then held. It returns the flow
// to send, or nil. c.mu must not be held.
func (l *link) refill() *frames.Flow {
	blocked := l.blocked()
	c := l.sess.c
	c.mu.Lock()
	var f *frames.Flow
	newly := false
	if blocked {
		if l.refillDueLocked() {
			newly = l.holdLocked()
		}
	} else if f = l.refillLocked(); f != nil {
		l.held = false // the writer's recheck forgets it
	}
	c.mu.Unlock()
	if newly {
		c.armRecheck()
	}
	return f
}

// recheckHeld grants credit again to the held links whose address has
// room. The writer calls it every holdRecheck (a timer, armRecheck)
// while links are held.
func (w *writer) recheckHeld() {
	c := w.c
	if c.hold.n.Load() == 0 {
		return
	}
	c.mu.Lock()
	w.held = append(w.held[:0], c.hold.links...)
	c.mu.Unlock()
	for _, l := range w.held {
		if l.blocked() {
			continue
		}
		var f *frames.Flow
		c.mu.Lock()
		if l.held {
			l.held = false
			f = l.refillLocked() // nil when not due: confirmations will refill
		}
		c.mu.Unlock()
		if f != nil {
			w.flushSettles()
			w.flow(&outItem{sess: l.sess, body: f})
		}
	}
	clear(w.held)
	c.mu.Lock()
	kept := c.hold.links[:0]
	for _, l := range c.hold.links {
		if l.held && !l.detached {
			kept = append(kept, l)
		}
	}
	clear(c.hold.links[len(kept):])
	c.hold.links = kept
	c.hold.n.Store(int32(len(kept)))
	c.mu.Unlock()
	if len(kept) > 0 {
		c.armRecheck()
	}
}
