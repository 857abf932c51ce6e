package page

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"

	"github.com/junctionmq/junction/persistence/fs"
)

// crashRun is the outcome of a workload run against a MemFS with a crash
// point: what must have survived.
type crashRun struct {
	mu       sync.Mutex
	acks     []ack // completed Syncs, in completion order
	releases []ack // Release calls: floor = index of the first unreleased record
	appended int
}

type ack struct {
	n   int // records covered (acks) or first kept record (releases)
	ops int // mem.Ops() when the Sync completed (acks) or before Release was called
}

// mustHave returns the range [floor, acked) of records that must be
// present after a crash taken right after operation crashAt.
func (r *crashRun) mustHave(crashAt int) (floor, acked int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.acks {
		if a.ops <= crashAt && a.n > acked {
			acked = a.n
		}
	}
	for _, rel := range r.releases {
		if rel.ops < crashAt && rel.n > floor {
			floor = rel.n
		}
	}
	return floor, acked
}

// workload appends records 0..n-1 in small segments, syncing every few
// records (waiting for the Sync), reading and releasing as it goes.
func workload(t *testing.T, mem *fs.MemFS, n int, seed uint64) *crashRun {
	rng := rand.New(rand.NewPCG(seed, 0))
	d := mustDir(t, mem, 700)
	s := mustStore(t, d, "q")
	run := &crashRun{}
	pos, read := s.Start(), 0
	for i := 0; i < n; i++ {
		if err := s.Append(recFor(i)); err != nil {
			t.Fatal(err)
		}
		run.appended = i + 1
		switch rng.IntN(6) {
		case 0:
			covered := i + 1
			if err := syncWait(s); err != nil {
				t.Fatal(err)
			}
			run.mu.Lock()
			run.acks = append(run.acks, ack{covered, mem.Ops()})
			run.mu.Unlock()
		case 1:
			done := make(chan struct{})
			covered := i + 1
			s.Sync(func(err error) { // not waited for: completes later
				if err == nil {
					run.mu.Lock()
					run.acks = append(run.acks, ack{covered, mem.Ops()})
					run.mu.Unlock()
				}
				close(done)
			})
			defer func() { <-done }()
		case 2:
			recs, next, err := s.Read(pos, 1+rng.IntN(5), 0)
			if err != nil {
				t.Fatal(err)
			}
			if read, err = checkRun(recs, read); err != nil {
				t.Fatal(err)
			}
			pos = next
			if rng.IntN(2) == 0 {
				run.mu.Lock()
				run.releases = append(run.releases, ack{read, mem.Ops()})
				run.mu.Unlock()
				if err := s.Release(pos); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	run.mu.Lock()
	run.acks = append(run.acks, ack{n, mem.Ops()})
	run.mu.Unlock()
	return run
}

// checkRecovered opens the crash image and checks that it holds records
// floor..acked-1 (at least), consecutive and intact; then that the store
// keeps working after recovery and a second crash.
func checkRecovered(t *testing.T, img *fs.MemFS, floor, acked int) error {
	d, err := Open(testRoot, img, Options{SegmentSize: 700})
	if err != nil {
		return err
	}
	names, err := d.List()
	if err != nil {
		return err
	}
	if len(names) == 0 {
		if acked > 0 {
			return errors.New("store lost")
		}
		return nil // crashed before the store's creation was durable
	}
	s, err := d.Open("q")
	if err != nil {
		return err
	}
	recs, _, err := readAll(s, s.Start(), 7, 500)
	if err != nil {
		return err
	}
	first, next := 0, 0
	if len(recs) > 0 {
		if first, err = indexOf(recs[0]); err != nil {
			return err
		}
		if next, err = checkRun(recs, first); err != nil {
			return err
		}
	}
	if floor < acked && (len(recs) == 0 || first > floor || next < acked) {
		return fmt.Errorf("recovered [%d,%d), need [%d,%d)", first, next, floor, acked)
	}
	if len(recs) == 0 {
		first, next = 1000000, 1000000
	}
	// Continue, sync, crash again: everything must be there.
	appendN(t, s, next, next+30)
	if err := syncWait(s); err != nil {
		return err
	}
	img2 := img.CrashClone()
	s.Close()
	s, err = mustDir(t, img2, 700).Open("q")
	if err != nil {
		return err
	}
	defer s.Close()
	recs, _, err = readAll(s, s.Start(), 100, 0)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return errors.New("second recovery: empty")
	}
	f, _ := indexOf(recs[0])
	if n2, err := checkRun(recs, f); err != nil || n2 != next+30 || f > first {
		return fmt.Errorf("second recovery: [%d,%d): %v", f, n2, err)
	}
	return nil
}

// TestCrashPoints crashes a workload after every file-system operation
// (CrashClone: only synced state survives) and, with several seeds, with
// torn unsynced writes (CrashCloneTorn).
func TestCrashPoints(t *testing.T) {
	const n = 300
	total := workload(t, fs.NewCrashableMem(), n, 1).acks
	ops := total[len(total)-1].ops
	if testing.Short() {
		ops = min(ops, 200)
	}
	for _, torn := range []bool{false, true} {
		seeds := 1
		if torn {
			seeds = 2
		}
		for crashAt := 1; crashAt <= ops+5; crashAt++ {
			for seed := range seeds {
				mem := fs.NewCrashableMem()
				var rng *rand.Rand
				if torn {
					rng = rand.New(rand.NewPCG(uint64(crashAt), uint64(seed)))
				}
				mem.SetCrashPoint(crashAt, rng)
				run := workload(t, mem, n, 1)
				img := mem.Snapshot()
				if img == nil {
					continue // the workload had fewer ops this time
				}
				floor, acked := run.mustHave(crashAt)
				if err := checkRecovered(t, img, floor, acked); err != nil {
					t.Fatalf("torn %v, crash after op %d, seed %d: %v\n%s", torn, crashAt, seed, err, img)
				}
			}
		}
	}
}

// TestCrashCloneTorn appends and syncs, leaves more records written but
// not synced, and checks that many torn images all recover the synced
// records and a clean prefix of the rest.
func TestCrashCloneTorn(t *testing.T) {
	mem := fs.NewCrashableMem()
	d := mustDir(t, mem, 1<<20)
	s := mustStore(t, d, "q")
	defer s.Close()
	appendN(t, s, 0, 500)
	if err := syncWait(s); err != nil {
		t.Fatal(err)
	}
	for i := 500; i < 2000; i += 50 {
		appendN(t, s, i, i+50)
		if _, _, err := s.Read(s.Start(), 1, 0); err != nil { // flush nothing new
			t.Fatal(err)
		}
		s.mu.Lock()
		s.flushLocked() // a write per batch of 50
		s.mu.Unlock()
	}
	cut := 0
	for seed := range uint64(300) {
		img := mem.CrashCloneTorn(rand.New(rand.NewPCG(seed, 7)))
		sd := mustDir(t, img, 1<<20)
		s2 := mustStore(t, sd, "q")
		recs, _, err := readAll(s2, s2.Start(), 1000, 0)
		if err != nil {
			t.Fatal(seed, err)
		}
		next, err := checkRun(recs, 0)
		if err != nil || next < 500 {
			t.Fatalf("seed %d: recovered %d records: %v", seed, next, err)
		}
		if next < 2000 {
			cut++
		}
		s2.Close()
	}
	if cut == 0 {
		t.Fatal("no image was torn")
	}
}

func TestFaults(t *testing.T) {
	type step func(s *Store) error
	appendMany := func(s *Store) error { // more than one flush
		for i := range 1000 {
			if err := s.Append(recFor(i)); err != nil {
				return err
			}
		}
		return nil
	}
	for _, tc := range []struct {
		name  string
		inj   fs.Injector
		steps []step
	}{
		{"datasync", fs.FailNth(fs.OpDatasync, 1, syscall.EIO), []step{
			func(s *Store) error { return s.Append([]byte("a")) },
			syncWait,
		}},
		{"write at flush", fs.FailNth(fs.OpWrite, 1, syscall.ENOSPC), []step{appendMany}},
		{"write at sync", fs.FailNth(fs.OpWrite, 1, syscall.ENOSPC), []step{
			func(s *Store) error { return s.Append([]byte("a")) },
			syncWait,
		}},
		{"write at read", fs.FailNth(fs.OpWrite, 1, syscall.ENOSPC), []step{
			func(s *Store) error { return s.Append([]byte("a")) },
			func(s *Store) error { _, _, err := s.Read(s.Start(), 1, 0); return err },
		}},
		{"datasync at roll", fs.FailNth(fs.OpDatasync, 1, syscall.EIO), []step{appendMany}},
		{"create at roll", fs.FailNth(fs.OpCreate, 1, syscall.ENOSPC), []step{appendMany}},
		{"syncdir after roll", fs.FailNth(fs.OpSyncDir, 1, syscall.EIO), []step{appendMany, syncWait}},
		{"remove at release", fs.FailNth(fs.OpRemove, 1, syscall.EIO), []step{
			appendMany,
			func(s *Store) error {
				_, end, err := readAll(s, s.Start(), 1000, 0)
				if err != nil {
					return err
				}
				return s.Release(end)
			},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := fs.NewCrashableMem()
			faulty := fs.NewFaulty(mem, nil)
			d := mustDir(t, faulty, 4096)
			s := mustStore(t, d, "q")
			faulty.SetInjector(tc.inj)
			var err error
			for _, st := range tc.steps {
				if err = st(s); err != nil {
					break
				}
			}
			wantErr(t, err, ErrFailed)
			wantErr(t, err, fs.ErrInjected)
			// Sticky: everything fails from now on.
			faulty.SetInjector(nil)
			wantErr(t, s.Append([]byte("b")), ErrFailed)
			wantErr(t, syncWait(s), ErrFailed)
			_, _, rerr := s.Read(s.Start(), 1, 0)
			wantErr(t, rerr, ErrFailed)
			wantErr(t, s.Release(s.Start()), ErrFailed)
			wantErr(t, s.Close(), ErrFailed)
			// What is on disk is intact.
			s = mustStore(t, mustDir(t, mem.CrashClone(), 4096), "q")
			defer s.Close()
			recs, _, err := readAll(s, s.Start(), 100, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) > 0 && string(recs[0]) != "a" {
				if _, err := checkRun(recs, 0); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestSyncErrorConcurrent fails a sync while Syncs and Appends race, and
// checks that every Sync completes and none succeeds after one failed.
func TestSyncErrorConcurrent(t *testing.T) {
	mem := fs.NewCrashableMem()
	faulty := fs.NewFaulty(mem, nil)
	s := mustStore(t, mustDir(t, faulty, 1<<20), "q")
	faulty.SetInjector(fs.FailFromNth(fs.OpDatasync, 5, syscall.EIO))
	var wg sync.WaitGroup
	var mu sync.Mutex
	okAfterFail := false
	failed := false
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				mu.Lock()
				s.Append(recFor(g*1000 + i))
				mu.Unlock()
				ch := make(chan struct{})
				s.Sync(func(err error) { // done calls are serial, in completion order
					mu.Lock()
					if err != nil {
						failed = true
					} else if failed {
						okAfterFail = true
					}
					mu.Unlock()
					close(ch)
				})
				<-ch
			}
		})
	}
	wg.Wait()
	if !failed || okAfterFail {
		t.Fatalf("failed %v, success after failure %v", failed, okAfterFail)
	}
	wantErr(t, s.Close(), ErrFailed)
}
