package core

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Memory accounting. Every message a queue holds in memory counts
// against the broker's budget (Config.MaxMemory) once, however many
// queues hold it, at its body and metadata size plus a fixed overhead;
// each reference adds refOverhead. A queue over its own limit
// (max-size-bytes) or a broker over its budget applies the address's
// full policy to new messages: see Queue.verdict.

// Overheads measured with the 1 KiB backlog test (TestPagingBoundsMemory):
// the Message and its ref, the deque slot and the map of properties.
const (
	msgOverhead = 320
	refOverhead = 96
	propCost    = 48
)

// memSize estimates the memory a message takes once.
func memSize(m *Message) int64 {
	n := len(m.Body) + len(m.Address) + len(m.ReplyTo) + len(m.CorrelationID) +
		len(m.ContentType) + len(m.GroupID) + len(m.UserID) + propCost*len(m.Properties)
	return int64(n) + msgOverhead
}

// memory is the broker's budget and what is held against it.
type memory struct {
	max  int64 // 0 = unlimited
	used atomic.Int64

	// Producers blocked by the BLOCK policy (and queues waiting to read
	// pages back) wait for room: released memory closes ch while anyone
	// waits.
	waiters atomic.Int32
	mu      sync.Mutex
	ch      chan struct{}
}

// hold counts m against the budget if no other queue holds it yet.
func (b *Broker) hold(m *Message) {
	n := int64(refOverhead)
	if m.memRefs.Add(1) == 1 {
		n += memSize(m)
	}
	b.mem.used.Add(n)
}

// release undoes hold and wakes whoever waits for room.
func (b *Broker) release(m *Message) {
	n := int64(refOverhead)
	if m.memRefs.Add(-1) == 0 {
		n += memSize(m)
	}
	b.mem.used.Add(-n)
	if b.mem.waiters.Load() > 0 {
		b.mem.mu.Lock()
		if b.mem.ch != nil {
			close(b.mem.ch)
			b.mem.ch = nil
		}
		b.mem.mu.Unlock()
	}
}

// overBudget reports whether holding m would take the broker over its
// memory budget.
func (b *Broker) overBudget(m *Message) bool {
	return b.mem.max > 0 && b.mem.used.Load()+memSize(m) > b.mem.max
}

// budgetRoom reports whether the broker is below frac of its budget.
func (b *Broker) budgetRoom(frac float64) bool {
	return b.mem.max == 0 || float64(b.mem.used.Load()) < frac*float64(b.mem.max)
}

// roomWaitMax bounds one wait for room: a release between the caller's
// check and its registration would otherwise be missed.
const roomWaitMax = 100 * time.Millisecond

// waitRoom waits until memory is released (or roomWaitMax passes, or
// stop is closed); the caller checks again.
func (b *Broker) waitRoom(stop <-chan struct{}, cancel <-chan struct{}) {
	b.mem.waiters.Add(1)
	defer b.mem.waiters.Add(-1)
	b.mem.mu.Lock()
	if b.mem.ch == nil {
		b.mem.ch = make(chan struct{})
	}
	ch := b.mem.ch
	b.mem.mu.Unlock()
	t := time.NewTimer(roomWaitMax)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-stop:
	case <-cancel:
	}
}

// MemoryStats reports the broker's memory accounting.
type MemoryStats struct {
	Used int64 // bytes of messages held in memory (estimated)
	Max  int64 // the budget; 0 = unlimited
}

// ClusterMemory is implemented by a Cluster whose node holds messages
// in brokers of its own (the groups it leads): an access broker, which
// holds none, reports the node's accounting instead.
type ClusterMemory interface {
	Memory() MemoryStats
}

// Memory returns the broker's memory accounting (for an access broker,
// its node's: ClusterMemory).
func (b *Broker) Memory() MemoryStats {
	if cm, ok := b.cluster.(ClusterMemory); ok {
		return cm.Memory()
	}
	return MemoryStats{Used: b.mem.used.Load(), Max: b.mem.max}
}

// ClusterBlocked is implemented by a Cluster that learns from its
// groups' answers that an address is over its limit (a group broker
// takes a cluster send over it rather than stall the link it shares):
// the access broker makes its producers wait there instead, as a single
// broker does under BLOCK (and PAGE without a page store).
type ClusterBlocked interface {
	Blocked(address string) bool
}

// clusterRoomPoll is how often a producer waiting for room in a cluster
// asks again.
const clusterRoomPoll = 20 * time.Millisecond

// waitClusterRoom waits while the cluster says address is over its
// limit, until ctx ends or the session closes.
func (s *Session) waitClusterRoom(ctx context.Context, address string) error {
	cb, ok := s.b.cluster.(ClusterBlocked)
	if !ok {
		return nil
	}
	for cb.Blocked(address) {
		t := time.NewTimer(clusterRoomPoll)
		select {
		case <-t.C:
		case <-s.closingChan():
		case <-ctx.Done():
		}
		t.Stop()
		if err := s.check(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// heldSend is a cluster send of a NoWait session waiting for room.
type heldSend struct {
	m    *Message
	done func(error)
}

// holdClusterSend holds m, a NoWait session's send, while the cluster
// says its address is over its limit (ClusterBlocked), and reports
// whether it did: a goroutine of the session's sends it, and those
// queued behind it in order, once there is room, and done gets the
// outcome then. A NoWait session cannot wait for room (its front-end
// reads the connection's acknowledgements on the same goroutine), but
// forwarded at once its sends would fill the group past its part of the
// budget; held, they stay unconfirmed, and the front-end's own flow
// control (AMQP grants link credit as sends are confirmed) stops the
// producer, as Blocked's answer does a single broker's. Once one send
// is held, every later one is (durable or not), so that they stay in
// order.
func (s *Session) holdClusterSend(m *Message, done func(error)) bool {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if len(s.held) == 0 {
		cb, ok := s.b.cluster.(ClusterBlocked)
		if !m.Durable || !ok || !cb.Blocked(m.Address) {
			return false
		}
		go s.sendHeld()
	}
	s.held = append(s.held, heldSend{m, done})
	return true
}

// sendHeld sends the session's held sends in order, each durable one
// once the cluster has room for it, until none is left; when the session
// closes first, the rest fail with ErrSessionClosed.
func (s *Session) sendHeld() {
	for {
		s.heldMu.Lock()
		if len(s.held) == 0 {
			s.heldMu.Unlock()
			return
		}
		h := s.held[0]
		s.heldMu.Unlock()
		var err error
		if h.m.Durable {
			err = s.waitClusterRoom(context.Background(), h.m.Address)
		}
		if err == nil {
			// Sent before it leaves the queue: a send that comes
			// meanwhile queues behind it instead of overtaking it.
			err = s.clusterSend(h.m, h.done)
		}
		s.heldMu.Lock()
		if err != nil && errors.Is(err, ErrSessionClosed) {
			rest := s.held
			s.held = nil
			s.heldMu.Unlock()
			for _, r := range rest {
				if r.done != nil {
					r.done(err)
				}
			}
			return
		}
		s.held[0] = heldSend{}
		s.held = s.held[1:]
		s.heldMu.Unlock()
		switch {
		case err != nil && h.done != nil:
			h.done(err)
		case err != nil:
			// A send nobody waits for (not durable, its producer told
			// at once), failed after it was held: said here, once, as
			// nobody else will.
			s.b.log.Warn().Err(err).Str("address", h.m.Address).Str("user", s.opts.User).
				Msg("a held send failed once sent to its group")
		}
	}
}

// Blocked reports whether a send to address would wait for room now: a
// queue of it with address-full-policy BLOCK (or PAGE without a page
// store, for durable messages) is over its limit. AMQP asks before
// granting producers credit.
func (b *Broker) Blocked(address string) bool {
	if cb, ok := b.cluster.(ClusterBlocked); ok {
		return cb.Blocked(address)
	}
	m := &Message{Address: address, Durable: true, Body: []byte{0}}
	b.mu.RLock()
	a := b.addresses[address]
	var qs []*Queue
	if a != nil {
		if a.anycast != nil {
			qs = append(qs, a.anycast)
		}
		qs = append(qs, a.multicast...)
	}
	b.mu.RUnlock()
	for _, q := range qs {
		if q.verdict(m, true) == block {
			return true
		}
	}
	return false
}
