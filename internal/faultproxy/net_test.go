package faultproxy

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

var token atomic.Int64

// reaches reports whether bytes node from sends to node to, through n,
// arrive within wait: it dials a new connection, as a node reconnecting
// would, and writes a token no one sent before.
func reaches(t *testing.T, n *Net, servers map[uint64]*server, from, to uint64, wait time.Duration) bool {
	t.Helper()
	tok := fmt.Sprintf("<%d→%d #%d>", from, to, token.Add(1))
	c, err := net.Dial("tcp", n.Addr(from, to))
	if err != nil {
		return false
	}
	defer c.Close()
	c.Write([]byte(tok))
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if servers[to].sawBytes(tok) {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// expectLinks checks every ordered pair: cut lists the pairs that must
// not get through, all others must.
func expectLinks(t *testing.T, n *Net, servers map[uint64]*server, cut ...[2]uint64) {
	t.Helper()
	isCut := map[[2]uint64]bool{}
	for _, c := range cut {
		isCut[c] = true
	}
	// The links that pass first: they show the machinery works before
	// the quiet waits of the cut ones mean anything.
	for _, want := range []bool{true, false} {
		for from := range servers {
			for to := range servers {
				if from == to || !isCut[[2]uint64{from, to}] != want {
					continue
				}
				wait := 10 * time.Second
				if !want {
					wait = quiet
				}
				if got := reaches(t, n, servers, from, to, wait); got != want {
					t.Errorf("%d → %d: reached %v, want %v", from, to, got, want)
				}
			}
		}
	}
}

func TestNet(t *testing.T) {
	n, err := NewNet(1, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	servers := map[uint64]*server{}
	for id := uint64(1); id <= 3; id++ {
		servers[id] = startServer(t, echo)
		n.SetTarget(id, servers[id].ln.Addr().String())
	}
	if peers := n.Peers(1); len(peers) != 2 || peers[2] != n.Addr(1, 2) || peers[3] != n.Addr(1, 3) {
		t.Fatalf("Peers(1) = %v", peers)
	}
	if n.Addr(1, 2) == n.Addr(3, 2) {
		t.Fatal("two directed links share a proxy")
	}

	expectLinks(t, n, servers)
	t.Run("partition", func(t *testing.T) {
		n.Partition([]uint64{1}, []uint64{2, 3})
		expectLinks(t, n, servers, [2]uint64{1, 2}, [2]uint64{2, 1}, [2]uint64{1, 3}, [2]uint64{3, 1})
	})
	t.Run("isolate", func(t *testing.T) {
		n.Isolate(2)
		expectLinks(t, n, servers, [2]uint64{2, 1}, [2]uint64{1, 2}, [2]uint64{2, 3}, [2]uint64{3, 2})
	})
	t.Run("one way", func(t *testing.T) {
		n.Heal()
		n.OneWay(1, 3)
		expectLinks(t, n, servers, [2]uint64{1, 3})
	})
	t.Run("heal", func(t *testing.T) {
		n.Heal()
		expectLinks(t, n, servers)
	})
}
