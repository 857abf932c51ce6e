package fs

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestOSPreallocateWritesZeros checks that Preallocate leaves the new
// range of a file zeroed and written (no extent the file system still
// marks unwritten, whose first write would cost every later fdatasync a
// metadata commit) and keeps what the file already held.
func TestOSPreallocateWritesZeros(t *testing.T) {
	name := filepath.Join(t.TempDir(), "seg")
	f, err := OS().Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := bytes.Repeat([]byte{0xA5}, 5000)
	if _, err := f.WriteAt(head, 0); err != nil {
		t.Fatal(err)
	}
	const size = 3<<20 + 123
	if err := f.Preallocate(size); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Size(); got != size {
		t.Fatalf("size %d, want %d", got, size)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[:len(head)], head) {
		t.Fatal("Preallocate changed the bytes the file held")
	}
	if i := bytes.IndexFunc(b[len(head):], func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("byte %d not zero after Preallocate", len(head)+i)
	}
	unwritten, ok := unwrittenExtents(t, f.(osFile).Fd())
	if !ok {
		t.Skip("the file system does not map extents (FIEMAP)")
	}
	if unwritten > 0 {
		t.Fatalf("%d extents still unwritten after Preallocate", unwritten)
	}
}

// unwrittenExtents counts the extents of fd flagged
// FIEMAP_EXTENT_UNWRITTEN; ok is false if the file system does not
// answer FS_IOC_FIEMAP.
func unwrittenExtents(t *testing.T, fd uintptr) (n int, ok bool) {
	t.Helper()
	const (
		iocFiemap       = 0xC020660B
		flagSync        = 0x1
		extentLast      = 0x1
		extentUnwritten = 0x800
		headerSize      = 32
		extentSize      = 56
		count           = 64
	)
	start := uint64(0)
	for {
		buf := make([]byte, headerSize+count*extentSize)
		binary.NativeEndian.PutUint64(buf[0:], start)
		binary.NativeEndian.PutUint64(buf[8:], ^uint64(0))
		binary.NativeEndian.PutUint32(buf[16:], flagSync)
		binary.NativeEndian.PutUint32(buf[24:], count)
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, iocFiemap, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
			return 0, false
		}
		mapped := int(binary.NativeEndian.Uint32(buf[20:]))
		if mapped == 0 {
			return n, true
		}
		for i := range mapped {
			e := buf[headerSize+i*extentSize:]
			flags := binary.NativeEndian.Uint32(e[40:])
			if flags&extentUnwritten != 0 {
				n++
			}
			if flags&extentLast != 0 {
				return n, true
			}
			start = binary.NativeEndian.Uint64(e[0:]) + binary.NativeEndian.Uint64(e[16:])
		}
	}
}
