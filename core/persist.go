package core

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Journal is the durable store core writes through. It knows record ids,
// user types and bytes; persistence/journal satisfies it structurally.
//
// Append, Update and Delete call done exactly once, on another goroutine,
// after the record is written (and synced, when sync is set); done may be
// nil. Records of one goroutine are written in call order.
type Journal interface {
	Append(id uint64, userType uint16, payload []byte, sync bool, done func(error))
	Update(id uint64, userType uint16, payload []byte, sync bool, done func(error))
	Delete(id uint64, sync bool, done func(error))
	// Replay calls add for every live record recovered at open, in order,
	// and update for each update of it; payloads are valid during the call.
	Replay(add, update func(id uint64, userType uint16, payload []byte) error) error
	// MaxID is the largest record id the journal has seen.
	MaxID() uint64
}

// TxJournal groups records into transactions that commit atomically.
type TxJournal interface {
	AppendTx(txID, id uint64, userType uint16, payload []byte)
	UpdateTx(txID, id uint64, userType uint16, payload []byte)
	DeleteTx(txID, id uint64)
	// Commit writes the transaction's records as one unit and syncs.
	Commit(txID uint64, done func(error))
	Rollback(txID uint64, done func(error))
}

// MessageJournal is the store of durable messages.
type MessageJournal interface {
	Journal
	TxJournal
}

// LargeStore keeps message bodies above Config.LargeMessageThreshold in
// files of their own, so that big bodies do not bloat journal files and
// are never held whole in memory (largebody.go). persistence/large
// satisfies it. It streams: a body of any size costs a bounded buffer.
type LargeStore interface {
	// Write stores the body read from r until io.EOF under id and
	// returns its length; it is durable when Write returns nil. If r
	// (with any error but io.EOF) or the disk fails, nothing is left
	// under id.
	Write(id uint64, r io.Reader) (int64, error)
	// Open returns a reader of the body of id, from its start.
	Open(id uint64) (io.ReadCloser, error)
	// Size returns the length of the body of id.
	Size(id uint64) (int64, error)
	// Link stores the body of from under to as well, durably (a hard
	// link, or a copy); each can then be removed alone.
	Link(from, to uint64) error
	Remove(id uint64) error
	List() ([]uint64, error)
}

// DefaultLargeMessageThreshold is the body size above which a durable
// message's body goes to the large-message store.
const DefaultLargeMessageThreshold = 1 << 20

// User record types. They are part of the on-disk format.
const (
	recQueue         uint16 = 1 // bindings journal: a durable queue
	recDivert        uint16 = 2 // bindings journal: a divert made through the API
	recMessage       uint16 = 1 // message journal: a durable message and its queues
	recAckRef        uint16 = 2 // update: the message was acked on one queue (payload: queue id)
	recDeliveryCount uint16 = 3 // update: failed deliveries on one queue (queue id, count)
	recMark          uint16 = 7 // update: a consumer's mark on one queue (queue id, mark; Consumer.Mark)
)

// JournalMessageType is the user type of a message record in the
// message journal, for tools and replicas that count messages in it.
const JournalMessageType = recMessage

// ErrPersistence wraps a journal failure reported to a producer: its
// message was not confirmed.
var ErrPersistence = errors.New("core: journal write failed")

// persisted reports whether m must be written before it is confirmed:
// a durable message reaching at least one durable queue of a broker with
// a journal.
func (b *Broker) persisted(m *Message, qs []*Queue) bool {
	if !m.Durable || b.msgs == nil {
		return false
	}
	for _, q := range qs {
		if q.durable {
			return true
		}
	}
	return false
}

// journalMessage appends m for its durable queues; done follows the
// journal's contract.
func (b *Broker) journalMessage(m *Message, qs []*Queue, done func(error)) {
	ids := make([]uint64, 0, len(qs))
	for _, q := range qs {
		if q.durable {
			ids = append(ids, q.id)
		}
	}
	rec, err := b.messageRecord(m, ids)
	if err != nil {
		done(err)
		return
	}
	b.msgs.Append(m.ID, recMessage, rec, true, wrapPersist(done))
}

// messageRecord encodes m for the journal, first writing a large body to
// its own file (durably, so a synced record never names a missing file).
func (b *Broker) messageRecord(m *Message, ids []uint64) ([]byte, error) {
	m.durableRefs.Store(int32(len(ids)))
	switch {
	case m.lb != nil:
		// Streamed (ReceiveBody) and durable already: the journal takes
		// the file over.
		if err := b.ownBody(m); err != nil {
			return nil, err
		}
		m.lb.keep()
	case b.large != nil && len(m.Body) > b.largeThreshold:
		n, err := b.large.Write(m.ID, bytes.NewReader(m.Body))
		if err != nil {
			return nil, fmt.Errorf("%w: large message body: %w", ErrPersistence, err)
		}
		m.lb = keptBody(b.large, m.ID, n) // m.Body stays: it is not Streamed
	}
	return encodeMessage(m, ids), nil
}

// wrapPersist marks journal errors reported to producers.
func wrapPersist(done func(error)) func(error) {
	return func(err error) {
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrPersistence, err)
		}
		done(err)
	}
}

// persistSettled records that r left its queue for good (acked,
// dead-lettered, expired or its queue deleted): the message record is
// deleted with its last durable reference. Not synced: losing it in a
// crash means a redelivery, which at-least-once allows.
func (b *Broker) persistSettled(r *ref) {
	if !r.durable || b.msgs == nil {
		return
	}
	m := r.msg
	if m.durableRefs.Add(-1) <= 0 {
		if m.lb != nil {
			// The file goes once the delete is on disk: a crash before
			// that finds the record with its file.
			b.msgs.Delete(m.ID, true, func(err error) {
				if err == nil {
					err = b.large.Remove(m.ID)
				}
				b.logStoreErr(err)
			})
			return
		}
		b.msgs.Delete(m.ID, false, b.logStoreErr)
		return
	}
	b.msgs.Update(m.ID, recAckRef, binary.AppendUvarint(nil, r.q.id), false, b.logStoreErr)
}

// persistCount records r's failed delivery attempts so that the
// redelivered flag and max-delivery-attempts survive a restart.
func (b *Broker) persistCount(r *ref) {
	if !r.durable || b.msgs == nil {
		return
	}
	p := binary.AppendUvarint(nil, r.q.id)
	p = binary.AppendUvarint(p, uint64(r.failures))
	b.msgs.Update(r.msg.ID, recDeliveryCount, p, false, b.logStoreErr)
}

// persistMark records r's mark (Consumer.Mark); done follows
// SetClientRecord's contract.
func (b *Broker) persistMark(r *ref, mark uint32, done func(error)) {
	if !r.durable || b.msgs == nil {
		if done != nil {
			done(nil)
		}
		return
	}
	p := binary.AppendUvarint(nil, r.q.id)
	p = binary.AppendUvarint(p, uint64(mark))
	report := b.logStoreErr
	if done != nil {
		report = wrapPersist(done)
	}
	b.msgs.Update(r.msg.ID, recMark, p, done != nil, report)
}

func (b *Broker) logStoreErr(err error) {
	if err != nil {
		b.log.Error().Err(err).Msg("journal write failed")
	}
}

// persistQueue writes a durable queue's binding and waits for the sync,
// so no confirmed message can name a queue the journal does not know.
func (b *Broker) persistQueue(q *Queue) error {
	if b.bindings == nil || !q.durable {
		return nil
	}
	q.id = b.queueID.Add(1)
	ch := make(chan error, 1)
	b.bindings.Append(q.id, recQueue, encodeQueue(q), true, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		return fmt.Errorf("%w: queue %q: %w", ErrPersistence, q.name, err)
	}
	return nil
}

func (b *Broker) unpersistQueue(q *Queue) {
	if b.bindings != nil && q.id != 0 {
		b.bindings.Delete(q.id, true, b.logStoreErr)
	}
}

// persistDivert writes a divert made through the API to the bindings
// journal and waits for the sync, so that it is in force again after a
// restart; d.recID names its record. Without a bindings journal it
// lasts until the broker stops.
func (b *Broker) persistDivert(d *Divert) error {
	if b.bindings == nil {
		return nil
	}
	id := b.queueID.Add(1) // one id space for the bindings journal's records
	ch := make(chan error, 1)
	b.bindings.Append(id, recDivert, encodeDivert(d), true, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		return fmt.Errorf("%w: divert %q: %w", ErrPersistence, d.Name, err)
	}
	d.recID = id
	return nil
}

// unpersistDivert deletes a divert's record and waits for the sync.
func (b *Broker) unpersistDivert(d Divert) error {
	if b.bindings == nil || d.recID == 0 {
		return nil
	}
	ch := make(chan error, 1)
	b.bindings.Delete(d.recID, true, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		return fmt.Errorf("%w: divert %q: %w", ErrPersistence, d.Name, err)
	}
	return nil
}

// recover rebuilds durable queues from the bindings journal and their
// messages from the message journal, and keeps the diverts made through
// the API in b.apiDiverts for New to install.
func (b *Broker) recover() (RecoveryStats, error) {
	start := time.Now()
	var st RecoveryStats
	byID := make(map[uint64]*Queue)
	if b.bindings != nil {
		b.queueID.Store(b.bindings.MaxID())
		err := b.bindings.Replay(func(id uint64, ut uint16, p []byte) error {
			if ut == recDivert {
				d, err := decodeDivert(p)
				if err != nil {
					return err
				}
				d.recID = id
				b.apiDiverts = append(b.apiDiverts, d)
				return nil
			}
			if ut != recQueue {
				return fmt.Errorf("%w: bindings record type %d", errCorruptRecord, ut)
			}
			rec, err := decodeQueue(p)
			if err != nil {
				return err
			}
			q, err := b.restoreQueue(rec)
			if err != nil {
				return err
			}
			q.id = id
			byID[id] = q
			st.Queues++
			return nil
		}, func(uint64, uint16, []byte) error { return nil })
		if err != nil {
			return st, fmt.Errorf("core: recovering bindings: %w", err)
		}
	}
	if b.msgs == nil {
		return st, nil
	}
	b.msgID.Store(b.msgs.MaxID())
	// A message's record comes with its updates; collect them, then
	// enqueue when the next message starts (or at the end).
	type pending struct {
		m      *Message
		queues []uint64
		counts map[uint64]uint32
		marks  map[uint64]uint32
	}
	var cur *pending
	now := time.Now()
	var orphans []uint64
	largeIDs := make(map[uint64]bool)
	cursors := make(map[uint64]pageCursor)
	flush := func() {
		if cur == nil {
			return
		}
		var live int32
		for _, qid := range cur.queues {
			if byID[qid] != nil {
				live++
			}
		}
		cur.m.durableRefs.Store(live)
		if live == 0 {
			orphans = append(orphans, cur.m.ID)
		}
		for _, qid := range cur.queues {
			if q := byID[qid]; q != nil {
				q.restore(cur.m, cur.counts[qid], cur.marks[qid], now)
				st.Messages++
			}
		}
		cur = nil
	}
	err := b.msgs.Replay(func(id uint64, ut uint16, p []byte) error {
		flush()
		if ut == recRetained {
			return b.restoreRetained(id, p)
		}
		if ut == recDuplicateID {
			return b.restoreDup(id, p)
		}
		if ut == recClientRecord {
			return b.restoreClientRecord(id, p)
		}
		if ut == recPageCursor {
			qid, c, err := decodeCursor(p)
			if err != nil {
				return err
			}
			if old, ok := cursors[qid]; ok {
				// Superseded in the same transaction that wrote c; the
				// delete may not have been replayed yet.
				orphans = append(orphans, old.id)
			}
			c.id = id
			cursors[qid] = c
			return nil
		}
		if ut != recMessage {
			return fmt.Errorf("%w: message record type %d", errCorruptRecord, ut)
		}
		m, qs, err := decodeMessage(p)
		if err != nil {
			return err
		}
		if m.lb != nil {
			if b.large == nil {
				return fmt.Errorf("%w: message %d has its body in the large-message store, which is not configured", errCorruptRecord, id)
			}
			// By reference: the body stays in its file.
			size, err := b.large.Size(id)
			if err != nil {
				return fmt.Errorf("core: body of large message %d: %w", id, err)
			}
			m.lb = keptBody(b.large, id, size)
			largeIDs[id] = true
		}
		cur = &pending{m: m, queues: qs}
		return nil
	}, func(id uint64, ut uint16, p []byte) error {
		if cur == nil {
			return fmt.Errorf("%w: update %d of record %d without a message", errCorruptRecord, ut, id)
		}
		d := &decoder{b: p}
		switch ut {
		case recAckRef:
			qid := d.uvarint()
			for i, x := range cur.queues {
				if x == qid {
					cur.queues = append(cur.queues[:i], cur.queues[i+1:]...)
					break
				}
			}
		case recDeliveryCount:
			qid, n := d.uvarint(), d.uvarint()
			if cur.counts == nil {
				cur.counts = make(map[uint64]uint32)
			}
			cur.counts[qid] = uint32(n)
		case recMark:
			qid, n := d.uvarint(), d.uvarint()
			if cur.marks == nil {
				cur.marks = make(map[uint64]uint32)
			}
			cur.marks[qid] = uint32(n)
		default:
			return fmt.Errorf("%w: update type %d", errCorruptRecord, ut)
		}
		return d.err
	})
	flush()
	if err != nil {
		return st, fmt.Errorf("core: recovering messages: %w", err)
	}
	for _, id := range orphans {
		b.msgs.Delete(id, false, b.logStoreErr)
	}
	for _, id := range b.staleRecords {
		b.msgs.Delete(id, false, b.logStoreErr)
	}
	b.staleRecords = nil
	if err := b.recoverPages(byID, cursors, &st, largeIDs); err != nil {
		return st, err
	}
	if b.large != nil {
		// Bodies no live record names: written before a crash cut off
		// their record, or left when a delete outran the file removal.
		ids, err := b.large.List()
		if err != nil {
			return st, fmt.Errorf("core: listing large messages: %w", err)
		}
		for _, m := range b.retained.byAddr {
			if m.lb != nil {
				size, err := b.large.Size(m.lb.id)
				if err != nil {
					return st, fmt.Errorf("core: body of retained large message %d: %w", m.lb.id, err)
				}
				m.lb.size = size
				largeIDs[m.lb.id] = true
			}
		}
		for _, id := range ids {
			if !largeIDs[id] {
				b.logStoreErr(b.large.Remove(id))
			}
		}
	}
	st.Duration = time.Since(start)
	return st, nil
}

// RecoveryStats says what a broker restored from its journals at start.
type RecoveryStats struct {
	Queues   int           // durable queues and subscriptions
	Messages int           // message references put back on queues
	Paged    int           // messages found in page stores
	Duration time.Duration // time spent replaying
}

// restoreQueue recreates a durable queue (and its address) from its
// binding, without writing it again. A selector that no longer parses
// (it did when it was written) stops recovery rather than letting the
// subscription take messages it did not select.
func (b *Broker) restoreQueue(rec queueRecord) (*Queue, error) {
	sel, err := parseSelector(rec.selector)
	if err != nil {
		return nil, fmt.Errorf("%w: queue %q: %w", errCorruptRecord, rec.name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if rec.routing == Anycast {
		a := b.addressLocked(rec.address, true)
		q := b.newQueueLocked(rec.name, rec.address, Anycast, true, false, "")
		a.anycast = q
		b.bumpLocked()
		return q, nil
	}
	q := b.newQueueLocked(rec.name, rec.address, Multicast, true, false, rec.clientID)
	q.filter = sel
	q.subscriber, q.subKnown = rec.subscriber, rec.subKnown
	b.watchReadsLocked(q)
	b.bindSubscriptionLocked(q)
	return q, nil
}

// restore puts a recovered message back on q with its delivery count
// and mark.
func (q *Queue) restore(m *Message, failures, mark uint32, now time.Time) {
	r := &ref{msg: m, q: q, durable: true, failures: failures, mark: mark, recovered: true}
	q.mu.Lock()
	q.addLocked(r, now) // no consumers yet: nothing to dispatch
	moves := q.evictedLocked(nil)
	q.mu.Unlock()
	q.b.carryOut(moves)
}
