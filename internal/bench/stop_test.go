package bench

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// silentSTOMP is a broker that accepts STOMP connections, answers CONNECT
// and SUBSCRIBE's silence, and then never answers anything: no RECEIPT,
// no MESSAGE. It stands for a broker that stopped answering.
func silentSTOMP(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() {
				br := bufio.NewReader(nc)
				if _, err := br.ReadBytes(0); err != nil { // CONNECT
					return
				}
				nc.Write([]byte("CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00"))
				buf := make([]byte, 32<<10)
				for {
					if _, err := br.Read(buf); err != nil {
						return
					}
				}
			})
		}
	})
	return l.Addr().String()
}

// TestRunStopsWhenStuck: durable sends that are never confirmed must not
// hold the run past Duration + Drain + Grace, and the result must say so
// and carry the figures.
func TestRunStopsWhenStuck(t *testing.T) {
	t.Parallel()
	addr := silentSTOMP(t)
	o := Options{URL: "stomp://" + addr, Durable: true, Duration: 500 * time.Millisecond, Drain: 500 * time.Millisecond}
	start := time.Now()
	res, err := Run(context.Background(), o)
	took := time.Since(start)
	if !errors.Is(err, ErrStuck) {
		t.Fatalf("Run: %v, want ErrStuck", err)
	}
	if res.Stopped != "deadline" || res.Protocol != "stomp" || res.Sent != 0 {
		t.Errorf("result %+v, want stopped at the deadline with nothing confirmed", res)
	}
	if limit := o.Duration + o.Drain + Grace + 2*closeTimeout + time.Second; took > limit {
		t.Errorf("Run took %v, more than %v", took, limit)
	}
}

// TestRunStopsWhenStalled: a run bounded by a count only ends when
// nothing moves for Drain + Grace.
func TestRunStopsWhenStalled(t *testing.T) {
	t.Parallel()
	addr := silentSTOMP(t)
	o := Options{URL: "stomp://" + addr, Durable: true, Count: 100, Drain: 100 * time.Millisecond}
	start := time.Now()
	res, err := Run(context.Background(), o)
	took := time.Since(start)
	if !errors.Is(err, ErrStuck) || res.Stopped != "stalled" {
		t.Fatalf("Run: %v, stopped %q; want ErrStuck, stalled", err, res.Stopped)
	}
	if limit := 2*(o.Drain+Grace) + 2*closeTimeout + time.Second; took > limit {
		t.Errorf("Run took %v, more than %v", took, limit)
	}
}

// TestRunStopsOnCancel: a signal (the context's end) stops a stuck run at
// once, with what it measured.
func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	addr := silentSTOMP(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	start := time.Now()
	res, err := Run(ctx, Options{URL: "stomp://" + addr, Durable: true, Duration: time.Minute})
	took := time.Since(start)
	if !errors.Is(err, ErrInterrupted) || res.Stopped != "interrupted" {
		t.Fatalf("Run: %v, stopped %q; want ErrInterrupted, interrupted", err, res.Stopped)
	}
	if res.SendS <= 0 || res.SendS > 10 {
		t.Errorf("send time %vs, want the half second before the cancel", res.SendS)
	}
	if limit := 500*time.Millisecond + 2*closeTimeout + time.Second; took > limit {
		t.Errorf("Run took %v after a cancel, more than %v", took, limit)
	}
}
