package journal

import (
	"fmt"
	"math"
	"time"
)

// writer is the state owned by the writer goroutine.
type writer struct {
	active     *segFile
	buf        []byte // encoded records not yet written, for active from bufOff
	bufOff     int64
	nextLSN    uint64
	durableLSN uint64 // every record with LSN <= durableLSN is on disk (synced)
	spareQ     []item
	spareArena []byte
	deletes    int // deletes since the last reclaim pass
	comps      []completion
}

const reclaimEveryDeletes = 1024

func (j *Journal) writeLoop() {
	defer j.writerWG.Done()
	w := &j.w
	for {
		j.qmu.Lock()
		for len(j.q) == 0 && !j.closing && !j.reclaimReq.Load() {
			j.qmu.Unlock()
			<-j.kick
			j.qmu.Lock()
		}
		items, arena := j.q, j.arena
		j.q, j.arena = w.spareQ[:0], w.spareArena[:0]
		closing := j.closing
		j.qmu.Unlock()

		if len(items) > 0 {
			j.processBatch(items, arena)
			recs, bytes := 0, 0
			for i := range items {
				recs += max(1, len(items[i].unit))
				bytes += items[i].nbytes
				items[i] = item{}
			}
			j.qmu.Lock()
			j.pendRecs -= recs
			j.pendBytes -= bytes
			j.space.Broadcast()
			j.qmu.Unlock()
		}
		w.spareQ, w.spareArena = items[:0], arena[:0]
		if j.reclaimReq.Swap(false) {
			j.reclaim()
		}
		if closing && len(items) == 0 {
			j.sealOnClose()
			return
		}
	}
}

func (j *Journal) failedErr() error {
	j.qmu.Lock()
	defer j.qmu.Unlock()
	if j.failed != nil {
		return fmt.Errorf("%w: %w", ErrFailed, j.failed)
	}
	return nil
}

// setFailed records the first I/O error; the journal refuses everything
// afterwards (an fsync is never retried).
func (j *Journal) setFailed(err error) {
	j.qmu.Lock()
	if j.failed == nil {
		j.failed = err
	}
	j.space.Broadcast()
	j.qmu.Unlock()
}

func (j *Journal) processBatch(items []item, arena []byte) {
	w := &j.w
	w.comps = make([]completion, 0, len(items))
	if err := j.failedErr(); err != nil {
		j.completeAll(items, err)
		return
	}
	needSync := false
	nrec := 0
	rolled := false
	results := make([]error, len(items))
	var ioErr error
	for i := range items {
		it := &items[i]
		switch it.kind {
		case kindBarrier:
			needSync = true
			j.reclaimReq.Store(true)
			continue
		case kindRecord:
			r := record{typ: it.typ, id: it.id, utype: it.utype, payload: arena[it.start:it.end]}
			if err := j.check(&r); err != nil {
				results[i] = err
				continue
			}
			if ioErr = j.encode(&r, &rolled); ioErr != nil {
				break
			}
			nrec++
			if it.typ == recDelete {
				w.deletes++
			}
		case kindUnit:
			if err := j.checkUnit(it); err != nil {
				results[i] = err
				continue
			}
			first := w.nextLSN
			var seqs []uint64 // the files the unit's records land in
			for k := range it.unit {
				r := &it.unit[k]
				if r.typ == recCommit {
					r.payload = commitPayload(first, uint32(len(it.unit)-1))
				}
				if ioErr = j.encode(r, &rolled); ioErr != nil {
					break
				}
				nrec++
				if s := w.active.hdr.seq; len(seqs) == 0 || seqs[len(seqs)-1] != s {
					seqs = append(seqs, s)
				}
			}
			if n := len(seqs); ioErr == nil && n > 1 {
				j.smu.Lock()
				j.st.linkUnit(seqs[n-1], seqs[:n-1])
				j.smu.Unlock()
			}
		}
		if ioErr != nil {
			break
		}
		if it.sync {
			needSync = true
		}
	}
	if ioErr == nil && len(w.buf) > 0 {
		ioErr = j.flush()
	}
	if ioErr == nil && needSync && w.durableLSN < w.nextLSN-1 {
		ioErr = j.syncActive(nrec)
	}
	j.smu.Lock()
	j.stats.Batches++
	j.stats.Records += uint64(nrec)
	j.stats.LastLSN = w.nextLSN - 1
	if ioErr == nil {
		j.writtenLSN = w.nextLSN - 1
	}
	j.smu.Unlock()
	if ioErr != nil {
		j.setFailed(ioErr)
		j.completeAll(items, fmt.Errorf("%w: %w", ErrFailed, ioErr))
		return
	}
	for i := range items {
		if items[i].kind == kindBarrier {
			j.reclaimReq.Store(false)
			j.reclaim()
			if err := j.failedErr(); err != nil {
				results[i] = err
			}
			break
		}
	}
	for i := range items {
		if items[i].done != nil {
			w.comps = append(w.comps, completion{items[i].done, results[i]})
		}
	}
	if len(w.comps) > 0 {
		j.compCh <- w.comps
	}
	if rolled || w.deletes >= reclaimEveryDeletes {
		j.reclaimReq.Store(true)
	}
}

func (j *Journal) completeAll(items []item, err error) {
	comps := make([]completion, 0, len(items))
	for i := range items {
		if items[i].done != nil {
			comps = append(comps, completion{items[i].done, err})
		}
	}
	if len(comps) > 0 {
		j.compCh <- comps
	}
}

// check validates a single record against the live index.
func (j *Journal) check(r *record) error {
	j.smu.Lock()
	defer j.smu.Unlock()
	_, live := j.st.index[r.id]
	switch r.typ {
	case recAdd:
		if live {
			return ErrIDExists
		}
	case recUpdate, recDelete:
		if !live {
			return ErrNotFound
		}
	}
	return nil
}

// checkUnit validates a committed transaction (or a compaction copy) as a
// whole, in order.
func (j *Journal) checkUnit(it *item) error {
	j.smu.Lock()
	defer j.smu.Unlock()
	if it.copyOf != 0 {
		e, ok := j.st.index[it.unit[0].id]
		if !ok || e.last() != it.copyOf {
			return errStaleCopy
		}
		return nil
	}
	overlay := map[uint64]bool{}
	for _, r := range it.unit {
		live, ok := overlay[r.id]
		if !ok {
			_, live = j.st.index[r.id]
		}
		switch r.typ {
		case recAddTx:
			if live {
				return ErrIDExists
			}
			overlay[r.id] = true
		case recUpdateTx:
			if !live {
				return ErrNotFound
			}
		case recDeleteTx:
			if !live {
				return ErrNotFound
			}
			overlay[r.id] = false
		}
	}
	return nil
}

// encode appends r to the write buffer (rolling to a new file when it does
// not fit), assigns its LSN and applies it to the index.
func (j *Journal) encode(r *record, rolled *bool) error {
	w := &j.w
	size := encodedSize(len(r.payload))
	woff := w.bufOff + int64(len(w.buf))
	if woff+int64(size)+recHeaderSize > j.cfg.FileSize {
		if err := j.roll(); err != nil {
			return err
		}
		*rolled = true
		woff = w.bufOff
	}
	r.lsn = w.nextLSN
	w.nextLSN++
	lag := r.lsn - w.durableLSN
	if lag > math.MaxUint32 {
		lag = math.MaxUint32
	}
	r.lag = uint32(lag)
	w.buf = appendRecord(w.buf, w.active.seed, r)
	j.smu.Lock()
	w.active.woff = woff + int64(size)
	if r.typ != recCommit && r.typ != recSegmentEnd {
		j.st.apply(r, w.active.hdr.seq, woff, size)
	}
	j.smu.Unlock()
	return nil
}

// flush writes the buffer plus a zeroed next record slot.
func (j *Journal) flush() error {
	w := &j.w
	n := len(w.buf)
	if w.bufOff+int64(n)+recHeaderSize <= j.cfg.FileSize {
		w.buf = append(w.buf, make([]byte, recHeaderSize)...)
	}
	_, err := w.active.f.WriteAt(w.buf, w.bufOff)
	w.bufOff += int64(n)
	w.buf = w.buf[:0]
	return err
}

func (j *Journal) syncActive(nrec int) error {
	w := &j.w
	t := time.Now()
	if err := w.active.f.Datasync(); err != nil {
		return err
	}
	d := time.Since(t)
	j.syncHist.observe(d)
	w.durableLSN = w.nextLSN - 1
	j.smu.Lock()
	j.stats.Syncs++
	j.stats.SyncedRecs += uint64(nrec)
	j.smu.Unlock()
	if j.cfg.Events.OnSync != nil {
		j.cfg.Events.OnSync(nrec, d)
	}
	return nil
}

// roll seals the active file with SEGMENT_END, syncs it and activates the
// next ready file.
func (j *Journal) roll() error {
	w := &j.w
	end := record{typ: recSegmentEnd}
	end.lsn = w.nextLSN
	w.nextLSN++
	end.lag = uint32(min(end.lsn-w.durableLSN, math.MaxUint32))
	w.buf = appendRecord(w.buf, w.active.seed, &end)
	j.smu.Lock()
	w.active.woff = w.bufOff + int64(len(w.buf))
	j.smu.Unlock()
	if err := j.flush(); err != nil {
		return err
	}
	if err := w.active.f.Datasync(); err != nil {
		return err
	}
	w.durableLSN = w.nextLSN - 1
	old := w.active
	if err := j.activateNext(); err != nil {
		return err
	}
	j.smu.Lock()
	j.stats.Rolls++
	j.smu.Unlock()
	if j.cfg.Events.OnRoll != nil {
		j.cfg.Events.OnRoll(old.name, w.active.name)
	}
	return nil
}

// activateNext makes the lowest-seq ready file the active one. The active
// file must sort after every data file (recovery orders files by seq), so a
// ready file whose seq is not above them all is re-headered first: the
// preparer can publish a file whose seq it took before the writer created
// one itself, and at recovery there is no active file yet, only the tail.
func (j *Journal) activateNext() error {
	w := &j.w
	f, err := j.takeReady()
	if err != nil {
		return err
	}
	var top uint64
	j.smu.Lock()
	for seq := range j.st.files {
		top = max(top, seq)
	}
	j.smu.Unlock()
	if f.dirty || f.hdr.seq <= top {
		if err := j.reheader(f); err != nil {
			return err
		}
	}
	f.woff = segHeaderSize
	j.smu.Lock()
	j.st.files[f.hdr.seq] = f
	j.activeSeq = f.hdr.seq
	j.smu.Unlock()
	w.active = f
	w.bufOff = segHeaderSize
	w.buf = w.buf[:0]
	return nil
}

// sealOnClose writes SEGMENT_END into a non-empty active file and syncs.
func (j *Journal) sealOnClose() {
	w := &j.w
	if j.failedErr() != nil || w.active == nil || w.bufOff == segHeaderSize {
		return
	}
	end := record{typ: recSegmentEnd, lsn: w.nextLSN}
	end.lag = uint32(min(end.lsn-w.durableLSN, math.MaxUint32))
	w.nextLSN++
	w.buf = appendRecord(w.buf[:0], w.active.seed, &end)
	err := j.flush()
	if err == nil {
		err = w.active.f.Datasync()
	}
	if err != nil {
		j.setFailed(err)
	}
}

// reclaim re-headers every reclaimable file (ascending seq, each durable
// before the next) and returns it to the ready pool. Everything written is
// made durable first, so no reclaimed file is the only evidence of a delete.
func (j *Journal) reclaim() {
	w := &j.w
	w.deletes = 0
	if j.failedErr() != nil {
		return
	}
	if w.durableLSN < w.nextLSN-1 {
		if err := j.syncActive(0); err != nil {
			j.setFailed(err)
			return
		}
	}
	j.smu.Lock()
	cands := j.st.reclaimable(w.active.hdr.seq)
	for _, f := range cands {
		delete(j.st.files, f.hdr.seq)
	}
	for _, f := range j.st.files {
		for _, c := range cands {
			delete(f.negs, c.hdr.seq)
		}
	}
	j.smu.Unlock()
	for _, f := range cands {
		name := f.name
		if err := j.reheader(f); err != nil {
			j.setFailed(err)
			return
		}
		j.rmu.Lock()
		j.insertReadyLocked(f)
		j.rmu.Unlock()
		j.smu.Lock()
		j.stats.Reclaimed++
		j.smu.Unlock()
		if j.cfg.Events.OnReclaim != nil {
			j.cfg.Events.OnReclaim(name)
		}
	}
	if len(cands) > 0 {
		j.kickPrep()
	}
	j.maybeCompact()
}
