package clustertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/internal/ledger"
	"github.com/junctionmq/junction/internal/netns"
	"github.com/junctionmq/junction/internal/stompclient"
)

func TestMain(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// rounds is JUNCTION_CLUSTER_ROUNDS; without it the long scenarios skip.
func rounds(t *testing.T) int {
	s := os.Getenv("JUNCTION_CLUSTER_ROUNDS")
	if s == "" {
		t.Skip("a long cluster scenario: set JUNCTION_CLUSTER_ROUNDS=N (make cluster-test ROUNDS=N) to run it")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("JUNCTION_CLUSTER_ROUNDS=%q", s)
	}
	return n
}

// home is the first node of the MQTT subscriber, a persistent session
// (replicated in the group its client id hashes to, docs/cluster.md).
// Even rounds (round 0, which CI runs) aim the fault at home when it
// leads a group, so that the subscriber fails over to another node and
// must find its session there; odd rounds aim elsewhere.
const home = 1

// aim is where a scenario's fault goes.
type aim struct {
	leaders map[uint64]uint64
	home    bool // aim at home (even rounds)
}

// target picks the group the scenario aims at and its leader: one led
// by home when aiming there and home leads one, else one led by another
// node (runScenario makes sure there is one).
func (a aim) target() (g, leader uint64) {
	for _, want := range []bool{a.home, false} {
		for g := uint64(1); g <= Groups; g++ {
			if (a.leaders[g] == home) == want {
				return g, a.leaders[g]
			}
		}
	}
	panic("every group is led by home")
}

// bystander returns a node other than l: home when aiming at it (and l
// is not home), else the node that is neither home nor l (or, when l is
// home, the lower of the two others).
func (a aim) bystander(l uint64) uint64 {
	if a.home && l != home {
		return home
	}
	if l == home {
		return third(home, home%3+1)
	}
	return third(home, l)
}

// spread waits until a node other than home leads a group (the cluster
// hands each group to its preferred node once it has caught up), and
// returns the leaders.
func spread(t *testing.T, c *Cluster) map[uint64]uint64 {
	deadline := time.Now().Add(30 * time.Second)
	for {
		leaders := c.WaitHealthy(30 * time.Second)
		for _, l := range leaders {
			if l != home {
				return leaders
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d still leads every group after 30s: %v", home, leaders)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// third returns the node that is neither a nor b.
func third(a, b uint64) uint64 {
	for id := uint64(1); id <= 3; id++ {
		if id != a && id != b {
			return id
		}
	}
	return 0
}

type scenario func(t *testing.T, c *Cluster, r *Run, a aim)

// runScenario runs body under load on a fresh cluster, once per round.
func runScenario(t *testing.T, newNet func(testing.TB) Network, body scenario) {
	n := rounds(t)
	for round := range n {
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			c := Start(t, newNet(t))
			r := StartLoad(c, round, home)
			time.Sleep(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
			leaders := spread(t, c)
			a := aim{leaders: leaders, home: round%2 == 0}
			c.Event("leaders %v; aiming at the MQTT subscriber's node %d: %v", leaders, home, a.home)
			body(t, c, r, a)
			counts := r.Finish()
			c.Event("round %d: %v", round, counts)
		})
	}
}

func proxyNet(t testing.TB) Network { return NewProxyNet(t, 3) }
func netnsNet(t testing.TB) Network { return NewNetnsNet(t, 3) }

// progress waits for n confirmations of every protocol since the last
// Mark, failing the test (but going on to the checks) if they do not
// come within 45 s.
func progress(t *testing.T, c *Cluster, r *Run, n int, what string) {
	t.Helper()
	if !r.Progress(n, 45*time.Second) {
		t.Errorf("%s: not every protocol had %d confirmations within 45s: %v\n%s", what, n, r.Ledger.After(), c.LogExcerpts())
	}
}

// faultTime is how long a fault lasts at least: several election
// timeouts (1 s, randomised up to 2 s).
const faultTime = 6 * time.Second

// hold sleeps until faultTime has passed since the fault at.
func hold(c *Cluster, at time.Time) {
	if d := faultTime - time.Since(at); d > 0 {
		time.Sleep(d)
	}
	c.Event("the fault lasted %v", time.Since(at).Round(time.Millisecond))
}

// healed waits for the whole cluster to be well again and for load
// through every node.
func healed(t *testing.T, c *Cluster, r *Run) {
	t.Helper()
	c.WaitHealthy(60 * time.Second)
	r.Mark(func(uint64) bool { return true })
	progress(t, c, r, 10, "after healing")
}

// failedOver waits until a node other than old serves group g, and logs
// how long it took since from, and the first confirmation of a message
// of the group's queue since from.
func failedOver(t *testing.T, c *Cluster, r *Run, g, old uint64, from time.Time) {
	t.Helper()
	var by uint64
	if !ledger.WaitUntil(20*time.Second, func() bool {
		var ok bool
		by, ok = c.watch.ServedElsewhere(g, old)
		return ok
	}) {
		t.Errorf("no node but %d served group %d within 20s of the fault\n%s", old, g, c.LogExcerpts())
		return
	}
	elected := time.Since(from)
	q := r.Queues[g-1]
	ledger.WaitUntil(30*time.Second, func() bool { return !r.firstOf(q, from).IsZero() })
	first := r.firstOf(q, from)
	took := "none within 30s"
	if !first.IsZero() {
		took = first.Sub(from).Round(time.Millisecond).String()
	}
	c.Event("failover of group %d: node %d serves it %v after the fault; first confirmation of a send to %s made since the fault %s after", g, by, elected.Round(time.Millisecond), q, took)
}

// firstOf is the first confirmation since from of a message sent to
// queue q (producer ids encode the queue: round*100 + index*10 + k).
func (r *Run) firstOf(q string, from time.Time) time.Time {
	qi := -1
	for i, name := range r.Queues {
		if name == q {
			qi = i
		}
	}
	return r.Ledger.FirstConfirmedSince(from, func(key string) bool {
		_, rest, _ := strings.Cut(key, ":")
		p, _, _ := strings.Cut(rest, "-")
		id, err := strconv.Atoi(p)
		return err == nil && id%100 < 90 && (id%100)/10 == qi
	})
}

// TestClusterSmoke runs the load on a healthy cluster for a moment and
// checks it: the short form that plain `go test` runs.
func TestClusterSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three broker processes")
	}
	c := Start(t, proxyNet(t))
	r := StartLoad(c, 0, home)
	r.Mark(func(uint64) bool { return true })
	progress(t, c, r, 20, "healthy cluster")
	r.Finish()
}

// (a) kill -9 the node leading a group; its clients fail over; it comes
// back with its data.
func kill9Leader(t *testing.T, c *Cluster, r *Run, a aim) {
	g, l := a.target()
	r.Mark(func(n uint64) bool { return n != l })
	at := time.Now()
	c.Nodes[l].Kill9()
	failedOver(t, c, r, g, l, at)
	progress(t, c, r, 20, "after kill -9 of the leader")
	hold(c, at)
	c.Nodes[l].Start(false)
	healed(t, c, r)
}

func TestClusterKill9Leader(t *testing.T)      { runScenario(t, proxyNet, kill9Leader) }
func TestClusterNetnsKill9Leader(t *testing.T) { runScenario(t, netnsNet, kill9Leader) }

// (b) cut the leader of a group off from the majority (both ways): the
// majority elects another; the old one steps down (CheckQuorum).
func partitionLeader(t *testing.T, c *Cluster, r *Run, a aim) {
	g, l := a.target()
	r.Mark(func(n uint64) bool { return n != l })
	c.Event("isolating node %d, leader of group %d", l, g)
	if err := c.Net.Isolate(l); err != nil {
		t.Fatal(err)
	}
	at := time.Now() // the packet filters of namespaces take a while to apply
	failedOver(t, c, r, g, l, at)
	if _, ok := c.Net.(*ProxyNet); ok { // in namespaces the console of the cut node is cut off too
		if !ledger.WaitUntil(15*time.Second, func() bool { return !c.watch.Serving(l, g) }) {
			t.Errorf("node %d, cut off from the majority, still serves group %d 15s later", l, g)
		}
	}
	progress(t, c, r, 20, "with the leader cut off")
	hold(c, at)
	c.Event("healing")
	if err := c.Net.Heal(); err != nil {
		t.Fatal(err)
	}
	healed(t, c, r)
}

func TestClusterPartitionLeader(t *testing.T)      { runScenario(t, proxyNet, partitionLeader) }
func TestClusterNetnsPartitionLeader(t *testing.T) { runScenario(t, netnsNet, partitionLeader) }

// (c) cut off a minority: a follower of the target group (home, when
// aiming at it).
func partitionMinority(t *testing.T, c *Cluster, r *Run, a aim) {
	g, l := a.target()
	f := a.bystander(l)
	r.Mark(func(n uint64) bool { return n != f })
	at := time.Now()
	c.Event("isolating node %d, a follower of group %d (led by %d)", f, g, l)
	if err := c.Net.Isolate(f); err != nil {
		t.Fatal(err)
	}
	progress(t, c, r, 20, "with a follower cut off")
	hold(c, at)
	c.Event("healing")
	if err := c.Net.Heal(); err != nil {
		t.Fatal(err)
	}
	healed(t, c, r)
}

func TestClusterPartitionMinority(t *testing.T)      { runScenario(t, proxyNet, partitionMinority) }
func TestClusterNetnsPartitionMinority(t *testing.T) { runScenario(t, netnsNet, partitionMinority) }

// One-way: the leader of a group can no longer reach the others on the
// connections it dials; they still reach it.
func oneWay(t *testing.T, c *Cluster, r *Run, a aim) {
	g, l := a.target()
	r.Mark(func(n uint64) bool { return n != l })
	for id := range c.Nodes {
		if id != l {
			c.Event("cutting %d → %d one way", l, id)
			if err := c.Net.OneWay(l, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	at := time.Now()
	failedOver(t, c, r, g, l, at)
	progress(t, c, r, 20, "with the leader's links cut one way")
	hold(c, at)
	c.Event("healing")
	if err := c.Net.Heal(); err != nil {
		t.Fatal(err)
	}
	healed(t, c, r)
}

func TestClusterOneWay(t *testing.T)      { runScenario(t, proxyNet, oneWay) }
func TestClusterNetnsOneWay(t *testing.T) { runScenario(t, netnsNet, oneWay) }

// (d) SIGSTOP the leader of a group for four election timeouts, then
// SIGCONT: the others elect a new leader meanwhile; the old one must
// not accept writes in the term it had.
func sigstopLeader(t *testing.T, c *Cluster, r *Run, a aim) {
	g, l := a.target()
	r.Mark(func(n uint64) bool { return n != l })
	at := time.Now()
	c.Nodes[l].Stop()
	failedOver(t, c, r, g, l, at)
	if d := 4*time.Second - time.Since(at); d > 0 {
		time.Sleep(d)
	}
	c.Nodes[l].Cont()
	progress(t, c, r, 20, "after SIGSTOP and SIGCONT of the leader")
	healed(t, c, r)
}

func TestClusterSigstopLeader(t *testing.T)      { runScenario(t, proxyNet, sigstopLeader) }
func TestClusterNetnsSigstopLeader(t *testing.T) { runScenario(t, netnsNet, sigstopLeader) }

// (e) kill -9 the leader of a group, wipe its data directory, restart it
// with --cluster-join: it catches up; then kill another node, so that
// the wiped one is half of the majority, and go on.
func wipedRejoins(t *testing.T, c *Cluster, r *Run, a aim) {
	g, w := a.target()
	r.Mark(func(n uint64) bool { return n != w })
	at := time.Now()
	c.Nodes[w].Kill9()
	c.Nodes[w].Wipe()
	failedOver(t, c, r, g, w, at)
	progress(t, c, r, 20, "with a node killed and wiped")
	hold(c, at)
	c.Nodes[w].Start(true)
	c.WaitHealthy(60 * time.Second)
	caughtUp(t, c, w, 60*time.Second)
	r.Mark(func(uint64) bool { return true })
	progress(t, c, r, 10, "after the wiped node rejoined")
	// The rejoined node must now hold what it missed: with another node
	// gone, it is half of every group's majority.
	x := a.bystander(w)
	r.Mark(func(n uint64) bool { return n != x })
	at = time.Now()
	c.Nodes[x].Kill9()
	c.WaitHealthy(30 * time.Second)
	progress(t, c, r, 20, "with the rejoined node in the majority")
	hold(c, at)
	c.Nodes[x].Start(false)
	healed(t, c, r)
}

// caughtUp waits until node id has applied, in every group, what the
// others had committed when it was called.
func caughtUp(t *testing.T, c *Cluster, id uint64, d time.Duration) {
	t.Helper()
	want := map[uint64]uint64{}
	for other, n := range c.Nodes {
		if other == id || !n.Running() {
			continue
		}
		s, err := c.Status(other)
		if err != nil {
			continue
		}
		for _, g := range s.Groups {
			want[g.ID] = max(want[g.ID], g.Commit)
		}
	}
	start := time.Now()
	if !ledger.WaitUntil(d, func() bool {
		s, err := c.Status(id)
		if err != nil {
			return false
		}
		for _, g := range s.Groups {
			if g.Applied < want[g.ID] {
				return false
			}
		}
		return true
	}) {
		s, _ := c.Status(id)
		t.Fatalf("node %d did not catch up within %v: want commit %v, has %+v\n%s", id, d, want, s.Groups, c.LogExcerpts())
	}
	c.Event("node %d caught up (commit %v) in %v", id, want, time.Since(start).Round(time.Millisecond))
}

func TestClusterWipedNodeRejoins(t *testing.T)      { runScenario(t, proxyNet, wipedRejoins) }
func TestClusterNetnsWipedNodeRejoins(t *testing.T) { runScenario(t, netnsNet, wipedRejoins) }

// linkDelay is the delay of the delay scenario: a fifth of the election
// timeout each way.
const linkDelay = 200 * time.Millisecond

// Delay: every link of the leader of a group slowed by linkDelay, under
// load, for faultTime: confirmations slow down (a commit needs a round
// trip to a follower) but go on, nothing confirmed is lost or invented,
// and every duplicate is flagged.
func delayLeader(t *testing.T, c *Cluster, r *Run, a aim) {
	g, l := a.target()
	probe := queueIn(g, "ct.probe")
	c.CreateQueue(probe) // no consumer: the probes stay there
	before := probeSend(t, c, l, probe)
	r.Mark(func(uint64) bool { return true })
	at := time.Now()
	c.Event("delaying the links of node %d, leader of group %d, by %v", l, g, linkDelay)
	if err := c.Net.Delay(l, linkDelay); err != nil {
		t.Fatal(err)
	}
	// A send through the leader is confirmed once a follower has
	// answered: at least one delayed hop.
	if took := probeSend(t, c, l, probe); took < linkDelay {
		t.Errorf("a confirmed send to %s through node %d took %v with its links delayed by %v (%v before)", probe, l, took, linkDelay, before)
	} else {
		c.Event("a confirmed send through node %d took %v delayed, %v before", l, took, before)
	}
	progress(t, c, r, 20, "with the leader's links delayed")
	hold(c, at)
	c.Event("healing")
	if err := c.Net.Heal(); err != nil {
		t.Fatal(err)
	}
	healed(t, c, r)
}

// queueIn returns the first name prefix0, prefix1, ... in group g.
func queueIn(g uint64, prefix string) string {
	for i := 0; ; i++ {
		if name := fmt.Sprintf("%s%d", prefix, i); GroupOf(name) == g {
			return name
		}
	}
}

// probeSend sends one durable message to queue through node id with a
// STOMP receipt, and returns how long the receipt took.
func probeSend(t *testing.T, c *Cluster, id uint64, queue string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := c.Net.Dial(ctx, c.Nodes[id].Addrs.STOMP)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	sc, err := gostomp.Connect(nc, gostomp.ConnOpt.HeartBeat(0, 0), gostomp.ConnOpt.Host("/"), stompclient.Quiet)
	if err != nil {
		t.Fatalf("probe: STOMP connect to node %d: %v", id, err)
	}
	start := time.Now()
	if err := sc.Send("/queue/"+queue, "text/plain", []byte("probe"), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true")); err != nil {
		t.Fatalf("probe: send through node %d: %v", id, err)
	}
	took := time.Since(start)
	sc.Disconnect()
	return took
}

func TestClusterDelay(t *testing.T) { runScenario(t, proxyNet, delayLeader) }

// TestClusterNetnsDelay skips where the kernel has no netem.
func TestClusterNetnsDelay(t *testing.T) {
	runScenario(t, func(t testing.TB) Network {
		n := NewNetnsNet(t, 3)
		if err := n.Delay(1, time.Millisecond); errors.Is(err, netns.ErrNoNetem) {
			t.Skip(err)
		} else if err != nil {
			t.Fatal(err)
		}
		if err := n.Heal(); err != nil {
			t.Fatal(err)
		}
		return n
	}, delayLeader)
}
