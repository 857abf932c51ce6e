package cluster

import (
	"testing"
	"time"
)

// A node is sure of a delivery only with recent contact: as a leader,
// with a majority, while its group broker serves the group and it is not
// handing the group over; as a follower, with the leader the delivery
// came from.
func TestLeases(t *testing.T) {
	n, _ := linkNode(t)
	n.cfg.Tick, n.cfg.ElectionTicks = 10*time.Millisecond, 10 // lease 50ms
	n.peers = map[uint64]string{2: "b", 3: "c"}
	if n.leaseHeld() {
		t.Fatal("a leader that heard from nobody holds its lease")
	}
	n.noteHeard(2)
	if !n.leaseHeld() || !n.heardRecently(2) || n.heardRecently(3) {
		t.Fatal("contact with one of two peers: the lease is held, peer 2 heard, peer 3 not")
	}
	g := &group{n: n, id: 1}
	g.isActive.Store(true)
	g.lead.Store(n.cfg.NodeID)
	n.groups = []*group{g}
	u := &upstream{s: &remoteSession{a: n.access}}
	u.parts = []*part{{u: u, idx: 0, group: 1}, {u: u, idx: 1, group: 1}, {u: u, idx: 2, group: 1}}
	u.parts[1].leader.Store(1) // this node
	u.parts[2].leader.Store(2)
	tag := func(idx uint8) uint64 { return makeTag(idx, 0, 5) }
	if !u.Doubtful(tag(0)) || u.Doubtful(tag(1)) || u.Doubtful(tag(2)) {
		t.Fatal("doubts with fresh contact: want only the unattached part's")
	}
	g.transferring.Store(true)
	if !u.Doubtful(tag(1)) || u.Doubtful(tag(2)) {
		t.Fatal("a group being handed over: want its leader's own deliveries doubtful, not another leader's")
	}
	g.transferring.Store(false)
	g.isActive.Store(false)
	if !u.Doubtful(tag(1)) {
		t.Fatal("a group whose broker no longer serves: want its deliveries doubtful")
	}
	g.isActive.Store(true)
	time.Sleep(80 * time.Millisecond)
	if !u.Doubtful(tag(1)) || !u.Doubtful(tag(2)) || n.leaseHeld() {
		t.Fatal("after the lease ran out every delivery is doubtful")
	}

	// A loop that has not ticked for longer than the lease (the process
	// was stopped) holds no lease, even with fresh messages from peers,
	// and not for a while after its late tick either.
	n.noteHeard(2)
	n.noteHeard(3)
	n.lastTick.Store(time.Now().Add(-time.Second).UnixNano())
	if n.leaseHeld() || n.heardRecently(2) {
		t.Fatal("a node whose loop is late holds its lease")
	}
	n.ticked(time.Now())
	if n.leaseHeld() {
		t.Fatal("a node just back from a stall holds its lease")
	}
}
