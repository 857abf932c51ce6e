package stomp_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/stomp"
)

// Many clients leave at once, each with frames pipelined before its
// DISCONNECT (some split across two writes, the second after a pause):
// every client gets its receipts in order, the DISCONNECT's last, then
// the end of the stream; and the broker is left with no session. This is
// the path of a wave of disconnects: the answers written by the read
// loop at the end of a burst or by the goodbye, the read buffers given
// back before the session's close.
func TestWaveOfDisconnects(t *testing.T) {
	b, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := stomp.New(stomp.Config{}, b)
	t.Cleanup(func() { b.Close() })
	addr, _ := testserve.Serve(t, srv.ServeConn)

	const n = 200
	conns := make([]net.Conn, n)
	readers := make([]*bufio.Reader, n)
	for i := range conns {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(30 * time.Second))
		conns[i], readers[i] = nc, bufio.NewReader(nc)
		io.WriteString(nc, "CONNECT\naccept-version:1.2\nhost:/\nheart-beat:0,0\n\n\x00")
		if f := waveFrame(t, readers[i]); !strings.HasPrefix(f, "CONNECTED\n") {
			t.Fatalf("client %d: %q", i, f)
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, nc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			frames := fmt.Sprintf("SEND\ndestination:/queue/wave\nreceipt:s%d\n\nbody\x00", i) +
				"SUBSCRIBE\nid:0\ndestination:/queue/wave\nreceipt:sub\n\n\x00" +
				"DISCONNECT\nreceipt:bye\n\n\x00"
			if i%4 == 0 {
				// The DISCONNECT split: the worker has answered what came
				// and yields before the rest arrives.
				cut := len(frames) - 10
				io.WriteString(nc, frames[:cut])
				time.Sleep(20 * time.Millisecond)
				frames = frames[cut:]
			}
			io.WriteString(nc, frames)
			var got []string
			for {
				f, err := waveFrameErr(readers[i])
				if err == io.EOF {
					break
				}
				if err != nil {
					errs <- fmt.Errorf("client %d after %q: %v", i, got, err)
					return
				}
				if strings.HasPrefix(f, "RECEIPT\n") {
					got = append(got, waveHeader(f, "receipt-id"))
				}
			}
			if want := []string{fmt.Sprintf("s%d", i), "sub", "bye"}; strings.Join(got, ",") != strings.Join(want, ",") {
				errs <- fmt.Errorf("client %d: receipts %q, want %q", i, got, want)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		open := 0
		for _, ps := range b.ProtocolStats() {
			open += ps.Connections
		}
		if open == 0 && srv.Connections() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions and %d connections left", open, srv.Connections())
		}
		time.Sleep(10 * time.Millisecond)
	}
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

// waveHeader returns the value of header name in frame f, or "".
func waveHeader(f, name string) string {
	for _, l := range strings.Split(f, "\n")[1:] {
		if l == "" {
			break
		}
		if k, v, ok := strings.Cut(l, ":"); ok && k == name {
			return v
		}
	}
	return ""
}
