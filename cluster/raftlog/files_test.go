package raftlog

import (
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/junctionmq/junction/persistence/fs"
)

// A log whose files are large keeps few of them: an idle node that
// restarts again and again (each run starts a journal file) reaches a
// bound instead of gaining a file at each restart, all read at Open.
func TestLargeFilesStayFewAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, FS: fs.OS(), MaxEntrySize: 32 << 20, CatchUpEntries: -1}
	if err := cfg.ensureDefaults(); err != nil {
		t.Fatal(err)
	}
	if cfg.FileSize < 64<<20 || cfg.Journal.MinFiles != 1 || cfg.Journal.PoolFiles != 1 || cfg.Journal.CompactMinFiles != 3 {
		t.Fatalf("FileSize %d: MinFiles %d, PoolFiles %d, CompactMinFiles %d; want 1, 1, 3",
			cfg.FileSize, cfg.Journal.MinFiles, cfg.Journal.PoolFiles, cfg.Journal.CompactMinFiles)
	}
	files := func() int {
		names, err := fs.OS().List(dir + "/wal")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, name := range names {
			if strings.HasSuffix(name, ".jnl") {
				n++
			}
		}
		return n
	}
	most := 0
	for run := range 10 {
		l := mustOpen(t, Config{Dir: dir, FS: fs.OS(), MaxEntrySize: 32 << 20, CatchUpEntries: -1})
		hs := &pb.HardState{Term: new(uint64(run + 1)), Vote: new(uint64(1)), Commit: new(uint64(run + 1))}
		ent := mkEnt(uint64(run+1), uint64(run+1), []byte("entry"), nil)
		if err := l.Save([]Update{{Group: 1, HardState: hs, Entries: []*pb.Entry{ent}}}); err != nil {
			t.Fatal(err)
		}
		// The write starts a compaction when 3 sealed files hold next
		// to nothing; it runs in the background, so wait for it (a
		// Close that cut it short would leave its files to the next run).
		deadline := time.Now().Add(60 * time.Second)
		for l.Stats().Journal.DataFiles > 3 {
			if time.Now().After(deadline) {
				t.Fatalf("run %d: %d data files a minute after the write, want at most 3 (3 sealed files compacted)", run, l.Stats().Journal.DataFiles)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		most = max(most, files())
	}
	// At most 3 data files (sealed and active) and a ready one after each
	// run, and the next run's new active file. The journal's defaults
	// would have kept 12 here, one more at each restart.
	if most > 5 {
		t.Fatalf("%d journal files within 10 restarts, want at most 5", most)
	}
}
