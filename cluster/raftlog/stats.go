package raftlog

import (
	"cmp"
	"slices"
	"time"

	"github.com/junctionmq/junction/persistence/journal"
)

// GroupStats describes one group's storage.
type GroupStats struct {
	Group      uint64
	FirstIndex uint64 // first entry available (compaction point + 1)
	LastIndex  uint64
	Entries    int    // entries held (LastIndex - FirstIndex + 1)
	Bytes      uint64 // their encoded size (proto.Size), held in memory and in the journal
	Term       uint64 // of the saved hard state
	Commit     uint64 // of the saved hard state (may lag raft's, see the package doc)
	// The latest durable snapshot (index 0: none) and its data's size.
	SnapshotIndex uint64
	SnapshotTerm  uint64
	SnapshotSize  int64
}

// Stats is a snapshot of the Log's counters, for metrics.
type Stats struct {
	Groups []GroupStats // sorted by group
	// Saves counts Save calls that wrote something; SaveSyncs those that
	// ended with an fdatasync (the others only advanced commit indexes).
	// SaveSeconds is their total duration, so SaveSeconds/Saves is the
	// mean Save latency.
	Saves, SaveSyncs uint64
	SaveSeconds      float64
	// SavedEntries and SavedBytes count entries and entry data bytes
	// written by Save.
	SavedEntries, SavedBytes uint64
	// SnapshotWrites counts snapshot files written (CreateSnapshot and
	// installed snapshots); SnapshotReadErrors the times Snapshot or
	// OpenSnapshot could not read one.
	SnapshotWrites, SnapshotReadErrors uint64
	// Journal holds the underlying journal's counters, among them the
	// fdatasync latency histogram (SyncLatencyBuckets/Counts, Syncs,
	// SyncSeconds) and the bytes on disk.
	Journal journal.Stats
}

// Stats returns the Log's counters and every known group's state.
func (l *Log) Stats() Stats {
	st := Stats{
		Saves:              l.saves.Load(),
		SaveSyncs:          l.saveSyncs.Load(),
		SaveSeconds:        time.Duration(l.saveNanos.Load()).Seconds(),
		SavedEntries:       l.savedEntries.Load(),
		SavedBytes:         l.savedBytes.Load(),
		SnapshotWrites:     l.snapWrites.Load(),
		SnapshotReadErrors: l.snapReadErrors.Load(),
		Journal:            l.j.Stats(),
	}
	l.mu.Lock()
	ss := make([]*Storage, 0, len(l.groups))
	for _, s := range l.groups {
		ss = append(ss, s)
	}
	l.mu.Unlock()
	for _, s := range ss {
		s.mu.Lock()
		st.Groups = append(st.Groups, GroupStats{
			Group:         s.group,
			FirstIndex:    s.base.index + 1,
			LastIndex:     s.lastIndex(),
			Entries:       len(s.ents),
			Bytes:         s.cum[len(s.cum)-1] - s.cum[0],
			Term:          s.hs.GetTerm(),
			Commit:        s.hs.GetCommit(),
			SnapshotIndex: s.snap.index,
			SnapshotTerm:  s.snap.term,
			SnapshotSize:  s.snap.size,
		})
		s.mu.Unlock()
	}
	slices.SortFunc(st.Groups, func(a, b GroupStats) int { return cmp.Compare(a.Group, b.Group) })
	return st
}
