package core

import (
	"sync"

	"github.com/junctionmq/junction/core/guard"
)

// Reasons a front-end refuses a connection before it has authenticated,
// for CountPreAuthRefusal and GuardStats.
const (
	// PreAuthFrameTooLarge: a frame or packet before authentication was
	// larger than the front-end's pre-authentication limit.
	PreAuthFrameTooLarge = "frame_too_large"
	// PreAuthBudget: the broker's pre-authentication budget
	// (Config.PreAuthBudget) had no room for the connection's bytes.
	PreAuthBudget = "budget"
)

// guardCounts holds the broker-wide pre-authentication budget and counts
// what the front-ends refused by it and by their frame clocks.
type guardCounts struct {
	budget *guard.Budget

	mu            sync.Mutex
	refused       map[[2]string]uint64 // guarded by mu: protocol, reason → count
	frameTimeouts map[string]uint64    // guarded by mu: protocol → count
}

// PreAuth opens the account with which a front-end charges a new
// connection's bytes to the broker's pre-authentication budget until the
// client has authenticated (see package guard). limit is the most the
// connection may hold before then: the protocol's largest frame before
// authentication plus its reader's buffer. The front-end closes the
// account once the client has authenticated or the connection ends.
func (b *Broker) PreAuth(limit int) *guard.Account {
	return b.guards.budget.Open(int64(limit))
}

// CountPreAuthRefusal counts a connection a front-end refused before
// authentication, by protocol and reason (PreAuthFrameTooLarge,
// PreAuthBudget).
func (b *Broker) CountPreAuthRefusal(protocol, reason string) {
	g := &b.guards
	g.mu.Lock()
	if g.refused == nil {
		g.refused = make(map[[2]string]uint64)
	}
	g.refused[[2]string{protocol, reason}]++
	g.mu.Unlock()
}

// CountFrameTimeout counts a connection a front-end closed because one
// frame took longer than its frame clock allows (guard.ErrFrameTimeout).
func (b *Broker) CountFrameTimeout(protocol string) {
	g := &b.guards
	g.mu.Lock()
	if g.frameTimeouts == nil {
		g.frameTimeouts = make(map[string]uint64)
	}
	g.frameTimeouts[protocol]++
	g.mu.Unlock()
}

// GuardStats is a snapshot of the pre-authentication budget and of the
// connections refused or closed by the front-ends' read limits.
type GuardStats struct {
	// PreAuthHeld is the bytes charged to connections not yet
	// authenticated; PreAuthMax the budget (0: unbounded).
	PreAuthHeld, PreAuthMax int64
	// PreAuthRefused counts refusals by protocol, then reason.
	PreAuthRefused map[string]map[string]uint64
	// FrameTimeouts counts, by protocol, connections closed because a
	// frame took too long.
	FrameTimeouts map[string]uint64
}

// GuardStats returns the counters of the front-ends' read limits.
func (b *Broker) GuardStats() GuardStats {
	g := &b.guards
	st := GuardStats{
		PreAuthHeld:    g.budget.Held(),
		PreAuthMax:     g.budget.Max(),
		PreAuthRefused: make(map[string]map[string]uint64),
		FrameTimeouts:  make(map[string]uint64),
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, n := range g.refused {
		m := st.PreAuthRefused[k[0]]
		if m == nil {
			m = make(map[string]uint64)
			st.PreAuthRefused[k[0]] = m
		}
		m[k[1]] = n
	}
	for p, n := range g.frameTimeouts {
		st.FrameTimeouts[p] = n
	}
	return st
}
