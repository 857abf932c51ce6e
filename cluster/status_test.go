package cluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestStatusAfterRestartOfIdleGroups: a node restarted on its data
// reports, for groups that stayed idle meanwhile (their leader sends it
// heartbeats, nothing to append), the term and commit index its log
// holds, as their leader reports them; not 0, nor a commit index below
// what it applied (seen with `junction cluster status` after a kill -9
// and restart: TERM 0 and COMMIT 0 for idle groups, applied 10).
func TestStatusAfterRestartOfIdleGroups(t *testing.T) {
	c := startCluster(t, 3, 3)
	c.waitBalanced()
	c.crash(2)
	c.waitLeaders()
	c.restart(2, false)
	c.waitBalanced()
	var last string
	deadline := time.Now().Add(10 * time.Second)
	for {
		last = ""
		mine := c.nodes[2].Status()
		for _, g := range mine.Groups {
			lead := c.nodes[g.Leader-1].Status().Groups[g.ID-1]
			if g.Term != lead.Term || g.Commit != lead.Commit || g.Commit < g.Applied {
				last += fmt.Sprintf(" group %d: term %d commit %d applied %d (its leader %d: term %d commit %d);",
					g.ID, g.Term, g.Commit, g.Applied, g.Leader, lead.Term, lead.Commit)
			}
		}
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted node's status after 10s:%s", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestJoinWithoutPeersIsRefused: a node that joins with an empty log
// and no peers could never be added (its transport refuses the
// members' links: "node 2 is not a peer", and `junction cluster add`
// times out leaving it a learner of every group), so it is refused at
// start, saying what it needs.
func TestJoinWithoutPeersIsRefused(t *testing.T) {
	c := startCluster(t, 3, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := Config{NodeID: 4, Listen: ln.Addr().String(), Listener: ln, Groups: 2, Join: true,
		Secret: testSecret, Dir: t.TempDir(), Tick: 20 * time.Millisecond, ElectionTicks: 10, Logger: testLogger(t, 4)}
	n4, err := New(cfg)
	if err == nil {
		defer n4.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		t.Fatalf("node 4 started to join without peers; adding it: %v", c.nodes[0].AddMember(ctx, 4, cfg.Listen))
	}
	if !strings.Contains(err.Error(), "Peers") {
		t.Fatalf("the refusal does not say what is missing: %v", err)
	}
	// With the members as peers, the same node joins.
	cfg.Peers = map[uint64]string{}
	for i, pc := range c.cfgs {
		cfg.Peers[uint64(i+1)] = pc.Listen
	}
	n4, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n4.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.nodes[0].AddMember(ctx, 4, cfg.Listen); err != nil {
		t.Fatal(err)
	}
}
