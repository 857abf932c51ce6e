package amqp_test

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/amqptest"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
)

// fileStore is a core.LargeStore of plain files, as persistence/large
// writes them (temporary name, copy through a 1 MiB buffer, fsync,
// rename), which package amqp may not import even in its tests.
type fileStore struct{ dir string }

func (s fileStore) name(id uint64) string { return filepath.Join(s.dir, strconv.FormatUint(id, 10)) }

func (s fileStore) Write(id uint64, r io.Reader) (int64, error) {
	f, err := os.Create(s.name(id) + ".tmp")
	if err != nil {
		return 0, err
	}
	n, err := io.CopyBuffer(f, r, make([]byte, 1<<20))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(s.name(id)+".tmp", s.name(id))
	}
	if err != nil {
		os.Remove(s.name(id) + ".tmp")
	}
	return n, err
}

func (s fileStore) Open(id uint64) (io.ReadCloser, error) { return os.Open(s.name(id)) }

func (s fileStore) Size(id uint64) (int64, error) {
	st, err := os.Stat(s.name(id))
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (s fileStore) Link(from, to uint64) error { return os.Link(s.name(from), s.name(to)) }
func (s fileStore) Remove(id uint64) error     { return os.Remove(s.name(id)) }
func (s fileStore) List() ([]uint64, error)    { return nil, nil }

// TestLargeThroughputRaw measures the broker's AMQP throughput with one
// 1 GiB durable message, with a client that costs next to nothing (raw
// frames: go-amqp copies each message several times, and is the limit
// on a small machine): in, from the first transfer to the disposition
// (the body written and synced); out, from the receiver's credit to the
// last transfer. The body's file store is plain files (fileStore) and
// there is no journal. It runs with JUNCTION_LARGE_FIGURES=1 and asserts
// nothing (docs/benchmarks.md, "Large messages").
func TestLargeThroughputRaw(t *testing.T) {
	if os.Getenv("JUNCTION_LARGE_FIGURES") == "" {
		t.Skip("set JUNCTION_LARGE_FIGURES=1 to measure the large-message figures")
	}
	const size = 1 << 30
	// No journal (package amqp may not import persistence): the body is
	// streamed to its file and synced as with one, only its small record
	// is not written.
	tb := amqptest.Start(t, amqp.Config{MaxLargeMessageSize: size + 1<<20},
		core.Config{Large: fileStore{t.TempDir()}, LargeMessageThreshold: 1 << 20})
	nc, err := net.Dial("tcp", strings.TrimPrefix(tb.Addr, "amqp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Minute))
	c := &rawClient{t: t, nc: nc, br: bufio.NewReaderSize(nc, 1<<20)}
	c.write(frames.ProtoAMQP[:])
	c.header()
	c.send(0, &frames.Open{ContainerID: "raw", MaxFrameSize: 1 << 20, ChannelMax: 1}, nil)
	peer, _ := expect[*frames.Open](c)
	c.send(0, &frames.Begin{IncomingWindow: 1 << 20, OutgoingWindow: 1 << 20}, nil)
	expect[*frames.Begin](c)
	c.send(0, &frames.Attach{Name: "s", Handle: 0, Role: frames.RoleSender, Source: &frames.Source{}, Target: &frames.Target{Address: addr("big")}}, nil)
	expect[*frames.Attach](c)
	expect[*frames.Flow](c)

	chunk := int(peer.MaxFrameSize) - 64
	msg := frames.AppendDataHeader(frames.AppendMessage(nil, &frames.Message{Header: &frames.MessageHeader{Durable: true, Priority: 4}}), size)
	zero := make([]byte, chunk)
	id, format, settled := uint32(0), uint32(0), false
	start := time.Now()
	buf := make([]byte, 0, 4<<20)
	left := len(msg) + size
	first := true
	for left > 0 {
		tr := &frames.Transfer{Handle: 0}
		if first {
			tr.DeliveryID, tr.DeliveryTag, tr.MessageFormat, tr.Settled = &id, []byte{1}, &format, &settled
			first = false
		}
		p := zero[:min(chunk, left)]
		if len(msg) > 0 {
			p = append(msg[:len(msg):len(msg)], zero[:min(chunk, left)-len(msg)]...)
			msg = nil
		}
		left -= len(p)
		tr.More = left > 0
		buf = frames.Append(buf, frames.TypeAMQP, 0, tr, p)
		if len(buf) >= 3<<20 || left == 0 {
			c.write(buf)
			buf = buf[:0]
		}
	}
	for {
		perf, _ := c.next()
		if d, ok := perf.(*frames.Disposition); ok {
			if _, ok := d.State.(*frames.Accepted); !ok {
				t.Fatalf("disposition %+v", d)
			}
			break
		}
	}
	in := time.Since(start)

	c.send(0, &frames.Attach{Name: "r", Handle: 1, Role: frames.RoleReceiver, Source: &frames.Source{Address: addr("big")}, Target: &frames.Target{}}, nil)
	expect[*frames.Attach](c)
	start = time.Now()
	c.send(0, &frames.Flow{NextIncomingID: u32(0), IncomingWindow: 1 << 20, OutgoingWindow: 1 << 20, Handle: u32(1), DeliveryCount: u32(0), LinkCredit: u32(1)}, nil)
	got := 0
	for {
		perf, payload := c.next()
		tr, ok := perf.(*frames.Transfer)
		if !ok {
			continue
		}
		got += len(payload)
		if !tr.More {
			break
		}
	}
	out := time.Since(start)
	t.Logf("AMQP raw client, one 1 GiB durable message: in %.0f MB/s, out %.0f MB/s (%d bytes of message)",
		size/in.Seconds()/1e6, size/out.Seconds()/1e6, got)
}
