// Package raftlog is the durable Raft log of a Junction node: the logs, hard
// states and snapshots of many Raft groups (go.etcd.io/raft/v3) kept in one
// persistence/journal (one write-ahead log, one fdatasync per raft-loop
// pass across all groups) plus one file per group snapshot.
//
// # Use
//
//	l, err := raftlog.Open(raftlog.Config{Dir: dir})
//	for _, g := range groups {
//		s := l.Storage(g) // raft.Storage; restore the state machine from s.Snapshot()
//		hs, _, _ := s.InitialState()
//		rn, _ := raft.NewRawNode(&raft.Config{ID: id, Storage: s,
//			Applied: min(appliedIndex, hs.GetCommit()), ...})
//	}
//	// each pass of the raft loop (classic Ready mode):
//	var us []raftlog.Update
//	for each group with rn.HasReady() {
//		rd := rn.Ready()
//		us = append(us, raftlog.Update{Group: g, HardState: rd.HardState,
//			Entries: rd.Entries, Snapshot: rd.Snapshot})
//	}
//	if err := l.Save(us); err != nil { stop the node } // one batch, one fsync
//	then, per Ready: send Messages, apply Snapshot and CommittedEntries, Advance
//	// every so often, per group, from the applied state:
//	s.CreateSnapshot(appliedIndex, confState, data)
//
// With AsyncStorageWrites the append thread calls Save with the contents of
// each MsgStorageAppend (merged per group) and delivers its Responses once
// Save returns.
//
// # Files
//
// Dir/wal holds the journal (see persistence/journal: fixed-size files,
// CRC'd records, group commit, file reuse and compaction); it is opened in
// journal.Strict recovery mode, never Salvage: a node must not vote on a log
// with a hole cut out of it. Dir/snap holds one file per group snapshot,
// named GGGGGGGGGGGGGGGG-TTTTTTTTTTTTTTTT-IIIIIIIIIIIIIIII.snap (group, term,
// index in hex):
//
//	off size field
//	0   8    magic "JNCTSNAP"
//	8   2    version (1)
//	10  6    zero
//	16  8    group
//	24  8    index
//	32  8    term
//	40  8    data size
//	48  4    CRC32C of the data
//	52  4    CRC32C of bytes [0,52)
//	56  8    zero
//	64  ...  data (the caller's opaque bytes)
//
// # Records
//
// Four journal user types, little-endian payloads. Record ids come from
// one counter (the journal's MaxID + 1 at Open); the journal's Load order
// (the order records were written) is what recovery replays, ids are only
// names.
//
//	ENTRY (1)      0 group u64 | 8 index u64 | 16 term u64 | 24 type u32 |
//	               28 flags u8 (1: Type set, 2: Data set) | 29 zero[3] | 32 data
//	HARDSTATE (2)  0 group | 8 term | 16 vote | 24 commit          (32 bytes)
//	SNAPSHOT (3)   0 group | 8 index | 16 term | 24 data size | 32 data CRC32C u32 |
//	               36 flags u8 (1: installed) | 37 zero[3] | 40 ConfState (protobuf)
//	START (4)      0 group | 8 index | 16 term | 24 flags u8 (1: reset) | 25 zero[7]
//
// START is the group's compaction point: the (index, term) of the entry
// before its first, raft's "dummy" entry. A reset START (written with an
// installed snapshot) also discards every earlier entry of the group; so
// does the installed SNAPSHOT record written just before it, so that a
// batch torn between the two leaves the log reset rather than a snapshot
// past its last entry. (When such a snapshot record, left without its
// START, is later replaced, a START naming the compaction point is
// written first.)
// HARDSTATE, SNAPSHOT and START are replaced by writing the new record and
// then deleting the old one; ENTRY records are deleted when truncated or
// compacted. Records are never updated in place (journal UPDATEs would
// accumulate).
//
// # What Save guarantees
//
// Save(us) validates every Update first (ErrEntryTooLarge, ErrGap,
// ErrDuplicateGroup, raft.ErrSnapOutOfDate: nothing is written), writes each
// installed snapshot's file (durably, see below), then appends one journal
// batch: for each group in order its SNAPSHOT and reset START, its ENTRY
// records, its HARDSTATE; then the deletes of what they supersede (entries
// from the highest index down). The last record is synced, so when Save
// returns nil everything it was given, and everything before it, is
// durable (journal: done(nil) for a sync=true record covers every earlier
// record). Only then do the groups' Storages change, in raft's order
// (snapshot, entries with suffix truncation, hard state): a Storage never
// shows raft an entry that is not durable. The one exception is the one
// raft.MustSync makes: if no Update carries entries or a snapshot and no
// hard state changes its term or vote, the batch is written without an
// fsync, and only a commit index can be lost by a power failure.
//
// An I/O error fails the Log for good (ErrFailed; an fsync is never
// retried): the node must stop and restart from what Open recovers.
//
// # Suffix truncation is crash-safe
//
// Raft's rule "writing entry i discards every entry >= i" is applied at
// recovery from the records themselves, in journal order: an ENTRY at
// index i truncates the group's replayed log at i. The deletes of the
// superseded entries only reclaim space. The journal recovers a prefix of
// what was written (a torn tail is cut at the first invalid record), so a
// torn Save leaves, per group, either the old log or the log truncated at
// the first new entry plus a prefix of the new entries (at least one; with
// an installed snapshot: the snapshot plus a prefix, possibly empty): the
// new entries come before the deletes, and the deletes go from the highest
// index down, so any prefix of them leaves the old entries contiguous and
// each is still superseded by the first new entry when replayed. A
// truncated entry cannot come back: it is deleted in the same synced batch
// as the entry that supersedes it, and until then replay discards it.
// Recovery refuses (CorruptionError) a log with a gap, a compaction point
// above the snapshot, a snapshot or commit index above the last entry.
//
// # Snapshots and compaction
//
// CreateSnapshot(index, cs, data) works in this order, each step durable
// before the next:
//
//  1. the data goes to Dir/snap/<name>.snap.tmp, is fdatasync'ed, renamed to
//     its final name, and the directory is fsync'ed;
//  2. the SNAPSHOT record is appended and synced;
//  3. the previous snapshot's file is removed;
//  4. if the new compaction point C, below index by at most CatchUpEntries
//     entries holding at most CatchUpBytes, is above the current one: a START(C)
//     record, then deletes of the ENTRY records up to C (lowest first), of
//     the old START and the old SNAPSHOT record, synced; then the in-memory
//     log drops them.
//
// A crash after 1 leaves an orphan file, which Open removes; a SNAPSHOT
// record whose file is missing (for the group's latest snapshot) refuses
// Open. Entries are deleted only after the snapshot that covers them is
// durable, and Compact refuses to go past the durable snapshot
// (ErrBeyondSnapshot). An installed snapshot (Update.Snapshot, from the
// leader) has its file written the same way before the Save batch, whose
// SNAPSHOT and reset START records then come first.
//
// Snapshot data: Storage.Snapshot reads it from the file (for raft's
// MsgSnap); Storage.OpenSnapshot returns a reader over the file (size,
// metadata, CRC checked at EOF) for streaming a large snapshot out of band.
// Open checks each snapshot file's header against its record, not the data
// CRC (that would read every snapshot at start); a reader checks it.
//
// # The commit index on disk may be stale
//
// A hard state whose only change is Commit is written without an fsync
// (see above), so after a power failure the recovered Commit can be lower
// than what raft had reported, down to the value of the last synced Save.
// That is harmless to raft (it learns the commit index again from the
// leader, or recommits as a leader), but the application must not pass a
// Config.Applied above it: raft panics if Applied > Commit. Restart with
// Applied = min(what the state machine has durably applied, hs.Commit) and
// skip re-delivered CommittedEntries at or below the state machine's own
// applied index. InitialState raises Commit to the snapshot index when it
// is lower (a snapshot covers only committed entries, and raft refuses a
// commit below its first index).
//
// # Single-voter groups (etcd #14370)
//
// etcd once acknowledged a write in a one-node cluster before it was
// fsynced, and lost it in a crash. raft v3.7 makes a leader acknowledge its
// own entries only after they are persisted: in classic mode on Advance,
// in async mode through the MsgStorageAppend responses. Save returns only
// once the entries are durable and Storage only shows durable entries, so
// a loop that calls Advance (or delivers the responses) after Save returns
// cannot commit, hence apply and acknowledge, anything a crash can lose;
// and a loop that advances before Save fails loudly (raft panics when the
// committed entries it wants are not in Storage) instead of silently.
//
// # Memory and limits
//
// A Storage keeps its uncompacted entries in memory, as raft's
// MemoryStorage does, with the journal as their durable home and the source
// at restart (as etcd does with its WAL). Per group that is at most the
// catch-up entries kept below the snapshot (CatchUpEntries, at most
// CatchUpBytes of them) + the entries applied between two snapshots + the
// uncommitted tail (bounded by raft's MaxUncommittedEntriesSize), each at
// most MaxEntrySize: the caller bounds the middle term by how often it
// snapshots, by count and by size (Storage.BytesAfter the last snapshot).
// GroupStats.Bytes reports it.
//
// An entry's data is at most Config.MaxEntrySize (default 4 MiB); Save
// refuses a larger one with ErrEntryTooLarge before writing anything, so a
// record can never be too large for a journal file: Open requires FileSize
// >= MaxEntrySize + 32 + 4176 (the default FileSize, 16 MiB, holds the
// default MaxEntrySize twice).
//
// # Concurrency
//
// Storage methods are safe for concurrent use (raft's goroutine, a
// transport reading snapshots). Save is meant for one goroutine, the raft
// loop; Save, Compact and the record phase of CreateSnapshot are serialised
// (CreateSnapshot writes its file before taking the lock, so a large
// snapshot does not stall Save). Entries handed to Save are kept by
// reference and must not be mutated afterwards (raft does not).
package raftlog
