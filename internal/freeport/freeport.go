// Package freeport picks loopback TCP ports for brokers that tests start
// as processes, which must be told their addresses before they bind them
// (nodes that list each other, a backup that takes over a live broker's
// ports).
//
// A port handed out by listening on ":0" comes from the kernel's
// ephemeral range, from which it also picks the local port of every
// outgoing connection on the machine: between the test closing its
// probe listener and the broker binding the port, a client socket of
// any process may take it, and the broker fails with "address already
// in use". Ports below the ephemeral range are never handed to client
// sockets, so Addrs picks those, at random so that concurrent test
// processes seldom try the same ones.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// floor is the lowest port Addrs picks: above the well-known services
// that listen on loopback (databases, brokers' defaults such as 5672 and
// 1883 stay below it).
const floor = 20000

// Addrs returns n distinct "127.0.0.1:PORT" addresses whose ports were
// free a moment ago, below the ephemeral port range when it leaves room
// (from ":0" otherwise).
func Addrs(n int) ([]string, error) {
	high := ephemeralLow()
	if high-floor < 1000 {
		return fromKernel(n)
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]string, 0, n)
	span := high - floor
	start := rand.IntN(span)
	for i := 0; i < span && len(out) < n; i++ {
		addr := "127.0.0.1:" + strconv.Itoa(floor+(start+i)%span)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		out = append(out, addr)
	}
	if len(out) < n {
		return nil, fmt.Errorf("freeport: only %d of %d ports free in [%d, %d)", len(out), n, floor, high)
	}
	return out, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return low
}

// fromKernel is Addrs from ":0", when the ephemeral range leaves no room
// below it.
func fromKernel(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}
