package journal

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

type pendRec struct {
	r    record
	seq  uint64
	off  int64
	size int
}

type recovery struct {
	j       *Journal
	lastLSN uint64 // LSN of the last valid record accepted
	// durable is the highest LSN an accepted record says was durable when
	// it was written (its LSN minus its lag). The writer's durable LSN only
	// grows, so along the log it never goes down.
	durable uint64
	// fileFirst is the LSN of the first record accepted in the file being
	// scanned; resynced reports that Salvage skipped damage somewhere.
	fileFirst uint64
	resynced  bool
	pending   []pendRec
	tailF     *segFile // last data file needing a SEGMENT_END at tailOff
	tailOff   int64
}

func parseNum(name string) (int, bool) {
	s, ok := strings.CutSuffix(name, ".jnl")
	if !ok || len(s) != 8 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0
}

// recover implements the recovery algorithm described in the package doc.
func (j *Journal) recover() error {
	cfg := &j.cfg
	names, err := cfg.FS.List(cfg.Dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	var files, free []*segFile
	views := map[*segFile]*fileView{}
	for _, n := range names {
		num, ok := parseNum(n)
		if !ok {
			continue
		}
		j.nextNum = max(j.nextNum, num+1)
		name := cfg.Dir + "/" + n
		file, err := cfg.FS.Open(name)
		if err != nil {
			return fmt.Errorf("journal: open %s: %w", name, err)
		}
		f := &segFile{num: num, name: name, f: file}
		v, err := openView(f)
		if err != nil {
			file.Close()
			j.closeFiles(files, free)
			return err
		}
		h, herr := decodeHeader(v.bytes(0, segHeaderUsed))
		if herr != nil {
			if v.size > segHeaderUsed && !allZero(v.bytes(0, segHeaderUsed)) {
				cerr := &CorruptionError{File: name, Offset: 0, Reason: herr.Error()}
				if cfg.Recovery == Strict {
					file.Close()
					j.closeFiles(files, free)
					return cerr
				}
				if cfg.Events.OnSalvage != nil {
					cfg.Events.OnSalvage(cerr, v.size)
				}
			}
			f.dirty = true
			free = append(free, f)
			continue
		}
		f.hdr, f.seed = h, seedOf(h.gen)
		j.nextSeq = max(j.nextSeq, h.seq+1)
		files = append(files, f)
		views[f] = v
	}
	sortFiles(files)
	maxPayload := cfg.MaxRecordSize
	firstValid := make([]bool, len(files))
	lastData := -1
	for i, f := range files {
		v := views[f]
		if v.size >= segHeaderSize {
			_, _, err := v.decode(segHeaderSize, f.seed, maxPayload)
			if v.err != nil {
				j.closeFiles(files, free)
				return v.err
			}
			if err == nil {
				firstValid[i] = true
				lastData = i
			}
		}
	}
	rc := &recovery{j: j}
	j.st.recovering = true
	for i, f := range files {
		v := views[f]
		delete(views, f)
		slotClean := v.size < segHeaderSize+recHeaderSize || allZero(v.bytes(segHeaderSize, recHeaderSize))
		if v.err != nil {
			j.closeFiles(files, free)
			return v.err
		}
		if !firstValid[i] && slotClean {
			// Free, but not necessarily empty: a crash can lose the page of
			// the first record while later pages of the same unsynced
			// writes reached the disk. Those records carry this file's
			// generation, and a run reusing it as it is would write the
			// same LSNs at the same offsets over them; a second crash could
			// then leave one exactly where the next record is expected.
			f.dirty = true
			free = append(free, f)
			continue
		}
		j.st.files[f.hdr.seq] = f
		if err := rc.scan(f, v, i >= lastData); err != nil {
			j.closeFiles(files, free)
			return err
		}
		if _, ok := j.st.files[f.hdr.seq]; !ok {
			free = append(free, f) // torn first batch: no data
		}
	}
	j.st.recovering = false
	// Seal the last data file where its valid records end, make it durable.
	if rc.tailF != nil {
		end := record{typ: recSegmentEnd, lsn: rc.lastLSN + 1, lag: 1}
		b := appendRecord(nil, rc.tailF.seed, &end)
		if _, err := rc.tailF.f.WriteAt(b, rc.tailOff); err != nil {
			j.closeFiles(files, free)
			return fmt.Errorf("journal: seal %s: %w", rc.tailF.name, err)
		}
		rc.tailF.woff = rc.tailOff + int64(len(b))
		rc.lastLSN++
	}
	var newest *segFile
	for _, f := range j.st.files {
		if newest == nil || f.hdr.seq > newest.hdr.seq {
			newest = f
		}
	}
	if newest != nil {
		if err := newest.f.Datasync(); err != nil {
			j.closeFiles(files, free)
			return fmt.Errorf("journal: sync %s: %w", newest.name, err)
		}
	}
	// Free files are all dirty: a file can be free because a crash lost the
	// start of what was written to it, so none is reused with the generation
	// it has. Re-header them now, before any newer file exists (a file whose
	// first slot is torn must not sort below one that holds records).
	for _, f := range free {
		if f.dirty || f.hdr.seq == 0 {
			if err := f.f.Preallocate(cfg.FileSize); err != nil {
				j.closeFiles(files, free)
				return fmt.Errorf("journal: preallocate %s: %w", f.name, err)
			}
			if err := j.reheader(f); err != nil {
				j.closeFiles(files, free)
				return fmt.Errorf("journal: re-header %s: %w", f.name, err)
			}
		}
		f.woff = segHeaderSize
		j.insertReadyLocked(f)
	}
	// Recovered records, in original ADD order.
	j.loaded = make([]*loadRec, 0, len(j.st.index))
	for _, e := range j.st.index {
		e.rec.order = e.order
		j.loaded = append(j.loaded, e.rec)
		e.rec = nil
	}
	sortLoaded(j.loaded)
	j.w.nextLSN = rc.lastLSN + 1
	j.w.durableLSN = rc.lastLSN
	j.writtenLSN = rc.lastLSN
	j.stats.LastLSN = rc.lastLSN
	if err := j.activateNext(); err != nil {
		j.closeFiles(files, free)
		return fmt.Errorf("journal: %w", err)
	}
	j.reclaimReq.Store(true)
	return nil
}

func (j *Journal) closeFiles(groups ...[]*segFile) {
	for _, g := range groups {
		for _, f := range g {
			f.f.Close()
		}
	}
	j.ready = nil
	j.st = newState()
}

// scan reads the records of one file. last reports whether no later file
// holds valid records.
func (rc *recovery) scan(f *segFile, v *fileView, last bool) error {
	j := rc.j
	maxPayload := j.cfg.MaxRecordSize
	off := int64(segHeaderSize)
	lenient := true // the first record of a file (or after a resync) may skip LSNs
	any := false
	for {
		r, size, err := v.decode(off, f.seed, maxPayload)
		if v.err != nil {
			return v.err
		}
		if err == nil {
			switch {
			case rc.lastLSN == 0:
			case lenient && r.lsn > rc.lastLSN:
			case !lenient && r.lsn == rc.lastLSN+1:
			default:
				err = fmt.Errorf("lsn %d does not follow %d", r.lsn, rc.lastLSN)
			}
		}
		if err == nil && last && durableAt(&r) < rc.durable {
			// A record that saw less durable than the record before it did
			// was not written after it: it is left from an earlier use of
			// this file with the same generation (a free file reused without
			// a new one, as versions before this check did), found where a
			// crash cut the newer records. Not proven synced, it is torn
			// tail. Earlier files, and records a later one proves durable,
			// are history and kept as they are.
			buf, rerr := v.all()
			if rerr != nil {
				return rerr
			}
			if !proven(buf, off, r.lsn, f.seed, maxPayload) {
				err = fmt.Errorf("lsn %d was written when lsn %d was durable, after a record that saw %d durable", r.lsn, durableAt(&r), rc.durable)
			}
		}
		if err != nil {
			// What follows off decides between a torn tail and damage.
			buf, rerr := v.all()
			if rerr != nil {
				return rerr
			}
			if last && !proven(buf, off, rc.lastLSN+1, f.seed, maxPayload) {
				// Torn tail: these bytes were never confirmed durable.
				if tb := tornBytes(buf, off); tb > 0 && j.cfg.Events.OnTornTail != nil {
					j.cfg.Events.OnTornTail(f.name, off, tb)
				}
				if !any {
					delete(j.st.files, f.hdr.seq)
					f.dirty = true
					return nil
				}
				if off+recHeaderSize <= v.size {
					rc.tailF, rc.tailOff = f, off
				}
				return nil
			}
			cerr := &CorruptionError{File: f.name, Offset: off, LSN: rc.lastLSN + 1, Reason: err.Error()}
			if j.cfg.Recovery == Strict {
				return cerr
			}
			p, ok := resync(buf, off, rc.lastLSN, f.seed, maxPayload)
			skipped := v.size - off
			if ok {
				skipped = p - off
			}
			if j.cfg.Events.OnSalvage != nil {
				j.cfg.Events.OnSalvage(cerr, skipped)
			}
			if !ok {
				if !any {
					delete(j.st.files, f.hdr.seq)
					f.dirty = true
				} else if last && off+recHeaderSize <= v.size {
					rc.tailF, rc.tailOff = f, off
				}
				return nil
			}
			off, lenient = p, true
			rc.resynced = true
			continue
		}
		if !any {
			rc.fileFirst = r.lsn
		}
		any, lenient = true, false
		rc.lastLSN = r.lsn
		rc.durable = max(rc.durable, durableAt(&r))
		f.woff = off + int64(size)
		rc.record(&r, f.hdr.seq, off, size)
		off += int64(size)
		if r.typ == recSegmentEnd {
			return nil
		}
	}
}

func (rc *recovery) record(r *record, seq uint64, off int64, size int) {
	st := rc.j.st
	switch r.typ {
	case recAddTx, recUpdateTx, recDeleteTx:
		rc.pending = append(rc.pending, pendRec{*r, seq, off, size})
	case recCommit:
		first, count, ok := parseCommit(r.payload)
		n := 0
		for _, p := range rc.pending {
			if p.r.lsn >= first && p.r.txid == r.txid {
				n++
			}
		}
		// A unit is applied whole or not at all. One that began in an
		// earlier file (the writer rolled in the middle of it) is applied
		// with what is found of it there: every record of it in this file
		// is here (the scan reached the COMMIT through consecutive LSNs,
		// and they are all the unit's), and its earlier records were
		// synced by the roll before any of this file was written, so one
		// that is missing is in a file reclaim took, which it does only
		// when everything in the file is dead. Not after Salvage skipped
		// damage: that could have taken part of the unit.
		whole := ok && n == int(count)
		split := ok && n < int(count) && first < rc.fileFirst && !rc.resynced && uint64(n) >= r.lsn-rc.fileFirst
		if whole || split {
			var earlier []uint64
			for i := range rc.pending {
				p := &rc.pending[i]
				if p.r.lsn >= first && p.r.txid == r.txid {
					st.apply(&p.r, p.seq, p.off, p.size)
					if p.seq != seq && !slices.Contains(earlier, p.seq) {
						earlier = append(earlier, p.seq)
					}
				}
			}
			st.linkUnit(seq, earlier)
		}
		rc.pending = rc.pending[:0]
	case recSegmentEnd, recPrepare, recRollback:
	default:
		rc.pending = rc.pending[:0]
		st.apply(r, seq, off, size)
	}
}

// proven reports whether a record after off validates and proves, through
// its lag field, that LSN expect had already been synced when it was
// written: then the damage at off is not a torn tail.
func proven(buf []byte, off int64, expect uint64, seed uint32, maxPayload int) bool {
	for p := off + recAlign; p+recHeaderSize <= int64(len(buf)); p += recAlign {
		r, _, err := decodeRecord(buf[p:], seed, maxPayload)
		if err != nil {
			continue
		}
		if r.lsn > expect && r.lsn-expect < uint64(len(buf)) && uint64(r.lag) <= r.lsn && r.lsn-uint64(r.lag) >= expect {
			return true
		}
	}
	return false
}

// durableAt is the LSN that was durable when r was written, as its lag
// says. (A saturated lag makes it larger than it was, but never larger
// than a later record's.)
func durableAt(r *record) uint64 { return r.lsn - min(uint64(r.lag), r.lsn) }

// resync finds the next record after off that validates with a plausible LSN.
func resync(buf []byte, off int64, lastLSN uint64, seed uint32, maxPayload int) (int64, bool) {
	for p := off + recAlign; p+recHeaderSize <= int64(len(buf)); p += recAlign {
		r, _, err := decodeRecord(buf[p:], seed, maxPayload)
		if err != nil {
			continue
		}
		if lastLSN == 0 || (r.lsn > lastLSN && r.lsn-lastLSN < uint64(len(buf))) {
			return p, true
		}
	}
	return 0, false
}

// tornBytes estimates the damaged tail: bytes from off to the next zero
// record slot or the end of the file.
func tornBytes(buf []byte, off int64) int64 {
	p := off
	for p+recHeaderSize <= int64(len(buf)) && !allZero(buf[p:p+recHeaderSize]) {
		p += recAlign
	}
	if p+recHeaderSize > int64(len(buf)) {
		p = int64(len(buf))
	}
	return p - off
}
