package fs

import (
	"bytes"
	"fmt"
	"testing"
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
