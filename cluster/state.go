package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/junctionmq/junction/core"
)

// A group's state is what its group broker's journals would hold on a
// single broker: for each namespace (the message journal and the
// bindings journal) the live records, with their updates, in the order
// they were appended. Every node applies every committed entry of every
// group to it, so a node that becomes a group's leader replays it into a
// new group broker exactly as a broker replays its journals at start.

// Namespaces of a group's records.
const (
	nsMessages uint8 = 0
	nsBindings uint8 = 1
	numNS            = 2
)

// Operations carried in an entry (see encodeOps).
const (
	opAppend uint8 = 1
	opUpdate uint8 = 2
	opDelete uint8 = 3
	// opTx starts a transaction: the next n operations apply together
	// (they are in the same entry, which is applied whole).
	opTx uint8 = 4
)

var errCorruptEntry = errors.New("cluster: corrupt entry")

// op is one journal operation of a group broker.
type op struct {
	kind    uint8
	ns      uint8
	id      uint64
	utype   uint16
	payload []byte
	n       uint32 // opTx: operations in the transaction
	// inEntry: payload is a slice of a committed entry's data (decodeOps),
	// not memory of its own.
	inEntry bool
}

// rec is a live record. Its payload, and its updates', may be slices of
// the entries they were applied from (inEntry): those entries are in
// the group's log, which holds them in memory until a snapshot lets it
// compact them, and snapshot gives every record still live then memory
// of its own. So a record pins nothing the log does not hold anyway,
// and a follower copies only the records that outlive a snapshot
// instead of every payload of every entry.
type rec struct {
	utype   uint16
	payload []byte
	updates []update
	seq     uint64 // append order
	inEntry bool   // payload or an update's is a slice of an entry
}

type update struct {
	utype   uint16
	payload []byte
}

// groupState is a group's applied state. It is written by the raft loop
// (apply) and read by an activation (replay), hence the mutex.
type groupState struct {
	mu      sync.Mutex
	recs    [numNS]map[uint64]*rec
	maxID   [numNS]uint64
	seq     uint64
	applied uint64 // raft index of the last entry applied
	bytes   int64  // payload bytes held
}

func newGroupState() *groupState {
	s := &groupState{}
	for i := range s.recs {
		s.recs[i] = make(map[uint64]*rec)
	}
	return s
}

// apply applies the operations of one committed entry. Operations that
// name a record that is not live are ignored: a group broker that lost
// its leadership mid-way may have proposed a delete whose append never
// committed, and every node must treat that the same way.
func (s *groupState) apply(ops []op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range ops {
		if o.ns >= numNS {
			continue
		}
		m := s.recs[o.ns]
		switch o.kind {
		case opAppend:
			if old := m[o.id]; old != nil {
				s.bytes -= old.size()
			}
			s.seq++
			r := &rec{utype: o.utype, payload: o.payload, seq: s.seq, inEntry: o.inEntry}
			m[o.id] = r
			s.bytes += r.size()
			s.maxID[o.ns] = max(s.maxID[o.ns], o.id)
		case opUpdate:
			if r := m[o.id]; r != nil {
				r.updates = append(r.updates, update{o.utype, o.payload})
				r.inEntry = r.inEntry || o.inEntry
				s.bytes += int64(len(o.payload))
			}
		case opDelete:
			if r := m[o.id]; r != nil {
				s.bytes -= r.size()
				delete(m, o.id)
			}
		}
	}
}

// owned returns a copy of r whose payloads are memory of their own.
func (r *rec) owned() *rec {
	c := &rec{utype: r.utype, payload: slices.Clone(r.payload), seq: r.seq}
	if len(r.updates) > 0 {
		c.updates = make([]update, len(r.updates))
		for i, u := range r.updates {
			c.updates[i] = update{u.utype, slices.Clone(u.payload)}
		}
	}
	return c
}

func (r *rec) size() int64 {
	n := int64(len(r.payload))
	for _, u := range r.updates {
		n += int64(len(u.payload))
	}
	return n
}

// size returns the payload bytes of the live records: about the size
// of a snapshot.
func (s *groupState) size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// replay calls add for every live record of namespace ns in append
// order, and update for each of its updates, as core.Journal.Replay.
func (s *groupState) replay(ns uint8, add, upd func(id uint64, utype uint16, p []byte) error) error {
	s.mu.Lock()
	type idRec struct {
		id uint64
		r  *rec
	}
	live := make([]idRec, 0, len(s.recs[ns]))
	for id, r := range s.recs[ns] {
		live = append(live, idRec{id, r})
	}
	s.mu.Unlock()
	// Records are never changed in place once applied (updates are
	// appended to a fresh slice header under mu), so reading them
	// outside the lock is safe; an activation replays while nothing
	// else is applied to the group anyway (its own broker is not yet
	// running).
	slices.SortFunc(live, func(a, b idRec) int { return cmpU64(a.r.seq, b.r.seq) })
	for _, x := range live {
		s.mu.Lock()
		ups := x.r.updates
		s.mu.Unlock()
		if err := add(x.id, x.r.utype, x.r.payload); err != nil {
			return err
		}
		for _, u := range ups {
			if err := upd(x.id, u.utype, u.payload); err != nil {
				return err
			}
		}
	}
	return nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *groupState) maxIDOf(ns uint8) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxID[ns]
}

// stats returns the number of live message records and bindings, and
// the bytes the state holds. It counts: activations and the API ask
// rarely.
func (s *groupState) stats() (messages, bindings int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.recs[nsMessages] {
		if r.utype == core.JournalMessageType {
			messages++
		}
	}
	return messages, len(s.recs[nsBindings]), s.bytes
}

// Snapshot layout (little-endian, uvarints as uv):
//
//	u8 version (1)
//	uv applied index, uv seq
//	per namespace: uv maxID, uv record count, then per record in
//	append order: uv id, u16 utype, bytes payload, uv update count,
//	then per update: u16 utype, bytes payload
//
// where bytes is uv length + the bytes.
const snapshotVersion = 1

// snapshot encodes the state.
func (s *groupState) snapshot() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := make([]byte, 0, 64+s.bytes+int64(32*(len(s.recs[0])+len(s.recs[1]))))
	b = append(b, snapshotVersion)
	b = binary.AppendUvarint(b, s.applied)
	b = binary.AppendUvarint(b, s.seq)
	for ns := range s.recs {
		b = binary.AppendUvarint(b, s.maxID[ns])
		b = binary.AppendUvarint(b, uint64(len(s.recs[ns])))
		ids := make([]uint64, 0, len(s.recs[ns]))
		for id := range s.recs[ns] {
			ids = append(ids, id)
		}
		m := s.recs[ns]
		slices.SortFunc(ids, func(a, c uint64) int { return cmpU64(m[a].seq, m[c].seq) })
		for _, id := range ids {
			r := m[id]
			if r.inEntry {
				// The log may compact this record's entry once the
				// snapshot is made: the record takes its own copy. A
				// new rec, not a change to this one: an activation's
				// replay reads records outside mu.
				r = r.owned()
				m[id] = r
			}
			b = binary.AppendUvarint(b, id)
			b = binary.LittleEndian.AppendUint16(b, r.utype)
			b = appendBytes(b, r.payload)
			b = binary.AppendUvarint(b, uint64(len(r.updates)))
			for _, u := range r.updates {
				b = binary.LittleEndian.AppendUint16(b, u.utype)
				b = appendBytes(b, u.payload)
			}
		}
	}
	return b
}

// restore replaces the state with a snapshot's.
func (s *groupState) restore(p []byte) error {
	d := reader{b: p}
	if d.byte() != snapshotVersion {
		return fmt.Errorf("%w: snapshot version", errCorruptEntry)
	}
	ns := newGroupState()
	ns.applied = d.uvarint()
	ns.seq = d.uvarint()
	var seq uint64
	for i := range ns.recs {
		ns.maxID[i] = d.uvarint()
		n := d.uvarint()
		if n > uint64(len(d.b)) {
			return fmt.Errorf("%w: snapshot record count", errCorruptEntry)
		}
		for range n {
			id := d.uvarint()
			seq++
			r := &rec{utype: d.u16(), payload: d.bytes(), seq: seq}
			nu := d.uvarint()
			if nu > uint64(len(d.b)) {
				return fmt.Errorf("%w: snapshot update count", errCorruptEntry)
			}
			for range nu {
				r.updates = append(r.updates, update{d.u16(), d.bytes()})
			}
			if d.err != nil {
				return d.err
			}
			ns.recs[i][id] = r
			ns.bytes += r.size()
		}
	}
	if d.err != nil || len(d.b) != 0 {
		return fmt.Errorf("%w: snapshot", errCorruptEntry)
	}
	ns.seq = max(ns.seq, seq)
	s.mu.Lock()
	s.recs, s.maxID, s.seq, s.applied, s.bytes = ns.recs, ns.maxID, ns.seq, ns.applied, ns.bytes
	s.mu.Unlock()
	return nil
}

// Entry data layout (the Data of a normal raft entry):
//
//	u8  version (1)
//	uv  proposer node id, uv proposal id (the proposer's, to complete
//	    its callers; 0 = nobody waits)
//	uv  operation count, then per operation:
//	    u8 kind, u8 namespace, uv id, and by kind:
//	      append, update: u16 utype, bytes payload
//	      delete: nothing
//	      tx: uv number of operations that follow in the transaction
const entryVersion = 1

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// encodeOps encodes an entry.
func encodeOps(b []byte, proposer, proposal uint64, ops []op) []byte {
	b = append(b, entryVersion)
	b = binary.AppendUvarint(b, proposer)
	b = binary.AppendUvarint(b, proposal)
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for _, o := range ops {
		b = append(b, o.kind, o.ns)
		b = binary.AppendUvarint(b, o.id)
		switch o.kind {
		case opAppend, opUpdate:
			b = binary.LittleEndian.AppendUint16(b, o.utype)
			b = appendBytes(b, o.payload)
		case opTx:
			b = binary.AppendUvarint(b, uint64(o.n))
		}
	}
	return b
}

// entryHeader reads the proposer and proposal id at the head of an
// entry's data; k is 0 if they are not there.
func entryHeader(p []byte) (proposer, proposal uint64, k int) {
	if len(p) == 0 || p[0] != entryVersion {
		return 0, 0, 0
	}
	proposer, a := binary.Uvarint(p[1:])
	if a <= 0 {
		return 0, 0, 0
	}
	proposal, b := binary.Uvarint(p[1+a:])
	if b <= 0 {
		return 0, 0, 0
	}
	return proposer, proposal, 1 + a + b
}

// decodeOps decodes an entry's data. The payloads are slices of p, not
// copies (an entry's data is never changed once made): the group's
// state keeps them until its next snapshot (see rec).
func decodeOps(p []byte) (proposer, proposal uint64, ops []op, err error) {
	d := reader{b: p}
	if d.byte() != entryVersion {
		return 0, 0, nil, fmt.Errorf("%w: version", errCorruptEntry)
	}
	proposer = d.uvarint()
	proposal = d.uvarint()
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		return 0, 0, nil, fmt.Errorf("%w: operation count", errCorruptEntry)
	}
	ops = make([]op, 0, n)
	for range n {
		o := op{kind: d.byte(), ns: d.byte(), id: d.uvarint()}
		switch o.kind {
		case opAppend, opUpdate:
			o.utype = d.u16()
			o.payload = d.shared()
			o.inEntry = true
		case opDelete:
		case opTx:
			o.n = uint32(d.uvarint())
		default:
			return 0, 0, nil, fmt.Errorf("%w: operation kind %d", errCorruptEntry, o.kind)
		}
		if d.err != nil {
			return 0, 0, nil, d.err
		}
		ops = append(ops, o)
	}
	if len(d.b) != 0 {
		return 0, 0, nil, fmt.Errorf("%w: trailing bytes", errCorruptEntry)
	}
	return proposer, proposal, ops, nil
}

// reader decodes; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (d *reader) fail() {
	if d.err == nil {
		d.err = errCorruptEntry
	}
	d.b = nil
}

func (d *reader) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *reader) u16() uint16 {
	if len(d.b) < 2 {
		d.fail()
		return 0
	}
	v := binary.LittleEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

func (d *reader) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *reader) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := slices.Clone(d.b[:n])
	d.b = d.b[n:]
	return v
}

// shared is bytes without the copy: a slice of the reader's buffer
// (capped, so that an append to it cannot reach what follows).
func (d *reader) shared() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *reader) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	v := string(d.b[:n])
	d.b = d.b[n:]
	return v
}
