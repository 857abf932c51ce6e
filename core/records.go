package core

import (
	"fmt"
	"sort"
	"strings"
)

// Client records
//
// A front-end keeps the state of a client that outlives its connections
// (an MQTT session: its expiry, its will, its subscriptions' options,
// the packet ids of QoS 2 publishes awaiting release) as client records:
// small values under string keys, per client id, journaled in the
// message journal like retained messages, so that they are exact after
// a restart and a crash. Core does not interpret them. Only a session
// holding the client id writes them (so one connection at a time); any
// session may read them through its own client id, and the broker lists
// the client ids that hold any, so that a front-end can find the
// sessions it must expire or resume after a restart.

// recClientRecord is the message journal's user type for a client
// record: str client id, str key, bytes value (codec.go's encoding).
const recClientRecord uint16 = 6

// clientRecords is the store: one map per client id, guarded by
// Broker.mu.
type clientRecords struct {
	byClient map[string]map[string]clientRecord
}

type clientRecord struct {
	id    uint64 // journal record; 0 without a journal
	value []byte
}

// ClientRecord is one record of a client.
type ClientRecord struct {
	Key   string
	Value []byte
}

func encodeClientRecord(clientID, key string, value []byte) []byte {
	b := make([]byte, 0, 8+len(clientID)+len(key)+len(value))
	b = appendStr(b, clientID)
	b = appendStr(b, key)
	return appendStr(b, string(value))
}

func decodeClientRecord(p []byte) (clientID, key string, value []byte, err error) {
	d := &decoder{b: p}
	clientID, key, value = d.str(), d.str(), d.bytes()
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	return clientID, key, value, d.err
}

// SetClientRecord keeps value under key among the records of the
// session's client id, replacing what was there; an empty value deletes
// the record. The broker's view changes at once; with a journal the
// record is written (and synced when done is not nil), and done gets the
// outcome once it is on disk; without one done is called at once. done
// may be nil (the write is then not waited for) and must not block. It
// fails with ErrClientIDRequired for a session without a client id.
func (s *Session) SetClientRecord(key string, value []byte, done func(error)) error {
	if s.opts.ClientID == "" {
		return ErrClientIDRequired
	}
	if err := s.check(); err != nil {
		return err
	}
	if rs := s.recordsRemote(); rs != nil {
		if done == nil {
			done = func(error) {}
		}
		rs.SetClientRecord(key, append([]byte(nil), value...), done)
		return nil
	}
	s.b.setClientRecord(s.opts.ClientID, key, value, done)
	return nil
}

// recordsRemote returns the cluster's side of the session's client
// records, or nil: a broker that is not an access broker keeps them
// itself, and so does an access broker whose Cluster does not keep them
// (RecordsCatalog): in its memory then, lost when it stops.
func (s *Session) recordsRemote() RecordsSession {
	if s.remote == nil {
		return nil
	}
	if _, ok := s.b.cluster.(RecordsCatalog); !ok {
		return nil
	}
	rs, _ := s.remote.(RecordsSession)
	return rs
}

func (b *Broker) setClientRecord(clientID, key string, value []byte, done func(error)) {
	value = append([]byte(nil), value...) // the caller's buffer may be reused
	var id uint64
	if b.msgs != nil && len(value) > 0 {
		id = b.msgID.Add(1)
	}
	b.mu.Lock()
	recs := b.records.byClient[clientID]
	old, had := recs[key]
	switch {
	case len(value) == 0:
		if had {
			delete(recs, key)
			if len(recs) == 0 {
				delete(b.records.byClient, clientID)
			}
		}
	default:
		if recs == nil {
			recs = make(map[string]clientRecord)
			b.records.byClient[clientID] = recs
		}
		recs[key] = clientRecord{id: id, value: value}
	}
	b.mu.Unlock()
	b.journalRecord(clientID, key, value, id, old.id, done)
}

// journalRecord writes a record's new value (id, when it has one) and
// deletes the one it replaces (oldID), reporting to done.
func (b *Broker) journalRecord(clientID, key string, value []byte, id, oldID uint64, done func(error)) {
	if b.msgs == nil || (id == 0 && oldID == 0) {
		if done != nil {
			done(nil)
		}
		return
	}
	sync := done != nil
	report := b.logStoreErr
	if done != nil {
		report = wrapPersist(done)
	}
	if id == 0 {
		b.msgs.Delete(oldID, sync, report)
		return
	}
	b.msgs.Append(id, recClientRecord, encodeClientRecord(clientID, key, value), sync, report)
	if oldID != 0 {
		// After the new one, so that a crash in between finds both and
		// recovery keeps the later.
		b.msgs.Delete(oldID, false, b.logStoreErr)
	}
}

// ClientRecords returns the records of the session's client id (copies,
// sorted by key); nil for a session without a client id or records. On
// a cluster node it fails (ErrUnavailable) when the records' group
// cannot be asked: no records and unknown records are not the same.
func (s *Session) ClientRecords() ([]ClientRecord, error) {
	if s.opts.ClientID == "" {
		return nil, nil
	}
	if s.recordsRemote() != nil {
		return s.b.cluster.(RecordsCatalog).ClientRecords(s.opts.ClientID)
	}
	return s.b.clientRecords(s.opts.ClientID), nil
}

// ClientRecordsOf returns the records of a client id (copies, sorted by
// key): a group broker's answer to RecordsCatalog.ClientRecords.
func (b *Broker) ClientRecordsOf(clientID string) []ClientRecord {
	return b.clientRecords(clientID)
}

func (b *Broker) clientRecords(clientID string) []ClientRecord {
	b.mu.RLock()
	recs := b.records.byClient[clientID]
	out := make([]ClientRecord, 0, len(recs))
	for k, r := range recs {
		out = append(out, ClientRecord{Key: k, Value: append([]byte(nil), r.value...)})
	}
	b.mu.RUnlock()
	if len(out) == 0 {
		return nil
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// ClearClientRecords deletes every record of the session's client id
// whose key begins with prefix ("" for all), as SetClientRecord deletes
// one; done, if not nil, is called once every delete is on disk.
func (s *Session) ClearClientRecords(prefix string, done func(error)) error {
	if s.opts.ClientID == "" {
		return ErrClientIDRequired
	}
	if err := s.check(); err != nil {
		return err
	}
	if rs := s.recordsRemote(); rs != nil {
		if done == nil {
			done = func(error) {}
		}
		rs.ClearClientRecords(prefix, done)
		return nil
	}
	b := s.b
	var ids []uint64
	b.mu.Lock()
	recs := b.records.byClient[s.opts.ClientID]
	for k, r := range recs {
		if strings.HasPrefix(k, prefix) {
			delete(recs, k)
			if r.id != 0 {
				ids = append(ids, r.id)
			}
		}
	}
	if recs != nil && len(recs) == 0 {
		delete(b.records.byClient, s.opts.ClientID)
	}
	b.mu.Unlock()
	if b.msgs == nil || len(ids) == 0 {
		if done != nil {
			done(nil)
		}
		return nil
	}
	report := b.logStoreErr
	if done != nil {
		report = wrapPersist(joinDone(len(ids), done))
	}
	for _, id := range ids {
		b.msgs.Delete(id, done != nil, report)
	}
	return nil
}

// ClientRecordHolders lists, sorted, the client ids that hold client
// records: after a restart, the sessions a front-end left behind.
func (b *Broker) ClientRecordHolders() []string {
	if rc, ok := b.cluster.(RecordsCatalog); ok {
		return rc.ClientRecordHolders()
	}
	b.mu.RLock()
	out := make([]string, 0, len(b.records.byClient))
	for id := range b.records.byClient {
		out = append(out, id)
	}
	b.mu.RUnlock()
	sort.Strings(out)
	return out
}

// restoreClientRecord takes a client record found at recovery; of two
// for one key (a crash between writing the new one and deleting the
// old), the later wins and the other is deleted.
func (b *Broker) restoreClientRecord(id uint64, p []byte) error {
	clientID, key, value, err := decodeClientRecord(p)
	if err != nil {
		return fmt.Errorf("%w: client record %d", errCorruptRecord, id)
	}
	recs := b.records.byClient[clientID]
	if recs == nil {
		recs = make(map[string]clientRecord)
		b.records.byClient[clientID] = recs
	}
	if old, ok := recs[key]; ok {
		if old.id > id {
			b.staleRecords = append(b.staleRecords, id)
			return nil
		}
		b.staleRecords = append(b.staleRecords, old.id)
	}
	recs[key] = clientRecord{id: id, value: append([]byte(nil), value...)}
	return nil
}

// recordOp is a client record written by a transaction (tx.go).
type recordOp struct {
	key   string
	value []byte
}

// SetClientRecord sets a client record of the session's client id as
// part of the transaction: it is written with the transaction's messages
// and acks, in the same journal transaction, and takes effect on Commit
// (in the order given) or not at all. An empty value deletes the record.
func (t *Tx) SetClientRecord(key string, value []byte) error {
	if t.done {
		return ErrTxClosed
	}
	if t.s.opts.ClientID == "" {
		return ErrClientIDRequired
	}
	t.records = append(t.records, recordOp{key: key, value: append([]byte(nil), value...)})
	return nil
}

// lastRecords returns the transaction's record writes with only the last
// one of each key, in the order given.
func (t *Tx) lastRecords() []recordOp {
	last := make(map[string]int, len(t.records))
	for i, op := range t.records {
		last[op.key] = i
	}
	out := t.records[:0]
	for i, op := range t.records {
		if last[op.key] == i {
			out = append(out, op)
		}
	}
	return out
}

// journalRecordsTx adds the transaction's records to journal transaction
// txID: each new value under a new record id, and the delete of the
// record it replaces. It returns the new ids (0 for a delete) and the
// replaced ones, for applyRecords.
func (t *Tx) journalRecordsTx(txID uint64) (ids []uint64, olds map[string]uint64) {
	b := t.s.b
	t.records = t.lastRecords()
	ids = make([]uint64, len(t.records))
	olds = make(map[string]uint64)
	b.mu.RLock()
	recs := b.records.byClient[t.s.opts.ClientID]
	for i, op := range t.records {
		if old, ok := recs[op.key]; ok && old.id != 0 {
			b.msgs.DeleteTx(txID, old.id)
			olds[op.key] = old.id
		}
		if len(op.value) > 0 {
			ids[i] = b.msgID.Add(1)
			b.msgs.AppendTx(txID, ids[i], recClientRecord, encodeClientRecord(t.s.opts.ClientID, op.key, op.value))
		}
	}
	b.mu.RUnlock()
	return ids, olds
}

// applyRecords makes a committed transaction's records visible; ids and
// olds are journalRecordsTx's (nil without a journal). A record of the
// same key written meanwhile by another goroutine of the session is
// replaced, and its journal record deleted.
func (t *Tx) applyRecords(ids []uint64, olds map[string]uint64) {
	if len(t.records) == 0 {
		return
	}
	t.records = t.lastRecords()
	b := t.s.b
	clientID := t.s.opts.ClientID
	var stale []uint64
	b.mu.Lock()
	recs := b.records.byClient[clientID]
	for i, op := range t.records {
		var id uint64
		if ids != nil {
			id = ids[i]
		}
		if cur, ok := recs[op.key]; ok && cur.id != 0 && cur.id != olds[op.key] {
			stale = append(stale, cur.id)
		}
		if len(op.value) == 0 {
			delete(recs, op.key)
			continue
		}
		if recs == nil {
			recs = make(map[string]clientRecord)
			b.records.byClient[clientID] = recs
		}
		recs[op.key] = clientRecord{id: id, value: op.value}
	}
	if recs != nil && len(recs) == 0 {
		delete(b.records.byClient, clientID)
	}
	b.mu.Unlock()
	for _, id := range stale {
		b.msgs.Delete(id, false, b.logStoreErr)
	}
	t.records = nil
}
