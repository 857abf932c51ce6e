package cluster

import "sync"

// completer runs the completions of a node's writes on one goroutine,
// in the order the loop hands them over, which is the order of the
// entries in each group's log. Group brokers make a durable message
// visible in its completion (core.Config.VisibleWhenStored), so this
// order is the order consumers see and the order producers are
// confirmed in; a goroutine per entry would let a later entry's
// messages overtake an earlier one's. Completions must not block (the
// journal's contract), so one goroutine serves every group.
type completer struct {
	mu      sync.Mutex
	queue   []completion
	stopped bool // after stop, completions run on goroutines of their own
	kick    chan struct{}
}

type completion struct {
	dones []func(error)
	err   error
}

func newCompleter() *completer { return &completer{kick: make(chan struct{}, 1)} }

// add queues dones to be called with err after every completion added
// before.
func (c *completer) add(dones []func(error), err error) {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		go runCompletion(completion{dones, err})
		return
	}
	c.queue = append(c.queue, completion{dones, err})
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// run calls the queued completions until stop is closed, then those
// still queued, and hands later ones to goroutines of their own.
func (c *completer) run(stop <-chan struct{}) {
	for {
		select {
		case <-c.kick:
		case <-stop:
			c.mu.Lock()
			c.stopped = true
			rest := c.queue
			c.queue = nil
			c.mu.Unlock()
			for _, cp := range rest {
				runCompletion(cp)
			}
			return
		}
		c.mu.Lock()
		batch := c.queue
		c.queue = nil
		c.mu.Unlock()
		for _, cp := range batch {
			runCompletion(cp)
		}
	}
}

func runCompletion(cp completion) {
	for _, d := range cp.dones {
		if d != nil {
			d(cp.err)
		}
	}
}
