package frames

import (
	"encoding/binary"

	"github.com/junctionmq/junction/amqp/internal/encoding"
)

// Results of LocateData.
const (
	DataNeedMore      = iota // the sections before the body are not all in b yet
	DataNotStreamable        // the body is not a data section in its 32-bit form
	DataFound                // head, start and n are set
)

// LocateData looks, in the first bytes b of a message, for its body's
// first section, for a receiver that streams a large body instead of
// reassembling the message: when every section before the body is in b
// and the body starts with a data section of the vbin32 form, it returns
// DataFound, the length of those sections (head), where the data's bytes
// start in b and how many there are. It returns DataNeedMore while b
// stops before that point (or is malformed so far: ParseMessage finds
// that out on the whole message), and DataNotStreamable when the body is
// anything else (the message is read whole).
func LocateData(b []byte) (state, head, start int, n uint32) {
	var r encoding.Reader
	r.Reset(b)
	for r.Len() > 0 {
		pos := len(b) - r.Len()
		code, err := readDescriptor(&r)
		if err != nil {
			return DataNeedMore, 0, 0, 0
		}
		switch {
		case code == codeData:
			rest := r.Bytes()
			if len(rest) < 5 {
				return DataNeedMore, 0, 0, 0
			}
			if rest[0] != encoding.CodeVbin32 {
				return DataNotStreamable, 0, 0, 0
			}
			return DataFound, pos, len(b) - len(rest) + 5, binary.BigEndian.Uint32(rest[1:5])
		case isBodySection(code), code == codeFooter:
			return DataNotStreamable, 0, 0, 0
		}
		if err := r.Skip(); err != nil {
			return DataNeedMore, 0, 0, 0
		}
	}
	return DataNeedMore, 0, 0, 0
}

// AppendDataHeader appends the start of a data section of n bytes, in
// its vbin32 form: the n bytes follow, from wherever the caller streams
// them.
func AppendDataHeader(dst []byte, n uint32) []byte {
	dst = append(dst, encoding.CodeDescribed, encoding.CodeSmallUlong, byte(codeData), encoding.CodeVbin32)
	return binary.BigEndian.AppendUint32(dst, n)
}
