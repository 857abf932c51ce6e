package mqtt

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/junctionmq/junction/core/guard"
)

// connectPacket returns a CONNECT of the given protocol level whose
// client id pads the packet to a remaining length of remaining bytes
// (at least the 14 of an empty client id; 15 for level 5).
func connectPacket(level byte, remaining int) []byte {
	vh := []byte("\x00\x04MQTT")
	vh = append(vh, level, 0x02, 0x00, 0x3c)
	if level == 5 {
		vh = append(vh, 0x00) // no properties
	}
	id := remaining - len(vh) - 2
	p := append(vh, byte(id>>8), byte(id))
	p = append(p, bytes.Repeat([]byte{'c'}, id)...)
	return append(header(0x10, len(p)), p...)
}

// header is a fixed header: first byte and remaining length.
func header(first byte, remaining int) []byte {
	h := []byte{first}
	for {
		b := byte(remaining % 128)
		remaining /= 128
		if remaining > 0 {
			h = append(h, b|0x80)
			continue
		}
		return append(h, b)
	}
}

func TestReadConnect(t *testing.T) {
	for _, size := range []int{14, 200, 511, 512, 513, 5000, 60000} {
		pkt := connectPacket(4, size)
		more := []byte("\x30\x05\x00\x01ahi") // a PUBLISH pipelined behind it
		for name, r := range map[string]io.Reader{
			"whole":        bytes.NewReader(append(append([]byte(nil), pkt...), more...)),
			"byte-by-byte": iotest.OneByteReader(bytes.NewReader(append(append([]byte(nil), pkt...), more...))),
			"halves":       iotest.HalfReader(bytes.NewReader(append(append([]byte(nil), pkt...), more...))),
		} {
			b := guard.NewBudget(0)
			acct := b.Open(0)
			got, err := readConnect(r, 64<<10, acct)
			if err != nil {
				t.Fatalf("%d bytes, %s: %v", size, name, err)
			}
			if !bytes.Equal(got, pkt) {
				t.Fatalf("%d bytes, %s: read %d bytes, not the packet", size, name, len(got))
			}
			rest, _ := io.ReadAll(r)
			if !bytes.Equal(rest, more) {
				t.Fatalf("%d bytes, %s: read past the packet (left %q)", size, name, rest)
			}
			// The buffer, charged as it grew, is at most twice the packet.
			if h := acct.Held(); h < int64(len(pkt)) || h > 2*int64(len(pkt))+connectChunk {
				t.Fatalf("%d bytes, %s: charged %d", size, name, h)
			}
		}
	}
}

// A client that declares a large CONNECT and sends a little holds a
// little: the buffer grows with what arrives.
func TestReadConnectGrowsAsBytesArrive(t *testing.T) {
	pkt := connectPacket(4, 60000)
	acct := guard.NewBudget(0).Open(0)
	_, err := readConnect(bytes.NewReader(pkt[:1000]), 64<<10, acct)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut CONNECT: %v", err)
	}
	if h := acct.Held(); h > 2048+5 {
		t.Fatalf("1000 bytes of a 60000-byte CONNECT charged %d", h)
	}
}

func TestReadConnectRefusals(t *testing.T) {
	huge := header(0x10, 10<<20)
	for _, tc := range []struct {
		name     string
		in       []byte
		max      int
		budget   int64
		tooLarge int
		level    byte
		want     error
	}{
		{"too large, 3.1.1", append(huge, "\x00\x04MQTT\x04"...), 64 << 10, 0, 10<<20 + 1, 4, errConnectTooLarge},
		{"too large, 5", append(huge, "\x00\x04MQTT\x05\x02"...), 64 << 10, 0, 10<<20 + 1, 5, errConnectTooLarge},
		{"too large, 3.1", append(huge, "\x00\x06MQIsdp\x03"...), 64 << 10, 0, 10<<20 + 1, 3, errConnectTooLarge},
		{"too large, header only", huge, 64 << 10, 0, 10<<20 + 1, 0, errConnectTooLarge},
		{"just over the limit", connectPacket(5, 1024), 1024, 0, 1025, 5, errConnectTooLarge},
		{"budget, level known", connectPacket(5, 4000), 64 << 10, 600, 0, 5, guard.ErrBudget},
		{"budget at once, level read first", connectPacket(4, 4000), 64 << 10, 100, 0, 4, guard.ErrBudget},
		{"not a CONNECT", []byte("\x30\x05\x00\x01ahi"), 64 << 10, 0, 0, 0, errNotConnect},
		{"malformed length", []byte("\x10\xff\xff\xff\xff\x01"), 64 << 10, 0, 0, 0, errMalformedLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bytes.NewReader(tc.in)
			acct := guard.NewBudget(tc.budget).Open(0)
			_, err := readConnect(r, tc.max, acct)
			var cr *connectRefusal
			if !errors.As(err, &cr) || !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want a refusal for %v", err, tc.want)
			}
			if cr.TooLarge != tc.tooLarge || cr.Level != tc.level {
				t.Fatalf("refusal: too large %d, level %d; want %d, %d", cr.TooLarge, cr.Level, tc.tooLarge, tc.level)
			}
			if tc.tooLarge > 0 && r.Len() < len(tc.in)-len(huge)-9 {
				t.Fatalf("read %d bytes of a refused CONNECT", len(tc.in)-r.Len())
			}
		})
	}
}
