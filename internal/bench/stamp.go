package bench

import (
	"encoding/binary"
	"strconv"
	"time"
)

// StampSize is the number of body bytes PutStamp writes.
const StampSize = 8

// PutStamp writes a send time (since a base both ends share) into the
// first 8 bytes of body.
func PutStamp(body []byte, t time.Duration) { binary.BigEndian.PutUint64(body, uint64(t)) }

// GetStamp reads the send time written by PutStamp; 0 means a probe
// message (or a body too short to carry a stamp).
func GetStamp(body []byte) time.Duration {
	if len(body) < StampSize {
		return 0
	}
	return time.Duration(binary.BigEndian.Uint64(body))
}

// FmtUs formats microseconds for reading (us below 1 ms, then ms, then s),
// or "-" when not measured (negative).
func FmtUs(us float64) string {
	switch {
	case us < 0:
		return "-"
	case us < 1000:
		return strconv.FormatFloat(us, 'f', 0, 64) + "us"
	case us < 10e6:
		return strconv.FormatFloat(us/1000, 'f', 1, 64) + "ms"
	default:
		return strconv.FormatFloat(us/1e6, 'f', 1, 64) + "s"
	}
}
