package stomp_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

// refusals returns the broker's count of STOMP pre-authentication
// refusals for reason.
func refusals(b *core.Broker, reason string) uint64 {
	return b.GuardStats().PreAuthRefused["stomp"][reason]
}

// A frame over the pre-login limit gets an ERROR and the connection is
// closed, before the broker holds more than the limit: a content-length
// of 10 MiB is refused before its body is read, and a body without one
// once it passes the limit. A client that logs in first may send frames
// up to MaxFrameSize.
func TestPreAuthFrameTooLarge(t *testing.T) {
	tb := stomptest.StartWith(t, core.Config{}, stomp.Config{PreAuthMaxFrameSize: 4 << 10})
	good := tb.Dial(t)
	gs := stomptest.Subscribe(t, good, "/queue/good", gostomp.AckAuto)
	for _, tc := range []struct{ name, frame string }{
		{"content-length", "CONNECT\naccept-version:1.2\ncontent-length:10485760\n\n" + strings.Repeat("x", 8<<10)},
		{"NUL-terminated body", "CONNECT\naccept-version:1.2\n\n" + strings.Repeat("x", 8<<10)},
		{"headers", "CONNECT\naccept-version:1.2\n" + strings.Repeat("h:0123456789012345678901234567890123456789\n", 200)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := refusals(tb.Core, core.PreAuthFrameTooLarge)
			r := tb.Raw(t)
			// Written in the background: the broker may close before it
			// has taken all of it.
			go r.Conn.Write([]byte(tc.frame))
			f := r.Frame()
			if !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "message") != "malformed frame" || !strings.Contains(f, "frame too large (") || !strings.Contains(f, "limit 4096 bytes)") {
				t.Fatalf("want ERROR malformed frame (too large), got %q", f)
			}
			r.Closed()
			if got := refusals(tb.Core, core.PreAuthFrameTooLarge); got != before+1 {
				t.Fatalf("frame_too_large refusals %d, want %d", got, before+1)
			}
			stomptest.Send(t, good, "/queue/good", tc.name)
			if m := stomptest.Next(t, gs); string(m.Body) != tc.name {
				t.Fatalf("good client got %q", m.Body)
			}
		})
	}
	// Logged in, the same client may send a frame past the pre-login
	// limit.
	r := tb.Raw(t)
	r.Connect("")
	body := strings.Repeat("y", 16<<10)
	r.Write("SEND\ndestination:/queue/good\nreceipt:big\n\n" + body + "\x00")
	if f := r.Frame(); !strings.HasPrefix(f, "RECEIPT\n") {
		t.Fatalf("large SEND after login: %q", f)
	}
	if m := stomptest.Next(t, gs); string(m.Body) != body {
		t.Fatalf("large SEND delivered %d bytes", len(m.Body))
	}
	if held := tb.Core.GuardStats().PreAuthHeld; held != 0 {
		t.Fatalf("the budget still holds %d bytes with every client logged in or gone", held)
	}
}

// Connections that have not logged in share the broker's budget: one
// the budget has no room for gets ERROR "server busy" and is closed;
// once the bytes held are given back, clients log in again.
func TestPreAuthBudget(t *testing.T) {
	tb := stomptest.StartWith(t, core.Config{PreAuthBudget: 6 << 10}, stomp.Config{})
	hog := tb.Raw(t)
	// Most of a CONNECT frame, which the broker holds while it waits.
	hog.Write("CONNECT\naccept-version:1.2\nx:" + strings.Repeat("a", 4<<10) + "\n")
	testserve.Eventually(t, "the first client's bytes to be charged", func() bool {
		return tb.Core.GuardStats().PreAuthHeld >= 4<<10
	})
	r := tb.Raw(t)
	go r.Conn.Write([]byte("CONNECT\naccept-version:1.2\ny:" + strings.Repeat("b", 3<<10) + "\n\n\x00"))
	f := r.Frame()
	if !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "message") != "server busy" {
		t.Fatalf("want ERROR server busy, got %q", f)
	}
	r.Closed()
	if got := refusals(tb.Core, core.PreAuthBudget); got != 1 {
		t.Fatalf("budget refusals %d, want 1", got)
	}
	hog.Conn.Close()
	testserve.Eventually(t, "the budget to be given back", func() bool { return tb.Core.GuardStats().PreAuthHeld == 0 })
	good := tb.Dial(t)
	stomptest.Send(t, good, "/queue/after", "fine")
}

// After login, a frame trickled a byte at a time is cut once
// FrameTimeout has passed (heart-beats alone would keep it open, as
// bytes keep arriving): ERROR "frame timeout", then close. A large frame
// uploaded steadily above FrameMinRate takes far longer and is not cut,
// neither by the frame timeout nor by the heart-beat deadline: its bytes
// prove the client alive.
func TestFrameTimeout(t *testing.T) {
	t.Run("trickle", func(t *testing.T) {
		tb := stomptest.StartWith(t, core.Config{}, stomp.Config{FrameTimeout: 300 * time.Millisecond, FrameMinRate: 64 << 10})
		r := tb.Raw(t)
		r.Connect("heart-beat:0,0\n")
		stop := make(chan struct{})
		defer close(stop)
		start := time.Now()
		go trickle(r.Conn, "SEND\ndestination:/queue/slow\n\n"+strings.Repeat("z", 1000)+"\x00", 20*time.Millisecond, stop)
		f := r.Frame()
		if !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "message") != "frame timeout" {
			t.Fatalf("want ERROR frame timeout, got %q", f)
		}
		r.Closed()
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Fatalf("cut after %v, before the frame timeout", d)
		}
		if n := tb.Core.GuardStats().FrameTimeouts["stomp"]; n != 1 {
			t.Fatalf("frame timeouts counted %d, want 1", n)
		}
	})

	t.Run("steady upload", func(t *testing.T) {
		tb := stomptest.StartWith(t, core.Config{}, stomp.Config{FrameTimeout: time.Second, FrameMinRate: 64 << 10,
			HeartBeatReceive: 500 * time.Millisecond})
		good := tb.Dial(t)
		gs := stomptest.Subscribe(t, good, "/queue/slow", gostomp.AckAuto)
		r := tb.Raw(t)
		// The client sends heart-beats every 500ms (it says), so the
		// broker closes it after 1s without data.
		r.Connect("heart-beat:500,0\n")
		body := strings.Repeat("s", 512<<10)
		frame := fmt.Sprintf("SEND\ndestination:/queue/slow\nreceipt:done\ncontent-length:%d\n\n%s\x00", len(body), body)
		// 8 KiB every 50ms, about 160 KiB/s: some 3.2s in all, past the
		// 1s frame timeout and the 1s heart-beat deadline, but above the
		// minimum rate.
		start := time.Now()
		for i := 0; i < len(frame); i += 8 << 10 {
			time.Sleep(50 * time.Millisecond)
			if _, err := r.Conn.Write([]byte(frame[i:min(i+8<<10, len(frame))])); err != nil {
				t.Fatalf("upload cut after %v: %v", time.Since(start), err)
			}
		}
		if d := time.Since(start); d < 2*time.Second {
			t.Fatalf("the upload took only %v", d)
		}
		if f := r.Frame(); !strings.HasPrefix(f, "RECEIPT\n") {
			t.Fatalf("steady upload: want RECEIPT, got %q", f)
		}
		if m := stomptest.Next(t, gs); len(m.Body) != len(body) {
			t.Fatalf("delivered %d bytes", len(m.Body))
		}
	})
}

// trickle writes s to nc a byte every interval until stop is closed or
// the connection fails.
func trickle(nc net.Conn, s string, interval time.Duration, stop <-chan struct{}) {
	for i := 0; i < len(s); i++ {
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
		if _, err := nc.Write([]byte{s[i]}); err != nil {
			return
		}
	}
}
