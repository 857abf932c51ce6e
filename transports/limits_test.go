package transports_test

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/junctionmq/junction/transports"
)

// dialFrom dials addr from the loopback address src (all of 127.0.0.0/8
// is loopback on Linux), so tests can have several source IPs.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from %s (needs 127.0.0.0/8 on loopback): %v", src, err)
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	t.Cleanup(func() { c.Close() })
	return c
}

func TestMaxConnsPerIP(t *testing.T) {
	limited := make(chan transports.RejectReason, 10)
	closed := make(chan struct{}, 10)
	s := &transports.Server{
		Handler:       echo,
		MaxConnsPerIP: 2,
		OnLimit:       func(c net.Conn) { _, _ = io.WriteString(c, "busy\n") },
		Events: transports.Events{
			OnClose:  func(net.Conn, time.Duration) { closed <- struct{}{} },
			OnReject: func(_ net.Conn, r transports.RejectReason) { limited <- r },
		},
	}
	addr, _ := start(t, s)

	a1, a2 := dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.2", addr)
	roundTrip(t, a1, "1")
	roundTrip(t, a2, "2")
	a3 := dialFrom(t, "127.0.0.2", addr)
	expectEOF(t, a3, "busy\n")
	if r := recv(t, limited, "OnReject"); r != transports.RejectMaxConnsPerIP {
		t.Fatalf("OnReject reason %v, want %v", r, transports.RejectMaxConnsPerIP)
	}
	// Another source is not affected.
	b := dialFrom(t, "127.0.0.3", addr)
	roundTrip(t, b, "b")
	if st := s.Stats(); st.Open != 3 || st.Rejected != 1 || st.RejectedMaxConnsPerIP != 1 || st.TrackedIPs != 2 {
		t.Fatalf("Stats = %+v, want 3 open, 1 rejected per IP, 2 tracked IPs", st)
	}

	// A closed connection frees its slot.
	a1.Close()
	recv(t, closed, "OnClose")
	a4 := dialFrom(t, "127.0.0.2", addr)
	roundTrip(t, a4, "4")
	// Without a rate limit an IP with nothing open is forgotten at once.
	b.Close()
	recv(t, closed, "OnClose")
	if st := s.Stats(); st.TrackedIPs != 1 {
		t.Fatalf("Stats = %+v, want 1 tracked IP", st)
	}
}

func TestConnRatePerIP(t *testing.T) {
	var limited atomic.Int32
	s := &transports.Server{
		Handler: echo,
		// A bucket of 3 that practically never refills during the test.
		ConnRatePerIP:  0.001,
		ConnBurstPerIP: 3,
		OnLimit:        func(c net.Conn) { t.Error("OnLimit called for a rate rejection") },
		Events: transports.Events{
			OnReject: func(_ net.Conn, r transports.RejectReason) {
				if r != transports.RejectRate {
					t.Errorf("OnReject reason %v, want %v", r, transports.RejectRate)
				}
				limited.Add(1)
			},
		},
	}
	addr, _ := start(t, s)
	for i := range 3 {
		c := dialFrom(t, "127.0.0.2", addr)
		roundTrip(t, c, "x")
		if i == 0 {
			c.Close() // closing gives no token back
		}
	}
	c := dialFrom(t, "127.0.0.2", addr)
	expectEOF(t, c, "") // closed at once, nothing said
	other := dialFrom(t, "127.0.0.3", addr)
	roundTrip(t, other, "y")
	if st := s.Stats(); st.Rejected != 1 || st.RejectedRate != 1 || st.Accepted != 5 {
		t.Fatalf("Stats = %+v, want 5 accepted, 1 rejected by rate", st)
	}
	if n := limited.Load(); n != 1 {
		t.Fatalf("OnReject called %d times, want 1", n)
	}
}
