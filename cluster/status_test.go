package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
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

// TestAddMemberPromotesOnlyACaughtUpLearner: a learner is promoted to
// voter once its log is close to the leader's, which a learner that
// never answered is not, however short the log: adding a node that is
// not there (a wrong address, a node not started) must not make it a
// voter, which would raise every group's majority to 3 of 4 with one
// of the 4 missing.
func TestAddMemberPromotesOnlyACaughtUpLearner(t *testing.T) {
	c := startCluster(t, 3, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err = c.nodes[0].AddMember(ctx, 4, nowhere)
	if !errors.Is(err, ErrMembership) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("adding a node that is not there: %v, want a membership error for the deadline", err)
	}
	if err != nil && !strings.Contains(err.Error(), "node 4 is a learner of every group but has not caught up") {
		t.Errorf("adding a node that is not there: %q does not say it was left a learner", err)
	}
	for _, g := range c.nodes[0].Status().Groups {
		if slicesContainsU(g.Voters, 4) {
			t.Errorf("group %d: node 4, which never answered, is a voter: %v", g.ID, g.Voters)
		}
	}
}

// TestForwardedCountsClientOperations: junction_cluster_forwarded_total
// counts, as documented, the operations of this node's clients sent to
// other nodes' groups (out) and those served here for other nodes
// (in): not the answers and deliveries that come back (the leader of
// a group written through another node counted every confirmation it
// sent as "out").
func TestForwardedCountsClientOperations(t *testing.T) {
	c := startCluster(t, 3, 3)
	c.waitBalanced()
	addr := ""
	for i := range 100 {
		if a := fmt.Sprintf("fw%d", i); c.leaderOf(a) == 1 {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("no address led by node 2 among 100")
	}
	s := session(t, c.access[0], "")
	before := []Status{c.nodes[0].Status(), c.nodes[1].Status()}
	const n = 100
	for i := range n {
		m := &core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Body: []byte(fmt.Sprint(i)), Priority: core.DefaultPriority}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	after := []Status{c.nodes[0].Status(), c.nodes[1].Status()}
	out1, in1 := after[0].ForwardedOut-before[0].ForwardedOut, after[0].ForwardedIn-before[0].ForwardedIn
	out2, in2 := after[1].ForwardedOut-before[1].ForwardedOut, after[1].ForwardedIn-before[1].ForwardedIn
	t.Logf("%d sends from node 1 to node 2's group: node 1 out %d in %d, node 2 out %d in %d", n, out1, in1, out2, in2)
	if out1 < n || in2 < n {
		t.Errorf("the sends forwarded: node 1 out %d, node 2 in %d; want at least %d each", out1, in2, n)
	}
	if out2 > n/4 || in1 > n/4 {
		t.Errorf("the confirmations counted as forwarded operations: node 2 out %d, node 1 in %d (sends %d)", out2, in1, n)
	}
}

// TestMembershipChangesThatChangeNothingAreRefused: removing a node
// that is no member, or adding a member again at another address, is an
// error (`junction cluster remove 9` said "node 9 removed from every
// group"; `junction cluster add 3 OTHER:PORT` said "node 3 added" and
// kept its address); adding a member again at its address is a retry
// that succeeds.
func TestMembershipChangesThatChangeNothingAreRefused(t *testing.T) {
	c := startCluster(t, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.nodes[0].RemoveMember(ctx, 9); !errors.Is(err, ErrMembership) || !strings.Contains(err.Error(), "not a member") {
		t.Errorf("removing node 9, no member: %v", err)
	}
	if err := c.nodes[0].AddMember(ctx, 3, "127.0.0.1:1"); !errors.Is(err, ErrMembership) || !strings.Contains(err.Error(), "already a member, at "+c.cfgs[2].Listen) {
		t.Errorf("adding node 3 again at another address: %v", err)
	}
	if err := c.nodes[1].AddMember(ctx, 3, c.cfgs[2].Listen); err != nil {
		t.Errorf("adding node 3 again at its address: %v", err)
	}
	for _, g := range c.nodes[0].Status().Groups {
		if !slices.Equal(g.Voters, []uint64{1, 2, 3}) || len(g.Learners) != 0 {
			t.Errorf("group %d: voters %v, learners %v", g.ID, g.Voters, g.Learners)
		}
	}
}

// TestEveryGroupQuestionWaitsOnce: a question asked of every group (an
// MQTT server's restore at start asks for the client record holders and
// the durable client ids) waits for leaderless groups together, not one
// after the other: a node started while its peers were down waited
// LeaderWait for each of 8 groups in turn, twice, before its listeners
// opened (48 s, deaf to SIGTERM meanwhile).
func TestEveryGroupQuestionWaitsOnce(t *testing.T) {
	c := startCluster(t, 3, 8)
	c.crash(1)
	c.crash(2)
	n := c.nodes[0]
	deadline := time.Now().Add(10 * time.Second)
	for {
		led := 0
		for _, g := range n.Status().Groups {
			if g.Leader != 0 {
				led++
			}
		}
		if led == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 1, alone, still knows a leader for %d groups after 10s", led)
		}
		time.Sleep(10 * time.Millisecond)
	}
	wait := n.cfg.LeaderWait
	t0 := time.Now()
	if h := n.access.ClientRecordHolders(); len(h) != 0 {
		t.Errorf("record holders %v", h)
	}
	if ids := n.access.DurableClientIDs(); len(ids) != 0 {
		t.Errorf("durable client ids %v", ids)
	}
	// Two questions of 8 leaderless groups: twice the leader wait, and
	// some slack for a busy machine; in turn it took 16 times.
	if took := time.Since(t0); took > 5*wait {
		t.Fatalf("two questions of 8 leaderless groups took %v (leader wait %v)", took, wait)
	}
}

// TestRestartWithOtherGroupsIsRefused: a node restarted on its data with
// another number of groups than the cluster's is refused: with 4 of 8
// it placed addresses in other groups than its peers (a message sent to
// /queue/se through it was never seen by a consumer of another node),
// and with more it would found the groups its log lacks on its own.
func TestRestartWithOtherGroupsIsRefused(t *testing.T) {
	c := startCluster(t, 3, 4)
	c.crash(2)
	for _, groups := range []int{2, 8} {
		cfg := c.cfgs[2]
		cfg.Groups = groups
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listener = ln
		n, err := New(cfg)
		if err == nil {
			n.Close()
			t.Fatalf("node 3 restarted with %d groups, the cluster's 4", groups)
		}
		ln.Close()
		if !strings.Contains(err.Error(), "fixed when the cluster is created") {
			t.Fatalf("with %d groups: %v", groups, err)
		}
	}
	c.restart(2, false)
	c.waitLeaders()
}

// TestSendWithoutLeaderSaysHowLongItTried: a durable send to a group
// that has no leader (the majority gone) fails once its tries are
// over, saying how long the client waited, not only the last try's
// wait (a STOMP client got "group 1 has no leader (waited 3s)" after
// 15 s).
func TestSendWithoutLeaderSaysHowLongItTried(t *testing.T) {
	c := startClusterWith(t, 3, 2, func(cfg *Config) { cfg.RequestTimeout = time.Second })
	c.crash(1)
	c.crash(2)
	s := session(t, c.access[0], "")
	t0 := time.Now()
	err := s.Send(context.Background(), &core.Message{Address: "nolead", RoutingType: core.Anycast, Durable: true, Body: []byte("x"), Priority: core.DefaultPriority})
	took := time.Since(t0)
	if !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("send without a majority: %v", err)
	}
	i := strings.Index(err.Error(), "gave up after ")
	if i < 0 {
		t.Fatalf("after %v: %v", took, err)
	}
	said, perr := time.ParseDuration(strings.Fields(err.Error()[i+len("gave up after "):])[0])
	if perr != nil || said < took-time.Second || said > took+100*time.Millisecond { // rounded to 100ms
		t.Fatalf("after %v the error says %v: %v", took, said, err)
	}
}

// TestNodeCannotRemoveItself: a removal asked of the node being removed
// (`junction cluster remove 2 --console NODE2`) is refused, changing
// nothing: once out of a group the node hears no more of it, and it
// stopped half way (removed from the first groups, the command timed
// out, the others kept it).
func TestNodeCannotRemoveItself(t *testing.T) {
	c := startCluster(t, 3, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.nodes[0].RemoveMember(ctx, 1); !errors.Is(err, ErrMembership) || !strings.Contains(err.Error(), "ask another member") {
		t.Fatalf("node 1 removing itself: %v", err)
	}
	for _, g := range c.nodes[1].Status().Groups {
		if !slices.Equal(g.Voters, []uint64{1, 2, 3}) {
			t.Errorf("group %d: voters %v", g.ID, g.Voters)
		}
	}
	// Through another member it goes.
	if err := c.nodes[1].RemoveMember(ctx, 1); err != nil {
		t.Fatal(err)
	}
}
