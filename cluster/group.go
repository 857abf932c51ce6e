package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/junctionmq/junction/cluster/raftlog"
	"github.com/junctionmq/junction/core"
)

// group is one Raft group on this node: its RawNode (owned by the loop),
// its log, its applied state, the operations its group broker proposes,
// and, while this node leads it, the group broker itself.
type group struct {
	n       *Node
	id      uint64
	storage *raftlog.Storage
	state   *groupState
	tx      txBufs

	// Owned by the loop goroutine:
	rn        *raft.RawNode
	confState *pb.ConfState
	snapIndex uint64
	// snapshotting: a snapshot's file is being written (maybeSnapshot).
	snapshotting bool
	leading      bool
	activateAt   uint64 // leader: activate once applied reaches it
	activating   bool
	// timeoutNowAt is when this node was last told to campaign at once
	// (a leader handing it the group, MsgTimeoutNow); a leader so
	// elected activates no earlier than a lease after it (lease.go).
	timeoutNowAt  time.Time
	activateAfter time.Time
	inflight      map[uint64][]func(error) // proposal id → completions
	// proposing: an entry was proposed that no Ready has carried yet
	// (see canPropose).
	proposing bool
	proposed  map[uint64]proposal // proposal id → what was proposed (as inflight)
	nextProp  uint64
	// rejoining: this node came back with an empty log (Config.Join) and
	// may have been a member that lost its data. Until it has applied
	// what the group had committed when it heard from a leader
	// (catchUpTo), it neither votes nor campaigns, and it caps the commit
	// index leaders tell it (a leader that still counts the entries this
	// node had before would otherwise make raft panic).
	rejoining bool
	catchUpTo uint64
	// The term and vote last saved (savedKnown: read from the log once).
	savedTerm, savedVote uint64
	savedKnown           bool

	// Read from any goroutine:
	lead     atomic.Uint64 // current leader as this node knows it (0: none)
	term     atomic.Uint64
	applied  atomic.Uint64
	commit   atomic.Uint64
	isActive atomic.Bool // this node's group broker serves the group
	// transferring: this node, leading the group, is handing it to
	// another (lease.go); set and cleared by the loop.
	transferring atomic.Bool

	// mu guards what the group broker proposes.
	mu        sync.Mutex
	accepting bool // a group broker of this node may propose
	pending   []pendingOps

	// life serialises activation and deactivation of the group broker.
	life   sync.Mutex
	broker *core.Broker // guarded by life
	epoch  uint64       // guarded by life: activations so far

	// Counters for status and metrics.
	leaderChanges atomic.Uint64
	proposals     atomic.Uint64
	commitNanos   histogram
}

// proposal is an entry this node proposed and has not yet applied: its
// data and the operations it encodes, which the leader applies without
// decoding its own entry again.
type proposal struct {
	data []byte
	ops  []op
}

type pendingOps struct {
	ops  []op
	done func(error)
	at   time.Time
}

// ErrNotLeader: this node does not lead the group (any more); a write in
// flight may or may not have been committed.
var ErrNotLeader = fmt.Errorf("%w: this node does not lead the group", core.ErrUnavailable)

// idBase is the smallest record id of the group's records: ids of
// different groups never meet.
func (g *group) idBase() uint64 { return g.id << 48 }

// submit queues a group broker's operations for the next entry.
func (g *group) submit(ops []op, done func(error)) {
	g.mu.Lock()
	if !g.accepting {
		g.mu.Unlock()
		goDone(done, ErrNotLeader)
		return
	}
	g.pending = append(g.pending, pendingOps{ops: ops, done: done, at: time.Now()})
	g.mu.Unlock()
	g.n.kickPropose()
}

// takePending returns what was submitted since the last call.
func (g *group) takePending() []pendingOps {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.pending
	g.pending = nil
	return p
}

// propose turns pending operations into entries (loop). Operations of
// one submit (a transaction) never span entries.
func (g *group) propose() {
	pend := g.takePending()
	if len(pend) == 0 {
		return
	}
	if !g.leading {
		for _, p := range pend {
			goDone(p.done, ErrNotLeader)
		}
		return
	}
	max := g.n.cfg.MaxEntryBytes
	var ops []op
	var dones []func(error)
	var started time.Time
	size := 0
	flush := func() {
		if len(ops) == 0 {
			return
		}
		g.nextProp++
		pid := g.nextProp
		data := encodeOps(make([]byte, 0, size+32), g.n.cfg.NodeID, pid, ops)
		if err := g.rn.Propose(data); err != nil {
			err = fmt.Errorf("%w: %w", ErrNotLeader, err)
			for _, d := range dones {
				goDone(d, err)
			}
		} else {
			g.inflight[pid] = append(dones, startTimer(g, started))
			if g.proposed == nil {
				g.proposed = make(map[uint64]proposal)
			}
			g.proposed[pid] = proposal{data: data, ops: ops}
			g.proposals.Add(1)
			g.proposing = true
		}
		ops, dones, size = nil, nil, 0
	}
	for _, p := range pend {
		n := 0
		for _, o := range p.ops {
			n += len(o.payload) + 24
		}
		if limit := g.n.cfg.maxEntrySize() - 64; n > limit {
			// One submit (a transaction) is never split, and an entry
			// over the log's limit would stop every node that saves it:
			// refuse it here, before it leaves this node.
			err := fmt.Errorf("%w: a write of %d bytes in one Raft entry, over the limit of %d", core.ErrTooLarge, n, limit)
			g.n.log.Warn().Err(err).Uint64("group", g.id).Msg("write refused")
			goDone(p.done, err)
			continue
		}
		if size > 0 && size+n > max {
			flush()
		}
		if len(ops) == 0 {
			started = p.at
		}
		ops = append(ops, p.ops...)
		if p.done != nil {
			dones = append(dones, p.done)
		}
		size += n
	}
	flush()
}

// startTimer returns a completion that records the commit latency of an
// entry, from its first operation's submit.
func startTimer(g *group, at time.Time) func(error) {
	return func(err error) {
		if err == nil {
			g.commitNanos.observe(time.Since(at))
		}
	}
}

// applyEntry applies one committed entry (loop).
func (g *group) applyEntry(e *pb.Entry) error {
	switch e.GetType() {
	case pb.EntryNormal:
		if len(e.GetData()) == 0 {
			break // a new leader's empty entry
		}
		proposer, pid, ops, err := g.entryOps(e.GetData())
		if err != nil {
			return fmt.Errorf("group %d entry %d: %w", g.id, e.GetIndex(), err)
		}
		g.state.apply(ops)
		if proposer == g.n.cfg.NodeID && pid != 0 {
			delete(g.proposed, pid)
			if dones, ok := g.inflight[pid]; ok {
				delete(g.inflight, pid)
				g.n.complete(dones, nil)
			}
		}
	case pb.EntryConfChange, pb.EntryConfChangeV2:
		if err := g.applyConfChange(e); err != nil {
			return err
		}
	}
	g.state.mu.Lock()
	g.state.applied = e.GetIndex()
	g.state.mu.Unlock()
	g.applied.Store(e.GetIndex())
	return nil
}

// entryOps returns the proposer, proposal id and operations of an
// entry's data. An entry this node proposed, byte for byte as it
// proposed it, is not decoded: its operations are at hand.
func (g *group) entryOps(data []byte) (proposer, pid uint64, ops []op, err error) {
	proposer, pid, k := entryHeader(data)
	if k > 0 && proposer == g.n.cfg.NodeID {
		if p, ok := g.proposed[pid]; ok && bytes.Equal(p.data, data) {
			return proposer, pid, p.ops, nil
		}
	}
	return decodeOps(data)
}

// failInflight fails every proposal waiting for a commit (loop): the node
// lost the leadership, so whether each commits is out of its hands.
func (g *group) failInflight() {
	var all [][]func(error)
	for pid, dones := range g.inflight {
		all = append(all, dones)
		delete(g.inflight, pid)
	}
	clear(g.proposed)
	for _, dones := range all {
		g.n.complete(dones, ErrNotLeader)
	}
	for _, p := range g.takePending() {
		goDone(p.done, ErrNotLeader)
	}
}

// onSoftState follows leadership changes (loop).
func (g *group) onSoftState(ss *raft.SoftState, term uint64) {
	if old := g.lead.Swap(ss.Lead); old != ss.Lead {
		g.leaderChanges.Add(1)
	}
	g.term.Store(term)
	leading := ss.RaftState == raft.StateLeader
	switch {
	case leading && !g.leading:
		g.leading = true
		last, _ := g.storage.LastIndex()
		g.activateAt = last
		g.activateAfter = time.Time{}
		if now := time.Now(); now.Sub(g.timeoutNowAt) < 2*g.n.electionTimeout() {
			// Elected at once, on the old leader's word: it may have
			// handed out, unflagged, deliveries still on their way.
			g.activateAfter = g.timeoutNowAt.Add(g.n.lease())
		}
		g.n.log.Info().Uint64("group", g.id).Uint64("term", term).Msg("leading group")
	case !leading && g.leading:
		g.leading = false
		g.proposing = false
		g.activating = false
		g.transferring.Store(false)
		g.stopAccepting()
		g.failInflight()
		g.n.log.Info().Uint64("group", g.id).Uint64("term", term).Uint64("leader", ss.Lead).Msg("no longer leading group")
		go g.deactivate()
	}
}

func (g *group) stopAccepting() {
	g.mu.Lock()
	g.accepting = false
	g.mu.Unlock()
	g.isActive.Store(false)
}

// maybeActivate starts the group broker once this new leader has applied
// every entry committed before its term (loop).
func (g *group) maybeActivate() {
	if !g.leading || g.activating || g.applied.Load() < g.activateAt || time.Now().Before(g.activateAfter) {
		return
	}
	g.activating = true
	term := g.term.Load()
	go g.activate(term)
}

// activate builds the group broker from the applied state, exactly as a
// broker restarts from its journals, then serves.
func (g *group) activate(term uint64) {
	g.life.Lock()
	defer g.life.Unlock()
	if g.broker != nil {
		g.closeBrokerLocked("re-activation")
	}
	start := time.Now()
	g.mu.Lock()
	g.accepting = true
	g.mu.Unlock()
	cfg := g.n.cfg.Broker
	cfg.Messages = groupJournal{g: g, ns: nsMessages}
	cfg.Bindings = groupJournal{g: g, ns: nsBindings}
	cfg.Large, cfg.Pager, cfg.Cluster = nil, nil, nil
	// Diverts are the access brokers' (core.Session.clusterSendDiverted):
	// applied again here, their copies would be stored in this group
	// whatever their address's group. Virtual topics are the groups':
	// a topic's consumer queues are in its group (Node.groupOf).
	cfg.Diverts = nil
	// A message is handed out once committed, never before: see
	// core.Config.VisibleWhenStored (and completer for the order).
	cfg.VisibleWhenStored = true
	// The node's budget is shared by its groups: every node holds the
	// live messages of every group (their records, and on a group's
	// leader its broker's), so a group given the whole budget would let
	// a node hold Groups times it.
	if cfg.MaxMemory > 0 {
		cfg.MaxMemory = max(cfg.MaxMemory/int64(g.n.cfg.Groups), 1)
	}
	cfg.TemporaryQueueTag = tempTag(g.id)
	cfg.Logger = g.n.log.With().Uint64("group", g.id).Logger()
	g.n.groupEvents(&cfg)
	b, err := core.New(cfg)
	if err != nil {
		g.stopAccepting()
		g.n.log.Error().Err(err).Uint64("group", g.id).Msg("group broker did not start; giving up the leadership")
		g.n.onLoop(func() { g.rn.TransferLeader(0); g.activating = false })
		return
	}
	if g.term.Load() != term || !g.stillLeading() {
		g.stopAccepting()
		b.Close()
		return
	}
	g.broker = b
	g.epoch++
	g.n.groupEventsStarted(g, b)
	g.isActive.Store(true)
	rs := b.Recovered()
	g.n.log.Info().Uint64("group", g.id).Uint64("term", term).Int("queues", rs.Queues).Int("messages", rs.Messages).
		Dur("took", time.Since(start)).Msg("group broker active")
	g.n.groupChanged(g)
}

func (g *group) stillLeading() bool {
	return g.lead.Load() == g.n.cfg.NodeID
}

// deactivate closes the group broker after this node lost the
// leadership: its upstream consumers are told, so that the access
// brokers re-attach to the new leader.
func (g *group) deactivate() {
	g.life.Lock()
	defer g.life.Unlock()
	if g.broker != nil {
		g.closeBrokerLocked("leadership lost")
	}
	g.tx.mu.Lock()
	g.tx.txs = nil
	g.tx.mu.Unlock()
	g.n.groupChanged(g)
}

func (g *group) closeBrokerLocked(why string) {
	b := g.broker
	g.broker = nil
	g.isActive.Store(false)
	g.n.rpc.groupClosed(g.id, why)
	b.Close()
}

// activeBroker returns the group broker if this node serves the group.
func (g *group) activeBroker() (*core.Broker, uint64) {
	g.life.Lock()
	defer g.life.Unlock()
	return g.broker, g.epoch
}

// applyConfChange applies a membership change (loop).
func (g *group) applyConfChange(e *pb.Entry) error {
	var cc pb.ConfChangeI
	if e.GetType() == pb.EntryConfChange {
		var c pb.ConfChange
		if err := unmarshal(e.GetData(), &c); err != nil {
			return fmt.Errorf("group %d conf change %d: %w", g.id, e.GetIndex(), err)
		}
		cc = &c
	} else {
		var c pb.ConfChangeV2
		if err := unmarshal(e.GetData(), &c); err != nil {
			return fmt.Errorf("group %d conf change %d: %w", g.id, e.GetIndex(), err)
		}
		cc = &c
	}
	g.confState = g.rn.ApplyConfChange(cc)
	for _, ch := range cc.AsV2().GetChanges() {
		id := ch.GetNodeId()
		switch ch.GetType() {
		case pb.ConfChangeAddNode, pb.ConfChangeAddLearnerNode:
			if ctx := cc.AsV2().GetContext(); len(ctx) > 0 {
				g.n.learnPeer(id, string(ctx))
			}
		case pb.ConfChangeRemoveNode:
			g.n.forgetPeerIfGone(id)
		}
	}
	return nil
}

var errStopped = errors.New("cluster: node stopped")
