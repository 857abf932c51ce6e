package page

import (
	"encoding/binary"
	"hash/crc32"
)

const (
	headerSize    = 32
	recHeaderSize = 8
	formatVersion = 1
	segMagic      = "JNCTPAGE"

	// posShift splits a position into segment number and offset.
	posShift = 40
	posMask  = 1<<posShift - 1

	// MaxRecord is the largest record Append accepts.
	MaxRecord = 1<<32 - 1 - headerSize - recHeaderSize
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func makePos(num uint64, off int64) uint64 { return num<<posShift | uint64(off) }

func splitPos(pos uint64) (num uint64, off int64) { return pos >> posShift, int64(pos & posMask) }

// appendHeader appends the header of segment num to b.
func appendHeader(b []byte, num uint64) []byte {
	var h [headerSize]byte
	copy(h[0:8], segMagic)
	binary.LittleEndian.PutUint16(h[8:], formatVersion)
	binary.LittleEndian.PutUint64(h[16:], num)
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(h[:24], castagnoli))
	return append(b, h[:]...)
}

// headerOK reports whether h (at least headerSize bytes) is a valid header
// of segment num.
func headerOK(h []byte, num uint64) bool {
	return string(h[0:8]) == segMagic &&
		binary.LittleEndian.Uint16(h[8:]) == formatVersion &&
		binary.LittleEndian.Uint16(h[10:]) == 0 &&
		binary.LittleEndian.Uint64(h[16:]) == num &&
		binary.LittleEndian.Uint32(h[24:]) == crc32.Checksum(h[:24], castagnoli)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// appendRecord appends the encoding of rec to b.
func appendRecord(b, rec []byte) []byte {
	var h [recHeaderSize]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(len(rec)))
	binary.LittleEndian.PutUint32(h[4:], recordCRC(h[0:4], rec))
	b = append(b, h[:]...)
	return append(b, rec...)
}

func recordCRC(lenBytes, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(lenBytes, castagnoli), castagnoli, payload)
}
