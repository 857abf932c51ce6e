package ha

import (
	"fmt"
	"time"
)

// pauseGrace is the second, short wait a check gets when its deadline
// passes. A process that was stopped (SIGSTOP, a frozen VM) and resumed
// finds its deadline timer and its check due at the same instant; the
// grace lets the check, which runs as soon as the process does, decide,
// instead of a clock that ran while the process could not. A check that
// really hangs (a dead NFS server) is still reported, one grace later.
const pauseGrace = time.Second

// Monitor starts a goroutine that runs Check every interval, each within
// timeout (plus a one-second grace, see pauseGrace). The first failure,
// or a check still running at its deadline, is passed to onLost (its
// error wraps ErrLost) and ends the monitor; the Lock then writes nothing
// more, even at Release. Release stops the monitor. Call Monitor once.
func (l *Lock) Monitor(interval, timeout time.Duration, onLost func(error)) {
	l.timeout = timeout
	l.loop.Add(1)
	go func() {
		defer l.loop.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
			if err := l.checkWithin(timeout); err != nil {
				l.mu.Lock()
				l.lost = true
				l.mu.Unlock()
				onLost(err)
				return
			}
		}
	}()
}

// checkWithin runs Check on its own goroutine and waits for it at most
// timeout plus pauseGrace. A check past that is abandoned (a system call
// cannot be interrupted); Release waits for it a bounded time.
func (l *Lock) checkWithin(timeout time.Duration) error {
	res := make(chan error, 1) // the check never blocks on sending
	start := time.Now()
	l.inflight.Add(1)
	go func() {
		defer l.inflight.Done()
		res <- l.Check()
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-res:
		return err
	case <-t.C:
	}
	t.Reset(pauseGrace)
	select {
	case err := <-res:
		return err
	case <-t.C:
		return fmt.Errorf("%w: a check of the store did not finish within %v (started %v ago)",
			ErrLost, timeout, time.Since(start).Round(time.Millisecond))
	}
}
