package mqtt

import "sync"

// ackQueue sends the answers to a client's QoS 1 and 2 packets (PUBACK,
// PUBREC, PUBCOMP) in the order the packets arrived [MQTT-4.6.0-2]
// [MQTT-4.6.0-3], although what they wait for completes out of order: a
// publish routed into core is confirmed when core confirms it (after the
// journal's sync when it reaches a durable queue), on the journal's
// goroutine, while the next publishes are already being read. So one
// publisher with many messages in flight shares the journal's syncs.
//
// The read loop reserves a slot per packet, in arrival order; whoever
// completes a slot (the read loop itself, or a journal completion)
// hands every completed slot at the head to the connection's writer.
type ackQueue struct {
	c *conn

	mu    sync.Mutex
	cond  *sync.Cond // on mu: slots freed; made when the read loop first waits
	ring  []ackSlot  // guarded by mu: a ring of n slots from head
	head  int        // guarded by mu
	n     int        // guarded by mu
	first uint64     // guarded by mu: the sequence number of the head slot
}

type ackSlot struct {
	typ   byte // packets.Puback, Pubrec or Pubcomp
	id    uint16
	code  byte
	ready bool
	fail  bool // MQTT 3.1.1 has no negative answer: close the connection here
}

// reserve takes the next slot, for an answer of type typ to packet id.
// It returns the slot's sequence number, for complete.
func (a *ackQueue) reserve(typ byte, id uint16) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == len(a.ring) {
		grown := make([]ackSlot, max(8, 2*len(a.ring)))
		for i := range a.n {
			grown[i] = a.ring[(a.head+i)%len(a.ring)]
		}
		a.ring, a.head = grown, 0
	}
	a.ring[(a.head+a.n)%len(a.ring)] = ackSlot{typ: typ, id: id}
	a.n++
	return a.first + uint64(a.n-1)
}

// pending returns how many answers are not yet handed to the writer.
func (a *ackQueue) pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// waitBelow blocks while n or more answers are pending, or until the
// connection closes.
func (a *ackQueue) waitBelow(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.n >= n && !a.c.closing() {
		if a.cond == nil {
			a.cond = sync.NewCond(&a.mu)
		}
		a.cond.Wait()
	}
}

// wake ends waitBelow's wait (the connection is closing).
func (a *ackQueue) wake() {
	a.mu.Lock()
	if a.cond != nil {
		a.cond.Broadcast()
	}
	a.mu.Unlock()
}

// complete records slot seq's reason code (fail: close the connection
// instead of answering, for MQTT 3.1.1) and sends every completed answer
// at the head, in order. It never blocks; it may be called from any
// goroutine.
func (a *ackQueue) complete(seq uint64, code byte, fail bool) {
	closeConn := false
	a.mu.Lock()
	i := int(seq - a.first)
	if i < 0 || i >= a.n {
		a.mu.Unlock()
		return
	}
	s := &a.ring[(a.head+i)%len(a.ring)]
	s.code, s.fail, s.ready = code, fail, true
	popped := 0
	for a.n > 0 {
		s := &a.ring[a.head]
		if !s.ready {
			break
		}
		if s.fail {
			closeConn = true
			a.n = 0 // the answers after it are never sent
			break
		}
		a.c.out.Push(outItem{kind: itemAck, typ: s.typ, id: s.id, code: s.code})
		*s = ackSlot{}
		a.head = (a.head + 1) % len(a.ring)
		a.n--
		a.first++
		popped++
	}
	if (popped > 0 || closeConn) && a.cond != nil {
		a.cond.Broadcast()
	}
	a.mu.Unlock()
	if closeConn {
		a.c.failClose()
	}
}
