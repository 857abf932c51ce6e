package raftlog

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/junctionmq/junction/persistence/journal"
)

// Log is the durable Raft log of one node: the logs, hard states and
// snapshots of many groups in one journal (one WAL, one fsync per Save).
// See the package doc.
type Log struct {
	cfg     Config
	j       *journal.Journal
	snapDir string

	mu     sync.Mutex // guards groups
	groups map[uint64]*Storage

	// wmu serialises writers (Save, the record phase of CreateSnapshot,
	// Compact): records reach the journal in the order the in-memory
	// storages change. The fields below are owned by its holder.
	wmu    sync.Mutex
	nextID uint64
	buf    []byte
	ops    []op
	plans  []plan
	batch  batch

	fmu    sync.Mutex
	failed error // sticky; wraps ErrFailed
	closed atomic.Bool

	closeOnce sync.Once
	closeErr  error

	saves, saveSyncs, savedEntries, savedBytes atomic.Uint64
	saveNanos                                  atomic.Int64
	snapWrites, snapReadErrors                 atomic.Uint64
}

// Update is what one raft Ready (or MsgStorageAppend) asks a group to
// persist. The entries are kept by reference after Save returns and must
// not be mutated (raft does not); the snapshot's data is written to its
// file and not kept; the hard state is copied.
type Update struct {
	Group     uint64
	HardState *pb.HardState // nil: unchanged
	Entries   []*pb.Entry
	Snapshot  *pb.Snapshot // nil or index 0: none
}

// Open opens (creating if needed) the log in cfg.Dir: it recovers the
// journal, rebuilds every group's Storage from its records, checks that
// each group's snapshot file is present and matches its record, removes
// orphan snapshot files and stale records, and returns once that cleanup
// is durable. A recovered log that breaks an invariant is refused with a
// *CorruptionError.
func Open(cfg Config) (*Log, error) {
	if err := cfg.ensureDefaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	l := &Log{cfg: cfg, snapDir: cfg.Dir + "/snap", groups: map[uint64]*Storage{}}
	l.batch.init()
	for _, d := range []string{cfg.Dir + "/wal", l.snapDir} {
		if err := cfg.FS.MkdirAll(d); err != nil {
			return nil, fmt.Errorf("raftlog: %w", err)
		}
	}
	jc := cfg.Journal
	jc.Dir, jc.FS, jc.FileSize = cfg.Dir+"/wal", cfg.FS, cfg.FileSize
	jc.MaxRecordSize = int(cfg.FileSize - journalOverhead)
	jc.Recovery = journal.Strict
	j, err := journal.Open(jc)
	if err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	l.j = j
	if err := l.recover(); err != nil {
		j.Close()
		return nil, err
	}
	l.nextID = j.MaxID() + 1
	ents := 0
	for _, s := range l.groups {
		ents += len(s.ents)
	}
	cfg.Logger.Info().Int("groups", len(l.groups)).Int("entries", ents).Dur("took", time.Since(start)).Msg("raftlog: opened")
	return l, nil
}

func (l *Log) recover() error {
	rec := map[uint64]*recGroup{}
	get := func(g uint64) *recGroup {
		r := rec[g]
		if r == nil {
			r = &recGroup{group: g}
			rec[g] = r
		}
		return r
	}
	err := l.j.Load(func(id uint64, ut uint16, p []byte, ups []journal.Update) error {
		if len(ups) > 0 {
			return fmt.Errorf("raftlog: record %d has updates; not a raft log journal", id)
		}
		switch ut {
		case recEntry:
			g, e, err := decodeEntry(p)
			if err != nil {
				return err
			}
			get(g).entry(id, e)
		case recHardState:
			g, hs, err := decodeHardState(p)
			if err != nil {
				return err
			}
			get(g).hardState(id, hs)
		case recSnapshot:
			g, m, installed, err := decodeSnapshot(p)
			if err != nil {
				return err
			}
			get(g).snapshot(id, m, installed)
		case recStart:
			g, at, reset, err := decodeStart(p)
			if err != nil {
				return err
			}
			get(g).start(id, at, reset)
		default:
			return fmt.Errorf("raftlog: record %d has unknown type %d", id, ut)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("raftlog: recover: %w", err)
	}
	var stale []uint64
	keep := map[string]bool{}
	for g, r := range rec {
		s, err := r.finish(l)
		if err != nil {
			return err
		}
		if s.snap.index != 0 {
			f, err := l.openSnapFile(g, &s.snap)
			if err != nil {
				return &CorruptionError{Group: g, Reason: fmt.Sprintf("snapshot at index %d: %v", s.snap.index, err)}
			}
			f.Close()
			keep[l.snapPath(g, &s.snap)] = true
		}
		l.groups[g] = s
		stale = append(stale, r.stale...)
	}
	// Orphan snapshot files: written before a crash cut off their record,
	// or replaced by a newer snapshot before their removal.
	names, err := l.cfg.FS.List(l.snapDir)
	if err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	removed := 0
	for _, n := range names {
		if name := l.snapDir + "/" + n; isSnapFile(n) && !keep[name] {
			if err := l.cfg.FS.Remove(name); err != nil {
				return fmt.Errorf("raftlog: remove orphan snapshot: %w", err)
			}
			removed++
		}
	}
	if removed > 0 {
		if err := l.cfg.FS.SyncDir(l.snapDir); err != nil {
			return fmt.Errorf("raftlog: %w", err)
		}
	}
	// Stale records (superseded entries, hard states, snapshots, starts
	// whose deletes had not reached the disk) would hold journal files
	// forever; recovery already ignores them.
	if len(stale) > 0 {
		l.batch.reset(len(stale) + 1)
		for _, id := range stale {
			l.j.Delete(id, false, l.batch.doneFn)
		}
		l.j.Sync(l.batch.doneFn)
		if err := l.batch.wait(); err != nil {
			return fmt.Errorf("raftlog: delete stale records: %w", err)
		}
	}
	return nil
}

// recGroup rebuilds one group from its live records in journal order (the
// order they were written). See "Recovery" in the package doc.
type recGroup struct {
	group   uint64
	base    entryRef
	ents    []*pb.Entry
	ids     []uint64
	hs      *pb.HardState
	hsID    uint64
	snap    *snapMeta
	snapID  uint64
	startID uint64
	stale   []uint64
	err     error
}

func (r *recGroup) corrupt(format string, args ...any) {
	if r.err == nil {
		r.err = &CorruptionError{Group: r.group, Reason: fmt.Sprintf(format, args...)}
	}
}

// dropFrom marks ents[k:] stale and cuts them.
func (r *recGroup) dropFrom(k int) {
	r.stale = append(r.stale, r.ids[k:]...)
	r.ents, r.ids = r.ents[:k], r.ids[:k]
}

func (r *recGroup) entry(id uint64, e *pb.Entry) {
	i := e.GetIndex()
	if i <= r.base.index {
		r.stale = append(r.stale, id) // below the compaction point
		return
	}
	if n := len(r.ents); n > 0 {
		first := r.ents[0].GetIndex()
		switch last := first + uint64(n) - 1; {
		case i > last+1:
			r.corrupt("entry %d follows entry %d", i, last)
			return
		case i < first:
			r.dropFrom(0)
		default:
			r.dropFrom(int(i - first)) // writing entry i discards entries >= i
		}
	}
	r.ents = append(r.ents, e)
	r.ids = append(r.ids, id)
}

func (r *recGroup) start(id uint64, at entryRef, reset bool) {
	switch {
	case reset:
		r.dropFrom(0)
	case at.index < r.base.index:
		r.stale = append(r.stale, id)
		return
	default:
		k := 0
		for k < len(r.ents) && r.ents[k].GetIndex() <= at.index {
			if r.ents[k].GetIndex() == at.index && r.ents[k].GetTerm() != at.term {
				r.corrupt("entry %d has term %d, compaction point says %d", at.index, r.ents[k].GetTerm(), at.term)
			}
			k++
		}
		r.stale = append(r.stale, r.ids[:k]...)
		r.ents, r.ids = r.ents[k:], r.ids[k:]
		// The log may start above at.index+1 here: a later compaction's
		// deletes can reach the disk before the delete of this (then
		// superseded) START. The later START fixes the base; finish
		// refuses the log if none does.
	}
	r.base = at
	if r.startID != 0 {
		r.stale = append(r.stale, r.startID)
	}
	r.startID = id
}

func (r *recGroup) hardState(id uint64, hs *pb.HardState) {
	if r.hsID != 0 {
		r.stale = append(r.stale, r.hsID)
	}
	r.hs, r.hsID = hs, id
}

func (r *recGroup) snapshot(id uint64, m *snapMeta, installed bool) {
	if r.snapID != 0 {
		r.stale = append(r.stale, r.snapID)
	}
	r.snap, r.snapID = m, id
	if installed {
		// As the reset START written after it (which may be lost).
		r.dropFrom(0)
		r.base = entryRef{m.index, m.term}
		if r.startID != 0 {
			r.stale = append(r.stale, r.startID)
			r.startID = 0
		}
	}
}

func (r *recGroup) finish(l *Log) (*Storage, error) {
	if r.err != nil {
		return nil, r.err
	}
	if len(r.ents) > 0 && r.ents[0].GetIndex() != r.base.index+1 {
		return nil, &CorruptionError{Group: r.group, Reason: fmt.Sprintf("log starts at %d, compaction point is %d", r.ents[0].GetIndex(), r.base.index)}
	}
	last := r.base.index + uint64(len(r.ents))
	var snapIdx uint64
	if r.snap != nil {
		snapIdx = r.snap.index
	}
	switch {
	case r.base.index > snapIdx:
		return nil, &CorruptionError{Group: r.group, Reason: fmt.Sprintf("entries up to %d compacted, snapshot covers %d", r.base.index, snapIdx)}
	case snapIdx > last:
		return nil, &CorruptionError{Group: r.group, Reason: fmt.Sprintf("snapshot at %d, last entry %d", snapIdx, last)}
	case r.hs != nil && r.hs.GetCommit() > last:
		return nil, &CorruptionError{Group: r.group, Reason: fmt.Sprintf("commit index %d, last entry %d", r.hs.GetCommit(), last)}
	}
	if r.snap != nil && snapIdx > r.base.index {
		if t := r.ents[snapIdx-r.base.index-1].GetTerm(); t != r.snap.term {
			return nil, &CorruptionError{Group: r.group, Reason: fmt.Sprintf("snapshot at %d has term %d, entry has %d", snapIdx, r.snap.term, t)}
		}
	} else if r.snap != nil && r.snap.term != r.base.term {
		return nil, &CorruptionError{Group: r.group, Reason: fmt.Sprintf("snapshot at %d has term %d, compaction point has %d", snapIdx, r.snap.term, r.base.term)}
	}
	s := newStorage(l, r.group)
	s.base, s.ents, s.ids = r.base, r.ents, r.ids
	s.cum = make([]uint64, 1, len(r.ents)+1)
	for _, e := range r.ents {
		s.cum = append(s.cum, s.cum[len(s.cum)-1]+uint64(proto.Size(e)))
	}
	s.hs, s.hsID = r.hs, r.hsID
	if s.hs.GetCommit() < snapIdx {
		// A snapshot covers only committed entries; the hard state's
		// commit may be older (see the package doc), or missing if a
		// crash cut the Save that installed the snapshot, and raft
		// refuses a commit index below its first index.
		if s.hs == nil {
			s.hs = &pb.HardState{}
		}
		s.hs.Commit = new(snapIdx)
	}
	if r.snap != nil {
		s.snap, s.snapID = *r.snap, r.snapID
	}
	s.startID, s.persisted = r.startID, true
	return s, nil
}

// Storage returns the raft.Storage of group, creating an empty one if the
// group is unknown. The pointer is stable for the Log's life.
func (l *Log) Storage(group uint64) *Storage {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.groups[group]
	if s == nil {
		s = newStorage(l, group)
		l.groups[group] = s
	}
	return s
}

// Groups returns the groups with state on disk, sorted.
func (l *Log) Groups() []uint64 {
	l.mu.Lock()
	ss := make([]*Storage, 0, len(l.groups))
	for _, s := range l.groups {
		ss = append(ss, s)
	}
	l.mu.Unlock()
	var gs []uint64
	for _, s := range ss {
		s.mu.Lock()
		if s.persisted {
			gs = append(gs, s.group)
		}
		s.mu.Unlock()
	}
	slices.Sort(gs)
	return gs
}

// MaxEntrySize returns the largest entry data Save accepts.
func (l *Log) MaxEntrySize() int { return l.cfg.MaxEntrySize }

func (l *Log) usable() error {
	if l.closed.Load() {
		return ErrClosed
	}
	l.fmu.Lock()
	defer l.fmu.Unlock()
	return l.failed
}

// fail records err as the Log's sticky failure and returns it (wrapping
// ErrFailed).
func (l *Log) fail(err error) error {
	if l.closed.Load() && errors.Is(err, journal.ErrClosed) {
		return ErrClosed
	}
	l.fmu.Lock()
	defer l.fmu.Unlock()
	if l.failed == nil {
		l.failed = fmt.Errorf("%w: %w", ErrFailed, err)
		l.cfg.Logger.Error().Err(err).Msg("raftlog: write failed; the log refuses further writes")
	}
	return l.failed
}

func (l *Log) newID() uint64 {
	id := l.nextID
	l.nextID++
	return id
}

func (l *Log) removeSnapFile(group uint64, m *snapMeta) {
	// A leftover file is harmless (Open removes orphans), so a failure is
	// only logged.
	if err := l.cfg.FS.Remove(l.snapPath(group, m)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		l.cfg.Logger.Warn().Err(err).Uint64("group", group).Msg("raftlog: remove replaced snapshot file")
	}
}

// maxKeptBuf bounds the encoding buffer kept between Saves.
const maxKeptBuf = 4 << 20

// op is one journal call of a Save: an ADD of buf[start:end] or a DELETE.
type op struct {
	id         uint64
	utype      uint16
	start, end int
	del        bool
}

// plan is what Save will do to one group, decided before anything is
// written.
type plan struct {
	s        *Storage
	snap     *snapMeta // installed snapshot, or nil
	snapData []byte
	base     entryRef // the log's compaction point after the snapshot
	snapID   uint64
	startID  uint64
	ents     []*pb.Entry // appended after the first keep entries
	keep     int
	entID    uint64 // record id of ents[0]; the others follow
	hs       *pb.HardState
	hsID     uint64
	oldSnap  snapMeta
}

func hardStateEqual(a, b *pb.HardState) bool {
	return a.GetTerm() == b.GetTerm() && a.GetVote() == b.GetVote() && a.GetCommit() == b.GetCommit()
}

// Save persists everything of one raft-loop pass, for many groups, as one
// journal batch with one fdatasync, and then applies it to the groups'
// Storages in raft's order (snapshot, entries with suffix truncation, hard
// state). It returns once the batch is durable, with one exception that
// raft.MustSync allows: if no Update carries entries or a snapshot and no
// hard state changes its term or vote, the records are written without an
// fsync (a commit index alone may be lost to a power failure; see the
// package doc). An installed snapshot's data is written to its own file,
// durably, before the batch.
//
// Invalid input (ErrEntryTooLarge, ErrGap, ErrDuplicateGroup,
// raft.ErrSnapOutOfDate) is refused before anything is written. An I/O
// error fails the Log (ErrFailed): the node must stop. Save is meant to be
// called by one goroutine, the raft loop; concurrent calls (and
// CreateSnapshot, Compact) are serialised.
func (l *Log) Save(us []Update) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	t0 := time.Now()
	plans, needSync, err := l.plan(us)
	if err != nil {
		return err
	}
	for i := range plans {
		if p := &plans[i]; p.snap != nil {
			if err := l.writeSnapFile(p.s.group, p.snap, p.snapData); err != nil {
				return l.fail(err)
			}
		}
	}
	ops, nents, nbytes, err := l.encode(plans)
	if err != nil {
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	l.batch.reset(len(ops))
	for i, o := range ops {
		sync := needSync && i == len(ops)-1
		if o.del {
			l.j.Delete(o.id, sync, l.batch.doneFn)
		} else {
			l.j.Append(o.id, o.utype, l.buf[o.start:o.end], sync, l.batch.doneFn)
		}
	}
	if err := l.batch.wait(); err != nil {
		return l.fail(err)
	}
	for i := range plans {
		l.apply(&plans[i])
	}
	for i := range plans {
		if p := &plans[i]; p.snap != nil && p.oldSnap.index != 0 {
			l.removeSnapFile(p.s.group, &p.oldSnap)
		}
	}
	clear(plans) // drop references to the entries
	if cap(l.buf) > maxKeptBuf {
		l.buf = nil
	}
	l.saves.Add(1)
	if needSync {
		l.saveSyncs.Add(1)
	}
	l.savedEntries.Add(uint64(nents))
	l.savedBytes.Add(uint64(nbytes))
	l.saveNanos.Add(int64(time.Since(t0)))
	return nil
}

// plan validates us against the groups' current state.
func (l *Log) plan(us []Update) ([]plan, bool, error) {
	plans := l.plans[:0]
	needSync := false
	for i := range us {
		u := &us[i]
		s := l.Storage(u.Group)
		for k := range plans {
			if plans[k].s == s {
				return nil, false, fmt.Errorf("%w: %d", ErrDuplicateGroup, u.Group)
			}
		}
		p := plan{s: s, base: s.base, keep: -1}
		vlen := len(s.ents)
		if !raft.IsEmptySnap(u.Snapshot) {
			md := u.Snapshot.GetMetadata()
			if s.snap.index != 0 && s.snap.index >= md.GetIndex() {
				return nil, false, raft.ErrSnapOutOfDate
			}
			p.snap = &snapMeta{index: md.GetIndex(), term: md.GetTerm(), cs: cloneConfState(md.GetConfState())}
			p.snapData = u.Snapshot.GetData()
			p.base = entryRef{md.GetIndex(), md.GetTerm()}
			p.oldSnap = s.snap
			vlen = 0
			needSync = true
		}
		if ents := u.Entries; len(ents) > 0 {
			for k, e := range ents {
				if e.GetIndex() != ents[0].GetIndex()+uint64(k) {
					return nil, false, fmt.Errorf("%w: group %d: entry %d at position %d after %d", ErrGap, u.Group, e.GetIndex(), k, ents[0].GetIndex())
				}
				if len(e.GetData()) > l.cfg.MaxEntrySize {
					return nil, false, fmt.Errorf("%w: group %d: entry %d has %d bytes, max %d", ErrEntryTooLarge, u.Group, e.GetIndex(), len(e.GetData()), l.cfg.MaxEntrySize)
				}
			}
			first := p.base.index + 1
			if last := ents[0].GetIndex() + uint64(len(ents)) - 1; last >= first {
				if ents[0].GetIndex() < first { // compacted already: skip, as MemoryStorage.Append
					ents = ents[first-ents[0].GetIndex():]
				}
				off := ents[0].GetIndex() - first
				if off > uint64(vlen) {
					return nil, false, fmt.Errorf("%w: group %d: append at %d, last index %d", ErrGap, u.Group, ents[0].GetIndex(), p.base.index+uint64(vlen))
				}
				p.ents, p.keep = ents, int(off)
				needSync = true
			}
		}
		if hs := u.HardState; hs != nil && (s.hs == nil || !hardStateEqual(hs, s.hs)) {
			p.hs = proto.Clone(hs).(*pb.HardState)
			if hs.GetTerm() != s.hs.GetTerm() || hs.GetVote() != s.hs.GetVote() {
				needSync = true
			}
		}
		if p.snap != nil || p.ents != nil || p.hs != nil {
			plans = append(plans, p)
		}
	}
	l.plans = plans
	return plans, needSync, nil
}

// encode assigns record ids and lays out the batch: every group's adds in
// raft's order (snapshot and its START, entries, hard state), then the
// deletes of what they supersede, entries from the highest index down.
func (l *Log) encode(plans []plan) (ops []op, nents, nbytes int, err error) {
	ops, buf := l.ops[:0], l.buf[:0]
	add := func(utype uint16, start int) uint64 {
		id := l.newID()
		ops = append(ops, op{id: id, utype: utype, start: start, end: len(buf)})
		return id
	}
	for i := range plans {
		p := &plans[i]
		if p.snap != nil {
			start := len(buf)
			if buf, err = appendSnapshotRecord(buf, p.s.group, p.snap, true); err != nil {
				return nil, 0, 0, err
			}
			p.snapID = add(recSnapshot, start)
			start = len(buf)
			buf = appendStartRecord(buf, p.s.group, p.base, true)
			p.startID = add(recStart, start)
		}
		for k, e := range p.ents {
			start := len(buf)
			buf = appendEntryRecord(buf, p.s.group, e)
			if id := add(recEntry, start); k == 0 {
				p.entID = id
			}
			nbytes += len(e.GetData())
		}
		nents += len(p.ents)
		if p.hs != nil {
			start := len(buf)
			buf = appendHardStateRecord(buf, p.s.group, p.hs)
			p.hsID = add(recHardState, start)
		}
	}
	del := func(id uint64) {
		if id != 0 {
			ops = append(ops, op{id: id, del: true})
		}
	}
	for i := range plans {
		p := &plans[i]
		s := p.s
		switch {
		case p.snap != nil:
			for k := len(s.ids) - 1; k >= 0; k-- {
				del(s.ids[k])
			}
			del(s.startID)
			del(s.snapID)
		case p.ents != nil:
			for k := len(s.ids) - 1; k >= p.keep; k-- {
				del(s.ids[k])
			}
		}
		if p.hs != nil {
			del(s.hsID)
		}
	}
	l.ops, l.buf = ops, buf
	return ops, nents, nbytes, nil
}

// apply makes a durable plan visible to raft. Log.wmu held.
func (l *Log) apply(p *plan) {
	s := p.s
	var sizes []uint64
	if len(p.ents) > 0 {
		sizes = make([]uint64, len(p.ents))
		for k, e := range p.ents {
			sizes[k] = uint64(proto.Size(e))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.snap != nil {
		s.base, s.ents, s.ids, s.cum = p.base, nil, nil, []uint64{0}
		s.snap, s.snapID, s.startID = *p.snap, p.snapID, p.startID
	}
	if p.ents != nil {
		k := p.keep
		if k < len(s.ents) {
			// Full slice expressions: slices raft got from Entries still
			// reference the old tail, so it must not be overwritten.
			s.ents, s.ids, s.cum = s.ents[:k:k], s.ids[:k:k], s.cum[:k+1:k+1]
		}
		s.ents = append(s.ents, p.ents...)
		for n, size := range sizes {
			s.ids = append(s.ids, p.entID+uint64(n))
			s.cum = append(s.cum, s.cum[len(s.cum)-1]+size)
		}
	}
	if p.hs != nil {
		s.hs, s.hsID = p.hs, p.hsID
	}
	s.persisted = true
}

// Close closes the journal. Storages stay readable (from memory; snapshot
// data no longer); writes fail with ErrClosed. Close is idempotent.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.wmu.Lock()
		defer l.wmu.Unlock()
		l.closed.Store(true)
		if err := l.j.Close(); err != nil {
			l.closeErr = fmt.Errorf("raftlog: %w", err)
		}
	})
	return l.closeErr
}

// batch waits for the completions of one journal batch. Its done func is
// allocated once per Log.
type batch struct {
	pending atomic.Int64
	mu      sync.Mutex
	err     error
	ch      chan struct{}
	doneFn  func(error)
}

func (b *batch) init() {
	b.ch = make(chan struct{}, 1)
	b.doneFn = b.done
}

func (b *batch) reset(n int) {
	b.mu.Lock()
	b.err = nil
	b.mu.Unlock()
	b.pending.Store(int64(n))
}

func (b *batch) done(err error) {
	if err != nil {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	if b.pending.Add(-1) == 0 {
		b.ch <- struct{}{}
	}
}

func (b *batch) wait() error {
	<-b.ch
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
