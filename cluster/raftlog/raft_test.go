package raftlog

import (
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/junctionmq/junction/persistence/fs"
)

// A test of the Log under real raft: RawNodes of go.etcd.io/raft/v3 in
// classic Ready mode (Save, then send, apply, Advance), one Log per node on
// a crashable MemFS holding several groups, an in-memory message bus, and
// power losses that drop a node's unsynced data at random file-system
// operations (and, now and then, every node's at once). Every entry that
// any node applied (committed, so acknowledged to its proposer) must end up
// applied by every node, at the same index.

var quietRaft = &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}

// stateMachine is a group's applied state: the data of the normal entries
// applied, in order. Its snapshot is the data joined by newlines.
type stateMachine struct {
	applied uint64
	vals    []string
	snapAt  uint64
}

func (sm *stateMachine) encode() []byte { return []byte(strings.Join(sm.vals, "\n")) }

func (sm *stateMachine) restore(s *pb.Snapshot) {
	sm.applied, sm.snapAt, sm.vals = s.GetMetadata().GetIndex(), s.GetMetadata().GetIndex(), nil
	if len(s.GetData()) > 0 {
		sm.vals = strings.Split(string(s.GetData()), "\n")
	}
}

type rnode struct {
	id   uint64
	mem  *fs.MemFS
	log  *Log
	rns  map[uint64]*raft.RawNode
	sms  map[uint64]*stateMachine
	down int // steps until restart; 0 = up
}

type envelope struct {
	group uint64
	from  uint64
	to    uint64
	typ   pb.MessageType
	data  []byte // marshalled in the sender's loop, as raft's doc asks
}

type raftCluster struct {
	t         *testing.T
	rng       *rand.Rand
	groups    []uint64
	voters    []uint64
	catchUp   int
	snapEvery uint64
	nodes     map[uint64]*rnode
	bus       []envelope
	// committed[g][i] is the data of the normal entry applied at index i
	// of group g, by whichever node applied it first: the acknowledged
	// writes. Every later application must agree.
	committed map[uint64]map[uint64]string
	next      int
	crashes   int
	snapsSent int
}

func (c *raftCluster) cfg(n *rnode) Config {
	cfg := testConfig(n.mem)
	cfg.CatchUpEntries = c.catchUp
	return cfg
}

// start opens n's Log (bootstrapping each group with a snapshot holding
// the voters on first start) and builds its RawNodes.
func (c *raftCluster) start(n *rnode) {
	l, err := Open(c.cfg(n))
	if err != nil {
		c.t.Fatalf("node %d: Open: %v", n.id, err)
	}
	n.log, n.rns, n.sms = l, map[uint64]*raft.RawNode{}, map[uint64]*stateMachine{}
	var boot []Update
	for _, g := range c.groups {
		if last, _ := l.Storage(g).LastIndex(); last == 0 {
			boot = append(boot, Update{Group: g, Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)), ConfState: &pb.ConfState{Voters: c.voters}}}})
		}
	}
	if len(boot) > 0 {
		if err := l.Save(boot); err != nil {
			c.t.Fatalf("node %d: bootstrap: %v", n.id, err)
		}
	}
	for _, g := range c.groups {
		s := l.Storage(g)
		snap, err := s.Snapshot()
		if err != nil {
			c.t.Fatalf("node %d group %d: Snapshot: %v", n.id, g, err)
		}
		sm := &stateMachine{}
		sm.restore(snap)
		hs, _, _ := s.InitialState()
		// Applied must not exceed the durable commit index, which may lag
		// (package doc); the snapshot index never does.
		applied := min(sm.applied, hs.GetCommit())
		rn, err := raft.NewRawNode(&raft.Config{
			ID: n.id, ElectionTick: 10, HeartbeatTick: 1, Storage: s, Applied: applied,
			MaxSizePerMsg: 4 << 10, MaxInflightMsgs: 64, CheckQuorum: true, PreVote: true, Logger: quietRaft,
		})
		if err != nil {
			c.t.Fatalf("node %d group %d: NewRawNode: %v", n.id, g, err)
		}
		n.rns[g], n.sms[g] = rn, sm
	}
}

func (c *raftCluster) crashed(n *rnode) bool { return n.mem.Snapshot() != nil }

// crash powers n off: its Log is abandoned and the file system becomes
// the crash image (or, with img nil, what is synced now).
func (c *raftCluster) crash(n *rnode, img *fs.MemFS) {
	if img == nil {
		img = n.mem.Snapshot()
	}
	if img == nil {
		img = n.mem.CrashClone()
	}
	n.log.Close()
	n.mem, n.log, n.rns, n.sms = img, nil, nil, nil
	n.down = 1 + c.rng.IntN(150)
	c.crashes++
}

func (c *raftCluster) apply(n *rnode, g uint64, e *pb.Entry) {
	sm := n.sms[g]
	if e.GetIndex() <= sm.applied {
		return // re-delivered after a restart below the applied index
	}
	if e.GetIndex() != sm.applied+1 {
		c.t.Fatalf("node %d group %d: applies %d after %d", n.id, g, e.GetIndex(), sm.applied)
	}
	sm.applied = e.GetIndex()
	switch e.GetType() {
	case pb.EntryConfChange:
		var cc pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			c.t.Fatal(err)
		}
		n.rns[g].ApplyConfChange(&cc)
		return
	case pb.EntryConfChangeV2:
		c.t.Fatal("unexpected ConfChangeV2")
	}
	if len(e.GetData()) == 0 {
		return
	}
	v := string(e.GetData())
	sm.vals = append(sm.vals, v)
	if c.committed[g] == nil {
		c.committed[g] = map[uint64]string{}
	}
	if prev, ok := c.committed[g][e.GetIndex()]; ok && prev != v {
		c.t.Fatalf("group %d index %d: node %d applied %q, another node applied %q", g, e.GetIndex(), n.id, v, prev)
	}
	c.committed[g][e.GetIndex()] = v
}

// process runs one pass of n's raft loop over all its groups: one Save for
// every Ready, then send, apply, Advance.
func (c *raftCluster) process(n *rnode) {
	var ups []Update
	var gs []uint64
	var rds []raft.Ready
	for _, g := range c.groups {
		if rn := n.rns[g]; rn.HasReady() {
			rd := rn.Ready()
			ups = append(ups, Update{Group: g, HardState: rd.HardState, Entries: rd.Entries, Snapshot: rd.Snapshot})
			gs, rds = append(gs, g), append(rds, rd)
		}
	}
	if len(rds) == 0 {
		return
	}
	err := n.log.Save(ups)
	if c.crashed(n) {
		c.crash(n, nil) // nothing of this pass is sent or applied
		return
	}
	if err != nil {
		c.t.Fatalf("node %d: Save: %v", n.id, err)
	}
	for k, rd := range rds {
		g, rn := gs[k], n.rns[gs[k]]
		for _, m := range rd.Messages {
			data, err := proto.Marshal(m)
			if err != nil {
				c.t.Fatal(err)
			}
			c.bus = append(c.bus, envelope{group: g, from: m.GetFrom(), to: m.GetTo(), typ: m.GetType(), data: data})
		}
		if !raft.IsEmptySnap(rd.Snapshot) {
			n.sms[g].restore(rd.Snapshot)
		}
		for _, e := range rd.CommittedEntries {
			c.apply(n, g, e)
		}
		rn.Advance(rd)
	}
	for _, g := range gs {
		sm := n.sms[g]
		if sm.applied-sm.snapAt < c.snapEvery {
			continue
		}
		err := n.log.Storage(g).CreateSnapshot(sm.applied, nil, sm.encode())
		if c.crashed(n) {
			c.crash(n, nil)
			return
		}
		if err != nil {
			c.t.Fatalf("node %d group %d: CreateSnapshot(%d): %v", n.id, g, sm.applied, err)
		}
		sm.snapAt = sm.applied
	}
}

func (c *raftCluster) deliver(e envelope, drop bool) {
	from, to := c.nodes[e.from], c.nodes[e.to]
	if to.down == 0 && !drop {
		var m pb.Message
		if err := proto.Unmarshal(e.data, &m); err != nil {
			c.t.Fatal(err)
		}
		_ = to.rns[e.group].Step(&m)
	}
	if e.typ == pb.MsgSnap && from.down == 0 {
		c.snapsSent++
		st := raft.SnapshotFinish
		if to.down != 0 || drop {
			st = raft.SnapshotFailure
		}
		from.rns[e.group].ReportSnapshot(e.to, st)
	}
}

func (c *raftCluster) leader(g uint64) *rnode {
	for _, id := range c.voters {
		if n := c.nodes[id]; n.down == 0 && n.rns[g].Status().RaftState == raft.StateLeader {
			return n
		}
	}
	return nil
}

// step is one unit of simulated time. With faults, messages are dropped
// now and then and nodes lose power.
func (c *raftCluster) step(faults bool) {
	c.stepWith(faults, true)
}

func (c *raftCluster) stepWith(faults, propose bool) {
	rng := c.rng
	for _, id := range c.voters {
		n := c.nodes[id]
		if n.down > 0 {
			if n.down--; n.down == 0 {
				c.start(n)
			}
			continue
		}
		if c.crashed(n) { // a background journal operation hit the crash point
			c.crash(n, nil)
			continue
		}
		if rng.IntN(3) == 0 {
			for _, g := range c.groups {
				n.rns[g].Tick()
			}
		}
	}
	if propose && rng.IntN(2) == 0 {
		g := c.groups[rng.IntN(len(c.groups))]
		if l := c.leader(g); l != nil {
			c.next++
			_ = l.rns[g].Propose([]byte(fmt.Sprintf("g%d-v%d", g, c.next)))
		}
	}
	// Deliver a random part of the bus, in order per link.
	var keep []envelope
	blocked := map[[2]uint64]bool{}
	for _, e := range c.bus {
		link := [2]uint64{e.from, e.to}
		if blocked[link] || rng.IntN(4) == 0 {
			blocked[link] = true
			keep = append(keep, e)
			continue
		}
		c.deliver(e, faults && rng.IntN(50) == 0)
	}
	c.bus = keep
	for _, id := range c.voters {
		if n := c.nodes[id]; n.down == 0 {
			c.process(n)
		}
	}
	if !faults {
		return
	}
	switch r := rng.IntN(1000); {
	case r < 25: // arm a power loss within the next file-system operations
		n := c.nodes[c.voters[rng.IntN(len(c.voters))]]
		if n.down == 0 {
			var torn *rand.Rand
			if rng.IntN(2) == 0 {
				torn = rand.New(rand.NewPCG(rng.Uint64(), 1))
			}
			n.mem.SetCrashPoint(n.mem.Ops()+1+rng.IntN(40), torn)
		}
	case r < 28: // every node loses power at once
		for _, id := range c.voters {
			if n := c.nodes[id]; n.down == 0 {
				c.crash(n, n.mem.CrashClone())
			}
		}
	}
}

func (c *raftCluster) converged() bool {
	for _, g := range c.groups {
		l := c.leader(g)
		if l == nil {
			return false
		}
		commit := l.rns[g].Status().GetCommit()
		if last, _ := l.log.Storage(g).LastIndex(); last != commit {
			return false
		}
		for _, id := range c.voters {
			n := c.nodes[id]
			if n.down != 0 || n.sms[g].applied != commit {
				return false
			}
		}
	}
	return true
}

func (c *raftCluster) String() string {
	var b strings.Builder
	for _, id := range c.voters {
		n := c.nodes[id]
		fmt.Fprintf(&b, "node %d down %d:", id, n.down)
		for _, g := range c.groups {
			if n.down == 0 {
				st := n.rns[g].Status()
				last, _ := n.log.Storage(g).LastIndex()
				fmt.Fprintf(&b, " g%d %v term %d commit %d applied %d last %d;", g, st.RaftState, st.GetTerm(), st.GetCommit(), n.sms[g].applied, last)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func newRaftCluster(t *testing.T, seed uint64, voters, groups []uint64) *raftCluster {
	c := &raftCluster{
		t: t, rng: rand.New(rand.NewPCG(seed, 5)), groups: groups, voters: voters, catchUp: 4, snapEvery: 12,
		nodes: map[uint64]*rnode{}, committed: map[uint64]map[uint64]string{},
	}
	for _, id := range voters {
		n := &rnode{id: id, mem: fs.NewCrashableMem()}
		c.nodes[id] = n
		c.start(n)
	}
	return c
}

func (c *raftCluster) close() {
	for _, n := range c.nodes {
		if n.log != nil {
			n.log.Close()
		}
	}
}

// check: once the cluster has converged, every node applied exactly the
// acknowledged (committed) writes of each group, in index order.
func (c *raftCluster) check() {
	for _, g := range c.groups {
		var idx []uint64
		for i := range c.committed[g] {
			idx = append(idx, i)
		}
		slices.Sort(idx)
		want := make([]string, len(idx))
		for k, i := range idx {
			want[k] = c.committed[g][i]
		}
		for _, id := range c.voters {
			got := c.nodes[id].sms[g].vals
			if !slices.Equal(got, want) {
				k := 0
				for k < min(len(got), len(want)) && got[k] == want[k] {
					k++
				}
				c.t.Fatalf("group %d node %d: applied %d values, acknowledged %d; first difference at %d", g, id, len(got), len(want), k)
			}
		}
	}
}

// TestRaftClusterPowerLoss: 3 voters, 2 groups per Log, proposals, message
// loss, single-node and whole-cluster power losses at random file-system
// operations. No write acknowledged (applied anywhere) is ever lost or
// reordered. RAFTLOG_RAFT_SEEDS=n runs n seeds (default 2).
func TestRaftClusterPowerLoss(t *testing.T) {
	seeds, steps := 3, 3000
	if testing.Short() {
		seeds, steps = 1, 800
	}
	if v := os.Getenv("RAFTLOG_RAFT_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		seeds = n
	}
	for seed := range uint64(seeds) {
		c := newRaftCluster(t, seed, []uint64{1, 2, 3}, []uint64{1, 2})
		for range steps {
			c.step(true)
		}
		for i := 0; !c.converged(); i++ {
			if i == 5000 {
				t.Fatalf("seed %d: no convergence after the faults stopped:\n%v", seed, c)
			}
			c.stepWith(false, false)
		}
		c.check()
		acked := len(c.committed[1]) + len(c.committed[2])
		t.Logf("seed %d: %d writes acknowledged, %d power losses, %d snapshots sent", seed, acked, c.crashes, c.snapsSent)
		if acked < steps/15 || c.crashes < steps/150 || c.snapsSent == 0 {
			t.Fatalf("seed %d: too little happened", seed)
		}
		c.close()
	}
}

// TestSingleVoterDurability is the single-member durability trap (etcd
// #14370: a one-node cluster acknowledged a write that a crash then lost,
// because the entry was applied before it was fsynced). A group with one
// voter runs the classic loop (Save, apply, Advance); a power loss is taken
// at every file-system operation of the run, the node restarts from the
// image, and every value it had applied (acknowledged) must be applied
// again, at the same index. Save returning only once durable, and Storage
// holding only durable entries, make this hold: raft v3.7 self-acks a
// leader's entries on Advance (classic mode) or through the
// MsgStorageAppend responses (async mode), so nothing commits before the
// Save that persists it returns.
func TestSingleVoterDurability(t *testing.T) {
	const steps = 120
	run := func(arm func(*fs.MemFS)) (*raftCluster, bool) {
		c := newRaftCluster(t, 9, []uint64{1}, []uint64{1})
		n := c.nodes[1]
		c.snapEvery = 6
		arm(n.mem)
		for range steps {
			c.stepWith(false, true)
			if c.crashes > 0 {
				return c, true
			}
		}
		return c, false
	}
	c, _ := run(func(*fs.MemFS) {})
	total := c.nodes[1].mem.Ops()
	acked := len(c.committed[1])
	c.close()
	if acked < 20 {
		t.Fatalf("only %d writes acknowledged", acked)
	}
	stride := 1
	if testing.Short() {
		stride = 3
	}
	checked := 0
	for k := 1; k <= total; k += stride {
		for _, torn := range []bool{false, true} {
			if torn != (k%2 == 1) && os.Getenv("RAFTLOG_CRASH_SEEDS") == "" {
				continue // one kind of image per point, alternately, unless asked for more
			}
			c, crashed := run(func(m *fs.MemFS) {
				var rng *rand.Rand
				if torn {
					rng = rand.New(rand.NewPCG(uint64(k), 2))
				}
				m.SetCrashPoint(k, rng)
			})
			if !crashed {
				c.close()
				continue
			}
			checked++
			before := len(c.committed[1])
			for i := 0; !c.converged(); i++ {
				if i == 2000 {
					t.Fatalf("crash at op %d: no progress after restart:\n%v", k, c)
				}
				c.stepWith(false, false)
			}
			c.check() // every acknowledged value, applied again in order
			if got := len(c.nodes[1].sms[1].vals); got < before {
				t.Fatalf("crash at op %d: %d values applied after restart, %d acknowledged before", k, got, before)
			}
			c.close()
		}
	}
	t.Logf("%d file-system operations, %d writes acknowledged in a full run, %d crash images checked", total, acked, checked)
}

// TestAdvanceBeforeSaveFailsLoudly shows what the API does to a driver that
// gets the order wrong: Advance before Save lets raft self-ack (and
// commit) entries of a single-voter group that are not durable, which is
// the #14370 trap. Because Storage holds only what Save made durable, raft
// then cannot find the entries it wants to hand out as committed and
// panics ("slice[3,4) out of bound [2,2]"), instead of the application
// acknowledging a write a crash could lose.
func TestAdvanceBeforeSaveFailsLoudly(t *testing.T) {
	l := mustOpen(t, testConfig(fs.NewCrashableMem()))
	defer l.Close()
	boot := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)), ConfState: &pb.ConfState{Voters: []uint64{1}}}}
	if err := l.Save([]Update{{Group: 1, Snapshot: boot}}); err != nil {
		t.Fatal(err)
	}
	rn, err := raft.NewRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: l.Storage(1), Applied: 1, MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 8, Logger: quietRaft})
	if err != nil {
		t.Fatal(err)
	}
	if err := rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	// Become leader the right way.
	for rn.HasReady() {
		rd := rn.Ready()
		if err := l.Save([]Update{{Group: 1, HardState: rd.HardState, Entries: rd.Entries, Snapshot: rd.Snapshot}}); err != nil {
			t.Fatal(err)
		}
		rn.Advance(rd)
	}
	if err := rn.Propose([]byte("acked too early?")); err != nil {
		t.Fatal(err)
	}
	rd := rn.Ready()
	if len(rd.Entries) == 0 || len(rd.CommittedEntries) != 0 {
		t.Fatalf("raft committed before the entries were persisted: %d entries, %d committed", len(rd.Entries), len(rd.CommittedEntries))
	}
	rn.Advance(rd) // wrong: before Save
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("raft did not refuse the undurable entry")
		}
		t.Logf("raft panicked: %v", r)
	}()
	rd = rn.Ready()
	t.Fatalf("raft handed out committed entries %v that are not durable", rd.CommittedEntries)
}

// TestSnapshotFaults: a corrupt snapshot file is reported to raft as
// temporarily unavailable (the bare sentinel raft compares with ==) and
// counted; a snapshot record without its file refuses Open; an orphan
// file (written before its record) is removed at Open.
func TestSnapshotFaults(t *testing.T) {
	mem := fs.NewCrashableMem()
	l := mustOpen(t, testConfig(mem))
	var ents []*pb.Entry
	for i := uint64(1); i <= 5; i++ {
		ents = append(ents, mkEnt(i, 1, []byte("e"), nil))
	}
	if err := l.Save([]Update{{Group: 4, Entries: ents, HardState: &pb.HardState{Term: new(uint64(1)), Commit: new(uint64(5))}}}); err != nil {
		t.Fatal(err)
	}
	s := l.Storage(4)
	data := []byte(strings.Repeat("state ", 100))
	if err := s.CreateSnapshot(4, &pb.ConfState{Voters: []uint64{1}}, data); err != nil {
		t.Fatal(err)
	}
	name := snapFileName(testDir+"/snap", 4, 1, 4)
	r, err := s.OpenSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r); err != nil || string(got) != string(data) || r.Size != int64(len(data)) {
		t.Fatalf("OpenSnapshot read %d bytes, %v", len(got), err)
	}
	r.Close()
	f, _ := mem.Open(name)
	f.WriteAt([]byte("X"), snapFileHeader+10)
	f.Close()
	if _, err := s.Snapshot(); err != raft.ErrSnapshotTemporarilyUnavailable {
		t.Fatalf("Snapshot of a corrupt file: %v", err)
	}
	r, err = s.OpenSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("reading a corrupt snapshot: %v", err)
	}
	r.Close()
	if n := l.Stats().SnapshotReadErrors; n != 1 {
		t.Fatalf("SnapshotReadErrors = %d", n)
	}
	// An orphan, as left by a crash between the file and its record.
	orphan := snapFileName(testDir+"/snap", 4, 1, 5)
	of, _ := mem.Create(orphan + tmpSuffix)
	of.Close()
	of, _ = mem.Create(orphan)
	of.Close()
	mem.SyncDir(testDir + "/snap")
	l.Close()
	l = mustOpen(t, testConfig(mem))
	names, _ := mem.List(testDir + "/snap")
	if len(names) != 1 || testDir+"/snap/"+names[0] != name {
		t.Fatalf("snapshot files after Open: %v", names)
	}
	l.Close()
	mem.Remove(name)
	var ce *CorruptionError
	if _, err := Open(testConfig(mem)); !errors.As(err, &ce) || ce.Group != 4 {
		t.Fatalf("Open without the snapshot file: %v", err)
	}
}
