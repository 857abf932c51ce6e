package inbound

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Workers runs the connections' work on goroutines that it keeps, parked,
// for a while after their work ends, and hands the next burst of any
// connection to one of them.
//
// A goroutine's stack starts small and is copied each time it doubles,
// each copy walking every frame on it: a worker started for every burst
// of data paid for every doubling up to its deepest call again. In CPU
// profiles of the durable STOMP bench (4 producers, 4 consumers, each
// with a burst or two in flight), stack copying took about 5% of a
// single broker's CPU and 7% of a cluster group leader's, whose sends
// run deeper (through the forwarding path into the group broker). A
// parked worker keeps its stack (the garbage collector halves a parked
// stack that is mostly unused, so a worker seldom used shrinks back).
// Idle connections hold no worker: the pool keeps at most
// maxIdleWorkers parked, each for at most workerIdleTime, so a broker
// whose load has passed has none left after a second.
//
// The zero value is ready to use. Its workers end by themselves; there
// is nothing to close.
type Workers struct {
	mu   sync.Mutex
	idle []*worker // parked, the longest parked first

	// For tests; zero means the constants below.
	maxIdle  int
	idleTime time.Duration
	started  atomic.Int64 // goroutines started
}

// Job is a connection's work: Work(kind) runs on a worker.
type Job interface {
	Work(kind int)
}

const (
	maxIdleWorkers = 64
	workerIdleTime = time.Second
)

type worker struct {
	p     *Workers
	jobs  chan task // buffered: a hand-over never waits
	timer *time.Timer
}

type task struct {
	j    Job
	kind int
}

// Go runs j.Work(kind) on a parked worker, or on a new goroutine if none
// is parked. It does not wait for it.
func (p *Workers) Go(j Job, kind int) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		// The most recently parked: the likeliest to have a stack
		// grown for this work, and not to have been shrunk since.
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.jobs <- task{j, kind}
		return
	}
	p.mu.Unlock()
	w := &worker{p: p, jobs: make(chan task, 1)}
	p.started.Add(1)
	go w.run(task{j, kind})
}

func (w *worker) run(t task) {
	for {
		t.j.Work(t.kind)
		t = task{} // hold nothing of the connection while parked
		if !w.p.park(w) {
			return
		}
		var ok bool
		if t, ok = w.wait(); !ok {
			return
		}
	}
}

// park puts w among the idle workers, unless enough are parked.
func (p *Workers) park(w *worker) bool {
	max := p.maxIdle
	if max == 0 {
		max = maxIdleWorkers
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= max {
		return false
	}
	p.idle = append(p.idle, w)
	return true
}

// wait waits for w's next task; false once w has been parked for the
// idle time and so leaves the pool.
func (w *worker) wait() (task, bool) {
	d := w.p.idleTime
	if d == 0 {
		d = workerIdleTime
	}
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	select {
	case t := <-w.jobs:
		w.timer.Stop()
		return t, true
	case <-w.timer.C:
	}
	if w.p.unpark(w) {
		return task{}, false
	}
	// Go took w before it could leave: its task is on its way.
	return <-w.jobs, true
}

// unpark takes w out of the idle workers, reporting whether it was there.
func (p *Workers) unpark(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.idle {
		if x == w {
			p.idle = slices.Delete(p.idle, i, i+1)
			return true
		}
	}
	return false
}
