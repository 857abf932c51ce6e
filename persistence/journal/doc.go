// Package journal is Junction's durable record journal: an append-only log
// of ADD/UPDATE/DELETE records keyed by caller-chosen uint64 ids, with
// buffered transactions, group commit, file reuse, compaction and crash
// recovery. It knows bytes, record ids and transaction ids, never messages.
//
// # Files
//
// The directory holds a LOCK file (flock; a second Open fails with
// ErrLocked) and fixed-size journal files NNNNNNNN.jnl (Config.FileSize,
// default 10 MiB, preallocated). A file's name never changes; its order in
// the log is the seq in its header. Each file starts with a 4096-byte header
// block (records start page aligned):
//
//	off size field
//	0   8    magic "JNCTNJNL"
//	8   2    format version (1)
//	10  2    flags (0)
//	12  4    reserved
//	16  8    seq         order of this use of the file (monotonic)
//	24  8    generation  random nonce chosen at every (re)use
//	32  8    created     unix nanoseconds
//	40  4    CRC32C of bytes [0,40)
//	44  ... zero up to 4096, and the first record slot [4096,4136) is zeroed
//
// Dead files are reused: re-headered with a new seq and generation (one
// write + fdatasync), never re-zeroed. Stale records cannot validate because
// every record CRC is seeded with the generation (see below). A ready file
// whose seq does not exceed every data file's (the preparer can publish
// files out of seq order) is re-headered again when it becomes the active
// file.
//
// # Why a record from an earlier use of a file can never be accepted
//
// The invariant: records of one generation are written by one use of the
// file only, at increasing offsets with consecutive LSNs, by one writer in
// one run. A file gets a new generation (and a new seq), durably, before it
// is written again: a new file when it is created; a sealed file when
// reclaim returns it to the pool; and after a crash, at Open, every file
// recovery does not keep as a data file. That last case is the subtle one.
// Unsynced pages reach the disk in any order, so a crash can lose the page
// of a file's first record while later pages of the same batch (or of later
// unsynced batches) survive. The file then looks free (its first slot is
// zero), yet it holds records of its current generation, and the LSNs after
// the recovered tail are handed out again by the next run. Reused with that
// generation, the file would receive new records with the same LSNs at the
// same offsets; a second crash that cut them at a page boundary could leave
// one of the old ones exactly where the next LSN is expected, and it would
// be accepted (a stale DELETE removing a record whose synced append had been
// confirmed). So recovery marks every free file dirty and re-headers it
// before Open returns, and the writer re-headers a dirty file before it
// writes to it. The data files recovery keeps are never written again
// except for the SEGMENT_END that seals the tail where its valid records
// end; whatever of the crashed run lies beyond it is never read. Nothing is
// ever zeroed beyond the first record slot (preallocation keeps what a
// reused file held), and compaction has no files of its own: its copies go
// through the writer into the active file.
//
// With the invariant, a record that validates in a file is from the file's
// current use, and recovery's LSN continuity check places it. A record of
// an earlier use fails its CRC, as the seed (the generation folded to 32
// bits) differs from the previous use's; older uses' records also carry
// LSNs far below the log's. Journals written before free files were
// re-headered may already hold a file reused with its generation; a stale
// record there, found where a crash cut the newer records, says through
// its lag that it was written when less was durable than the record before
// it had already seen (durability only grows along the log), and recovery
// treats it, unless a later record proves it synced, as torn tail. That
// catches it whenever anything was synced in the reused file since its
// reuse, so nothing confirmed since is lost to a stale record; when nothing
// was, records (a DELETE among them) that the previous recovery had dropped
// can still come back, and nothing on disk tells them apart.
//
// # Records
//
// Records are little-endian and 8-byte aligned:
//
//	off size field
//	0   4    length   payload bytes
//	4   4    crc      CRC32C seeded with low32(gen)^high32(gen) over
//	                  [0,4) ++ [8,40+length)
//	8   1    type     1 ADD 2 UPDATE 3 DELETE 4 ADD_TX 5 UPDATE_TX
//	                  6 DELETE_TX 8 COMMIT 10 SEGMENT_END (7, 9 reserved);
//	                  0 = unwritten
//	9   1    flags    bit0 COMPACTED (relocated copy: txid holds the
//	                  original ADD's LSN, which orders Load)
//	10  2    utype    caller's user record type
//	12  4    lag      LSN minus the last durable LSN when the record was
//	                  written (saturating); proves at recovery which LSNs
//	                  had been synced
//	16  8    lsn      strictly +1 per record across files
//	24  8    id       record id (0 for COMMIT, SEGMENT_END)
//	32  8    txid     transaction id (0 = none)
//	40  n    payload, then zero padding to a multiple of 8
//
// COMMIT's payload is the first LSN of its unit (u64) and the number of tx
// records (u32). Transaction records are buffered in memory and written with
// their COMMIT as one contiguous unit, so a tx is applied at recovery only
// if every record of the unit validates. A unit the writer split across a
// roll is applied with what is found of it in the earlier files: its
// records there were synced by the roll before the COMMIT's file got any,
// so one that is missing is in a file reclaim took, which it does only when
// everything in the file is dead (the file of the COMMIT is never taken
// before them). Every write batch is followed by a
// zeroed record slot. Each file keeps room for a SEGMENT_END record, which
// seals it when the writer rolls (then the file is fdatasync'ed before the
// next file is written) or closes.
//
// # Writing
//
// One writer goroutine owns the active file. Appenders copy their record
// into a bounded queue and kick the writer, which takes everything queued,
// encodes it into one buffer, issues one WriteAt and, if any record asked
// for sync, one fdatasync, then hands the completions to a completion
// goroutine. While a sync is in flight new records queue for the next
// batch. A write or sync error fails the whole batch and every later call
// with ErrFailed (wrapping the cause); a sync is never retried and nothing
// is confirmed that is not on disk.
//
// # Guarantees
//
//   - done(nil) for a sync=true record (and for Commit) means it and every
//     record before it are durable (fdatasync returned).
//   - done(nil) for a sync=false record means it was written to the file;
//     it becomes durable with the next synced batch or file roll.
//   - Recovery returns exactly the live set: ADDs minus DELETEs, UPDATEs in
//     order, committed transactions applied, uncommitted ones discarded.
//
// # Reclaim and compaction
//
// Per file the journal counts live records located in it (pos) and, per
// other file, the records here that cancel records there (neg: deletes and
// compaction copies). A sealed file is reused when it holds no live record
// and every file its negatives point at is gone or reused in the same pass
// (Artemis's two criteria); everything written is synced first, and files
// are re-headered in ascending seq order, each durably, so a crash mid-pass
// can never resurrect a deleted record. A unit the writer split across a
// roll: the file of its COMMIT counts the earlier files holding part of it
// among its negatives, so it is reused only after them (see Records). Ready files beyond
// Config.PoolFiles are removed. Compaction (Compact, or automatically below
// Config.CompactMinRatio) copies live records forward through the writer
// and lets reclaim reuse the emptied files.
//
// # Recovery
//
// Open lists the files, validates headers, orders files by seq and scans
// each from offset 4096 checking type, length, CRC and LSN continuity (and,
// in the newest file, that no record saw less durable than the one before
// it). A file with a bad header, or whose first record slot is zero, is
// free; free files and a torn first batch are re-headered before Open
// returns. The first invalid record of the others is classified:
//
//   - torn tail: it is in the newest file holding records and no later
//     record in that file proves (via its lag) that the bad LSN had been
//     synced. The tail is cut (Events.OnTornTail reports file, offset and an
//     estimate of the bytes), a SEGMENT_END is written where valid records
//     end, and writing continues in a fresh file;
//   - otherwise mid-log corruption: a sealed file that does not end in
//     SEGMENT_END, a bad record proven synced, a file whose first record is
//     bad but a later file has records, or a damaged header. Strict mode
//     (default) refuses to open with a *CorruptionError naming the file and
//     offset; Salvage mode skips to the next record that validates,
//     reporting each range through Events.OnSalvage.
//
// Limits: a whole missing middle file cannot be told from a reclaimed one;
// a bit flip inside the newest synced batch with no later record is
// indistinguishable from a torn write and is reported as a torn tail.
// Recovery holds the data files in memory until Load returns.
package journal
