package journal

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/junctionmq/junction/persistence/fs"
)

// Errors. Their text is API.
var (
	ErrClosed         = errors.New("journal: closed")
	ErrFailed         = errors.New("journal: failed after an I/O error; restart to recover")
	ErrLocked         = fs.ErrLocked
	ErrRecordTooLarge = errors.New("journal: record too large")
	ErrNotFound       = errors.New("journal: record id not live")
	ErrIDExists       = errors.New("journal: record id already live")
	ErrLoaded         = errors.New("journal: recovered records already loaded")
	ErrTxEmpty        = errors.New("journal: unknown or empty transaction")
	ErrTxTooLarge     = errors.New("journal: transaction too large")
)

// CorruptionError reports damage that recovery could not classify as a torn
// (never confirmed) tail: a bad record in a sealed file, a bad record that a
// later durable record proves was synced, or an unreadable file header.
type CorruptionError struct {
	File   string // file path
	Offset int64  // byte offset of the first bad byte in File
	LSN    uint64 // LSN expected at Offset (0 if unknown)
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("journal: corruption in %s at offset %d (expected lsn %d): %s", e.File, e.Offset, e.LSN, e.Reason)
}

// RecoveryMode chooses what Open does on mid-log damage.
type RecoveryMode int

const (
	// Strict refuses to open on mid-log damage, returning *CorruptionError.
	Strict RecoveryMode = iota
	// Salvage skips damaged ranges, keeps every record that validates and
	// reports each skipped range through EventListener.OnSalvage.
	Salvage
)

// EventListener holds optional callbacks. They run on journal goroutines
// (the writer, the completer or Open's caller) and must not block or call
// back into the Journal.
type EventListener struct {
	// OnSync runs after each fdatasync of a batch: records in the batch
	// and the time the sync took.
	OnSync func(records int, d time.Duration)
	// OnRoll runs when the writer seals a file and moves to the next one.
	OnRoll func(sealed, next string)
	// OnReclaim runs when a dead file is re-headered into the pool.
	OnReclaim func(file string)
	// OnCompact runs when a compaction run finishes. An automatic run is
	// over by then: the journal may already start the next one.
	OnCompact func(files, copied int, d time.Duration)
	// OnTornTail runs during Open when an unsynced tail was discarded: bytes
	// is an estimate (up to the next zero record slot or end of file).
	OnTornTail func(file string, offset, bytes int64)
	// OnSalvage runs during Open in Salvage mode for each skipped range.
	OnSalvage func(err *CorruptionError, skipped int64)
}

// Config configures a Journal. Zero values take the documented defaults.
type Config struct {
	Dir string
	FS  fs.FS // nil = fs.OS()

	// FileSize is the size of every journal file (default 10 MiB, minimum 64 KiB).
	FileSize int64
	// MinFiles is the number of ready (preallocated, headered) files kept so
	// a roll never waits for allocation (default 2).
	MinFiles int
	// PoolFiles is the most ready files kept; reclaimed files beyond it are
	// removed (default 8, never below MinFiles).
	PoolFiles int
	// MaxRecordSize bounds a record's payload (default min(16 MiB, what fits
	// in a file)).
	MaxRecordSize int
	// MaxPendingRecords and MaxPendingBytes bound the append queue
	// (defaults 16384 and 64 MiB). When full, Append blocks until the writer
	// drains (back-pressure); an item larger than the bound is admitted when
	// the queue is empty.
	MaxPendingRecords int
	MaxPendingBytes   int
	// CompactMinRatio and CompactMinFiles trigger compaction when live bytes
	// / (data files × FileSize) falls below the ratio with at least that many
	// data files (defaults 0.3 and 10). A negative ratio disables automatic
	// compaction.
	CompactMinRatio float64
	CompactMinFiles int
	// Recovery chooses what Open does on mid-log damage (default Strict).
	Recovery RecoveryMode
	Events   EventListener
}

const (
	defaultFileSize = 10 << 20
	minFileSize     = 64 << 10
)

func (c *Config) ensureDefaults() error {
	if c.Dir == "" {
		return errors.New("journal: Config.Dir is empty")
	}
	if c.FS == nil {
		c.FS = fs.OS()
	}
	if c.FileSize == 0 {
		c.FileSize = defaultFileSize
	}
	if c.FileSize < minFileSize || c.FileSize%recAlign != 0 {
		return fmt.Errorf("journal: FileSize %d must be a multiple of 8 and at least %d", c.FileSize, minFileSize)
	}
	if c.MinFiles <= 0 {
		c.MinFiles = 2
	}
	if c.PoolFiles <= 0 {
		c.PoolFiles = 8
	}
	if c.PoolFiles < c.MinFiles {
		c.PoolFiles = c.MinFiles
	}
	fit := int(c.FileSize) - segHeaderSize - 2*recHeaderSize
	if c.MaxRecordSize <= 0 {
		c.MaxRecordSize = min(16<<20, fit)
	}
	if c.MaxRecordSize > fit {
		return fmt.Errorf("journal: MaxRecordSize %d does not fit in FileSize %d", c.MaxRecordSize, c.FileSize)
	}
	if c.MaxPendingRecords <= 0 {
		c.MaxPendingRecords = 16384
	}
	if c.MaxPendingBytes <= 0 {
		c.MaxPendingBytes = 64 << 20
	}
	if c.CompactMinRatio == 0 {
		c.CompactMinRatio = 0.3
	}
	if c.CompactMinFiles <= 0 {
		c.CompactMinFiles = 10
	}
	return nil
}

// Update is one update applied to a recovered record, in LSN order.
type Update struct {
	UserType uint16
	Payload  []byte
}

// Stats is a snapshot of the journal's counters.
type Stats struct {
	Files        int    // journal files on disk (data + active + ready)
	DataFiles    int    // sealed files plus the active file
	ReadyFiles   int    // headered, empty files waiting to be used
	LiveRecords  int    // live record ids
	LiveBytes    int64  // encoded bytes of live records (adds + updates)
	TotalBytes   int64  // encoded bytes written in data files
	Batches      uint64 // write batches
	Records      uint64 // records written (including internal ones)
	Syncs        uint64 // fdatasyncs of batches
	SyncedRecs   uint64 // records in synced batches
	Rolls        uint64
	Reclaimed    uint64 // files re-headered for reuse
	Removed      uint64 // files removed because the pool was full
	Compactions  uint64
	CopiedRecs   uint64 // records relocated by compaction
	LastLSN      uint64
	PendingRecs  int // queued, not yet written
	PendingBytes int

	// For monitoring. Appends counts the records callers asked for:
	// Append, Update and Delete calls and the records of committed
	// transactions (not rolled back ones), counted when queued.
	Appends uint64
	// BatchRecords is the total of records written by write batches (the
	// same count as Records): BatchRecords/Batches is the mean batch size.
	BatchRecords uint64
	// Bytes is the size of the journal's files in use (data, active and
	// ready files: what the directory holds), TotalBytes the part of it
	// holding records.
	Bytes int64
	// SyncSeconds is the total time spent in fdatasync of batches
	// (SyncSeconds/Syncs is the mean sync latency).
	SyncSeconds float64
	// SyncLatencyBuckets are the upper bounds, in seconds, of the sync
	// latency histogram (SyncLatencyBucketBounds), and SyncLatencyCounts[i]
	// the number of syncs that took at most SyncLatencyBuckets[i]:
	// cumulative, as Prometheus histograms count. Syncs slower than the
	// last bound are counted only in Syncs (the +Inf bucket).
	SyncLatencyBuckets []float64
	SyncLatencyCounts  []uint64
}

// SyncLatencyBucketBounds are the upper bounds, in seconds, of the sync
// latency histogram in Stats.
var SyncLatencyBucketBounds = [...]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// syncHist is the sync latency histogram: atomic counters, so the writer
// goroutine records a sync without a lock. Counts are per bucket (not
// cumulative) here; Stats accumulates them.
type syncHist struct {
	nanos  atomic.Int64
	counts [len(SyncLatencyBucketBounds)]atomic.Uint64
}

func (h *syncHist) observe(d time.Duration) {
	h.nanos.Add(int64(d))
	s := d.Seconds()
	for i, ub := range SyncLatencyBucketBounds {
		if s <= ub {
			h.counts[i].Add(1)
			return
		}
	}
}

func (h *syncHist) fill(st *Stats) {
	st.SyncSeconds = time.Duration(h.nanos.Load()).Seconds()
	st.SyncLatencyBuckets = append([]float64(nil), SyncLatencyBucketBounds[:]...)
	st.SyncLatencyCounts = make([]uint64, len(SyncLatencyBucketBounds))
	var cum uint64
	for i := range h.counts {
		cum += h.counts[i].Load()
		st.SyncLatencyCounts[i] = cum
	}
}
