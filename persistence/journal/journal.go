package journal

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
)

type itemKind uint8

const (
	kindRecord  itemKind = iota // one ADD/UPDATE/DELETE
	kindUnit                    // committed tx or compaction copy: unit records + COMMIT
	kindBarrier                 // sync if needed, run a reclaim pass, then complete
)

// item is one queued request. Payloads of kindRecord live in the queue's
// arena; units own their records.
type item struct {
	kind       itemKind
	typ        recType
	utype      uint16
	id         uint64
	start, end int // payload in arena
	unit       []record
	txid       uint64
	copyOf     uint64 // compaction copy: the entry's last LSN when read (0 = not a copy)
	sync       bool
	done       func(error)
	nbytes     int
}

type txBuf struct {
	recs  []record
	bytes int
	err   error
}

// Journal is a durable, append-only record journal. See the package doc.
type Journal struct {
	cfg  Config
	lock io.Closer

	// Queue. Protected by qmu.
	qmu       sync.Mutex
	space     *sync.Cond // signalled when queue space frees or on close/failure
	q         []item
	arena     []byte
	pendRecs  int
	pendBytes int
	closing   bool
	failed    error // sticky: first write/sync error
	kick      chan struct{}

	// Transactions being built. Protected by txmu.
	txmu sync.Mutex
	txs  map[uint64]*txBuf

	// Index and accounting. Protected by smu; mutated only by the writer.
	smu   sync.Mutex
	st    *state
	stats Stats // counters; protected by smu
	// Monitoring counters read by Stats, atomic so that the paths that
	// update them take no lock for it.
	appends  atomic.Uint64
	syncHist syncHist
	// writtenLSN: every record with LSN <= writtenLSN has been written.
	writtenLSN uint64
	activeSeq  uint64 // seq of the writer's active file

	// Ready files. Protected by rmu.
	rmu      sync.Mutex
	ready    []*segFile // sorted by seq
	nextSeq  uint64
	nextNum  int
	prepKick chan struct{}

	w          writer // owned by the writer goroutine
	reclaimReq atomic.Bool
	compacting atomic.Bool
	compactMu  sync.Mutex // serialises compaction runs

	loadMu sync.Mutex
	loaded []*loadRec // recovered records until Load succeeds; nil afterwards
	loadOK bool

	compCh    chan []completion
	stop      chan struct{} // closed by Close to stop the preparer and compactor
	wg        sync.WaitGroup
	writerWG  sync.WaitGroup
	compWG    sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

type completion struct {
	done func(error)
	err  error
}

// LockName is the journal's lock file in its directory.
const LockName = "LOCK"

// Open opens (creating if needed) the journal in cfg.Dir, takes its LOCK
// file (ErrLocked if another Journal holds it), recovers, and starts the
// writer. Recovered records are available through Load.
func Open(cfg Config) (*Journal, error) {
	if err := cfg.ensureDefaults(); err != nil {
		return nil, err
	}
	if err := cfg.FS.MkdirAll(cfg.Dir); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	lk, err := cfg.FS.Lock(cfg.Dir + "/" + LockName)
	if err != nil {
		return nil, err
	}
	j := &Journal{
		cfg:      cfg,
		lock:     lk,
		kick:     make(chan struct{}, 1),
		prepKick: make(chan struct{}, 1),
		txs:      map[uint64]*txBuf{},
		st:       newState(),
		compCh:   make(chan []completion, 256),
		stop:     make(chan struct{}),
		nextSeq:  1,
	}
	j.space = sync.NewCond(&j.qmu)
	if err := j.recover(); err != nil {
		j.closeAllFiles()
		lk.Close()
		return nil, err
	}
	j.wg.Add(1)
	go j.prepLoop()
	j.compWG.Add(1)
	go j.completeLoop()
	j.writerWG.Add(1)
	go j.writeLoop()
	j.kickPrep()
	return j, nil
}

// MaxID returns the largest record id seen in the journal (recovered or
// appended since). Ids are the caller's; use MaxID after Open to continue
// numbering.
func (j *Journal) MaxID() uint64 {
	j.smu.Lock()
	defer j.smu.Unlock()
	return j.st.maxID
}

// Load calls fn for every record recovered at Open that is live (added,
// not deleted; committed transactions applied), in the LSN order of their
// original ADD, with the updates applied after it in LSN order.
//
// payload, updates and their payloads are valid only until fn returns; fn
// must copy what it keeps. If fn returns an error, Load stops and returns it;
// Load may then be called again. After a Load that returns nil the recovered
// records are released and later calls return ErrLoaded. Load does not see
// records appended after Open.
func (j *Journal) Load(fn func(id uint64, userType uint16, payload []byte, updates []Update) error) error {
	j.loadMu.Lock()
	defer j.loadMu.Unlock()
	if j.loadOK {
		return ErrLoaded
	}
	for _, r := range j.loaded {
		if err := fn(r.id, r.utype, r.payload, r.updates); err != nil {
			return err
		}
	}
	j.loaded, j.loadOK = nil, true
	return nil
}

// Replay is Load with the updates flattened: add is called for each live
// record and update for each of its updates, in order, with only builtin
// types in the signature so that a consumer can declare it in its own
// port (core.Journal) without importing this package. The same ownership
// rules as Load apply.
func (j *Journal) Replay(add, update func(id uint64, userType uint16, payload []byte) error) error {
	return j.Load(func(id uint64, utype uint16, payload []byte, updates []Update) error {
		if err := add(id, utype, payload); err != nil {
			return err
		}
		for _, u := range updates {
			if err := update(id, u.UserType, u.Payload); err != nil {
				return err
			}
		}
		return nil
	})
}

func (j *Journal) kickWriter() {
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

func (j *Journal) kickPrep() {
	select {
	case j.prepKick <- struct{}{}:
	default:
	}
}

// fail completes done asynchronously with err (never from inside the call
// that received done).
func fail(done func(error), err error) {
	if done != nil {
		go done(err)
	}
}

// Append writes ADD(id). Ids are the caller's and must not be live.
//
// done is called exactly once, on a journal goroutine, never from inside
// Append, and must not block: with sync=true after the record and
// everything before it are fdatasync'ed; with sync=false after the record is
// written to the file (it becomes durable with the next synced batch or file
// roll). done may be nil. A nil error means the record is in the journal;
// ErrFailed, ErrClosed, ErrRecordTooLarge or ErrIDExists mean it is not.
//
// The payload is copied before Append returns.
//
// Back-pressure: when MaxPendingRecords or MaxPendingBytes are queued,
// Append blocks until the writer has drained the queue (or the journal is
// closed or failed). Callers that must not block should bound their own
// in-flight appends (for example protocol credit) below those limits, using
// Stats().PendingRecs as a signal.
func (j *Journal) Append(id uint64, userType uint16, payload []byte, sync bool, done func(error)) {
	j.enqueueRecord(recAdd, id, userType, payload, sync, done)
}

// Update writes UPDATE(id): payload is delivered with the record at
// recovery, after earlier updates. id must be live (else done(ErrNotFound)).
// Same contract as Append.
func (j *Journal) Update(id uint64, userType uint16, payload []byte, sync bool, done func(error)) {
	j.enqueueRecord(recUpdate, id, userType, payload, sync, done)
}

// Delete writes DELETE(id); the record and its updates are gone at
// recovery once this is durable. id must be live (else done(ErrNotFound)).
func (j *Journal) Delete(id uint64, sync bool, done func(error)) {
	j.enqueueRecord(recDelete, id, 0, nil, sync, done)
}

func (j *Journal) enqueueRecord(typ recType, id uint64, utype uint16, payload []byte, sync bool, done func(error)) {
	if len(payload) > j.cfg.MaxRecordSize {
		fail(done, ErrRecordTooLarge)
		return
	}
	n := encodedSize(len(payload))
	j.qmu.Lock()
	if err := j.waitSpaceLocked(n); err != nil {
		j.qmu.Unlock()
		fail(done, err)
		return
	}
	start := len(j.arena)
	j.arena = append(j.arena, payload...)
	j.q = append(j.q, item{kind: kindRecord, typ: typ, utype: utype, id: id, start: start, end: len(j.arena), sync: sync, done: done, nbytes: n})
	j.pendRecs++
	j.pendBytes += n
	j.qmu.Unlock()
	j.appends.Add(1)
	j.kickWriter()
}

// waitSpaceLocked blocks until n bytes fit in the queue. j.qmu must be held.
func (j *Journal) waitSpaceLocked(n int) error {
	for {
		if j.closing {
			return ErrClosed
		}
		if j.failed != nil {
			return fmt.Errorf("%w: %w", ErrFailed, j.failed)
		}
		if j.pendRecs == 0 || (j.pendRecs+1 <= j.cfg.MaxPendingRecords && j.pendBytes+n <= j.cfg.MaxPendingBytes) {
			return nil
		}
		j.space.Wait()
	}
}

func (j *Journal) enqueueItem(it item) {
	j.qmu.Lock()
	if err := j.waitSpaceLocked(it.nbytes); err != nil {
		j.qmu.Unlock()
		fail(it.done, err)
		return
	}
	j.q = append(j.q, it)
	j.pendRecs += max(1, len(it.unit))
	j.pendBytes += it.nbytes
	j.qmu.Unlock()
	j.kickWriter()
}

func (j *Journal) txAdd(txID uint64, typ recType, id uint64, utype uint16, payload []byte) {
	j.txmu.Lock()
	defer j.txmu.Unlock()
	tx := j.txs[txID]
	if tx == nil {
		tx = &txBuf{}
		j.txs[txID] = tx
	}
	if tx.err != nil {
		return
	}
	if len(payload) > j.cfg.MaxRecordSize {
		tx.err = ErrRecordTooLarge
		return
	}
	tx.bytes += encodedSize(len(payload))
	if tx.bytes > j.cfg.MaxPendingBytes || len(tx.recs) >= j.cfg.MaxPendingRecords {
		tx.err = ErrTxTooLarge
		return
	}
	tx.recs = append(tx.recs, record{typ: typ, id: id, txid: txID, utype: utype, payload: append([]byte(nil), payload...)})
}

// AppendTx adds ADD(id) to transaction txID. Transaction records are
// buffered in memory (payload copied) and written, with a COMMIT record, as
// one unit by Commit; they are never visible at recovery without their
// COMMIT. Errors (record too large) are reported by Commit.
func (j *Journal) AppendTx(txID, id uint64, userType uint16, payload []byte) {
	j.txAdd(txID, recAddTx, id, userType, payload)
}

// UpdateTx adds UPDATE(id) to transaction txID (see AppendTx).
func (j *Journal) UpdateTx(txID, id uint64, userType uint16, payload []byte) {
	j.txAdd(txID, recUpdateTx, id, userType, payload)
}

// DeleteTx adds DELETE(id) to transaction txID (see AppendTx).
func (j *Journal) DeleteTx(txID, id uint64) {
	j.txAdd(txID, recDeleteTx, id, 0, nil)
}

// Commit writes the transaction's records and a COMMIT record as one unit
// and always syncs before done(nil). If any UPDATE/DELETE targets an id that
// is not live (or an ADD an id that is), nothing is written and done gets
// ErrNotFound/ErrIDExists. Committing an unknown or empty transaction
// completes with nil and writes nothing. done follows Append's contract.
func (j *Journal) Commit(txID uint64, done func(error)) {
	j.txmu.Lock()
	tx := j.txs[txID]
	delete(j.txs, txID)
	j.txmu.Unlock()
	if tx == nil || len(tx.recs) == 0 {
		if tx != nil && tx.err != nil {
			fail(done, tx.err)
			return
		}
		fail(done, nil)
		return
	}
	if tx.err != nil {
		fail(done, tx.err)
		return
	}
	j.appends.Add(uint64(len(tx.recs)))
	unit := append(tx.recs, record{typ: recCommit, txid: txID})
	j.enqueueItem(item{kind: kindUnit, unit: unit, txid: txID, sync: true, done: done, nbytes: tx.bytes + recHeaderSize + 16})
}

// Rollback discards the buffered transaction; nothing was written, so
// nothing needs to be. done(nil) follows Append's contract.
func (j *Journal) Rollback(txID uint64, done func(error)) {
	j.txmu.Lock()
	delete(j.txs, txID)
	j.txmu.Unlock()
	fail(done, nil)
}

// Sync completes done after everything queued before it is durable and a
// reclaim pass has run.
func (j *Journal) Sync(done func(error)) {
	j.enqueueItem(item{kind: kindBarrier, sync: true, done: done})
}

// Stats returns a snapshot of the journal's counters.
func (j *Journal) Stats() Stats {
	j.smu.Lock()
	s := j.stats
	s.DataFiles = len(j.st.files)
	s.LiveRecords = len(j.st.index)
	s.LiveBytes = j.st.liveBytes
	for _, f := range j.st.files {
		s.TotalBytes += f.woff - segHeaderSize
	}
	j.smu.Unlock()
	j.rmu.Lock()
	s.ReadyFiles = len(j.ready)
	j.rmu.Unlock()
	s.Files = s.DataFiles + s.ReadyFiles
	s.Bytes = int64(s.Files) * j.cfg.FileSize // every file is preallocated to FileSize
	s.BatchRecords = s.Records
	s.Appends = j.appends.Load()
	j.syncHist.fill(&s)
	j.qmu.Lock()
	s.PendingRecs, s.PendingBytes = j.pendRecs, j.pendBytes
	j.qmu.Unlock()
	return s
}

// Fail makes the journal fail now, as a write error would, with cause as
// the reason: queued and later appends complete with ErrFailed wrapping
// cause, and nothing more is written (no file is prepared, removed,
// compacted or reclaimed, and Close seals nothing). A batch the writer is
// already writing may still complete. Whoever finds that this process may
// no longer write the directory calls it: the shared-store monitor, when
// the broker cannot prove it still holds the store, so that it never
// writes beside another live broker.
func (j *Journal) Fail(cause error) {
	j.setFailed(cause)
	j.kickWriter()
	j.kickPrep()
}

// Close completes queued appends (writing them), seals the active file,
// stops the journal's goroutines, closes its files and releases the lock.
// Appends after Close fail with ErrClosed. Close is idempotent; it returns
// the journal's failure cause, if any.
func (j *Journal) Close() error {
	j.closeOnce.Do(func() {
		close(j.stop)
		j.compactMu.Lock() // wait for a running compaction to stop
		j.compactMu.Unlock()
		j.qmu.Lock()
		j.closing = true
		j.space.Broadcast()
		j.qmu.Unlock()
		j.kickWriter()
		j.writerWG.Wait()
		close(j.compCh)
		j.compWG.Wait()
		j.wg.Wait()
		j.qmu.Lock()
		if j.failed != nil {
			j.closeErr = fmt.Errorf("%w: %w", ErrFailed, j.failed)
		}
		j.qmu.Unlock()
		j.closeAllFiles()
		if err := j.lock.Close(); err != nil && j.closeErr == nil {
			j.closeErr = err
		}
	})
	return j.closeErr
}

func (j *Journal) closeAllFiles() {
	seen := map[*segFile]bool{}
	j.smu.Lock()
	for _, f := range j.st.files {
		seen[f] = true
	}
	j.smu.Unlock()
	j.rmu.Lock()
	for _, f := range j.ready {
		seen[f] = true
	}
	j.rmu.Unlock()
	if j.w.active != nil {
		seen[j.w.active] = true
	}
	for f := range seen {
		if f.f != nil {
			f.f.Close()
		}
	}
}

func (j *Journal) completeLoop() {
	defer j.compWG.Done()
	for batch := range j.compCh {
		for _, c := range batch {
			c.done(c.err)
		}
	}
}

// sortLoaded orders recovered records by their original ADD LSN.
func sortLoaded(recs []*loadRec) {
	sort.Slice(recs, func(a, b int) bool { return recs[a].order < recs[b].order })
}
