package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Paging. A queue whose address-full-policy is PAGE and that is over its
// limit (or whose broker is over its memory budget) writes new durable
// messages to its page store instead of holding them, and keeps doing so
// until the store is drained: the store holds the newest messages, in
// order, behind everything in memory. A depage goroutine per paging queue
// reads them back as consumers make room; each batch is journaled
// (as ordinary message records of this queue) in one transaction with
// the store's new read position, so after a crash every paged message is
// either still in the store past the journaled position or in the
// journal, never both and never neither.
//
// A paged durable message is confirmed once the page store has synced
// it. Non-durable messages never touch the disk: over the budget they are
// dropped (counted), as with DROP.

// recPageCursor is a message-journal record: a paging queue's read
// position in its page store (queue id, store generation, position).
const recPageCursor uint16 = 5

// Depage thresholds: a paging queue reads back when fewer than
// depageLowCount messages are ready in memory, in batches of up to
// depageBatch messages and depageBatchBytes that fit what room there is
// (depageLimitsLocked). A queue reads back while the
// broker is under depageBudgetFrac of its budget, or while the queue
// holds less than depageFloor bytes (estimated, see memSize), so every paging queue makes progress
// however full memory is (the floor bounds the overshoot per queue).
const (
	depageLowCount   = 2000
	depageBatch      = 1000
	depageBatchBytes = 4 << 20
	depageBudgetFrac = 0.9
	depageFloor      = 256 << 10
	depageRetry      = 50 * time.Millisecond
)

// pageState is a paging queue's store and read position. Guarded by the
// queue's mu, except store's own methods (safe for concurrent use).
type pageState struct {
	store    PageStore
	name     string
	gen      uint64
	readPos  uint64 // next record to read back
	count    int64  // records in the store past readPos
	bytes    int64  // their body bytes
	cursorID uint64 // journal record of the durable read position; 0 = none yet
	kick     chan struct{}
}

// pageName names a queue's page store: its queue id and a generation,
// new each time the queue starts paging.
func pageName(qid, gen uint64) string {
	return "q" + strconv.FormatUint(qid, 10) + "-" + strconv.FormatUint(gen, 10)
}

func parsePageName(name string) (qid, gen uint64, ok bool) {
	a, b, found := strings.Cut(strings.TrimPrefix(name, "q"), "-")
	if !found || !strings.HasPrefix(name, "q") {
		return 0, 0, false
	}
	qid, err1 := strconv.ParseUint(a, 10, 64)
	gen, err2 := strconv.ParseUint(b, 10, 64)
	return qid, gen, err1 == nil && err2 == nil
}

// newGen returns a page store generation unique across restarts.
func (b *Broker) newGen() uint64 {
	for {
		last := b.pageGen.Load()
		g := max(uint64(time.Now().UnixNano()), last+1)
		if b.pageGen.CompareAndSwap(last, g) {
			return g
		}
	}
}

// canPage reports whether q can page m: a durable message on a durable
// queue of a broker with a journal and a pager. A message whose body is
// in the large-message store is paged by reference (pageRecord).
func (q *Queue) canPage(m *Message) bool {
	return q.durable && m.Durable && q.b.msgs != nil && q.b.pager != nil
}

// page appends m to q's page store, opening one if q is not paging yet.
// It returns the store, whose Sync confirms m.
func (q *Queue) page(m *Message) (PageStore, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted {
		return nil, nil
	}
	pg := q.pg
	if pg == nil {
		gen := q.b.newGen()
		name := pageName(q.id, gen)
		st, err := q.b.pager.Open(name)
		if err != nil {
			return nil, fmt.Errorf("%w: opening page store %s: %w", ErrPersistence, name, err)
		}
		pg = &pageState{store: st, name: name, gen: gen, readPos: st.Start(), kick: make(chan struct{}, 1)}
		q.startPagingLocked(pg)
	}
	rec, err := q.b.pageRecord(m)
	if err != nil {
		return nil, err
	}
	if err := pg.store.Append(rec); err != nil {
		return nil, fmt.Errorf("%w: page store %s: %w", ErrPersistence, pg.name, err)
	}
	pg.count++
	pg.bytes += int64(len(m.Body))
	q.stats.enqueued.Add(1)
	q.stats.depth.Add(1)
	q.stats.paged.Add(1)
	return pg.store, nil
}

// pageRecord encodes m for a page store. A message whose body is in the
// large-message store is paged by reference: the record is a copy under
// a fresh id, with a link to the body under that id, which the record
// owns (the message's own file goes with the message, which other queues
// may hold); read back, the copy keeps that id (depage), and its file
// goes with its journal record.
func (b *Broker) pageRecord(m *Message) ([]byte, error) {
	if m.lb == nil {
		return encodeMessage(m, nil), nil
	}
	id := b.msgID.Add(1)
	if err := b.large.Link(m.lb.id, id); err != nil {
		return nil, fmt.Errorf("%w: paging a large message body: %w", ErrPersistence, err)
	}
	c := m.shallowCopy()
	c.ID, c.Body = id, nil
	c.lb = keptBody(b.large, id, m.Size())
	return encodeMessage(c, nil), nil
}

// startPagingLocked makes pg q's page store and starts its depage
// goroutine, which the broker waits for on Close.
func (q *Queue) startPagingLocked(pg *pageState) {
	q.pg = pg
	q.paging.Store(true)
	q.b.log.Info().Str("queue", q.name).Str("store", pg.name).Msg("queue paging to disk")
	q.b.wg.Add(1)
	go q.depageLoop(pg)
}

// kickDepageLocked wakes the depage goroutine after a change that may
// let it read back (an ack, new credit).
func (q *Queue) kickDepageLocked() {
	if q.pg != nil {
		select {
		case q.pg.kick <- struct{}{}:
		default:
		}
	}
}

// wantDepageLocked reports whether q should read messages back now.
func (q *Queue) wantDepageLocked() bool {
	if q.nready >= depageLowCount {
		return false
	}
	if max := q.maxBytes.Load(); max > 0 && q.bytes.Load() >= max/2 {
		return false
	}
	return q.b.budgetRoom(depageBudgetFrac) || q.mem.Load() < depageFloor
}

// depageLimitsLocked sizes the next batch read back so that it fits:
// within the broker's budget while there is room, else within q's floor
// (at least one message, so a queue always moves). Every message costs
// at least msgOverhead+refOverhead in memory, which bounds the count.
func (q *Queue) depageLimitsLocked() (n, nbytes int) {
	room := int64(depageBatchBytes)
	if b := q.b; b.mem.max > 0 {
		if b.budgetRoom(depageBudgetFrac) {
			room = b.mem.max - b.mem.used.Load()
		} else {
			room = depageFloor - q.mem.Load()
		}
	}
	room = min(room, depageBatchBytes)
	n = int(min(room/(msgOverhead+refOverhead), depageBatch))
	return max(n, 1), int(max(room, 1))
}

// depageLoop reads pg back into q as room allows, until pg is drained
// (it then removes the store), q stops using it, or the broker closes.
// The goroutine owns the store: it closes it as it exits, and removes it
// unless the broker is closing with q still paging.
func (q *Queue) depageLoop(pg *pageState) {
	defer q.b.wg.Done()
	defer func() {
		q.mu.Lock()
		mine := q.pg == pg
		q.mu.Unlock()
		if mine {
			if err := pg.store.Close(); err != nil {
				q.b.log.Warn().Err(err).Str("store", pg.name).Msg("closing page store failed")
			}
			return
		}
		q.b.closePages(pg)
	}()
	t := time.NewTimer(depageRetry)
	defer t.Stop()
	var lastErrLog time.Time
	for {
		q.mu.Lock()
		mine := q.pg == pg
		want := mine && q.wantDepageLocked()
		q.mu.Unlock()
		if !mine {
			return
		}
		if want {
			drained, err := q.depage(pg)
			if drained {
				return
			}
			if err == nil {
				continue
			}
			if time.Since(lastErrLog) > time.Minute {
				lastErrLog = time.Now()
				q.b.log.Error().Err(err).Str("queue", q.name).Str("store", pg.name).
					Msg("reading paged messages back failed; retrying (logged at most once a minute)")
			}
		}
		t.Reset(depageRetry)
		select {
		case <-pg.kick:
		case <-t.C:
		case <-q.b.done:
			return
		}
	}
}

// depage reads one batch from pg and journals it with the new read
// position, then enqueues it. drained reports that pg is gone: emptied
// and removed, or dropped by q.
func (q *Queue) depage(pg *pageState) (drained bool, err error) {
	b := q.b
	q.mu.Lock()
	pos := pg.readPos
	n, nbytes := q.depageLimitsLocked()
	q.mu.Unlock()
	recs, next, err := pg.store.Read(pos, n, nbytes)
	if err != nil {
		return false, err
	}
	if len(recs) == 0 {
		q.mu.Lock()
		if q.pg != pg || pg.count > 0 {
			q.mu.Unlock()
			return q.pg != pg, nil
		}
		q.pg = nil
		q.paging.Store(false)
		q.mu.Unlock()
		b.log.Info().Str("queue", q.name).Msg("queue paged back in: no more messages on disk")
		return true, nil
	}
	msgs := make([]*Message, len(recs))
	tx := b.txID.Add(1)
	ids := []uint64{q.id}
	for i, rec := range recs {
		m, _, err := decodeMessage(rec)
		if err != nil {
			b.msgs.Rollback(tx, nil)
			return false, fmt.Errorf("page store %s: %w", pg.name, err)
		}
		if m.lb != nil {
			// Paged by reference (pageRecord): a fresh id already,
			// the one its body's file has.
			size, err := b.large.Size(m.ID)
			if err != nil {
				b.msgs.Rollback(tx, nil)
				return false, fmt.Errorf("page store %s: body of large message %d: %w", pg.name, m.ID, err)
			}
			m.lb = keptBody(b.large, m.ID, size)
		} else {
			// A fresh id: other queues may hold (or have paged) the
			// same message under its first id.
			m.ID = b.msgID.Add(1)
		}
		jr, err := b.messageRecord(m, ids)
		if err != nil {
			b.msgs.Rollback(tx, nil)
			return false, err
		}
		b.msgs.AppendTx(tx, m.ID, recMessage, jr)
		msgs[i] = m
	}
	cursor := b.msgID.Add(1)
	b.msgs.AppendTx(tx, cursor, recPageCursor, encodeCursor(q.id, pg.gen, next))
	if pg.cursorID != 0 {
		b.msgs.DeleteTx(tx, pg.cursorID)
	}
	ch := make(chan error, 1)
	b.msgs.Commit(tx, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		return false, fmt.Errorf("%w: journaling paged messages: %w", ErrPersistence, err)
	}

	now := time.Now()
	var moves []move
	q.mu.Lock()
	if q.pg != pg {
		// Purged or deleted meanwhile: the copies just journaled go too.
		q.mu.Unlock()
		for _, m := range msgs {
			if m.lb != nil {
				b.deleteWithBody(m.ID, m) // the record, then its file
				continue
			}
			b.msgs.Delete(m.ID, false, b.logStoreErr)
		}
		b.msgs.Delete(cursor, false, b.logStoreErr)
		return true, nil
	}
	pg.readPos = next
	pg.cursorID = cursor
	for _, m := range msgs {
		pg.count--
		pg.bytes -= int64(len(m.Body))
		q.stats.paged.Add(-1)
		q.stats.depth.Add(-1) // hold counts it again
		q.placeLocked(&ref{msg: m, q: q, durable: true}, now)
	}
	q.dirtyLocked()
	moves = q.dispatchLocked(now, moves)
	moves = q.evictedLocked(moves)
	q.mu.Unlock()
	b.carryOut(moves)
	if err := pg.store.Release(next); err != nil {
		b.log.Warn().Err(err).Str("store", pg.name).Msg("releasing read page files failed")
	}
	return false, nil
}

// dropPagesLocked forgets q's paged messages (purge, delete); the
// depage goroutine, which owns the store, removes it as it sees it is no
// longer q's.
func (q *Queue) dropPagesLocked() int64 {
	pg := q.pg
	if pg == nil {
		return 0
	}
	q.pg = nil
	q.paging.Store(false)
	q.stats.depth.Add(-pg.count)
	q.stats.paged.Add(-pg.count)
	n := pg.count
	pg.count = 0
	select {
	case pg.kick <- struct{}{}:
	default:
	}
	return n
}

// closePages closes and removes a store no queue uses, then forgets its
// journaled read position (in that order: a crash in between leaves a
// position naming no store, which recovery deletes).
func (b *Broker) closePages(pg *pageState) {
	if err := pg.store.Close(); err != nil {
		b.log.Warn().Err(err).Str("store", pg.name).Msg("closing page store failed")
	}
	if err := b.pager.Remove(pg.name); err != nil {
		b.log.Warn().Err(err).Str("store", pg.name).Msg("removing page store failed")
	}
	if pg.cursorID != 0 {
		b.msgs.Delete(pg.cursorID, false, b.logStoreErr)
	}
}

func encodeCursor(qid, gen, pos uint64) []byte {
	p := binary.AppendUvarint(nil, qid)
	p = binary.AppendUvarint(p, gen)
	return binary.AppendUvarint(p, pos)
}

type pageCursor struct {
	id, gen, pos uint64
}

func decodeCursor(p []byte) (qid uint64, c pageCursor, err error) {
	d := &decoder{b: p}
	qid, c.gen, c.pos = d.uvarint(), d.uvarint(), d.uvarint()
	return qid, c, d.err
}

// recoverPages reopens the page stores of durable queues at start: each
// resumes from its journaled read position. Stores of queues that no
// longer exist, or superseded by a newer generation, are removed, and
// positions naming no store are deleted.
func (b *Broker) recoverPages(byID map[uint64]*Queue, cursors map[uint64]pageCursor, st *RecoveryStats, largeIDs map[uint64]bool) error {
	if b.pager == nil {
		for _, c := range cursors {
			b.msgs.Delete(c.id, false, b.logStoreErr)
		}
		return nil
	}
	names, err := b.pager.List()
	if err != nil {
		return fmt.Errorf("core: listing page stores: %w", err)
	}
	// A queue's newest store is its live one: an older one was drained
	// or dropped before the newer was opened (its removal may have been
	// cut short by a crash).
	newest := make(map[uint64]uint64)
	for _, name := range names {
		if qid, gen, ok := parsePageName(name); ok && byID[qid] != nil {
			newest[qid] = max(newest[qid], gen)
		}
	}
	used := make(map[uint64]bool)
	for _, name := range names {
		qid, gen, ok := parsePageName(name)
		q := byID[qid]
		if !ok || q == nil || gen != newest[qid] {
			if err := b.pager.Remove(name); err != nil {
				return fmt.Errorf("core: removing stale page store %s: %w", name, err)
			}
			continue
		}
		c, hasCursor := cursors[qid]
		hasCursor = hasCursor && c.gen == gen
		b.pageGen.Store(max(b.pageGen.Load(), gen))
		store, err := b.pager.Open(name)
		if err != nil {
			return fmt.Errorf("core: page store %s: %w", name, err)
		}
		pg := &pageState{store: store, name: name, gen: gen, readPos: store.Start(), kick: make(chan struct{}, 1)}
		if hasCursor {
			pg.readPos = max(c.pos, pg.readPos)
			pg.cursorID = c.id
			used[qid] = true
		}
		for pos := pg.readPos; ; {
			recs, next, err := store.Read(pos, 4096, 16<<20)
			if err != nil {
				store.Close()
				return fmt.Errorf("core: page store %s: %w", name, err)
			}
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				m, _, err := decodeMessage(r)
				if err != nil {
					store.Close()
					return fmt.Errorf("core: page store %s: %w", name, err)
				}
				if m.lb != nil {
					largeIDs[m.ID] = true // paged by reference: the record owns it
					// Its id (pageRecord's) is no journal record's yet,
					// and becomes one when read back: never given again.
					if m.ID > b.msgID.Load() {
						b.msgID.Store(m.ID)
					}
				}
				pg.count++
				pg.bytes += int64(len(m.Body))
			}
			pos = next
		}
		if pg.count == 0 {
			b.closePages(pg)
			continue
		}
		q.stats.depth.Add(pg.count)
		q.stats.enqueued.Add(uint64(pg.count))
		q.stats.paged.Add(pg.count)
		st.Paged += int(pg.count)
		q.mu.Lock()
		q.startPagingLocked(pg)
		q.mu.Unlock()
	}
	for qid, c := range cursors {
		if !used[qid] {
			b.msgs.Delete(c.id, false, b.logStoreErr)
		}
	}
	return nil
}

// errBlocked: a BLOCK queue is over its limit; the sender waits for room.
var errBlocked = errors.New("core: address blocked: over its memory limit")
