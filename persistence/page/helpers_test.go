package page

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/junctionmq/junction/persistence/fs"
)

const testRoot = "/data/pages"

func mustDir(t testing.TB, fsys fs.FS, segSize int64) *Dir {
	t.Helper()
	d, err := Open(testRoot, fsys, Options{SegmentSize: segSize})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mustStore(t testing.TB, d *Dir, name string) *Store {
	t.Helper()
	s, err := d.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// recFor returns record i: its index, then (i*37)%300 bytes derived from i.
func recFor(i int) []byte {
	b := make([]byte, 8+(i*37)%300)
	binary.LittleEndian.PutUint64(b, uint64(i))
	for j := 8; j < len(b); j++ {
		b[j] = byte(i*7 + j)
	}
	return b
}

// indexOf checks that r is a record made by recFor and returns its index.
func indexOf(r []byte) (int, error) {
	if len(r) < 8 {
		return 0, fmt.Errorf("record of %d bytes", len(r))
	}
	i := int(binary.LittleEndian.Uint64(r))
	if i < 0 || i > 1<<30 || !bytes.Equal(r, recFor(i)) {
		return 0, fmt.Errorf("record %d has wrong content (%d bytes)", i, len(r))
	}
	return i, nil
}

func appendN(t testing.TB, s *Store, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := s.Append(recFor(i)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

func syncWait(s *Store) error {
	ch := make(chan error, 1)
	s.Sync(func(err error) { ch <- err })
	return <-ch
}

// readAll reads every record from pos with the given limits.
func readAll(s *Store, pos uint64, max, maxBytes int) ([][]byte, uint64, error) {
	var all [][]byte
	for {
		recs, next, err := s.Read(pos, max, maxBytes)
		if err != nil {
			return all, pos, err
		}
		if len(recs) == 0 {
			if next != pos {
				return all, pos, fmt.Errorf("empty read moved %#x -> %#x", pos, next)
			}
			return all, pos, nil
		}
		if next <= pos {
			return all, pos, fmt.Errorf("read did not advance: %#x -> %#x", pos, next)
		}
		all = append(all, recs...)
		pos = next
	}
}

// checkRun checks that recs are records first, first+1, ... and returns
// the index after the last.
func checkRun(recs [][]byte, first int) (int, error) {
	want := first
	for _, r := range recs {
		i, err := indexOf(r)
		if err != nil {
			return 0, err
		}
		if i != want {
			return 0, fmt.Errorf("got record %d, want %d", i, want)
		}
		want++
	}
	return want, nil
}

func segFiles(t testing.TB, fsys fs.FS, name string) []string {
	t.Helper()
	names, err := fsys.List(testRoot + "/" + escape(name))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want %v", err, target)
	}
}
