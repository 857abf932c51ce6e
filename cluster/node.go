package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/raft/v3"

	"github.com/junctionmq/junction/cluster/raftlog"
	"github.com/junctionmq/junction/cluster/transport"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/persistence/fs"
)

// Config configures a Node. Zero values take the documented defaults.
type Config struct {
	// NodeID is this node's id in the cluster (not zero, never reused).
	NodeID uint64
	// Listen is where other nodes reach this one (host:port).
	Listen string
	// Listener, when set, is used instead of listening on Listen (which
	// is still the address other nodes are told).
	Listener net.Listener
	// Peers maps every other member's id to its address. At the first
	// start of a new cluster every node must be given the same members.
	Peers map[uint64]string
	// Groups is the number of data groups addresses are spread over
	// (default 8). It is fixed when the cluster is created.
	Groups int
	// Join makes a node with an empty log wait to be added to an
	// existing cluster (`junction cluster add`) instead of founding one
	// with Peers; a node whose data was lost restarts with Join too.
	Join bool
	// TLS secures the links between nodes (mutual TLS against the
	// cluster's CA); nil means plain TCP (tests only).
	TLS *tls.Config
	// Secret is the cluster secret every link proves it knows.
	Secret []byte
	// Dir holds the node's Raft log and snapshots.
	Dir string
	// FS is the file system (nil = the OS's).
	FS fs.FS
	// Tick is the Raft tick (default 100ms); ElectionTicks ticks without
	// a leader start an election (default 10: an election timeout of
	// about 1-2 s), the leader sends a heartbeat every tick.
	Tick          time.Duration
	ElectionTicks int
	// SnapshotEntries: a group takes a snapshot of its state after this
	// many applied entries (default 10000).
	SnapshotEntries uint64
	// SnapshotBytes: a group also takes one once the entries it holds
	// since its last snapshot are larger than this (default 16 MiB) and
	// than its state, so that the log a group keeps in memory stays
	// bounded by its state's size, not by a count of entries of up to
	// MaxMessageBytes each, while a large state is not written again for
	// every few megabytes of log.
	SnapshotBytes int64
	// MaxEntryBytes bounds the operations batched into one entry
	// (default 1 MiB); a single larger operation gets an entry alone, up
	// to the log's limit (raftlog.Config.MaxEntrySize).
	MaxEntryBytes int
	// MaxMessageBytes bounds one message (the log's entry limit is set
	// from it); default 16 MiB.
	MaxMessageBytes int
	// RequestTimeout bounds a forwarded request (default 10 s);
	// LeaderWait how long an operation waits for a group to have a
	// leader (default 3 election timeouts).
	RequestTimeout time.Duration
	LeaderWait     time.Duration
	// Broker is the configuration of every group broker (address and
	// security settings, memory, limits). Its journals, large-message
	// store, pager and cluster are the node's. Its MaxMemory is the
	// node's budget: each group broker gets MaxMemory / Groups of it.
	Broker core.Config
	// Logger receives the node's events.
	Logger zerolog.Logger

	// transport replaces the network in tests.
	transport func(n *Node) (Transport, error)
}

// Transport is what a Node needs of the network (cluster/transport
// implements it).
type Transport interface {
	Send(to uint64, lane transport.Lane, frame []byte) bool
	AddPeer(id uint64, addr string) error
	RemovePeer(id uint64)
	Close() error
}

// maxEntrySize is the largest Raft entry the log takes: one message,
// a batch of operations, and their framing.
func (c *Config) maxEntrySize() int { return c.MaxMessageBytes + c.MaxEntryBytes + 4096 }

// rpcMaxFrame is the largest frame of the forwarding lane: a transaction
// as large as the log takes in one entry, with its framing, so that a
// forwarded one is judged by the leader as a local one is.
func (c *Config) rpcMaxFrame() int { return c.maxEntrySize() + 64<<10 }

func (c *Config) ensureDefaults() error {
	switch {
	case c.NodeID == 0:
		return errors.New("cluster: NodeID is zero")
	case c.Dir == "":
		return errors.New("cluster: no Dir")
	case c.Peers[c.NodeID] != "":
		return fmt.Errorf("cluster: Peers names this node (%d)", c.NodeID)
	}
	if c.Groups <= 0 {
		c.Groups = 8
	}
	if c.Groups > 250 {
		return fmt.Errorf("cluster: %d groups; at most 250", c.Groups)
	}
	if c.Tick <= 0 {
		c.Tick = 100 * time.Millisecond
	}
	if c.ElectionTicks <= 1 {
		c.ElectionTicks = 10
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = 10000
	}
	if c.SnapshotBytes <= 0 {
		c.SnapshotBytes = 16 << 20
	}
	if c.MaxEntryBytes <= 0 {
		c.MaxEntryBytes = 1 << 20
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = 16 << 20
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.LeaderWait <= 0 {
		c.LeaderWait = 3 * time.Duration(c.ElectionTicks) * c.Tick
	}
	if c.FS == nil {
		c.FS = fs.OS()
	}
	return nil
}

// Node is one member of a Junction cluster: the Raft groups it takes
// part in, the group brokers of those it leads, and the access side of
// this node's broker. See the package doc.
type Node struct {
	cfg    Config
	log    zerolog.Logger
	rlog   *raftlog.Log
	tr     Transport     // set once in New, before trSet is closed
	trSet  chan struct{} // closed once tr is set: frames may arrive before
	groups []*group      // index g-1
	links  *links
	rpc    *server
	access *access
	snaps  *snapAssembler
	done   *completer

	peersMu sync.Mutex
	peers   map[uint64]string // every member but this node

	lastTick     atomic.Int64 // unix nanoseconds of the loop's last tick (lease.go)
	stalledUntil atomic.Int64 // unix nanoseconds: no lease before (lease.go)

	heardMu sync.Mutex
	heard   map[uint64]time.Time // guarded by heardMu: the last Raft message from each peer (lease.go)
	reached map[uint64]time.Time // guarded by heardMu: the last frame of any kind from each peer (the fence)

	fence fence // resets client connections that may hold stale deliveries (fence.go)

	params paramsState            // the peers' parameters as judged (params.go)
	outErr atomic.Pointer[string] // why this node serves no client, or "" (params.go)

	// The loop's inputs.
	inMu     sync.Mutex
	inbox    []inbound
	inKick   chan struct{}
	propKick chan struct{}
	ctl      chan func()

	changed chan struct{} // closed and replaced when a group's leader or activity changes
	chMu    sync.Mutex

	noVoteUntil time.Time // a node that lost its log does not vote before (see New)

	failed  chan struct{} // closed when the node stops on a fatal error
	failErr error
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once

	draining  chan struct{} // closed by Drain (or Close): waits for a leader end
	drainOnce sync.Once
}

type inbound struct {
	group uint64
	msg   *raftMessage
}

// New opens the node's log, recovers its groups and starts it: its Raft
// loop, its links to the other members. The access side is ready at
// once; operations wait for their groups to elect leaders.
func New(cfg Config) (*Node, error) {
	if err := cfg.ensureDefaults(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg: cfg, log: cfg.Logger.With().Str("component", "cluster").Uint64("node", cfg.NodeID).Logger(),
		peers:    maps.Clone(cfg.Peers),
		inKick:   make(chan struct{}, 1),
		propKick: make(chan struct{}, 1),
		ctl:      make(chan func(), 16),
		changed:  make(chan struct{}),
		failed:   make(chan struct{}),
		stop:     make(chan struct{}),
		draining: make(chan struct{}),
		trSet:    make(chan struct{}),
	}
	if n.peers == nil {
		n.peers = map[uint64]string{}
	}
	n.params.mine = localParams(&n.cfg)
	rl, err := raftlog.Open(raftlog.Config{Dir: cfg.Dir, FS: cfg.FS, MaxEntrySize: cfg.maxEntrySize(), Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("cluster: opening the raft log: %w", err)
	}
	n.rlog = rl
	// The groups are fixed when the cluster is created: a node that ran
	// with another number would place addresses in other groups than
	// its peers do (a message sent through it unseen by their
	// consumers), and found the groups its log lacks on its own.
	if gs := rl.Groups(); len(gs) > 0 {
		if last := gs[len(gs)-1]; last > uint64(cfg.Groups) || (last < uint64(cfg.Groups) && !cfg.Join) {
			rl.Close()
			return nil, fmt.Errorf("cluster: the log in %s holds groups up to %d, but %d are configured: the number of groups is fixed when the cluster is created", cfg.Dir, last, cfg.Groups)
		}
	}
	n.links = newLinks(n)
	n.rpc = newServer(n)
	n.access = newAccess(n)
	n.snaps = newSnapAssembler()
	n.done = newCompleter()
	empty := true
	for g := uint64(1); g <= uint64(cfg.Groups); g++ {
		grp, fresh, err := n.openGroup(g)
		if err != nil {
			rl.Close()
			return nil, err
		}
		empty = empty && fresh
		n.groups = append(n.groups, grp)
	}
	if empty && cfg.Join && len(n.peers) == 0 {
		// Nothing to learn the members from: its transport would refuse
		// their links (not peers), so that no one could ever add it.
		rl.Close()
		return nil, errors.New("cluster: joining with an empty log needs Peers, the current members: a node accepts links only from its peers")
	}
	if empty && cfg.Join {
		// This node's log is empty and it joins a running cluster: maybe
		// it was a member whose data was lost, which Raft does not allow
		// for (a voter never forgets its log or its vote). Until it has
		// caught up with what its groups had committed when it came back
		// it acts as a learner would (see rejoining), and for four
		// election timeouts it votes for nobody, so that any election it
		// voted in before has ended.
		n.noVoteUntil = time.Now().Add(4 * time.Duration(cfg.ElectionTicks) * cfg.Tick)
		for _, g := range n.groups {
			g.rejoining = true
		}
	}
	newTr := cfg.transport
	if newTr == nil {
		newTr = n.newTransport
	}
	if n.tr, err = newTr(n); err != nil {
		rl.Close()
		return nil, err
	}
	close(n.trSet)
	n.log.Info().Int("groups", cfg.Groups).Int("peers", len(n.peers)).Bool("join", cfg.Join).Msg("cluster node started")
	n.wg.Add(3)
	go n.run()
	go func() { defer n.wg.Done(); n.links.run(n.stop) }()
	go func() { defer n.wg.Done(); n.done.run(n.stop) }()
	n.goWork(n.access.expireCalls)
	n.goWork(n.fenceLoop)
	return n, nil
}

func (n *Node) newTransport(*Node) (Transport, error) {
	return transport.New(transport.Config{
		NodeID: n.cfg.NodeID, Listen: n.cfg.Listen, Listener: n.cfg.Listener, Peers: maps.Clone(n.peers), TLS: n.cfg.TLS, Secret: n.cfg.Secret,
		Handler: n.handleFrame, OnUnreachable: n.onUnreachable, Logger: n.cfg.Logger,
		Params: n.params.mine.encode(), CheckParams: n.checkParams,
		Lanes: [transport.NumLanes]transport.LaneConfig{
			transport.LaneRaft: {MaxFrame: n.cfg.MaxMessageBytes + n.cfg.MaxEntryBytes + 64<<10},
			transport.LaneRPC:  {MaxFrame: n.cfg.rpcMaxFrame(), QueueBytes: 256 << 20},
			transport.LaneBulk: {MaxFrame: snapChunk + 1024},
		},
	})
}

// openGroup recovers group g from the log, or bootstraps it when the log
// has none of it and the node founds the cluster. fresh: the log held
// nothing of the group.
func (n *Node) openGroup(id uint64) (*group, bool, error) {
	st := n.rlog.Storage(id)
	g := &group{n: n, id: id, storage: st, state: newGroupState(), inflight: make(map[uint64][]func(error))}
	snap, err := st.Snapshot()
	if err != nil {
		return nil, false, fmt.Errorf("cluster: group %d snapshot: %w", id, err)
	}
	if md := snap.GetMetadata(); md.GetIndex() > 0 {
		if err := g.state.restore(snap.GetData()); err != nil {
			return nil, false, fmt.Errorf("cluster: group %d snapshot %d: %w", id, md.GetIndex(), err)
		}
		g.state.applied = md.GetIndex()
		g.snapIndex = md.GetIndex()
		g.confState = md.GetConfState()
	}
	last, _ := st.LastIndex()
	hs, _, _ := st.InitialState()
	fresh := last == 0 && hs.GetTerm() == 0
	rc := &raft.Config{
		ID: n.cfg.NodeID, ElectionTick: n.cfg.ElectionTicks, HeartbeatTick: 1, Storage: st,
		Applied:                   g.snapIndex,
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           256,
		MaxInflightBytes:          32 << 20,
		MaxCommittedSizePerReady:  4 << 20,
		MaxUncommittedEntriesSize: 64 << 20,
		CheckQuorum:               true,
		PreVote:                   true,
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    raftLogger{n.log.With().Uint64("group", id).Logger()},
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return nil, false, fmt.Errorf("cluster: group %d: %w", id, err)
	}
	if fresh && !n.cfg.Join {
		peers := []raft.Peer{{ID: n.cfg.NodeID, Context: []byte(n.cfg.Listen)}}
		for id, addr := range n.peers {
			peers = append(peers, raft.Peer{ID: id, Context: []byte(addr)})
		}
		slices.SortFunc(peers, func(a, b raft.Peer) int { return cmpU64(a.ID, b.ID) })
		if err := rn.Bootstrap(peers); err != nil {
			return nil, false, fmt.Errorf("cluster: group %d bootstrap: %w", id, err)
		}
	}
	g.rn = rn
	// The term and commit index the log holds: a follower of a group
	// that stays idle gets no Ready with a HardState to say them (its
	// leader's heartbeats change neither).
	g.term.Store(hs.GetTerm())
	g.commit.Store(hs.GetCommit())
	g.state.mu.Lock()
	g.applied.Store(g.state.applied)
	g.state.mu.Unlock()
	return g, fresh, nil
}

// Close stops the node: its group brokers, its loop and its links, then
// closes its log. Idempotent.
func (n *Node) Close() error {
	var err error
	n.once.Do(func() {
		n.Drain()
		for _, g := range n.groups {
			g.stopAccepting()
			g.deactivate()
		}
		close(n.stop)
		if n.tr != nil {
			n.tr.Close()
		}
		n.wg.Wait()
		for _, g := range n.groups {
			g.failInflight()
		}
		err = n.rlog.Close()
	})
	return err
}

// Drain tells the node that its broker is shutting down, before the
// front-ends drain their connections: from then on an operation that
// would wait for a group to elect a leader fails at once with
// core.ErrUnavailable, and the retries of forwarded requests stop. A
// group that has a leader goes on serving, so work under way finishes;
// one without (the rest of the cluster already gone) would otherwise
// hold each handler for up to LeaderWait per message, and the shutdown
// past any bound (seen in CI: a node still in waitLeader 30 s after
// SIGTERM, its cluster's other nodes stopped first). Close follows.
func (n *Node) Drain() {
	n.drainOnce.Do(func() { close(n.draining) })
}

// Failed is closed when the node stops by itself on a fatal error (its
// log failed): the process should exit.
func (n *Node) Failed() <-chan struct{} { return n.failed }

// Err returns the fatal error after Failed is closed.
func (n *Node) Err() error { return n.failErr }

// fail stops the node on a fatal error (from the loop).
func (n *Node) fail(err error) {
	n.failErr = err
	n.log.Error().Err(err).Msg("cluster node failed: stopping")
	for _, g := range n.groups {
		g.stopAccepting()
		g.failInflight()
		go g.deactivate()
	}
	select {
	case <-n.failed:
	default:
		close(n.failed)
	}
}

// Cluster returns the port for this node's access broker.
func (n *Node) Cluster() core.Cluster { return n.access }

func (n *Node) group(id uint64) *group {
	if id == 0 || id > uint64(len(n.groups)) {
		return nil
	}
	return n.groups[id-1]
}

// groupOf places an address in a group: a temporary queue in the group
// its name says, every other address by the FNV-1a hash of its name.
func (n *Node) groupOf(address string) uint64 {
	if g, ok := tempGroup(address); ok && g <= uint64(n.cfg.Groups) {
		return g
	}
	if topic, ok := core.VirtualTopicOf(address); ok {
		// With its topic, whose group broker copies to it.
		address = topic
	}
	h := fnv.New32a()
	h.Write([]byte(address))
	return 1 + uint64(h.Sum32())%uint64(n.cfg.Groups)
}

// tempTag is the TemporaryQueueTag of group g's broker.
func tempTag(g uint64) string { return "g" + strconv.FormatUint(g, 10) + "." }

func tempGroup(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, core.TemporaryQueuePrefix+"g")
	if !ok {
		return 0, false
	}
	i := strings.IndexByte(rest, '.')
	if i <= 0 {
		return 0, false
	}
	g, err := strconv.ParseUint(rest[:i], 10, 64)
	return g, err == nil && g > 0
}

// groupsFor lists the groups a consumer reads: a wildcard subscription,
// and the dead-letter and expiry addresses (each group keeps its own
// share of them), read every group; anything else its address's group.
func (n *Node) groupsFor(o core.ConsumerOptions) []uint64 {
	name := o.Address
	if o.Queue != "" {
		name = o.Queue
	}
	if isPattern(name) || n.partitioned(name) || (o.Queue != "" && o.SubscriptionName == "" && n.isDurableSubscriptionName(name)) {
		all := make([]uint64, n.cfg.Groups)
		for i := range all {
			all[i] = uint64(i + 1)
		}
		return all
	}
	return []uint64{n.groupOf(name)}
}

// partitioned reports whether address is one that group brokers send to
// themselves (a dead-letter or expiry address), so that every group holds
// some of its messages.
func (n *Node) partitioned(address string) bool {
	s := n.cfg.Broker
	if d := core.DefaultSettings(); address == d.DeadLetterAddress || address == d.ExpiryAddress {
		return true
	}
	for _, as := range s.AddressSettings {
		if (as.DeadLetterAddress != nil && *as.DeadLetterAddress == address) || (as.ExpiryAddress != nil && *as.ExpiryAddress == address) {
			return true
		}
	}
	return false
}

// isDurableSubscriptionName: a queue read by name that no address is
// named after may be a durable subscription, which can have a part in
// every group.
func (n *Node) isDurableSubscriptionName(name string) bool {
	return strings.Contains(name, ".") && !n.addressExists(name)
}

func (n *Node) addressExists(name string) bool {
	_, _, exists := n.access.AddressRoutingTypes(name)
	return exists
}

func isPattern(s string) bool { return strings.ContainsAny(s, "*#>") }

func (n *Node) peerIDs() []uint64 {
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	return slices.Sorted(maps.Keys(n.peers))
}

// learnPeer records a member's address from a membership change. The
// addresses this node was configured with win: a change is re-applied
// at every restart (from the last snapshot on), and the operator may
// have moved a node since.
func (n *Node) learnPeer(id uint64, addr string) {
	if id == n.cfg.NodeID || n.cfg.Peers[id] != "" {
		return
	}
	n.peersMu.Lock()
	old, had := n.peers[id]
	n.peers[id] = addr
	n.peersMu.Unlock()
	if (!had || old != addr) && n.tr != nil {
		if err := n.tr.AddPeer(id, addr); err != nil {
			n.log.Warn().Err(err).Uint64("peer", id).Msg("adding a peer to the transport")
		}
	}
}

// forgetPeerIfGone drops a member no group has any more.
func (n *Node) forgetPeerIfGone(id uint64) {
	n.onLoop(func() {
		for _, g := range n.groups {
			if g.confState != nil && (slices.Contains(g.confState.GetVoters(), id) || slices.Contains(g.confState.GetLearners(), id)) {
				return
			}
		}
		n.peersMu.Lock()
		delete(n.peers, id)
		n.peersMu.Unlock()
		if id != n.cfg.NodeID && n.tr != nil {
			n.tr.RemovePeer(id)
		}
		n.forgetParams(id)
	})
}

// waitLeader returns the leader of group g, waiting up to LeaderWait for
// one (this node counts once its group broker is active).
func (n *Node) waitLeader(ctx context.Context, gid uint64) (uint64, error) {
	g := n.group(gid)
	if g == nil {
		return 0, fmt.Errorf("%w: no group %d", core.ErrUnavailable, gid)
	}
	if out := n.outOfCluster(); out != "" {
		return 0, fmt.Errorf("%w: %w", core.ErrUnavailable, outOfClusterError{out})
	}
	deadline := time.NewTimer(n.cfg.LeaderWait)
	defer deadline.Stop()
	for {
		n.chMu.Lock()
		ch := n.changed
		n.chMu.Unlock()
		lead := g.lead.Load()
		if lead != 0 && (lead != n.cfg.NodeID || g.isActive.Load()) {
			return lead, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			// Unavailable all the same (a caller's deadline of about
			// LeaderWait races the timer): a client is told the group
			// has no leader, never a bare "context deadline exceeded".
			return 0, fmt.Errorf("%w: group %d has no leader (%w)", core.ErrUnavailable, gid, ctx.Err())
		case <-deadline.C:
			return 0, fmt.Errorf("%w: group %d has no leader (waited %v)", core.ErrUnavailable, gid, n.cfg.LeaderWait)
		case <-n.draining:
			return 0, fmt.Errorf("%w: node stopping", core.ErrUnavailable)
		}
	}
}

// groupChanged wakes whoever waits for a group's leader and moves the
// access side's links off a former leader.
func (n *Node) groupChanged(g *group) {
	n.chMu.Lock()
	close(n.changed)
	n.changed = make(chan struct{})
	n.chMu.Unlock()
	if lead := g.lead.Load(); lead != 0 {
		n.access.leaderChanged(g.id, lead)
	}
	n.rpc.activated(g)
}

// resetPeer forgets everything with a peer whose link was reset.
func (n *Node) resetPeer(id uint64) {
	n.links.resets.Add(1)
	n.rpc.originGone(id)
	n.access.peerGone(id)
}

// reply sends an answer to the origin of a request: directly when it is
// this node.
func (n *Node) reply(origin uint64, m *rpcMsg) {
	if origin == n.cfg.NodeID {
		n.handleReply(m)
		return
	}
	n.links.send(origin, m)
}

func (n *Node) replyResult(origin, group, rid uint64, err error, str string, payload []byte) {
	if rid == 0 {
		return
	}
	code, text := errCode(err)
	if code != 0 {
		str = text
	}
	n.reply(origin, &rpcMsg{kind: kResult, group: group, rid: rid, errCode: code, str: str, payload: payload})
}

// handleReply dispatches an answer to this node's access side.
func (n *Node) handleReply(m *rpcMsg) {
	switch m.kind {
	case kResult:
		var err error
		str := m.str
		if m.errCode != 0 {
			err, str = wireError(m.errCode, m.str), ""
		}
		n.access.result(m.rid, err, str, m.payload)
	case kDeliver:
		n.access.deliver(m.cid, m.tag, m.msg, m.count, m.redelivered, m.mark)
	case kSessionLost:
		n.access.sessionLost(m.group, m.sid, m.str)
	case kConsumerLost:
		n.access.consumerLost(m.cid)
	}
}

// handleLocal serves a request of this node's access side on this node.
func (n *Node) handleLocal(m *rpcMsg) {
	self := n.cfg.NodeID
	sv := n.rpc
	done := func(err error) {
		if m.rid != 0 {
			n.replyResult(self, m.group, m.rid, err, "", nil)
		}
	}
	switch m.kind {
	case kOpen:
		sv.open(self, m.group, m.sid, m.open)
	case kCloseSession:
		sv.closeSession(self, m.group, m.sid)
	case kSend:
		if m.rid == 0 {
			sv.send(self, m.group, m.sid, m.msg, nil)
		} else {
			sv.send(self, m.group, m.sid, m.msg, func(err error, full bool) {
				n.replyResult(self, m.group, m.rid, err, sendReply(full), nil)
			})
		}
	case kAttach:
		n.access.mu.Lock()
		p := n.access.parts[m.cid]
		n.access.mu.Unlock()
		var err error
		if p == nil {
			err = fmt.Errorf("%w: consumer gone", core.ErrConsumerClosed)
		} else {
			err = sv.attach(self, m.group, m.sid, m.cid, m.opts, p)
		}
		done(err)
	case kFlow:
		sv.flow(self, m.cid, int(min(m.n, 1<<30)))
	case kDrain:
		sv.drain(self, m.cid)
	case kSettle:
		sv.settle(self, m.cid, m.tag, core.Outcome(m.n))
	case kDetach:
		sv.detach(self, m.cid)
	case kCommit:
		done(sv.commit(context.Background(), self, m.group, m.sid, m.sends, m.acks, m.records))
	case kRecord:
		sv.record(self, m.group, m.sid, m.n, m.str, m.payload, done)
	case kMark:
		sv.mark(self, m.cid, m.tag, uint32(m.n), done)
	case kUnsubscribe:
		done(sv.unsubscribe(self, m.group, m.sid, m.str))
	case kCreateTemp:
		name, err := sv.createTemp(self, m.group, m.sid)
		n.replyResult(self, m.group, m.rid, err, name, nil)
	case kRetain:
		done(sv.retain(m.group, m.msg))
	case kCatalog:
		p, err := sv.catalog(m.group, uint8(m.n), m.str)
		n.replyResult(self, m.group, m.rid, err, "", p)
	case kAdmin:
		p, err := sv.serveAdmin(m.group, uint8(m.n), m.str)
		n.replyResult(self, m.group, m.rid, err, "", p)
	}
}

// handleFrame is the transport's handler.
func (n *Node) handleFrame(from uint64, lane transport.Lane, frame []byte) {
	// The transport starts reading before New has it in n.tr, and
	// handling a frame may send one.
	<-n.trSet
	switch lane {
	case transport.LaneRaft:
		n.receiveRaft(from, frame)
	case transport.LaneBulk:
		n.receiveSnapChunk(from, frame)
	case transport.LaneRPC:
		m, err := decodeRPC(frame)
		if err != nil {
			n.log.Warn().Err(err).Uint64("peer", from).Msg("malformed forwarding frame: resetting the link")
			n.links.send(from, &rpcMsg{kind: kLinkReset})
			n.resetPeer(from)
			return
		}
		if !n.links.receive(from, m) {
			return
		}
		switch m.kind {
		case kResult, kDeliver, kSessionLost, kConsumerLost:
			n.handleReply(m)
		case kPing:
		default:
			n.rpc.handleRemote(from, m)
		}
	}
}

func (n *Node) onUnreachable(to uint64) {
	n.onLoop(func() {
		for _, g := range n.groups {
			g.rn.ReportUnreachable(to)
		}
	})
}

// onLoop runs f on the loop goroutine (without waiting).
func (n *Node) onLoop(f func()) {
	select {
	case n.ctl <- f:
	case <-n.stop:
	}
}

// doLoop runs f on the loop and waits for it.
func (n *Node) doLoop(f func()) error {
	done := make(chan struct{})
	select {
	case n.ctl <- func() { f(); close(done) }:
	case <-n.stop:
		return errStopped
	}
	select {
	case <-done:
		return nil
	case <-n.stop:
		return errStopped
	}
}

// goWork runs f on a goroutine the node waits for on Close; it reports
// false, running nothing, once the node is stopping.
func (n *Node) goWork(f func(stop <-chan struct{})) (started bool) {
	select {
	case <-n.stop:
		return false
	default:
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f(n.stop)
	}()
	return true
}

func (n *Node) kickPropose() {
	select {
	case n.propKick <- struct{}{}:
	default:
	}
}

// complete calls completions off the loop.
func (n *Node) complete(dones []func(error), err error) {
	n.done.add(dones, err)
}
