package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core"
)

// testCluster is n nodes in one process, on loopback, each with an
// access broker.
type testCluster struct {
	t      *testing.T
	nodes  []*Node
	access []*core.Broker
	cfgs   []Config
}

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func startCluster(t *testing.T, size, groups int) *testCluster {
	t.Helper()
	return startClusterWith(t, size, groups, nil)
}

func startClusterWith(t *testing.T, size, groups int, tweak func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	lns := make([]net.Listener, size)
	addrs := map[uint64]string{}
	for i := range size {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		addrs[uint64(i+1)] = ln.Addr().String()
	}
	for i := range size {
		id := uint64(i + 1)
		peers := map[uint64]string{}
		for p, a := range addrs {
			if p != id {
				peers[p] = a
			}
		}
		cfg := Config{
			NodeID: id, Listen: addrs[id], Listener: lns[i], Peers: peers, Groups: groups,
			Secret: testSecret, Dir: t.TempDir(), Tick: 20 * time.Millisecond, ElectionTicks: 10,
			Logger: testLogger(t, id),
		}
		if tweak != nil {
			tweak(&cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
		n, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := core.New(accessConfig(n, cfg))
		if err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
		c.access = append(c.access, b)
	}
	t.Cleanup(c.close)
	c.waitLeaders()
	return c
}

// accessConfig is the configuration of node n's access broker, from
// what its groups' brokers take, as cmd's is.
func accessConfig(n *Node, cfg Config) core.Config {
	return core.Config{Cluster: n.Cluster(), Events: cfg.Broker.Events, Diverts: cfg.Broker.Diverts, VirtualTopics: cfg.Broker.VirtualTopics,
		AddressSettings: cfg.Broker.AddressSettings}
}

func testLogger(t *testing.T, id uint64) zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel).With().Uint64("n", id).Logger()
	}
	return zerolog.Nop()
}

func (c *testCluster) close() {
	for i, n := range c.nodes {
		if n != nil {
			c.access[i].Close()
			n.Close()
		}
	}
}

// waitLeaders waits until every group has an active leader that every
// live node knows.
func (c *testCluster) waitLeaders() {
	c.t.Helper()
	c.waitGroups("groups without an active leader", func(g *group) uint64 { return g.lead.Load() })
}

// waitBalanced waits until every group is led, actively, by its
// preferred node (balanceLeaders) as every live node sees it, so that no
// leader change is due.
func (c *testCluster) waitBalanced() {
	c.t.Helper()
	c.waitGroups("groups not led by their preferred nodes", func(g *group) uint64 {
		if pref := (g.id-1)%uint64(len(c.nodes)) + 1; g.lead.Load() == pref {
			return pref
		}
		return 0
	})
}

// waitGroups waits, up to 15 s, until leader(g) names, for each group of
// each live node, a live node whose group broker is active.
func (c *testCluster) waitGroups(what string, leader func(*group) uint64) {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok := true
		for _, n := range c.nodes {
			if n == nil {
				continue
			}
			for _, g := range n.groups {
				lead := leader(g)
				if lead == 0 || c.nodes[lead-1] == nil || !c.nodes[lead-1].groups[g.id-1].isActive.Load() {
					ok = false
				}
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s after 15s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type col struct{ ch chan core.Delivery }

func (c *col) next(t *testing.T) core.Delivery {
	t.Helper()
	select {
	case d := <-c.ch:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10s")
	}
	return core.Delivery{}
}

func subscribe(t *testing.T, s *core.Session, o core.ConsumerOptions) (*core.Consumer, *col) {
	t.Helper()
	c := &col{ch: make(chan core.Delivery, 10000)}
	o.Handler = func(d core.Delivery) { c.ch <- d }
	cons, err := s.Subscribe(o)
	if err != nil {
		t.Fatal(err)
	}
	return cons, c
}

func session(t *testing.T, b *core.Broker, clientID string) *core.Session {
	t.Helper()
	s, err := b.NewSession(core.SessionOptions{ClientID: clientID, Protocol: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestClusterSendConsumeAcrossNodes(t *testing.T) {
	c := startCluster(t, 3, 4)
	prod := session(t, c.access[0], "")
	// Queues spread over the groups: every node forwards some sends.
	const queues, per = 6, 20
	for q := range queues {
		for i := range per {
			m := &core.Message{Address: fmt.Sprintf("q%d", q), RoutingType: core.Anycast, Durable: true, Body: []byte(fmt.Sprint(i)), Priority: core.DefaultPriority}
			if err := prod.Send(context.Background(), m); err != nil {
				t.Fatalf("send %d to q%d: %v", i, q, err)
			}
		}
	}
	cons := session(t, c.access[1], "")
	for q := range queues {
		cn, col := subscribe(t, cons, core.ConsumerOptions{Address: fmt.Sprintf("q%d", q), RoutingType: core.Anycast, Credit: 5})
		for i := range per {
			d := col.next(t)
			if got := string(d.Message.Body); got != fmt.Sprint(i) {
				t.Fatalf("q%d: got %q, want %d (order)", q, got, i)
			}
			if err := cn.Ack(d.ID); err != nil {
				t.Fatal(err)
			}
			cn.Flow(1)
		}
		cn.Close()
	}
	// Every node's copy of every group empties.
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		for _, n := range c.nodes {
			for _, g := range n.groups {
				msgs, _, _ := g.state.stats()
				left += msgs
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d message records left in the groups' states", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// crash stops node i the way a killed process stops: no goodbye to
// anyone, group brokers dropped where they stand.
func (c *testCluster) crash(i int) {
	n := c.nodes[i]
	c.nodes[i] = nil
	n.once.Do(func() {
		close(n.stop)
		n.tr.Close()
		n.wg.Wait()
		for _, g := range n.groups {
			g.stopAccepting()
			g.failInflight()
		}
		n.rlog.Close()
	})
	c.access[i].Close()
}

func (c *testCluster) leaderOf(address string) int {
	for _, n := range c.nodes {
		if n != nil {
			return int(n.group(n.groupOf(address)).lead.Load()) - 1
		}
	}
	return -1
}

func TestClusterFailoverRedeliversFlagged(t *testing.T) {
	c := startCluster(t, 3, 2)
	// A leader change after the sends (the first leader handing a group
	// to its preferred node) rightly flags what the new leader recovers:
	// it cannot know what the old one delivered. Send once it is done.
	c.waitBalanced()
	const addr = "work"
	l := c.leaderOf(addr)
	other := func(not ...int) int {
		for i := range c.nodes {
			if !slicesContains(not, i) {
				return i
			}
		}
		return -1
	}
	pi := other(l)
	ci := other(l, pi)
	prod := session(t, c.access[pi], "")
	for i := range 10 {
		m := &core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Body: []byte(fmt.Sprint(i)), Priority: core.DefaultPriority}
		if err := prod.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	cons := session(t, c.access[ci], "")
	cn, col := subscribe(t, cons, core.ConsumerOptions{Address: addr, RoutingType: core.Anycast, Credit: 4})
	acked := map[string]bool{}
	for range 4 {
		d := col.next(t)
		if d.DeliveryCount != 0 {
			t.Fatalf("first delivery of %q has count %d", d.Message.Body, d.DeliveryCount)
		}
		// A node whose Raft loop ran late (the race detector on a busy
		// machine) rightly doubts its lease and flags (lease.go); any
		// other flag on a first delivery is wrong.
		if d.Redelivered() && c.nodes[l].stalledUntil.Load() == 0 && c.nodes[ci].stalledUntil.Load() == 0 {
			t.Fatalf("first delivery of %q flagged", d.Message.Body)
		}
		if b := string(d.Message.Body); b == "0" || b == "1" {
			if err := cn.Ack(d.ID); err != nil {
				t.Fatal(err)
			}
			acked[b] = true
		}
	}
	// Let the acks commit before the crash (nobody waits for an ack's
	// commit): every node has applied the same entries, and holds 8.
	g := c.nodes[pi].groupOf(addr)
	deadline := time.Now().Add(10 * time.Second)
	for {
		settled := true
		applied := c.nodes[l].group(g).applied.Load()
		for _, n := range c.nodes {
			msgs, _, _ := n.group(g).state.stats()
			settled = settled && msgs == 8 && n.group(g).applied.Load() == applied
		}
		if settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the acks did not settle on every node")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.crash(l)
	c.waitLeaders()
	// The consumer kept its session; it gets everything not acked, and
	// what it had been delivered is flagged.
	cn.Flow(10)
	got := map[string]int{}
	for len(got) < 8 {
		d := col.next(t)
		b := string(d.Message.Body)
		if acked[b] {
			t.Fatalf("%s was acked before the crash and came again (count %d, redelivered %v; got so far %v)", b, d.DeliveryCount, d.Redelivered(), got)
		}
		if (b == "2" || b == "3") && !d.Redelivered() {
			t.Fatalf("%s was delivered before the crash and came again unflagged", b)
		}
		got[b]++
		cn.Ack(d.ID)
	}
	// And the producer's session goes on too.
	m := &core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Body: []byte("after"), Priority: core.DefaultPriority}
	if err := prod.Send(context.Background(), m); err != nil {
		t.Fatalf("send after failover: %v", err)
	}
	cn.Flow(1)
	if d := col.next(t); string(d.Message.Body) != "after" {
		t.Fatalf("got %q, want after", d.Message.Body)
	}
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestClusterAddAndRemoveMember(t *testing.T) {
	c := startCluster(t, 3, 2)
	prod := session(t, c.access[0], "")
	for i := range 50 {
		m := &core.Message{Address: fmt.Sprintf("m%d", i%4), RoutingType: core.Anycast, Durable: true, Body: []byte(fmt.Sprint(i)), Priority: core.DefaultPriority}
		if err := prod.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	// A fourth node joins: it starts empty, waiting to be added.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peers := map[uint64]string{}
	for i, cfg := range c.cfgs {
		peers[uint64(i+1)] = cfg.Listen
	}
	cfg := Config{NodeID: 4, Listen: ln.Addr().String(), Listener: ln, Peers: peers, Groups: 2, Join: true,
		Secret: testSecret, Dir: t.TempDir(), Tick: 20 * time.Millisecond, ElectionTicks: 10, Logger: testLogger(t, 4)}
	n4, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b4, err := core.New(core.Config{Cluster: n4.Cluster()})
	if err != nil {
		t.Fatal(err)
	}
	c.nodes, c.access, c.cfgs = append(c.nodes, n4), append(c.access, b4), append(c.cfgs, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.nodes[1].AddMember(ctx, 4, cfg.Listen); err != nil {
		t.Fatal(err)
	}
	for _, g := range c.nodes[0].Status().Groups {
		if !slicesContainsU(g.Voters, 4) {
			t.Fatalf("group %d voters %v after adding node 4", g.ID, g.Voters)
		}
	}
	// The new member holds every group's state.
	deadline := time.Now().Add(10 * time.Second)
	for {
		total := 0
		for _, g := range n4.groups {
			msgs, _, _ := g.state.stats()
			total += msgs
		}
		if total == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 4 holds %d messages, want 50", total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A client of the new node reads what was sent before it joined.
	s4 := session(t, b4, "")
	cn, col := subscribe(t, s4, core.ConsumerOptions{Address: "m1", RoutingType: core.Anycast, Credit: 100})
	for range 13 { // i%4 == 1 for 13 of 0..49
		d := col.next(t)
		cn.Ack(d.ID)
	}
	// Node 1 leaves; the other three carry on.
	if err := c.nodes[3].RemoveMember(ctx, 1); err != nil {
		t.Fatal(err)
	}
	c.access[0].Close()
	c.nodes[0].Close()
	c.nodes[0] = nil
	c.waitLeaders()
	for _, g := range c.nodes[1].Status().Groups {
		if slicesContainsU(g.Voters, 1) {
			t.Fatalf("group %d voters %v after removing node 1", g.ID, g.Voters)
		}
	}
	p2 := session(t, c.access[1], "")
	if err := p2.Send(context.Background(), &core.Message{Address: "m1", RoutingType: core.Anycast, Durable: true, Body: []byte("late"), Priority: core.DefaultPriority}); err != nil {
		t.Fatal(err)
	}
	cn.Flow(1)
	if d := col.next(t); string(d.Message.Body) != "late" {
		t.Fatalf("got %q", d.Message.Body)
	}
}

func slicesContainsU(s []uint64, v uint64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestClusterSendsSurviveLeaderCrash: a producer on a surviving node
// keeps sending through a failover of its group's leader; every send is
// confirmed, none fails, and each message is stored once.
func TestClusterSendsSurviveLeaderCrash(t *testing.T) {
	c := startCluster(t, 3, 2)
	const addr, total = "orders", 300
	l := c.leaderOf(addr)
	pi := (l + 1) % 3
	ci := (l + 2) % 3
	prod := session(t, c.access[pi], "")
	errs := make(chan error, total)
	for i := range total {
		if i == total/3 {
			c.crash(l)
		}
		m := &core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Body: []byte(fmt.Sprint(i)), Priority: core.DefaultPriority}
		prod.SendAsync(m, func(err error) { errs <- err })
		if i%20 == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for range total {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("a send failed during the failover: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("sends not confirmed within 30s")
		}
	}
	c.waitLeaders()
	cons := session(t, c.access[ci], "")
	cn, col := subscribe(t, cons, core.ConsumerOptions{Address: addr, RoutingType: core.Anycast, Credit: 1000})
	seen := map[string]int{}
	for len(seen) < total {
		d := col.next(t)
		b := string(d.Message.Body)
		seen[b]++
		if seen[b] > 1 && !d.Redelivered() {
			t.Fatalf("%s delivered twice, unflagged", b)
		}
		cn.Ack(d.ID)
	}
	select {
	case d := <-col.ch:
		t.Fatalf("extra delivery %q (redelivered=%v): a retried send was stored twice", d.Message.Body, d.Redelivered())
	case <-time.After(300 * time.Millisecond):
	}
}

func TestClusterAdminSeesEveryGroup(t *testing.T) {
	c := startCluster(t, 3, 4)
	s := session(t, c.access[0], "")
	for i := range 8 {
		m := &core.Message{Address: fmt.Sprintf("adm%d", i), RoutingType: core.Anycast, Durable: true, Body: []byte("x"), Priority: core.DefaultPriority}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	b := c.access[2]
	sts := b.QueueStats()
	if len(sts) != 8 {
		t.Fatalf("%d queues listed by node 3, want 8: %+v", len(sts), sts)
	}
	page, total, err := b.Browse("adm3", 0, 10)
	if err != nil || total != 1 || len(page) != 1 || string(page[0].Message.Body) != "x" {
		t.Fatalf("browse: %v total %d page %d", err, total, len(page))
	}
	if n, err := b.PurgeQueue("adm3"); err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	if err := b.DeleteQueue("adm3"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.QueueStat("adm3"); !errors.Is(err, core.ErrQueueNotFound) {
		t.Fatalf("deleted queue still there: %v", err)
	}
	if err := b.CreateQueue("made", core.Anycast); err != nil {
		t.Fatal(err)
	}
	if _, err := c.access[1].QueueStat("made"); err != nil {
		t.Fatal(err)
	}
}

// restart starts node i again on its address, on its data or, with
// wipe, on an empty directory (with Join, as an operator restarts a node
// whose disk was lost).
func (c *testCluster) restart(i int, wipe bool) {
	c.t.Helper()
	cfg := c.cfgs[i]
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg.Listener = ln
	if wipe {
		cfg.Dir = c.t.TempDir()
		cfg.Join = true
	}
	c.cfgs[i] = cfg
	n, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	b, err := core.New(accessConfig(n, cfg))
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[i], c.access[i] = n, b
}

// sameState waits until every live node holds the same live message
// records in every group.
func (c *testCluster) sameState(d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		var first map[uint64]int
		same := true
		for _, n := range c.nodes {
			if n == nil {
				continue
			}
			counts := map[uint64]int{}
			for _, g := range n.groups {
				counts[g.id], _, _ = g.state.stats()
			}
			if first == nil {
				first = counts
			} else if fmt.Sprint(first) != fmt.Sprint(counts) {
				same = false
			}
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			var all []string
			for i, n := range c.nodes {
				if n != nil {
					counts := map[uint64]int{}
					for _, g := range n.groups {
						counts[g.id], _, _ = g.state.stats()
					}
					all = append(all, fmt.Sprintf("node %d: %v", i+1, counts))
				}
			}
			c.t.Fatalf("nodes disagree after %v: %v", d, all)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClusterNodeCatchesUpFromSnapshot: a node down while the others
// compacted their logs past what it has comes back and gets a snapshot.
func TestClusterNodeCatchesUpFromSnapshot(t *testing.T) {
	c := startClusterWith(t, 3, 2, func(cfg *Config) { cfg.SnapshotEntries = 20 })
	c.crash(2)
	c.waitLeaders()
	s := session(t, c.access[0], "")
	for i := range 300 {
		m := &core.Message{Address: fmt.Sprintf("s%d", i%5), RoutingType: core.Anycast, Durable: true, Body: []byte(fmt.Sprint(i)), Priority: core.DefaultPriority}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	// Snapshots are written off the loop: wait for every group's.
	deadline := time.Now().Add(10 * time.Second)
	for _, g := range c.nodes[0].rlog.Stats().Groups {
		for g.SnapshotIndex == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("group %d took no snapshot", g.Group)
			}
			time.Sleep(10 * time.Millisecond)
			g = c.nodes[0].rlog.Stats().Groups[g.Group-1]
		}
	}
	// The status (and so the metrics) says how large they are.
	for _, g := range c.nodes[0].Status().Groups {
		if g.SnapshotIndex == 0 || g.SnapshotBytes <= 0 {
			t.Errorf("group %d: snapshot %d of %d bytes in the status", g.ID, g.SnapshotIndex, g.SnapshotBytes)
		}
	}
	c.restart(2, false)
	c.sameState(20 * time.Second)
	// The node that caught up serves: a consumer of it reads everything.
	s3 := session(t, c.access[2], "")
	cn, col := subscribe(t, s3, core.ConsumerOptions{Address: "s3", RoutingType: core.Anycast, Credit: 100})
	for range 60 {
		cn.Ack(col.next(t).ID)
	}
}

// TestClusterWipedNodeRejoins: a node whose data was lost restarts with
// Join and catches up; the cluster loses nothing.
func TestClusterWipedNodeRejoins(t *testing.T) {
	c := startClusterWith(t, 3, 2, func(cfg *Config) { cfg.SnapshotEntries = 50 })
	s := session(t, c.access[0], "")
	send := func(n int) {
		for i := range n {
			m := &core.Message{Address: fmt.Sprintf("w%d", i%3), RoutingType: core.Anycast, Durable: true, Body: []byte("x"), Priority: core.DefaultPriority}
			if err := s.Send(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(120)
	c.crash(1)
	c.restart(1, true)
	send(30)
	c.sameState(20 * time.Second)
	// Now the others may go one at a time and the rejoined node carries
	// the majority with whoever is left.
	c.crash(2)
	c.waitLeaders()
	total := 0
	for _, g := range c.nodes[1].groups {
		m, _, _ := g.state.stats()
		total += m
	}
	if total != 150 {
		t.Fatalf("the rejoined node holds %d messages, want 150", total)
	}
	send(10)
}

func waitDone(t *testing.T, what string, f func(done func(error)) error) {
	t.Helper()
	ch := make(chan error, 1)
	if err := f(func(err error) { ch <- err }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: no outcome within 15s", what)
	}
}

// A client's records and the marks of its deliveries live in the groups:
// the client finds them from another node, and after the node leading
// its subscription's group dies, its unacknowledged delivery comes again
// with its mark, flagged redelivered.
func TestClusterClientRecordsAndMarksFollowTheClient(t *testing.T) {
	c := startCluster(t, 3, 2)
	const addr = "dev/t"
	l := c.leaderOf(addr)
	var surv []int
	for i := range c.nodes {
		if i != l {
			surv = append(surv, i)
		}
	}
	s1, err := c.access[surv[0]].NewSession(core.SessionOptions{ClientID: "dev1", Protocol: "test"})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, "set sub/a", func(d func(error)) error { return s1.SetClientRecord("sub/a", []byte("1"), d) })
	waitDone(t, "set sub/b", func(d func(error)) error { return s1.SetClientRecord("sub/b", []byte("2"), d) })
	waitDone(t, "clear sub/b", func(d func(error)) error { return s1.ClearClientRecords("sub/b", d) })
	tx, err := s1.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.SetClientRecord("qos2/7", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("transaction with a record: %v", err)
	}
	if got := c.access[surv[1]].ClientRecordHolders(); !slices.Contains(got, "dev1") {
		t.Fatalf("record holders seen from another node: %v", got)
	}

	cons, col := subscribe(t, s1, core.ConsumerOptions{Address: addr, RoutingType: core.Multicast, SubscriptionName: "s1", Credit: 10})
	prod := session(t, c.access[surv[1]], "")
	m := &core.Message{Address: addr, RoutingType: core.Multicast, Durable: true, Body: []byte("m1"), Priority: core.DefaultPriority}
	if err := prod.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	d := col.next(t)
	waitDone(t, "mark", func(done func(error)) error { return cons.Mark(d.ID, 42, done) })
	s1.Close() // the delivery is not acknowledged

	c.crash(l)
	c.waitLeaders()
	s2 := session(t, c.access[surv[1]], "dev1")
	recs, err := s2.ClientRecords()
	if err != nil {
		t.Fatal(err)
	}
	want := []core.ClientRecord{{Key: "qos2/7", Value: []byte("x")}, {Key: "sub/a", Value: []byte("1")}}
	if fmt.Sprint(recs) != fmt.Sprint(want) {
		t.Fatalf("records after the failover, from another node: %v, want %v", recs, want)
	}
	_, col2 := subscribe(t, s2, core.ConsumerOptions{Address: addr, RoutingType: core.Multicast, SubscriptionName: "s1", Credit: 10})
	d2 := col2.next(t)
	if string(d2.Message.Body) != "m1" || d2.Mark != 42 || !d2.Redelivered() {
		t.Fatalf("redelivery %q mark %d redelivered %v; want m1, mark 42, flagged", d2.Message.Body, d2.Mark, d2.Redelivered())
	}
}
