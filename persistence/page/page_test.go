package page

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/junctionmq/junction/persistence/fs"
)

func TestAppendReadManySegments(t *testing.T) {
	mem := fs.NewCrashableMem()
	d := mustDir(t, mem, 512)
	s := mustStore(t, d, "q")
	defer s.Close()
	const n = 3000
	pos := s.Start()
	next := 0
	// Read while appending, with changing limits.
	for i := 0; i < n; i += 100 {
		appendN(t, s, i, i+100)
		recs, p, err := s.Read(pos, 1+i%13, 1+i%700)
		if err != nil {
			t.Fatal(err)
		}
		if next, err = checkRun(recs, next); err != nil {
			t.Fatal(err)
		}
		pos = p
	}
	recs, _, err := readAll(s, pos, 50, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if next, err = checkRun(recs, next); err != nil || next != n {
		t.Fatalf("read up to %d of %d: %v", next, n, err)
	}
	if files := segFiles(t, mem, "q"); len(files) < 100 {
		t.Fatalf("want many segments, got %v", files)
	}
	// Whole store again from Start, in one-record reads.
	recs, _, err = readAll(s, s.Start(), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if next, err := checkRun(recs, 0); err != nil || next != n {
		t.Fatalf("reread up to %d: %v", next, err)
	}
}

func TestReadLimits(t *testing.T) {
	d := mustDir(t, fs.NewCrashableMem(), 0)
	s := mustStore(t, d, "q")
	defer s.Close()
	rec := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 100) }
	for i := 0; i < 10; i++ {
		if err := s.Append(rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	start := s.Start()
	for _, tc := range []struct{ max, maxBytes, want int }{
		{5, 1 << 20, 5},
		{100, 250, 2},
		{100, 300, 3},
		{100, 1, 1}, // at least one
		{100, 0, 10},
		{0, 1000, 0},
		{3, 0, 3},
	} {
		recs, next, err := s.Read(start, tc.max, tc.maxBytes)
		if err != nil || len(recs) != tc.want {
			t.Fatalf("Read(max %d, maxBytes %d) = %d records, %v; want %d", tc.max, tc.maxBytes, len(recs), err, tc.want)
		}
		for i, r := range recs {
			if !bytes.Equal(r, rec(i)) {
				t.Fatalf("record %d wrong", i)
			}
		}
		if tc.want > 0 && next != start+uint64(tc.want*(recHeaderSize+100)) {
			t.Fatalf("next %#x", next)
		}
	}
	// Records stay valid: appending to one must not touch its neighbour.
	recs, next, _ := s.Read(start, 2, 0)
	_ = append(recs[0], 9, 9, 9)
	if !bytes.Equal(recs[1], rec(1)) {
		t.Fatal("records alias each other")
	}
	// The end.
	_, end, _ := readAll(s, next, 100, 0)
	recs, p, err := s.Read(end, 10, 0)
	if err != nil || len(recs) != 0 || p != end {
		t.Fatalf("at end: %d records, %#x, %v", len(recs), p, err)
	}
	// Appended later: readable from the same position.
	if err := s.Append([]byte("more")); err != nil {
		t.Fatal(err)
	}
	recs, _, err = s.Read(end, 10, 0)
	if err != nil || len(recs) != 1 || string(recs[0]) != "more" {
		t.Fatalf("after append: %q, %v", recs, err)
	}
	// Bad positions.
	for _, pos := range []uint64{0, start - 1, makePos(1, 1<<30), makePos(7, headerSize)} {
		if _, _, err := s.Read(pos, 1, 0); !errors.Is(err, ErrPosition) {
			t.Fatalf("Read(%#x): %v", pos, err)
		}
	}
}

func TestLargeAndEmptyRecords(t *testing.T) {
	mem := fs.NewCrashableMem()
	d := mustDir(t, mem, 256)
	s := mustStore(t, d, "q")
	big := bytes.Repeat([]byte("big!"), 1000)
	in := [][]byte{[]byte("a"), {}, big, []byte("b"), big, {}, []byte("c")}
	for _, r := range in {
		if err := s.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	check := func(s *Store) {
		t.Helper()
		got, _, err := readAll(s, s.Start(), 100, 10)
		if err != nil || len(got) != len(in) {
			t.Fatalf("got %d records, %v", len(got), err)
		}
		for i := range in {
			if !bytes.Equal(got[i], in[i]) {
				t.Fatalf("record %d differs", i)
			}
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Each big record is alone in its segment.
	for _, n := range segFiles(t, mem, "q") {
		size, _ := fileSize(mem, testRoot+"/q/"+n)
		if size > 256 && size != headerSize+recHeaderSize+int64(len(big)) {
			t.Fatalf("%s has %d bytes", n, size)
		}
	}
	check(mustStore(t, mustDir(t, mem, 256), "q"))
	// A zero-length record has a non-zero CRC, so zeroed bytes never parse.
	if c := recordCRC(make([]byte, 4), nil); c == 0 {
		t.Fatal("CRC of an empty record is 0")
	}
}

func TestReleaseDeletesConsumedSegments(t *testing.T) {
	mem := fs.NewCrashableMem()
	d := mustDir(t, mem, 1024)
	s := mustStore(t, d, "q")
	defer s.Close()
	appendN(t, s, 0, 200)
	files := segFiles(t, mem, "q")
	if len(files) < 10 {
		t.Fatalf("files %v", files)
	}
	before := d.Bytes()
	// Read into the middle of the fifth segment.
	var pos uint64
	var got int
	for pos = s.Start(); ; {
		recs, next, err := s.Read(pos, 1, 0)
		if err != nil || len(recs) != 1 {
			t.Fatal(err)
		}
		got++
		if num, off := splitPos(next); num == 5 && off > headerSize {
			pos = next
			break
		}
		pos = next
	}
	if err := s.Release(pos); err != nil {
		t.Fatal(err)
	}
	if f := segFiles(t, mem, "q"); f[0] != segName(5) || len(f) != len(files)-4 {
		t.Fatalf("after release: %v", f)
	}
	if s.Start() != makePos(5, headerSize) {
		t.Fatalf("start %#x", s.Start())
	}
	if d.Bytes() >= before {
		t.Fatalf("bytes %d, before %d", d.Bytes(), before)
	}
	// Records of segment 5 before pos are still there.
	recs, _, err := readAll(s, s.Start(), 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := indexOf(recs[0])
	if first >= got {
		t.Fatalf("first %d, consumed %d", first, got)
	}
	if next, err := checkRun(recs, first); err != nil || next != 200 {
		t.Fatal(next, err)
	}
	// Released positions are gone.
	if _, _, err := s.Read(makePos(4, headerSize), 1, 0); !errors.Is(err, ErrPosition) {
		t.Fatal(err)
	}
	// Releasing up to the end keeps the active segment, even at its end.
	_, end, _ := readAll(s, pos, 100, 0)
	if err := s.Release(end); err != nil {
		t.Fatal(err)
	}
	if f := segFiles(t, mem, "q"); len(f) != 1 {
		t.Fatalf("after full release: %v", f)
	}
	// The position after a segment's last record releases that segment
	// once it is sealed, and stays readable.
	appendN(t, s, 200, 220)
	pos = end
	var segEnd uint64
	for want := 200; ; want++ {
		recs, next, err := s.Read(pos, 1, 0)
		if err != nil || len(recs) != 1 {
			t.Fatal(len(recs), err)
		}
		if i, _ := indexOf(recs[0]); i != want {
			t.Fatalf("record %d, want %d", i, want)
		}
		if n0, _ := splitPos(pos); n0 != 0 && segEnd == 0 {
			if n1, _ := splitPos(next); n1 > n0 {
				segEnd = pos // the record just read is the first of a new segment
				break
			}
		}
		pos = next
	}
	num, _ := splitPos(segEnd)
	if err := s.Release(segEnd); err != nil {
		t.Fatal(err)
	}
	if f := segFiles(t, mem, "q"); f[0] != segName(num+1) {
		t.Fatalf("release at the end of segment %d kept %v", num, f)
	}
	recs, _, err = readAll(s, segEnd, 100, 0)
	if err != nil || len(recs) == 0 {
		t.Fatal(len(recs), err)
	}
	first, _ = indexOf(recs[0])
	if next, err := checkRun(recs, first); err != nil || next != 220 {
		t.Fatal(next, err)
	}
	if err := s.Release(0); err != nil { // before Start: nothing
		t.Fatal(err)
	}
}

func TestReopen(t *testing.T) {
	for _, segSize := range []int64{0, 300, 4096} {
		t.Run(fmt.Sprint(segSize), func(t *testing.T) {
			mem := fs.NewCrashableMem()
			d := mustDir(t, mem, segSize)
			s := mustStore(t, d, "q")
			appendN(t, s, 0, 500)
			// Consume and release some, so Start is not segment 1.
			recs, pos, err := s.Read(s.Start(), 100, 0)
			if err != nil || len(recs) == 0 {
				t.Fatal(err)
			}
			if err := s.Release(pos); err != nil {
				t.Fatal(err)
			}
			want, _, err := readAll(s, s.Start(), 100, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			bytesBefore := d.Bytes()
			// Only durable state survives.
			mem = mem.CrashClone()
			d = mustDir(t, mem, segSize)
			if d.Bytes() != bytesBefore {
				t.Fatalf("bytes %d, before %d", d.Bytes(), bytesBefore)
			}
			s = mustStore(t, d, "q")
			got, _, err := readAll(s, s.Start(), 100, 0)
			if err != nil || len(got) != len(want) {
				t.Fatalf("got %d records, want %d: %v", len(got), len(want), err)
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("record %d differs", i)
				}
			}
			first, _ := indexOf(got[0])
			// Appending continues after the recovered records.
			appendN(t, s, 500, 600)
			got, _, err = readAll(s, s.Start(), 100, 0)
			if err != nil {
				t.Fatal(err)
			}
			if next, err := checkRun(got, first); err != nil || next != 600 {
				t.Fatal(next, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDirListRemove(t *testing.T) {
	mem := fs.NewCrashableMem()
	d := mustDir(t, mem, 512)
	names := []string{"orders", "a/b", ".", "..", "x.store", "100%", "ünï", "A", "a"}
	for _, n := range names {
		s := mustStore(t, d, n)
		appendN(t, s, 0, 20)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	sorted := slices.Sorted(slices.Values(names))
	check := func(d *Dir, want []string) {
		t.Helper()
		got, err := d.List()
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("List = %q, %v; want %q", got, err, want)
		}
	}
	check(d, sorted)
	total := d.Bytes()
	d2 := mustDir(t, mem, 512)
	check(d2, sorted)
	if d2.Bytes() != total {
		t.Fatalf("reopened Bytes %d, want %d", d2.Bytes(), total)
	}
	s := mustStore(t, d, "a/b")
	if _, err := d.Open("a/b"); !errors.Is(err, ErrOpen) {
		t.Fatal(err)
	}
	wantErr(t, d.Remove("a/b"), ErrOpen)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.Close(), ErrClosed)
	for _, n := range names {
		if err := d.Remove(n); err != nil {
			t.Fatal(n, err)
		}
	}
	check(d, nil)
	if d.Bytes() != 0 {
		t.Fatalf("Bytes %d after removing everything", d.Bytes())
	}
	wantErr(t, d.Remove("orders"), ErrNotFound)
	wantErr(t, d.Remove(""), ErrName)
	// A removed store comes back empty.
	s = mustStore(t, d, "orders")
	if recs, _, err := readAll(s, s.Start(), 10, 0); err != nil || len(recs) != 0 {
		t.Fatalf("recreated store has %d records, %v", len(recs), err)
	}
	s.Close()
	// The removal is durable.
	check(mustDir(t, mem.CrashClone(), 512), []string{"orders"})
}

func TestInterruptedRemove(t *testing.T) {
	mem := fs.NewCrashableMem()
	d := mustDir(t, mem, 512)
	s := mustStore(t, d, "q")
	appendN(t, s, 0, 50)
	s.Close()
	// Crash right after the marker's removal was synced: the segments are
	// still there but the store is gone, and a new one starts empty.
	mem.SetCrashPoint(mem.Ops()+2, nil)
	if err := d.Remove("q"); err != nil {
		t.Fatal(err)
	}
	img := mem.Snapshot()
	if len(segFiles(t, img, "q")) == 0 {
		t.Fatal("want leftover segments")
	}
	d = mustDir(t, img, 512)
	if names, _ := d.List(); len(names) != 0 {
		t.Fatalf("List %q", names)
	}
	s = mustStore(t, d, "q")
	if recs, _, err := readAll(s, s.Start(), 10, 0); err != nil || len(recs) != 0 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	s.Close()
}

func TestCorruption(t *testing.T) {
	build := func(t *testing.T) *fs.MemFS {
		mem := fs.NewCrashableMem()
		s := mustStore(t, mustDir(t, mem, 1024), "q")
		appendN(t, s, 0, 100)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return mem
	}
	mutate := func(t *testing.T, mem *fs.MemFS, name string, fn func(b []byte) []byte) {
		f, err := mem.Open(testRoot + "/q/" + name)
		if err != nil {
			t.Fatal(err)
		}
		size, _ := f.Size()
		b := make([]byte, size)
		f.ReadAt(b, 0)
		b = fn(b)
		f.Truncate(0)
		f.WriteAt(b, 0)
		f.Datasync()
		f.Close()
	}
	t.Run("bit flip in an earlier segment", func(t *testing.T) {
		mem := build(t)
		mutate(t, mem, segName(2), func(b []byte) []byte { b[len(b)-3] ^= 1; return b })
		s := mustStore(t, mustDir(t, mem, 1024), "q")
		defer s.Close()
		recs, _, err := readAll(s, s.Start(), 3, 0)
		wantErr(t, err, ErrCorrupt)
		if _, cerr := checkRun(recs, 0); cerr != nil || len(recs) == 0 {
			t.Fatalf("records before the damage: %d, %v", len(recs), cerr)
		}
	})
	t.Run("bad length in an earlier segment", func(t *testing.T) {
		mem := build(t)
		mutate(t, mem, segName(2), func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[headerSize:], 1<<31)
			return b
		})
		s := mustStore(t, mustDir(t, mem, 1024), "q")
		defer s.Close()
		_, _, err := readAll(s, s.Start(), 3, 0)
		wantErr(t, err, ErrCorrupt)
	})
	t.Run("truncated earlier segment", func(t *testing.T) {
		mem := build(t)
		mutate(t, mem, segName(2), func(b []byte) []byte { return b[:len(b)-5] })
		s := mustStore(t, mustDir(t, mem, 1024), "q")
		defer s.Close()
		_, _, err := readAll(s, s.Start(), 3, 0)
		wantErr(t, err, ErrCorrupt)
	})
	for name, fn := range map[string]func(b []byte) []byte{
		"bad magic":   func(b []byte) []byte { b[0] = 'X'; return b },
		"bad number":  func(b []byte) []byte { b[16]++; return b },
		"bad crc":     func(b []byte) []byte { b[25]++; return b },
		"bad version": func(b []byte) []byte { b[8] = 2; return b },
	} {
		t.Run(name, func(t *testing.T) {
			for _, seg := range []uint64{1, 3} { // earlier and last (3 after the cut below)
				mem := build(t)
				for _, n := range segFiles(t, mem, "q") {
					if num, _ := parseSegName(n); num > 3 {
						mem.Remove(testRoot + "/q/" + n)
					}
				}
				mutate(t, mem, segName(seg), fn)
				_, err := mustDir(t, mem, 1024).Open("q")
				wantErr(t, err, ErrCorrupt)
			}
		})
	}
	t.Run("gap", func(t *testing.T) {
		mem := build(t)
		mem.Remove(testRoot + "/q/" + segName(3))
		_, err := mustDir(t, mem, 1024).Open("q")
		wantErr(t, err, ErrCorrupt)
	})
	t.Run("stray file", func(t *testing.T) {
		mem := build(t)
		f, _ := mem.Create(testRoot + "/q/1.pg")
		f.Close()
		_, err := mustDir(t, mem, 1024).Open("q")
		wantErr(t, err, ErrCorrupt)
	})
	t.Run("torn last segment", func(t *testing.T) {
		mem := build(t)
		files := segFiles(t, mem, "q")
		last := files[len(files)-1]
		var cut int
		mutate(t, mem, last, func(b []byte) []byte {
			cut = len(b) - 3
			return append(b[:cut], make([]byte, 100)...) // zero tail
		})
		d := mustDir(t, mem, 1024)
		s := mustStore(t, d, "q")
		recs, _, err := readAll(s, s.Start(), 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		if next, err := checkRun(recs, 0); err != nil || next != 99 {
			t.Fatal(next, err)
		}
		if size, _ := fileSize(mem, testRoot+"/q/"+last); size >= int64(cut) {
			t.Fatalf("not truncated: %d", size)
		}
		appendN(t, s, 99, 120)
		s.Close()
		s = mustStore(t, mustDir(t, mem, 1024), "q")
		defer s.Close()
		recs, _, err = readAll(s, s.Start(), 10, 0)
		if next, cerr := checkRun(recs, 0); err != nil || cerr != nil || next != 120 {
			t.Fatal(next, err, cerr)
		}
	})
	t.Run("torn header of the last segment", func(t *testing.T) {
		for _, size := range []int{0, 10, headerSize} {
			mem := build(t)
			f, _ := mem.Create(testRoot + "/q/" + segName(uint64(len(segFiles(t, mem, "q"))+1)))
			f.WriteAt(make([]byte, size), 0)
			f.Close()
			s := mustStore(t, mustDir(t, mem, 1024), "q")
			recs, _, err := readAll(s, s.Start(), 10, 0)
			if next, cerr := checkRun(recs, 0); err != nil || cerr != nil || next != 100 {
				t.Fatal(next, err, cerr)
			}
			appendN(t, s, 100, 101)
			s.Close()
		}
	})
}

func TestClosed(t *testing.T) {
	d := mustDir(t, fs.NewCrashableMem(), 0)
	s := mustStore(t, d, "q")
	appendN(t, s, 0, 3)
	done := make(chan error, 1)
	s.Sync(func(err error) { done <- err })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("pending sync: %v", err)
	}
	wantErr(t, s.Append([]byte("x")), ErrClosed)
	wantErr(t, syncWait(s), ErrClosed)
	_, _, err := s.Read(s.Start(), 1, 0)
	wantErr(t, err, ErrClosed)
	wantErr(t, s.Release(s.Start()), ErrClosed)
	wantErr(t, s.Close(), ErrClosed)
	if _, err := Open(testRoot, fs.NewCrashableMem(), Options{SegmentSize: 10}); err == nil {
		t.Fatal("tiny SegmentSize accepted")
	}
}

func TestConcurrent(t *testing.T) {
	mem := fs.NewCrashableMem()
	d := mustDir(t, mem, 4096)
	s := mustStore(t, d, "q")
	const n = 20000
	var (
		wg      sync.WaitGroup
		amu     sync.Mutex // the caller's lock serializing appends
		next    int
		appends = 4
	)
	errs := make(chan error, 16)
	for range appends {
		wg.Go(func() {
			for {
				amu.Lock()
				if next == n {
					amu.Unlock()
					return
				}
				err := s.Append(recFor(next))
				next++
				amu.Unlock()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() { // syncer
		for range 200 {
			if err := syncWait(s); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Go(func() { // reader and releaser
		pos, want := s.Start(), 0
		for want < n {
			recs, p, err := s.Read(pos, 64, 16<<10)
			if err == nil {
				want, err = checkRun(recs, want)
			}
			if err == nil && want%10 == 0 {
				err = s.Release(p)
			}
			if err != nil {
				errs <- err
				return
			}
			pos = p
			_ = d.Bytes()
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestBatching(t *testing.T) {
	var mu sync.Mutex
	count := map[fs.Op]int{}
	counting := fs.NewFaulty(fs.NewCrashableMem(), func(op fs.Op, _ string) error {
		mu.Lock()
		count[op]++
		mu.Unlock()
		return nil
	})
	ops := func(op fs.Op) int {
		mu.Lock()
		defer mu.Unlock()
		return count[op]
	}
	s := mustStore(t, mustDir(t, counting, 0), "q")
	defer s.Close()
	writes, syncs := ops(fs.OpWrite), ops(fs.OpDatasync)
	appendN(t, s, 0, 100) // about 16 KiB: no write yet
	if w := ops(fs.OpWrite) - writes; w != 0 {
		t.Fatalf("%d writes for 100 small appends", w)
	}
	// 200 Syncs issued at once share a few fdatasyncs.
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		s.Sync(func(err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if n := ops(fs.OpDatasync) - syncs; n < 1 || n > 10 {
		t.Fatalf("%d fdatasyncs for 200 concurrent Syncs", n)
	}
	// With nothing new appended, a Sync does no I/O.
	syncs = ops(fs.OpDatasync)
	if err := syncWait(s); err != nil || ops(fs.OpDatasync) != syncs {
		t.Fatalf("idle sync: %v, %d fdatasyncs", err, ops(fs.OpDatasync)-syncs)
	}
}
