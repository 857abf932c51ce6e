package cluster

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"unsafe"
)

// within reports whether p's bytes lie inside buf's.
func within(p, buf []byte) bool {
	if len(p) == 0 || len(buf) == 0 {
		return false
	}
	a, lo := uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	return a >= lo && a < lo+uintptr(len(buf))
}

// testEntry encodes n appends of size-byte payloads (ids from first),
// and an update of the first, as one entry.
func testEntry(first uint64, n, size int) []byte {
	var ops []op
	for i := range n {
		ops = append(ops, op{kind: opAppend, ns: nsMessages, id: first + uint64(i), utype: 7,
			payload: bytes.Repeat([]byte{byte(i)}, size)})
	}
	ops = append(ops, op{kind: opUpdate, ns: nsMessages, id: first, utype: 8, payload: []byte("update")})
	return encodeOps(nil, 2, 1, ops)
}

// A follower applies an entry's payloads without copying them; its next
// snapshot gives every record still live memory of its own, so that the
// log can let the entry go, and the snapshot and the records are the same
// as before.
func TestStateRecordsOwnTheirMemoryAfterSnapshot(t *testing.T) {
	s := newGroupState()
	entry := testEntry(1, 30, 1100)
	_, _, ops, err := decodeOps(entry)
	if err != nil {
		t.Fatal(err)
	}
	s.apply(ops)
	s.apply([]op{{kind: opDelete, ns: nsMessages, id: 2}})
	for id, r := range s.recs[nsMessages] {
		if !r.inEntry || !within(r.payload, entry) {
			t.Fatalf("record %d: applied as a copy (inEntry %v), want a slice of its entry", id, r.inEntry)
		}
	}
	before := s.size()
	snap := s.snapshot()
	if len(s.recs[nsMessages]) != 29 || s.size() != before {
		t.Fatalf("after the snapshot: %d records, %d bytes; want 29, %d", len(s.recs[nsMessages]), s.size(), before)
	}
	for id, r := range s.recs[nsMessages] {
		if r.inEntry || within(r.payload, entry) {
			t.Fatalf("record %d still points into its entry after the snapshot", id)
		}
		for _, u := range r.updates {
			if within(u.payload, entry) {
				t.Fatalf("record %d: an update still points into its entry", id)
			}
		}
		if want := bytes.Repeat([]byte{byte(id - 1)}, 1100); !bytes.Equal(r.payload, want) {
			t.Fatalf("record %d: payload changed by the copy", id)
		}
	}
	if r := s.recs[nsMessages][1]; len(r.updates) != 1 || string(r.updates[0].payload) != "update" {
		t.Fatalf("record 1's update lost: %+v", r.updates)
	}
	// Nothing else changed: a second snapshot is byte for byte the
	// first, and restoring it gives the same state.
	if again := s.snapshot(); !bytes.Equal(again, snap) {
		t.Fatal("a second snapshot differs from the first")
	}
	r := newGroupState()
	if err := r.restore(snap); err != nil {
		t.Fatal(err)
	}
	if got := r.snapshot(); !bytes.Equal(got, snap) {
		t.Fatal("the restored state's snapshot differs")
	}
	// Scribbling over the entry (as if its memory were reused) leaves
	// the state alone.
	clear(entry)
	if got := s.snapshot(); !bytes.Equal(got, snap) {
		t.Fatal("the state changed with its entry's memory after the snapshot")
	}
}

// An activation replays records outside the state's lock while the loop
// applies and snapshots: the snapshot replaces records, never changes
// them (run with -race).
func TestStateReplayBesideSnapshot(t *testing.T) {
	s := newGroupState()
	for i := range 20 {
		_, _, ops, err := decodeOps(testEntry(uint64(1+100*i), 50, 200))
		if err != nil {
			t.Fatal(err)
		}
		s.apply(ops)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 20 {
			_, _, ops, _ := decodeOps(testEntry(uint64(5000+100*i), 10, 200))
			s.apply(ops)
			s.snapshot()
		}
	}()
	var n int
	err := s.replay(nsMessages, func(id uint64, ut uint16, p []byte) error {
		if len(p) != 200 || ut != 7 {
			return fmt.Errorf("record %d: %d bytes, type %d", id, len(p), ut)
		}
		n++
		return nil
	}, func(uint64, uint16, []byte) error { return nil })
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if n < 1000 {
		t.Fatalf("replayed %d records, want at least the 1000 applied before", n)
	}
}

// BenchmarkFollowerApply is what a follower spends on an entry of the
// durable bench's shape (30 messages of about 1.1 KiB, then their
// deletes in a later entry): decode and apply.
func BenchmarkFollowerApply(b *testing.B) {
	s := newGroupState()
	entry := testEntry(1, 30, 1100)
	dels := make([]op, 30)
	for k := range dels {
		dels[k] = op{kind: opDelete, ns: nsMessages, id: 1 + uint64(k)}
	}
	b.SetBytes(int64(len(entry)))
	b.ReportAllocs()
	for b.Loop() {
		_, _, ops, err := decodeOps(entry)
		if err != nil {
			b.Fatal(err)
		}
		s.apply(ops)
		s.apply(dels)
	}
}
