package transports

import (
	"net"
	"net/netip"
	"time"
)

// RejectReason says why a [Server] turned a connection away.
type RejectReason uint8

const (
	// RejectMaxConns: the Server served MaxConns connections already.
	RejectMaxConns RejectReason = iota + 1
	// RejectMaxConnsPerIP: the source IP had MaxConnsPerIP connections
	// open already.
	RejectMaxConnsPerIP
	// RejectRate: the source IP opened connections faster than
	// ConnRatePerIP allows.
	RejectRate
)

func (r RejectReason) String() string {
	switch r {
	case RejectMaxConns:
		return "max-connections"
	case RejectMaxConnsPerIP:
		return "max-connections-per-ip"
	case RejectRate:
		return "connection-rate-per-ip"
	}
	return "unknown"
}

const (
	// DefaultMaxTrackedIPs is the size of the per-IP table when
	// Server.MaxTrackedIPs is zero.
	DefaultMaxTrackedIPs = 65536

	// pruneProbe is how many entries of the per-IP table each accept
	// looks at for pruning, so the table shrinks as fast as it can grow
	// without a goroutine of its own.
	pruneProbe = 4

	// minSweepInterval spaces full sweeps of a full table, so that a
	// table full of active sources does not make every accept O(n).
	minSweepInterval = time.Second
)

// ipState is what a Server remembers about one source IP. Guarded by
// Server.mu.
type ipState struct {
	ip     netip.Addr
	conns  int       // connections open now (served or being rejected by OnLimit)
	tokens float64   // the rate bucket's tokens as of last
	last   time.Time // when tokens was computed
}

// ipTable tracks, per source IP, the connections open and a token
// bucket of connection attempts. It has no goroutine: entries are pruned
// as connections close and on accept, and its size is bounded. Guarded
// by Server.mu.
type ipTable struct {
	m         map[netip.Addr]*ipState
	lastSweep time.Time
}

// sourceIP returns the source that c's per-IP limits count against: its
// IP address, IPv4-mapped IPv6 as IPv4, and other IPv6 addresses by
// their /64 prefix (one host or LAN; a client usually holds a whole /64
// and could otherwise pick a fresh address per connection). It returns
// false for a conn that has no IP address (a pipe, a Unix socket).
func sourceIP(c net.Conn) (netip.Addr, bool) {
	var ip netip.Addr
	switch a := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		ip = a.AddrPort().Addr()
	case nil:
		return netip.Addr{}, false
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Addr{}, false
		}
		ip = ap.Addr()
	}
	if !ip.IsValid() {
		return netip.Addr{}, false
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		ip = netip.PrefixFrom(ip, 64).Masked().Addr()
	}
	return ip, true
}

// perIPLimited reports whether any per-IP limit is configured.
func (s *Server) perIPLimited() bool {
	return s.MaxConnsPerIP > 0 || s.ConnRatePerIP > 0
}

// burst is the rate bucket's capacity.
func (s *Server) burst() float64 {
	if s.ConnBurstPerIP > 0 {
		return float64(s.ConnBurstPerIP)
	}
	return max(1, s.ConnRatePerIP)
}

// idleLocked reports whether st says nothing a fresh entry would not:
// no connection open, and a bucket refilled by now.
func (s *Server) idleLocked(st *ipState, now time.Time) bool {
	if st.conns > 0 {
		return false
	}
	if s.ConnRatePerIP <= 0 {
		return true
	}
	return st.tokens+now.Sub(st.last).Seconds()*s.ConnRatePerIP >= s.burst()
}

// admitIPLocked applies the per-IP limits to a connection from ip and,
// when it is admitted, counts it as open. It returns 0 to admit, or why
// not. A source the full table has no room for is admitted untracked:
// per-IP limits then give way to MaxConns, rather than shutting every
// new source out.
func (s *Server) admitIPLocked(ip netip.Addr, now time.Time) (*ipState, RejectReason) {
	t := &s.ips
	if t.m == nil {
		t.m = make(map[netip.Addr]*ipState)
	}
	s.pruneLocked(now)
	st := t.m[ip]
	if st == nil {
		limit := s.MaxTrackedIPs
		if limit <= 0 {
			limit = DefaultMaxTrackedIPs
		}
		if len(t.m) >= limit && now.Sub(t.lastSweep) >= minSweepInterval {
			t.lastSweep = now
			for k, v := range t.m {
				if s.idleLocked(v, now) {
					delete(t.m, k)
				}
			}
		}
		if len(t.m) >= limit {
			s.untracked.Add(1)
			return nil, 0
		}
		st = &ipState{ip: ip, tokens: s.burst(), last: now}
		t.m[ip] = st
	}
	if s.ConnRatePerIP > 0 {
		st.tokens = min(s.burst(), st.tokens+now.Sub(st.last).Seconds()*s.ConnRatePerIP)
		st.last = now
		if st.tokens < 1 {
			return nil, RejectRate
		}
		st.tokens--
	}
	if s.MaxConnsPerIP > 0 && st.conns >= s.MaxConnsPerIP {
		return nil, RejectMaxConnsPerIP
	}
	st.conns++
	return st, 0
}

// pruneLocked forgets a few idle entries. Go starts each range at a
// random entry, so repeated calls look all over the table.
func (s *Server) pruneLocked(now time.Time) {
	n := 0
	for k, v := range s.ips.m {
		if s.idleLocked(v, now) {
			delete(s.ips.m, k)
		}
		if n++; n == pruneProbe {
			return
		}
	}
}

// releaseIPLocked counts one connection of tc's source as closed.
func (s *Server) releaseIPLocked(tc *trackedConn) {
	st := tc.ip
	if st == nil {
		return
	}
	tc.ip = nil
	st.conns--
	if st.conns == 0 && s.ConnRatePerIP <= 0 {
		// Nothing left to remember. With a rate, the entry stays until
		// its bucket is full again (pruneLocked).
		delete(s.ips.m, st.ip)
	}
}

// Limits are the connection limits of a Server that SetLimits changes
// while it serves (the fields of the same names).
type Limits struct {
	MaxConns       int
	MaxConnsPerIP  int
	ConnRatePerIP  float64
	ConnBurstPerIP int
}

// SetLimits changes the Server's connection limits while it serves; the
// connections open stay, and the new limits apply from the next one
// accepted. Sources that were not tracked (no per-IP limit was set) are
// counted from their next connection.
func (s *Server) SetLimits(l Limits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.MaxConns, s.MaxConnsPerIP, s.ConnRatePerIP, s.ConnBurstPerIP = l.MaxConns, l.MaxConnsPerIP, l.ConnRatePerIP, l.ConnBurstPerIP
}
