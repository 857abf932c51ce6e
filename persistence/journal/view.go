package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Variables, not constants, so that the tests can make every window small
// and move it at every record (helpers_test.go).
var (
	// firstRead is how much of a file recovery reads before it knows
	// whether the file holds records: its header block and first records.
	firstRead int64 = 64 << 10
	// viewChunk is the least a view reads past what it needs.
	viewChunk int64 = 1 << 20
)

// fileView is a journal file as recovery reads it: a window that moves
// forward through the file, holding what is being decoded. A journal's
// files are preallocated, and a cluster's Raft log files are twice its
// largest entry (130 MiB by default), so reading each whole at open read
// mostly zeros and held every file in memory at once. Now a free file
// costs one small read, and a data file is read once, to the end of its
// records, in chunks. Only where a torn tail must be told from damage
// (proven, resync, tornBytes, which look at everything after a bad
// record) is the file read whole.
//
// A window is never written once read: recovered payloads alias it until
// Load, and a window that nothing refers to any more is garbage.
type fileView struct {
	f    *segFile
	size int64
	base int64 // the file offset of buf[0]
	buf  []byte
	err  error // a failed read; decode then reports errRecShort
}

func openView(f *segFile) (*fileView, error) {
	size, err := f.f.Size()
	if err != nil {
		return nil, fmt.Errorf("journal: size of %s: %w", f.name, err)
	}
	v := &fileView{f: f, size: size}
	if err := v.window(0, firstRead, firstRead); err != nil {
		return nil, err
	}
	return v, nil
}

// window makes buf hold the file from off to at least end (both capped at
// its size), reading at least chunk bytes past off when it must read.
func (v *fileView) window(off, end, chunk int64) error {
	off, end = min(off, v.size), min(end, v.size)
	if off >= v.base && end <= v.base+int64(len(v.buf)) {
		return nil
	}
	end = min(max(end, off+chunk), v.size)
	buf := make([]byte, end-off)
	have := int64(0)
	if off >= v.base && off < v.base+int64(len(v.buf)) {
		have = int64(copy(buf, v.buf[off-v.base:]))
	}
	n, err := v.f.f.ReadAt(buf[have:], off+have)
	if err != nil && !(errors.Is(err, io.EOF) && int64(n) == int64(len(buf))-have) {
		v.err = fmt.Errorf("journal: read %s: %w", v.f.name, err)
		return v.err
	}
	v.base, v.buf = off, buf
	return nil
}

// bytes returns the n bytes at off (fewer at the end of the file).
func (v *fileView) bytes(off, n int64) []byte {
	if v.window(off, off+n, n) != nil {
		return nil
	}
	lo := min(off, v.size) - v.base
	return v.buf[lo : lo+min(n, v.size-min(off, v.size))]
}

// all reads the whole file and returns it.
func (v *fileView) all() ([]byte, error) {
	if v.base != 0 || int64(len(v.buf)) != v.size {
		if err := v.window(0, v.size, v.size); err != nil {
			return nil, err
		}
	}
	return v.buf, nil
}

// decode decodes the record at off as decodeRecord does on the whole file,
// reading as much of the file as the record's header says it needs.
// After a failed read it reports errRecShort: callers check v.err.
func (v *fileView) decode(off int64, seed uint32, maxPayload int) (record, int, error) {
	if off > v.size {
		return record{}, 0, errRecShort
	}
	end := off + recHeaderSize
	if h := v.bytes(off, recHeaderSize); len(h) == recHeaderSize {
		if n := binary.LittleEndian.Uint32(h); uint64(n) <= uint64(maxPayload) {
			end = off + int64(encodedSize(int(n)))
		}
	}
	if v.window(off, end, viewChunk) != nil {
		return record{}, 0, errRecShort
	}
	// The window reaches end or the end of the file: decodeRecord sees
	// the record as it would in the whole file.
	return decodeRecord(v.buf[off-v.base:], seed, maxPayload)
}
