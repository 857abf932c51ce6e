package raftlog

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Storage is the raft.Storage of one group: the group's durable log, hard
// state and snapshot as of the last Save, CreateSnapshot or Compact that
// returned. It holds the uncompacted entries in memory (see the package
// doc for the bound) and reads snapshot data from its file. It is safe for
// concurrent use; writes go through the Log.
type Storage struct {
	l     *Log
	group uint64

	// mu guards everything below. Writers hold Log.wmu as well, so a
	// writer may read these fields without mu.
	mu   sync.Mutex
	base entryRef    // the entry before the first: compaction point
	ents []*pb.Entry // indexes base.index+1 .. base.index+len(ents)
	ids  []uint64    // journal record id of each entry
	// cum[k] is the sum of proto.Size of ents[:k] (len(cum) = len(ents)+1),
	// for Entries' maxSize and the byte count of the log.
	cum       []uint64
	hs        *pb.HardState // nil until one is saved
	hsID      uint64
	snap      snapMeta // index 0: none
	snapID    uint64
	startID   uint64
	persisted bool // some record of the group is in the journal
}

var _ raft.Storage = (*Storage)(nil)

func newStorage(l *Log, group uint64) *Storage {
	return &Storage{l: l, group: group, cum: []uint64{0}}
}

// Group returns the group id.
func (s *Storage) Group() uint64 { return s.group }

func (s *Storage) lastIndex() uint64 { return s.base.index + uint64(len(s.ents)) }

// term returns the term at i. s.mu or Log.wmu must be held.
func (s *Storage) term(i uint64) (uint64, error) {
	switch {
	case i < s.base.index:
		return 0, raft.ErrCompacted
	case i == s.base.index:
		return s.base.term, nil
	case i > s.lastIndex():
		return 0, raft.ErrUnavailable
	}
	return s.ents[i-s.base.index-1].GetTerm(), nil
}

// InitialState implements raft.Storage. After Open the hard state's
// Commit is at least the snapshot index (a snapshot covers only committed
// entries); it may be older than the last commit index raft reported, see
// the package doc.
func (s *Storage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var hs *pb.HardState
	if s.hs != nil {
		hs = proto.Clone(s.hs).(*pb.HardState)
	}
	return hs, cloneConfState(s.snap.cs), nil
}

// Entries implements raft.Storage: entries [lo, hi), at most maxSize bytes
// (proto.Size) of them but at least one. The returned slice is capped, so
// an append by the caller copies it; the entries are shared and must not
// be mutated. Errors are raft's bare sentinels (raft compares with ==):
// ErrCompacted if lo is not above the compaction point, ErrUnavailable if
// hi is past the last index + 1 (where MemoryStorage panics) or the log
// holds no entry.
func (s *Storage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lo <= s.base.index {
		return nil, raft.ErrCompacted
	}
	if hi > s.lastIndex()+1 || lo > hi {
		return nil, raft.ErrUnavailable
	}
	if len(s.ents) == 0 {
		return nil, raft.ErrUnavailable
	}
	a, b := int(lo-s.base.index-1), int(hi-s.base.index-1)
	if a == b {
		return s.ents[a:a:a], nil
	}
	// Longest prefix [a, a+n) within maxSize, at least one entry.
	n := sort.Search(b-a, func(k int) bool { return s.cum[a+k+1]-s.cum[a] > maxSize })
	n = max(n, 1)
	return s.ents[a : a+n : a+n], nil
}

// Term implements raft.Storage.
func (s *Storage) Term(i uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.term(i)
}

// LastIndex implements raft.Storage.
func (s *Storage) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastIndex(), nil
}

// FirstIndex implements raft.Storage.
func (s *Storage) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.base.index + 1, nil
}

// Snapshot implements raft.Storage: the latest durable snapshot with its
// data read from its file (an empty snapshot if the group has none). If
// the file cannot be read it logs why and returns
// raft.ErrSnapshotTemporarilyUnavailable, so raft retries later instead
// of panicking; a corrupt file is reported the same way and counted in
// Stats.SnapshotReadErrors. For large snapshots use OpenSnapshot.
func (s *Storage) Snapshot() (*pb.Snapshot, error) {
	r, err := s.OpenSnapshot()
	if err != nil {
		return nil, err
	}
	if r == nil {
		return pb.EnsureSnapshot(nil), nil
	}
	defer r.Close()
	data := make([]byte, r.Size)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, s.snapReadFailed(r.Metadata.GetIndex(), err)
	}
	var one [1]byte // reach EOF so that the CRC is checked
	if _, err := r.Read(one[:]); err != io.EOF {
		if err == nil {
			err = errors.New("file longer than recorded")
		}
		return nil, s.snapReadFailed(r.Metadata.GetIndex(), err)
	}
	return &pb.Snapshot{Metadata: r.Metadata, Data: data}, nil
}

// OpenSnapshot opens the latest durable snapshot for reading; nil (and no
// error) if the group has none. The caller must Close it. Errors are
// raft.ErrSnapshotTemporarilyUnavailable (logged), as for Snapshot.
func (s *Storage) OpenSnapshot() (*SnapshotReader, error) {
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		m := s.snap
		s.mu.Unlock()
		if m.index == 0 {
			return nil, nil
		}
		f, err := s.l.openSnapFile(s.group, &m)
		if err != nil {
			s.mu.Lock()
			replaced := s.snap.index != m.index
			s.mu.Unlock()
			if replaced && attempt < 3 {
				continue // a newer snapshot removed this file meanwhile
			}
			return nil, s.snapReadFailed(m.index, err)
		}
		return &SnapshotReader{
			Metadata: m.metadata(),
			Size:     m.size,
			f:        f,
			r:        io.NewSectionReader(f, snapFileHeader, m.size),
			crc:      crc32.New(castagnoli),
			want:     m.crc,
		}, nil
	}
}

// snapReadFailed logs why a snapshot could not be read and returns the
// bare sentinel: raft compares Storage errors with ==.
func (s *Storage) snapReadFailed(index uint64, err error) error {
	s.l.snapReadErrors.Add(1)
	s.l.cfg.Logger.Error().Err(err).Uint64("group", s.group).Uint64("index", index).Msg("raftlog: cannot read snapshot")
	return raft.ErrSnapshotTemporarilyUnavailable
}

// CreateSnapshot records a snapshot of the group's state machine at index
// (an applied, hence committed, index) with the given ConfState (the
// result of the last ApplyConfChange) and data (opaque, the caller's).
// In order: the data is written to its own file (temporary name, fsync,
// rename, directory fsync), then the snapshot record is appended and
// synced, then the previous snapshot's file is removed, then the log is
// compacted below index - Config.CatchUpEntries (as Compact). It returns
// once all of that is durable. raft.ErrSnapOutOfDate if index is not
// above the current snapshot's; raft.ErrUnavailable if it is past the
// last index. A nil cs keeps the current snapshot's ConfState (as
// MemoryStorage.CreateSnapshot). data is not retained.
func (s *Storage) CreateSnapshot(index uint64, cs *pb.ConfState, data []byte) error {
	l := s.l
	if err := l.usable(); err != nil {
		return err
	}
	// Validate and write the file without holding the write lock: a large
	// snapshot must not stall the raft loop's Save.
	s.mu.Lock()
	term, err := s.term(index)
	cur := s.snap.index
	if cs == nil {
		cs = s.snap.cs
	}
	s.mu.Unlock()
	if err == nil && index <= cur {
		err = raft.ErrSnapOutOfDate
	}
	if err != nil {
		return err
	}
	m := &snapMeta{index: index, term: term, cs: cloneConfState(cs)}
	if err := l.writeSnapFile(s.group, m, data); err != nil {
		return l.fail(err)
	}

	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	if t, err := s.term(index); index <= s.snap.index || err != nil || t != term {
		// Another CreateSnapshot (or an installed snapshot) overtook this
		// one while its file was written, or the log moved under an index
		// that was not committed.
		if index != s.snap.index || term != s.snap.term {
			l.removeSnapFile(s.group, m)
		}
		if err == nil && t != term {
			err = fmt.Errorf("%w: term at %d changed from %d to %d", raft.ErrUnavailable, index, term, t)
		}
		if err == nil {
			err = raft.ErrSnapOutOfDate
		}
		return err
	}
	// The snapshot record, synced, before anything it covers is deleted.
	id := l.newID()
	l.buf = l.buf[:0]
	l.buf, err = appendSnapshotRecord(l.buf, s.group, m, false)
	if err != nil {
		return err
	}
	l.batch.reset(1)
	l.j.Append(id, recSnapshot, l.buf, true, l.batch.doneFn)
	if err := l.batch.wait(); err != nil {
		return l.fail(err)
	}
	old, oldID := s.snap, s.snapID
	s.mu.Lock()
	s.snap, s.snapID, s.persisted = *m, id, true
	s.mu.Unlock()
	if old.index != 0 {
		l.removeSnapFile(s.group, &old)
	}
	return l.compactLocked(s, l.catchUpPoint(s, index), oldID)
}

// catchUpPoint is where CreateSnapshot at index compacts the log to: the
// entries up to index are kept back to at most CatchUpEntries of them and
// at most CatchUpBytes of their encoded size; 0 (nothing to compact) when
// CatchUpEntries is negative. Log.wmu held.
func (l *Log) catchUpPoint(s *Storage, index uint64) uint64 {
	k := l.cfg.CatchUpEntries
	if k < 0 || index <= s.base.index || index > s.lastIndex() {
		return 0
	}
	c := s.base.index
	if index > uint64(k) {
		c = max(c, index-uint64(k))
	}
	if l.cfg.CatchUpBytes < 0 || c >= index {
		return c
	}
	// The entries (p, index] hold cum[index-base] - cum[p-base] bytes,
	// which shrinks as p grows: the first p within the bound.
	lo, hi := c-s.base.index, index-s.base.index
	end, limit := s.cum[hi], uint64(l.cfg.CatchUpBytes)
	p := lo + uint64(sort.Search(int(hi-lo), func(i int) bool { return end-s.cum[lo+uint64(i)] <= limit }))
	return s.base.index + p
}

// BytesAfter returns the encoded size (proto.Size) of the entries held
// after index: all of them when index is at or below the compaction
// point, none when it is at or past the last. A caller bounds the
// memory of its log by snapshotting when this grows (see the package
// doc, "Memory and limits").
func (s *Storage) BytesAfter(index uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.cum[len(s.cum)-1]
	switch {
	case index <= s.base.index:
		return last - s.cum[0]
	case index >= s.lastIndex():
		return 0
	}
	return last - s.cum[index-s.base.index]
}

// Compact discards the entries up to and including index (raft's
// MemoryStorage.Compact): afterwards FirstIndex is index+1 and Term(index)
// is still answered. index must be covered by the durable snapshot
// (ErrBeyondSnapshot otherwise): entries are deleted only after the
// snapshot that covers them is durable. raft.ErrCompacted if index is not
// above the current compaction point. It returns once durable.
func (s *Storage) Compact(index uint64) error {
	l := s.l
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	if index <= s.base.index {
		return raft.ErrCompacted
	}
	if index > s.snap.index {
		return fmt.Errorf("%w: index %d, snapshot index %d", ErrBeyondSnapshot, index, s.snap.index)
	}
	return l.compactLocked(s, index, 0)
}

// compactLocked writes START(index) and deletes the entry records up to
// index (ascending, so that any prefix of the deletes leaves a contiguous
// log) plus the superseded START and, if oldSnapID != 0, the superseded
// snapshot record; it syncs and then compacts the in-memory log. Nothing
// is compacted when index <= the current compaction point. Log.wmu held.
func (l *Log) compactLocked(s *Storage, index, oldSnapID uint64) error {
	var dels []uint64
	at := s.base
	compact := index > s.base.index && index <= s.lastIndex()
	if compact {
		t, _ := s.term(index)
		at = entryRef{index, t}
		dels = append(dels, s.ids[:index-s.base.index]...)
	}
	// A START must name the compaction point before the old snapshot
	// record goes: after a crash that cut an install between its snapshot
	// record and its reset START, that snapshot record is the only one.
	writeStart := compact || (oldSnapID != 0 && s.startID == 0 && s.base.index > 0)
	if writeStart && s.startID != 0 {
		dels = append(dels, s.startID)
	}
	if oldSnapID != 0 {
		dels = append(dels, oldSnapID)
	}
	n := len(dels)
	var startID uint64
	if writeStart {
		n++
		startID = l.newID()
	}
	if n == 0 {
		return nil
	}
	l.batch.reset(n)
	if writeStart {
		l.buf = appendStartRecord(l.buf[:0], s.group, at, false)
		l.j.Append(startID, recStart, l.buf, len(dels) == 0, l.batch.doneFn)
	}
	for i, id := range dels {
		l.j.Delete(id, i == len(dels)-1, l.batch.doneFn)
	}
	if err := l.batch.wait(); err != nil {
		return l.fail(err)
	}
	if !compact {
		if writeStart {
			s.mu.Lock()
			s.startID = startID
			s.mu.Unlock()
		}
		return nil
	}
	k := index - s.base.index // entries to drop
	ents := make([]*pb.Entry, 0, uint64(len(s.ents))-k)
	ids := make([]uint64, 0, cap(ents))
	cum := make([]uint64, 0, cap(ents)+1)
	ents = append(ents, s.ents[k:]...)
	ids = append(ids, s.ids[k:]...)
	cum = append(cum, s.cum[k:]...)
	s.mu.Lock()
	s.base, s.ents, s.ids, s.cum, s.startID = at, ents, ids, cum, startID
	s.mu.Unlock()
	return nil
}
