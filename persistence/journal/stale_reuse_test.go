package journal

import (
	"fmt"
	"strings"
	"testing"

	"github.com/junctionmq/junction/persistence/fs"
)

// TestStaleRecordAfterReuse is issue 21's reproduction. Crash 1 keeps page 2
// of the first (unsynced) batch of a fresh file R but not page 1 (unsynced
// pages reach the disk in any order). Recovery finds R's first slot zero and
// takes R for free; it used to activate it with the generation it had, so
// the next run wrote the same LSNs at the same offsets. Crash 2 keeps that
// run's unsynced batch up to the page boundary 8192, where the stale DELETE
// of crash 1 sat with exactly the expected LSN and was accepted: it deleted
// record 480, whose synced append had been confirmed.
func TestStaleRecordAfterReuse(t *testing.T) {
	const psz = 88 // encoded 128 bytes: 32 to a page
	pay := func(tag string, id uint64) []byte {
		p := make([]byte, psz)
		copy(p, fmt.Sprintf("%s-%d", tag, id))
		return p
	}
	mem := fs.NewCrashableMem()
	cfg := testConfig(mem)
	j := mustOpen(t, cfg)
	m := newModel()
	id := uint64(1)
	// Fill the first file with synced records until one more does not fit.
	for {
		j.smu.Lock()
		woff := j.w.active.woff
		j.smu.Unlock()
		if woff+128+recHeaderSize > cfg.FileSize {
			break
		}
		p := pay("t", id)
		if err := waitErr(func(d func(error)) { j.Append(id, 1, p, true, d) }); err != nil {
			t.Fatal(err)
		}
		m.live[id] = liveRec{utype: 1, payload: string(p)}
		id++
	}
	j.smu.Lock()
	tName := j.w.active.name
	j.smu.Unlock()
	first := id // the first id of the batch that lands in R
	// One batch: 32 ADDs fill [4096,8192) of R, DELETE(first) at 8192.
	done := make(chan error, 64)
	for range 32 {
		j.Append(id, 1, pay("old", id), false, func(err error) { done <- err })
		id++
	}
	j.Delete(first, false, func(err error) { done <- err })
	for range 33 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	j.smu.Lock()
	rName, rGen := j.w.active.name, j.w.active.hdr.gen
	j.smu.Unlock()
	if rName == tName {
		t.Fatal("no roll")
	}
	// Crash image 1: R keeps only page 2 of its first batch.
	img := mem.CrashClone()
	page2 := make([]byte, 4096)
	readAt(t, mem, rName, page2, 8192) // before Close seals R after the DELETE
	j.Close()
	writeAt(t, img, rName, make([]byte, 4096), 4096) // page 1 never reached the disk
	writeAt(t, img, rName, page2, 8192)              // page 2 did

	j2 := mustOpen(t, testConfig(img))
	got, _ := load(t, j2)
	m.check(t, got)
	j2.smu.Lock()
	a := j2.w.active
	if a.name == rName && a.hdr.gen == rGen {
		t.Errorf("recovery activated %s with the generation it had before the crash", rName)
	}
	j2.smu.Unlock()
	// A new history; ids continue from MaxID+1, as core's do. B1 is synced:
	// confirmed.
	nid := j2.MaxID() + 1
	if nid != first {
		t.Fatalf("MaxID+1 = %d, want %d", nid, first)
	}
	for range 10 {
		p := pay("new", nid)
		if err := waitErr(func(d func(error)) { j2.Append(nid, 1, p, true, d) }); err != nil {
			t.Fatal(err)
		}
		m.live[nid] = liveRec{utype: 1, payload: string(p)}
		nid++
	}
	j2.smu.Lock()
	b2start, active2 := j2.w.bufOff, j2.w.active.name
	j2.smu.Unlock()
	img2 := img.CrashClone() // B1 is durable
	// B2: unsynced, across 8192.
	for range 31 {
		j2.Append(nid, 1, pay("new2", nid), false, func(err error) { done <- err })
		nid++
	}
	for range 31 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Crash 2: B2 reached the disk up to the page boundary 8192.
	part := make([]byte, 8192-b2start)
	readAt(t, img, active2, part, b2start)
	j2.Close()
	writeAt(t, img2, active2, part, b2start)

	var torn []string
	cfg3 := testConfig(img2)
	cfg3.Events.OnTornTail = func(file string, o, b int64) { torn = append(torn, fmt.Sprintf("%s@%d", file, o)) }
	j3 := mustOpen(t, cfg3)
	got3, _ := load(t, j3)
	j3.Close()
	for cid := first; cid < first+10; cid++ {
		if _, ok := got3[cid]; !ok {
			t.Errorf("confirmed (synced) record %d lost after the second crash", cid)
		}
	}
	for cid, r := range got3 {
		if strings.HasPrefix(r.payload, "old-") {
			t.Errorf("record %d of the first run, lost at the first recovery, is back: %q", cid, r.payload[:8])
		}
	}
	if want := fmt.Sprintf("%s@%d", active2, 8192); len(torn) != 1 || torn[0] != want {
		t.Errorf("torn tail reports %v, want [%s]", torn, want)
	}
}

// TestStaleRecordLeftByOlderVersion: journals written before free files got
// a new generation at recovery may already hold a reused file with records
// of an earlier use under the same generation. Such a stale record, where a
// crash cut the newer ones, says through its lag that it was written when
// less was durable than the record before it already saw; recovery cuts the
// tail there instead of applying it. A record some later record proves
// durable (an older version's recovery accepted it and sealed the file) is
// history and stays applied.
func TestStaleRecordLeftByOlderVersion(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		lag    uint32 // of the planted DELETE(1), which has the next LSN
		sealed bool   // a SEGMENT_END after it proves it durable
		want   bool   // record 1 survives
	}{
		{"stale: written before anything was durable", 0, false, true},
		{"consistent lag: a genuine record", 1, false, false},
		{"stale but sealed by an earlier recovery", 0, true, false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			mem := fs.NewCrashableMem()
			j := mustOpen(t, testConfig(mem))
			m := newModel()
			for id := uint64(1); id <= 10; id++ { // synced: confirmed
				p := payloadFor(id, 200)
				if err := waitErr(func(d func(error)) { j.Append(id, 1, p, true, d) }); err != nil {
					t.Fatal(err)
				}
				m.live[id] = liveRec{utype: 1, payload: string(p)}
			}
			for id := uint64(11); id <= 20; id++ { // written, not synced
				if err := waitErr(func(d func(error)) { j.Append(id, 1, payloadFor(id, 200), false, d) }); err != nil {
					t.Fatal(err)
				}
			}
			j.smu.Lock()
			name, seed, off := j.w.active.name, j.w.active.seed, j.w.active.woff
			j.smu.Unlock()
			lsn := j.Stats().LastLSN + 1
			img := mem.Clone().CrashClonePages(4096, func(_ int, p fs.Page) int { return p.Versions })
			j.Close()
			lag := tc.lag
			if lag == 0 {
				lag = uint32(lsn) // written when nothing was durable
			} else {
				lag = uint32(lsn - 10) // after the 10 synced records
			}
			stale := appendRecord(nil, seed, &record{typ: recDelete, id: 1, lsn: lsn, lag: lag})
			if tc.sealed {
				stale = appendRecord(stale, seed, &record{typ: recSegmentEnd, lsn: lsn + 1, lag: 1})
			}
			writeAt(t, img, name, append(stale, make([]byte, recHeaderSize)...), off)

			var torn []int64
			cfg := testConfig(img)
			cfg.Events.OnTornTail = func(file string, o, _ int64) { torn = append(torn, o) }
			j2 := mustOpen(t, cfg)
			got, _ := load(t, j2)
			j2.Close()
			if _, ok := got[1]; ok != tc.want {
				t.Fatalf("record 1 present %v, want %v (torn tail at %v)", ok, tc.want, torn)
			}
			for id := uint64(2); id <= 20; id++ {
				if _, ok := got[id]; !ok {
					t.Errorf("record %d lost", id)
				}
			}
			if tc.want && (len(torn) != 1 || torn[0] != off) {
				t.Errorf("torn tail reports at %v, want [%d]", torn, off)
			}
		})
	}
}

func readAt(t *testing.T, m *fs.MemFS, name string, p []byte, off int64) {
	t.Helper()
	f, err := m.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(p, off); err != nil {
		t.Fatal(err)
	}
}

// writeAt writes p into name durably.
func writeAt(t *testing.T, m *fs.MemFS, name string, p []byte, off int64) {
	t.Helper()
	f, err := m.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Datasync(); err != nil {
		t.Fatal(err)
	}
}
