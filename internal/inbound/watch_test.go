package inbound

import (
	"context"
	"sync"
	"testing"
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
	if len(w.ctxs) != 0 {
		t.Errorf("%d contexts still watched", len(w.ctxs))
	}
}
