package journal

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

const (
	segHeaderSize = 4096 // records start here
	segHeaderUsed = 44   // bytes of the header that carry data
	recHeaderSize = 40
	recAlign      = 8
	formatVersion = 1
	segMagic      = "JNCTNJNL"
)

type recType uint8

const (
	recAdd        recType = 1
	recUpdate     recType = 2
	recDelete     recType = 3
	recAddTx      recType = 4
	recUpdateTx   recType = 5
	recDeleteTx   recType = 6
	recPrepare    recType = 7 // reserved (XA)
	recCommit     recType = 8
	recRollback   recType = 9 // reserved: rolled-back txs are never written
	recSegmentEnd recType = 10
	recMaxType    recType = 10
)

const (
	flagCompacted uint8 = 1 << 0 // relocated copy; txid holds the original ADD's LSN
	flagBatchEnd  uint8 = 1 << 1 // last record of a write batch
	flagMask            = flagCompacted | flagBatchEnd
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is one decoded journal record. payload aliases the decoded bytes.
type record struct {
	typ     recType
	flags   uint8
	utype   uint16
	lag     uint32 // lsn minus the durable LSN when the record was written (saturated)
	lsn     uint64
	id      uint64
	txid    uint64
	payload []byte
}

func alignUp(n int) int { return (n + recAlign - 1) &^ (recAlign - 1) }

// encodedSize is the on-disk size of a record with a payload of n bytes.
func encodedSize(n int) int { return recHeaderSize + alignUp(n) }

func seedOf(gen uint64) uint32 { return uint32(gen) ^ uint32(gen>>32) }

// appendRecord appends the encoding of r, padded to 8 bytes, to buf.
func appendRecord(buf []byte, seed uint32, r *record) []byte {
	start := len(buf)
	size := encodedSize(len(r.payload))
	buf = append(buf, make([]byte, size)...)
	b := buf[start:]
	binary.LittleEndian.PutUint32(b[0:], uint32(len(r.payload)))
	b[8] = byte(r.typ)
	b[9] = r.flags
	binary.LittleEndian.PutUint16(b[10:], r.utype)
	binary.LittleEndian.PutUint32(b[12:], r.lag)
	binary.LittleEndian.PutUint64(b[16:], r.lsn)
	binary.LittleEndian.PutUint64(b[24:], r.id)
	binary.LittleEndian.PutUint64(b[32:], r.txid)
	copy(b[recHeaderSize:], r.payload)
	binary.LittleEndian.PutUint32(b[4:], recordCRC(seed, b[:recHeaderSize+len(r.payload)]))
	return buf
}

func recordCRC(seed uint32, b []byte) uint32 {
	c := crc32.Update(seed, castagnoli, b[0:4])
	return crc32.Update(c, castagnoli, b[8:])
}

var (
	errRecZero     = errors.New("unwritten (zero) record header")
	errRecShort    = errors.New("record header past end of file")
	errRecType     = errors.New("invalid record type or flags")
	errRecLength   = errors.New("record length exceeds limit or file")
	errRecChecksum = errors.New("record checksum mismatch")
	errRecPadding  = errors.New("non-zero record padding")
)

// decodeRecord validates and decodes the record at the start of b (which
// extends to the end of the file). It never allocates: payload aliases b.
// It returns the record's encoded size.
func decodeRecord(b []byte, seed uint32, maxPayload int) (record, int, error) {
	var r record
	if len(b) < recHeaderSize {
		return r, 0, errRecShort
	}
	n := binary.LittleEndian.Uint32(b[0:])
	r.typ = recType(b[8])
	r.flags = b[9]
	if r.typ == 0 && n == 0 && binary.LittleEndian.Uint32(b[4:]) == 0 {
		return r, 0, errRecZero
	}
	if r.typ == 0 || r.typ > recMaxType || r.flags&^flagMask != 0 {
		return r, 0, errRecType
	}
	if uint64(n) > uint64(maxPayload) || uint64(encodedSize(int(n))) > uint64(len(b)) {
		return r, 0, errRecLength
	}
	size := encodedSize(int(n))
	if binary.LittleEndian.Uint32(b[4:]) != recordCRC(seed, b[:recHeaderSize+int(n)]) {
		return r, 0, errRecChecksum
	}
	for _, c := range b[recHeaderSize+int(n) : size] {
		if c != 0 {
			return r, 0, errRecPadding
		}
	}
	r.utype = binary.LittleEndian.Uint16(b[10:])
	r.lag = binary.LittleEndian.Uint32(b[12:])
	r.lsn = binary.LittleEndian.Uint64(b[16:])
	r.id = binary.LittleEndian.Uint64(b[24:])
	r.txid = binary.LittleEndian.Uint64(b[32:])
	r.payload = b[recHeaderSize : recHeaderSize+int(n)]
	return r, size, nil
}

// segHeader is the durable header at offset 0 of every journal file.
type segHeader struct {
	seq     uint64
	gen     uint64
	created int64
}

var errBadHeader = errors.New("invalid segment header")

func encodeHeader(h segHeader) []byte {
	b := make([]byte, segHeaderSize+recHeaderSize) // header block + zeroed first record slot
	copy(b, segMagic)
	binary.LittleEndian.PutUint16(b[8:], formatVersion)
	binary.LittleEndian.PutUint64(b[16:], h.seq)
	binary.LittleEndian.PutUint64(b[24:], h.gen)
	binary.LittleEndian.PutUint64(b[32:], uint64(h.created))
	binary.LittleEndian.PutUint32(b[40:], crc32.Checksum(b[:40], castagnoli))
	return b
}

func decodeHeader(b []byte) (segHeader, error) {
	var h segHeader
	if len(b) < segHeaderUsed || string(b[:8]) != segMagic ||
		binary.LittleEndian.Uint16(b[8:]) != formatVersion ||
		binary.LittleEndian.Uint32(b[40:]) != crc32.Checksum(b[:40], castagnoli) {
		return h, errBadHeader
	}
	h.seq = binary.LittleEndian.Uint64(b[16:])
	h.gen = binary.LittleEndian.Uint64(b[24:])
	h.created = int64(binary.LittleEndian.Uint64(b[32:]))
	return h, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// commit payload: first LSN of the unit (u64) + number of tx records (u32).
func commitPayload(first uint64, count uint32) []byte {
	b := make([]byte, 12)
	binary.LittleEndian.PutUint64(b, first)
	binary.LittleEndian.PutUint32(b[8:], count)
	return b
}

func parseCommit(p []byte) (first uint64, count uint32, ok bool) {
	if len(p) != 12 {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint32(p[8:]), true
}
