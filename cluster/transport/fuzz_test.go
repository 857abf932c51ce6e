package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

// zeros is a nonce source for reproducible handshakes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// pipe is a connection whose reads come from r and whose writes vanish.
type pipe struct{ r io.Reader }

func (p pipe) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p pipe) Write(b []byte) (int, error) { return len(b), nil }

// fuzzAcceptor is node 2 with one peer, node 3, and all-zero nonces.
func fuzzAcceptor() *handshaker {
	return newHandshaker(2, testSecret, zeros{}, func(id uint64) bool { return id == 3 })
}

// dialerBytes is what node 3 sends to fuzzAcceptor in a handshake that
// succeeds on lane, followed by frames.
func dialerBytes(lane Lane, frames ...[]byte) []byte {
	var in, out [helloLen + ParamsLen]byte // hellos with parameters of zeros
	(&hello{version: version, lane: lane, from: 3, to: 2}).marshal((*[helloLen]byte)(in[:]))
	(&hello{version: version, lane: lane, from: 2, to: 3}).marshal((*[helloLen]byte)(out[:]))
	p := fuzzAcceptor().proof(labelDialer, in[:], out[:], nil)
	b := append(in[:], p[:]...)
	for _, f := range frames {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// dialerBytesV1 is dialerBytes from a node of handshake version 1 (no
// parameters), which the acceptor still takes.
func dialerBytesV1(lane Lane, frames ...[]byte) []byte {
	var in, out [helloLen]byte
	(&hello{version: 1, lane: lane, from: 3, to: 2}).marshal(&in)
	(&hello{version: 1, lane: lane, from: 2, to: 3}).marshal(&out)
	p := fuzzAcceptor().proof(labelDialer, in[:], out[:], nil)
	b := append(in[:], p[:]...)
	for _, f := range frames {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

const fuzzMaxFrame = 1 << 12

// FuzzAccept feeds a dialer's bytes to the acceptor's handshake and, when
// it succeeds, to the frame reader.
func FuzzAccept(f *testing.F) {
	f.Add(dialerBytes(LaneRaft, []byte("hello"), nil, bytes.Repeat([]byte{7}, fuzzMaxFrame)))
	f.Add(dialerBytes(LaneBulk, []byte{0xff, 0xff, 0xff, 0xff}))
	f.Add(append(dialerBytes(LaneRPC), 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 'x'))
	f.Add(dialerBytes(LaneRaft)[:helloLen])
	f.Add(dialerBytesV1(LaneRPC, []byte("old")))
	f.Add([]byte("JNCT"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		from, lane, why, err := fuzzAcceptor().accept(pipe{r}, nil)
		if err != nil {
			if why == reasonNone {
				t.Fatalf("refused (%v) without a reason", err)
			}
			return
		}
		if from != 3 || lane >= NumLanes || why != reasonNone {
			t.Fatalf("accepted from %d on lane %d (%v)", from, lane, why)
		}
		checkFrames(t, r)
	})
}

// FuzzFrames feeds bytes to the frame reader of an authenticated
// connection.
func FuzzFrames(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 'a', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0x10, 0x01})
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) { checkFrames(t, bytes.NewReader(data)) })
}

func checkFrames(t *testing.T, r io.Reader) {
	fr := newFrameReader(r, fuzzMaxFrame)
	for {
		frame, _, err := fr.next()
		if err != nil {
			if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if len(frame) > fuzzMaxFrame {
			t.Fatalf("a frame of %d bytes, limit %d", len(frame), fuzzMaxFrame)
		}
	}
}

// TestHandshakeAllocatesLittle measures what a peer that has not
// completed the handshake makes the acceptor allocate.
func TestHandshakeAllocatesLittle(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not measurable under the race detector (sync.Pool drops items)")
	}
	junk := bytes.Repeat([]byte("x"), 1<<20) // a megabyte of garbage
	wrongProof := append(dialerBytes(LaneRaft)[:helloLen+ParamsLen], bytes.Repeat([]byte{0xff}, 1<<20)...)
	var stranger [helloLen]byte
	(&hello{version: version, lane: LaneRaft, from: 9, to: 2}).marshal(&stranger)
	for name, input := range map[string][]byte{
		"garbage":          junk,
		"a wrong proof":    wrongProof,
		"a stranger hello": append(stranger[:], junk...),
	} {
		const runs = 200
		readers := make([]*bytes.Reader, runs)
		for i := range readers {
			readers[i] = bytes.NewReader(input)
		}
		hs := fuzzAcceptor()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for _, r := range readers {
			if _, _, _, err := hs.accept(pipe{r}, nil); err == nil {
				t.Fatalf("%s: accepted", name)
			}
		}
		runtime.ReadMemStats(&after)
		per := (after.TotalAlloc - before.TotalAlloc) / runs
		t.Logf("%s: %d bytes allocated per handshake", name, per)
		if per > 512 {
			t.Errorf("%s: %d bytes allocated per refused handshake", name, per)
		}
	}
}
