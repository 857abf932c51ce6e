package raftlog

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/junctionmq/junction/persistence/fs"
	"github.com/junctionmq/junction/persistence/journal"
)

const testDir = "/rl"

// testConfig is small enough that workloads roll, reclaim and compact
// journal files.
func testConfig(f fs.FS) Config {
	return Config{
		Dir: testDir, FS: f, FileSize: 64 << 10, MaxEntrySize: 16 << 10, CatchUpEntries: -1,
		Journal: journal.Config{MinFiles: 1, PoolFiles: 2, CompactMinFiles: 3},
	}
}

func (c Config) withFS(f fs.FS) Config {
	c.FS = f
	return c
}

func mustOpen(t testing.TB, cfg Config) *Log {
	t.Helper()
	l, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func mkEnt(index, term uint64, data []byte, typ *pb.EntryType) *pb.Entry {
	return &pb.Entry{Index: new(index), Term: new(term), Data: data, Type: typ}
}

// randData returns nil, empty or random bytes, so that both proto2
// presence cases of Data are exercised.
func randData(rng *rand.Rand, max int) []byte {
	switch rng.IntN(10) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, rng.IntN(max+1))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func randType(rng *rand.Rand) *pb.EntryType {
	switch rng.IntN(4) {
	case 0:
		return nil
	case 1:
		return pb.EntryConfChange.Enum()
	case 2:
		return pb.EntryConfChangeV2.Enum()
	}
	return pb.EntryNormal.Enum()
}

// errClass maps a Storage error to the raft sentinel it is. raft compares
// them with ==, so a wrapped sentinel is "other".
func errClass(err error) string {
	switch err {
	case nil:
		return "nil"
	case raft.ErrCompacted:
		return "compacted"
	case raft.ErrUnavailable:
		return "unavailable"
	case raft.ErrSnapOutOfDate:
		return "snap-out-of-date"
	}
	return "other: " + err.Error()
}

func normCS(cs *pb.ConfState) *pb.ConfState { return cloneConfState(cs) }

// compareStorage checks that got answers every raft.Storage question as
// want does.
func compareStorage(t testing.TB, want raft.Storage, got *Storage) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("group %d: "+format, append([]any{got.group}, args...)...)
	}
	wf, _ := want.FirstIndex()
	gf, _ := got.FirstIndex()
	wl, _ := want.LastIndex()
	gl, _ := got.LastIndex()
	if wf != gf || wl != gl {
		fail("first/last = %d/%d, want %d/%d", gf, gl, wf, wl)
	}
	whs, wcs, _ := want.InitialState()
	ghs, gcs, _ := got.InitialState()
	if !hardStateEqual(whs, ghs) || !proto.Equal(normCS(wcs), normCS(gcs)) {
		fail("initial state = %v %v, want %v %v", ghs, gcs, whs, wcs)
	}
	for i := wf - min(wf, 2); i <= wl+2; i++ {
		wt, werr := want.Term(i)
		gt, gerr := got.Term(i)
		if wt != gt || errClass(werr) != errClass(gerr) {
			fail("Term(%d) = %d %v, want %d %v", i, gt, gerr, wt, werr)
		}
	}
	for lo := wf - min(wf, 1); lo <= wl+1; lo++ {
		for hi := lo; hi <= wl+1; hi++ {
			for _, maxSize := range []uint64{0, 1, 60, 300, 1000, 1 << 62} {
				we, werr := want.Entries(lo, hi, maxSize)
				ge, gerr := got.Entries(lo, hi, maxSize)
				if errClass(werr) != errClass(gerr) || len(we) != len(ge) {
					fail("Entries(%d, %d, %d) = %d entries %v, want %d %v", lo, hi, maxSize, len(ge), gerr, len(we), werr)
				}
				for k := range we {
					if !proto.Equal(we[k], ge[k]) || proto.Size(we[k]) != proto.Size(ge[k]) {
						fail("Entries(%d, %d, %d)[%d] = %v, want %v", lo, hi, maxSize, k, ge[k], we[k])
					}
				}
				if len(ge) > 0 && cap(ge) != len(ge) {
					fail("Entries(%d, %d, %d) returned an uncapped slice", lo, hi, maxSize)
				}
			}
		}
	}
	ws, werr := want.Snapshot()
	gs, gerr := got.Snapshot()
	if werr != nil || gerr != nil {
		fail("Snapshot: %v, want %v", gerr, werr)
	}
	wm, gm := ws.GetMetadata(), gs.GetMetadata()
	if wm.GetIndex() != gm.GetIndex() || wm.GetTerm() != gm.GetTerm() || !proto.Equal(normCS(wm.GetConfState()), normCS(gm.GetConfState())) || !bytes.Equal(ws.GetData(), gs.GetData()) {
		fail("Snapshot = %d/%d %v (%d bytes), want %d/%d %v (%d bytes)", gm.GetIndex(), gm.GetTerm(), gm.GetConfState(), len(gs.GetData()), wm.GetIndex(), wm.GetTerm(), wm.GetConfState(), len(ws.GetData()))
	}
}

func describe(s raft.Storage) string {
	f, _ := s.FirstIndex()
	l, _ := s.LastIndex()
	hs, _, _ := s.InitialState()
	return fmt.Sprintf("[%d..%d] hs=%v", f, l, hs)
}
