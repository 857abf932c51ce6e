package mqtt

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// The framing followed by packetLimit stays in step with the stream
// however it is split into reads, and stops exactly before the header of
// the first packet over the limit.
func TestPacketLimitScan(t *testing.T) {
	packet := func(remaining int) []byte {
		p := []byte{0x30}
		for n := remaining; ; {
			b := byte(n % 128)
			n /= 128
			if n > 0 {
				p = append(p, b|0x80)
				continue
			}
			p = append(p, b)
			break
		}
		return append(p, bytes.Repeat([]byte{'x'}, remaining)...)
	}
	var stream []byte
	for _, n := range []int{0, 1, 126, 127, 128, 1000, 1023, 16383, 16384, 0} { // within 16385
		stream = append(stream, packet(n)...)
	}
	cut := len(stream)
	stream = append(stream, packet(16385)[:50]...) // 16385+1 > the limit

	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		l := &packetLimit{max: 16385}
		pos := 0
		refused := -1
		for pos < len(stream) {
			n := 1 + rng.IntN(40000)
			if rng.IntN(4) == 0 {
				n = 1 + rng.IntN(3)
			}
			b := stream[pos:min(pos+n, len(stream))]
			if c, over := l.scan(b); over {
				refused = pos + c
				// Either its first byte is in this read, or it was
				// handed over already and nothing of this read is.
				if refused != cut && !(c == 0 && cut < pos && pos <= cut+4) {
					t.Fatalf("refused at %d (read from %d), want at %d", refused, pos, cut)
				}
				break
			}
			pos += len(b)
		}
		if refused < 0 {
			t.Fatal("the large packet was not refused")
		}
	}
}

// FuzzPacketLimitScan checks that where packetLimit refuses a stream does
// not depend on how the stream is split into reads.
func FuzzPacketLimitScan(f *testing.F) {
	f.Add([]byte("\x30\x07\x00\x03a/bhi\x30\xd0\x0f\x00"), uint16(3), uint16(100))
	f.Add([]byte("\xc0\x00\xe0\x00\x30\xff\xff\xff\xff\x7f"), uint16(5), uint16(1000))
	f.Fuzz(func(t *testing.T, stream []byte, split, max uint16) {
		at := int(split) % (len(stream) + 1)
		whole := &packetLimit{max: int(max)}
		wc, wover := whole.scan(stream)
		parts := &packetLimit{max: int(max)}
		c, over := parts.scan(stream[:at])
		pos := 0
		if !over && !parts.off {
			c, over = parts.scan(stream[at:])
			pos = at
		}
		if whole.off != parts.off {
			if !wover && !over {
				t.Fatalf("malformed framing seen whole %v, in parts %v", whole.off, parts.off)
			}
			return
		}
		if wover != over {
			t.Fatalf("refused whole %v, in parts %v", wover, over)
		}
		if !over {
			return
		}
		// In parts, a header begun in the first part is refused at the
		// second part's start.
		if got := pos + c; got != wc && !(c == 0 && pos > wc && pos <= wc+4) {
			t.Fatalf("refused at %d whole, at %d (%d+%d) in parts split at %d", wc, got, pos, c, at)
		}
	})
}
