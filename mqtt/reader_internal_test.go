package mqtt

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/testserve"
)

// packet returns an MQTT packet of type byte first with a body of n
// bytes (each its index mod 251).
func packet(first byte, n int) []byte {
	p := appendVarint([]byte{first}, n)
	for i := range n {
		p = append(p, byte(i%251))
	}
	return p
}

// The reader hands out exactly the packets sent, however the stream is
// cut into writes; small ones as views, large ones in an allocation of
// their own; and an idle TCP connection holds no buffer.
func TestPacketReaderStream(t *testing.T) {
	sizes := []int{0, 1, 126, 127, 128, 300, 16383, 16384, readBufSize - 3, readBufSize, 70000, 5, 0, 2 << 20, 2}
	var stream []byte
	for i, n := range sizes {
		stream = append(stream, packet(byte(0x30|i&1), n)...)
	}
	for _, tcp := range []bool{true, false} {
		var client, server net.Conn
		if tcp {
			client, server = testserve.Pair(t)
		} else {
			client, server = net.Pipe()
			defer client.Close()
			defer server.Close()
		}
		go func() {
			rng := rand.New(rand.NewPCG(1, 2))
			for off := 0; off < len(stream); {
				n := min(len(stream)-off, 1+rng.IntN(40000))
				if rng.IntN(4) == 0 {
					n = min(n, 1+rng.IntN(4))
				}
				client.Write(stream[off : off+n])
				off += n
			}
		}()
		pr := newPacketReader(server)
		pr.max = 4 << 20
		if tcp && pr.raw == nil {
			t.Fatal("no raw reads on a TCP connection")
		}
		server.SetReadDeadline(time.Now().Add(10 * time.Second))
		for i, n := range sizes {
			first, body, owned, err := pr.next()
			if err != nil {
				t.Fatalf("tcp %v: packet %d: %v", tcp, i, err)
			}
			if want := packet(byte(0x30|i&1), n); first != want[0] || !bytes.Equal(body, want[len(want)-n:]) {
				t.Fatalf("tcp %v: packet %d (%d bytes) differs", tcp, i, n)
			}
			if owned != (n+5 > readBufSize) && n > readBufSize {
				t.Fatalf("tcp %v: packet %d of %d bytes: owned %v", tcp, i, n, owned)
			}
		}
		if tcp {
			// Idle: the wait for the next packet holds no buffer (it
			// ends here at the deadline).
			server.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			if _, _, _, err := pr.next(); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("idle read: %v", err)
			}
			if pr.pooled != nil || pr.buf != nil {
				t.Fatal("an idle TCP connection holds a read buffer")
			}
		}
		pr.close()
	}
}

// A packet over the limit is refused from its header, before its body
// is read; the packets before it are handed out.
func TestPacketReaderTooLarge(t *testing.T) {
	client, server := testserve.Pair(t)
	client.Write(append(packet(0x30, 10), 0x30, 0xd0, 0x0f)) // then a header declaring 2000 bytes
	pr := newPacketReader(server)
	pr.max = 1024
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, body, _, err := pr.next(); err != nil || len(body) != 10 {
		t.Fatalf("first packet: %d bytes, %v", len(body), err)
	}
	if _, _, _, err := pr.next(); !errors.Is(err, errPacketTooLarge) {
		t.Fatalf("large packet: %v", err)
	}
	client.Write([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01})
	pr2 := newPacketReader(server)
	pr2.max = 1 << 30
	if _, _, _, err := pr2.next(); !errors.Is(err, errMalformedLength) {
		t.Fatalf("five length bytes: %v", err)
	}
}

// A stream that ends inside a packet is an unexpected EOF; between
// packets, EOF.
func TestPacketReaderEOF(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want error
	}{
		{nil, io.EOF},
		{packet(0x30, 3), io.EOF},
		{packet(0x30, 3)[:3], io.ErrUnexpectedEOF},
		{[]byte{0x30}, io.ErrUnexpectedEOF},
	} {
		client, server := net.Pipe()
		go func() { client.Write(tc.in); client.Close() }()
		pr := newPacketReader(server)
		pr.max = 1 << 20
		var err error
		for err == nil {
			_, _, _, err = pr.next()
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%x: %v, want %v", tc.in, err, tc.want)
		}
		server.Close()
	}
}

// FuzzPacketReader checks that the packets read do not depend on how the
// stream is cut into reads, against a plain parse of the whole stream.
func FuzzPacketReader(f *testing.F) {
	f.Add([]byte("\x30\x07\x00\x03a/bhi\x30\xd0\x0f\x00"), uint16(3))
	f.Add([]byte("\xc0\x00\xe0\x00\x30\xff\xff\xff\xff\x7f"), uint16(5))
	f.Add(append(packet(0x30, 20000), packet(0x82, 3)...), uint16(100))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint16) {
		type pkt struct {
			first byte
			body  string
		}
		// The reference: parse the whole stream at once.
		var want []pkt
		var wantErr error
		for rest := stream; len(rest) > 0; {
			if len(rest) < 2 {
				wantErr = io.ErrUnexpectedEOF
				break
			}
			first, length, hlen, ok, err := parseHeader(rest[:min(5, len(rest))])
			if err != nil {
				wantErr = err
				break
			}
			if ok && hlen+length > 1<<20 {
				wantErr = errPacketTooLarge // refused from its header
				break
			}
			if !ok || hlen+length > len(rest) {
				wantErr = io.ErrUnexpectedEOF
				break
			}
			want = append(want, pkt{first, string(rest[hlen : hlen+length])})
			rest = rest[hlen+length:]
		}
		client, server := net.Pipe()
		defer server.Close()
		go func() {
			step := int(chunk%512) + 1
			for off := 0; off < len(stream); off += step {
				client.Write(stream[off:min(off+step, len(stream))])
			}
			client.Close()
		}()
		pr := newPacketReader(server)
		pr.max = 1 << 20
		var got []pkt
		var err error
		for {
			var first byte
			var body []byte
			first, body, _, err = pr.next()
			if err != nil {
				break
			}
			got = append(got, pkt{first, string(body)})
		}
		if len(got) != len(want) {
			t.Fatalf("%d packets, want %d", len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("packet %d differs", i)
			}
		}
		switch {
		case wantErr == nil && !errors.Is(err, io.EOF):
			t.Fatalf("end %v, want EOF", err)
		case wantErr != nil && !errors.Is(err, wantErr) && !(wantErr == io.ErrUnexpectedEOF && errors.Is(err, io.EOF)):
			t.Fatalf("end %v, want %v", err, wantErr)
		}
	})
}
