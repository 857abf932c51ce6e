package cluster

import (
	"sync/atomic"
	"time"

	"github.com/junctionmq/junction/core"
)

// The fence. What a node hands out once a source is doubtful goes out
// flagged (lease.go), but what it wrote before may still be on its way:
// a node cut off from the other nodes and from its own clients (a
// partition around its machine) keeps retransmitting what its clients'
// connections hold, and after the heal a client would receive those
// deliveries unflagged although the group, having lost this node, had
// redelivered them (flagged) elsewhere meanwhile. Bytes in a socket
// cannot be recalled, but they can be dropped: every lease/4, while this
// node has not heard from a majority of the members within the lease,
// the access broker closes abortively (a TCP reset: the kernel discards
// the send queue) every client connection holding an unacknowledged
// delivery that went out unflagged and whose source is now doubtful
// (core.Broker.FenceDoubtful, upstream.Doubtful): one from a group this
// node leads, or from a remote leader it has not heard from within the
// lease. The client reconnects (elsewhere) and gets those messages again
// from their group, flagged.
//
// In time: with PreVote and CheckQuorum, followers elect no other leader
// before an election timeout without hearing from the old one, and a
// leader resets the forwarding link of a silent node (and redelivers
// what that node's consumers held) only after linkTimeout, longer still.
// The lease is half an election timeout and the check runs every
// lease/4 (one late check may be let go, fenceLoop), so a node cut off
// resets its clients' connections within 3/4 of an election timeout of
// its last contact, before another leader can deliver the same messages
// again.
//
// Only while the majority's contact is lost: a node that hears from a
// majority is in the connected part of the network, and what it wrote
// has reached its clients. A remote leader cut off, or a group between
// two leaders (an upstream re-attaching), is no reason to reset the
// connections of such a node; nor is a late Raft loop alone (a long
// fsync: the loop, not the sockets, was stalled; what the node hands
// out after it is flagged anyway, lease.go). Contact, here, is a frame
// of any lane: a node that leads no group hears no Raft message while
// its groups have no leader (between a leader's loss and the next
// election), but the forwarding lane's pings, four times per lease, still
// come from the peers in touch. Peers that all go silent for the lease
// (stalled) look like a cut: the node then resets its clients
// needlessly, and they reconnect. Not covered: a network that cuts a
// node from a group's leader and from its own clients while leaving it a
// majority.

// fence is a node's fence state.
type fence struct {
	broker atomic.Pointer[core.Broker] // the access broker (FenceBroker); nil until it exists
	count  atomic.Uint64               // connections reset, for the metrics
}

// FenceBroker implements core.FencingCluster: b is the access broker
// whose connections the node fences.
func (a *access) FenceBroker(b *core.Broker) { a.n.fence.broker.Store(b) }

// fenceLoop checks the contact every lease/4 until the node stops. A
// tick that comes late (the process was starved or stopped) is let go
// once: the frames from peers that show contact may be waiting to be
// read, and the next check, lease/4 later, is still in time.
func (n *Node) fenceLoop(stop <-chan struct{}) {
	every := max(n.lease()/4, time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	last, skipped := time.Now(), false
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			now := time.Now()
			late := now.Sub(last) > 2*every
			last = now
			if late && !skipped {
				skipped = true
				continue
			}
			skipped = false
			n.fenceCheck()
		}
	}
}

// fenceCheck resets the connections holding doubtful deliveries while
// this node has not heard from a majority of the members within the
// lease.
func (n *Node) fenceCheck() {
	b := n.fence.broker.Load()
	if b == nil {
		return
	}
	now := time.Now()
	live, members := n.contact(now, true)
	if 2*live > members {
		return
	}
	fenced := b.FenceDoubtful()
	late := n.stalled(now)
	for _, f := range fenced {
		n.fence.count.Add(1)
		n.log.Warn().Uint64("connection", f.ID).Str("protocol", f.Protocol).Str("remote", f.RemoteAddr).
			Str("user", f.User).Str("client_id", f.ClientID).Int("deliveries", f.Deliveries).
			Int("members_heard", live).Int("members", members).Bool("loop_late", late).
			Msg("connection reset by the fence: this node lost the majority's contact, and the client held deliveries another node may make again")
	}
}
