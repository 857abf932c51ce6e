// Package page keeps append-only page stores: the records a queue holds on
// disk, in order, while it is over its memory budget. A Dir holds many
// stores; each Store is a sequence of records read by position and released
// from the front. It knows bytes and positions, never messages.
//
// # Files
//
// A Dir is a directory used by nothing else. Each store has a marker file "<name>.store" (the
// store exists exactly when its marker does) and a subdirectory "<name>/"
// holding segment files 00000001.pg, 00000002.pg, ... Names are escaped:
// bytes other than [A-Za-z0-9_-] become %XX. Removing the marker (then
// syncing the directory) is the commit point of Remove; subdirectories
// without a marker that hold only segment files, left by an interrupted
// create or remove, are deleted by Open.
//
// Each segment starts with a 32-byte header, little-endian:
//
//	off size field
//	0   8    magic "JNCTPAGE"
//	8   2    format version (1)
//	10  2    flags (0)
//	12  4    reserved (0)
//	16  8    segment number (must match the file name)
//	24  4    CRC32C (Castagnoli) of bytes [0,24)
//	28  4    reserved (0)
//
// followed by records, back to back:
//
//	off size field
//	0   4    length n of the payload
//	4   4    CRC32C of bytes [0,4) ++ payload
//	8   n    payload
//
// A segment is rolled when the next record would take it past
// Options.SegmentSize; a record larger than that goes alone in a fresh
// segment. A position is segment number << 40 | byte offset in the segment;
// positions are ordered, and the position after the last record of a
// segment is valid too (Read moves on to the next segment).
//
// # Writing and durability
//
// Append encodes the record into a buffer that is written to the segment in
// batches of about 64 KiB, or when Sync or Read needs it; no syscall is
// made per record. One sync goroutine per store (started by Dir.Open,
// stopped by Close) serves Sync: it takes every pending Sync, flushes the
// buffer, syncs the store directory if a segment was created since the last
// time, fdatasyncs the active segment and only then calls the done
// functions (group commit). Before a new segment file is created, the
// previous segment is flushed and fdatasync'ed (one fdatasync per
// SegmentSize bytes, by the Append that rolls, with the store's mutex held,
// so Appends and Reads wait for it; it is short when Syncs have kept the
// segment mostly durable). So a segment exists on disk only when every
// earlier segment is complete and durable: only the last segment can have a
// torn tail.
//
// A write, fdatasync, directory sync or file removal error fails the Sync
// that meets it and every later Append, Sync, Read and Release with an
// error wrapping ErrFailed and the cause; nothing is reported durable that
// is not. Close returns the same error.
//
// # Guarantees
//
//   - done(nil) from Sync means every record appended before the Sync call
//     is durable, and will be returned by Read after a crash and Open
//     (unless released).
//   - Records are returned in append order, each exactly as appended, or an
//     error: Read verifies every record's CRC and reports damage with an
//     error wrapping ErrCorrupt; it never returns garbage.
//   - Release deletes whole segments only, and syncs the directory.
//
// # Recovery
//
// Opening an existing store checks every segment header (wrong magic,
// version, CRC or number refuses the store with ErrCorrupt, as does a gap
// in the segment numbers). The last segment is scanned from its start: the
// first record that is short, extends past the end of the file or fails its
// CRC (a zero-filled header fails it too) ends the valid data, and the file
// is truncated there and synced. A last segment shorter than a header, or
// whose header is all zeros, was torn while being created and is
// re-headered. Earlier segments are trusted up to their end (they were
// synced before their successor existed); Read still checks their CRCs.
// Start is the first record of the lowest remaining segment, so records
// before a Release position within a segment that was not deleted come back
// after a restart; the caller keeps its own consumed position if it needs
// one.
//
// # Limits
//
// The Dir takes no lock: one process at a time (the broker's data-directory
// lock covers it). A store name becomes a file name, so a very long name
// fails Open with the file system's error. Bytes counts segment files and
// records appended but not yet written.
//
// # Concurrency
//
// A Store is safe for concurrent use. Appends are serialized by the store's
// mutex; Read holds it only to look up segment sizes (and to flush the
// buffer when it reads at the tail) and reads flushed bytes outside it with
// its own file handle, which is safe because segments are append-only.
// Reads are serialized with each other. done functions run on the sync
// goroutine and must not call Close on their store.
package page
