package raftlog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/junctionmq/junction/persistence/fs"
)

// oracleRun drives a Log and one raft.MemoryStorage per group with the
// same random operations and checks after each that every group's Storage
// answers as its MemoryStorage, also across reopening the Log.
type oracleRun struct {
	t       *testing.T
	rng     *rand.Rand
	cfg     Config
	l       *Log
	oracle  map[uint64]*raft.MemoryStorage
	terms   map[uint64]uint64
	catchUp int
}

const oracleGroups = 3

func (o *oracleRun) ms(g uint64) *raft.MemoryStorage {
	if o.oracle[g] == nil {
		o.oracle[g] = raft.NewMemoryStorage()
	}
	return o.oracle[g]
}

func (o *oracleRun) bounds(g uint64) (first, last, snap uint64) {
	ms := o.ms(g)
	first, _ = ms.FirstIndex()
	last, _ = ms.LastIndex()
	s, _ := ms.Snapshot()
	return first, last, s.GetMetadata().GetIndex()
}

func (o *oracleRun) commit(g uint64) uint64 {
	hs, _, _ := o.ms(g).InitialState()
	return hs.GetCommit()
}

// appendUpdate builds entries for group g starting at a random index in
// [first-2, last+1] (so some are below the compaction point, some
// truncate the tail) and maybe a hard state. Like raft, it never changes
// a committed entry: below the commit index it repeats the log.
func (o *oracleRun) appendUpdate(g uint64) Update {
	rng := o.rng
	first, last, _ := o.bounds(g)
	commit := o.commit(g)
	lo := max(first-min(first, 2), 1)
	start := lo + rng.Uint64N(last+2-lo)
	if rng.IntN(4) == 0 {
		o.terms[g]++
	}
	// Appending cuts the log after the last entry given: reach at least
	// the commit index.
	end := max(start+uint64(rng.IntN(6)), commit)
	var ents []*pb.Entry
	for i := start; i <= end; i++ {
		switch {
		case i < first:
			ents = append(ents, mkEnt(i, 0, []byte("compacted"), nil))
		case i <= min(commit, last):
			e, err := o.ms(g).Entries(i, i+1, 1<<30)
			if err != nil {
				o.t.Fatal(err)
			}
			ents = append(ents, e[0])
		default:
			ents = append(ents, mkEnt(i, o.terms[g], randData(rng, 400), randType(rng)))
		}
	}
	u := Update{Group: g, Entries: ents}
	if rng.IntN(2) == 0 {
		u.HardState = o.randHardState(g, end)
	}
	return u
}

// randHardState: the commit index never goes back, nor below the
// snapshot, nor past last.
func (o *oracleRun) randHardState(g, last uint64) *pb.HardState {
	lo := o.commit(g)
	if lo > last {
		lo = last
	}
	return &pb.HardState{Term: new(o.terms[g]), Vote: new(o.rng.Uint64N(4)), Commit: new(lo + o.rng.Uint64N(last-lo+1))}
}

func (o *oracleRun) applyOracle(u Update) {
	ms := o.ms(u.Group)
	if !raft.IsEmptySnap(u.Snapshot) {
		if err := ms.ApplySnapshot(u.Snapshot); err != nil {
			o.t.Fatal(err)
		}
	}
	if err := ms.Append(u.Entries); err != nil {
		o.t.Fatal(err)
	}
	if u.HardState != nil {
		ms.SetHardState(u.HardState)
	}
}

func (o *oracleRun) save(us ...Update) {
	if err := o.l.Save(us); err != nil {
		o.t.Fatalf("Save: %v", err)
	}
	for _, u := range us {
		o.applyOracle(u)
	}
}

func (o *oracleRun) step() string {
	rng, g := o.rng, 1+o.rng.Uint64N(oracleGroups)
	first, last, snap := o.bounds(g)
	s := o.l.Storage(g)
	switch r := rng.IntN(100); {
	case r < 40:
		u := o.appendUpdate(g)
		o.save(u)
		return fmt.Sprintf("append g%d %d+%d", g, u.Entries[0].GetIndex(), len(u.Entries))
	case r < 50:
		o.save(Update{Group: g, HardState: o.randHardState(g, last)})
		return fmt.Sprintf("hardstate g%d", g)
	case r < 62:
		lo, hi := max(snap+1, first-1), min(last, o.commit(g))
		if lo > hi {
			return "noop"
		}
		i := lo + rng.Uint64N(hi+1-lo)
		var cs *pb.ConfState
		if rng.IntN(3) > 0 {
			cs = &pb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{rng.Uint64N(9) + 4}}
		}
		data := randData(rng, 2000)
		if err := s.CreateSnapshot(i, cs, data); err != nil {
			o.t.Fatalf("CreateSnapshot(%d): %v", i, err)
		}
		ms := o.ms(g)
		if _, err := ms.CreateSnapshot(i, cs, data); err != nil {
			o.t.Fatal(err)
		}
		if o.catchUp >= 0 && i > uint64(o.catchUp) && i-uint64(o.catchUp) >= first {
			if err := ms.Compact(i - uint64(o.catchUp)); err != nil {
				o.t.Fatal(err)
			}
		}
		return fmt.Sprintf("snapshot g%d at %d", g, i)
	case r < 72:
		if snap < first {
			return "noop"
		}
		i := first + rng.Uint64N(snap+1-first)
		if err := s.Compact(i); err != nil {
			o.t.Fatalf("Compact(%d): %v", i, err)
		}
		if err := o.ms(g).Compact(i); err != nil {
			o.t.Fatal(err)
		}
		return fmt.Sprintf("compact g%d to %d", g, i)
	case r < 80:
		idx := max(snap+1, o.commit(g)+1, last+uint64(rng.IntN(6))-min(last, 3)) // raft installs only past its commit index
		o.terms[g] += uint64(rng.IntN(2))
		u := Update{Group: g, Snapshot: &pb.Snapshot{
			Metadata: &pb.SnapshotMetadata{Index: new(idx), Term: new(o.terms[g]), ConfState: &pb.ConfState{Voters: []uint64{1, rng.Uint64N(5) + 2}}},
			Data:     randData(rng, 3000),
		}}
		for i := range uint64(rng.IntN(4)) {
			u.Entries = append(u.Entries, mkEnt(idx+1+i, o.terms[g], randData(rng, 100), nil))
		}
		u.HardState = &pb.HardState{Term: new(o.terms[g]), Commit: new(idx)}
		o.save(u)
		return fmt.Sprintf("install g%d at %d", g, idx)
	case r < 92:
		var us []Update
		for h := uint64(1); h <= oracleGroups; h++ {
			if rng.IntN(3) > 0 {
				us = append(us, o.appendUpdate(h))
			}
		}
		o.save(us...)
		return fmt.Sprintf("multi-group save of %d groups", len(us))
	default:
		if err := o.l.Close(); err != nil {
			o.t.Fatal(err)
		}
		o.l = mustOpen(o.t, o.cfg)
		return "reopen"
	}
}

func TestStorageMatchesMemoryStorage(t *testing.T) {
	steps := 150
	seeds := 6
	if testing.Short() {
		steps, seeds = 80, 3
	}
	for _, tc := range []struct {
		name    string
		catchUp int
		os      bool
	}{
		{"memfs", -1, false},
		{"memfs-catchup", 3, false},
		{"os", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := seeds
			if tc.os {
				n = 2 // real fsyncs are slow
			}
			for seed := range uint64(n) {
				cfg := testConfig(fs.NewCrashableMem())
				if tc.os {
					cfg.FS, cfg.Dir = nil, t.TempDir()
				}
				cfg.CatchUpEntries = tc.catchUp
				o := &oracleRun{t: t, rng: rand.New(rand.NewPCG(seed, 7)), cfg: cfg, oracle: map[uint64]*raft.MemoryStorage{}, terms: map[uint64]uint64{}, catchUp: tc.catchUp}
				o.l = mustOpen(t, cfg)
				var trace []string
				for range steps {
					trace = append(trace, o.step())
					for g := uint64(1); g <= oracleGroups; g++ {
						if t.Failed() {
							break
						}
						compareStorage(&traceTB{t, trace}, o.ms(g), o.l.Storage(g))
					}
				}
				if err := o.l.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// traceTB prints the operations so far when a comparison fails.
type traceTB struct {
	*testing.T
	trace []string
}

func (tb *traceTB) Fatalf(format string, args ...any) {
	tb.T.Helper()
	n := max(0, len(tb.trace)-8)
	tb.T.Fatalf(format+"\nlast operations: %q", append(args, tb.trace[n:])...)
}

func TestSaveRefusesBadInput(t *testing.T) {
	l := mustOpen(t, testConfig(fs.NewCrashableMem()))
	defer l.Close()
	if err := l.Save([]Update{{Group: 1, Entries: []*pb.Entry{mkEnt(1, 1, nil, nil), mkEnt(2, 1, nil, nil)}}}); err != nil {
		t.Fatal(err)
	}
	before := l.Stats().Journal.Appends
	for _, tc := range []struct {
		name string
		us   []Update
		want error
	}{
		{"too large", []Update{{Group: 1, Entries: []*pb.Entry{mkEnt(3, 1, make([]byte, 16<<10+1), nil)}}}, ErrEntryTooLarge},
		{"gap after last", []Update{{Group: 1, Entries: []*pb.Entry{mkEnt(4, 1, nil, nil)}}}, ErrGap},
		{"not consecutive", []Update{{Group: 1, Entries: []*pb.Entry{mkEnt(3, 1, nil, nil), mkEnt(5, 1, nil, nil)}}}, ErrGap},
		{"duplicate group", []Update{{Group: 2, HardState: &pb.HardState{Term: new(uint64(1))}}, {Group: 2, HardState: &pb.HardState{Term: new(uint64(2))}}}, ErrDuplicateGroup},
		// A valid first update does not get written when a later one is bad.
		{"bad after good", []Update{{Group: 3, Entries: []*pb.Entry{mkEnt(1, 1, nil, nil)}}, {Group: 1, Entries: []*pb.Entry{mkEnt(9, 1, nil, nil)}}}, ErrGap},
	} {
		if err := l.Save(tc.us); !errors.Is(err, tc.want) {
			t.Errorf("%s: Save = %v, want %v", tc.name, err, tc.want)
		}
	}
	if got := l.Stats().Journal.Appends; got != before {
		t.Errorf("refused Saves wrote %d records", got-before)
	}
	if last, _ := l.Storage(3).LastIndex(); last != 0 {
		t.Errorf("group 3 last index %d after a refused Save", last)
	}
	s := l.Storage(1)
	if err := s.CreateSnapshot(1, nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSnapshot(1, nil, []byte("x")); !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Errorf("CreateSnapshot at the same index: %v", err)
	}
	if err := s.CreateSnapshot(3, nil, nil); !errors.Is(err, raft.ErrUnavailable) {
		t.Errorf("CreateSnapshot past last: %v", err)
	}
	if err := s.Compact(2); !errors.Is(err, ErrBeyondSnapshot) {
		t.Errorf("Compact beyond the snapshot: %v", err)
	}
	if err := s.Compact(1); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(1); !errors.Is(err, raft.ErrCompacted) {
		t.Errorf("Compact again: %v", err)
	}
	old := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1))}}
	if err := l.Save([]Update{{Group: 1, Snapshot: old}}); !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Errorf("installing an older snapshot: %v", err)
	}
	l.Close()
	if err := l.Save([]Update{{Group: 1, HardState: &pb.HardState{Term: new(uint64(5))}}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Save after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestEntriesNotMutated: a slice raft got from Entries keeps its contents
// when the tail it covers is truncated and rewritten, and appending to it
// does not reach the Storage.
func TestEntriesNotMutated(t *testing.T) {
	l := mustOpen(t, testConfig(fs.NewCrashableMem()))
	defer l.Close()
	var ents []*pb.Entry
	for i := uint64(1); i <= 6; i++ {
		ents = append(ents, mkEnt(i, 1, []byte{byte(i)}, nil))
	}
	if err := l.Save([]Update{{Group: 1, Entries: ents}}); err != nil {
		t.Fatal(err)
	}
	s := l.Storage(1)
	got, err := s.Entries(2, 7, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	snap := make([]*pb.Entry, len(got))
	copy(snap, got)
	_ = append(got, mkEnt(99, 9, nil, nil))
	if err := l.Save([]Update{{Group: 1, Entries: []*pb.Entry{mkEnt(4, 2, []byte("new"), nil), mkEnt(5, 2, nil, nil)}}}); err != nil {
		t.Fatal(err)
	}
	for k := range got {
		if got[k] != snap[k] || !proto.Equal(got[k], ents[k+1]) {
			t.Fatalf("returned slice changed at %d: %v", k, got[k])
		}
	}
	if last, _ := s.LastIndex(); last != 5 {
		t.Fatalf("last index %d, want 5", last)
	}
	if tm, _ := s.Term(4); tm != 2 {
		t.Fatalf("term(4) = %d", tm)
	}
}

// TestMaxEntrySize: an entry of exactly MaxEntrySize fills a journal file
// on its own and survives a reopen; Open refuses a FileSize that could not
// hold one.
func TestMaxEntrySize(t *testing.T) {
	mem := fs.NewCrashableMem()
	cfg := testConfig(mem)
	cfg.MaxEntrySize = int(cfg.FileSize) - entryHeaderSize - journalOverhead
	l := mustOpen(t, cfg)
	var ents []*pb.Entry
	for i := uint64(1); i <= 3; i++ {
		data := make([]byte, cfg.MaxEntrySize)
		data[0], data[len(data)-1] = byte(i), byte(i)
		ents = append(ents, mkEnt(i, 1, data, nil))
	}
	for _, e := range ents {
		if err := l.Save([]Update{{Group: 1, Entries: []*pb.Entry{e}}}); err != nil {
			t.Fatalf("Save of a %d-byte entry: %v", len(e.GetData()), err)
		}
	}
	if st := l.Stats(); st.Journal.Rolls < 2 {
		t.Fatalf("%d rolls: each entry should fill a file", st.Journal.Rolls)
	}
	l.Close()
	l = mustOpen(t, cfg.withFS(mem.CrashClone()))
	defer l.Close()
	got, err := l.Storage(1).Entries(1, 4, 1<<40)
	if err != nil || len(got) != 3 {
		t.Fatalf("Entries: %d, %v", len(got), err)
	}
	for k := range got {
		if !proto.Equal(got[k], ents[k]) {
			t.Fatalf("entry %d differs after reopen", k+1)
		}
	}
	bad := cfg
	bad.MaxEntrySize++
	if _, err := Open(bad.withFS(fs.NewCrashableMem())); err == nil || !strings.Contains(err.Error(), "cannot hold an entry") {
		t.Fatalf("Open with a FileSize too small for MaxEntrySize: %v", err)
	}
	def := Config{Dir: testDir, FS: fs.NewCrashableMem(), MaxEntrySize: 12 << 20}
	if err := def.ensureDefaults(); err != nil || def.FileSize < int64(2*def.MaxEntrySize) {
		t.Fatalf("default FileSize %d for MaxEntrySize %d: %v", def.FileSize, def.MaxEntrySize, err)
	}
}

// TestIOErrorFailsLog: the first I/O error (an fdatasync of the journal,
// or of a snapshot file) fails the Log for good; everything confirmed
// before it is recovered.
func TestIOErrorFailsLog(t *testing.T) {
	for _, tc := range []struct {
		name string
		inj  fs.Injector
	}{
		{"journal fdatasync", fs.FailNth(fs.OpDatasync, 12, syscall.EIO)},
		{"snapshot file fdatasync", fs.FailMatching(func(op fs.Op, name string) bool {
			return op == fs.OpDatasync && strings.HasSuffix(name, tmpSuffix)
		}, syscall.EIO)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := fs.NewCrashableMem()
			faulty := fs.NewFaulty(mem, nil)
			l := mustOpen(t, testConfig(faulty))
			faulty.SetInjector(tc.inj)
			var confirmed uint64
			var firstErr error
			for i := uint64(1); i <= 200 && firstErr == nil; i++ {
				err := l.Save([]Update{{Group: 1, Entries: []*pb.Entry{mkEnt(i, 1, []byte("x"), nil)}, HardState: &pb.HardState{Term: new(uint64(1)), Commit: new(i)}}})
				if err == nil {
					confirmed = i
					if i%5 == 0 {
						err = l.Storage(1).CreateSnapshot(i, nil, []byte("s"))
					}
				}
				firstErr = err
			}
			if !errors.Is(firstErr, ErrFailed) || !errors.Is(firstErr, syscall.EIO) {
				t.Fatalf("first error: %v", firstErr)
			}
			faulty.SetInjector(nil)
			if err := l.Save([]Update{{Group: 2, Entries: []*pb.Entry{mkEnt(1, 1, nil, nil)}}}); !errors.Is(err, ErrFailed) {
				t.Fatalf("Save after the failure: %v", err)
			}
			if err := l.Storage(1).CreateSnapshot(confirmed, nil, nil); !errors.Is(err, ErrFailed) {
				t.Fatalf("CreateSnapshot after the failure: %v", err)
			}
			l.Close()
			l = mustOpen(t, testConfig(mem.CrashClone()))
			defer l.Close()
			if last, _ := l.Storage(1).LastIndex(); last < confirmed {
				t.Fatalf("recovered last index %d, %d confirmed", last, confirmed)
			}
		})
	}
}

// TestCreateSnapshotKeepsCatchUpBytes: the entries kept below a snapshot
// are bounded by their size as well as their number, so that large
// entries do not keep CatchUpEntries of them in memory; BytesAfter counts
// what is held; a reopened log holds the same.
func TestCreateSnapshotKeepsCatchUpBytes(t *testing.T) {
	cfg := testConfig(fs.NewCrashableMem())
	cfg.CatchUpEntries = 10
	data := []byte(strings.Repeat("7", 1000))
	size := uint64(proto.Size(mkEnt(1, 1, data, nil)))
	cfg.CatchUpBytes = int64(3*size + size/2) // three entries and a half: three are kept
	l := mustOpen(t, cfg)
	s := l.Storage(1)
	var ents []*pb.Entry
	for i := uint64(1); i <= 30; i++ {
		ents = append(ents, mkEnt(i, 1, data, nil))
	}
	if err := l.Save([]Update{{Group: 1, Entries: ents}}); err != nil {
		t.Fatal(err)
	}
	if got, want := s.BytesAfter(0), 30*size; got != want {
		t.Fatalf("BytesAfter(0) = %d, want %d", got, want)
	}
	if got, want := s.BytesAfter(25), 5*size; got != want {
		t.Fatalf("BytesAfter(25) = %d, want %d", got, want)
	}
	if got := s.BytesAfter(30); got != 0 {
		t.Fatalf("BytesAfter(30) = %d, want 0", got)
	}
	if err := s.CreateSnapshot(20, &pb.ConfState{Voters: []uint64{1}}, []byte("state")); err != nil {
		t.Fatal(err)
	}
	// Entries 18, 19 and 20 stay below the snapshot (not 11-20, which the
	// count alone allows), and 21-30 above it.
	check := func(s *Storage) {
		t.Helper()
		if first, _ := s.FirstIndex(); first != 18 {
			t.Fatalf("FirstIndex = %d, want 18", first)
		}
		if got, want := s.BytesAfter(0), 13*size; got != want {
			t.Fatalf("BytesAfter(0) after the snapshot = %d, want %d", got, want)
		}
		if got, want := s.BytesAfter(20), 10*size; got != want {
			t.Fatalf("BytesAfter(20) = %d, want %d", got, want)
		}
	}
	check(s)
	// A bound smaller than one entry keeps none below the snapshot.
	l.cfg.CatchUpBytes = int64(size - 1)
	if err := s.CreateSnapshot(25, nil, []byte("state")); err != nil {
		t.Fatal(err)
	}
	if first, _ := s.FirstIndex(); first != 26 {
		t.Fatalf("FirstIndex = %d after a snapshot at 25 with a bound below one entry, want 26", first)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, cfg)
	defer l.Close()
	s = l.Storage(1)
	if first, _ := s.FirstIndex(); first != 26 {
		t.Fatalf("FirstIndex after reopening = %d, want 26", first)
	}
	if got, want := s.BytesAfter(0), 5*size; got != want {
		t.Fatalf("BytesAfter(0) after reopening = %d, want %d", got, want)
	}
}
