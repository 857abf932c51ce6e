package inbound

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Members of a context are stopped when it ends, members of another are
// not, removed members are not, and a member added after the end is
// stopped at once.
func TestWatchStopsMembersOfEndedContext(t *testing.T) {
	var mu sync.Mutex
	stopped := map[int]bool{}
	done := make(chan struct{}, 10)
	w := &Watch[int]{Stop: func(m int) {
		mu.Lock()
		stopped[m] = true
		mu.Unlock()
		done <- struct{}{}
	}}
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	w.Add(ctx1, 1)
	w.Add(ctx1, 2)
	w.Add(ctx1, 3)
	w.Add(ctx2, 4)
	w.Remove(ctx1, 3)
	cancel1()
	<-done
	<-done
	w.Add(ctx1, 5)
	<-done
	mu.Lock()
	defer mu.Unlock()
	for m, want := range map[int]bool{1: true, 2: true, 3: false, 4: false, 5: true} {
		if stopped[m] != want {
			t.Errorf("member %d stopped: %v, want %v", m, stopped[m], want)
		}
	}
	w.Remove(ctx2, 4)
	if n := w.watched(); n != 0 {
		t.Errorf("%d members still watched", n)
	}
}

// Members spread over every shard are all stopped, once each, when
// their context ends, while members are added and removed concurrently;
// nothing stays watched once the last is removed.
func TestWatchManyMembersConcurrently(t *testing.T) {
	const n = 2000
	var mu sync.Mutex
	stopped := map[int]int{}
	w := &Watch[int]{Stop: func(m int) {
		mu.Lock()
		stopped[m]++
		mu.Unlock()
	}}
	ctx, cancel := context.WithCancel(context.Background())
	other, cancelOther := context.WithCancel(context.Background())
	defer cancelOther()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := g; m < n; m += 4 {
				w.Add(ctx, m)
				w.Add(other, n+m)
				if m%2 == 1 {
					w.Remove(ctx, m)
				}
			}
		}()
	}
	wg.Wait()
	var ended sync.WaitGroup
	ended.Add(1)
	context.AfterFunc(ctx, ended.Done)
	cancel()
	ended.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := len(stopped)
		mu.Unlock()
		if got == n/2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	for m := range n {
		if want := 1 - m%2; stopped[m] != want {
			t.Errorf("member %d stopped %d times, want %d", m, stopped[m], want)
		}
		if stopped[n+m] != 0 {
			t.Errorf("member %d of the other context stopped", n+m)
		}
	}
	mu.Unlock()
	for m := range n {
		w.Remove(other, n+m)
	}
	if k := w.watched(); k != 0 {
		t.Errorf("%d members still watched", k)
	}
}

// Contexts derived with values only (a listener's per-connection pprof
// labels) share their parent's entry: one AfterFunc for all, and their
// members are stopped when the parent ends.
func TestWatchSharesDerivedContexts(t *testing.T) {
	var mu sync.Mutex
	stopped := map[int]bool{}
	w := &Watch[int]{Stop: func(m int) {
		mu.Lock()
		stopped[m] = true
		mu.Unlock()
	}}
	parent, cancel := context.WithCancel(context.Background())
	for m := range 500 {
		ctx := context.WithValue(parent, struct{ k int }{m}, m)
		w.Add(ctx, m)
		if m%2 == 0 {
			w.Remove(ctx, m)
		}
	}
	entries := 0
	for i := range w.shards {
		entries += len(w.shards[i].ctxs)
	}
	if entries > watchShards {
		t.Errorf("%d entries for one parent, want at most one per shard", entries)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(stopped)
		mu.Unlock()
		if n == 250 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for m := range 500 {
		if stopped[m] != (m%2 == 1) {
			t.Errorf("member %d stopped: %v", m, stopped[m])
		}
	}
}
