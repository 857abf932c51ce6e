package stomp_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

// A client that never finishes its CONNECT frame, silent or sending a
// byte at a time, gets an ERROR and is closed once ConnectTimeout has
// passed; the deadline is absolute, so dribbling does not extend it.
func TestConnectTimeout(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{ConnectTimeout: 200 * time.Millisecond})
	good := tb.Dial(t)
	gs := stomptest.Subscribe(t, good, "/queue/good", gostomp.AckAuto)
	for _, name := range []string{"silent", "dribbling", "heart-beats only"} {
		t.Run(name, func(t *testing.T) {
			// Before dialing: the broker's clock starts at accept, which
			// can come before the dial returns here.
			start := time.Now()
			r := tb.Raw(t)
			stop := make(chan struct{})
			defer close(stop)
			if name != "silent" {
				go func() {
					partial := "CONNECT\naccept-version:1.2\n"
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						case <-time.After(20 * time.Millisecond):
						}
						b := "\n"
						if name == "dribbling" {
							if i >= len(partial) {
								continue // all but the blank line and NUL
							}
							b = partial[i : i+1]
						}
						if _, err := r.Conn.Write([]byte(b)); err != nil {
							return
						}
					}
				}()
			}
			f := r.Frame()
			if !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "message") != "connect timeout" {
				t.Fatalf("want ERROR connect timeout, got %q", f)
			}
			r.Closed()
			if d := time.Since(start); d < 200*time.Millisecond {
				t.Fatalf("closed after %v, before the timeout", d)
			}
			stomptest.Send(t, good, "/queue/good", name)
			if m := stomptest.Next(t, gs); string(m.Body) != name {
				t.Fatalf("good client got %q", m.Body)
			}
		})
	}
}

func TestMaxSubscriptions(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{MaxSubscriptions: 3})
	r := tb.Raw(t)
	r.Connect("")
	for i := range 3 {
		r.Write(fmt.Sprintf("SUBSCRIBE\nid:%d\ndestination:/queue/s%d\n\n\x00", i, i))
	}
	// Unsubscribing frees a slot.
	r.Write("UNSUBSCRIBE\nid:0\n\n\x00")
	r.Write("SUBSCRIBE\nid:3\ndestination:/queue/s3\nreceipt:r3\n\n\x00")
	if f := r.Frame(); !strings.HasPrefix(f, "RECEIPT\n") || stomptest.Header(f, "receipt-id") != "r3" {
		t.Fatalf("want RECEIPT r3, got %q", f)
	}
	r.Write("SUBSCRIBE\nid:4\ndestination:/queue/s4\nreceipt:r4\n\n\x00")
	f := r.Frame()
	if !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "message") != "too many subscriptions" || stomptest.Header(f, "receipt-id") != "r4" {
		t.Fatalf("want ERROR too many subscriptions, got %q", f)
	}
	r.Closed()

	// Another connection has its own count.
	c := tb.Dial(t)
	for i := range 3 {
		stomptest.Subscribe(t, c, fmt.Sprintf("/queue/o%d", i), gostomp.AckAuto)
	}
}
