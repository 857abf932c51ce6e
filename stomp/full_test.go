package stomp_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

// limited is address settings bounding addr's queues to max body bytes
// with the given address-full-policy.
func limited(addr string, max int64, policy string) core.AddressSettings {
	return core.AddressSettings{Match: addr, MaxSizeBytes: &max, FullPolicy: &policy}
}

func depth(tb *stomptest.Broker, queue string) int64 {
	if q := tb.Core.Queue(queue); q != nil {
		return q.Stats().Depth
	}
	return -1
}

// stompConns sums the dropped and refused counts of the STOMP connections.
func stompConns(b *core.Broker) (dropped, refused uint64) {
	for _, c := range b.Connections() {
		if c.Protocol == "stomp" {
			dropped += c.Dropped
			refused += c.Refused
		}
	}
	return dropped, refused
}

// A SEND to a full FAIL address gets an ERROR "address full" naming its
// receipt, and the connection is closed, as for every ERROR.
func TestFullFailSendsError(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		t.Run(fmt.Sprintf("persistent=%v", persistent), func(t *testing.T) {
			tb := stomptest.Start(t, stomp.Config{}, limited("fail", 10, "FAIL"))
			r := tb.Raw(t)
			r.Connect("")
			hdr := ""
			if persistent {
				hdr = "persistent:true\n"
			}
			r.Write("SEND\ndestination:/queue/fail\nreceipt:1\n" + hdr + "\n12345678\x00")
			if f := r.Frame(); !strings.HasPrefix(f, "RECEIPT\n") {
				t.Fatalf("first send: got %q", f)
			}
			r.Write("SEND\ndestination:/queue/fail\nreceipt:2\n" + hdr + "\n12345678\x00")
			f := r.Frame()
			if !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "message") != "address full" || stomptest.Header(f, "receipt-id") != "2" {
				t.Fatalf("second send: got %q, want ERROR address full for receipt 2", f)
			}
			if _, body, _ := strings.Cut(f, "\n\n"); !strings.Contains(body, "fail") {
				t.Fatalf("ERROR body %q does not name the queue", body)
			}
			r.Closed()
			if got := tb.Core.DropStats()[core.RefusedFull]; got != 1 {
				t.Fatalf("refused_full = %d, want 1", got)
			}
			if d := depth(tb, "fail"); d != 1 {
				t.Fatalf("depth %d, want 1", d)
			}
		})
	}
}

// With DROP, SENDs to a full address are confirmed and the messages
// dropped, counted for the broker and the connection.
func TestFullDropCounts(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{}, limited("drop", 10, "DROP"))
	c := tb.Dial(t)
	for i := range 3 {
		stomptest.Send(t, c, "/queue/drop", fmt.Sprintf("message%d", i), gostomp.SendOpt.Receipt)
	}
	if d := depth(tb, "drop"); d != 1 {
		t.Fatalf("depth %d, want 1", d)
	}
	if got := tb.Core.DropStats()[core.DropFull]; got != 2 {
		t.Fatalf("queue_full drops = %d, want 2", got)
	}
	if dropped, refused := stompConns(tb.Core); dropped != 2 || refused != 0 {
		t.Fatalf("connection dropped %d refused %d, want 2 and 0", dropped, refused)
	}
	s := stomptest.Subscribe(t, tb.Dial(t), "/queue/drop", gostomp.AckAuto)
	if got := string(stomptest.Next(t, s).Body); got != "message0" {
		t.Fatalf("got %q, want message0", got)
	}
}

// With BLOCK, the broker stops reading a producer's connection while the
// address is full: its SEND gets no RECEIPT until a consumer makes room;
// then every message arrives, in order.
func TestFullBlockStallsProducer(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		t.Run(fmt.Sprintf("persistent=%v", persistent), func(t *testing.T) {
			const n = 40
			tb := stomptest.Start(t, stomp.Config{}, limited("block", 100, "BLOCK"))
			prod := tb.Dial(t)
			opts := []func(*frame.Frame) error{gostomp.SendOpt.Receipt}
			if persistent {
				opts = append(opts, gostomp.SendOpt.Header("persistent", "true"))
			}
			var sent atomic.Int32
			errc := make(chan error, 1)
			go func() {
				for i := range n {
					if err := prod.Send("/queue/block", "text/plain", fmt.Appendf(nil, "message%03d", i), opts...); err != nil {
						errc <- fmt.Errorf("send %d: %w", i, err)
						return
					}
					sent.Add(1)
				}
				errc <- nil
			}()
			// Ten 10-byte messages fill the queue.
			testserve.Eventually(t, "the queue to fill", func() bool { return depth(tb, "block") >= 10 })
			select {
			case err := <-errc:
				t.Fatalf("the producer finished (%v) while the address was full; %d sent", err, sent.Load())
			case <-time.After(500 * time.Millisecond):
			}
			if d := depth(tb, "block"); d != 10 {
				t.Fatalf("depth %d while blocked, want 10", d)
			}

			// Not subscribe: its barrier's RECEIPT would queue behind more
			// messages than go-stomp buffers before they are read.
			s, err := tb.Dial(t).Subscribe("/queue/block", gostomp.AckAuto)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if got, want := string(stomptest.Next(t, s).Body), fmt.Sprintf("message%03d", i); got != want {
					t.Fatalf("message %d: got %q, want %q", i, got, want)
				}
			}
			select {
			case err := <-errc:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the producer did not resume: %d of %d sent", sent.Load(), n)
			}
		})
	}
}

// A producer waiting for room (BLOCK) can still be closed by an
// administrator, and does not hold up the broker's shutdown.
func TestFullBlockedProducerCanBeClosed(t *testing.T) {
	blockedProducer := func(t *testing.T, tb *stomptest.Broker, persistent bool) *stomptest.RawConn {
		t.Helper()
		r := tb.Raw(t)
		r.Connect("")
		hdr := ""
		if persistent {
			hdr = "persistent:true\n"
		}
		r.Write("SEND\ndestination:/queue/block\nreceipt:1\n" + hdr + "\n12345678\x00")
		if f := r.Frame(); !strings.HasPrefix(f, "RECEIPT\n") {
			t.Fatalf("first send: got %q", f)
		}
		r.Write("SEND\ndestination:/queue/block\nreceipt:2\n" + hdr + "\n12345678\x00")
		return r
	}
	for _, persistent := range []bool{false, true} {
		t.Run(fmt.Sprintf("admin/persistent=%v", persistent), func(t *testing.T) {
			tb := stomptest.Start(t, stomp.Config{}, limited("block", 10, "BLOCK"))
			r := blockedProducer(t, tb, persistent)
			var id uint64
			testserve.Eventually(t, "the connection to be listed", func() bool {
				for _, c := range tb.Core.Connections() {
					id = c.ID
				}
				return id != 0
			})
			time.Sleep(50 * time.Millisecond) // let the SEND reach core's wait
			if err := tb.Core.CloseConnection(id); err != nil {
				t.Fatal(err)
			}
			r.Closed()
			testserve.Eventually(t, "the session to close", func() bool { return len(tb.Core.Connections()) == 0 })
			if d := depth(tb, "block"); d != 1 {
				t.Fatalf("depth %d, want 1: the blocked message must not be taken", d)
			}
		})
		t.Run(fmt.Sprintf("shutdown/persistent=%v", persistent), func(t *testing.T) {
			b, err := core.New(core.Config{AddressSettings: []core.AddressSettings{limited("block", 10, "BLOCK")}})
			if err != nil {
				t.Fatal(err)
			}
			tb := stomptest.Serve(t, b, stomp.Config{})
			blockedProducer(t, tb, persistent)
			time.Sleep(50 * time.Millisecond) // let the SEND reach core's wait
			done := make(chan struct{})
			go func() { tb.Stop(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("shutdown waits for a producer blocked on a full address")
			}
		})
	}
}
