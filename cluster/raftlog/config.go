package raftlog

import (
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/persistence/fs"
	"github.com/junctionmq/junction/persistence/journal"
)

// Errors. Their text is API. Storage methods also return raft's own
// sentinels (raft.ErrCompacted, raft.ErrUnavailable, raft.ErrSnapOutOfDate,
// raft.ErrSnapshotTemporarilyUnavailable) where raft.Storage asks for them.
var (
	// ErrClosed is returned by writes after Close.
	ErrClosed = errors.New("raftlog: closed")
	// ErrFailed wraps the first I/O error of a Save, CreateSnapshot or
	// Compact (or of the journal). The Log refuses every later write: a
	// failed fsync is never retried, and what it covered may or may not be
	// on disk, so the node must stop and restart from what Open recovers.
	ErrFailed = errors.New("raftlog: failed after an I/O error; restart to recover")
	// ErrEntryTooLarge: an entry's data is larger than Config.MaxEntrySize.
	// The whole Save is refused before anything is written.
	ErrEntryTooLarge = errors.New("raftlog: entry too large")
	// ErrGap: a Save's entries are not consecutive, or start after the
	// group's last index + 1 (raft never asks for that).
	ErrGap = errors.New("raftlog: entries would leave a gap in the log")
	// ErrDuplicateGroup: one Save holds two Updates for the same group.
	ErrDuplicateGroup = errors.New("raftlog: group appears twice in one Save")
	// ErrBeyondSnapshot: Compact was asked to discard entries that the
	// group's durable snapshot does not cover.
	ErrBeyondSnapshot = errors.New("raftlog: compaction beyond the durable snapshot")
	// ErrSnapshotCorrupt: a snapshot file's data does not match the CRC
	// recorded for it.
	ErrSnapshotCorrupt = errors.New("raftlog: snapshot data corrupt")
)

// CorruptionError reports a recovered log that breaks an invariant of the
// package doc (a gap, a snapshot record without its file, a commit index
// past the last entry). A node that gets it must not vote or lead with
// this data: it is to be wiped and rejoin as a new member.
type CorruptionError struct {
	Group  uint64
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("raftlog: group %d: corrupt log: %s", e.Group, e.Reason)
}

// Config configures a Log. Zero values take the documented defaults.
type Config struct {
	// Dir holds the journal (Dir/wal) and the snapshot files (Dir/snap).
	Dir string
	// FS is the file system (nil = fs.OS()).
	FS fs.FS
	// MaxEntrySize bounds the data of one entry (default 4 MiB). Save
	// refuses a larger entry with ErrEntryTooLarge. Every member of a
	// group must use the same bound, and the proposer must check it
	// before proposing: a follower with a smaller bound could not store an
	// entry its leader accepted.
	MaxEntrySize int
	// FileSize is the size of every journal file (default: 16 MiB, or
	// twice the largest entry record if that is larger). Open refuses a
	// FileSize that cannot hold an entry of MaxEntrySize.
	FileSize int64
	// CatchUpEntries is how many entries CreateSnapshot keeps below the
	// snapshot index, so that a follower slightly behind catches up from
	// the log instead of needing the snapshot (default 10000, as etcd's
	// raftexample). Negative: CreateSnapshot never compacts; call
	// Storage.Compact.
	CatchUpEntries int
	// CatchUpBytes bounds the same entries by their encoded size (default
	// 16 MiB): CreateSnapshot keeps at most CatchUpEntries entries and at
	// most CatchUpBytes of them, so that entries of a megabyte do not
	// keep ten thousand megabytes in memory. Negative: no bound by size.
	CatchUpBytes int64
	// Logger receives recovery summaries and snapshot read errors.
	Logger zerolog.Logger
	// Journal holds the remaining knobs of the underlying journal
	// (MinFiles, PoolFiles, MaxPending*, Compact*, Events). Dir, FS,
	// FileSize, MaxRecordSize and Recovery are set by Open: recovery is
	// always journal.Strict, because a Raft node must not run on a log
	// with a hole salvaged out of it.
	Journal journal.Config
}

const (
	defaultMaxEntrySize   = 4 << 20
	defaultFileSize       = 16 << 20
	defaultCatchUpEntries = 10000
	defaultCatchUpBytes   = 16 << 20
	// compactFromBytes: sealed files of about this many bytes start a
	// compaction of the journal (see ensureDefaults).
	compactFromBytes = 160 << 20
	// journalOverhead is what a journal file needs besides one record's
	// payload: the 4096-byte file header and two 40-byte record headers
	// (the record and the zeroed slot or SEGMENT_END after it).
	journalOverhead = 4096 + 2*40
)

func (c *Config) ensureDefaults() error {
	if c.Dir == "" {
		return errors.New("raftlog: Config.Dir is empty")
	}
	if c.FS == nil {
		c.FS = fs.OS()
	}
	if c.MaxEntrySize <= 0 {
		c.MaxEntrySize = defaultMaxEntrySize
	}
	need := int64(entryHeaderSize+c.MaxEntrySize) + journalOverhead
	if c.FileSize == 0 {
		c.FileSize = max(defaultFileSize, (2*need+4095)/4096*4096)
	}
	if c.FileSize < need {
		return fmt.Errorf("raftlog: FileSize %d cannot hold an entry of MaxEntrySize %d (needs %d)", c.FileSize, c.MaxEntrySize, need)
	}
	// The journal's file counts suit its 10 MiB files. A raft log's
	// files are twice its largest entry (130 MiB for a cluster whose
	// messages may be 64 MiB), and every file is read whole at Open: with
	// the journal's defaults (2 ready files, 8 pooled, compaction from 10
	// sealed files) an idle node gained a file at each restart, up to 2.5
	// GB of disk, and a restart read them all (2 s for 5 files). So the
	// counts are bounded by bytes: about 160 MiB of sealed files before a
	// compaction (never fewer than 3 files), and one ready file when a
	// file is larger than the default.
	if c.Journal.CompactMinFiles == 0 {
		c.Journal.CompactMinFiles = max(3, int(compactFromBytes/c.FileSize))
	}
	if c.FileSize > defaultFileSize {
		if c.Journal.MinFiles == 0 {
			c.Journal.MinFiles = 1
		}
		if c.Journal.PoolFiles == 0 {
			c.Journal.PoolFiles = 1
		}
	}
	if c.CatchUpEntries == 0 {
		c.CatchUpEntries = defaultCatchUpEntries
	}
	if c.CatchUpBytes == 0 {
		c.CatchUpBytes = defaultCatchUpBytes
	}
	return nil
}
