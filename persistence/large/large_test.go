package large

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/junctionmq/junction/persistence/fs"
)

func TestStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   func(t *testing.T) (fs.FS, string)
	}{
		{"mem", func(t *testing.T) (fs.FS, string) { return fs.NewCrashableMem(), "/large" }},
		{"os", func(t *testing.T) (fs.FS, string) { return fs.OS(), t.TempDir() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys, dir := tc.fs(t)
			s, err := Open(dir, fsys)
			if err != nil {
				t.Fatal(err)
			}
			body := bytes.Repeat([]byte("x"), 100_000)
			for _, id := range []uint64{3, 1, 2} {
				if _, err := s.Write(id, bytes.NewReader(body[:id*1000])); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.Read(2)
			if err != nil || len(got) != 2000 {
				t.Fatalf("Read: %d %v", len(got), err)
			}
			if err := s.Remove(1); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Read(1); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Read removed: %v", err)
			}
			if err := s.Remove(1); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Remove twice: %v", err)
			}
			ids, err := s.List()
			if err != nil || !slices.Equal(ids, []uint64{2, 3}) {
				t.Fatalf("List %v %v", ids, err)
			}
			// Link: a hard link on the OS, a copy in memory.
			if err := s.Link(2, 4); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Read(4); err != nil || len(got) != 2000 {
				t.Fatalf("Read linked: %d %v", len(got), err)
			}
		})
	}
}

func TestCrashSafety(t *testing.T) {
	mem := fs.NewCrashableMem()
	s, _ := Open("/large", mem)
	if _, err := s.Write(1, strings.NewReader("durable")); err != nil {
		t.Fatal(err)
	}
	// Crash after every op of a second write: body 2 is absent or complete.
	for k := 1; k <= 6; k++ {
		m := mem.CrashClone()
		m.SetCrashPoint(m.Ops()+k, nil)
		s2, _ := Open("/large", m)
		s2.Write(2, strings.NewReader("second body"))
		snap := m.Snapshot()
		if snap == nil {
			snap = m.CrashClone()
		}
		s3, err := Open("/large", snap)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := s3.Read(1); err != nil || string(b) != "durable" {
			t.Fatalf("k=%d: body 1: %q %v", k, b, err)
		}
		if b, err := s3.Read(2); err == nil && string(b) != "second body" {
			t.Fatalf("k=%d: partial body 2: %q", k, b)
		}
		names, _ := snap.List("/large")
		for _, n := range names {
			if len(n) > 4 && n[len(n)-4:] == ".tmp" {
				t.Fatalf("k=%d: leftover %s", k, n)
			}
		}
	}
	// ENOSPC on write: error, no partial body.
	f := fs.NewFaulty(mem, fs.FailMatching(func(op fs.Op, _ string) bool { return op == fs.OpWrite }, syscall.ENOSPC))
	s4, _ := Open("/large", f)
	if _, err := s4.Write(9, strings.NewReader("x")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Write: %v", err)
	}
	if ids, _ := s4.List(); slices.Contains(ids, 9) {
		t.Fatal("partial body listed")
	}
}

// cutReader gives n bytes of x, then fails as a connection cut off
// mid-body does.
type cutReader struct{ n int }

func (r *cutReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

func TestStreaming(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Larger than the buffer, and not a multiple of it.
	size := 3*BufferSize + 12345
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i * 7)
	}
	n, err := s.Write(5, bytes.NewReader(body))
	if err != nil || n != int64(size) {
		t.Fatalf("Write: %d %v", n, err)
	}
	if got, err := s.Size(5); err != nil || got != int64(size) {
		t.Fatalf("Size: %d %v", got, err)
	}
	r, err := s.Open(5)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Open: %d bytes, %v", len(got), err)
	}
	// Linked: the same body under another id, each removable alone.
	if err := s.Link(5, 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(5); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Read(7); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("linked body: %d bytes, %v", len(got), err)
	}
	if err := s.Link(7, 5); err != nil {
		t.Fatal(err)
	}
	// A sender cut off mid-body: an error, and nothing stored.
	if _, err := s.Write(6, &cutReader{n: 2*BufferSize + 5}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut Write: %v", err)
	}
	if ids, _ := s.List(); !slices.Equal(ids, []uint64{5, 7}) {
		t.Fatalf("after a cut write: %v", ids)
	}
	if _, err := s.Open(6); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open cut: %v", err)
	}
}
