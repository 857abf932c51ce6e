package mqtt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/junctionmq/junction/core/guard"
)

// Reading the CONNECT packet before authentication. A client that sends
// only a fixed header declaring 10 MiB must not make the broker allocate
// 10 MiB before it has said who it is: the handshake reads the CONNECT
// with readConnect, within a small limit, charging the broker's
// pre-authentication budget as the bytes arrive, and only then decodes
// it.

// connectRefusal says why readConnect refused a CONNECT, for the answer.
type connectRefusal struct {
	// Level is the protocol level of the CONNECT (3, 4 or 5) as far as
	// it was read before the refusal; 0 when unknown.
	Level byte
	// TooLarge is the declared packet size (remaining length + 1) when
	// it exceeds the limit; 0 otherwise.
	TooLarge int
	err      error
}

func (e *connectRefusal) Error() string {
	if e.TooLarge > 0 {
		return fmt.Sprintf("mqtt: CONNECT of %d bytes exceeds the limit before authentication", e.TooLarge)
	}
	return "mqtt: CONNECT refused: " + e.err.Error()
}

func (e *connectRefusal) Unwrap() error { return e.err }

var (
	// errNotConnect: the first packet is not a CONNECT [MQTT-3.1.0-1].
	errNotConnect = errors.New("mqtt: the first packet is not CONNECT")
	// errConnectTooLarge is wrapped by a connectRefusal with TooLarge.
	errConnectTooLarge = errors.New("mqtt: CONNECT too large")
)

// connectChunk is the first buffer for a CONNECT's body; it doubles as
// the bytes arrive, up to the declared length.
const connectChunk = 512

// readConnect reads one CONNECT packet from r and returns it whole, fixed
// header included. It reads no byte past the packet, and the body only as
// it arrives: the protocol name and level are read first into an array,
// then the buffer starts at 512 bytes and doubles while the declared
// length is not reached, each growth charged to acct first (a charge the
// budget cannot take fails with guard.ErrBudget). A packet
// larger than max (remaining length plus one, as mochi counts it) is
// refused before its body is read, with a *connectRefusal whose TooLarge
// is set; readConnect then reads at most the next nine bytes, up to the
// protocol level, so the caller can answer in the client's version
// (waiting for them at most peekWait).
// Every other refusal (budget, not a CONNECT, malformed length) comes as
// a *connectRefusal with the level read so far; errors of r (EOF, the
// handshake deadline) are returned as they are.
func readConnect(r io.Reader, max int, acct *guard.Account) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:2]); err != nil {
		return nil, err
	}
	if hdr[0]>>4 != 1 {
		return nil, &connectRefusal{err: errNotConnect}
	}
	// MQTT 3.1.1 §2.2.3 and 5 §1.5.5: a Variable Byte Integer of one to
	// four bytes, least significant group first.
	n, remaining, mult := 2, int(hdr[1]&0x7f), 128
	for hdr[n-1]&0x80 != 0 {
		if n == 5 {
			return nil, &connectRefusal{err: errMalformedLength}
		}
		if _, err := io.ReadFull(r, hdr[n:n+1]); err != nil {
			return nil, err
		}
		remaining += int(hdr[n]&0x7f) * mult
		mult *= 128
		n++
	}
	if remaining+1 > max {
		return nil, &connectRefusal{TooLarge: remaining + 1, Level: peekLevel(r), err: errConnectTooLarge}
	}
	// The protocol name and level come first: they are read (at most
	// nine bytes, into an array) before anything is allocated, so that a
	// refusal for the budget answers in the client's version.
	var vh [9]byte
	k, lvl, err := readLevel(r, vh[:], remaining)
	if err != nil {
		return nil, err
	}
	size := n + min(remaining, connectChunk)
	if err := acct.Charge(size); err != nil {
		return nil, &connectRefusal{Level: lvl, err: err}
	}
	buf := make([]byte, n, size)
	copy(buf, hdr[:n])
	buf = append(buf, vh[:k]...)
	for len(buf) < n+remaining {
		if len(buf) == cap(buf) {
			grown := min(2*cap(buf), n+remaining)
			if err := acct.Charge(grown - cap(buf)); err != nil {
				return nil, &connectRefusal{Level: lvl, err: err}
			}
			buf = append(make([]byte, 0, grown), buf...)
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err != nil && len(buf) < n+remaining {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// readLevel reads the start of a CONNECT's variable header into vh (at
// least 9 bytes long), no further than remaining: the protocol name
// ("MQTT" or "MQIsdp", with its length) and the protocol level. It
// returns the bytes read and the level, 0 when the name is not one of
// those (the handshake then refuses the CONNECT: connect.go).
func readLevel(r io.Reader, vh []byte, remaining int) (int, byte, error) {
	k := min(2, remaining)
	if _, err := io.ReadFull(r, vh[:k]); err != nil {
		return 0, 0, err
	}
	if k < 2 {
		return k, 0, nil
	}
	name := int(binary.BigEndian.Uint16(vh))
	if name != 4 && name != 6 || 2+name+1 > remaining {
		return k, 0, nil
	}
	if _, err := io.ReadFull(r, vh[2:2+name+1]); err != nil {
		return 0, 0, err
	}
	return 2 + name + 1, vh[2+name], nil
}

// peekWait bounds the wait for the protocol level of a refused CONNECT:
// a client that sends a large CONNECT sends its start at once.
const peekWait = 500 * time.Millisecond

// peekLevel reads the variable header of a refused CONNECT up to its
// protocol level ("MQTT" or "MQIsdp", at most nine bytes) and returns
// the level, or 0 if it does not come within peekWait (when r has read
// deadlines; the connection is closed after the refusal anyway).
func peekLevel(r io.Reader) byte {
	if d, ok := r.(interface{ SetReadDeadline(time.Time) error }); ok {
		d.SetReadDeadline(time.Now().Add(peekWait))
	}
	var vh [9]byte
	_, lvl, _ := readLevel(r, vh[:], len(vh))
	return lvl
}
