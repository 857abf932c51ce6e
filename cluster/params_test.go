package cluster

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core"
)

// lockedBuf is a log sink safe for the node's goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestJoinWithOtherGroupsIsRefused: a node started with another number
// of groups than the cluster's and added with `junction cluster add` is
// refused at its links' handshakes (it would place addresses in other
// groups than its peers), both ways, each side logging it once; the add
// fails saying so, quickly, and leaves it a member of no group; the node
// knows it is out of the cluster (Status) and fails its clients'
// operations at once, saying why, instead of serving them.
func TestJoinWithOtherGroupsIsRefused(t *testing.T) {
	c := startCluster(t, 3, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peers := map[uint64]string{}
	for i, pc := range c.cfgs {
		peers[uint64(i+1)] = pc.Listen
	}
	logs4 := &lockedBuf{}
	cfg := Config{NodeID: 4, Listen: ln.Addr().String(), Listener: ln, Peers: peers, Groups: 4, Join: true,
		Secret: testSecret, Dir: t.TempDir(), Tick: 20 * time.Millisecond, ElectionTicks: 10,
		Logger: zerolog.New(logs4)}
	n4, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n4.Close()
	b4, err := core.New(core.Config{Cluster: n4.Cluster()})
	if err != nil {
		t.Fatal(err)
	}
	defer b4.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	err = c.nodes[0].AddMember(ctx, 4, cfg.Listen)
	took := time.Since(t0)
	if !errors.Is(err, ErrMembershipRefused) || !strings.Contains(err.Error(), "node 4 has 4 groups, this node 2") {
		t.Fatalf("adding a node with 4 groups to a cluster of 2 (after %v): %v", took, err)
	}
	if took > 10*time.Second {
		t.Errorf("the refusal took %v", took)
	}
	for i, n := range c.nodes {
		for _, g := range n.Status().Groups {
			if slicesContainsU(g.Voters, 4) || slicesContainsU(g.Learners, 4) {
				t.Errorf("node %d: group %d still has node 4: voters %v, learners %v", i+1, g.ID, g.Voters, g.Learners)
			}
		}
	}

	// Node 4 knows it is out: every member refused it.
	st := n4.Status()
	if !strings.Contains(st.OutOfCluster, "has 2 groups, this node 4") {
		t.Errorf("node 4's status: out of cluster %q", st.OutOfCluster)
	}
	refusedBy := map[uint64]bool{}
	for _, pc := range st.Peers {
		refusedBy[pc.Node] = pc.Refused
	}
	if !refusedBy[1] || !refusedBy[2] || !refusedBy[3] {
		t.Errorf("node 4's status: peers %+v, want 1, 2 and 3 refused", st.Peers)
	}
	s4 := session(t, b4, "")
	t1 := time.Now()
	err = s4.Send(context.Background(), &core.Message{Address: "q", RoutingType: core.Anycast, Durable: true, Body: []byte("x"), Priority: core.DefaultPriority})
	if !errors.Is(err, core.ErrUnavailable) || !strings.Contains(err.Error(), "not part of the cluster") {
		t.Errorf("a send through node 4: %v", err)
	}
	if d := time.Since(t1); d > time.Second {
		t.Errorf("the send took %v to fail (the leader wait is %v)", d, n4.cfg.LeaderWait)
	}

	// It keeps dialling its peers (who refuse it now as no peer of
	// theirs), and logged each refusal for its parameters once.
	time.Sleep(2 * time.Second)
	for _, id := range []string{`"peer":1`, `"peer":2`, `"peer":3`} {
		if k := strings.Count(grepLines(logs4.String(), "cluster peer refused"), id); k != 1 {
			t.Errorf("node 4 logged the refusal by %s %d times:\n%s", id, k, logs4)
		}
	}
	if l := grepLines(logs4.String(), "cluster peer unreachable"); strings.Contains(l, "parameters differ") {
		t.Errorf("node 4 logged refusals for its parameters as unreachable peers:\n%s", l)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRoutingConfigDifferencesAreWarnedNotRefused: nodes whose diverts,
// address settings or virtual topics differ still form a cluster (a
// rolling restart that changes them must not split it), and each says,
// in Status and once in its log, how its peers differ.
func TestRoutingConfigDifferencesAreWarnedNotRefused(t *testing.T) {
	logs := map[uint64]*lockedBuf{}
	c := startClusterWith(t, 3, 2, func(cfg *Config) {
		logs[cfg.NodeID] = &lockedBuf{}
		cfg.Logger = zerolog.New(logs[cfg.NodeID])
		if cfg.NodeID == 3 {
			cfg.Broker.Diverts = []core.Divert{{Name: "copy", Address: "orders", ForwardingAddress: "audit"}}
			cfg.Broker.VirtualTopics = true
			five := 5
			cfg.Broker.AddressSettings = []core.AddressSettings{{Match: "#", MaxDeliveryAttempts: &five}}
		}
	})
	s := session(t, c.access[0], "")
	if err := s.Send(context.Background(), &core.Message{Address: "q", RoutingType: core.Anycast, Durable: true, Body: []byte("x"), Priority: core.DefaultPriority}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{1, 2} {
		st := c.nodes[id-1].Status()
		if len(st.Peers) != 1 || st.Peers[0].Node != 3 || st.Peers[0].Refused || st.OutOfCluster != "" {
			t.Fatalf("node %d's status: %+v, out %q", id, st.Peers, st.OutOfCluster)
		}
		got := strings.Join(st.Peers[0].Problems, "\n")
		for _, want := range []string{"node 3's diverts differ", "node 3's address settings differ", "virtual topics are on on node 3, off on this node"} {
			if !strings.Contains(got, want) {
				t.Errorf("node %d's status lacks %q: %s", id, want, got)
			}
		}
		if k := logs[id].count("cluster peer's configuration differs"); k != 1 {
			t.Errorf("node %d logged the difference %d times:\n%s", id, k, logs[id])
		}
	}
	if st := c.nodes[2].Status(); len(st.Peers) != 2 || st.Peers[0].Refused || st.Peers[1].Refused {
		t.Errorf("node 3's status: %+v", st.Peers)
	}

	// A reload of node 3's diverts: its diverts are compared no more.
	c.nodes[2].SetDiverts(nil)
	for _, pc := range c.nodes[2].Status().Peers {
		if strings.Contains(strings.Join(pc.Problems, " "), "diverts") {
			t.Errorf("node 3 still compares its reloaded diverts: %+v", pc)
		}
	}
}

// TestFounderWithOtherGroupsIsRefused: of three nodes founding a
// cluster, one started with another number of groups is refused by the
// two others, which form the cluster without it and serve; it says it is
// out of the cluster and serves no client.
func TestFounderWithOtherGroupsIsRefused(t *testing.T) {
	addrs := map[uint64]string{}
	lns := map[uint64]net.Listener{}
	for id := uint64(1); id <= 3; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[id], addrs[id] = ln, ln.Addr().String()
	}
	nodes := map[uint64]*Node{}
	access := map[uint64]*core.Broker{}
	for id := uint64(1); id <= 3; id++ {
		peers := map[uint64]string{}
		for p, a := range addrs {
			if p != id {
				peers[p] = a
			}
		}
		groups := 2
		if id == 3 {
			groups = 3
		}
		n, err := New(Config{NodeID: id, Listen: addrs[id], Listener: lns[id], Peers: peers, Groups: groups,
			Secret: testSecret, Dir: t.TempDir(), Tick: 20 * time.Millisecond, ElectionTicks: 10, Logger: testLogger(t, id)})
		if err != nil {
			t.Fatal(err)
		}
		b, err := core.New(core.Config{Cluster: n.Cluster()})
		if err != nil {
			t.Fatal(err)
		}
		nodes[id], access[id] = n, b
		defer n.Close()
		defer b.Close()
	}
	deadline := time.Now().Add(15 * time.Second)
	for nodes[3].OutOfCluster() == "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if out := nodes[3].OutOfCluster(); !strings.Contains(out, "node 1 has 2 groups, this node 3") || !strings.Contains(out, "node 2 has 2 groups, this node 3") {
		t.Fatalf("node 3: out of the cluster %q", out)
	}
	for _, id := range []uint64{1, 2} {
		st := nodes[id].Status()
		if st.OutOfCluster != "" || len(st.Peers) != 1 || st.Peers[0].Node != 3 || !st.Peers[0].Refused {
			t.Errorf("node %d: out %q, peers %+v", id, st.OutOfCluster, st.Peers)
		}
	}
	// Nodes 1 and 2 serve, each group led by one of them.
	for _, id := range []uint64{1, 2} {
		s := session(t, access[id], "")
		if err := s.Send(context.Background(), &core.Message{Address: "f", RoutingType: core.Anycast, Durable: true, Body: []byte("x"), Priority: core.DefaultPriority}); err != nil {
			t.Errorf("a send through node %d: %v", id, err)
		}
	}
	s3 := session(t, access[3], "")
	err := s3.Send(context.Background(), &core.Message{Address: "f", RoutingType: core.Anycast, Durable: true, Body: []byte("x"), Priority: core.DefaultPriority})
	if !errors.Is(err, core.ErrUnavailable) || !strings.Contains(err.Error(), "not part of the cluster") {
		t.Errorf("a send through node 3: %v", err)
	}
}
