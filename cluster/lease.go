package cluster

import "time"

// Leases against stale deliveries. Raft commits nothing without a
// majority, but a leader cut off from its majority keeps believing it
// leads until CheckQuorum makes it step down, up to two election
// timeouts later, while the majority may elect another leader after
// one. A group broker serving in that window hands out what the new
// leader hands out again, and a node cut off from a group's leader
// cannot know that what it still holds from it was redelivered
// elsewhere. Neither can be undone; both can be told. With PreVote and
// CheckQuorum, followers elect no other leader before an election
// timeout without hearing from the old one, so a delivery made while
// the source has heard from a majority within half of it (leaseHeld),
// and handed out while this node has heard from the source within half
// of it (heardRecently), cannot have been made by another leader too.
// Any other goes out flagged redelivered: a possible duplicate, said.
//
// A leader may also hand its group over (balanceLeaders; a follower that
// lost its log): raft's MsgTimeoutNow makes the chosen follower campaign
// at once, and the voters grant it their votes within the lease, so the
// old leader is replaced while it still hears from a majority. So a
// group is sure only while this node's group broker serves it and is
// not handing it over (group.sure); from the moment a transfer starts
// its deliveries are flagged. And a leader elected at once waits a
// lease from the MsgTimeoutNow before its group broker serves: what the
// old leader handed out unflagged before the transfer has reached its
// consumers (or the access nodes have learnt of the new term and dropped
// what they had not handed out yet) before the new leader delivers the
// same messages again, flagged. A handover costs the group's clients a
// pause of half an election timeout, once.

// A node that was stopped or starved (SIGSTOP, a long pause) has not
// run its Raft loop: on waking it may still take itself for a leader,
// and the messages from its peers that wake it (which tell it of a newer
// term) look like fresh contact until the loop has read them. So no
// lease while the loop's tick is late, nor for two election timeouts
// after a late tick.

// ticked records a tick of the loop at now.
func (n *Node) ticked(now time.Time) {
	if last := n.lastTick.Swap(now.UnixNano()); last != 0 && now.Sub(time.Unix(0, last)) > n.lease() {
		n.stalledUntil.Store(now.Add(4 * n.lease()).UnixNano())
	}
}

// stalled reports whether the loop is late or was late lately.
func (n *Node) stalled(now time.Time) bool {
	if last := n.lastTick.Load(); last != 0 && now.Sub(time.Unix(0, last)) > n.lease() {
		return true
	}
	return now.UnixNano() < n.stalledUntil.Load()
}

// electionTimeout is the least time a follower waits without hearing
// from its leader before it campaigns.
func (n *Node) electionTimeout() time.Duration {
	return time.Duration(n.cfg.ElectionTicks) * n.cfg.Tick
}

// lease is how recently contact must have been for a delivery to be
// sure.
func (n *Node) lease() time.Duration {
	return time.Duration(n.cfg.ElectionTicks) * n.cfg.Tick / 2
}

// noteHeard records a Raft message from peer id.
func (n *Node) noteHeard(id uint64) {
	now := time.Now()
	n.heardMu.Lock()
	if n.heard == nil {
		n.heard = make(map[uint64]time.Time)
	}
	n.heard[id] = now
	n.noteReachedLocked(id, now)
	n.heardMu.Unlock()
}

// noteReached records a forwarding frame from peer id: contact with it,
// for the fence, but not Raft's (a leader's lease rests on its
// followers answering its heartbeats, which another lane's frames do
// not show).
func (n *Node) noteReached(id uint64) {
	n.heardMu.Lock()
	n.noteReachedLocked(id, time.Now())
	n.heardMu.Unlock()
}

func (n *Node) noteReachedLocked(id uint64, now time.Time) {
	if n.reached == nil {
		n.reached = make(map[uint64]time.Time)
	}
	n.reached[id] = now
}

// heardRecently reports whether a Raft message came from id within the
// lease.
func (n *Node) heardRecently(id uint64) bool {
	if n.stalled(time.Now()) {
		return false
	}
	n.heardMu.Lock()
	t, ok := n.heard[id]
	n.heardMu.Unlock()
	return ok && time.Since(t) < n.lease()
}

// leaseHeld reports whether this node, with the peers it heard from
// within the lease, is a majority of the members: as a leader, it
// cannot have been replaced.
func (n *Node) leaseHeld() bool {
	now := time.Now()
	if n.stalled(now) {
		return false
	}
	live, members := n.contact(now, false)
	return 2*live > members
}

// contact counts the members this node heard from within the lease
// before now, itself included, and the members: Raft messages only, or
// frames of any kind (anyLane).
func (n *Node) contact(now time.Time, anyLane bool) (live, members int) {
	limit := n.lease()
	// peersMu, then heardMu: noteHeard takes heardMu alone.
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	members, live = 1+len(n.peers), 1
	n.heardMu.Lock()
	heard := n.heard
	if anyLane {
		heard = n.reached
	}
	for id := range n.peers {
		if t, ok := heard[id]; ok && now.Sub(t) < limit {
			live++
		}
	}
	n.heardMu.Unlock()
	return live, members
}

// Doubtful implements core.DoubtingUpstream (see above).
func (u *upstream) Doubtful(tag uint64) bool {
	idx := int(tag >> (tagIDBits + tagEpochBits))
	if idx >= len(u.parts) {
		return true
	}
	leader := u.parts[idx].leader.Load()
	n := u.s.a.n
	switch leader {
	case 0:
		return true
	case n.cfg.NodeID:
		return !n.leaseHeld() || !n.group(u.parts[idx].group).sure()
	}
	return !n.heardRecently(leader)
}

// sure reports whether this node's group broker serves the group with
// no handover under way: with the node's lease (leaseHeld), no other
// node can be delivering the group's messages.
func (g *group) sure() bool {
	return g != nil && g.isActive.Load() && !g.transferring.Load() && g.stillLeading()
}

// transferLeader hands the group to node to (loop): from now on its
// deliveries are flagged (see above), until the transfer ends (this node
// no longer leads) or raft gives it up (transferEnded).
func (g *group) transferLeader(to uint64) {
	g.transferring.Store(true)
	g.rn.TransferLeader(to)
}

// transferEnded clears transferring once raft has given a transfer up
// (the target was not elected within an election timeout) while this
// node still leads (loop).
func (g *group) transferEnded() {
	if g.transferring.Load() && g.leading && g.rn.BasicStatus().LeadTransferee == 0 {
		g.transferring.Store(false)
	}
}
