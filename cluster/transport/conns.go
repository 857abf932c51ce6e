package transport

import (
	"net"
	"sync"
)

// connSet tracks the connections an owner (the Transport, a peer) must
// close when it stops. Closing them from the stopping goroutine, rather
// than from context.AfterFunc's, means nothing is left running once the
// owner's wait returns.
type connSet struct {
	mu     sync.Mutex
	closed bool
	m      map[net.Conn]struct{}
}

// add tracks c and, when wg is not nil, adds one to wg while holding the
// lock closeAll takes first, so a later wait covers the caller. It
// returns false, tracking nothing, once closeAll has run.
func (s *connSet) add(c net.Conn, wg *sync.WaitGroup) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = make(map[net.Conn]struct{})
	}
	s.m[c] = struct{}{}
	if wg != nil {
		wg.Add(1)
	}
	return true
}

func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

// closeAll closes every tracked connection, and every later one add is
// given.
func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	m := s.m
	s.m = nil
	s.mu.Unlock()
	for c := range m {
		c.Close()
	}
}
