package transport

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

var testSecret = []byte("a cluster secret for tests, 32 b")

type key struct {
	from uint64
	lane Lane
}

// sink records the frames a node receives.
type sink struct {
	mu     sync.Mutex
	frames map[key][][]byte
	block  map[Lane]chan struct{} // a lane whose handler waits for the channel to close
}

func (s *sink) handle(from uint64, lane Lane, frame []byte) {
	s.mu.Lock()
	b := s.block[lane]
	s.mu.Unlock()
	if b != nil {
		<-b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frames == nil {
		s.frames = make(map[key][][]byte)
	}
	k := key{from, lane}
	s.frames[k] = append(s.frames[k], bytes.Clone(frame))
}

func (s *sink) get(from uint64, lane Lane) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.frames[key{from, lane}]...)
}

func (s *sink) count(from uint64, lane Lane) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.frames[key{from, lane}])
}

// logBuf collects a node's log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type testNode struct {
	*Transport
	id      uint64
	sink    *sink
	logs    *logBuf
	unreach sync.Map // peer id -> *atomic.Int64 (OnUnreachable calls)
}

func (n *testNode) unreachCount(id uint64) int64 {
	v, ok := n.unreach.Load(id)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// listen reserves a loopback port for a node about to start.
func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startNode starts node id on l with peers, after mod changes the config.
func startNode(t testing.TB, id uint64, l net.Listener, peers map[uint64]string, mod func(*Config)) *testNode {
	t.Helper()
	n := &testNode{id: id, sink: &sink{}, logs: &logBuf{}}
	cfg := Config{
		NodeID:   id,
		Listener: l,
		Peers:    peers,
		Secret:   testSecret,
		Handler:  n.sink.handle,
		OnUnreachable: func(to uint64) {
			v, _ := n.unreach.LoadOrStore(to, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		},
		Logger: zerolog.New(n.logs).Level(zerolog.DebugLevel),
	}
	if mod != nil {
		mod(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Transport = tr
	t.Cleanup(func() {
		tr.Close()
		if t.Failed() {
			t.Logf("node %d log:\n%s", id, n.logs)
		}
	})
	return n
}

// mesh starts nodes 1..n, each with all others as peers.
func mesh(t testing.TB, n int, mod func(*Config)) []*testNode {
	t.Helper()
	ls := make([]net.Listener, n)
	addrs := map[uint64]string{}
	for i := range ls {
		ls[i] = listen(t)
		addrs[uint64(i+1)] = ls[i].Addr().String()
	}
	nodes := make([]*testNode, n)
	for i := range nodes {
		id := uint64(i + 1)
		peers := map[uint64]string{}
		for p, a := range addrs {
			if p != id {
				peers[p] = a
			}
		}
		nodes[i] = startNode(t, id, ls[i], peers, mod)
	}
	return nodes
}

// waitFor polls cond every few milliseconds until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (n *testNode) lane(peer uint64, lane Lane) LaneStats {
	for _, p := range n.Stats().Peers {
		if p.ID == peer {
			return p.Lanes[lane]
		}
	}
	return LaneStats{}
}

// waitConnected waits until n's links to peer are up on every lane and
// the peer has accepted them.
func waitConnected(t testing.TB, n *testNode, peer *testNode) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("node %d connected to node %d", n.id, peer.id), func() bool {
		for l := range NumLanes {
			if !n.lane(peer.id, l).Connected || !peer.lane(n.id, l).Inbound {
				return false
			}
		}
		return true
	})
}

// ourGoroutines lists the goroutines running code of this package other
// than tests.
//
// A goroutine that has called its WaitGroup's Done is still listed until
// it returns, so, like goleak, callers retry for a moment (leftovers).
func ourGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var ours []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "cluster/transport.") && !strings.Contains(g, "cluster/transport.Test") && !strings.Contains(g, "cluster/transport.Benchmark") {
			ours = append(ours, g)
		}
	}
	return ours
}

// leftovers returns ourGoroutines once it is empty or after a second,
// for goroutines between their last deferred call and their exit.
func leftovers() []string {
	deadline := time.Now().Add(time.Second)
	for {
		g := ourGoroutines()
		if len(g) == 0 || time.Now().After(deadline) {
			return g
		}
		time.Sleep(time.Millisecond)
	}
}
