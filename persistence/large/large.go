// Package large stores large-message bodies in their own files beside the
// journal, one file per id, through the fs seam. The journal record that
// references a body is the caller's; at recovery the caller lists the
// stored ids and removes the orphans no live record references.
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

// Write stores body durably under id (replacing any previous body). It
// returns after the data and the directory entry are synced. body is not
// retained.
func (s *Store) Write(id uint64, body []byte) error {
	tmp := s.name(id, ".tmp")
	f, err := s.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("large: %w", err)
	}
	_, err = f.WriteAt(body, 0)
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
		return fmt.Errorf("large: write %d: %w", id, err)
	}
	return nil
}

// Read returns a new copy of the body stored under id; the caller owns it.
func (s *Store) Read(id uint64) ([]byte, error) {
	f, err := s.fs.Open(s.name(id, ".msg"))
	if err != nil {
		return nil, fmt.Errorf("%w: %d: %w", ErrNotFound, id, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("large: %w", err)
	}
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && int64(n) == size) {
		return nil, fmt.Errorf("large: read %d: %w", id, err)
	}
	return b, nil
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
