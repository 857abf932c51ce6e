package wire

import (
	"strconv"
	"testing"

	"github.com/go-stomp/stomp/v3/frame"
)

// body1K is a typical 1 KiB message body.
var body1K = func() []byte {
	b := make([]byte, 1024)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}()

// typicalSend is the encoding of a typical SEND frame with a 1 KiB body.
func typicalSend() []byte {
	f := frame.New(frame.SEND,
		frame.Destination, "/queue/orders.eu-west",
		frame.ContentType, "application/json",
		frame.ContentLength, strconv.Itoa(len(body1K)),
		frame.Receipt, "receipt-4711",
		"persistent", "true",
	)
	f.Body = body1K
	return Encode(nil, f, V12)
}

// typicalMessage is the MESSAGE frame a server would send for typicalSend.
func typicalMessage() *frame.Frame {
	f := frame.New(frame.MESSAGE,
		frame.Subscription, "sub-0",
		frame.MessageId, "ID:junction-7d3f-1:4711",
		frame.Destination, "/queue/orders.eu-west",
		frame.ContentType, "application/json",
		frame.ContentLength, strconv.Itoa(len(body1K)),
		frame.Ack, "ack-4711",
	)
	f.Body = body1K
	return f
}

// repeatReader returns data over and over.
type repeatReader struct {
	data []byte
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := copy(p, r.data[r.off:])
	r.off = (r.off + n) % len(r.data)
	return n, nil
}

func BenchmarkRead(b *testing.B) {
	raw := typicalSend()
	r := NewReader(&repeatReader{data: raw}, Limits{})
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		f, err := r.Read()
		if err != nil || f == nil {
			b.Fatal(f, err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	f := typicalMessage()
	buf := make([]byte, 0, 4096)
	b.SetBytes(int64(len(Encode(nil, f, V12))))
	b.ReportAllocs()
	for b.Loop() {
		buf = Encode(buf[:0], f, V12)
	}
}
