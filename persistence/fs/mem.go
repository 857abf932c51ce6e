package fs

import (
	"fmt"
	"io"
	iofs "io/fs"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
)

// MemFS is an in-memory FS that tracks which state is durable, in the spirit
// of pebble's vfs.NewCrashableMem. It is safe for concurrent use.
type MemFS struct {
	mu     sync.Mutex
	files  map[string]*memNode // current namespace
	synced map[string]*memNode // durable namespace (as of the last SyncDir per dir)
	dirs   map[string]bool
	locks  map[string]bool
	ops    int // mutating operations so far

	crashAt  int    // take a crash snapshot right after this op (0 = never)
	snapshot *MemFS // taken at crashAt
	snapRand *rand.Rand
	freezeAt []int    // take a Clone right after each of these ops
	frozen   []Freeze // taken at freezeAt, in op order
}

type memWrite struct {
	off  int64
	data []byte // nil with trunc >= 0 for a size change
	size int64  // new size for truncate/preallocate, -1 for a write
}

type memNode struct {
	data     []byte
	synced   []byte
	unsynced []memWrite
}

// NewCrashableMem returns an empty crashable in-memory file system.
func NewCrashableMem() *MemFS {
	return &MemFS{
		files:  map[string]*memNode{},
		synced: map[string]*memNode{},
		dirs:   map[string]bool{"/": true, ".": true},
		locks:  map[string]bool{},
	}
}

func clean(name string) string { return path.Clean(name) }

// Ops returns the number of mutating operations (write, datasync,
// preallocate, truncate, create, rename, remove, syncdir) performed so far.
func (m *MemFS) Ops() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops
}

// SetCrashPoint arranges for a crash snapshot (as CrashClone, or
// CrashCloneTorn with rng when rng is non-nil) to be taken right after the
// op-th mutating operation. Retrieve it with Snapshot.
func (m *MemFS) SetCrashPoint(op int, rng *rand.Rand) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.crashAt, m.snapRand, m.snapshot = op, rng, nil
}

// Snapshot returns the crash snapshot taken at the crash point, or nil if the
// crash point has not been reached.
func (m *MemFS) Snapshot() *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snapshot
}

// Freeze is a copy of a MemFS (see Clone) taken right after its Op-th
// mutating operation.
type Freeze struct {
	Op int
	FS *MemFS
}

// FreezeAfter arranges for a Clone of m to be taken right after each of
// the n-th mutating operations from now (1 is the next one; points below 1
// are ignored), replacing earlier freeze points, and returns the number of
// operations performed so far: the points are base+n. The points are fixed
// under the lock that counts operations, so none is missed while other
// goroutines (a journal's writer, preparer, reclaim) operate on m; reading
// Ops and then setting absolute points would race with them. Frozen returns
// the copies taken so far.
func (m *MemFS) FreezeAfter(n ...int) (base int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.freezeAt, m.frozen = nil, nil
	for _, k := range n {
		if k >= 1 {
			m.freezeAt = append(m.freezeAt, m.ops+k)
		}
	}
	slices.Sort(m.freezeAt)
	m.freezeAt = slices.Compact(m.freezeAt)
	return m.ops
}

// Frozen returns the copies taken at the freeze points reached so far, in
// op order, each with the operation it was taken after.
func (m *MemFS) Frozen() []Freeze {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.frozen)
}

// opLocked counts a mutating operation. m.mu must be held.
func (m *MemFS) opLocked() {
	m.ops++
	if m.crashAt > 0 && m.ops == m.crashAt {
		m.snapshot = m.cloneLocked(m.snapRand)
	}
	if slices.Contains(m.freezeAt, m.ops) {
		m.frozen = append(m.frozen, Freeze{Op: m.ops, FS: m.copyLocked()})
	}
}

// CrashClone returns a new MemFS holding only the durable state of m, as after
// a power loss: synced directory entries with their synced data.
func (m *MemFS) CrashClone() *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cloneLocked(nil)
}

// CrashCloneTorn is CrashClone, except that each file also keeps a random
// in-order prefix of its unsynced writes, the last one possibly cut at a
// 512-byte sector boundary (relative to the write's offset).
func (m *MemFS) CrashCloneTorn(rng *rand.Rand) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cloneLocked(rng)
}

func (m *MemFS) cloneLocked(rng *rand.Rand) *MemFS {
	c := NewCrashableMem()
	for d := range m.dirs {
		c.dirs[d] = true
	}
	done := map[*memNode]*memNode{}
	for name, n := range m.synced {
		cn, ok := done[n]
		if !ok {
			data := append([]byte(nil), n.synced...)
			if rng != nil && len(n.unsynced) > 0 {
				keep := rng.IntN(len(n.unsynced) + 1)
				for i, w := range n.unsynced[:keep] {
					if w.size >= 0 {
						data = resize(data, w.size)
						continue
					}
					d := w.data
					if i == keep-1 && len(d) > 512 && rng.IntN(2) == 0 {
						d = d[:512*rng.IntN(len(d)/512+1)]
					}
					data = writeAt(data, d, w.off)
				}
			}
			cn = &memNode{data: data, synced: append([]byte(nil), data...)}
			done[n] = cn
		}
		c.files[name] = cn
		c.synced[name] = cn
	}
	return c
}

// Clone returns a copy of m as it is at this instant, unsynced writes
// included, as if the machine had been stopped there: crash images are made
// from the copy afterwards (CrashClone, CrashClonePages, as many as wanted)
// while m goes on. Locks are not copied.
func (m *MemFS) Clone() *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.copyLocked()
}

func (m *MemFS) copyLocked() *MemFS {
	c := NewCrashableMem()
	for d := range m.dirs {
		c.dirs[d] = true
	}
	nodes := map[*memNode]*memNode{}
	cp := func(n *memNode) *memNode {
		if cn, ok := nodes[n]; ok {
			return cn
		}
		// memWrite.data is never modified after it is recorded: share it.
		cn := &memNode{
			data:     append([]byte(nil), n.data...),
			synced:   append([]byte(nil), n.synced...),
			unsynced: append([]memWrite(nil), n.unsynced...),
		}
		nodes[n] = cn
		return cn
	}
	for name, n := range m.files {
		c.files[name] = cp(n)
	}
	for name, n := range m.synced {
		c.synced[name] = cp(n)
	}
	return c
}

// Page is one page of a durable file that unsynced operations changed
// after the file's last Datasync.
type Page struct {
	Name string // the file (its first durable name, if it has several)
	Off  int64  // page-aligned offset
	// Versions is how many contents the page had since: version v
	// (1..Versions) is the page after the v-th unsynced operation that
	// touched it, version 0 its durable content.
	Versions int
}

// DirtyPages lists, by file name then offset, the pages of pageSize bytes
// that CrashClonePages chooses between.
func (m *MemFS) DirtyPages(pageSize int64) []Page {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Page
	for _, d := range m.durableLocked() {
		offs, vers := d.node.pageVersions(pageSize)
		for _, off := range offs {
			out = append(out, Page{Name: d.name, Off: off, Versions: len(vers[off])})
		}
	}
	return out
}

// CrashClonePages returns the image of a power loss in which every dirty
// page reached the disk on its own schedule, in any order: for the i-th page
// of DirtyPages, choose returns which version survives (0: none of the
// unsynced writes; Versions: all of them; in between: the page was written
// back, then changed again before the crash). Enumerating the choices
// covers every order in which a kernel may write pages back. Files keep
// their current size (bytes no kept write reached read as the durable
// content, or zero past it); only durable directory entries survive, as in
// CrashClone. choose must return a version in [0, Versions].
func (m *MemFS) CrashClonePages(pageSize int64, choose func(i int, p Page) int) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := NewCrashableMem()
	for d := range m.dirs {
		c.dirs[d] = true
	}
	i := 0
	for _, d := range m.durableLocked() {
		offs, vers := d.node.pageVersions(pageSize)
		data := append([]byte(nil), d.node.data...)
		for _, off := range offs {
			v := choose(i, Page{Name: d.name, Off: off, Versions: len(vers[off])})
			i++
			if v < 0 || v > len(vers[off]) {
				panic(fmt.Sprintf("fs: CrashClonePages: version %d of %s@%d, have %d", v, d.name, off, len(vers[off])))
			}
			page := pageOf(d.node.synced, off, pageSize)
			if v > 0 {
				page = vers[off][v-1]
			}
			if off < int64(len(data)) {
				copy(data[off:], page)
			}
		}
		cn := &memNode{data: data, synced: append([]byte(nil), data...)}
		for _, name := range d.names {
			c.files[name] = cn
			c.synced[name] = cn
		}
	}
	return c
}

type durableNode struct {
	name  string   // first of names
	names []string // durable names of the node, sorted
	node  *memNode
}

// durableLocked returns the nodes of the durable namespace, ordered by their
// first name. m.mu must be held.
func (m *MemFS) durableLocked() []durableNode {
	names := make([]string, 0, len(m.synced))
	for name := range m.synced {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []durableNode
	at := map[*memNode]int{}
	for _, name := range names {
		n := m.synced[name]
		if k, ok := at[n]; ok {
			out[k].names = append(out[k].names, name)
			continue
		}
		at[n] = len(out)
		out = append(out, durableNode{name: name, names: []string{name}, node: n})
	}
	return out
}

// pageVersions replays n's unsynced operations over its durable content and
// returns the offsets of the pages they touched (ascending) and, per page,
// its content after each of those operations.
func (n *memNode) pageVersions(ps int64) ([]int64, map[int64][][]byte) {
	cur := append([]byte(nil), n.synced...)
	vers := map[int64][][]byte{}
	var offs []int64
	touch := func(from, to int64) {
		for p := from / ps * ps; p < to; p += ps {
			if _, ok := vers[p]; !ok {
				offs = append(offs, p)
			}
			vers[p] = append(vers[p], pageOf(cur, p, ps))
		}
	}
	for _, w := range n.unsynced {
		if w.size >= 0 {
			old := int64(len(cur))
			cur = resize(cur, w.size)
			touch(min(old, w.size), max(old, w.size))
			continue
		}
		cur = writeAt(cur, w.data, w.off)
		touch(w.off, w.off+int64(len(w.data)))
	}
	sort.Slice(offs, func(a, b int) bool { return offs[a] < offs[b] })
	return offs, vers
}

// pageOf returns the page at off of b, zero-padded to ps bytes.
func pageOf(b []byte, off, ps int64) []byte {
	p := make([]byte, ps)
	if off < int64(len(b)) {
		copy(p, b[off:])
	}
	return p
}

func resize(b []byte, size int64) []byte {
	if int64(len(b)) >= size {
		return b[:size]
	}
	return append(b, make([]byte, size-int64(len(b)))...)
}

func writeAt(b, p []byte, off int64) []byte {
	if end := off + int64(len(p)); end > int64(len(b)) {
		b = resize(b, end)
	}
	copy(b[off:], p)
	return b
}

func (m *MemFS) Create(name string) (File, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[path.Dir(name)] {
		return nil, &iofs.PathError{Op: "create", Path: name, Err: iofs.ErrNotExist}
	}
	n := &memNode{}
	m.files[name] = n
	m.opLocked()
	return &memFile{fs: m, node: n, name: name}, nil
}

func (m *MemFS) Open(name string) (File, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.files[name]
	if !ok {
		return nil, &iofs.PathError{Op: "open", Path: name, Err: iofs.ErrNotExist}
	}
	return &memFile{fs: m, node: n, name: name}, nil
}

func (m *MemFS) List(dir string) ([]string, error) {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[dir] {
		return nil, &iofs.PathError{Op: "list", Path: dir, Err: iofs.ErrNotExist}
	}
	var names []string
	for name := range m.files {
		if path.Dir(name) == dir {
			names = append(names, path.Base(name))
		}
	}
	sort.Strings(names)
	return names, nil
}

func (m *MemFS) Rename(oldname, newname string) error {
	oldname, newname = clean(oldname), clean(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.files[oldname]
	if !ok {
		return &iofs.PathError{Op: "rename", Path: oldname, Err: iofs.ErrNotExist}
	}
	delete(m.files, oldname)
	m.files[newname] = n
	m.opLocked()
	return nil
}

func (m *MemFS) Remove(name string) error {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[name]; !ok {
		return &iofs.PathError{Op: "remove", Path: name, Err: iofs.ErrNotExist}
	}
	delete(m.files, name)
	m.opLocked()
	return nil
}

func (m *MemFS) MkdirAll(dir string) error {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := dir; ; d = path.Dir(d) {
		m.dirs[d] = true
		if d == "/" || d == "." {
			break
		}
	}
	return nil
}

func (m *MemFS) SyncDir(dir string) error {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.synced {
		if path.Dir(name) == dir {
			delete(m.synced, name)
		}
	}
	for name, n := range m.files {
		if path.Dir(name) == dir {
			m.synced[name] = n
		}
	}
	m.opLocked()
	return nil
}

type memLock struct {
	m    *MemFS
	name string
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.m.mu.Lock()
		delete(l.m.locks, l.name)
		l.m.mu.Unlock()
	})
	return nil
}

func (m *MemFS) Lock(name string) (io.Closer, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks[name] {
		return nil, fmt.Errorf("%w: %s", ErrLocked, name)
	}
	if _, ok := m.files[name]; !ok {
		m.files[name] = &memNode{}
	}
	m.locks[name] = true
	return &memLock{m: m, name: name}, nil
}

// String lists the files and their sizes (for test failure messages).
func (m *MemFS) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	var names []string
	for n := range m.files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "%s %d\n", n, len(m.files[n].data))
	}
	return b.String()
}

type memFile struct {
	fs     *MemFS
	node   *memNode
	name   string
	closed bool
}

var errClosedFile = iofs.ErrClosed

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, errClosedFile
	}
	if off >= int64(len(f.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, errClosedFile
	}
	f.node.data = writeAt(f.node.data, p, off)
	f.node.unsynced = append(f.node.unsynced, memWrite{off: off, data: append([]byte(nil), p...), size: -1})
	f.fs.opLocked()
	return len(p), nil
}

func (f *memFile) Datasync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errClosedFile
	}
	f.node.synced = append(f.node.synced[:0:0], f.node.data...)
	f.node.unsynced = nil
	f.fs.opLocked()
	return nil
}

func (f *memFile) Preallocate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errClosedFile
	}
	if int64(len(f.node.data)) < size {
		f.node.data = resize(f.node.data, size)
		f.node.unsynced = append(f.node.unsynced, memWrite{size: size})
	}
	f.fs.opLocked()
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errClosedFile
	}
	f.node.data = resize(f.node.data, size)
	f.node.unsynced = append(f.node.unsynced, memWrite{size: size})
	f.fs.opLocked()
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return int64(len(f.node.data)), nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errClosedFile
	}
	f.closed = true
	return nil
}
