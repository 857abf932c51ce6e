package journal

import (
	"fmt"

	"github.com/junctionmq/junction/persistence/fs"
)

// segFile is one journal file. Ownership: the writer goroutine owns the
// active file's writes; fields read by Stats or the compactor (hdr, seed,
// woff, pos, live, negs) change only under Journal.smu, or before the file
// is shared (preparer).
type segFile struct {
	num  int
	name string
	f    fs.File
	hdr  segHeader
	seed uint32
	woff int64 // end of written records
	pos  int   // live records located here (adds, updates, copies)
	live int64 // their encoded bytes
	// negs counts records here (deletes, relocated copies) that cancel
	// records located in another file, by that file's seq (Artemis "neg").
	negs map[uint64]int
	// dirty: the file may hold records of its current generation that are
	// not part of the log (recovery found it free, or its first batch torn,
	// or its header invalid); it must get a new generation before it is
	// written.
	dirty bool
}

func fileName(dir string, num int) string { return fmt.Sprintf("%s/%08d.jnl", dir, num) }

// loc is where one record of a live id is stored.
type loc struct {
	seq   uint64
	off   int64
	size  int32
	utype uint16
	lsn   uint64
}

// loadRec holds the payloads of a recovered record until Load.
type loadRec struct {
	id      uint64
	order   uint64
	utype   uint16
	payload []byte
	updates []Update
}

type entry struct {
	id    uint64
	order uint64 // LSN of the original ADD: the Load order
	add   loc
	upds  []loc
	rec   *loadRec // recovery only
}

func (e *entry) last() uint64 {
	if n := len(e.upds); n > 0 {
		return e.upds[n-1].lsn
	}
	return e.add.lsn
}

// state is the live-record index and the per-file accounting. Guarded by
// Journal.smu; mutated only by the writer goroutine (or Open).
type state struct {
	files      map[uint64]*segFile // data files (sealed and active) by seq
	index      map[uint64]*entry
	liveBytes  int64
	maxID      uint64
	recovering bool
}

func newState() *state {
	return &state{files: map[uint64]*segFile{}, index: map[uint64]*entry{}}
}

func (s *state) addLoc(l loc) {
	if f := s.files[l.seq]; f != nil {
		f.pos++
		f.live += int64(l.size)
		s.liveBytes += int64(l.size)
	}
}

// dropLocs cancels every location of e from a record located in file atSeq.
func (s *state) dropLocs(e *entry, atSeq uint64) {
	drop := func(l loc) {
		f := s.files[l.seq]
		if f == nil {
			return
		}
		f.pos--
		f.live -= int64(l.size)
		s.liveBytes -= int64(l.size)
		if l.seq != atSeq {
			at := s.files[atSeq]
			if at.negs == nil {
				at.negs = map[uint64]int{}
			}
			at.negs[l.seq]++
		}
	}
	drop(e.add)
	for _, u := range e.upds {
		drop(u)
	}
}

// linkUnit records that the unit whose COMMIT is in file commitSeq (a
// transaction or compaction copy the writer split across a roll) also has
// records in the files earlier. Recovery applies such a unit with what it
// finds of it in earlier files (see recovery.record), which is right only
// if those it does not find are dead. Reclaim takes a file only when all
// its records are dead, so the earlier files may go first; the COMMIT's
// file must not: it counts each earlier file among its negatives, so it is
// reused only after them, or after them in the same pass.
func (s *state) linkUnit(commitSeq uint64, earlier []uint64) {
	f := s.files[commitSeq]
	if f == nil {
		return
	}
	for _, e := range earlier {
		if f.negs == nil {
			f.negs = map[uint64]int{}
		}
		f.negs[e]++
	}
}

// baseType maps tx record types to their plain meaning.
func baseType(t recType) recType {
	switch t {
	case recAddTx:
		return recAdd
	case recUpdateTx:
		return recUpdate
	case recDeleteTx:
		return recDelete
	}
	return t
}

// apply applies one ADD/UPDATE/DELETE (or tx variant, once committed) located
// at seq/off.
func (s *state) apply(r *record, seq uint64, off int64, size int) {
	if r.id > s.maxID {
		s.maxID = r.id
	}
	l := loc{seq: seq, off: off, size: int32(size), utype: r.utype, lsn: r.lsn}
	switch baseType(r.typ) {
	case recAdd:
		order := r.lsn
		if r.flags&flagCompacted != 0 {
			order = r.txid
		}
		e, ok := s.index[r.id]
		if ok {
			s.dropLocs(e, seq)
			e.add, e.upds = l, nil
		} else {
			e = &entry{id: r.id, add: l}
			s.index[r.id] = e
		}
		e.order = order
		s.addLoc(l)
		if s.recovering {
			e.rec = &loadRec{id: r.id, order: order, utype: r.utype, payload: r.payload}
		}
	case recUpdate:
		e, ok := s.index[r.id]
		if !ok {
			return
		}
		e.upds = append(e.upds, l)
		s.addLoc(l)
		if s.recovering {
			e.rec.updates = append(e.rec.updates, Update{UserType: r.utype, Payload: r.payload})
		}
	case recDelete:
		e, ok := s.index[r.id]
		if !ok {
			return
		}
		s.dropLocs(e, seq)
		delete(s.index, r.id)
	}
}

// reclaimable returns the sealed data files that can be reused, in
// ascending seq order, using Artemis's two criteria: (1) no live record is
// located in the file; (2) every file its negatives point at is gone or
// reclaimed in the same pass.
func (s *state) reclaimable(activeSeq uint64) []*segFile {
	cand := map[uint64]*segFile{}
	for seq, f := range s.files {
		if seq != activeSeq && f.pos == 0 {
			cand[seq] = f
		}
	}
	for changed := true; changed; {
		changed = false
		for seq, f := range cand {
			for target, n := range f.negs {
				if n <= 0 {
					continue
				}
				if _, present := s.files[target]; !present {
					continue
				}
				if _, ok := cand[target]; !ok {
					delete(cand, seq)
					changed = true
					break
				}
			}
		}
	}
	out := make([]*segFile, 0, len(cand))
	for _, f := range cand {
		out = append(out, f)
	}
	sortFiles(out)
	return out
}

func sortFiles(fs []*segFile) {
	for i := 1; i < len(fs); i++ {
		for k := i; k > 0 && fs[k].hdr.seq < fs[k-1].hdr.seq; k-- {
			fs[k], fs[k-1] = fs[k-1], fs[k]
		}
	}
}
