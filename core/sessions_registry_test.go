package core

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// The registry of client sessions (Broker.sessMu) under sessions opening
// and closing on many goroutines, with client ids in contention, while
// the administrative views read it: a client id is never held twice,
// the totals count every open once, nothing is left open at the end, the
// ids are free again, and a closed broker opens nothing.
func TestSessionRegistryConcurrentOpenClose(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds, ids = 8, 200, 16
	var opened atomic.Int64
	var holders [ids]atomic.Int32
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, ps := range b.ProtocolStats() {
				if ps.Connections < 0 || uint64(ps.Connections) > ps.ConnectionsTotal {
					t.Errorf("stats %+v", ps)
				}
			}
			b.Connections()
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				id := (w*rounds + r) % ids
				s, err := b.NewSession(SessionOptions{Protocol: "stomp", ClientID: fmt.Sprintf("c%d", id), User: "u"})
				if errors.Is(err, ErrClientIDInUse) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				opened.Add(1)
				if n := holders[id].Add(1); n != 1 {
					t.Errorf("client id c%d held by %d sessions", id, n)
				}
				holders[id].Add(-1)
				s.Close()
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	ps := b.ProtocolStats()
	if len(ps) != 1 || ps[0].Connections != 0 || ps[0].ConnectionsTotal != uint64(opened.Load()) {
		t.Fatalf("stats %+v, want 0 open of %d", ps, opened.Load())
	}
	if c := b.Connections(); len(c) != 0 {
		t.Fatalf("%d connections left", len(c))
	}
	for id := range ids {
		s, err := b.NewSession(SessionOptions{Protocol: "stomp", ClientID: fmt.Sprintf("c%d", id)})
		if err != nil {
			t.Fatalf("client id c%d not free: %v", id, err)
		}
		s.Close()
	}
	b.Close()
	if _, err := b.NewSession(SessionOptions{Protocol: "stomp"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewSession after Close: %v", err)
	}
}
