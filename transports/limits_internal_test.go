package transports

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestIPTableBucket(t *testing.T) {
	s := &Server{ConnRatePerIP: 10, ConnBurstPerIP: 5}
	ip := netip.MustParseAddr("10.0.0.1")
	t0 := time.Unix(1000, 0)
	admit := func(now time.Time) RejectReason {
		st, r := s.admitIPLocked(ip, now)
		if st != nil {
			st.conns-- // as if closed at once
		}
		return r
	}
	for i := range 5 {
		if r := admit(t0); r != 0 {
			t.Fatalf("attempt %d of the burst: %v", i, r)
		}
	}
	if r := admit(t0); r != RejectRate {
		t.Fatalf("attempt past the burst: %v, want %v", r, RejectRate)
	}
	// 10 per second: a token every 100ms.
	if r := admit(t0.Add(50 * time.Millisecond)); r != RejectRate {
		t.Fatalf("after 50ms: %v, want %v", r, RejectRate)
	}
	if r := admit(t0.Add(110 * time.Millisecond)); r != 0 {
		t.Fatalf("after 110ms: %v, want admitted", r)
	}
	if r := admit(t0.Add(120 * time.Millisecond)); r != RejectRate {
		t.Fatalf("after 120ms: %v, want %v", r, RejectRate)
	}
	// Once the bucket is full again the entry is pruned on accept.
	other := netip.MustParseAddr("10.0.0.2")
	if _, r := s.admitIPLocked(other, t0.Add(time.Second)); r != 0 {
		t.Fatal(r)
	}
	if _, ok := s.ips.m[ip]; ok {
		t.Fatalf("idle entry with a full bucket not pruned: %+v", s.ips.m[ip])
	}
}

// A flood from many sources keeps the table bounded; sources beyond it
// are admitted untracked, and the table shrinks back as they go idle.
func TestIPTableBounded(t *testing.T) {
	s := &Server{ConnRatePerIP: 1, ConnBurstPerIP: 1, MaxConnsPerIP: 1, MaxTrackedIPs: 100}
	t0 := time.Unix(1000, 0)
	var held []*ipState
	for i := range 1000 {
		ip := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		st, r := s.admitIPLocked(ip, t0)
		if r != 0 {
			t.Fatalf("source %d: %v", i, r)
		}
		if st != nil {
			held = append(held, st)
		}
		if n := len(s.ips.m); n > 100 {
			t.Fatalf("table has %d entries, bound 100", n)
		}
	}
	if len(held) != 100 || s.untracked.Load() != 900 {
		t.Fatalf("%d tracked, %d untracked; want 100, 900", len(held), s.untracked.Load())
	}
	// All close; buckets refill within a second; a later accept's sweep
	// empties the table.
	for _, st := range held {
		st.conns--
	}
	later := t0.Add(2 * time.Second)
	for i := range 100 {
		ip := netip.AddrFrom4([4]byte{10, 2, 0, byte(i)})
		if st, r := s.admitIPLocked(ip, later); r != 0 || st == nil {
			t.Fatalf("new source %d after the flood: %v, tracked %v", i, r, st != nil)
		}
	}
	if n := len(s.ips.m); n != 100 {
		t.Fatalf("table has %d entries, want the 100 new sources", n)
	}
}

type addrConn struct {
	net.Conn
	addr net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.addr }

func TestSourceIP(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 1}, "2001:db8:1:2::"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 1, Zone: "eth0"}, "fe80::"},
		{&net.UnixAddr{Name: "/tmp/x", Net: "unix"}, ""},
		{nil, ""},
	} {
		ip, ok := sourceIP(addrConn{addr: tc.addr})
		if got := ""; ok {
			got = ip.String()
			if got != tc.want {
				t.Errorf("sourceIP(%v) = %s, want %s", tc.addr, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("sourceIP(%v) = none, want %s", tc.addr, tc.want)
		}
	}
}
