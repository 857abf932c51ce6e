package raftlog

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"
)

// Journal user types of the four record kinds (see the package doc).
const (
	recEntry     uint16 = 1
	recHardState uint16 = 2
	recSnapshot  uint16 = 3
	recStart     uint16 = 4
)

const (
	entryHeaderSize     = 32
	hardStateRecordSize = 32
	snapshotHeaderSize  = 40
	startRecordSize     = 32

	// Entry record flags: which optional proto2 fields the entry had, so
	// that a recovered entry encodes (and sizes, for Entries' maxSize) the
	// same as the one raft handed to Save.
	entHasType = 1 << 0
	entHasData = 1 << 1

	startReset = 1 << 0
)

var le = binary.LittleEndian

func appendEntryRecord(b []byte, group uint64, e *pb.Entry) []byte {
	var h [entryHeaderSize]byte
	le.PutUint64(h[0:], group)
	le.PutUint64(h[8:], e.GetIndex())
	le.PutUint64(h[16:], e.GetTerm())
	le.PutUint32(h[24:], uint32(e.GetType()))
	if e.Type != nil {
		h[28] |= entHasType
	}
	if e.Data != nil {
		h[28] |= entHasData
	}
	b = append(b, h[:]...)
	return append(b, e.Data...)
}

// decodeEntry decodes an entry record; the entry's data is a copy.
func decodeEntry(p []byte) (group uint64, e *pb.Entry, err error) {
	if len(p) < entryHeaderSize {
		return 0, nil, fmt.Errorf("entry record of %d bytes", len(p))
	}
	group = le.Uint64(p[0:])
	e = &pb.Entry{Index: new(le.Uint64(p[8:])), Term: new(le.Uint64(p[16:]))}
	if p[28]&entHasType != 0 {
		e.Type = pb.EntryType(int32(le.Uint32(p[24:]))).Enum()
	}
	if p[28]&entHasData != 0 {
		e.Data = append(make([]byte, 0, len(p)-entryHeaderSize), p[entryHeaderSize:]...)
	}
	return group, e, nil
}

func appendHardStateRecord(b []byte, group uint64, hs *pb.HardState) []byte {
	var h [hardStateRecordSize]byte
	le.PutUint64(h[0:], group)
	le.PutUint64(h[8:], hs.GetTerm())
	le.PutUint64(h[16:], hs.GetVote())
	le.PutUint64(h[24:], hs.GetCommit())
	return append(b, h[:]...)
}

func decodeHardState(p []byte) (uint64, *pb.HardState, error) {
	if len(p) != hardStateRecordSize {
		return 0, nil, fmt.Errorf("hard state record of %d bytes", len(p))
	}
	return le.Uint64(p[0:]), &pb.HardState{Term: new(le.Uint64(p[8:])), Vote: new(le.Uint64(p[16:])), Commit: new(le.Uint64(p[24:]))}, nil
}

// snapMeta is what the Log knows of a group's snapshot: its metadata and
// the size and CRC of its data, which lives in a file of its own.
type snapMeta struct {
	index, term uint64
	cs          *pb.ConfState
	size        int64
	crc         uint32
}

func (m *snapMeta) metadata() *pb.SnapshotMetadata {
	return &pb.SnapshotMetadata{Index: new(m.index), Term: new(m.term), ConfState: cloneConfState(m.cs)}
}

// cloneConfState returns a deep copy of cs with every field set (as
// pb.EnsureConfState, which mutates its argument).
func cloneConfState(cs *pb.ConfState) *pb.ConfState {
	if cs == nil {
		return pb.EnsureConfState(nil)
	}
	return pb.EnsureConfState(proto.Clone(cs).(*pb.ConfState))
}

// snapInstalled marks the SNAPSHOT record of a snapshot installed by Save:
// replaying it resets the group's log, like the START that follows it,
// so that a batch torn between the two still leaves a consistent log.
const snapInstalled = 1 << 0

func appendSnapshotRecord(b []byte, group uint64, m *snapMeta, installed bool) ([]byte, error) {
	cs, err := proto.Marshal(pb.EnsureConfState(m.cs))
	if err != nil {
		return b, err
	}
	var h [snapshotHeaderSize]byte
	le.PutUint64(h[0:], group)
	le.PutUint64(h[8:], m.index)
	le.PutUint64(h[16:], m.term)
	le.PutUint64(h[24:], uint64(m.size))
	le.PutUint32(h[32:], m.crc)
	if installed {
		h[36] |= snapInstalled
	}
	b = append(b, h[:]...)
	return append(b, cs...), nil
}

func decodeSnapshot(p []byte) (uint64, *snapMeta, bool, error) {
	if len(p) < snapshotHeaderSize {
		return 0, nil, false, fmt.Errorf("snapshot record of %d bytes", len(p))
	}
	m := &snapMeta{index: le.Uint64(p[8:]), term: le.Uint64(p[16:]), size: int64(le.Uint64(p[24:])), crc: le.Uint32(p[32:]), cs: &pb.ConfState{}}
	if err := proto.Unmarshal(p[snapshotHeaderSize:], m.cs); err != nil {
		return 0, nil, false, fmt.Errorf("snapshot record conf state: %w", err)
	}
	return le.Uint64(p[0:]), m, p[36]&snapInstalled != 0, nil
}

// entryRef is the (index, term) of the entry just before a group's first
// entry: raft's "dummy" entry, the compaction point.
type entryRef struct{ index, term uint64 }

func appendStartRecord(b []byte, group uint64, at entryRef, reset bool) []byte {
	var h [startRecordSize]byte
	le.PutUint64(h[0:], group)
	le.PutUint64(h[8:], at.index)
	le.PutUint64(h[16:], at.term)
	if reset {
		h[24] |= startReset
	}
	return append(b, h[:]...)
}

func decodeStart(p []byte) (group uint64, at entryRef, reset bool, err error) {
	if len(p) != startRecordSize {
		return 0, entryRef{}, false, fmt.Errorf("start record of %d bytes", len(p))
	}
	return le.Uint64(p[0:]), entryRef{le.Uint64(p[8:]), le.Uint64(p[16:])}, p[24]&startReset != 0, nil
}
