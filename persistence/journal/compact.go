package journal

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/junctionmq/junction/persistence/fs"
)

var errStaleCopy = errors.New("journal: compaction copy is stale")

type copySnap struct {
	id    uint64
	order uint64
	last  uint64
	locs  []loc // add first, then updates
}

// maybeCompact starts a background compaction when live bytes fall below
// CompactMinRatio of the sealed files' capacity with at least
// CompactMinFiles sealed files. Runs on the writer goroutine.
func (j *Journal) maybeCompact() {
	if j.cfg.CompactMinRatio < 0 {
		return
	}
	j.smu.Lock()
	n := len(j.st.files) - 1
	live := j.st.liveBytes
	j.smu.Unlock()
	if n < j.cfg.CompactMinFiles || float64(live) >= j.cfg.CompactMinRatio*float64(n)*float64(j.cfg.FileSize) {
		return
	}
	if !j.compacting.CompareAndSwap(false, true) {
		return
	}
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		j.compact(func() { j.compacting.Store(false) })
	}()
}

// Compact relocates every live record of the sealed files into the active
// file through the normal writer (copy-forward, as COMPACTED copies), then
// syncs and reclaims the emptied files. Appends keep flowing meanwhile: at
// most 64 copy units are queued at a time, each one record plus its updates.
// A record changed during compaction keeps its old location and is
// retried by a later run. Every step is crash safe: a copy supersedes the
// original only at a higher LSN, and files are reclaimed only after the
// copies are durable.
func (j *Journal) Compact() error { return j.compact(func() {}) }

// compact runs one compaction. over runs once the run is over, however it
// ends, and before Events.OnCompact reports it: an automatic run clears
// j.compacting there, so that the journal may start the next run by the
// time OnCompact runs.
func (j *Journal) compact(over func()) error {
	j.compactMu.Lock()
	defer j.compactMu.Unlock()
	over = sync.OnceFunc(over)
	defer over()
	select {
	case <-j.stop:
		return ErrClosed
	default:
	}
	if err := j.failedErr(); err != nil {
		return err
	}
	t := time.Now()
	type fref struct {
		f    fs.File
		seed uint32
	}
	j.smu.Lock()
	refs := map[uint64]fref{}
	for seq, f := range j.st.files {
		if seq != j.activeSeq {
			refs[seq] = fref{f.f, f.seed}
		}
	}
	var snaps []copySnap
	for id, e := range j.st.index {
		if e.last() > j.writtenLSN {
			continue
		}
		_, inTarget := refs[e.add.seq]
		for _, u := range e.upds {
			_, ok := refs[u.seq]
			inTarget = inTarget || ok
		}
		if !inTarget {
			continue
		}
		s := copySnap{id: id, order: e.order, last: e.last(), locs: make([]loc, 0, 1+len(e.upds))}
		s.locs = append(append(s.locs, e.add), e.upds...)
		snaps = append(snaps, s)
	}
	// The active file may hold updates of target records: read it too.
	if f := j.st.files[j.activeSeq]; f != nil {
		refs[j.activeSeq] = fref{f.f, f.seed}
	}
	nfiles := len(refs) - 1
	j.smu.Unlock()
	sort.Slice(snaps, func(a, b int) bool {
		if snaps[a].locs[0].seq != snaps[b].locs[0].seq {
			return snaps[a].locs[0].seq < snaps[b].locs[0].seq
		}
		return snaps[a].locs[0].off < snaps[b].locs[0].off
	})
	var (
		copied atomic.Int64
		wg     sync.WaitGroup
		sem    = make(chan struct{}, 64)
	)
	var stopped bool
	for _, s := range snaps {
		select {
		case <-j.stop:
			stopped = true
		default:
		}
		if stopped {
			break
		}
		unit, nbytes, ok := j.readCopy(&s, func(seq uint64) (fs.File, uint32, bool) {
			r, ok := refs[seq]
			return r.f, r.seed, ok
		})
		if !ok {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		j.enqueueItem(item{kind: kindUnit, unit: unit, copyOf: s.last, nbytes: nbytes, done: func(err error) {
			if err == nil {
				copied.Add(1)
			}
			<-sem
			wg.Done()
		}})
	}
	wg.Wait()
	if !stopped {
		errc := make(chan error, 1)
		j.Sync(func(err error) { errc <- err })
		if err := <-errc; err != nil {
			return err
		}
	}
	n := copied.Load()
	j.smu.Lock()
	j.stats.Compactions++
	j.stats.CopiedRecs += uint64(n)
	j.smu.Unlock()
	over()
	if j.cfg.Events.OnCompact != nil {
		j.cfg.Events.OnCompact(nfiles, int(n), time.Since(t))
	}
	return nil
}

// readCopy reads a live record and its updates back from disk and builds
// the copy unit: one COMPACTED ADD, or COMPACTED ADD_TX/UPDATE_TX... plus a
// COMMIT so the copy is applied all-or-nothing.
func (j *Journal) readCopy(s *copySnap, file func(uint64) (fs.File, uint32, bool)) ([]record, int, bool) {
	unit := make([]record, 0, len(s.locs)+1)
	nbytes := 0
	for i, l := range s.locs {
		f, seed, ok := file(l.seq)
		if !ok {
			return nil, 0, false
		}
		buf := make([]byte, l.size)
		if _, err := f.ReadAt(buf, l.off); err != nil {
			return nil, 0, false
		}
		r, _, err := decodeRecord(buf, seed, j.cfg.MaxRecordSize)
		if err != nil || r.lsn != l.lsn || r.id != s.id {
			return nil, 0, false
		}
		typ := recAdd
		if len(s.locs) > 1 {
			typ = recAddTx
			if i > 0 {
				typ = recUpdateTx
			}
		}
		unit = append(unit, record{typ: typ, flags: flagCompacted, id: s.id, txid: s.order, utype: r.utype, payload: r.payload})
		nbytes += int(l.size)
	}
	if len(s.locs) > 1 {
		unit = append(unit, record{typ: recCommit, flags: flagCompacted, txid: s.order})
		nbytes += recHeaderSize + 16
	}
	return unit, nbytes, true
}
