package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestAddrs: the addresses are distinct, free (a listener binds each),
// and below the ephemeral range.
func TestAddrs(t *testing.T) {
	addrs, err := Addrs(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	high := ephemeralLow()
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s twice in %v", a, addrs)
		}
		seen[a] = true
		_, p, _ := net.SplitHostPort(a)
		port, _ := strconv.Atoi(p)
		if high-floor >= 1000 && (port < floor || port >= high) {
			t.Fatalf("port %d outside [%d, %d)", port, floor, high)
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s is not free: %v", a, err)
		}
		l.Close()
	}
}
