package raftlog

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/junctionmq/junction/persistence/fs"
)

// The crash tests drive a Log with random raft-like operations over
// several groups on a crashable MemFS, take a power-loss image at one
// file-system operation (all of them, one run each), reopen the image and
// check it against a model of what each returned operation made durable.

type mEntry struct {
	term uint64
	data string
	typ  pb.EntryType
}

type mSnap struct {
	index, term uint64
	voters      string
	data        string
}

// mGroup is the model of one group: what its Storage must answer.
type mGroup struct {
	base         entryRef
	ents         []mEntry
	term, vote   uint64
	commit       uint64
	syncedCommit uint64 // commit as of the last synced write: the least a crash may leave
	snap         mSnap
}

func (g *mGroup) last() uint64 { return g.base.index + uint64(len(g.ents)) }

func (g *mGroup) termAt(i uint64) uint64 {
	if i == g.base.index {
		return g.base.term
	}
	return g.ents[i-g.base.index-1].term
}

func (g mGroup) clone() *mGroup {
	g.ents = slices.Clone(g.ents)
	return &g
}

type model map[uint64]*mGroup

func (m model) clone() model {
	c := model{}
	for k, g := range m {
		c[k] = g.clone()
	}
	return c
}

// crashOp is one operation of the workload and what it did to the model.
type crashOp struct {
	desc string
	ok   bool  // returned nil before the crash image was taken
	pre  model // state before
	post model // state after (as the model expects)
	// For a Save: per group, the index of its first new entry and the new
	// entries, and whether it installed a snapshot (a torn Save may leave
	// any prefix of them).
	newEnts map[uint64][]mEntry
	from    map[uint64]uint64
	install map[uint64]bool
}

const crashGroups = 4

type crashWorkload struct {
	rng     *rand.Rand
	l       *Log
	m       model
	catchUp int
	crashed func() bool
	ops     []*crashOp
}

func (w *crashWorkload) group(g uint64) *mGroup {
	if w.m[g] == nil {
		w.m[g] = &mGroup{}
	}
	return w.m[g]
}

func (w *crashWorkload) markSynced() {
	for _, g := range w.m {
		g.syncedCommit = g.commit
	}
}

func toEntry(i uint64, e mEntry) *pb.Entry {
	var data []byte
	if e.data != "" {
		data = []byte(e.data)
	}
	return mkEnt(i, e.term, data, e.typ.Enum())
}

// saveOp builds a Save for some groups: appends, truncations after a term
// change, commit advances, sometimes a snapshot install.
func (w *crashWorkload) saveOp() *crashOp {
	rng := w.rng
	op := &crashOp{pre: w.m.clone(), newEnts: map[uint64][]mEntry{}, from: map[uint64]uint64{}, install: map[uint64]bool{}}
	var us []Update
	needSync := false
	for g := uint64(1); g <= crashGroups; g++ {
		if rng.IntN(2) == 0 {
			continue
		}
		mg := w.group(g)
		u := Update{Group: g}
		newTerm := mg.term
		switch r := rng.IntN(20); {
		case r == 0: // install a snapshot past the commit index
			idx := max(mg.commit, mg.last()) + 1 + rng.Uint64N(4)
			newTerm++
			snap := mSnap{index: idx, term: newTerm, voters: "1,2,3", data: fmt.Sprintf("installed g%d@%d %s", g, idx, bytes.Repeat([]byte{'s'}, rng.IntN(3000)))}
			u.Snapshot = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(idx), Term: new(newTerm), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}, Data: []byte(snap.data)}
			mg.snap, mg.base, mg.ents = snap, entryRef{idx, newTerm}, nil
			mg.commit = idx
			op.install[g] = true
			op.from[g] = idx + 1
			needSync = true
		case r < 5 && mg.last() > mg.commit: // new leader: truncate the uncommitted tail
			newTerm++
			from := mg.commit + 1 + rng.Uint64N(mg.last()-mg.commit)
			op.from[g] = from
			mg.ents = mg.ents[:from-mg.base.index-1]
		case r < 16:
			op.from[g] = mg.last() + 1
		}
		if from, ok := op.from[g]; ok && (r0(rng) || !op.install[g]) {
			n := rng.IntN(7)
			if !op.install[g] {
				n++
			}
			for k := range n {
				e := mEntry{term: newTerm, data: string(randData(rng, 1500)), typ: pb.EntryType(rng.IntN(3))}
				op.newEnts[g] = append(op.newEnts[g], e)
				u.Entries = append(u.Entries, toEntry(from+uint64(k), e))
			}
			mg.ents = append(mg.ents, op.newEnts[g]...)
			needSync = needSync || n > 0
		}
		if newTerm != mg.term {
			mg.term, mg.vote = newTerm, 1+rng.Uint64N(3)
			needSync = true
		}
		if rng.IntN(2) == 0 && mg.last() > mg.commit {
			mg.commit += 1 + rng.Uint64N(mg.last()-mg.commit)
		}
		if op.install[g] || newTerm != op.pre[g].GetTerm() || mg.commit != op.pre[g].GetCommit() || rng.IntN(4) == 0 {
			u.HardState = &pb.HardState{Term: new(mg.term), Vote: new(mg.vote), Commit: new(mg.commit)}
		}
		us = append(us, u)
	}
	op.desc = fmt.Sprintf("save %d groups", len(us))
	err := w.l.Save(us)
	if needSync {
		w.markSynced()
	}
	op.ok = err == nil && !w.crashed()
	op.post = w.m.clone()
	return op
}

func r0(rng *rand.Rand) bool { return rng.IntN(2) == 0 }

func (g *mGroup) GetTerm() uint64 {
	if g == nil {
		return 0
	}
	return g.term
}

func (g *mGroup) GetCommit() uint64 {
	if g == nil {
		return 0
	}
	return g.commit
}

func (w *crashWorkload) snapshotOp() *crashOp {
	rng := w.rng
	g := 1 + rng.Uint64N(crashGroups)
	mg := w.group(g)
	lo := max(mg.snap.index+1, mg.base.index)
	if lo > mg.commit || mg.commit == 0 {
		return nil
	}
	op := &crashOp{pre: w.m.clone()}
	i := lo + rng.Uint64N(mg.commit+1-lo)
	snap := mSnap{index: i, term: mg.termAt(i), voters: "1,2,3", data: fmt.Sprintf("state g%d@%d %s", g, i, bytes.Repeat([]byte{'d'}, rng.IntN(5000)))}
	err := w.l.Storage(g).CreateSnapshot(i, &pb.ConfState{Voters: []uint64{1, 2, 3}}, []byte(snap.data))
	mg.snap = snap
	if k := uint64(w.catchUp); i > k && i-k > mg.base.index {
		c := i - k
		mg.ents = mg.ents[c-mg.base.index:]
		mg.base = entryRef{c, snap.term}
		mg.base.term = op.pre[g].termAt(c)
	}
	w.markSynced()
	op.desc = fmt.Sprintf("snapshot g%d at %d", g, i)
	op.ok = err == nil && !w.crashed()
	op.post = w.m.clone()
	return op
}

func (w *crashWorkload) compactOp() *crashOp {
	g := 1 + w.rng.Uint64N(crashGroups)
	mg := w.group(g)
	if mg.snap.index <= mg.base.index {
		return nil
	}
	op := &crashOp{pre: w.m.clone()}
	i := mg.base.index + 1 + w.rng.Uint64N(mg.snap.index-mg.base.index)
	err := w.l.Storage(g).Compact(i)
	t := mg.termAt(i)
	mg.ents = mg.ents[i-mg.base.index:]
	mg.base = entryRef{i, t}
	w.markSynced()
	op.desc = fmt.Sprintf("compact g%d to %d", g, i)
	op.ok = err == nil && !w.crashed()
	op.post = w.m.clone()
	return op
}

// run performs n operations, stopping after the one during which the
// crash image was taken.
func (w *crashWorkload) run(n int) {
	for len(w.ops) < n {
		var op *crashOp
		switch r := w.rng.IntN(10); {
		case r < 7:
			op = w.saveOp()
		case r < 9:
			op = w.snapshotOp()
		default:
			op = w.compactOp()
		}
		if op == nil {
			continue
		}
		w.ops = append(w.ops, op)
		if !op.ok {
			return
		}
	}
}

// recovered reads a group's state from a reopened Log.
type recState struct {
	base       entryRef
	ents       []mEntry
	term, vote uint64
	commit     uint64
	snap       mSnap
}

func readGroup(t *testing.T, s *Storage) recState {
	var r recState
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	r.base.index = first - 1
	var err error
	if r.base.term, err = s.Term(first - 1); err != nil {
		t.Fatalf("group %d: Term(%d): %v", s.group, first-1, err)
	}
	if last >= first {
		ents, err := s.Entries(first, last+1, 1<<62)
		if err != nil || uint64(len(ents)) != last-first+1 {
			t.Fatalf("group %d: Entries(%d, %d): %d entries, %v", s.group, first, last+1, len(ents), err)
		}
		for k, e := range ents {
			if e.GetIndex() != first+uint64(k) {
				t.Fatalf("group %d: entry %d has index %d", s.group, first+uint64(k), e.GetIndex())
			}
			r.ents = append(r.ents, mEntry{term: e.GetTerm(), data: string(e.GetData()), typ: e.GetType()})
		}
	}
	hs, cs, _ := s.InitialState()
	r.term, r.vote, r.commit = hs.GetTerm(), hs.GetVote(), hs.GetCommit()
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatalf("group %d: Snapshot: %v", s.group, err)
	}
	if md := snap.GetMetadata(); md.GetIndex() != 0 {
		r.snap = mSnap{index: md.GetIndex(), term: md.GetTerm(), voters: votersString(cs.GetVoters()), data: string(snap.GetData())}
	}
	return r
}

func votersString(v []uint64) string {
	var b []byte
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, x, 10)
	}
	return string(b)
}

// logMatches: r's log is exactly the candidate's from r's first index on,
// and starts where the candidate does or (compaction in flight) later.
func logMatches(r recState, base entryRef, ents []mEntry, minBase, maxBase uint64) bool {
	last := base.index + uint64(len(ents))
	rlast := r.base.index + uint64(len(r.ents))
	if rlast != last || r.base.index < minBase || r.base.index > maxBase || r.base.index < base.index {
		return false
	}
	termAt := func(i uint64) uint64 {
		if i == base.index {
			return base.term
		}
		return ents[i-base.index-1].term
	}
	if r.base.term != termAt(r.base.index) {
		return false
	}
	for k, e := range r.ents {
		if e != ents[r.base.index+uint64(k)-base.index] {
			return false
		}
	}
	return true
}

// checkCrash checks a recovered Log against the workload's operations:
// everything up to the last operation that returned is there exactly;
// the operation in flight at the crash left its group before, after or
// (a Save) with a prefix of its entries; nothing else.
func checkCrash(t *testing.T, l *Log, ops []*crashOp) {
	t.Helper()
	var durable model = model{}
	var inflight *crashOp
	for _, op := range ops {
		if op.ok {
			durable = op.post
		} else {
			inflight = op
		}
	}
	groups := map[uint64]bool{}
	for g := range durable {
		groups[g] = true
	}
	if inflight != nil {
		for g := range inflight.post {
			groups[g] = true
		}
	}
	for _, g := range l.Groups() {
		if !groups[g] {
			t.Errorf("group %d recovered but never written", g)
		}
	}
	for g := range groups {
		r := readGroup(t, l.Storage(g))
		pre := durable[g]
		if pre == nil {
			pre = &mGroup{}
		}
		cands := []*mGroup{pre}
		var post *mGroup
		if inflight != nil && inflight.post[g] != nil {
			post = inflight.post[g]
			cands = append(cands, post)
		}
		// Snapshot: before or after the operation in flight.
		okSnap := false
		for _, c := range cands {
			okSnap = okSnap || r.snap == c.snap
		}
		if !okSnap {
			t.Errorf("group %d: snapshot %d/%d %q (%d bytes), want %d/%d", g, r.snap.index, r.snap.term, r.snap.voters, len(r.snap.data), pre.snap.index, pre.snap.term)
		}
		// Hard state: term and vote are synced; the commit index may be
		// as old as the last synced write, and is at least the snapshot.
		okHS := false
		for _, c := range cands {
			lo := max(pre.syncedCommit, r.snap.index)
			hi := max(pre.commit, r.snap.index)
			if post != nil {
				hi = max(hi, post.commit)
			}
			okHS = okHS || (r.term == c.term && r.vote == c.vote && r.commit >= lo && r.commit <= hi)
		}
		if !okHS {
			t.Errorf("group %d: hard state %d/%d/%d, want %d/%d/[%d..%d]", g, r.term, r.vote, r.commit, pre.term, pre.vote, pre.syncedCommit, pre.commit)
		}
		// Log.
		minBase, maxBase := pre.base.index, pre.base.index
		if post != nil {
			minBase, maxBase = min(minBase, post.base.index), max(maxBase, post.base.index)
		}
		okLog := false
		for _, c := range cands {
			okLog = okLog || logMatches(r, c.base, c.ents, minBase, maxBase)
		}
		if from, ok := inflight.fromFor(g); ok && !okLog {
			// A torn Save: the log as truncated (or reset by the
			// snapshot) plus a prefix of the new entries, at least one.
			base, ents := pre.base, pre.ents
			if inflight.install[g] {
				base, ents = post.base, nil
			} else {
				ents = ents[:from-pre.base.index-1]
			}
			news := inflight.newEnts[g]
			for k := 0; k <= len(news) && !okLog; k++ {
				if k == 0 && !inflight.install[g] {
					continue
				}
				okLog = logMatches(r, base, append(slices.Clone(ents), news[:k]...), minBase, maxBase)
			}
		}
		if !okLog {
			t.Errorf("group %d: log base %v, %d entries, want base %v, %d entries (or the in-flight result)", g, r.base, len(r.ents), pre.base, len(pre.ents))
		}
	}
}

func (op *crashOp) fromFor(g uint64) (uint64, bool) {
	if op == nil || op.from == nil {
		return 0, false
	}
	f, ok := op.from[g]
	return f, ok
}

func crashCfg(f fs.FS) Config {
	c := testConfig(f)
	c.CatchUpEntries = 2
	return c
}

const crashOps = 40

// TestCrashAtEveryOperation: for each seed, a power loss at every
// file-system operation of the workload (plain: only synced data
// survives; torn: a random prefix of each file's unsynced writes too).
// By default one seed, each crash point with one kind of image
// (alternately); RAFTLOG_CRASH_SEEDS=n runs n seeds with both kinds at
// every point. -short takes every third point.
func TestCrashAtEveryOperation(t *testing.T) {
	seeds, stride, both := 1, 1, false
	if testing.Short() {
		stride = 3
	}
	if v := os.Getenv("RAFTLOG_CRASH_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		seeds, both = n, true
	}
	start := time.Now()
	runs := 0
	for seed := range uint64(seeds) {
		// Count the file-system operations of a whole run.
		mem := fs.NewCrashableMem()
		l := mustOpen(t, crashCfg(mem))
		w := &crashWorkload{rng: rand.New(rand.NewPCG(seed, 11)), l: l, m: model{}, catchUp: 2, crashed: func() bool { return false }}
		w.run(crashOps)
		st := l.Stats()
		l.Close()
		total := mem.Ops()
		if seed == 0 {
			t.Logf("workload: %d operations, %d file-system operations, %d journal rolls, %d snapshots written", len(w.ops), total, st.Journal.Rolls, st.SnapshotWrites)
			if st.Journal.Rolls == 0 || st.SnapshotWrites == 0 {
				t.Fatalf("workload too small: %+v", st)
			}
		}
		for _, torn := range []bool{false, true} {
			for k := 1; k <= total; k += stride {
				if !both && torn != (k%2 == 1) {
					continue
				}
				mem := fs.NewCrashableMem()
				var rng *rand.Rand
				if torn {
					rng = rand.New(rand.NewPCG(seed, uint64(k)))
				}
				mem.SetCrashPoint(k, rng)
				l := mustOpen(t, crashCfg(mem))
				w := &crashWorkload{rng: rand.New(rand.NewPCG(seed, 11)), l: l, m: model{}, catchUp: 2, crashed: func() bool { return mem.Snapshot() != nil }}
				w.run(crashOps)
				l.Close()
				img := mem.Snapshot()
				if img == nil {
					continue
				}
				runs++
				l2, err := Open(crashCfg(img))
				if err != nil {
					t.Fatalf("seed %d, crash at op %d (torn %v), during %q: Open: %v", seed, k, torn, w.ops[len(w.ops)-1].desc, err)
				}
				checkCrash(t, l2, w.ops)
				if t.Failed() {
					t.Fatalf("seed %d, crash at op %d (torn %v), during %q", seed, k, torn, w.ops[len(w.ops)-1].desc)
				}
				if k%7 == 0 {
					checkUsableAfterCrash(t, l2, img)
				}
				l2.Close()
			}
		}
	}
	t.Logf("%d crash images checked in %v", runs, time.Since(start).Round(time.Millisecond))
}

// checkUsableAfterCrash: the recovered Log takes a new Save that
// survives the next power loss.
func checkUsableAfterCrash(t *testing.T, l *Log, mem *fs.MemFS) {
	t.Helper()
	s := l.Storage(1)
	last, _ := s.LastIndex()
	term, _ := s.Term(last)
	e := mkEnt(last+1, term+1, []byte("after the crash"), nil)
	if err := l.Save([]Update{{Group: 1, Entries: []*pb.Entry{e}, HardState: &pb.HardState{Term: new(term + 1)}}}); err != nil {
		t.Fatalf("Save after recovery: %v", err)
	}
	l2, err := Open(crashCfg(mem.CrashClone()))
	if err != nil {
		t.Fatalf("reopen after a Save on the recovered log: %v", err)
	}
	defer l2.Close()
	got, err := l2.Storage(1).Entries(last+1, last+2, 1<<20)
	if err != nil || string(got[0].GetData()) != "after the crash" {
		t.Fatalf("entry saved after recovery: %v %v", got, err)
	}
}

// diffRange returns the first and last+1 byte offsets where the files
// named name differ between a and b (a file missing in a counts as empty).
func diffRange(t *testing.T, a, b *fs.MemFS, name string) (before, after []byte, lo, hi int) {
	t.Helper()
	read := func(m *fs.MemFS) []byte {
		f, err := m.Open(name)
		if err != nil {
			return nil
		}
		defer f.Close()
		size, _ := f.Size()
		buf := make([]byte, size)
		f.ReadAt(buf, 0)
		return buf
	}
	before, after = read(a), read(b)
	n := max(len(before), len(after))
	lo, hi = n, 0
	for i := range n {
		var x, y byte
		if i < len(before) {
			x = before[i]
		}
		if i < len(after) {
			y = after[i]
		}
		if x != y {
			lo, hi = min(lo, i), i+1
		}
	}
	return before, after, lo, hi
}

// cutStep is the distance between the cuts of a torn batch: every record
// boundary (records are 8-byte aligned), or every fifth with -short.
func cutStep() int {
	if testing.Short() {
		return 40
	}
	return 8
}

// settle waits until the journal's preparer has its ready files, so that
// images taken around one operation differ only in what it wrote.
func settle(t *testing.T, l *Log, cfg Config) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().Journal.ReadyFiles < max(cfg.Journal.MinFiles, 1) {
		if time.Now().After(deadline) {
			t.Fatal("the journal prepared no ready file")
		}
		time.Sleep(time.Millisecond)
	}
}

// walDiff returns the one journal file that differs between pre and post
// and the byte range that differs.
func walDiff(t *testing.T, pre, post *fs.MemFS) (name string, before, after []byte, lo, hi int) {
	t.Helper()
	names, _ := post.List(testDir + "/wal")
	for _, n := range names {
		if _, _, l, h := diffRange(t, pre, post, testDir+"/wal/"+n); l < h {
			if name != "" {
				t.Fatalf("two journal files changed: %s and %s", name, n)
			}
			name = testDir + "/wal/" + n
		}
	}
	before, after, lo, hi = diffRange(t, pre, post, name)
	return name, before, after, lo, hi
}

// tornImage is pre with, of the journal file name, the units (of unit
// bytes, from lo) of post for which keep is true, and the files extra of
// post: a power loss in the middle of writing [lo, hi).
func tornImage(t *testing.T, pre, post *fs.MemFS, name string, before, after []byte, lo, hi, unit int, keep func(off int) bool, extra ...string) *fs.MemFS {
	t.Helper()
	img := pre.CrashClone()
	write := func(name string, b []byte) {
		f, err := img.Open(name)
		if err != nil {
			if f, err = img.Create(name); err != nil {
				t.Fatal(err)
			}
		}
		f.WriteAt(b, 0)
		f.Datasync()
		f.Close()
	}
	buf := slices.Clone(before)
	if len(buf) < len(after) {
		buf = append(buf, make([]byte, len(after)-len(buf))...)
	}
	for off := lo / unit * unit; off < hi; off += unit {
		if keep(off) {
			copy(buf[off:], after[off:min(off+unit, len(after))])
		}
	}
	write(name, buf)
	for _, x := range extra {
		_, b, _, _ := diffRange(t, img, post, x)
		write(x, b)
	}
	img.SyncDir(testDir + "/wal")
	img.SyncDir(testDir + "/snap")
	return img.CrashClone()
}

// TestTornTruncationBatch: a Save that truncates a long uncommitted tail
// after a term change is cut at every record boundary, and loses random
// subsets of its sectors. The recovered log is the old one, or the
// truncated one with at least one new entry: never a gap, never an old
// entry past a new one.
func TestTornTruncationBatch(t *testing.T) {
	mem := fs.NewCrashableMem()
	cfg := testConfig(mem)
	l := mustOpen(t, cfg)
	var old []*pb.Entry
	for i := uint64(1); i <= 70; i++ {
		old = append(old, mkEnt(i, 1, []byte(fmt.Sprintf("old %d", i)), nil))
	}
	if err := l.Save([]Update{{Group: 7, Entries: old, HardState: &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(uint64(10))}}}); err != nil {
		t.Fatal(err)
	}
	settle(t, l, cfg)
	pre := mem.CrashClone()
	news := []*pb.Entry{mkEnt(11, 2, []byte("new 11"), nil), mkEnt(12, 2, []byte("new 12"), nil), mkEnt(13, 2, []byte("new 13"), nil)}
	if err := l.Save([]Update{{Group: 7, Entries: news, HardState: &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(3)), Commit: new(uint64(10))}}}); err != nil {
		t.Fatal(err)
	}
	post := mem.CrashClone()
	l.Close()
	name, before, after, lo, hi := walDiff(t, pre, post)
	t.Logf("the truncating batch spans bytes [%d, %d) of %s", lo, hi, name)
	if hi-lo < 4*512 {
		t.Fatalf("batch of %d bytes: want several sectors", hi-lo)
	}
	check := func(desc string, img *fs.MemFS) {
		t.Helper()
		l, err := Open(testConfig(img))
		if err != nil {
			t.Fatalf("%s: Open: %v", desc, err)
		}
		defer l.Close()
		s := l.Storage(7)
		last, _ := s.LastIndex()
		ents, err := s.Entries(1, last+1, 1<<30)
		if err != nil {
			t.Fatalf("%s: Entries: %v", desc, err)
		}
		hs, _, _ := s.InitialState()
		switch {
		case last == 70:
			for k, e := range ents {
				if !bytes.Equal(e.GetData(), old[k].GetData()) {
					t.Fatalf("%s: old log changed at %d: %q", desc, k+1, e.GetData())
				}
			}
		case last >= 11 && last <= 13:
			for k, e := range ents {
				want := old[k]
				if k >= 10 {
					want = news[k-10]
				}
				if !bytes.Equal(e.GetData(), want.GetData()) || e.GetTerm() != want.GetTerm() {
					t.Fatalf("%s: entry %d = %q term %d, want %q", desc, k+1, e.GetData(), e.GetTerm(), want.GetData())
				}
			}
		default:
			t.Fatalf("%s: last index %d", desc, last)
		}
		if hs.GetTerm() == 2 && last != 13 {
			t.Fatalf("%s: hard state of term 2 with last index %d", desc, last)
		}
	}
	for cut := lo; cut < hi; cut += cutStep() {
		check(fmt.Sprintf("cut at %d", cut), tornImage(t, pre, post, name, before, after, lo, hi, 8, func(off int) bool { return off < cut }))
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range 200 {
		check(fmt.Sprintf("random sectors, run %d", i), tornImage(t, pre, post, name, before, after, lo, hi, 512, func(int) bool { return rng.IntN(2) == 0 }))
	}
}

// TestTornCompactionBatch: CreateSnapshot's records (the snapshot record,
// then START and the deletes of the compacted entries, the old START and
// the old snapshot record) are cut at every 8 bytes and lose random
// sectors. The recovered group has the old or the new snapshot, a log
// starting at the old or the new compaction point or between them, and
// every entry above it.
func TestTornCompactionBatch(t *testing.T) {
	mem := fs.NewCrashableMem()
	cfg := testConfig(mem)
	cfg.CatchUpEntries = 10
	// mid is the image when the snapshot record is durable and the
	// compaction batch not yet written: sectors of that batch alone may be
	// lost (the snapshot record's batch was synced before).
	var mu sync.Mutex
	var armed bool
	var mid *fs.MemFS
	cfg.Journal.Events.OnSync = func(int, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if armed {
			mid, armed = mem.CrashClone(), false
		}
	}
	l := mustOpen(t, cfg)
	var ents []*pb.Entry
	for i := uint64(1); i <= 200; i++ {
		ents = append(ents, mkEnt(i, 1+i/50, []byte(fmt.Sprintf("entry %d", i)), nil))
	}
	if err := l.Save([]Update{{Group: 5, Entries: ents, HardState: &pb.HardState{Term: new(uint64(5)), Commit: new(uint64(180))}}}); err != nil {
		t.Fatal(err)
	}
	s := l.Storage(5)
	if err := s.CreateSnapshot(100, &pb.ConfState{Voters: []uint64{1}}, []byte("state at 100")); err != nil {
		t.Fatal(err)
	}
	settle(t, l, cfg)
	pre := mem.CrashClone()
	mu.Lock()
	armed = true
	mu.Unlock()
	if err := s.CreateSnapshot(150, nil, []byte("state at 150")); err != nil {
		t.Fatal(err)
	}
	post := mem.CrashClone()
	l.Close()
	cfg.Journal.Events.OnSync = nil
	mu.Lock()
	defer mu.Unlock()
	name, before, after, lo, hi := walDiff(t, pre, post)
	snapFile := snapFileName(testDir+"/snap", 5, 4, 150)
	check := func(desc string, img *fs.MemFS) {
		t.Helper()
		l, err := Open(cfg.withFS(img))
		if err != nil {
			t.Fatalf("%s: Open: %v", desc, err)
		}
		defer l.Close()
		s := l.Storage(5)
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		snap, err := s.Snapshot()
		if err != nil {
			t.Fatalf("%s: Snapshot: %v", desc, err)
		}
		idx := snap.GetMetadata().GetIndex()
		if (idx != 100 || string(snap.GetData()) != "state at 100") && (idx != 150 || string(snap.GetData()) != "state at 150") {
			t.Fatalf("%s: snapshot %d %q", desc, idx, snap.GetData())
		}
		if first < 91 || first > 141 || first > idx+1 || last != 200 {
			t.Fatalf("%s: log [%d, %d] with snapshot %d", desc, first, last, idx)
		}
		got, err := s.Entries(first, last+1, 1<<30)
		if err != nil {
			t.Fatalf("%s: Entries: %v", desc, err)
		}
		for k, e := range got {
			if !proto.Equal(e, ents[first-1+uint64(k)]) {
				t.Fatalf("%s: entry %d = %v", desc, first+uint64(k), e)
			}
		}
		if tm, err := s.Term(first - 1); err != nil || tm != 1+(first-1)/50 {
			t.Fatalf("%s: term at the compaction point %d: %d %v", desc, first-1, tm, err)
		}
	}
	for cut := lo; cut < hi; cut += cutStep() {
		check(fmt.Sprintf("cut at %d", cut), tornImage(t, pre, post, name, before, after, lo, hi, 8, func(off int) bool { return off < cut }, snapFile))
	}
	name, before, after, lo, hi = walDiff(t, mid, post)
	t.Logf("the compaction batch spans bytes [%d, %d) of %s", lo, hi, name)
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range 200 {
		check(fmt.Sprintf("random sectors, run %d", i), tornImage(t, mid, post, name, before, after, lo, hi, 512, func(int) bool { return rng.IntN(2) == 0 }))
	}
}

// TestTornInstallBatch: a Save installing a snapshot from the leader (its
// file first, then SNAPSHOT, reset START, entries, hard state, deletes of
// the old log) is cut at every record boundary. The group recovers either
// its old log or the snapshot with a prefix of the new entries, never a
// snapshot past its last entry; and a recovered install that lost its
// START keeps its compaction point when a later snapshot replaces it.
func TestTornInstallBatch(t *testing.T) {
	mem := fs.NewCrashableMem()
	cfg := testConfig(mem)
	cfg.CatchUpEntries = 1000 // CreateSnapshot below must not compact
	l := mustOpen(t, cfg)
	var old []*pb.Entry
	for i := uint64(1); i <= 40; i++ {
		old = append(old, mkEnt(i, 1, []byte(fmt.Sprintf("old %d", i)), nil))
	}
	if err := l.Save([]Update{{Group: 2, Entries: old, HardState: &pb.HardState{Term: new(uint64(1)), Commit: new(uint64(5))}}}); err != nil {
		t.Fatal(err)
	}
	settle(t, l, cfg)
	pre := mem.CrashClone()
	snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(60)), Term: new(uint64(3)), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}, Data: []byte("leader state")}
	news := []*pb.Entry{mkEnt(61, 3, []byte("new 61"), nil), mkEnt(62, 3, []byte("new 62"), nil)}
	if err := l.Save([]Update{{Group: 2, Snapshot: snap, Entries: news, HardState: &pb.HardState{Term: new(uint64(3)), Commit: new(uint64(60))}}}); err != nil {
		t.Fatal(err)
	}
	post := mem.CrashClone()
	l.Close()
	name, before, after, lo, hi := walDiff(t, pre, post)
	snapFile := snapFileName(testDir+"/snap", 2, 3, 60)
	installs := 0
	for cut := lo; cut < hi; cut += cutStep() {
		desc := fmt.Sprintf("cut at %d", cut)
		img := tornImage(t, pre, post, name, before, after, lo, hi, 8, func(off int) bool { return off < cut }, snapFile)
		l, err := Open(cfg.withFS(img))
		if err != nil {
			t.Fatalf("%s: Open: %v", desc, err)
		}
		s := l.Storage(2)
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		sn, err := s.Snapshot()
		if err != nil {
			t.Fatalf("%s: Snapshot: %v", desc, err)
		}
		switch idx := sn.GetMetadata().GetIndex(); {
		case idx == 0 && first == 1 && last == 40:
			l.Close()
			continue
		case idx != 60 || first != 61 || last < 60 || last > 62 || string(sn.GetData()) != "leader state":
			t.Fatalf("%s: snapshot %d, log [%d, %d]", desc, idx, first, last)
		}
		installs++
		// Extend the log, commit it, and replace the installed snapshot
		// without compacting: the compaction point must survive a reopen.
		var more []*pb.Entry
		for i := last + 1; i <= 70; i++ {
			more = append(more, mkEnt(i, 3, []byte("more"), nil))
		}
		if err := l.Save([]Update{{Group: 2, Entries: more, HardState: &pb.HardState{Term: new(uint64(3)), Commit: new(uint64(70))}}}); err != nil {
			t.Fatalf("%s: Save: %v", desc, err)
		}
		if err := s.CreateSnapshot(65, nil, []byte("state at 65")); err != nil {
			t.Fatalf("%s: CreateSnapshot: %v", desc, err)
		}
		img2 := img.CrashClone()
		l.Close()
		l2, err := Open(cfg.withFS(img2))
		if err != nil {
			t.Fatalf("%s, then a snapshot: Open: %v", desc, err)
		}
		s2 := l2.Storage(2)
		first, _ = s2.FirstIndex()
		last, _ = s2.LastIndex()
		if tm, err := s2.Term(60); first != 61 || last != 70 || tm != 3 || err != nil {
			t.Fatalf("%s, then a snapshot: log [%d, %d], term(60) %d %v", desc, first, last, tm, err)
		}
		l2.Close()
	}
	if installs == 0 {
		t.Fatal("no cut recovered the install")
	}
}
