package cluster

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"
)

// fullHold is how long a node holds the producers of an address after a
// group's answer said it is over its limit, before it asks the group
// again (adminBlocked); they wait until the group says it has room.
const fullHold = 100 * time.Millisecond

// fullAddresses is an access broker's memory of the addresses its groups
// said are over their limits (core.ClusterBlocked). A group broker
// takes a cluster send over a BLOCK limit (and over PAGE's, having no
// page store) rather than wait: waiting would stall the link every
// session of the sending node shares. It answers "full", and the
// sending node holds that address's producers instead, each in its own
// session, as a single broker does, until the group says it has room:
// so a cluster's backlog stays within its budget (overshooting by the
// sends in flight when it filled) instead of growing until the node
// runs out of memory.
type fullAddresses struct {
	n  atomic.Int32 // len(at), read without mu on every send
	mu sync.Mutex
	at map[string]*fullEntry
}

type fullEntry struct {
	at      time.Time // when a group last said full
	probing bool      // a question to the group is out
}

// note records a send's answer for address.
func (f *fullAddresses) note(address string, full bool) {
	if !full && f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.at[address]
	switch {
	case full && e == nil:
		if f.at == nil {
			f.at = make(map[string]*fullEntry)
		}
		f.at[address] = &fullEntry{at: time.Now()}
		f.n.Add(1)
	case full:
		e.at = time.Now()
	case e != nil:
		delete(f.at, address)
		f.n.Add(-1)
	}
}

// blocked reports whether producers of address wait, and whether the
// caller is to ask the group again (the answer is older than fullHold
// and no question is out): then it calls probed with the answer.
func (f *fullAddresses) blocked(address string) (blocked, ask bool) {
	if f.n.Load() == 0 {
		return false, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.at[address]
	switch {
	case e == nil:
		return false, false
	case e.probing || time.Since(e.at) < fullHold:
		return true, false
	}
	e.probing = true
	return true, true
}

// probed records the group's answer to blocked's question; a failed
// question counts as room (the next send's answer tells again).
func (f *fullAddresses) probed(address string, full bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.at[address]
	switch {
	case e == nil:
	case full:
		e.at, e.probing = time.Now(), false
	default:
		delete(f.at, address)
		f.n.Add(-1)
	}
}

// Blocked implements core.ClusterBlocked.
func (a *access) Blocked(address string) bool {
	blocked, ask := a.full.blocked(address)
	if ask && !a.n.goWork(func(<-chan struct{}) { a.askFull(address) }) {
		a.full.probed(address, false) // stopping: nothing to wait for
	}
	return blocked
}

// askFull asks address's group whether it is still over its limit.
func (a *access) askFull(address string) {
	p, err := a.admin(a.n.groupOf(address), adminBlocked, adminArgs{Name: address})
	var full bool
	if err == nil {
		err = json.Unmarshal(p, &full)
	}
	a.full.probed(address, err == nil && full)
}
