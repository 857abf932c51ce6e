package stomp_test

import (
	"bytes"
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/internal/e2e/e2etest"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

// largeBroker is a broker with a journal and a large-message store
// (threshold 64 KiB) in a temporary directory, and a STOMP listener.
type largeBroker struct {
	*stomptest.Broker
	dir string // the large-message store's
}

func startLargeBroker(t *testing.T, cfg stomp.Config) *largeBroker {
	t.Helper()
	bcfg, dir := e2etest.Large(t)
	return &largeBroker{Broker: stomptest.StartWith(t, bcfg, cfg), dir: dir}
}

// files returns the number of files in the large-message store.
func (lb *largeBroker) files(t *testing.T) int { return e2etest.CountFiles(t, lb.dir) }

// A body above the threshold goes to its file as it arrives, bigger than
// any frame the broker would hold (MaxFrameSize), and comes back whole
// to a go-stomp consumer, streamed from the file; the file goes with the
// ack. Both for a durable message (the journal owns the file) and a
// non-durable one.
func TestLargeMessageStreamed(t *testing.T) {
	lb := startLargeBroker(t, stomp.Config{MaxFrameSize: 1 << 20, MaxMessageSize: 32 << 20})
	body := e2etest.Pattern(20<<20 + 17)
	for _, persistent := range []bool{true, false} {
		c := lb.Dial(t)
		opts := []func(*frame.Frame) error{gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", strconv.FormatBool(persistent))}
		if err := c.Send("/queue/big", "application/octet-stream", body, opts...); err != nil {
			t.Fatalf("persistent=%v: %v", persistent, err)
		}
		msgs, total, err := lb.Core.Browse("big", 0, 1)
		if err != nil || total != 1 {
			t.Fatalf("browse: %d %v", total, err)
		}
		if m := msgs[0].Message; !m.Streamed() || m.Size() != int64(len(body)) {
			t.Fatalf("persistent=%v: streamed %v, size %d", persistent, m.Streamed(), m.Size())
		}
		if n := lb.files(t); n != 1 {
			t.Fatalf("%d files in the store, want 1", n)
		}
		sub := stomptest.Subscribe(t, c, "/queue/big", gostomp.AckClient)
		m := stomptest.Next(t, sub)
		if sha256.Sum256(m.Body) != sha256.Sum256(body) {
			t.Fatalf("persistent=%v: body of %d bytes differs", persistent, len(m.Body))
		}
		if err := c.Ack(m); err != nil {
			t.Fatal(err)
		}
		sub.Unsubscribe()
		stomptest.Barrier(t, c)
		m, msgs = nil, nil
		e2etest.EventuallyGC(t, "the body's file to go with its ack", func() bool { return lb.files(t) == 0 })
	}
}

// A SEND over MaxMessageSize is refused before its body is read; a
// client cut off mid-body leaves no file and no message, and gets no
// receipt.
func TestLargeMessageLimits(t *testing.T) {
	lb := startLargeBroker(t, stomp.Config{MaxFrameSize: 1 << 20, MaxMessageSize: 4 << 20})
	r := lb.Raw(t)
	r.Connect("")
	r.Write("SEND\ndestination:/queue/big\nreceipt:1\ncontent-length:" + strconv.Itoa(5<<20) + "\n\n")
	f := r.Frame()
	if !strings.HasPrefix(f, "ERROR\n") || !strings.Contains(f, "frame too large") {
		t.Fatalf("over MaxMessageSize: %q", f)
	}
	r.Closed()

	r = lb.Raw(t)
	r.Connect("")
	r.Write("SEND\ndestination:/queue/big\npersistent:true\nreceipt:1\ncontent-length:" + strconv.Itoa(3<<20) + "\n\n")
	r.Write(string(e2etest.Pattern(2 << 20)))
	time.Sleep(50 * time.Millisecond) // the broker is writing the file
	r.Conn.Close()
	testserve.Eventually(t, "the cut body's file to go", func() bool { return lb.files(t) == 0 })
	time.Sleep(50 * time.Millisecond)
	if d := depth(lb.Broker, "big"); d > 0 {
		t.Fatalf("a cut message was sent: depth %d", d)
	}
	if n := lb.files(t); n != 0 {
		t.Fatalf("%d files left", n)
	}

	// The connection still works for whole messages after a refusal.
	c := lb.Dial(t)
	body := e2etest.Pattern(3 << 20)
	if err := c.Send("/queue/big", "", body, gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	sub := stomptest.Subscribe(t, c, "/queue/big", gostomp.AckAuto)
	if m := stomptest.Next(t, sub); !bytes.Equal(m.Body, body) {
		t.Fatalf("body of %d bytes differs", len(m.Body))
	}
}

func depth(tb *stomptest.Broker, queue string) int64 {
	if q := tb.Core.Queue(queue); q != nil {
		return q.Stats().Depth
	}
	return -1
}
