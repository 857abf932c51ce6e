package stomp_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

// Many clients leave at once, each with frames pipelined before its
// DISCONNECT (some split across two writes, the second after a pause):
// every client gets its receipts in order, the DISCONNECT's last, then
// the end of the stream; and the broker is left with no session. This is
// the path of a wave of disconnects: the answers written by the read
// loop at the end of a burst or by the goodbye, the read buffers given
// back before the session's close.
func TestWaveOfDisconnects(t *testing.T) {
	tb := stomptest.StartWith(t, core.Config{}, stomp.Config{})

	// A client: its connection, and a reader of it.
	type client struct {
		nc net.Conn
		r  *bufio.Reader
	}
	join := func(i int) client {
		nc, err := net.DialTimeout("tcp", tb.Addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		nc.SetDeadline(time.Now().Add(30 * time.Second))
		c := client{nc, bufio.NewReader(nc)}
		io.WriteString(nc, "CONNECT\naccept-version:1.2\nhost:/\nheart-beat:0,0\n\n\x00")
		if f := waveFrame(t, c.r); !strings.HasPrefix(f, "CONNECTED\n") {
			t.Fatalf("client %d: %q", i, f)
		}
		return c
	}
	leave := func(i int, c client) error {
		frames := fmt.Sprintf("SEND\ndestination:/queue/wave\nreceipt:s%d\n\nbody\x00", i) +
			"SUBSCRIBE\nid:0\ndestination:/queue/wave\nreceipt:sub\n\n\x00" +
			"DISCONNECT\nreceipt:bye\n\n\x00"
		if i%4 == 0 {
			// The DISCONNECT split: the worker has answered what came
			// and yields before the rest arrives.
			cut := len(frames) - 10
			io.WriteString(c.nc, frames[:cut])
			time.Sleep(20 * time.Millisecond)
			frames = frames[cut:]
		}
		io.WriteString(c.nc, frames)
		var got []string
		for {
			f, err := waveFrameErr(c.r)
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("after %q: %v", got, err)
			}
			if strings.HasPrefix(f, "RECEIPT\n") {
				got = append(got, stomptest.Header(f, "receipt-id"))
			}
		}
		if want := []string{fmt.Sprintf("s%d", i), "sub", "bye"}; strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("receipts %q, want %q", got, want)
		}
		return nil
	}
	testserve.Wave(t, 200, join, leave, func() (int, int) {
		open := 0
		for _, ps := range tb.Core.ProtocolStats() {
			open += ps.Connections
		}
		return open, tb.Server.Connections()
	})
}

func waveFrame(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	f, err := waveFrameErr(r)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// waveFrameErr reads up to a frame's NUL, skipping heart-beat EOLs.
func waveFrameErr(r *bufio.Reader) (string, error) {
	f, err := r.ReadString(0)
	if err != nil {
		if err == io.EOF && strings.TrimLeft(f, "\r\n") == "" {
			return "", io.EOF
		}
		return "", err
	}
	return strings.TrimLeft(strings.TrimSuffix(f, "\x00"), "\r\n"), nil
}
