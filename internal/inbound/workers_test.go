package inbound

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type countJob struct {
	wg    sync.WaitGroup
	n     atomic.Int64
	kinds [3]atomic.Int64
	hold  chan struct{} // if set, Work waits for it
}

func (j *countJob) Work(kind int) {
	defer j.wg.Done()
	j.n.Add(1)
	j.kinds[kind].Add(1)
	if j.hold != nil {
		<-j.hold
	}
}

// waitGoroutines waits until at most n goroutines run, or fails.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, want at most %d", runtime.NumGoroutine(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Work run one burst after another reuses one worker; a burst of
// concurrent work gets a worker each; workers leave once idle for the
// idle time, and no more than the idle limit stay parked.
func TestWorkersReuseAndLeave(t *testing.T) {
	base := runtime.NumGoroutine()
	p := &Workers{maxIdle: 4, idleTime: 100 * time.Millisecond}
	j := &countJob{}
	for i := range 1000 {
		j.wg.Add(1)
		p.Go(j, i%3)
		j.wg.Wait()
	}
	if j.n.Load() != 1000 || j.kinds[0].Load() != 334 || j.kinds[2].Load() != 333 {
		t.Fatalf("ran %d jobs, kinds %d %d %d", j.n.Load(), j.kinds[0].Load(), j.kinds[1].Load(), j.kinds[2].Load())
	}
	// A burst may come before the worker of the one before has parked
	// (the job's end is the last thing it does): it then gets a worker
	// of its own, seldom.
	if got := p.started.Load(); got > 100 {
		t.Fatalf("%d workers started for 1000 bursts one after another, want most bursts on a parked worker", got)
	}

	// 10 at once: ten workers, of which 4 stay parked.
	held := &countJob{hold: make(chan struct{})}
	held.wg.Add(10)
	for range 10 {
		p.Go(held, 1)
	}
	deadline := time.Now().Add(5 * time.Second)
	for held.n.Load() < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 10 concurrent jobs started", held.n.Load())
		}
		time.Sleep(time.Millisecond)
	}
	close(held.hold)
	held.wg.Wait()
	waitGoroutines(t, base+4)
	p.mu.Lock()
	idle := len(p.idle)
	p.mu.Unlock()
	if idle > 4 {
		t.Fatalf("%d parked workers, want at most 4", idle)
	}
	// All leave once idle.
	waitGoroutines(t, base)
}

// A worker taken from the pool just as its idle time ends still runs
// its task (run with -race).
func TestWorkersHandOverAtIdleTime(t *testing.T) {
	p := &Workers{idleTime: time.Microsecond}
	j := &countJob{}
	for i := range 2000 {
		j.wg.Add(1)
		p.Go(j, 0)
		j.wg.Wait()
		if i%100 == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	if j.n.Load() != 2000 {
		t.Fatalf("ran %d of 2000", j.n.Load())
	}
}

// deep uses about n KiB of stack.
//
//go:noinline
func deep(n int) byte {
	var pad [1000]byte
	pad[n%len(pad)] = byte(n)
	if n == 0 {
		return pad[0]
	}
	return deep(n-1) + pad[n%len(pad)]
}

type deepJob struct {
	wg  sync.WaitGroup
	out byte
}

func (j *deepJob) Work(int) {
	j.out += deep(24)
	j.wg.Done()
}

// Work 24 KiB deep, one burst after another, on a pooled worker and on
// a goroutine of its own each time (which grows its stack every time).
func BenchmarkWorkersDeepStack(b *testing.B) {
	b.Run("pool", func(b *testing.B) {
		var p Workers
		j := &deepJob{}
		for b.Loop() {
			j.wg.Add(1)
			p.Go(j, 0)
			j.wg.Wait()
		}
	})
	b.Run("go", func(b *testing.B) {
		j := &deepJob{}
		for b.Loop() {
			j.wg.Add(1)
			go j.Work(0)
			j.wg.Wait()
		}
	})
}
