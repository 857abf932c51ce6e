package page

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/junctionmq/junction/persistence/fs"
)

const (
	flushSize        = 64 << 10 // write the append buffer once it holds this much
	maxKeepBuf       = 1 << 20  // drop a buffer grown past this after a flush
	minReadChunk     = 4 << 10
	defaultReadChunk = 1 << 20 // Read's chunk when maxBytes <= 0
	maxReadChunk     = 16 << 20
)

// segment is one segment file of a store.
type segment struct {
	num  uint64
	size int64 // bytes written to the file; final once the segment is sealed
}

// Store is one page store: an append-only sequence of records in segment
// files. It is safe for concurrent use. Its methods satisfy core.PageStore.
type Store struct {
	d       *Dir
	name    string
	dir     string
	fs      fs.FS
	segSize int64

	mu        sync.Mutex
	cond      sync.Cond     // wakes the sync goroutine (L is &mu)
	segs      []segment     // ascending consecutive numbers; the last is active. Protected by mu.
	f         fs.File       // write handle of the active segment. Protected by mu.
	buf       []byte        // active segment's bytes not yet written, from its size. Protected by mu.
	dirty     bool          // appended since the last sync began. Protected by mu.
	dirGen    uint64        // bumped when a segment file is created. Protected by mu.
	dirSynced uint64        // dirGen covered by the last directory sync. Protected by mu.
	syncing   bool          // the sync goroutine is doing I/O without mu. Protected by mu.
	toClose   []fs.File     // old write handles to close when that I/O ends. Protected by mu.
	waiters   []func(error) // pending Syncs. Protected by mu.
	relEnd    uint64        // position after the last record of the highest released segment. Protected by mu.
	err       error         // sticky failure, wraps ErrFailed. Protected by mu.
	closed    bool          // Protected by mu.
	loopDone  chan struct{} // closed when the sync goroutine exits

	rmu  sync.Mutex // serializes Read; protects rnum and rf
	rnum uint64     // segment rf reads
	rf   fs.File    // Read's own handle
}

func (d *Dir) newStore(name string, segs []segment, f fs.File) *Store {
	s := &Store{
		d: d, name: name, dir: d.storeDir(name), fs: d.fs, segSize: d.opts.SegmentSize,
		segs: segs, f: f, loopDone: make(chan struct{}),
	}
	s.cond.L = &s.mu
	return s
}

func (s *Store) segPath(num uint64) string { return s.dir + "/" + segName(num) }

// createStore makes a new store: its directory, segment 1 and, last, its
// marker.
func (d *Dir) createStore(name string) (*Store, error) {
	sdir := d.storeDir(name)
	if err := d.fs.MkdirAll(sdir); err != nil {
		return nil, err
	}
	// Leftovers of an interrupted Remove.
	if names, err := d.fs.List(sdir); err == nil {
		if err := removeFiles(d.fs, sdir, names); err != nil {
			return nil, err
		}
	}
	f, err := d.createSegment(sdir, 1)
	if err != nil {
		return nil, err
	}
	m, err := d.fs.Create(d.markerPath(name))
	if err == nil {
		err = m.Close()
	}
	if err == nil {
		err = d.fs.SyncDir(d.root)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	d.bytes.Add(headerSize)
	return d.newStore(name, []segment{{num: 1, size: headerSize}}, f), nil
}

// createSegment durably creates segment num holding only its header.
func (d *Dir) createSegment(sdir string, num uint64) (fs.File, error) {
	f, err := d.fs.Create(sdir + "/" + segName(num))
	if err != nil {
		return nil, err
	}
	_, err = f.WriteAt(appendHeader(nil, num), 0)
	if err == nil {
		err = f.Datasync()
	}
	if err == nil {
		err = d.fs.SyncDir(sdir)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Append writes rec after every record appended before. It only copies rec
// into a buffer (written out every 64 KiB or so), so it is cheap; the record
// is readable by Read at once and durable after a Sync. rec is not
// retained. A record larger than the segment size goes alone in its own
// segment.
func (s *Store) Append(rec []byte) error {
	if len(rec) > MaxRecord {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, len(rec))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return err
	}
	n := int64(recHeaderSize + len(rec))
	if end := s.segs[len(s.segs)-1].size + int64(len(s.buf)); end > headerSize && end+n > s.segSize {
		if err := s.rollLocked(); err != nil {
			return err
		}
	}
	s.buf = appendRecord(s.buf, rec)
	s.dirty = true
	s.d.bytes.Add(n)
	if len(s.buf) >= flushSize {
		return s.flushLocked()
	}
	return nil
}

func (s *Store) usableLocked() error {
	if s.closed {
		return ErrClosed
	}
	return s.err
}

// failLocked makes err the store's sticky failure (unless it already has
// one) and returns the sticky error.
func (s *Store) failLocked(err error) error {
	if s.err == nil {
		s.err = fmt.Errorf("%w: %q: %w", ErrFailed, s.name, err)
	}
	return s.err
}

// flushLocked writes the buffer to the active segment.
func (s *Store) flushLocked() error {
	if len(s.buf) == 0 {
		return nil
	}
	if s.err != nil {
		return s.err
	}
	last := &s.segs[len(s.segs)-1]
	if _, err := s.f.WriteAt(s.buf, last.size); err != nil {
		return s.failLocked(fmt.Errorf("write %s: %w", s.segPath(last.num), err))
	}
	last.size += int64(len(s.buf))
	if cap(s.buf) > maxKeepBuf {
		s.buf = nil
	} else {
		s.buf = s.buf[:0]
	}
	return nil
}

// rollLocked seals the active segment and starts the next one. The sealed
// segment is made durable first, so a segment file exists only when every
// earlier segment is complete on disk and only the last can be torn.
func (s *Store) rollLocked() error {
	if err := s.flushLocked(); err != nil {
		return err
	}
	num := s.segs[len(s.segs)-1].num
	if err := s.f.Datasync(); err != nil {
		return s.failLocked(fmt.Errorf("sync %s: %w", s.segPath(num), err))
	}
	f, err := s.fs.Create(s.segPath(num + 1))
	if err != nil {
		return s.failLocked(fmt.Errorf("create %s: %w", s.segPath(num+1), err))
	}
	if s.syncing {
		s.toClose = append(s.toClose, s.f) // the sync goroutine may be using it
	} else {
		s.f.Close()
	}
	s.f = f
	s.segs = append(s.segs, segment{num: num + 1})
	s.dirGen++
	s.buf = appendHeader(s.buf, num+1)
	s.d.bytes.Add(headerSize)
	return nil
}

// Sync calls done once every record appended before the call is durable,
// with nil, or with the error that prevented it (which also fails the
// store). Concurrent Syncs share one fdatasync. done runs on the store's
// sync goroutine (on a new goroutine, with ErrClosed, if the store is
// closed) and must not call Close.
func (s *Store) Sync(done func(error)) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		go done(ErrClosed)
		return
	}
	s.waiters = append(s.waiters, done)
	s.cond.Signal()
	s.mu.Unlock()
}

// syncLoop is the store's sync goroutine: it serves pending Syncs in
// batches until the store is closed and none are left.
func (s *Store) syncLoop() {
	defer close(s.loopDone)
	s.mu.Lock()
	for {
		for len(s.waiters) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.waiters) == 0 {
			s.mu.Unlock()
			return
		}
		batch := s.waiters
		s.waiters = nil
		err := s.syncLocked()
		s.mu.Unlock()
		for _, done := range batch {
			done(err)
		}
		s.mu.Lock()
	}
}

// syncLocked makes everything appended so far durable: flush, sync the
// directory if a segment was created, fdatasync the active segment. It is
// called with mu held and releases it during the I/O; only the sync
// goroutine, or Close after that goroutine exited, calls it.
func (s *Store) syncLocked() error {
	if s.err != nil {
		return s.err
	}
	if err := s.flushLocked(); err != nil {
		return err
	}
	f, gen, dirty := s.f, s.dirGen, s.dirty
	needDir := gen != s.dirSynced
	if !dirty && !needDir {
		return nil
	}
	s.dirty = false
	s.syncing = true
	s.mu.Unlock()
	var err error
	if needDir {
		if err = s.fs.SyncDir(s.dir); err != nil {
			err = fmt.Errorf("sync dir %s: %w", s.dir, err)
		}
	}
	if err == nil && dirty {
		if err = f.Datasync(); err != nil {
			err = fmt.Errorf("sync: %w", err)
		}
	}
	s.mu.Lock()
	s.syncing = false
	for _, c := range s.toClose {
		c.Close()
	}
	s.toClose = nil
	if err != nil {
		return s.failLocked(err)
	}
	s.dirSynced = gen
	return nil
}

// Start returns the position of the first record of the lowest segment.
func (s *Store) Start() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return makePos(s.segs[0].num, headerSize)
}

// Read returns up to max records from pos, in order, and the position after
// the last one. It stops after about maxBytes of payload (maxBytes <= 0: no
// byte limit) but returns at least one record if there is one, and may
// return fewer than max at the end of a segment. At the end of the store it
// returns no records and next == pos. The returned records are the
// caller's: they are never reused or written by the store. A record that
// fails its checks yields an error wrapping ErrCorrupt (after the good
// records before it have been returned by an earlier call). A position not
// in the store yields ErrPosition.
func (s *Store) Read(pos uint64, max, maxBytes int) (recs [][]byte, next uint64, err error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	at := pos
	for {
		num, off := splitPos(at)
		limit, last, moved, err := s.locate(at)
		if err != nil {
			return nil, pos, err
		}
		if moved != at {
			at = moved
			continue
		}
		if off < headerSize || off > limit {
			return nil, pos, fmt.Errorf("%w: %#x", ErrPosition, pos)
		}
		if off < limit {
			if max <= 0 {
				return nil, pos, nil
			}
			return s.readSeg(num, off, limit, max, maxBytes)
		}
		if last {
			return nil, pos, nil
		}
		at = makePos(num+1, headerSize)
	}
}

// locate returns the readable size of the segment of pos and whether it is
// the active one, flushing the buffer if the reader is at the written end.
// If pos is the end of the highest released segment, it returns the start
// of the first segment as moved (otherwise moved is pos).
func (s *Store) locate(pos uint64) (limit int64, last bool, moved uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return 0, false, pos, err
	}
	num, off := splitPos(pos)
	first := s.segs[0].num
	if num < first && pos == s.relEnd && pos != 0 {
		return 0, false, makePos(first, headerSize), nil
	}
	if num < first || num-first >= uint64(len(s.segs)) {
		return 0, false, pos, fmt.Errorf("%w: segment %d", ErrPosition, num)
	}
	i := int(num - first)
	last = i == len(s.segs)-1
	if last && len(s.buf) > 0 && off >= s.segs[i].size {
		if err := s.flushLocked(); err != nil {
			return 0, false, pos, err
		}
	}
	return s.segs[i].size, last, pos, nil
}

// readSeg reads records from [off, limit) of segment num. rmu is held.
func (s *Store) readSeg(num uint64, off, limit int64, max, maxBytes int) ([][]byte, uint64, error) {
	pos := makePos(num, off)
	f, err := s.readFile(num)
	if err != nil {
		return nil, pos, err
	}
	want := int64(defaultReadChunk)
	if maxBytes > 0 {
		want = min(int64(maxBytes), maxReadChunk) + recHeaderSize
	}
	want = min(max64(want, minReadChunk), maxReadChunk, limit-off)
	b := make([]byte, want)
	if err := s.readAt(f, num, b, off); err != nil {
		return nil, pos, err
	}
	var recs [][]byte
	var p, total int64
	for len(recs) < max && p < int64(len(b)) {
		at := off + p
		if limit-at < recHeaderSize {
			err = s.corrupt(num, at, "short record header")
			break
		}
		if int64(len(b))-p < recHeaderSize {
			break // the header straddles the chunk: next call
		}
		n := int64(binary.LittleEndian.Uint32(b[p:]))
		if n > limit-at-recHeaderSize {
			err = s.corrupt(num, at, "record extends past the end of the segment")
			break
		}
		if len(recs) > 0 && maxBytes > 0 && total+n > int64(maxBytes) {
			break
		}
		var rb []byte // the record with its header
		if end := p + recHeaderSize + n; end <= int64(len(b)) {
			rb = b[p:end:end]
		} else if len(recs) > 0 {
			break // straddles the chunk: next call
		} else {
			rb = make([]byte, recHeaderSize+n)
			if err = s.readAt(f, num, rb, at); err != nil {
				break
			}
		}
		if recordCRC(rb[0:4], rb[recHeaderSize:]) != binary.LittleEndian.Uint32(rb[4:]) {
			err = s.corrupt(num, at, "checksum mismatch")
			break
		}
		recs = append(recs, rb[recHeaderSize:])
		total += n
		p += recHeaderSize + n
	}
	if len(recs) == 0 && err != nil {
		return nil, pos, err
	}
	if p < int64(len(b))/2 && len(b) > flushSize {
		// Don't let a few records pin a large chunk.
		for i, r := range recs {
			recs[i] = append([]byte(nil), r...)
		}
	}
	return recs, makePos(num, off+p), nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func (s *Store) corrupt(num uint64, off int64, why string) error {
	return fmt.Errorf("%w: %s offset %d: %s", ErrCorrupt, s.segPath(num), off, why)
}

func (s *Store) readAt(f fs.File, num uint64, b []byte, off int64) error {
	n, err := f.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if errors.Is(err, io.EOF) {
		return s.corrupt(num, off+int64(n), "file shorter than recorded")
	}
	return fmt.Errorf("page: read %s: %w", s.segPath(num), err)
}

// readFile returns Read's handle on segment num. rmu is held.
func (s *Store) readFile(num uint64) (fs.File, error) {
	if s.rf != nil && s.rnum == num {
		return s.rf, nil
	}
	if s.rf != nil {
		s.rf.Close()
		s.rf = nil
	}
	f, err := s.fs.Open(s.segPath(num))
	if err != nil {
		return nil, fmt.Errorf("page: read: %w", err)
	}
	s.rf, s.rnum = f, num
	return f, nil
}

// Release deletes the segment files that hold only records before pos (the
// active segment is never deleted) and syncs the directory. Read still
// accepts the position after the last record of the highest deleted
// segment.
func (s *Store) Release(pos uint64) error {
	num, off := splitPos(pos)
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	var dead []segment
	for len(s.segs) > 1 {
		g := s.segs[0]
		if g.num > num || g.num == num && off < g.size {
			break
		}
		dead = append(dead, g)
		s.segs = s.segs[1:]
		s.relEnd = makePos(g.num, g.size)
	}
	s.mu.Unlock()
	if len(dead) == 0 {
		return nil
	}
	var freed int64
	var err error
	for _, g := range dead {
		if err = s.fs.Remove(s.segPath(g.num)); err != nil {
			break
		}
		freed += g.size
	}
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	s.d.bytes.Add(-freed)
	// Read's handle must not keep a deleted file's space allocated.
	s.rmu.Lock()
	if s.rf != nil && s.rnum <= dead[len(dead)-1].num {
		s.rf.Close()
		s.rf = nil
	}
	s.rmu.Unlock()
	if err != nil {
		s.mu.Lock()
		err = s.failLocked(fmt.Errorf("release: %w", err))
		s.mu.Unlock()
	}
	return err
}

// Close makes every appended record durable, completes pending Syncs (with
// nil on success), stops the sync goroutine and closes the files. It
// returns the store's failure, if any; a second Close returns ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.loopDone

	s.mu.Lock()
	err := s.syncLocked()
	s.f.Close()
	s.mu.Unlock()

	s.rmu.Lock()
	if s.rf != nil {
		s.rf.Close()
		s.rf = nil
	}
	s.rmu.Unlock()
	s.d.closed(s)
	return err
}
