package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/internal/ledger"
	"github.com/junctionmq/junction/internal/stompclient"
)

// Tests of what docs/cluster.md and docs/benchmarks.md claim of a
// cluster, driven through real clients and the real API and CLI of
// real nodes (they run in plain `go test`, unlike the scenarios).

// heldBudget is the nodes' --max-memory in TestClusterProducersHeldOverBudget:
// each of the Groups groups' brokers gets a third of it.
const heldBudget = 1536 << 10

// TestClusterProducersHeldOverBudget: a node's memory budget is shared
// by its groups, and a producer whose group is full is held where it is
// connected (docs/cluster.md, "Limits"): over STOMP (receipts), MQTT
// (QoS 1) and AMQP (dispositions), each with one producer on the
// leader of its queue's group and one on a follower, the confirmations
// stop while the group is full, no send fails, and they go on once a
// consumer on the third node drains the queue. Nothing confirmed is
// lost, nothing is delivered twice unflagged. Each node's /metrics
// reports its budget and what the groups it leads hold: about nothing
// at first, about a group's part of the budget while it is full, and
// little again once drained.
func TestClusterProducersHeldOverBudget(t *testing.T) {
	c := StartConfig(t, proxyNet(t), fmt.Sprintf("max-memory: %d\n", heldBudget))
	const part = heldBudget / Groups
	leaders := waitPreferredLeaders(t, c)
	for id, n := range c.Nodes {
		if mem := logLine(t, n.Log, memoryLine); mem["max_memory"] != float64(heldBudget) || mem["group_max_memory"] != float64(part) {
			t.Errorf("node %d's memory budget line: %v; want max_memory %d, group_max_memory %d", id, mem, heldBudget, part)
		}
	}
	// Before any message: the budget, and nothing held.
	for id := range c.Nodes {
		m := scrapeMetrics(t, c, id)
		if m["junction_memory_max_bytes"] != heldBudget {
			t.Fatalf("node %d: junction_memory_max_bytes %v, want the node's --max-memory %d", id, m["junction_memory_max_bytes"], heldBudget)
		}
		if used, ok := m["junction_memory_used_bytes"]; !ok || used < 0 || used > 16<<10 {
			t.Fatalf("node %d: junction_memory_used_bytes %v (present %v) on an empty cluster", id, used, ok)
		}
	}
	// One queue per group, one protocol per queue.
	protos := []string{"stomp", "mqtt", "amqp"}
	queues := make([]string, Groups)
	for i := 0; ; i++ {
		name := fmt.Sprintf("held.q%d", i)
		if g := GroupOf(name); queues[g-1] == "" {
			queues[g-1] = name
		}
		if !slicesContain(queues, "") {
			break
		}
	}
	for _, q := range queues {
		c.CreateQueue(q)
	}
	led := ledger.New()
	stop := make(chan struct{})
	var prods []*heldProducer
	var wg sync.WaitGroup
	for i, q := range queues {
		g := GroupOf(q)
		for k, node := range []uint64{leaders[g], leaders[g]%3 + 1} { // the leader of g, a follower
			p := &heldProducer{proto: protos[i], id: 1 + k, node: node, queue: q, c: c, led: led}
			if err := p.connect(); err != nil {
				t.Fatalf("%s producer on node %d: %v", p.proto, node, err)
			}
			t.Cleanup(p.close)
			prods = append(prods, p)
			wg.Add(1)
			go func() { defer wg.Done(); p.run(stop) }()
		}
	}
	stopped := false
	stopProducers := func() {
		if stopped {
			return
		}
		stopped = true
		close(stop)
		if t.Failed() {
			for _, p := range prods {
				p.close() // they may be held for good
			}
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			for _, p := range prods {
				p.close() // unblocks them, failing the test below
			}
			<-done
			t.Errorf("the producers did not end within 60 s of being stopped: %s", describe(prods))
		}
	}
	defer stopProducers()
	// Every group fills to about its part of the budget, reported by
	// the /metrics of its leader (each node leads one group, unless a
	// leader changed meanwhile: then the node reports its groups').
	deadline := time.Now().Add(60 * time.Second)
	for g := uint64(1); g <= Groups; g++ {
		for {
			now := leadersNow(t, c)
			used := scrapeMetrics(t, c, now[g])["junction_memory_used_bytes"]
			if k := groupsLed(now, now[g]); used >= float64(k)*(part-16<<10) {
				c.Event("group %d full: node %d reports %.0f bytes used (%d groups of %d bytes): %s", g, now[g], used, k, part, describe(prods))
				break
			}
			if err := firstErr(prods); err != nil {
				t.Fatalf("a producer failed while the groups filled: %v", err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %d did not fill within 60 s: its leader %d reports %.0f bytes used, its part is %d; %s", g, now[g], used, part, describe(prods))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Held: the confirmations stop (but for a send or two under way
	// when the group filled), each producer waits on a send, none fails.
	before := counts(prods)
	time.Sleep(2 * time.Second)
	after := counts(prods)
	for i, p := range prods {
		if err := p.failed(); err != nil {
			t.Fatalf("%s: a send failed while its group was full (it must wait): %v", p, err)
		}
		if more := after[i] - before[i]; more > 3 {
			t.Errorf("%s: %d more confirmations in the 2 s after its group was full; want it held", p, more)
		}
		if p.pending.Load() != 1 {
			t.Errorf("%s: no send outstanding while its group is full", p)
		}
	}
	now := leadersNow(t, c)
	for id := range c.Nodes {
		m := scrapeMetrics(t, c, id)
		k := float64(groupsLed(now, id))
		if used := m["junction_memory_used_bytes"]; used < k*(part-16<<10) || used > k*(part+64<<10) {
			t.Errorf("node %d leads %.0f full groups (leaders %v) and reports %.0f bytes used; want about a group's part, %d, each", id, k, now, used, part)
		}
		if m["junction_memory_max_bytes"] != heldBudget {
			t.Errorf("node %d: junction_memory_max_bytes %v while full, want %d", id, m["junction_memory_max_bytes"], heldBudget)
		}
		if d := m["junction_messages_dropped_total"]; d != 0 {
			t.Errorf("node %d: %v messages dropped", id, d)
		}
	}
	if t.Failed() {
		return
	}
	// A consumer on the third node drains each queue: the producers go on.
	stopConsumers := make(chan struct{})
	var cwg sync.WaitGroup
	for i, q := range queues {
		g := GroupOf(q)
		proto := "stomp" // the MQTT queue's too
		if protos[i] == "amqp" {
			proto = "amqp"
		}
		l := ledger.Load{Addrs: []string{pickAddr(c, third(leaders[g], leaders[g]%3+1), proto)}, Ledger: led, Stop: stopConsumers, Timeout: 30 * time.Second}
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			if proto == "amqp" {
				ledger.AMQPConsumer("queue://"+q, l)
			} else {
				ledger.StompConsumer("/queue/"+q, l)
			}
		}()
	}
	defer func() { close(stopConsumers); cwg.Wait() }()
	deadline = time.Now().Add(60 * time.Second)
	for i, p := range prods {
		for p.confirmed.Load() < after[i]+50 {
			if err := p.failed(); err != nil {
				t.Fatalf("%s: a send failed once its group was drained: %v; %s; %v; queues %s", p, err, describe(prods), led.Check(), queueDepths(c))
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d confirmations 60 s after consumers started to drain, %d before; %s; %v; queues %s", p, p.confirmed.Load(), after[i], describe(prods), led.Check(), queueDepths(c))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	c.Event("every producer went on once drained: %s", describe(prods))
	stopProducers()
	for _, p := range prods {
		if err := p.failed(); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if !ledger.WaitUntil(60*time.Second, func() bool { return led.Drained(500 * time.Millisecond) }) {
		t.Errorf("not every confirmed message was delivered within 60 s: %v", led.Check())
	}
	counts := led.Check()
	c.Event("ledger: %v", counts)
	if counts.Bad() != 0 {
		t.Errorf("ledger: %v\n%s", counts, counts.Details())
	}
	if counts.Sent != counts.Confirmed {
		t.Errorf("%d messages sent, %d confirmed: sends failed", counts.Sent, counts.Confirmed)
	}
	// Drained, the groups hold little again.
	for id := range c.Nodes {
		var used float64
		if !ledger.WaitUntil(20*time.Second, func() bool {
			used = scrapeMetrics(t, c, id)["junction_memory_used_bytes"]
			return used < part/4
		}) {
			t.Errorf("node %d reports %.0f bytes used once every queue was drained", id, used)
		}
	}
}

// heldProducer sends durable messages to its queue on one node, one at a
// time, each confirmed before the next, recording them in a ledger;
// unlike ledger's producers it fails over to nothing and remembers the
// first error, so that a refused send cannot pass for a held one.
type heldProducer struct {
	proto, queue string
	id           int
	node         uint64
	c            *Cluster
	led          *ledger.Ledger

	confirmed atomic.Int64
	pending   atomic.Int64 // 1 while a send waits for its confirmation
	mu        sync.Mutex
	err       error

	nc   net.Conn // stomp
	sc   *gostomp.Conn
	mc   paho.Client
	ac   *goamqp.Conn
	asnd *goamqp.Sender
}

func (p *heldProducer) String() string {
	return fmt.Sprintf("%s producer %d on node %d (%d confirmed)", p.proto, p.id, p.node, p.confirmed.Load())
}

func (p *heldProducer) connect() error {
	addr := pickAddr(p.c, p.node, p.proto)
	switch p.proto {
	case "stomp":
		nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return err
		}
		sc, err := gostomp.Connect(nc, gostomp.ConnOpt.HeartBeat(0, 0), gostomp.ConnOpt.Host("/"), stompclient.Quiet)
		if err != nil {
			nc.Close()
			return err
		}
		p.nc, p.sc = nc, sc
	case "mqtt":
		p.mc = paho.NewClient(paho.NewClientOptions().SetClientID(fmt.Sprintf("held-%s-%d", p.queue, p.id)).SetCleanSession(true).
			// A held producer's pings go unanswered (the node stops
			// reading it, docs/memory.md): a keep-alive longer than the
			// test, so that paho does not give up on a slow machine.
			SetKeepAlive(5 * time.Minute).SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(10 * time.Second).AddBroker("tcp://" + addr))
		if tok := p.mc.Connect(); !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
			return fmt.Errorf("connect: %v", tok.Error())
		}
	case "amqp":
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ac, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{HostName: "localhost"})
		if err != nil {
			return err
		}
		s, err := ac.NewSession(ctx, nil)
		if err == nil {
			p.asnd, err = s.NewSender(ctx, "queue://"+p.queue, nil)
		}
		if err != nil {
			ac.Close()
			return err
		}
		p.ac = ac
	}
	return nil
}

// send sends body and waits (a minute at most) for its confirmation.
func (p *heldProducer) send(body string) error {
	switch p.proto {
	case "stomp":
		errc := make(chan error, 1)
		go func() {
			errc <- p.sc.Send("/queue/"+p.queue, "text/plain", []byte(body), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true"))
		}()
		select {
		case err := <-errc:
			return err
		case <-time.After(time.Minute):
			p.nc.Close()
			<-errc
			return errors.New("no receipt within a minute")
		}
	case "mqtt":
		tok := p.mc.Publish(strings.ReplaceAll(p.queue, ".", "/"), 1, false, body)
		if !tok.WaitTimeout(time.Minute) {
			return errors.New("no PUBACK within a minute")
		}
		return tok.Error()
	default:
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return p.asnd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte(body)}}, nil)
	}
}

func (p *heldProducer) run(stop <-chan struct{}) {
	for seq := 0; !ledger.Stopped(stop); seq++ {
		key, body := ledger.Body(p.proto, p.id, seq)
		p.led.Send(key, body)
		p.pending.Store(1)
		err := p.send(body)
		p.pending.Store(0)
		if err != nil {
			p.mu.Lock()
			p.err = fmt.Errorf("send %d: %w", seq, err)
			p.mu.Unlock()
			return
		}
		p.led.Confirm(key, p.proto, pickAddr(p.c, p.node, p.proto))
		p.confirmed.Add(1)
	}
}

func (p *heldProducer) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *heldProducer) close() {
	switch {
	case p.sc != nil:
		p.nc.Close()
	case p.mc != nil:
		p.mc.Disconnect(0)
	case p.ac != nil:
		p.ac.Close()
	}
}

func counts(prods []*heldProducer) []int64 {
	n := make([]int64, len(prods))
	for i, p := range prods {
		n[i] = p.confirmed.Load()
	}
	return n
}

func firstErr(prods []*heldProducer) error {
	for _, p := range prods {
		if err := p.failed(); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

func describe(prods []*heldProducer) string {
	var s []string
	for _, p := range prods {
		s = append(s, fmt.Sprintf("%s %d@n%d: %d", p.proto, p.id, p.node, p.confirmed.Load()))
	}
	return strings.Join(s, ", ")
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// pickAddr is node id's listener of proto.
func pickAddr(c *Cluster, id uint64, proto string) string {
	a := c.Nodes[id].Addrs
	switch proto {
	case "stomp":
		return a.STOMP
	case "mqtt":
		return a.MQTT
	}
	return a.AMQP
}

// waitPreferredLeaders waits until group g is led by node g, each
// group's preferred node (cluster's balanceLeaders), so that no handover
// comes in the middle of a test that counts on who leads; it returns
// the leaders.
func waitPreferredLeaders(t *testing.T, c *Cluster) map[uint64]uint64 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		leaders := c.WaitHealthy(60 * time.Second)
		ok := true
		for g := uint64(1); g <= Groups; g++ {
			ok = ok && leaders[g] == g
		}
		if ok {
			return leaders
		}
		if time.Now().After(deadline) {
			t.Fatalf("the groups are not led by their preferred nodes after 60 s: %v", leaders)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leadersNow returns the groups' leaders, as every node sees them.
func leadersNow(t *testing.T, c *Cluster) map[uint64]uint64 {
	t.Helper()
	var why string
	for range 100 {
		var l map[uint64]uint64
		if l, why = c.healthy(); why == "" {
			return l
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the nodes do not agree on the groups' leaders for 10 s: %s", why)
	return nil
}

// groupsLed is how many groups node id leads.
func groupsLed(leaders map[uint64]uint64, id uint64) int {
	n := 0
	for _, l := range leaders {
		if l == id {
			n++
		}
	}
	return n
}

// scrapeMetrics reads node id's /metrics: the value of each series
// without labels (and of each labelled one summed under its name).
func scrapeMetrics(t *testing.T, c *Cluster, id uint64) map[string]float64 {
	t.Helper()
	res, err := c.http.Get("http://" + c.Nodes[id].Addrs.Console + "/metrics")
	if err != nil {
		t.Fatalf("node %d: GET /metrics: %v", id, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("node %d: GET /metrics: %s", id, res.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		m[name] += v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("node %d: reading /metrics: %v", id, err)
	}
	return m
}

// TestClusterMembershipRefusals: over a live cluster, the membership
// changes docs/cluster.md says are refused (a member again at another
// address, removing a node that is no member, a node removing itself)
// answer 409 with the reason through /api/v1/cluster/members, and
// `junction cluster add|remove` prints that reason and exits non-zero;
// an add the command does not see through (here: killed while the node
// to add is unreachable) leaves a learner that `junction cluster status`
// shows and `junction cluster remove` takes out. And each node's start
// line ("junction started") names the cluster's Raft log as its journal
// and its listeners, and its memory budget line the node's budget and
// each group's part.
func TestClusterMembershipRefusals(t *testing.T) {
	c := Start(t, proxyNet(t))
	c.WaitHealthy(60 * time.Second)
	checkStartLines(t, c)
	refusals := []struct {
		node        uint64
		method, api string
		body        string
		cli         []string
		reason      string
	}{
		{1, http.MethodPost, "/api/v1/cluster/members", `{"id":2,"address":"127.0.0.1:1"}`, []string{"add", "2", "127.0.0.1:1"}, "node 2 is already a member, at "},
		{2, http.MethodDelete, "/api/v1/cluster/members/9", "", []string{"remove", "9"}, "node 9 is not a member of any group"},
		{1, http.MethodDelete, "/api/v1/cluster/members/1", "", []string{"remove", "1"}, "node 1 cannot remove itself: ask another member"},
	}
	for _, r := range refusals {
		console := c.Nodes[r.node].Addrs.Console
		req, err := http.NewRequest(r.method, "http://"+console+r.api, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		if r.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := c.http.Do(req)
		if err != nil {
			t.Fatalf("%s %s on node %d: %v", r.method, r.api, r.node, err)
		}
		var answer struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusConflict || json.Unmarshal(b, &answer) != nil || !strings.Contains(answer.Error, r.reason) {
			t.Errorf("%s %s %s on node %d: %d %s; want 409 saying %q", r.method, r.api, r.body, r.node, res.StatusCode, b, r.reason)
		}
		out, errs, code := junctionCLI(t, append(append([]string{"cluster"}, r.cli...), "--console", console)...)
		if code == 0 || !strings.Contains(errs, r.reason) || !strings.Contains(errs, "HTTP 409") || strings.Contains(out, "added") || strings.Contains(out, "removed") {
			t.Errorf("junction cluster %s --console (node %d): exit %d, stdout %q, stderr %q; want a non-zero exit saying %q (HTTP 409)", strings.Join(r.cli, " "), r.node, code, out, errs, r.reason)
		}
	}
	// Nothing changed.
	for id := range c.Nodes {
		st := clusterView(t, c, id)
		if len(st.Members) != 3 || st.Members[2] == "127.0.0.1:1" {
			t.Errorf("node %d's members after the refusals: %v", id, st.Members)
		}
		for _, g := range st.Groups {
			if len(g.Voters) != 3 || len(g.Learners) != 0 {
				t.Errorf("node %d: group %d has voters %v, learners %v after the refusals", id, g.ID, g.Voters, g.Learners)
			}
		}
	}

	// An add that does not finish: node 4 is not running (nothing
	// listens at its address), so it never catches up to be promoted.
	gone := freeAddrs(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	add := exec.CommandContext(ctx, Binary(t), "cluster", "add", "4", gone, "--console", c.Nodes[1].Addrs.Console)
	var addOut, addErr bytes.Buffer
	add.Stdout, add.Stderr = &addOut, &addErr
	if err := add.Start(); err != nil {
		t.Fatal(err)
	}
	learner := func(st clusterStatus) bool {
		for _, g := range st.Groups {
			if !slicesContainID(g.Learners, 4) {
				return false
			}
		}
		return len(st.Groups) == Groups
	}
	if !ledger.WaitUntil(30*time.Second, func() bool { return learner(clusterView(t, c, 2)) }) {
		t.Fatalf("node 4 is not a learner of every group 30 s after `junction cluster add`: %+v", clusterView(t, c, 2))
	}
	time.Sleep(time.Second) // it stays a learner: it cannot catch up
	if !learner(clusterView(t, c, 2)) {
		t.Fatalf("node 4, unreachable, is no longer a learner of every group: %+v", clusterView(t, c, 2))
	}
	add.Process.Kill() // the operator gives up
	add.Wait()
	c.Event("`junction cluster add 4 %s` interrupted: stdout %q, stderr %q", gone, addOut.String(), addErr.String())
	if strings.Contains(addOut.String(), "added") {
		t.Fatalf("junction cluster add of an unreachable node said %q", addOut.String())
	}
	out, errs, code := junctionCLI(t, "cluster", "status", "--console", c.Nodes[3].Addrs.Console)
	if code != 0 || !strings.Contains(out, "4="+gone) || !strings.Contains(out, "[4]") {
		t.Fatalf("junction cluster status after the unfinished add: exit %d, stderr %q:\n%s\nwant node 4 shown as a member and learner", code, errs, out)
	}
	out, errs, code = junctionCLI(t, "cluster", "remove", "4", "--console", c.Nodes[3].Addrs.Console)
	if code != 0 || !strings.Contains(out, "node 4 removed from every group") {
		t.Fatalf("junction cluster remove 4: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if !ledger.WaitUntil(30*time.Second, func() bool {
		for id := range c.Nodes {
			for _, g := range clusterView(t, c, id).Groups {
				if slicesContainID(g.Learners, 4) || slicesContainID(g.Voters, 4) {
					return false
				}
			}
		}
		return true
	}) {
		t.Fatalf("node 4 still in a group 30 s after its removal: %+v", clusterView(t, c, 1))
	}
	c.WaitHealthy(30 * time.Second)
}

// junctionCLI runs the junction binary with args (a minute at most) and
// returns its stdout, stderr and exit code.
func junctionCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t), args...)
	cmd.Env = append(os.Environ(), "JUNCTION_CONSOLE=", "JUNCTION_USER=", "JUNCTION_PASSWORD=")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("junction %s: %v", strings.Join(args, " "), err)
	}
	return o.String(), e.String(), code
}

// clusterStatus is what the membership test reads of /api/v1/cluster.
type clusterStatus struct {
	Members map[uint64]string `json:"members"`
	Groups  []struct {
		ID       uint64   `json:"id"`
		Voters   []uint64 `json:"voters"`
		Learners []uint64 `json:"learners"`
	} `json:"groups"`
}

func clusterView(t *testing.T, c *Cluster, id uint64) clusterStatus {
	t.Helper()
	var st clusterStatus
	res, err := c.http.Get("http://" + c.Nodes[id].Addrs.Console + "/api/v1/cluster")
	if err != nil {
		t.Fatalf("node %d: %v", id, err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("node %d: GET /api/v1/cluster: %d %v", id, res.StatusCode, err)
	}
	return st
}

func slicesContainID(s []uint64, v uint64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// checkStartLines finds each node's "junction started" line (JSON, as
// the harness starts them) and checks its fields: the version, the data
// directory, the cluster's Raft log as the journal (not "persistence
// disabled"), and the listeners; the cluster node's own start line; and
// the memory budget line.
func checkStartLines(t *testing.T, c *Cluster) {
	t.Helper()
	for id, n := range c.Nodes {
		started, node := logLine(t, n.Log, "junction started"), logLine(t, n.Log, "cluster node started")
		if started == nil || node == nil {
			t.Errorf("node %d: no \"junction started\" or \"cluster node started\" line:\n%s", id, Tail(n.Log, 20))
			continue
		}
		want := map[string]any{"level": "info", "data_dir": n.Data,
			"journal": "the cluster's Raft log (" + filepath.Join(n.Data, "cluster") + "): replicated to a majority",
			"stomp":   n.Addrs.STOMP, "mqtt": n.Addrs.MQTT, "amqp": n.Addrs.AMQP, "console": n.Addrs.Console}
		for k, v := range want {
			if started[k] != v {
				t.Errorf("node %d's start line: %s = %v, want %v\n%v", id, k, started[k], v, started)
			}
		}
		if v, _ := started["version"].(string); v == "" {
			t.Errorf("node %d's start line names no version: %v", id, started)
		}
		for _, k := range []string{"recovered_messages", "ha"} {
			if _, ok := started[k]; ok {
				t.Errorf("node %d's start line has %s, which is a single broker's: %v", id, k, started)
			}
		}
		if node["groups"] != float64(Groups) || node["peers"] != float64(2) || node["join"] != false || node["component"] != "cluster" {
			t.Errorf("node %d's cluster start line: %v; want groups %d, peers 2, join false, component cluster", id, node, Groups)
		}
		// Its budget (by default a twelfth of the machine's memory) and
		// each group's part; the Go limit covers three copies of it.
		mem := logLine(t, n.Log, memoryLine)
		budget, _ := mem["max_memory"].(float64)
		part, _ := mem["group_max_memory"].(float64)
		limit, _ := mem["go_memory_limit"].(float64)
		if mem == nil || budget <= 0 || part != float64(int64(budget)/Groups) || limit < 3*budget {
			t.Errorf("node %d's memory budget line: %v; want max_memory, group_max_memory a third of it, go_memory_limit over three times it", id, mem)
		}
	}
}

// memoryLine is the message of a cluster node's memory budget line.
const memoryLine = "memory budget for messages, shared by the node's groups: past its group's part each address applies its address-full-policy (PAGE holds the producers: a group does not page)"

// logLine returns the fields of the first JSON line of the log at path
// whose message is msg (nil if none).
func logLine(t *testing.T, path, msg string) map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["message"] == msg {
			return m
		}
	}
	return nil
}

// queueDepths is node 1's /api/v1/queues, for failure messages.
func queueDepths(c *Cluster) string {
	res, err := c.http.Get("http://" + c.Nodes[1].Addrs.Console + "/api/v1/queues")
	if err != nil {
		return err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// TestClusterAddTimesOut: `junction cluster add` of a node that never
// comes (nothing listens at its address) ends when the node asked gives
// up, after 2 minutes (docs/cluster.md), not before and not much after:
// non-zero, saying the node was left a learner of every group; and
// `junction cluster remove` then takes it out. Long (2 minutes): with
// the scenarios (make cluster-test) only.
func TestClusterAddTimesOut(t *testing.T) {
	rounds(t)
	c := Start(t, proxyNet(t))
	gone := freeAddrs(t, 1)[0]
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t), "cluster", "add", "4", gone, "--console", c.Nodes[2].Addrs.Console)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	took := time.Since(start)
	c.Event("junction cluster add 4 %s: %v after %v: stdout %q, stderr %q", gone, err, took.Round(time.Millisecond), o.String(), e.String())
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("junction cluster add of a node that never comes: %v, want a non-zero exit", err)
	}
	if took < 2*time.Minute-time.Second || took > 2*time.Minute+20*time.Second {
		t.Errorf("junction cluster add gave up after %v, want the node's 2 minutes", took)
	}
	if !strings.Contains(e.String(), "node 4 is a learner of every group but has not caught up") || strings.Contains(o.String(), "added") {
		t.Errorf("junction cluster add that timed out: stdout %q, stderr %q; want it to say node 4 was left a learner", o.String(), e.String())
	}
	out, errs, code := junctionCLI(t, "cluster", "remove", "4", "--console", c.Nodes[1].Addrs.Console)
	if code != 0 || !strings.Contains(out, "node 4 removed from every group") {
		t.Fatalf("junction cluster remove 4: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
