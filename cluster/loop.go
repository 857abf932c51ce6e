package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/junctionmq/junction/cluster/raftlog"
	"github.com/junctionmq/junction/cluster/transport"
)

// The Raft loop. One goroutine drives every group's RawNode: it ticks
// them, steps the messages other nodes sent, proposes what the group
// brokers submitted, and then handles every group's Ready together: one
// raftlog.Save (one fsync) for all their entries and hard states, then
// the messages (only after the save, so that nothing is acknowledged or
// voted that this node could forget; a leader's appends and heartbeats
// go before it, canSendEarly), then the committed entries (a leader's
// already on its disk before the save, applyStable), then Advance. A
// group's new leader activates its group broker once it has applied
// every entry committed before its term.

type raftMessage = pb.Message

// canPropose reports whether a group proposes what its group broker
// submitted now (loop): it leads, and none of its entries waits for its
// commit. What the group broker writes meanwhile waits and goes in the
// next entry (group commit): every entry costs each node a save (an
// fsync), a round of messages and their wake-ups, whatever its size;
// with one entry in flight at a time an entry carried about 30 messages
// of the durable bench instead of 20, and the nodes spent less CPU per
// message. An entry committed but not yet applied does not hold the
// next back: the next is proposed as soon as the step that commits the
// one before, so that raft tells the followers the commit and sends
// them the next entry together (one Ready and one save on each instead
// of two), and the leader applies the committed entry (completing its
// writes) while it saves the next (handleReadies).
//
// "Committed" is judged against the log as saved, not against what this
// node proposed: a leader that lost the group with entries uncommitted
// (truncated since by the next leader) and leads it again must not wait
// for indexes its log no longer has.
func (g *group) canPropose() bool {
	if !g.leading || g.proposing {
		return false
	}
	last, err := g.storage.LastIndex()
	return err == nil && g.rn.BasicStatus().HardState.GetCommit() >= last
}

func (n *Node) run() {
	defer n.wg.Done()
	tick := time.NewTicker(n.cfg.Tick)
	defer tick.Stop()
	balance := time.NewTicker(5 * time.Second)
	defer balance.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.failed:
			<-n.stop
			return
		case <-tick.C:
			n.ticked(time.Now())
			if time.Now().Before(n.noVoteUntil) {
				break // see New: a node that lost its log waits
			}
			for _, g := range n.groups {
				if !g.rejoining {
					g.rn.Tick()
				}
				g.transferEnded()
			}
		case <-balance.C:
			n.balanceLeaders()
		case <-n.inKick:
			n.stepInbox()
		case <-n.propKick:
		case f := <-n.ctl:
			f()
		}
		for _, g := range n.groups {
			if g.canPropose() {
				g.propose()
			}
		}
		if err := n.handleReadies(); err != nil {
			n.fail(err)
		}
		// An entry applied above may have made room for writes held
		// back, and Advance may have left raft with another Ready (the
		// leader's own acknowledgement committing an entry, committed
		// entries past one Ready's size): go round again for them rather
		// than wait for the next tick or message.
		for _, g := range n.groups {
			if g.hasPending() && g.canPropose() || g.rn.HasReady() {
				n.kickPropose()
				break
			}
		}
		for _, g := range n.groups {
			g.maybeRejoined()
			g.maybeActivate()
			g.maybeSnapshot()
		}
	}
}

// receiveRaft queues a raft message from a peer for the loop.
func (n *Node) receiveRaft(from uint64, frame []byte) {
	gid, k := binary.Uvarint(frame)
	if k <= 0 || n.group(gid) == nil {
		n.log.Warn().Uint64("peer", from).Msg("raft frame for no group")
		return
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(frame[k:], m); err != nil {
		n.log.Warn().Err(err).Uint64("peer", from).Msg("malformed raft frame")
		return
	}
	if m.GetFrom() != from {
		n.log.Warn().Uint64("peer", from).Uint64("claims", m.GetFrom()).Msg("raft message from another node than its link's: dropped")
		return
	}
	n.noteHeard(from)
	n.queueInbound(gid, m)
}

func (n *Node) queueInbound(gid uint64, m *pb.Message) {
	n.inMu.Lock()
	n.inbox = append(n.inbox, inbound{gid, m})
	n.inMu.Unlock()
	select {
	case n.inKick <- struct{}{}:
	default:
	}
}

func (n *Node) stepInbox() {
	n.inMu.Lock()
	in := n.inbox
	n.inbox = nil
	n.inMu.Unlock()
	noVote := time.Now().Before(n.noVoteUntil)
	for _, x := range in {
		g := n.group(x.group)
		m := x.msg
		t := m.GetType()
		if g.rejoining {
			if !g.rejoinStep(m) {
				continue
			}
		} else if noVote && (t == pb.MsgVote || t == pb.MsgPreVote) {
			continue
		}
		if t == pb.MsgAppResp && m.GetReject() && g.leading {
			g.checkLostLog(m)
		}
		if t == pb.MsgTimeoutNow {
			g.timeoutNowAt = time.Now()
		}
		if err := g.rn.Step(m); err != nil && err != raft.ErrStepPeerNotFound {
			n.log.Debug().Err(err).Uint64("group", x.group).Msg("raft step")
		}
	}
}

// rejoinStep filters a message for a group this node is rejoining (see
// group.rejoining) and reports whether to step it.
func (g *group) rejoinStep(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MsgVote, pb.MsgPreVote:
		return false
	case pb.MsgHeartbeat, pb.MsgApp, pb.MsgSnap:
		commit := m.GetCommit()
		if s := m.GetSnapshot(); s != nil {
			commit = max(commit, s.GetMetadata().GetIndex())
		}
		g.catchUpTo = max(g.catchUpTo, commit)
		if m.GetType() == pb.MsgHeartbeat {
			if last, _ := g.storage.LastIndex(); m.GetCommit() > last {
				m.Commit = new(last)
			}
		}
	}
	return true
}

// checkLostLog sees a follower refuse entries below what it had
// acknowledged: it lost its log (a node restarted with an empty data
// directory, see rejoining). raft, which assumes no voter ever loses its
// log, ignores such a refusal as stale and would never send the
// follower its entries again; a new leader starts over with every
// follower. So this leader hands the group to another voter that is up
// to date.
func (g *group) checkLostLog(m *pb.Message) {
	from := m.GetFrom()
	var lost bool
	var best uint64
	var bestMatch uint64
	g.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr tracker.Progress) {
		switch {
		case id == from:
			lost = m.GetRejectHint() < pr.Match
		case id != g.n.cfg.NodeID && typ == raft.ProgressTypePeer && pr.Match >= bestMatch:
			best, bestMatch = id, pr.Match
		}
	})
	if !lost {
		return
	}
	if best == 0 {
		g.n.log.Error().Uint64("group", g.id).Uint64("follower", from).Msg("a follower lost its log and no other voter can take over the group to resend it")
		return
	}
	g.n.log.Warn().Uint64("group", g.id).Uint64("follower", from).Uint64("to", best).
		Msg("a follower lost its log: handing the group to another voter, whose term starts it over")
	g.transferLeader(best)
}

// maybeRejoined ends a group's rejoining once it has applied what the
// group had committed when a leader first reached it (loop).
func (g *group) maybeRejoined() {
	if g.rejoining && g.catchUpTo > 0 && g.applied.Load() >= g.catchUpTo {
		g.rejoining = false
		g.n.log.Info().Uint64("group", g.id).Uint64("index", g.catchUpTo).Msg("caught up after rejoining with an empty log: voting again")
	}
}

// handleReadies persists, sends and applies what every group has ready.
func (n *Node) handleReadies() error {
	type ready struct {
		g  *group
		rd raft.Ready
	}
	var rds []ready
	var ups []raftlog.Update
	for _, g := range n.groups {
		if !g.rn.HasReady() {
			continue
		}
		rd := g.rn.Ready()
		if len(rd.Entries) > 0 {
			g.proposing = false // what it proposed is in this Ready
		}
		rds = append(rds, ready{g, rd})
		u := raftlog.Update{Group: g.id, Entries: rd.Entries}
		if !raft.IsEmptyHardState(rd.HardState) {
			u.HardState = rd.HardState
		}
		if !raft.IsEmptySnap(rd.Snapshot) {
			u.Snapshot = rd.Snapshot
		}
		if u.HardState != nil || len(u.Entries) > 0 || u.Snapshot != nil {
			ups = append(ups, u)
		}
	}
	if len(rds) == 0 {
		return nil
	}
	// A leader's appends and heartbeats go out before its own save, so
	// that its followers write the entries while it does (Raft thesis
	// 10.2.1; raft's doc.go allows it): the leader counts itself in a
	// majority only once the save is done (its self-acknowledgement
	// comes after Advance), so a commit still needs the entries on a
	// majority of disks.
	sent := make([]bool, len(rds))
	for i, r := range rds {
		if r.g.canSendEarly(r.rd) {
			sent[i] = true
			n.sendAll(r.g, r.rd.Messages)
		}
	}
	// A leader applies, before the save, the committed entries that are
	// on its disk already (those of an entry proposed as soon as the one
	// before committed, see canPropose): their writes complete while the
	// next entry is saved, not after.
	early := make([]int, len(rds))
	for i, r := range rds {
		k, err := r.g.applyStable(r.rd)
		if err != nil {
			return err
		}
		early[i] = k
	}
	if len(ups) > 0 {
		if err := n.rlog.Save(ups); err != nil {
			return fmt.Errorf("cluster: saving the raft log: %w", err)
		}
	}
	for i, r := range rds {
		g, rd := r.g, r.rd
		if hs := rd.HardState; hs != nil {
			g.savedTerm, g.savedVote, g.savedKnown = hs.GetTerm(), hs.GetVote(), true
		}
		if rd.SoftState != nil {
			term := g.term.Load()
			if rd.HardState != nil {
				term = rd.HardState.GetTerm()
			}
			g.onSoftState(rd.SoftState, term)
			n.groupChanged(g)
		} else if rd.HardState != nil {
			g.term.Store(rd.HardState.GetTerm())
		}
		if rd.HardState != nil {
			g.commit.Store(rd.HardState.GetCommit())
		}
		if !sent[i] {
			n.sendAll(g, rd.Messages)
		}
		if !raft.IsEmptySnap(rd.Snapshot) {
			if err := g.installSnapshot(rd.Snapshot); err != nil {
				return err
			}
		}
		for _, e := range rd.CommittedEntries[early[i]:] {
			if err := g.applyEntry(e); err != nil {
				return err
			}
		}
		g.rn.Advance(rd)
	}
	return nil
}

// applyStable applies, for a leader whose Ready changes neither its
// role nor its state wholesale, the Ready's committed entries that this
// node has saved already, and returns how many (loop). The others (a
// follower's, a leader's committed by its followers before its own save
// ended) are applied after the save: a write completes only once its
// entry is durable here too.
func (g *group) applyStable(rd raft.Ready) (int, error) {
	if !g.leading || rd.SoftState != nil || !raft.IsEmptySnap(rd.Snapshot) || len(rd.CommittedEntries) == 0 {
		return 0, nil
	}
	stable, err := g.storage.LastIndex()
	if err != nil {
		return 0, nil
	}
	k := 0
	for _, e := range rd.CommittedEntries {
		if e.GetIndex() > stable {
			break
		}
		if err := g.applyEntry(e); err != nil {
			return k, err
		}
		k++
	}
	return k, nil
}

// canSendEarly reports whether a Ready's messages may be sent before its
// entries and hard state are saved (loop): only a leader's, only when
// every message is an append or a heartbeat (whose order among
// themselves is kept), no snapshot is to be installed, and the Ready
// changes neither the term nor the vote, which must be on disk before
// any message of this node says them.
func (g *group) canSendEarly(rd raft.Ready) bool {
	if !g.leading || len(rd.Messages) == 0 || !raft.IsEmptySnap(rd.Snapshot) {
		return false
	}
	if ss := rd.SoftState; ss != nil && ss.RaftState != raft.StateLeader {
		return false
	}
	if !g.savedKnown {
		hs, _, err := g.storage.InitialState()
		if err != nil {
			return false
		}
		g.savedTerm, g.savedVote, g.savedKnown = hs.GetTerm(), hs.GetVote(), true
	}
	if hs := rd.HardState; hs != nil && (hs.GetTerm() != g.savedTerm || hs.GetVote() != g.savedVote) {
		return false
	}
	for _, m := range rd.Messages {
		if t := m.GetType(); t != pb.MsgApp && t != pb.MsgHeartbeat {
			return false
		}
	}
	return true
}

// sendAll sends a group's messages; a snapshot goes in chunks on the
// bulk lane.
func (n *Node) sendAll(g *group, msgs []*pb.Message) {
	for _, m := range msgs {
		to := m.GetTo()
		if m.GetType() == pb.MsgSnap {
			n.sendSnapshot(g.id, m)
			continue
		}
		b := binary.AppendUvarint(make([]byte, 0, 16+proto.Size(m)), g.id)
		b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
		if err != nil {
			n.log.Error().Err(err).Msg("marshalling a raft message")
			continue
		}
		if !n.tr.Send(to, transport.LaneRaft, b) {
			g.rn.ReportUnreachable(to)
		}
	}
}

// installSnapshot replaces a group's state with a snapshot its leader
// sent (the log saved it already).
func (g *group) installSnapshot(s *pb.Snapshot) error {
	md := s.GetMetadata()
	if err := g.state.restore(s.GetData()); err != nil {
		return fmt.Errorf("cluster: group %d snapshot %d: %w", g.id, md.GetIndex(), err)
	}
	g.state.mu.Lock()
	g.state.applied = md.GetIndex()
	g.state.mu.Unlock()
	g.applied.Store(md.GetIndex())
	g.snapIndex = md.GetIndex()
	g.confState = md.GetConfState()
	for _, id := range append(md.GetConfState().GetVoters(), md.GetConfState().GetLearners()...) {
		g.n.ensurePeer(id)
	}
	g.n.log.Info().Uint64("group", g.id).Uint64("index", md.GetIndex()).Msg("installed a snapshot from the leader")
	return nil
}

// maybeSnapshot compacts a group's log once enough has been applied since
// its last snapshot, counted in entries (Config.SnapshotEntries) or in
// bytes (Config.SnapshotBytes) (loop).
func (g *group) maybeSnapshot() {
	applied := g.applied.Load()
	if applied <= g.snapIndex || g.confState == nil || g.snapshotting {
		return
	}
	if applied < g.snapIndex+g.n.cfg.SnapshotEntries {
		held := g.storage.BytesAfter(g.snapIndex)
		if held < uint64(g.n.cfg.SnapshotBytes) || held < uint64(g.state.size()) {
			return
		}
	}
	// The state is encoded here, consistent with applied; the file is
	// written and synced off the loop (Storage.CreateSnapshot allows it
	// beside Save), so that a large state does not stop the group's
	// heartbeats for as long as its disk takes to write it.
	start := time.Now()
	data := g.state.snapshot()
	cs := g.confState
	g.snapshotting = true
	written := func(err error) {
		g.snapshotting = false
		switch {
		case errors.Is(err, raft.ErrSnapOutOfDate):
			// A snapshot installed from the leader meanwhile is further on.
			g.n.log.Debug().Uint64("group", g.id).Uint64("index", applied).Msg("snapshot overtaken")
		case err != nil:
			g.n.log.Error().Err(err).Uint64("group", g.id).Msg("snapshot failed")
		default:
			g.n.log.Debug().Uint64("group", g.id).Uint64("index", applied).Int("bytes", len(data)).Dur("took", time.Since(start)).Msg("snapshot")
		}
		// After a failure, retry after another SnapshotEntries (or
		// SnapshotBytes); an installed snapshot may be further on.
		g.snapIndex = max(g.snapIndex, applied)
	}
	if !g.n.goWork(func(<-chan struct{}) {
		err := g.storage.CreateSnapshot(applied, cs, data)
		g.n.onLoop(func() { written(err) })
	}) {
		g.snapshotting = false // stopping
	}
}

// balanceLeaders hands a group this node leads to its preferred leader
// when that member is caught up: group g prefers the (g-1 mod N)-th
// voter, so leaders, and the writes they take, spread over the nodes.
func (n *Node) balanceLeaders() {
	for _, g := range n.groups {
		if !g.leading || g.confState == nil {
			continue
		}
		voters := g.confState.GetVoters()
		if len(voters) < 2 {
			continue
		}
		sorted := append([]uint64(nil), voters...)
		slicesSort(sorted)
		pref := sorted[(g.id-1)%uint64(len(sorted))]
		if pref == n.cfg.NodeID {
			continue
		}
		st := g.rn.Status()
		last, _ := g.storage.LastIndex()
		// Raft's RecentActive is cleared at every quorum check and set
		// again by the member's next answer, so a look at the wrong
		// moment finds it false (balancing waited for minutes under
		// load); this node's own record of hearing the member
		// (lease.go) says the same without that blind spot.
		if pr, ok := st.Progress[pref]; ok && n.heardRecently(pref) && pr.Match+8 >= last {
			n.log.Info().Uint64("group", g.id).Uint64("to", pref).Msg("handing the group's leadership to its preferred node")
			g.transferLeader(pref)
			return // one at a time
		}
	}
}

func (n *Node) ensurePeer(id uint64) {
	if id == n.cfg.NodeID {
		return
	}
	n.peersMu.Lock()
	_, ok := n.peers[id]
	n.peersMu.Unlock()
	if !ok {
		n.log.Warn().Uint64("peer", id).Msg("a group names a member whose address this node does not know")
	}
}

func unmarshal(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }

// hasPending reports whether the group broker submitted writes not yet
// proposed.
func (g *group) hasPending() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending) > 0
}
