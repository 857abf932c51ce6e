// Package large stores large-message bodies in their own files beside the
// journal, one file per id, through the fs seam. The journal record that
// references a body is the caller's; at recovery the caller lists the
// stored ids and removes the orphans no live record references.
//
// Bodies are streamed both ways (Write reads from an io.Reader, Open
// returns one), through a buffer of BufferSize, so a body of any size
// costs that much memory.
//
// Write is crash safe: the body is written to "<id>.tmp", fdatasync'ed,
// renamed to "<id>.msg" and the directory is synced, so after a crash a
// body is either complete under its final name or absent (a leftover .tmp is
// removed by Open).
package large

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/junctionmq/junction/persistence/fs"
)

// ErrNotFound is returned by Read and Remove for an id with no body.
var ErrNotFound = errors.New("large: body not found")

// Store is a directory of large bodies. It is safe for concurrent use on
// distinct ids.
type Store struct {
	dir string
	fs  fs.FS
}

// Open creates dir if needed and removes leftover temporary files.
// A nil fsys means fs.OS().
func Open(dir string, fsys fs.FS) (*Store, error) {
	if fsys == nil {
		fsys = fs.OS()
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("large: %w", err)
	}
	s := &Store{dir: dir, fs: fsys}
	names, err := fsys.List(dir)
	if err != nil {
		return nil, fmt.Errorf("large: %w", err)
	}
	removed := false
	for _, n := range names {
		if strings.HasSuffix(n, ".tmp") {
			if err := fsys.Remove(dir + "/" + n); err != nil {
				return nil, fmt.Errorf("large: %w", err)
			}
			removed = true
		}
	}
	if removed {
		if err := fsys.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("large: %w", err)
		}
	}
	return s, nil
}

func (s *Store) name(id uint64, ext string) string {
	return fmt.Sprintf("%s/%020d%s", s.dir, id, ext)
}

// BufferSize is the size of the buffer Write copies a body through: the
// memory one transfer costs, whatever the body's size.
const BufferSize = 1 << 20

var bufPool = sync.Pool{New: func() any { b := make([]byte, BufferSize); return &b }}

// Write stores the body read from r until io.EOF under id (replacing any
// previous body), through a buffer of BufferSize, and returns its length.
// It returns after the data and the directory entry are synced. If r or
// the disk fails, nothing is left under id (the partial body, written
// under a temporary name, is removed) and the error is returned.
func (s *Store) Write(id uint64, r io.Reader) (int64, error) {
	tmp := s.name(id, ".tmp")
	f, err := s.fs.Create(tmp)
	if err != nil {
		return 0, fmt.Errorf("large: %w", err)
	}
	bp := bufPool.Get().(*[]byte)
	n, err := copyAt(f, r, *bp)
	bufPool.Put(bp)
	if err == nil {
		err = f.Datasync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp, s.name(id, ".msg"))
	}
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	if err != nil {
		s.fs.Remove(tmp)
		return 0, fmt.Errorf("large: write %d: %w", id, err)
	}
	return n, nil
}

// copyAt copies r to f from offset 0 through buf, until r returns
// io.EOF; any other error of r is returned.
func copyAt(f fs.File, r io.Reader, buf []byte) (int64, error) {
	var off int64
	for {
		n, err := 0, error(nil)
		for n < len(buf) && err == nil {
			var k int
			k, err = r.Read(buf[n:])
			n += k
		}
		if n > 0 {
			if _, werr := f.WriteAt(buf[:n], off); werr != nil {
				return off, werr
			}
			off += int64(n)
		}
		if err == io.EOF {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
}

// Open returns a reader of the body stored under id, from its start; the
// caller closes it. It reads the file as it goes: the body is never held
// whole.
func (s *Store) Open(id uint64) (io.ReadCloser, error) {
	f, err := s.fs.Open(s.name(id, ".msg"))
	if err != nil {
		return nil, fmt.Errorf("%w: %d: %w", ErrNotFound, id, err)
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("large: %w", err)
	}
	return &reader{r: io.NewSectionReader(f, 0, size), f: f}, nil
}

type reader struct {
	r *io.SectionReader
	f fs.File
}

func (r *reader) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r *reader) Close() error               { return r.f.Close() }

// Size returns the length of the body stored under id.
func (s *Store) Size(id uint64) (int64, error) {
	f, err := s.fs.Open(s.name(id, ".msg"))
	if err != nil {
		return 0, fmt.Errorf("%w: %d: %w", ErrNotFound, id, err)
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return 0, fmt.Errorf("large: %w", err)
	}
	return n, nil
}

// Read returns a new copy of the body stored under id; the caller owns
// it. For tools and tests: the broker streams bodies with Open.
func (s *Store) Read(id uint64) ([]byte, error) {
	r, err := s.Open(id)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("large: read %d: %w", id, err)
	}
	return b, nil
}

// linker is an fs.FS that can make hard links (fs.OS()).
type linker interface {
	Link(oldname, newname string) error
}

// Link stores the body of from under to as well, durably: a hard link
// where the file system has them (no bytes copied), a streamed copy
// otherwise. Either body can then be removed without the other.
func (s *Store) Link(from, to uint64) error {
	l, ok := s.fs.(linker)
	if !ok {
		r, err := s.Open(from)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = s.Write(to, r)
		return err
	}
	tmp := s.name(to, ".tmp")
	err := l.Link(s.name(from, ".msg"), tmp)
	if err == nil {
		err = s.fs.Rename(tmp, s.name(to, ".msg"))
	}
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	if err != nil {
		s.fs.Remove(tmp)
		return fmt.Errorf("large: link %d to %d: %w", from, to, err)
	}
	return nil
}

// Remove deletes the body of id and syncs the directory.
func (s *Store) Remove(id uint64) error {
	if err := s.fs.Remove(s.name(id, ".msg")); err != nil {
		return fmt.Errorf("%w: %d: %w", ErrNotFound, id, err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return fmt.Errorf("large: %w", err)
	}
	return nil
}

// List returns the ids that have a stored body, ascending.
func (s *Store) List() ([]uint64, error) {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return nil, fmt.Errorf("large: %w", err)
	}
	var ids []uint64
	for _, n := range names {
		if v, ok := strings.CutSuffix(n, ".msg"); ok {
			if id, err := strconv.ParseUint(v, 10, 64); err == nil {
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}
