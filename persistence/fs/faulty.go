package fs

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
)

// ErrInjected marks errors produced by a Faulty file system. Injected errors
// also wrap the chosen errno, so errors.Is(err, syscall.ENOSPC) holds.
var ErrInjected = errors.New("fs: injected fault")

// Op names a file-system operation for fault injection.
type Op string

const (
	OpCreate      Op = "create"
	OpOpen        Op = "open"
	OpList        Op = "list"
	OpRename      Op = "rename"
	OpRemove      Op = "remove"
	OpSyncDir     Op = "syncdir"
	OpRead        Op = "read"
	OpWrite       Op = "write"
	OpDatasync    Op = "datasync"
	OpPreallocate Op = "preallocate"
	OpTruncate    Op = "truncate"
)

// Injector decides whether an operation fails. It returns nil to let the
// operation through. It may be called concurrently.
type Injector func(op Op, name string) error

func injected(op Op, name string, errno syscall.Errno) error {
	return fmt.Errorf("%w: %s %s: %w", ErrInjected, op, name, errno)
}

// FailNth fails the n-th (1-based) operation of kind op with errno, and only
// that one. Operations of every goroutine count, in the order they reach the
// file system: when a background goroutine (a journal's preparer) may do the
// same kind of operation, FailNthMatching picks out the one meant.
func FailNth(op Op, n int, errno syscall.Errno) Injector {
	return FailNthMatching(func(o Op, _ string) bool { return o == op }, n, errno)
}

// FailNthMatching fails the n-th (1-based) operation for which pred returns
// true with errno, and only that one. Operations pred rejects are not
// counted.
func FailNthMatching(pred func(op Op, name string) bool, n int, errno syscall.Errno) Injector {
	var mu sync.Mutex
	count := 0
	return func(o Op, name string) error {
		if !pred(o, name) {
			return nil
		}
		mu.Lock()
		count++
		c := count
		mu.Unlock()
		if c == n {
			return injected(o, name, errno)
		}
		return nil
	}
}

// FailFromNth fails the n-th operation of kind op and every later one.
func FailFromNth(op Op, n int, errno syscall.Errno) Injector {
	var mu sync.Mutex
	count := 0
	return func(o Op, name string) error {
		if o != op {
			return nil
		}
		mu.Lock()
		count++
		c := count
		mu.Unlock()
		if c >= n {
			return injected(o, name, errno)
		}
		return nil
	}
}

// FailMatching fails every operation for which pred returns true.
func FailMatching(pred func(op Op, name string) bool, errno syscall.Errno) Injector {
	return func(o Op, name string) error {
		if pred(o, name) {
			return injected(o, name, errno)
		}
		return nil
	}
}

// NewFaulty wraps inner so that every operation first consults inj.
// The injector can be replaced later with SetInjector.
func NewFaulty(inner FS, inj Injector) *Faulty {
	f := &Faulty{inner: inner}
	f.SetInjector(inj)
	return f
}

// Faulty is an FS that injects errors chosen by an Injector.
type Faulty struct {
	inner FS
	mu    sync.Mutex
	inj   Injector
}

// SetInjector replaces the injector (nil injects nothing).
func (f *Faulty) SetInjector(inj Injector) {
	f.mu.Lock()
	f.inj = inj
	f.mu.Unlock()
}

func (f *Faulty) check(op Op, name string) error {
	f.mu.Lock()
	inj := f.inj
	f.mu.Unlock()
	if inj == nil {
		return nil
	}
	return inj(op, name)
}

func (f *Faulty) Create(name string) (File, error) {
	if err := f.check(OpCreate, name); err != nil {
		return nil, err
	}
	file, err := f.inner.Create(name)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, fs: f, name: name}, nil
}

func (f *Faulty) Open(name string) (File, error) {
	if err := f.check(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, fs: f, name: name}, nil
}

func (f *Faulty) List(dir string) ([]string, error) {
	if err := f.check(OpList, dir); err != nil {
		return nil, err
	}
	return f.inner.List(dir)
}

func (f *Faulty) Rename(oldname, newname string) error {
	if err := f.check(OpRename, oldname); err != nil {
		return err
	}
	return f.inner.Rename(oldname, newname)
}

func (f *Faulty) Remove(name string) error {
	if err := f.check(OpRemove, name); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

func (f *Faulty) MkdirAll(dir string) error { return f.inner.MkdirAll(dir) }

func (f *Faulty) SyncDir(dir string) error {
	if err := f.check(OpSyncDir, dir); err != nil {
		return err
	}
	return f.inner.SyncDir(dir)
}

func (f *Faulty) Lock(name string) (io.Closer, error) { return f.inner.Lock(name) }

type faultyFile struct {
	File
	fs   *Faulty
	name string
}

func (f *faultyFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpRead, f.name); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultyFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpWrite, f.name); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultyFile) Datasync() error {
	if err := f.fs.check(OpDatasync, f.name); err != nil {
		return err
	}
	return f.File.Datasync()
}

func (f *faultyFile) Preallocate(size int64) error {
	if err := f.fs.check(OpPreallocate, f.name); err != nil {
		return err
	}
	return f.File.Preallocate(size)
}

func (f *faultyFile) Truncate(size int64) error {
	if err := f.fs.check(OpTruncate, f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}
