package fs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// OS returns the production file system: os plus fallocate, fdatasync and
// flock from golang.org/x/sys/unix.
func OS() FS { return osFS{} }

type osFS struct{}

type osFile struct{ *os.File }

func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Open(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) List(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// Link makes newname a hard link to oldname (an optional method: see
// large.Store.Link).
func (osFS) Link(oldname, newname string) error { return os.Link(oldname, newname) }
func (osFS) Remove(name string) error           { return os.Remove(name) }
func (osFS) MkdirAll(dir string) error          { return os.MkdirAll(dir, 0o755) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

type flockCloser struct{ f *os.File }

func (c flockCloser) Close() error {
	err := unix.Flock(int(c.f.Fd()), unix.LOCK_UN)
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, filepath.Clean(name))
		}
		return nil, fmt.Errorf("flock %s: %w", name, err)
	}
	return flockCloser{f}, nil
}

func (f osFile) Datasync() error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

func (f osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// Preallocate uses fallocate(fd, 0, 0, size) (mode 0, so the size changes
// now and not on every later sync), falling back to writing zeros when the
// file system does not support it.
func (f osFile) Preallocate(size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EINTR):
		return zeroFill(f, size)
	default:
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
	}
}

func zeroFill(f File, size int64) error {
	cur, err := f.Size()
	if err != nil {
		return err
	}
	zeros := make([]byte, 1<<20)
	for off := cur; off < size; {
		n := int64(len(zeros))
		if size-off < n {
			n = size - off
		}
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}
