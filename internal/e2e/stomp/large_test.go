package stomp_test

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/persistence/journal"
	"github.com/junctionmq/junction/persistence/large"
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
	dir := t.TempDir()
	msgs, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "journal"), FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { msgs.Close() })
	bindings, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "bindings"), FileSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bindings.Close() })
	ls, err := large.Open(filepath.Join(dir, "large"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.New(core.Config{Messages: msgs, Bindings: bindings, Large: ls, LargeMessageThreshold: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return &largeBroker{Broker: stomptest.Serve(t, b, cfg), dir: filepath.Join(dir, "large")}
}

// files returns the names in the large-message store's directory.
func (lb *largeBroker) files(t *testing.T) []string {
	t.Helper()
	es, err := os.ReadDir(lb.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + i>>16)
	}
	return b
}

// A body above the threshold goes to its file as it arrives, bigger than
// any frame the broker would hold (MaxFrameSize), and comes back whole
// to a go-stomp consumer, streamed from the file; the file goes with the
// ack. Both for a durable message (the journal owns the file) and a
// non-durable one.
func TestLargeMessageStreamed(t *testing.T) {
	lb := startLargeBroker(t, stomp.Config{MaxFrameSize: 1 << 20, MaxMessageSize: 32 << 20})
	body := pattern(20<<20 + 17)
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
		if n := len(lb.files(t)); n != 1 {
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
		eventuallyGC(t, "the body's file to go with its ack", func() bool { return len(lb.files(t)) == 0 })
	}
}

// eventuallyGC is eventually, running the collector: a non-durable
// body's file goes once nothing references its message.
func eventuallyGC(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testserve.Eventually(t, what, func() bool {
		runtime.GC()
		return cond()
	})
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
	r.Write(string(pattern(2 << 20)))
	time.Sleep(50 * time.Millisecond) // the broker is writing the file
	r.Conn.Close()
	testserve.Eventually(t, "the cut body's file to go", func() bool { return len(lb.files(t)) == 0 })
	time.Sleep(50 * time.Millisecond)
	if d := depth(lb.Broker, "big"); d > 0 {
		t.Fatalf("a cut message was sent: depth %d", d)
	}
	if n := len(lb.files(t)); n != 0 {
		t.Fatalf("%d files left", n)
	}

	// The connection still works for whole messages after a refusal.
	c := lb.Dial(t)
	body := pattern(3 << 20)
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
