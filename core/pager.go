package core

// Pager keeps queues' page stores: the durable messages a queue holds on
// disk, in order, while it is over its memory budget (address-full-policy
// PAGE). persistence/page satisfies it through a small adapter in cmd.
type Pager interface {
	// Open opens the store called name, creating it if it does not exist.
	Open(name string) (PageStore, error)
	// List returns the names of the stores on disk, sorted.
	List() ([]string, error)
	// Remove deletes the store called name and its files; it must not be
	// open.
	Remove(name string) error
	// Bytes is the disk space all stores use.
	Bytes() int64
}

// PageStore is one queue's page store: an append-only sequence of
// records. Positions are opaque and ordered; the record at a position is
// the next one Read returns from it.
type PageStore interface {
	// Append writes rec after every record appended before. It is cheap
	// (no syscall per record needed), readable by Read at once, and
	// durable after a Sync.
	Append(rec []byte) error
	// Sync calls done, on another goroutine, once every record appended
	// before the call is durable; concurrent Syncs share one fdatasync.
	Sync(done func(error))
	// Start is the position of the first record in the store.
	Start() uint64
	// Read returns up to max records (and about maxBytes) from pos, in
	// order, and the position after the last one. At the end it returns
	// none and next == pos. The records stay valid after the call.
	Read(pos uint64, max, maxBytes int) (recs [][]byte, next uint64, err error)
	// Release deletes the files that hold only records before pos.
	Release(pos uint64) error
	// Close makes what was appended durable, completes pending Syncs and
	// closes the files.
	Close() error
}
