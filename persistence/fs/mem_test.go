package fs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// memImage returns the contents of name in m.
func memImage(t *testing.T, m *MemFS, name string) []byte {
	t.Helper()
	f, err := m.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	b := make([]byte, size)
	if size > 0 {
		if _, err := f.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func fill(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }

func TestCrashClonePages(t *testing.T) {
	const ps = 16
	m := NewCrashableMem()
	m.MkdirAll("/d")
	f, _ := m.Create("/d/a")
	f.WriteAt(fill(4*ps, 'a'), 0) // durable: 4 pages of 'a'
	f.Datasync()
	m.SyncDir("/d")
	g, _ := m.Create("/d/b") // never SyncDir'ed: lost in every image
	g.WriteAt([]byte("x"), 0)
	g.Datasync()

	f.WriteAt(fill(ps+4, 'b'), ps-2) // pages 0, 1 and 2
	f.WriteAt(fill(2, 'c'), 2*ps+1)  // page 2 again
	f.WriteAt(fill(ps, 'd'), 5*ps)   // grows the file: pages 4 (zeros) and 5
	frozen := m.Clone()
	f.WriteAt(fill(4*ps, 'z'), 0) // after the freeze: in no image of frozen
	f.Datasync()

	pages := frozen.DirtyPages(ps)
	want := []Page{{"/d/a", 0, 1}, {"/d/a", ps, 1}, {"/d/a", 2 * ps, 2}, {"/d/a", 5 * ps, 1}}
	if fmt.Sprint(pages) != fmt.Sprint(want) {
		t.Fatalf("DirtyPages = %v, want %v", pages, want)
	}
	cur := memImage(t, frozen, "/d/a")
	durable := append(fill(4*ps, 'a'), make([]byte, 2*ps)...) // current size, durable bytes
	for _, tc := range []struct {
		desc string
		vers []int
		want []byte
	}{
		{"nothing written back", []int{0, 0, 0, 0}, durable},
		{"everything written back", []int{1, 1, 2, 1}, cur},
		{"only page 1, page 2 before its second write", []int{0, 1, 1, 0}, func() []byte {
			b := append([]byte(nil), durable...)
			copy(b[ps:], fill(ps, 'b'))
			copy(b[2*ps:], fill(2, 'b'))
			return b
		}()},
	} {
		img := frozen.CrashClonePages(ps, func(i int, p Page) int {
			if p != pages[i] {
				t.Fatalf("%s: page %d = %v, want %v", tc.desc, i, p, pages[i])
			}
			return tc.vers[i]
		})
		if got := memImage(t, img, "/d/a"); !bytes.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.desc, got, tc.want)
		}
		if _, err := img.Open("/d/b"); err == nil {
			t.Errorf("%s: a file whose directory entry was never synced survived", tc.desc)
		}
		if len(img.DirtyPages(ps)) != 0 {
			t.Errorf("%s: an image has dirty pages", tc.desc)
		}
	}
	if got := memImage(t, frozen.CrashClone(), "/d/a"); !bytes.Equal(got, fill(4*ps, 'a')) {
		t.Errorf("CrashClone of the frozen copy = %q", got)
	}
	if got := memImage(t, m.CrashClone(), "/d/a"); !bytes.Equal(got[:4*ps], fill(4*ps, 'z')) {
		t.Errorf("the original lost writes made after Clone: %q", got)
	}
}

// TestFreezeAfter sets freeze points while another goroutine is operating
// on the file system, as a journal's writer and preparer do while a crash
// test starts a run: no point may be missed, and each copy must be the
// file system right after the operation it is labelled with.
func TestFreezeAfter(t *testing.T) {
	m := NewCrashableMem()
	m.MkdirAll("/d")
	f, _ := m.Create("/d/a") // op 1
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		// Iteration i writes i (op 2+2i), then syncs (op 3+2i): the copy
		// taken after op k holds (k-2)/2.
		for i := uint64(0); i < 1<<22; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := f.WriteAt(binary.LittleEndian.AppendUint64(nil, i), 0); err != nil {
				done <- err
				return
			}
			if err := f.Datasync(); err != nil {
				done <- err
				return
			}
		}
		done <- errors.New("not stopped")
	}()
	deadline := time.Now().Add(10 * time.Second)
	for m.Ops() < 100 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	base := m.FreezeAfter(3, 1, 2, 2, 0)
	for len(m.Frozen()) < 3 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	frozen := m.Frozen()
	if len(frozen) != 3 {
		t.Fatalf("%d copies taken after FreezeAfter(3, 1, 2, 2, 0) at %d, want 3", len(frozen), base)
	}
	for i, fr := range frozen {
		if fr.Op != base+1+i {
			t.Errorf("copy %d taken after op %d, want %d", i, fr.Op, base+1+i)
		}
		got := binary.LittleEndian.Uint64(memImage(t, fr.FS, "/d/a"))
		if want := uint64(fr.Op-2) / 2; got != want {
			t.Errorf("copy taken after op %d holds %d, want %d", fr.Op, got, want)
		}
	}
}
