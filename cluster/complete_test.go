package cluster

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
)

// Completions run in the order they were added, also those added while
// earlier ones run, and none is lost across stop.
func TestCompleterKeepsOrderAndLosesNothing(t *testing.T) {
	c := newCompleter()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.run(stop) }()
	var mu sync.Mutex
	var got []int
	const n = 2000
	all := make(chan struct{})
	for i := range n {
		c.add([]func(error){func(error) {
			mu.Lock()
			got = append(got, i)
			if len(got) == n {
				close(all)
			}
			mu.Unlock()
		}}, nil)
	}
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("completions did not all run")
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("completion %d ran at position %d", v, i)
		}
	}
	close(stop)
	wg.Wait()
	late := make(chan error, 1)
	c.add([]func(error){func(err error) { late <- err }}, errStopped)
	select {
	case err := <-late:
		if !errors.Is(err, errStopped) {
			t.Fatalf("late completion got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a completion added after stop never ran")
	}
}

// A request whose answer never comes is failed as unavailable after the
// request timeout (so a send is tried again), and only once.
func TestUnansweredCallsExpire(t *testing.T) {
	n := &Node{cfg: Config{RequestTimeout: 100 * time.Millisecond}}
	a := newAccess(n)
	got := make(chan error, 2)
	a.mu.Lock()
	a.pending[7] = &call{leader: 2, at: time.Now(), done: func(err error, _ string, _ []byte) { got <- err }}
	a.mu.Unlock()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.expireCalls(stop) }()
	defer func() { close(stop); wg.Wait() }()
	select {
	case err := <-got:
		if !errors.Is(err, core.ErrUnavailable) {
			t.Fatalf("expired call got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an unanswered call never expired")
	}
	a.result(7, nil, "late", nil) // the answer after all: nobody waits for it
	select {
	case err := <-got:
		t.Fatalf("completed twice (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
}
