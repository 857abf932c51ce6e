package journal

import (
	"errors"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/junctionmq/junction/persistence/fs"
)

// readCounter is a file system that counts the bytes read from each file.
type readCounter struct {
	fs.FS
	mu   sync.Mutex
	read map[string]int64
	size map[string]int64
}

func (c *readCounter) Open(name string) (fs.File, error) {
	f, err := c.FS.Open(name)
	if err != nil {
		return nil, err
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return nil, err
	}
	c.mu.Lock()
	c.size[name] = size
	c.mu.Unlock()
	return &countedFile{File: f, c: c, name: name}, nil
}

type countedFile struct {
	fs.File
	c    *readCounter
	name string
}

func (f *countedFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.c.mu.Lock()
	f.c.read[f.name] += int64(n)
	f.c.mu.Unlock()
	return n, err
}

// TestOpenReadsOnlyWrittenRecords: recovery reads a free file's header
// block and first slot only and a data file as far as its records go,
// records larger than the first read and across every growth of the view
// come back whole, and a failed read is an error, not a torn tail.
func TestOpenReadsOnlyWrittenRecords(t *testing.T) {
	mem := fs.NewCrashableMem()
	cfg := testConfig(mem)
	cfg.FileSize = 4 << 20
	j := mustOpen(t, cfg)
	m := newModel()
	rng := rand.New(rand.NewPCG(17, 1))
	var written int64 // the records' encoded bytes
	for id := uint64(1); written < 9<<20; id++ {
		n := 1 + rng.IntN(200<<10)
		if id == 1 {
			n = 3 << 16 // the first record of the first file, larger than a first read
		}
		p := payloadFor(id, n)
		if err := waitErr(func(d func(error)) { j.Append(id, 1, p, false, d) }); err != nil {
			t.Fatal(err)
		}
		m.live[id] = liveRec{utype: 1, payload: string(p)}
		written += int64(encodedSize(n))
		if id%7 == 0 {
			if err := waitErr(func(d func(error)) { j.Delete(id, false, d) }); err != nil {
				t.Fatal(err)
			}
			delete(m.live, id)
			written += recHeaderSize
		}
	}
	// The ready files are made in the background: wait for them, so that
	// the reopen below has files that hold no records to read.
	for deadline := time.Now().Add(10 * time.Second); j.Stats().ReadyFiles < cfg.MinFiles; {
		if time.Now().After(deadline) {
			t.Fatalf("%d ready files after 10 s, want %d", j.Stats().ReadyFiles, cfg.MinFiles)
		}
		time.Sleep(time.Millisecond)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	rc := &readCounter{FS: mem, read: map[string]int64{}, size: map[string]int64{}}
	cfg.FS = rc
	j = mustOpen(t, cfg)
	got, _ := load(t, j)
	m.check(t, got)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	var headerOnly int
	var total int64
	for name, n := range rc.read {
		if size := rc.size[name]; n > size {
			t.Errorf("%s: read %d bytes of %d", name, n, size)
		}
		if n == firstRead {
			headerOnly++
		}
		total += n
	}
	// Every file is read to its header and first slot, a data file on to
	// its SEGMENT_END (or its last record and the empty slot after it) and
	// at most a chunk past it. The ready files hold no records.
	limit := written + int64(len(rc.read))*(segHeaderSize+3*recHeaderSize+viewChunk)
	if headerOnly < cfg.MinFiles || total > limit {
		t.Errorf("%d files read only to %d bytes (want %d or more); %d bytes read in all, want at most %d: reads %v, sizes %v",
			headerOnly, firstRead, cfg.MinFiles, total, limit, rc.read, rc.size)
	}

	// A read that fails after the first is reported as such.
	reads := 0
	cfg.FS = fs.NewFaulty(mem, func(op fs.Op, name string) error {
		if op != fs.OpRead {
			return nil
		}
		if reads++; reads > len(rc.read)+1 {
			return syscall.EIO
		}
		return nil
	})
	if _, err := Open(cfg); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Open with failing reads: %v, want EIO", err)
	}
}
