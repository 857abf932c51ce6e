package page

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/junctionmq/junction/persistence/fs"
)

// segmentBytes returns a valid segment num holding recs.
func segmentBytes(num uint64, recs ...string) []byte {
	b := appendHeader(nil, num)
	for _, r := range recs {
		b = appendRecord(b, []byte(r))
	}
	return b
}

// fuzzImage builds a store from fuzz input. data[0] picks the layout: the
// rest is segment 1 alone (0), segment 2 after a valid segment 1 (1), or
// segment 1 before a valid segment 2 (2), so the bytes are either scanned
// as the last segment or trusted as an earlier one.
func fuzzImage(data []byte) *fs.MemFS {
	mem := fs.NewCrashableMem()
	mem.MkdirAll(testRoot + "/q")
	write := func(name string, b []byte) {
		f, _ := mem.Create(name)
		f.WriteAt(b, 0)
		f.Datasync()
		f.Close()
	}
	write(testRoot+"/q"+markerSuffix, nil)
	mode, body := byte(0), data
	if len(data) > 0 {
		mode, body = data[0]%3, data[1:]
	}
	switch mode {
	case 0:
		write(testRoot+"/q/"+segName(1), body)
	case 1:
		write(testRoot+"/q/"+segName(1), segmentBytes(1, "one", "two", "three"))
		write(testRoot+"/q/"+segName(2), body)
	case 2:
		write(testRoot+"/q/"+segName(1), body)
		write(testRoot+"/q/"+segName(2), segmentBytes(2, "four", "five"))
	}
	mem.SyncDir(testRoot)
	mem.SyncDir(testRoot + "/q")
	return mem
}

func fuzzSeeds() map[string][]byte {
	valid := segmentBytes(1, "alpha", "", "gamma")
	withLayout := func(mode byte, b []byte) []byte { return append([]byte{mode}, b...) }
	flipped := append([]byte(nil), valid...)
	flipped[len(flipped)-2] ^= 0x10
	return map[string][]byte{
		"valid":        withLayout(0, valid),
		"torn":         withLayout(0, valid[:len(valid)-3]),
		"zero-tail":    withLayout(0, append(append([]byte(nil), valid...), make([]byte, 64)...)),
		"flipped":      withLayout(0, flipped),
		"bad-header":   withLayout(0, append([]byte("JNCTPAGX"), valid[8:]...)),
		"empty":        withLayout(0, nil),
		"second":       withLayout(1, segmentBytes(2, "x", "yy")),
		"first-flip":   withLayout(2, flipped),
		"first-short":  withLayout(2, valid[:len(valid)-1]),
		"huge-length":  withLayout(2, append(segmentBytes(1), 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0)),
		"first-header": withLayout(2, segmentBytes(1)),
	}
}

// TestWriteFuzzSeeds regenerates testdata/fuzz/FuzzOpen when
// PAGE_WRITE_SEEDS=1.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("PAGE_WRITE_SEEDS") != "1" {
		t.Skip("set PAGE_WRITE_SEEDS=1 to rewrite the seeds")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	for name, b := range fuzzSeeds() {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzOpen opens stores made of arbitrary segment bytes: Open and Read
// must never panic, Read fails only with ErrCorrupt, and a store that reads
// cleanly keeps working after an append and a reopen.
func FuzzOpen(f *testing.F) {
	for _, b := range fuzzSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mem := fuzzImage(data)
		d, err := Open(testRoot, mem, Options{SegmentSize: 256})
		if err != nil {
			t.Fatal(err)
		}
		s, err := d.Open("q")
		if err != nil {
			return
		}
		recs, _, err := readAll(s, s.Start(), 2, 16)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("read: %v", err)
		}
		clean := err == nil
		if err := s.Append([]byte("tail")); err != nil {
			t.Fatal(err)
		}
		if err := syncWait(s); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if !clean {
			return
		}
		s, err = mustDir(t, mem.CrashClone(), 256).Open("q")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		again, _, err := readAll(s, s.Start(), 100, 0)
		if err != nil || len(again) != len(recs)+1 || string(again[len(recs)]) != "tail" {
			t.Fatalf("after reopen: %d records (had %d), %v", len(again), len(recs), err)
		}
	})
}
