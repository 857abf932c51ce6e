package page

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/junctionmq/junction/persistence/fs"
)

var (
	// ErrCorrupt is wrapped by errors reporting damaged data: a bad
	// segment header, a gap in the segment numbers, or a record that fails
	// its checks when read.
	ErrCorrupt = errors.New("page: corrupt data")
	// ErrFailed is wrapped (with the cause) by every error of a store after
	// a write, sync or remove failed: the store accepts nothing more.
	ErrFailed = errors.New("page: store failed")
	// ErrClosed is returned by calls on a closed store.
	ErrClosed = errors.New("page: store closed")
	// ErrOpen is returned by Dir.Open and Dir.Remove for a store that is
	// open.
	ErrOpen = errors.New("page: store is open")
	// ErrNotFound is returned by Dir.Remove for a store that does not exist.
	ErrNotFound = errors.New("page: store not found")
	// ErrPosition is returned by Read for a position that is not in the
	// store (released, or never written).
	ErrPosition = errors.New("page: position out of range")
	// ErrTooLarge is returned by Append for a record over MaxRecord bytes.
	ErrTooLarge = errors.New("page: record too large")
	// ErrName is returned for an empty store name.
	ErrName = errors.New("page: invalid store name")
)

const (
	// DefaultSegmentSize is the segment size used when Options.SegmentSize
	// is zero.
	DefaultSegmentSize = 64 << 20
	minSegmentSize     = headerSize + recHeaderSize + 1
	maxSegmentSize     = 1 << posShift

	markerSuffix = ".store"
	segSuffix    = ".pg"
)

// Options configures a Dir. The zero value is valid.
type Options struct {
	// SegmentSize is the size a segment file grows to before the next one
	// is started (default DefaultSegmentSize). A record larger than a
	// segment goes alone in its own segment.
	SegmentSize int64
}

func (o *Options) ensureDefaults() error {
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.SegmentSize < minSegmentSize || o.SegmentSize >= maxSegmentSize {
		return fmt.Errorf("page: SegmentSize %d out of range [%d, %d)", o.SegmentSize, minSegmentSize, int64(maxSegmentSize))
	}
	return nil
}

// Dir is a directory of page stores. It is safe for concurrent use.
type Dir struct {
	root  string
	fs    fs.FS
	opts  Options
	bytes atomic.Int64 // bytes of all segment files

	mu   sync.Mutex        // serializes Open, Remove and List
	open map[string]*Store // protected by mu
}

// Open opens the directory dir (creating it if needed), deletes the
// leftovers of stores whose creation or removal a crash interrupted
// (subdirectories without a marker that hold only segment files), and adds
// up the size of the existing stores. dir should be used by nothing else.
// A nil fsys means fs.OS().
func Open(dir string, fsys fs.FS, opts Options) (*Dir, error) {
	if fsys == nil {
		fsys = fs.OS()
	}
	if err := opts.ensureDefaults(); err != nil {
		return nil, err
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("page: %w", err)
	}
	d := &Dir{root: dir, fs: fsys, opts: opts, open: map[string]*Store{}}
	entries, err := fsys.List(dir)
	if err != nil {
		return nil, fmt.Errorf("page: %w", err)
	}
	markers := map[string]bool{}
	for _, e := range entries {
		if v, ok := strings.CutSuffix(e, markerSuffix); ok {
			if _, ok := unescape(v); ok {
				markers[v] = true
			}
		}
	}
	for v := range markers {
		sdir := dir + "/" + v
		names, err := fsys.List(sdir)
		if err != nil {
			continue // no segments yet; Open creates them
		}
		for _, n := range names {
			if _, ok := parseSegName(n); !ok {
				continue
			}
			size, err := fileSize(fsys, sdir+"/"+n)
			if err != nil {
				return nil, fmt.Errorf("page: %w", err)
			}
			d.bytes.Add(size)
		}
	}
	// Subdirectories without a marker: a store whose creation or removal
	// was interrupted. (Listing a file fails, so only directories count.)
	removed := false
	for _, e := range entries {
		if _, ok := unescape(e); !ok || markers[e] {
			continue
		}
		sdir := dir + "/" + e
		names, err := fsys.List(sdir)
		if err != nil || !allSegments(names) {
			continue // not a directory, or not ours: leave it alone
		}
		if err := removeFiles(fsys, sdir, names); err != nil {
			return nil, fmt.Errorf("page: %w", err)
		}
		fsys.Remove(sdir) // best effort: some file systems keep directories
		removed = true
	}
	if removed {
		if err := fsys.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("page: %w", err)
		}
	}
	return d, nil
}

func allSegments(names []string) bool {
	for _, n := range names {
		if _, ok := parseSegName(n); !ok {
			return false
		}
	}
	return true
}

func fileSize(fsys fs.FS, name string) (int64, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return 0, err
	}
	size, err := f.Size()
	f.Close()
	return size, err
}

// removeFiles removes the given files of dir and syncs it.
func removeFiles(fsys fs.FS, dir string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	for _, n := range names {
		if err := fsys.Remove(dir + "/" + n); err != nil {
			return err
		}
	}
	return fsys.SyncDir(dir)
}

func (d *Dir) markerPath(name string) string { return d.root + "/" + escape(name) + markerSuffix }
func (d *Dir) storeDir(name string) string   { return d.root + "/" + escape(name) }

// Open opens the store called name, creating it if it does not exist, and
// recovers it (see the package doc). A store can be open once at a time.
func (d *Dir) Open(name string) (*Store, error) {
	if name == "" {
		return nil, ErrName
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.open[name] != nil {
		return nil, fmt.Errorf("%w: %q", ErrOpen, name)
	}
	exists, err := d.existsLocked(name)
	if err != nil {
		return nil, err
	}
	var s *Store
	if exists {
		s, err = d.recoverStore(name)
	} else {
		s, err = d.createStore(name)
	}
	if err != nil {
		return nil, fmt.Errorf("page: open %q: %w", name, err)
	}
	d.open[name] = s
	go s.syncLoop()
	return s, nil
}

func (d *Dir) existsLocked(name string) (bool, error) {
	f, err := d.fs.Open(d.markerPath(name))
	if err != nil {
		// Tell "absent" from a real failure by listing.
		entries, lerr := d.fs.List(d.root)
		if lerr != nil {
			return false, fmt.Errorf("page: %w", lerr)
		}
		i := sort.SearchStrings(entries, escape(name)+markerSuffix)
		if i < len(entries) && entries[i] == escape(name)+markerSuffix {
			return false, fmt.Errorf("page: %w", err)
		}
		return false, nil
	}
	f.Close()
	return true, nil
}

// List returns the names of the stores in the directory, sorted.
func (d *Dir) List() ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	entries, err := d.fs.List(d.root)
	if err != nil {
		return nil, fmt.Errorf("page: %w", err)
	}
	var names []string
	for _, e := range entries {
		if v, ok := strings.CutSuffix(e, markerSuffix); ok {
			if name, ok := unescape(v); ok {
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// Remove deletes the store called name and its files. The store must not
// be open. Removing the marker and syncing the directory is the commit
// point; the segment files are deleted after it.
func (d *Dir) Remove(name string) error {
	if name == "" {
		return ErrName
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.open[name] != nil {
		return fmt.Errorf("%w: %q", ErrOpen, name)
	}
	exists, err := d.existsLocked(name)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if err := d.fs.Remove(d.markerPath(name)); err != nil {
		return fmt.Errorf("page: remove %q: %w", name, err)
	}
	if err := d.fs.SyncDir(d.root); err != nil {
		return fmt.Errorf("page: remove %q: %w", name, err)
	}
	sdir := d.storeDir(name)
	names, err := d.fs.List(sdir)
	if err != nil {
		return nil // no segments
	}
	var total int64
	for _, n := range names {
		if strings.HasSuffix(n, segSuffix) {
			if size, err := fileSize(d.fs, sdir+"/"+n); err == nil {
				total += size
			}
		}
	}
	if err := removeFiles(d.fs, sdir, names); err != nil {
		return fmt.Errorf("page: remove %q: %w", name, err)
	}
	d.bytes.Add(-total)
	d.fs.Remove(sdir) // best effort; a leftover is deleted by the next Open
	return nil
}

// Bytes returns the disk space used by the segment files of all stores
// (including bytes appended but not yet written).
func (d *Dir) Bytes() int64 { return d.bytes.Load() }

func (d *Dir) closed(s *Store) {
	d.mu.Lock()
	if d.open[s.name] == s {
		delete(d.open, s.name)
	}
	d.mu.Unlock()
}

func segName(num uint64) string { return fmt.Sprintf("%08d%s", num, segSuffix) }

// parseSegName returns the number of a segment file name.
func parseSegName(n string) (uint64, bool) {
	v, ok := strings.CutSuffix(n, segSuffix)
	if !ok {
		return 0, false
	}
	num, err := strconv.ParseUint(v, 10, 64)
	if err != nil || num == 0 || segName(num) != n {
		return 0, false
	}
	return num, true
}

func nameByteOK(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_'
}

// escape maps a store name to a file name: bytes other than [A-Za-z0-9_-]
// become %XX, so an escaped name never contains '.' and cannot collide with
// a marker.
func escape(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if c := name[i]; nameByteOK(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// unescape inverts escape; ok is false for a string escape cannot produce.
func unescape(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(v))
		i += 2
	}
	name := string(b)
	return name, escape(name) == s
}
