package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/junctionmq/junction/cluster/raftlog"
	"github.com/junctionmq/junction/core"
)

// Status is a node's view of the cluster, for the API, the CLI and the
// metrics.
type Status struct {
	NodeID  uint64            `json:"node_id"`
	Members map[uint64]string `json:"members"` // id → address, this node included
	Groups  []GroupStatus     `json:"groups"`
	// Forwarded counts the client operations this node's access side
	// sent to other nodes, and those it served for them.
	ForwardedOut uint64 `json:"forwarded_out"`
	ForwardedIn  uint64 `json:"forwarded_in"`
	// FencedConnections counts the client connections this node reset
	// because it lost the majority's contact while they held
	// deliveries (fence.go).
	FencedConnections uint64 `json:"fenced_connections"`
	// LinkResets counts the times this node reset everything it had
	// with a peer (links.go): a frame lost or refused, a restarted or
	// silent peer. Each fails the operations in flight on the link and
	// re-attaches its consumers.
	LinkResets uint64 `json:"link_resets"`
	// Peers lists the members whose cluster parameters differ from this
	// node's, or could not be checked (params.go): Refused ones (another
	// number of groups or placement) are kept apart, the others (the
	// routing configuration: diverts, address settings, virtual topics)
	// only warned about.
	Peers []PeerConfig `json:"peer_config,omitempty"`
	// OutOfCluster says why this node serves no client: its parameters
	// differ, in what must agree, from those of most members.
	OutOfCluster string `json:"out_of_cluster,omitempty"`
}

// GroupStatus is one group as this node sees it.
type GroupStatus struct {
	ID            uint64   `json:"id"`
	Leader        uint64   `json:"leader"` // 0: none known
	Term          uint64   `json:"term"`
	Commit        uint64   `json:"commit"`
	Applied       uint64   `json:"applied"`
	ApplyLag      uint64   `json:"apply_lag"` // commit - applied here
	Voters        []uint64 `json:"voters"`
	Learners      []uint64 `json:"learners,omitempty"`
	Active        bool     `json:"active"` // this node's group broker serves the group
	Messages      int      `json:"messages"`
	LeaderChanges uint64   `json:"leader_changes"`
	SnapshotIndex uint64   `json:"snapshot_index"`
	// SnapshotBytes is the size of the group's latest durable snapshot
	// on this node (0: none yet); LogBytes that of the entries its log
	// holds after it.
	SnapshotBytes int64  `json:"snapshot_bytes"`
	LogBytes      uint64 `json:"log_bytes"`
	// Progress of each member's log, known where this node leads.
	Progress map[uint64]uint64 `json:"progress,omitempty"`
	// CommitLatency of this node's proposals while it led the group.
	CommitLatency Histogram `json:"-"`
}

// Status returns the node's view of every group.
func (n *Node) Status() Status {
	st := Status{NodeID: n.cfg.NodeID, Members: map[uint64]string{n.cfg.NodeID: n.cfg.Listen},
		ForwardedOut: n.links.sent.Load(), ForwardedIn: n.links.received.Load(),
		FencedConnections: n.fence.count.Load(), LinkResets: n.links.resets.Load(),
		Peers: n.peerConfigs(), OutOfCluster: n.outOfCluster()}
	n.peersMu.Lock()
	for id, a := range n.peers {
		st.Members[id] = a
	}
	n.peersMu.Unlock()
	type loopView struct {
		voters, learners []uint64
		snap             uint64
		progress         map[uint64]uint64
	}
	views := make([]loopView, len(n.groups))
	err := n.doLoop(func() {
		for i, g := range n.groups {
			v := loopView{snap: g.snapIndex}
			if g.confState != nil {
				v.voters = slices.Clone(g.confState.GetVoters())
				v.learners = slices.Clone(g.confState.GetLearners())
			}
			if g.leading {
				s := g.rn.Status()
				v.progress = map[uint64]uint64{}
				for id, pr := range s.Progress {
					v.progress[id] = pr.Match
				}
			}
			views[i] = v
		}
	})
	stored := map[uint64]raftlog.GroupStats{}
	for _, s := range n.rlog.Stats().Groups {
		stored[s.Group] = s
	}
	for i, g := range n.groups {
		msgs, _, _ := g.state.stats()
		commit, applied := g.commit.Load(), g.applied.Load()
		gs := GroupStatus{
			ID: g.id, Leader: g.lead.Load(), Term: g.term.Load(), Commit: commit, Applied: applied,
			Active: g.isActive.Load(), Messages: msgs, LeaderChanges: g.leaderChanges.Load(),
			CommitLatency: g.commitNanos.snapshot(),
			SnapshotBytes: stored[g.id].SnapshotSize, LogBytes: stored[g.id].Bytes,
		}
		if commit > applied {
			gs.ApplyLag = commit - applied
		}
		if err == nil {
			v := views[i]
			gs.Voters, gs.Learners, gs.SnapshotIndex, gs.Progress = v.voters, v.learners, v.snap, v.progress
		}
		st.Groups = append(st.Groups, gs)
	}
	return st
}

// Membership. A member is added to every group, first as a learner (it
// copies the log without counting for the majority), and promoted to
// voter once it has caught up; a member is removed from every group.
// Each change is proposed by the group's leader, so the node asked
// forwards the change to the leader of each group (kMember).

// ErrMembership wraps a membership change that could not be made;
// ErrMembershipRefused (which wraps it too) one refused as asked: a
// member without an address, one already there at another address, a
// node that is no member, a node removing itself.
var (
	ErrMembership              = errors.New("cluster: membership change failed")
	ErrMembershipRefused error = membershipRefused{}
)

type membershipRefused struct{}

func (membershipRefused) Error() string        { return "cluster: membership change refused" }
func (membershipRefused) Is(target error) bool { return target == ErrMembership }

// AddMember adds node id, reachable at addr, to every group. It returns
// once the node is a voter of every group, or ctx ends.
func (n *Node) AddMember(ctx context.Context, id uint64, addr string) error {
	if id == 0 || addr == "" {
		return fmt.Errorf("%w: a member needs an id and an address", ErrMembershipRefused)
	}
	// Adding a member again is a retry (a learner of some groups yet),
	// but not at another address: ids are never reused, and the change
	// would keep the address it has.
	wasMember, err := n.isMember(id)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMembership, err)
	} else if known := n.Status().Members[id]; wasMember && known != addr {
		return fmt.Errorf("%w: node %d is already a member, at %s", ErrMembershipRefused, id, known)
	}
	// What an earlier attempt found of its parameters is judged again
	// when its links connect.
	n.forgetParams(id)
	for _, op := range []uint8{memberAddLearner, memberPromote} {
		for g := uint64(1); g <= uint64(n.cfg.Groups); g++ {
			err := n.memberChange(ctx, g, op, id, addr)
			if differ := n.refusedPeer(id); differ != "" {
				// Its links are refused (params.go): it would stay a
				// learner that never catches up. A node new to the
				// cluster is taken out again, which changes no majority
				// (it was a learner); a member of before (restarted
				// with other flags) is left for the operator to fix or
				// remove.
				if wasMember {
					return fmt.Errorf("%w: node %d, a member, cannot be brought up to date: %s (restart it with the cluster's parameters, or remove it)", ErrMembershipRefused, id, differ)
				}
				for g := uint64(1); g <= uint64(n.cfg.Groups); g++ {
					if rerr := n.memberChange(ctx, g, memberRemove, id, ""); rerr != nil {
						return fmt.Errorf("%w: node %d was not added: %s; taking it out again failed (remove it): %w", ErrMembershipRefused, id, differ, rerr)
					}
				}
				return fmt.Errorf("%w: node %d was not added: %s", ErrMembershipRefused, id, differ)
			}
			if err != nil && op == memberPromote && ctx.Err() != nil {
				// The usual end of an add that does not finish: say
				// what it left, for the operator who reads it.
				return fmt.Errorf("%w (node %d is a learner of every group but has not caught up to be made a voter of group %d: is it running, started with --cluster-join, and reachable at %s? Add it again, or remove it)", err, id, g, addr)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// RemoveMember removes node id from every group.
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	if id == n.cfg.NodeID {
		// Once out of a group a node hears no more of it, and out of
		// every group its peers drop it: it could not see its removal
		// through, and would stop half way.
		return fmt.Errorf("%w: node %d cannot remove itself: ask another member", ErrMembershipRefused, id)
	}
	if in, err := n.isMember(id); err != nil {
		return fmt.Errorf("%w: %w", ErrMembership, err)
	} else if !in {
		return fmt.Errorf("%w: node %d is not a member of any group (as node %d knows them)", ErrMembershipRefused, id, n.cfg.NodeID)
	}
	for g := uint64(1); g <= uint64(n.cfg.Groups); g++ {
		if err := n.memberChange(ctx, g, memberRemove, id, ""); err != nil {
			return err
		}
	}
	return nil
}

// isMember reports whether node id is a voter or a learner of any group
// as this node has applied their configurations.
func (n *Node) isMember(id uint64) (bool, error) {
	in := false
	err := n.doLoop(func() {
		for _, g := range n.groups {
			if cs := g.confState; cs != nil && (slices.Contains(cs.GetVoters(), id) || slices.Contains(cs.GetLearners(), id)) {
				in = true
			}
		}
	})
	return in, err
}

// Kinds of membership change (kMember's n).
const (
	memberAddLearner uint8 = iota + 1
	memberPromote
	memberRemove
)

// memberChange has group g's leader make one change, retrying while the
// group elects a leader or has a change under way.
func (n *Node) memberChange(ctx context.Context, g uint64, op uint8, id uint64, addr string) error {
	for {
		if op == memberPromote && n.refusedPeer(id) != "" {
			return fmt.Errorf("%w: node %d's cluster parameters differ", ErrMembershipRefused, id)
		}
		leader, err := n.waitLeader(ctx, g)
		var done bool
		if err == nil {
			if leader == n.cfg.NodeID {
				done, err = n.changeLocal(ctx, g, op, id, addr)
			} else {
				var str string
				str, _, err = n.access.request(ctx, nil, leader, &rpcMsg{kind: kMember, group: g, n: uint64(op), tag: id, str: addr})
				done = err == nil && str == "done"
			}
		}
		switch {
		case done:
			return nil
		case err != nil && !errors.Is(err, core.ErrUnavailable) && !errors.Is(err, errNotYet):
			return fmt.Errorf("%w: group %d: %w", ErrMembership, g, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: group %d: %w", ErrMembership, g, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errNotYet: the change is under way (or must wait for another); ask
// again.
var errNotYet = errors.New("cluster: membership change under way")

// changeLocal makes one change on a group this node leads, and reports
// whether it is done (applied, or nothing to do).
func (n *Node) changeLocal(ctx context.Context, gid uint64, op uint8, id uint64, addr string) (bool, error) {
	g := n.group(gid)
	var done bool
	var err error
	lerr := n.doLoop(func() {
		if !g.leading {
			err = ErrNotLeader
			return
		}
		cs := g.confState
		isVoter := cs != nil && slices.Contains(cs.GetVoters(), id)
		isLearner := cs != nil && slices.Contains(cs.GetLearners(), id)
		var cc *pb.ConfChangeV2
		switch op {
		case memberAddLearner:
			if isVoter || isLearner {
				done = true
				return
			}
			cc = &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeAddLearnerNode.Enum(), NodeId: new(id)}}, Context: []byte(addr)}
		case memberPromote:
			if isVoter {
				done = true
				return
			}
			if !isLearner {
				err = fmt.Errorf("node %d is not a learner of the group", id)
				return
			}
			// Promote once the learner's log is close to the leader's:
			// it has acknowledged entries (Match 0: it never answered,
			// which a short log would otherwise let pass).
			last, _ := g.storage.LastIndex()
			if pr, ok := g.rn.Status().Progress[id]; !ok || pr.Match == 0 || pr.Match+64 < last {
				err = errNotYet
				return
			}
			cc = &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeAddNode.Enum(), NodeId: new(id)}}, Context: []byte(addr)}
		case memberRemove:
			if !isVoter && !isLearner {
				done = true
				return
			}
			if isVoter && len(cs.GetVoters()) <= 1 {
				err = errors.New("the last voter of a group cannot be removed")
				return
			}
			cc = &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(id)}}}
		default:
			err = fmt.Errorf("membership change %d", op)
			return
		}
		if pending := g.rn.Status(); pending.Applied < g.commit.Load() {
			err = errNotYet // let the log settle first: one change at a time
			return
		}
		if e := g.rn.ProposeConfChange(cc); e != nil {
			err = fmt.Errorf("%w: %w", errNotYet, e)
			return
		}
		err = errNotYet // proposed: done once applied
	})
	if lerr != nil {
		return false, lerr
	}
	return done, err
}

// handleMember serves kMember from another node.
func (n *Node) handleMember(from uint64, m *rpcMsg) {
	done, err := n.changeLocal(context.Background(), m.group, uint8(m.n), m.tag, m.str)
	str := ""
	if done {
		str = "done"
	}
	if errors.Is(err, errNotYet) {
		err = nil // not done: the asker asks again
	}
	n.replyResult(from, m.group, m.rid, err, str, nil)
}
