// Package fs is the file-system seam of Junction's persistence layer.
//
// The journal and the large-message store reach the disk only through FS and
// File, so tests can substitute:
//
//   - NewCrashableMem: an in-memory file system where, after CrashClone, only
//     durable state survives: file data after File.Datasync, directory entries
//     (create, rename, remove) after FS.SyncDir of their directory. CrashCloneTorn
//     additionally keeps a random in-order prefix of the unsynced writes, the
//     last kept write possibly cut at a 512-byte sector boundary.
//     CrashClonePages lets every page dirtied since the last Datasync
//     independently survive in any of the versions it had (none, the
//     latest, or one in between), which covers every order in which a
//     kernel may write pages back; Clone freezes a file system, unsynced
//     state included, so that many such images can be made of one instant.
//   - NewFaulty: a wrapper that fails chosen operations with ErrInjected wrapped
//     with an errno (ENOSPC, EIO, ...).
//
// OS is the production implementation (os + golang.org/x/sys/unix: fallocate,
// fdatasync, flock).
package fs

import (
	"errors"
	"io"
)

// ErrLocked is returned by FS.Lock when another holder (another process, or
// another Lock call in this process) holds the lock.
var ErrLocked = errors.New("persistence: directory locked by another owner")

// File is an open file. Implementations must allow concurrent ReadAt and
// WriteAt calls on disjoint ranges.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Datasync makes the file's data (and the metadata needed to read it,
	// such as its size) durable: fdatasync(2).
	Datasync() error
	// Preallocate reserves size bytes (the file's size becomes at least
	// size) so later writes inside it do not change the file size.
	Preallocate(size int64) error
	Truncate(size int64) error
	Size() (int64, error)
	Close() error
}

// FS is the file-system seam. Names are slash-separated paths.
type FS interface {
	// Create creates or truncates name, opened read-write.
	Create(name string) (File, error)
	// Open opens an existing file read-write.
	Open(name string) (File, error)
	// List returns the base names of the entries of dir, sorted.
	List(dir string) ([]string, error)
	Rename(oldname, newname string) error
	Remove(name string) error
	MkdirAll(dir string) error
	// SyncDir makes the directory's entries (creations, renames, removals)
	// durable.
	SyncDir(dir string) error
	// Lock takes an exclusive lock on the file name (creating it if
	// needed). It fails with ErrLocked if the lock is held. Close releases it.
	Lock(name string) (io.Closer, error)
}
