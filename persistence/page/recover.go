package page

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strings"

	"github.com/junctionmq/junction/persistence/fs"
)

// recoverStore opens an existing store: it checks every segment header and
// cuts the torn tail of the last segment (see the package doc).
func (d *Dir) recoverStore(name string) (*Store, error) {
	sdir := d.storeDir(name)
	if err := d.fs.MkdirAll(sdir); err != nil {
		return nil, err
	}
	names, err := d.fs.List(sdir)
	if err != nil {
		return nil, err
	}
	var nums []uint64
	for _, n := range names {
		if num, ok := parseSegName(n); ok {
			nums = append(nums, num)
		} else if strings.HasSuffix(n, segSuffix) {
			return nil, fmt.Errorf("%w: stray file %s/%s", ErrCorrupt, sdir, n)
		}
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	if len(nums) == 0 {
		// Only a crash inside Remove can leave a marker without segments.
		f, err := d.createSegment(sdir, 1)
		if err != nil {
			return nil, err
		}
		d.bytes.Add(headerSize)
		return d.newStore(name, []segment{{num: 1, size: headerSize}}, f), nil
	}
	for i := 1; i < len(nums); i++ {
		if nums[i] != nums[i-1]+1 {
			return nil, fmt.Errorf("%w: %s: segments %d to %d missing", ErrCorrupt, sdir, nums[i-1]+1, nums[i]-1)
		}
	}
	segs := make([]segment, len(nums))
	hdr := make([]byte, headerSize)
	for i, num := range nums[:len(nums)-1] {
		path := sdir + "/" + segName(num)
		f, err := d.fs.Open(path)
		if err != nil {
			return nil, err
		}
		size, err := f.Size()
		if err == nil && size >= headerSize {
			_, err = f.ReadAt(hdr, 0)
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if size < headerSize || !headerOK(hdr, num) {
			return nil, fmt.Errorf("%w: %s: bad segment header", ErrCorrupt, path)
		}
		segs[i] = segment{num: num, size: size}
	}
	num := nums[len(nums)-1]
	f, size, err := d.recoverLast(sdir, num)
	if err != nil {
		return nil, err
	}
	segs[len(segs)-1] = segment{num: num, size: size}
	s := d.newStore(name, segs, f)
	// The first Sync syncs the directory and the last segment: what was
	// found may have been in the page cache only (the process died, not
	// the machine).
	s.dirGen, s.dirty = 1, true
	return s, nil
}

// recoverLast opens the last segment for writing, re-headers it if its
// header was torn, and truncates it after its last valid record.
func (d *Dir) recoverLast(sdir string, num uint64) (fs.File, int64, error) {
	path := sdir + "/" + segName(num)
	f, err := d.fs.Open(path)
	if err != nil {
		return nil, 0, err
	}
	end, err := d.repairLast(f, num)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return f, end, nil
}

func (d *Dir) repairLast(f fs.File, num uint64) (int64, error) {
	size, err := f.Size()
	if err != nil {
		return 0, err
	}
	hdr := make([]byte, headerSize)
	if size >= headerSize {
		if _, err = f.ReadAt(hdr, 0); err != nil {
			return 0, err
		}
	}
	end, changed := int64(headerSize), true
	switch {
	case size < headerSize || allZero(hdr):
		// Torn while being created: nothing in it was ever synced.
		err = f.Truncate(0)
		if err == nil {
			_, err = f.WriteAt(appendHeader(nil, num), 0)
		}
	case !headerOK(hdr, num):
		return 0, fmt.Errorf("%w: bad segment header", ErrCorrupt)
	default:
		if end, err = scanSegment(f, size); err == nil && end < size {
			err = f.Truncate(end)
		}
		changed = end < size
	}
	if err == nil && changed {
		err = f.Datasync()
	}
	if err != nil {
		return 0, err
	}
	d.bytes.Add(end - size)
	return end, nil
}

// scanSegment returns the offset where the valid records of a segment of
// the given size end: the first record that is short, runs past the end or
// fails its CRC ends them.
func scanSegment(f fs.File, size int64) (int64, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, headerSize, size-headerSize), 1<<20)
	crc := crc32.New(castagnoli)
	var h [recHeaderSize]byte
	off := int64(headerSize)
	for size-off >= recHeaderSize {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return 0, err
		}
		n := int64(binary.LittleEndian.Uint32(h[0:]))
		if n > size-off-recHeaderSize {
			break
		}
		crc.Reset()
		crc.Write(h[0:4])
		if _, err := io.CopyN(crc, r, n); err != nil {
			return 0, err
		}
		if crc.Sum32() != binary.LittleEndian.Uint32(h[4:]) {
			break
		}
		off += recHeaderSize + n
	}
	return off, nil
}
