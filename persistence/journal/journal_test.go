package journal

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/junctionmq/junction/persistence/fs"
)

func TestRecordRoundTrip(t *testing.T) {
	cases := []record{
		{typ: recAdd, utype: 7, lsn: 1, id: 42, payload: []byte("hello")},
		{typ: recUpdate, utype: 0xffff, lsn: 1 << 40, id: 1<<64 - 1, payload: nil},
		{typ: recDeleteTx, lsn: 3, id: 9, txid: 77},
		{typ: recCommit, lsn: 4, txid: 77, payload: commitPayload(2, 2)},
		{typ: recAdd, flags: flagCompacted, lag: 12, lsn: 5, id: 1, txid: 3, payload: make([]byte, 1000)},
		{typ: recSegmentEnd, lsn: 6},
	}
	for _, gen := range []uint64{1, 0xdeadbeefcafebabe} {
		seed := seedOf(gen)
		for i, c := range cases {
			t.Run(fmt.Sprintf("gen%x/%d", gen, i), func(t *testing.T) {
				b := appendRecord(nil, seed, &c)
				if len(b)%recAlign != 0 || len(b) != encodedSize(len(c.payload)) {
					t.Fatalf("size %d", len(b))
				}
				got, n, err := decodeRecord(append(b, make([]byte, 64)...), seed, 1<<20)
				if err != nil || n != len(b) {
					t.Fatalf("decode: %v n=%d", err, n)
				}
				if got.typ != c.typ || got.flags != c.flags || got.utype != c.utype || got.lag != c.lag || got.lsn != c.lsn || got.id != c.id || got.txid != c.txid || string(got.payload) != string(c.payload) {
					t.Fatalf("got %+v want %+v", got, c)
				}
				if _, _, err := decodeRecord(b, seed^1, 1<<20); err == nil {
					t.Fatal("decoded with the wrong generation")
				}
				for bit := 0; bit < len(b)*8; bit += 7 {
					m := append([]byte(nil), b...)
					m[bit/8] ^= 1 << (bit % 8)
					if _, _, err := decodeRecord(m, seed, 1<<20); err == nil {
						t.Fatalf("bit flip %d not detected", bit)
					}
				}
			})
		}
	}
	if _, _, err := decodeRecord(make([]byte, 80), 1, 100); !errors.Is(err, errRecZero) {
		t.Fatalf("zero slot: %v", err)
	}
}

func TestLockAndClose(t *testing.T) {
	mem := fs.NewCrashableMem()
	j := mustOpen(t, testConfig(mem))
	if _, err := Open(testConfig(mem)); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(func(d func(error)) { j.Append(1, 1, nil, true, d) }); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	j = mustOpen(t, testConfig(mem))
	j.Close()
}

func TestRecoveryLiveSet(t *testing.T) {
	mem := fs.NewCrashableMem()
	j := mustOpen(t, testConfig(mem))
	m := newModel()
	for id := uint64(1); id <= 200; id++ {
		p := payloadFor(id, int(id%50))
		if err := waitErr(func(d func(error)) { j.Append(id, uint16(id%3), p, id%2 == 0, d) }); err != nil {
			t.Fatal(err)
		}
		m.live[id] = liveRec{utype: uint16(id % 3), payload: string(p)}
	}
	for id := uint64(1); id <= 200; id += 3 {
		if err := waitErr(func(d func(error)) { j.Delete(id, false, d) }); err != nil {
			t.Fatal(err)
		}
		delete(m.live, id)
	}
	for id := uint64(2); id <= 200; id += 5 {
		if _, ok := m.live[id]; !ok {
			continue
		}
		if err := waitErr(func(d func(error)) { j.Update(id, 9, []byte("u1"), false, d) }); err != nil {
			t.Fatal(err)
		}
		r := m.live[id]
		r.updates = append(r.updates, "9:u1")
		m.live[id] = r
	}
	// Errors for unknown/duplicate ids.
	if err := waitErr(func(d func(error)) { j.Update(1, 1, nil, false, d) }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of deleted: %v", err)
	}
	if err := waitErr(func(d func(error)) { j.Append(2, 1, nil, false, d) }); !errors.Is(err, ErrIDExists) {
		t.Fatalf("dup add: %v", err)
	}
	// Committed tx.
	j.AppendTx(7, 1000, 4, []byte("tx-add"))
	j.UpdateTx(7, 2, 5, []byte("tx-upd"))
	j.DeleteTx(7, 3)
	if err := waitErr(func(d func(error)) { j.Commit(7, d) }); err != nil {
		t.Fatal(err)
	}
	m.live[1000] = liveRec{utype: 4, payload: "tx-add"}
	r := m.live[2]
	r.updates = append(r.updates, "5:tx-upd")
	m.live[2] = r
	delete(m.live, 3)
	// Rolled back and uncommitted txs.
	j.AppendTx(8, 2000, 1, []byte("rolled back"))
	if err := waitErr(func(d func(error)) { j.Rollback(8, d) }); err != nil {
		t.Fatal(err)
	}
	j.AppendTx(9, 3000, 1, []byte("never committed"))
	// A tx that fails its check writes nothing.
	j.AppendTx(10, 4000, 1, []byte("x"))
	j.DeleteTx(10, 1)
	if err := waitErr(func(d func(error)) { j.Commit(10, d) }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bad tx: %v", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = mustOpen(t, testConfig(mem))
	defer j.Close()
	got, order := load(t, j)
	m.check(t, got)
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			t.Fatalf("Load order not by ADD: %v", order[:i+1])
		}
	}
	if j.MaxID() != 1000 { // ids of unwritten txs (3000, 4000) are not seen
		t.Fatalf("MaxID %d", j.MaxID())
	}
	if err := j.Load(func(uint64, uint16, []byte, []Update) error { return nil }); !errors.Is(err, ErrLoaded) {
		t.Fatalf("second Load: %v", err)
	}
}

func TestGroupCommit(t *testing.T) {
	mem := fs.NewCrashableMem()
	var syncs, synced atomic.Int64
	cfg := testConfig(mem)
	cfg.FileSize = 1 << 20
	cfg.Events.OnSync = func(n int, d time.Duration) { syncs.Add(1); synced.Add(int64(n)) }
	j := mustOpen(t, cfg)
	const workers, per = 32, 50
	var wg sync.WaitGroup
	var fails atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				id := uint64(w*per + i + 1)
				if err := waitErr(func(d func(error)) { j.Append(id, 1, payloadFor(id, 100), true, d) }); err != nil {
					fails.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	st := j.Stats()
	j.Close()
	if fails.Load() != 0 {
		t.Fatalf("%d failures", fails.Load())
	}
	if st.Syncs >= workers*per || syncs.Load() == 0 {
		t.Fatalf("syncs %d for %d records: no batching", st.Syncs, workers*per)
	}
	t.Logf("%d records, %d syncs (%.1f records/sync)", workers*per, st.Syncs, float64(synced.Load())/float64(syncs.Load()))
}

func TestRollAndReuse(t *testing.T) {
	mem := fs.NewCrashableMem()
	j := mustOpen(t, testConfig(mem))
	m := newModel()
	maxFiles := 0
	var next uint64 = 1
	window := []uint64{}
	for round := 0; round < 3000; round++ {
		id := next
		next++
		p := payloadFor(id, 200)
		if err := waitErr(func(d func(error)) { j.Append(id, 1, p, round%10 == 0, d) }); err != nil {
			t.Fatal(err)
		}
		m.live[id] = liveRec{utype: 1, payload: string(p)}
		window = append(window, id)
		if len(window) > 20 {
			old := window[0]
			window = window[1:]
			if err := waitErr(func(d func(error)) { j.Delete(old, false, d) }); err != nil {
				t.Fatal(err)
			}
			delete(m.live, old)
		}
		if n := len(mustList(t, mem)); n > maxFiles {
			maxFiles = n
		}
	}
	st := j.Stats()
	if st.Rolls < 5 || st.Reclaimed == 0 {
		t.Fatalf("rolls %d reclaimed %d", st.Rolls, st.Reclaimed)
	}
	if maxFiles > 12 {
		t.Fatalf("file count grew to %d", maxFiles)
	}
	j.Close()
	j = mustOpen(t, testConfig(mem))
	got, _ := load(t, j)
	m.check(t, got)
	j.Close()
	t.Logf("max files %d, stats %+v", maxFiles, st)
}

func mustList(t testing.TB, f fs.FS) []string {
	names, err := f.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestCompaction(t *testing.T) {
	mem := fs.NewCrashableMem()
	j := mustOpen(t, testConfig(mem))
	m := newModel()
	for id := uint64(1); id <= 2000; id++ {
		p := payloadFor(id, 300)
		if err := waitErr(func(d func(error)) { j.Append(id, 1, p, false, d) }); err != nil {
			t.Fatal(err)
		}
		m.live[id] = liveRec{utype: 1, payload: string(p)}
		if id%97 == 0 {
			if err := waitErr(func(d func(error)) { j.Update(id, 2, []byte("upd"), false, d) }); err != nil {
				t.Fatal(err)
			}
			r := m.live[id]
			r.updates = append(r.updates, "2:upd")
			m.live[id] = r
		}
	}
	for id := uint64(1); id <= 2000; id++ {
		if id%50 == 0 || id%97 == 0 {
			continue
		}
		if err := waitErr(func(d func(error)) { j.Delete(id, false, d) }); err != nil {
			t.Fatal(err)
		}
		delete(m.live, id)
	}
	if err := waitErr(j.Sync); err != nil {
		t.Fatal(err)
	}
	before := j.Stats()
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	after := j.Stats()
	t.Logf("before: data %d live %d; after: data %d copied %d", before.DataFiles, before.LiveRecords, after.DataFiles, after.CopiedRecs)
	if after.DataFiles >= before.DataFiles || after.CopiedRecs == 0 {
		t.Fatalf("compaction did not reduce data files: %d -> %d", before.DataFiles, after.DataFiles)
	}
	j.Close()
	j = mustOpen(t, testConfig(mem))
	got, order := load(t, j)
	m.check(t, got)
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			t.Fatalf("order broken after compaction")
		}
	}
	j.Close()
}

// TestAutoCompaction: a few long-lived records pin old files; automatic
// compaction relocates them so the file count stays bounded.
//
// Compaction runs beside the writer, and appends do not wait for it (see
// Compact): the bound holds while compaction keeps up. A loop that never
// waits measures instead how soon the compaction goroutine is scheduled
// (with the compactor's reads slowed to 1 ms the directory reached 25
// files; on two loaded cores in CI it once went past the bound). So after
// each roll the test lets the reclaim pass run, which is where a
// compaction starts (Sync), and waits for the run it started to end
// before going on. The slow compactor shows that the bound no longer
// depends on its speed.
func TestAutoCompaction(t *testing.T) {
	for _, tc := range []struct {
		desc      string
		readDelay time.Duration // on every read: only the compactor reads
	}{
		{"compactor at full speed", 0},
		{"slow compactor", time.Millisecond},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			mem := fs.NewCrashableMem()
			cfg := testConfig(fs.NewFaulty(mem, func(op fs.Op, _ string) error {
				if op == fs.OpRead && tc.readDelay > 0 {
					time.Sleep(tc.readDelay)
				}
				return nil
			}))
			cfg.CompactMinRatio, cfg.CompactMinFiles = 0.3, 4
			var rolled atomic.Bool
			compacted := make(chan struct{}, 1)
			cfg.Events.OnRoll = func(string, string) { rolled.Store(true) }
			cfg.Events.OnCompact = func(int, int, time.Duration) {
				select {
				case compacted <- struct{}{}:
				default:
				}
			}
			j := mustOpen(t, cfg)
			m := newModel()
			maxFiles := 0
			for id := uint64(1); id <= 4000; id++ {
				p := payloadFor(id, 300)
				if err := waitErr(func(d func(error)) { j.Append(id, 1, p, false, d) }); err != nil {
					t.Fatal(err)
				}
				m.live[id] = liveRec{utype: 1, payload: string(p)}
				if old := id - 10; id > 10 && old%100 != 0 {
					if err := waitErr(func(d func(error)) { j.Delete(old, false, d) }); err != nil {
						t.Fatal(err)
					}
					delete(m.live, old)
				}
				maxFiles = max(maxFiles, len(mustList(t, mem)))
				if !rolled.Swap(false) {
					continue
				}
				// The roll's reclaim pass, and the barrier's, have run
				// when Sync completes: a compaction either of them
				// started has set j.compacting. An automatic run clears
				// it before OnCompact, so a run in progress has yet to
				// signal compacted.
				if err := waitErr(j.Sync); err != nil {
					t.Fatal(err)
				}
				for j.compacting.Load() {
					select {
					case <-compacted:
					case <-time.After(10 * time.Second):
						t.Fatal("a compaction run did not end in 10 s")
					}
				}
				maxFiles = max(maxFiles, len(mustList(t, mem)))
			}
			st := j.Stats()
			j.Close()
			t.Logf("compactions %d, max files %d", st.Compactions, maxFiles)
			if st.Compactions == 0 || maxFiles > cfg.CompactMinFiles+cfg.PoolFiles+4 {
				t.Fatalf("compactions %d, max files %d", st.Compactions, maxFiles)
			}
			j = mustOpen(t, testConfig(mem))
			got, _ := load(t, j)
			m.check(t, got)
			j.Close()
		})
	}
}

func TestStatsForMonitoring(t *testing.T) {
	mem := fs.NewCrashableMem()
	cfg := testConfig(mem)
	j := mustOpen(t, cfg)
	defer j.Close()
	for id := uint64(1); id <= 10; id++ {
		if err := waitErr(func(d func(error)) { j.Append(id, 1, payloadFor(id, 100), true, d) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitErr(func(d func(error)) { j.Update(1, 2, []byte("u"), true, d) }); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(func(d func(error)) { j.Delete(2, true, d) }); err != nil {
		t.Fatal(err)
	}
	j.AppendTx(7, 100, 1, []byte("a"))
	j.DeleteTx(7, 3)
	if err := waitErr(func(d func(error)) { j.Commit(7, d) }); err != nil {
		t.Fatal(err)
	}
	j.AppendTx(8, 101, 1, []byte("rolled back"))
	j.Rollback(8, nil)
	st := j.Stats()
	if st.Appends != 14 {
		t.Fatalf("appends %d, want 14", st.Appends)
	}
	if st.Batches == 0 || st.BatchRecords != st.Records || st.BatchRecords < 14 {
		t.Fatalf("batches %d, batch records %d, records %d", st.Batches, st.BatchRecords, st.Records)
	}
	if st.Syncs == 0 || st.SyncSeconds < 0 {
		t.Fatalf("syncs %d, %v s", st.Syncs, st.SyncSeconds)
	}
	if len(st.SyncLatencyBuckets) != len(SyncLatencyBucketBounds) || len(st.SyncLatencyCounts) != len(st.SyncLatencyBuckets) {
		t.Fatalf("histogram %v %v", st.SyncLatencyBuckets, st.SyncLatencyCounts)
	}
	for i := 1; i < len(st.SyncLatencyCounts); i++ {
		if st.SyncLatencyCounts[i] < st.SyncLatencyCounts[i-1] {
			t.Fatalf("counts not cumulative: %v", st.SyncLatencyCounts)
		}
	}
	if last := st.SyncLatencyCounts[len(st.SyncLatencyCounts)-1]; last > st.Syncs || last == 0 {
		t.Fatalf("histogram total %d, syncs %d", last, st.Syncs)
	}
	if st.Files == 0 || st.Bytes != int64(st.Files)*cfg.FileSize {
		t.Fatalf("files %d, bytes %d", st.Files, st.Bytes)
	}
}

// TestUnitAcrossRollKeepsItsFiles: a transaction unit the writer splits
// across a roll. Recovery used to apply it only if it found all its records,
// while reclaim could take either file: the first once everything in it was
// dead (it held only a DELETE_TX), the COMMIT's file while the first still
// held a live ADD_TX of the unit. Either way the committed records were lost
// at the next Open, even after a clean Close. Now the first may go (the
// unit is applied from the COMMIT's file), the COMMIT's file not before it.
func TestUnitAcrossRollKeepsItsFiles(t *testing.T) {
	big := make([]byte, 61000) // two do not fit in one file
	for _, tc := range []struct {
		desc string
		// fill writes the first file up to where the unit's first record
		// fits and its second does not.
		fill func(t *testing.T, j *Journal, m *model)
		tx   func(j *Journal, m *model)
		// after makes the file of the unit's other part reclaimable.
		after []func(j *Journal, m *model, d func(error))
	}{
		{
			"first file holds only a DELETE_TX",
			func(t *testing.T, j *Journal, m *model) { // 479 records of 128 bytes leave 128
				for id := uint64(1); id <= 479; id++ {
					must(t, func(d func(error)) { j.Append(id, 1, payloadFor(id, 88), true, d) })
					m.live[id] = liveRec{utype: 1, payload: string(payloadFor(id, 88))}
				}
			},
			func(j *Journal, m *model) {
				j.DeleteTx(7, 1)
				j.AppendTx(7, 1000, 4, payloadFor(1000, 88))
				delete(m.live, 1)
				m.live[1000] = liveRec{utype: 4, payload: string(payloadFor(1000, 88))}
			},
			func() (ops []func(*Journal, *model, func(error))) { // its deletes land in the second file
				for id := uint64(2); id <= 479; id++ {
					ops = append(ops, func(j *Journal, m *model, d func(error)) { delete(m.live, id); j.Delete(id, id == 479, d) })
				}
				return ops
			}(),
		},
		{
			"COMMIT's file holds nothing live",
			func(t *testing.T, j *Journal, m *model) { // 365 records of 128 bytes and their deletes leave 120
				for id := uint64(1); id <= 365; id++ {
					must(t, func(d func(error)) { j.Append(id, 1, payloadFor(id, 88), true, d) })
					must(t, func(d func(error)) { j.Delete(id, true, d) })
				}
			},
			func(j *Journal, m *model) {
				j.AppendTx(7, 1000, 4, payloadFor(1000, 40))
				j.AppendTx(7, 1001, 4, payloadFor(1001, 40))
				m.live[1000] = liveRec{utype: 4, payload: string(payloadFor(1000, 40))}
			},
			[]func(*Journal, *model, func(error)){ // delete 1001 where it is; roll on
				func(j *Journal, m *model, d func(error)) { j.Delete(1001, false, d) },
				func(j *Journal, m *model, d func(error)) { j.Append(1002, 1, big, false, d) },
				func(j *Journal, m *model, d func(error)) { j.Append(1003, 1, big, false, d) },
				func(j *Journal, m *model, d func(error)) { j.Delete(1002, false, d) },
				func(j *Journal, m *model, d func(error)) { j.Delete(1003, true, d) },
			},
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			mem := fs.NewCrashableMem()
			j := mustOpen(t, testConfig(mem))
			m := newModel()
			tc.fill(t, j, m)
			tc.tx(j, m)
			must(t, func(d func(error)) { j.Commit(7, d) })
			if j.Stats().Rolls != 1 {
				t.Fatalf("setup: %d rolls, want the unit split by one", j.Stats().Rolls)
			}
			for _, op := range tc.after {
				must(t, func(d func(error)) { op(j, m, d) })
			}
			must(t, j.Sync) // runs a reclaim pass
			j.Close()
			img := mem.CrashClone()
			j = mustOpen(t, testConfig(img))
			got, _ := load(t, j)
			m.check(t, got)
			if t.Failed() {
				j.Close()
				return
			}
			// Once the unit is dead everywhere, its files are reused
			// together and nothing comes back.
			for id := range m.live {
				must(t, func(d func(error)) { j.Delete(id, true, d) })
				delete(m.live, id)
			}
			for id := uint64(2000); id < 2003; id++ { // roll past every file of the unit
				must(t, func(d func(error)) { j.Append(id, 1, big, false, d) })
				must(t, func(d func(error)) { j.Delete(id, false, d) })
			}
			must(t, j.Sync)
			st := j.Stats()
			j.Close()
			if st.DataFiles > 2 {
				t.Errorf("%d data files left after everything was deleted (stats %+v)", st.DataFiles, st)
			}
			j = mustOpen(t, testConfig(img.CrashClone()))
			got, _ = load(t, j)
			j.Close()
			m.check(t, got)
		})
	}
}

// must runs op with a done func, waits for it and fails the test on its
// error.
func must(t *testing.T, op func(done func(error))) {
	t.Helper()
	if err := waitErr(op); err != nil {
		t.Fatal(err)
	}
}

// After Fail the journal writes nothing: appends fail with ErrFailed
// wrapping the cause, and Close does not seal the active file.
func TestFailStopsEveryWrite(t *testing.T) {
	mem := fs.NewCrashableMem()
	cfg := testConfig(mem)
	j := mustOpen(t, cfg)
	if err := waitErr(func(d func(error)) { j.Append(1, 1, []byte("before"), true, d) }); err != nil {
		t.Fatal(err)
	}
	// Let the preparer fill the pool, so nothing is still on its way.
	deadline := time.Now().Add(10 * time.Second)
	for j.Stats().ReadyFiles < cfg.MinFiles && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cause := errors.New("the store belongs to another broker now")
	ops := mem.Ops()
	j.Fail(cause)
	err := waitErr(func(d func(error)) { j.Append(2, 1, []byte("after"), true, d) })
	if !errors.Is(err, ErrFailed) || !errors.Is(err, cause) {
		t.Fatalf("append after Fail: %v, want ErrFailed wrapping the cause", err)
	}
	if err := j.Close(); !errors.Is(err, cause) {
		t.Fatalf("Close after Fail: %v", err)
	}
	if got := mem.Ops(); got != ops {
		t.Fatalf("%d file operations after Fail, want none", got-ops)
	}
	j = mustOpen(t, testConfig(mem))
	defer j.Close()
	if live, _ := load(t, j); len(live) != 1 || live[1].payload != "before" {
		t.Fatalf("after reopening: %v", live)
	}
}
