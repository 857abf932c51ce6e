// Package clustertest runs 3-node clusters of real junction processes
// for the cluster's Jepsen-style tests: every link between two nodes
// goes through a fault-injecting proxy (internal/faultproxy), or every
// node lives in a network namespace of its own (internal/netns, root
// only), so that links can be cut, both ways or one way. Durable load of
// STOMP, MQTT and AMQP clients spread over the nodes is recorded in a
// ledger (internal/ledger) and checked at the end of each scenario:
// nothing confirmed lost, nothing invented or corrupt, every duplicate
// flagged redelivered; and a poller of every node's /api/v1/cluster
// catches two nodes claiming the leadership of one group in one term.
//
// The scenarios are the package's tests: `make cluster-test ROUNDS=N`
// (JUNCTION_CLUSTER_ROUNDS) runs them; without that variable only a
// short smoke test runs. JUNCTION_CLUSTER_LOGS=dir keeps every node's log
// (and the scenario's timeline) of a failed round.
package clustertest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/faultproxy"
	"github.com/junctionmq/junction/internal/freeport"
	"github.com/junctionmq/junction/internal/ledger"
	"github.com/junctionmq/junction/internal/netns"
)

// Groups is the number of Raft groups of a test cluster.
const Groups = 3

// Secret is the test clusters' secret.
const Secret = "clustertest-secret-0123456789abcdef"

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// Binary builds cmd/junction once per test process and returns its
// path. Cleanup (from TestMain) removes it.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "clustertest-bin-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "junction")
		out, err := exec.Command("go", "build", "-o", buildBin, "github.com/junctionmq/junction/cmd/junction").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// Cleanup removes what Binary built.
func Cleanup() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// GroupOf is the group of an address, as package cluster places it (the
// FNV-1a hash of the name), but for a virtual topic's consumer queue,
// which goes with its topic (core.VirtualTopicOf; this harness drives
// the binary and imports nothing of the broker's).
func GroupOf(address string) uint64 {
	h := fnv.New32a()
	h.Write([]byte(address))
	return 1 + uint64(h.Sum32())%Groups
}

// Addrs are a node's listeners.
type Addrs struct{ STOMP, MQTT, AMQP, Console, Cluster string }

// Node is one junction process of a cluster (it may be restarted).
type Node struct {
	ID    uint64
	Addrs Addrs
	Data  string
	Log   string // the log file, appended to by every start

	c    *Cluster
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Network is where the nodes run: behind fault proxies on loopback, or
// in network namespaces.
type Network interface {
	// Isolate cuts node id from the other nodes, both ways.
	Isolate(id uint64) error
	// OneWay cuts what node from sends to node to.
	OneWay(from, to uint64) error
	// Delay adds d to every link of node id with the other nodes, in
	// place of any cut of them (0 removes it, and lets them pass).
	Delay(id uint64, d time.Duration) error
	// Heal removes every cut and every delay.
	Heal() error
	// Dial connects a client (or the test's console poller) to addr.
	Dial(ctx context.Context, addr string) (net.Conn, error)
	// Name is "proxy" or "netns".
	Name() string

	addrs(id uint64) Addrs
	peers(id uint64, nodes map[uint64]*Node) string
	command(id uint64, bin string, args ...string) *exec.Cmd
}

// ProxyNet runs the nodes on loopback ports, each link between two nodes
// through a faultproxy.
type ProxyNet struct {
	*faultproxy.Net
	ports  map[uint64]Addrs
	direct bool // the nodes dial each other without the proxies
}

// NewDirectNet is a ProxyNet whose nodes dial each other directly (for
// measurements: no proxy copies in between); its cuts do nothing.
func NewDirectNet(t testing.TB, n int) *ProxyNet {
	p := NewProxyNet(t, n)
	p.direct = true
	return p
}

// NewProxyNet builds the proxies for nodes 1..n; they close at cleanup.
func NewProxyNet(t testing.TB, n int) *ProxyNet {
	t.Helper()
	var ids []uint64
	for i := 1; i <= n; i++ {
		ids = append(ids, uint64(i))
	}
	fn, err := faultproxy.NewNet(ids...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fn.Close() })
	p := &ProxyNet{Net: fn, ports: map[uint64]Addrs{}}
	free := freeAddrs(t, 5*n)
	for i, id := range ids {
		a := free[5*i:]
		p.ports[id] = Addrs{a[0], a[1], a[2], a[3], a[4]}
		fn.SetTarget(id, a[4])
	}
	return p
}

func (p *ProxyNet) Isolate(id uint64) error { p.Net.Isolate(id); return nil }

func (p *ProxyNet) OneWay(from, to uint64) error { p.Net.OneWay(from, to); return nil }

// Delay delays, by d, the bytes both ways on the connections node id
// dials to the others and on theirs to it: d each way on every link, a
// round trip 2d longer.
func (p *ProxyNet) Delay(id uint64, d time.Duration) error {
	for _, other := range p.ids() {
		if other == id {
			continue
		}
		for _, px := range []*faultproxy.Proxy{p.Proxy(id, other), p.Proxy(other, id)} {
			if d == 0 {
				px.Pass()
			} else {
				px.Delay(d)
			}
		}
	}
	return nil
}

func (p *ProxyNet) ids() []uint64 {
	var ids []uint64
	for id := range p.ports {
		ids = append(ids, id)
	}
	return ids
}

func (p *ProxyNet) Heal() error { p.Net.Heal(); return nil }

func (p *ProxyNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func (p *ProxyNet) Name() string { return "proxy" }

func (p *ProxyNet) addrs(id uint64) Addrs { return p.ports[id] }

func (p *ProxyNet) peers(id uint64, nodes map[uint64]*Node) string {
	var s []string
	for other := range nodes {
		a := nodes[other].Addrs.Cluster
		if other != id && !p.direct {
			a = p.Addr(id, other)
		}
		s = append(s, fmt.Sprintf("%d=%s", other, a))
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func (p *ProxyNet) command(_ uint64, bin string, args ...string) *exec.Cmd {
	return exec.Command(bin, args...)
}

// ClientNS is the namespace of the test's clients in a NetnsNet: on the
// bridge, in no partition's minority.
const ClientNS = 9

// NetnsNet runs each node in a network namespace of its own; the clients
// and the console poller run in namespace ClientNS.
type NetnsNet struct {
	*netns.Net
	n       int
	mu      sync.Mutex
	delayed map[uint64]bool
}

// NewNetnsNet builds the namespaces for nodes 1..n and the clients'; it
// skips t when this machine cannot (not root, no ip or nft/iptables),
// or fails it when JUNCTION_REQUIRE_NETNS=1 (netns.RequireEnv).
func NewNetnsNet(t testing.TB, n int) *NetnsNet {
	t.Helper()
	ids := []uint64{ClientNS}
	for i := 1; i <= n; i++ {
		ids = append(ids, uint64(i))
	}
	return &NetnsNet{Net: netns.Setup(t, "", ids...), n: n}
}

// Isolate cuts node id from every other node and from the clients.
func (s *NetnsNet) Isolate(id uint64) error {
	var rest []uint64
	for i := 1; i <= s.n; i++ {
		if uint64(i) != id {
			rest = append(rest, uint64(i))
		}
	}
	return s.Partition([]uint64{id}, append(rest, ClientNS))
}

// Delay adds d to every packet node id sends (netem on its interface,
// to the other nodes and to the clients alike): a round trip between it
// and another node is d longer (2d behind the proxies). It returns
// netns.ErrNoNetem when the kernel lacks netem.
func (s *NetnsNet) Delay(id uint64, d time.Duration) error {
	if err := s.Net.Delay(id, d); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.delayed == nil {
		s.delayed = map[uint64]bool{}
	}
	s.delayed[id] = d != 0
	return nil
}

// Heal removes every cut and every delay.
func (s *NetnsNet) Heal() error {
	if err := s.Net.Heal(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, on := range s.delayed {
		if on {
			if err := s.Net.Delay(id, 0); err != nil {
				return err
			}
			s.delayed[id] = false
		}
	}
	return nil
}

func (s *NetnsNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return s.DialFunc(ClientNS)(ctx, addr)
}

func (s *NetnsNet) Name() string { return "netns" }

func (s *NetnsNet) addrs(id uint64) Addrs {
	return Addrs{s.Addr(id, 61613), s.Addr(id, 1883), s.Addr(id, 5672), s.Addr(id, 8161), s.Addr(id, 7100)}
}

func (s *NetnsNet) peers(id uint64, nodes map[uint64]*Node) string {
	var p []string
	for other := range nodes {
		p = append(p, fmt.Sprintf("%d=%s", other, nodes[other].Addrs.Cluster))
	}
	sort.Strings(p)
	return strings.Join(p, ",")
}

func (s *NetnsNet) command(id uint64, bin string, args ...string) *exec.Cmd {
	return s.Command(id, bin, args...)
}

// Cluster is a cluster of junction processes under test.
type Cluster struct {
	T     testing.TB
	Net   Network
	Nodes map[uint64]*Node
	Dir   string // logs, data directories and the timeline

	bin      string
	config   string // a YAML file every node reads (--config), or ""
	tls      string // the directory of the nodes' certificates (StartTLS), or "": --cluster-insecure
	http     *http.Client
	timeline *os.File
	tmu      sync.Mutex
	watch    *Watcher
}

// Start starts a 3-node cluster on net and waits until every group has a
// leader all nodes know; the nodes are stopped (SIGTERM, then SIGQUIT
// after 30 s) at cleanup, and their logs kept in JUNCTION_CLUSTER_LOGS
// when t failed.
func Start(t testing.TB, nw Network) *Cluster {
	t.Helper()
	return StartBinary(t, nw, Binary(t))
}

// StartBinary is Start with the junction binary at bin.
func StartBinary(t testing.TB, nw Network, bin string) *Cluster {
	t.Helper()
	return start(t, nw, bin, "")
}

// StartConfig is Start with every node reading the configuration file
// yaml (besides the harness's flags, which win).
func StartConfig(t testing.TB, nw Network, yaml string) *Cluster {
	t.Helper()
	return start(t, nw, Binary(t), yaml)
}

// StartTLS is Start with the links between nodes over TLS: each node
// gets a certificate from `junction cert dev --node ID` (one development
// CA, in TLSDir) and runs with --cluster-tls-cert, -key and -ca
// instead of --cluster-insecure.
func StartTLS(t testing.TB, nw Network) *Cluster {
	t.Helper()
	return startWith(t, nw, Binary(t), "", true)
}

func start(t testing.TB, nw Network, bin, yaml string) *Cluster {
	t.Helper()
	return startWith(t, nw, bin, yaml, false)
}

func startWith(t testing.TB, nw Network, bin, yaml string, withTLS bool) *Cluster {
	t.Helper()
	c := &Cluster{T: t, Net: nw, Nodes: map[uint64]*Node{}, Dir: t.TempDir(), bin: bin}
	if withTLS {
		c.tls = filepath.Join(c.Dir, "tls")
		for id := uint64(1); id <= 3; id++ {
			// The certificates name the hosts the nodes dial: loopback
			// (the proxies) by default, the namespaces' addresses here.
			args := []string{"cert", "dev", "-dir", c.tls, "-node", fmt.Sprint(id)}
			if _, ok := nw.(*NetnsNet); ok {
				host, _, _ := net.SplitHostPort(nw.addrs(id).Cluster)
				args = append(args, "-hosts", host)
			}
			if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
				t.Fatalf("junction %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	}
	if yaml != "" {
		c.config = filepath.Join(c.Dir, "junction.yaml")
		if err := os.WriteFile(c.config, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.http = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, addr string) (net.Conn, error) { return nw.Dial(ctx, addr) },
		DisableKeepAlives: true,
	}}
	var err error
	if c.timeline, err = os.Create(filepath.Join(c.Dir, "timeline.log")); err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		c.Nodes[id] = &Node{ID: id, Addrs: nw.addrs(id), Data: filepath.Join(c.Dir, fmt.Sprintf("data-%d", id)),
			Log: filepath.Join(c.Dir, fmt.Sprintf("node-%d.log", id)), c: c}
	}
	t.Cleanup(c.close)
	// All at once: a node's listeners open once it has heard from a
	// majority.
	for _, n := range c.Nodes {
		n.launch(false)
	}
	for _, n := range c.Nodes {
		n.waitListening()
	}
	c.Event("started 3 nodes on %s", nw.Name())
	c.WaitHealthy(60 * time.Second)
	c.watch = newWatcher(c)
	return c
}

// TLSDir is the directory of the nodes' certificates and the CA's
// (ca.pem, node-ID.pem, node-ID-key.pem) of a cluster from StartTLS, or
// "".
func (c *Cluster) TLSDir() string { return c.tls }

// Event writes a line to the scenario's timeline (and the test log).
func (c *Cluster) Event(format string, args ...any) {
	line := time.Now().Format("15:04:05.000") + " " + fmt.Sprintf(format, args...)
	c.tmu.Lock()
	fmt.Fprintln(c.timeline, line)
	c.tmu.Unlock()
	c.T.Log(line)
}

func (c *Cluster) close() {
	if c.watch != nil {
		c.watch.stop()
	}
	for _, n := range c.Nodes {
		n.Terminate()
	}
	c.timeline.Close()
	if !c.T.Failed() {
		return
	}
	dir := os.Getenv("JUNCTION_CLUSTER_LOGS")
	if dir == "" {
		c.T.Logf("set JUNCTION_CLUSTER_LOGS=dir to keep the nodes' logs of a failed round")
		return
	}
	dst := filepath.Join(dir, strings.ReplaceAll(c.T.Name(), "/", "_")+"-"+time.Now().Format("150405"))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		c.T.Logf("keeping logs: %v", err)
		return
	}
	entries, _ := os.ReadDir(c.Dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") {
			copyFile(filepath.Join(c.Dir, e.Name()), filepath.Join(dst, e.Name()))
		}
	}
	c.T.Logf("the nodes' logs and the timeline are kept in %s", dst)
}

func copyFile(src, dst string) {
	in, err := os.Open(src)
	if err != nil {
		return
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return
	}
	defer out.Close()
	io.Copy(out, in)
}

// Start starts the node's process (join: with --cluster-join, for a node
// whose data was wiped) and waits until its listeners accept.
func (n *Node) Start(join bool) {
	n.c.T.Helper()
	n.launch(join)
	n.waitListening()
}

func (n *Node) launch(join bool) {
	t := n.c.T
	t.Helper()
	args := []string{"--data-dir", n.Data,
		"--stomp", n.Addrs.STOMP, "--mqtt", n.Addrs.MQTT, "--amqp", n.Addrs.AMQP, "--console", n.Addrs.Console,
		"--ws", "", "--all", "", "--log-format", "json", "--log-level", "info", "--stomp-heart-beat-min", "0",
		"--cluster-node-id", fmt.Sprint(n.ID), "--cluster-listen", n.Addrs.Cluster,
		"--cluster-peers", n.c.Net.peers(n.ID, n.c.Nodes),
		"--cluster-groups", fmt.Sprint(Groups), "--cluster-election-timeout", "1s",
		// Every test client connects from one IP: the per-IP connection
		// rate limit would throttle their failover as if one host did.
		"--connection-rate-per-ip", "0"}
	if n.c.tls == "" {
		args = append(args, "--cluster-insecure")
	} else {
		id := fmt.Sprint(n.ID)
		args = append(args, "--cluster-tls-cert", filepath.Join(n.c.tls, "node-"+id+".pem"),
			"--cluster-tls-key", filepath.Join(n.c.tls, "node-"+id+"-key.pem"), "--cluster-tls-ca", filepath.Join(n.c.tls, "ca.pem"))
	}
	if n.c.config != "" {
		args = append(args, "--config", n.c.config)
	}
	if join {
		args = append(args, "--cluster-join")
	}
	if _, ok := n.c.Net.(*NetnsNet); ok {
		args = append(args, "--allow-anonymous") // its listeners are not on loopback
	}
	f, err := os.OpenFile(n.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "=== %s start: junction %s\n", time.Now().Format("15:04:05.000"), strings.Join(args, " "))
	cmd := n.c.Net.command(n.ID, n.c.bin, args...)
	cmd.Env = append(os.Environ(), "JUNCTION_CLUSTER_SECRET="+Secret)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	n.mu.Lock()
	n.cmd, n.done, n.err = cmd, done, nil
	n.mu.Unlock()
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== %s exit: %v\n", time.Now().Format("15:04:05.000"), err)
		f.Close()
		n.mu.Lock()
		n.err = err
		n.mu.Unlock()
		close(done)
	}()
	n.c.Event("node %d: started (pid %d, join %v)", n.ID, cmd.Process.Pid, join)
}

func (n *Node) waitListening() {
	t := n.c.T
	t.Helper()
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for _, a := range []string{n.Addrs.Console, n.Addrs.STOMP, n.Addrs.MQTT, n.Addrs.AMQP} {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn, err := n.c.Net.Dial(ctx, a)
			cancel()
			if err == nil {
				conn.Close()
				break
			}
			select {
			case <-done:
				n.mu.Lock()
				err := n.err
				n.mu.Unlock()
				t.Fatalf("node %d exited (%v) before listening on %s:\n%s", n.ID, err, a, Tail(n.Log, 40))
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: %s not listening after 60s:\n%s", n.ID, a, Tail(n.Log, 40))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (n *Node) signal(sig syscall.Signal) {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(sig)
	}
}

// Pid is the node's process id (0 if it never started).
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Running reports whether the node's process is running.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Kill9 kills the node with SIGKILL and waits for it to be gone.
func (n *Node) Kill9() {
	n.c.Event("node %d: kill -9", n.ID)
	n.signal(syscall.SIGCONT)
	n.signal(syscall.SIGKILL)
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Stop sends SIGSTOP; Cont SIGCONT.
func (n *Node) Stop() { n.c.Event("node %d: SIGSTOP", n.ID); n.signal(syscall.SIGSTOP) }

func (n *Node) Cont() { n.c.Event("node %d: SIGCONT", n.ID); n.signal(syscall.SIGCONT) }

// Wipe removes the node's data directory (the node must not be running).
func (n *Node) Wipe() {
	n.c.Event("node %d: data directory wiped", n.ID)
	if err := os.RemoveAll(n.Data); err != nil {
		n.c.T.Fatal(err)
	}
}

// Terminate stops the node with SIGTERM; a node still running 30 s later
// gets SIGQUIT, so that its goroutine stacks land in its log, then
// SIGKILL. It fails the test in that case, or on a non-zero exit. It
// returns the time from SIGTERM to the exit.
func (n *Node) Terminate() time.Duration {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil || !n.Running() {
		return 0
	}
	n.signal(syscall.SIGCONT)
	start := time.Now()
	n.signal(syscall.SIGTERM)
	select {
	case <-done:
		took := time.Since(start)
		n.mu.Lock()
		err := n.err
		n.mu.Unlock()
		if err != nil {
			n.c.T.Errorf("node %d exited with %v after SIGTERM:\n%s", n.ID, err, Tail(n.Log, 30))
		}
		return took
	case <-time.After(30 * time.Second):
	}
	n.signal(syscall.SIGQUIT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		n.signal(syscall.SIGKILL)
		<-done
	}
	n.c.T.Errorf("node %d did not exit within 30s of SIGTERM; SIGQUIT sent, its goroutines are in %s\n%s", n.ID, n.Log, Goroutines(n.Log, 40))
	return time.Since(start)
}

// Goroutines digests the goroutine dump at the end of a log (a Go
// process's answer to SIGQUIT): the goroutines running Junction's code,
// those with the same state and stack counted once, each with the
// first lines of its stack, at most max of them. A shutdown that hangs
// in CI shows where without the log, which the test's temporary
// directory takes with it.
func Goroutines(path string, max int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	dump := string(b)
	if i := strings.LastIndex(dump, "SIGQUIT: quit"); i >= 0 {
		dump = dump[i:]
	} else {
		return "(no goroutine dump in the log)"
	}
	type kind struct {
		head string
		n    int
	}
	var order []string
	kinds := map[string]*kind{}
	for _, block := range strings.Split(dump, "\n\n") {
		if !strings.HasPrefix(block, "goroutine ") || !strings.Contains(block, "junctionmq/junction") {
			continue
		}
		lines := strings.Split(block, "\n")
		state := lines[0]
		if i, j := strings.Index(state, "["), strings.Index(state, "]"); i >= 0 && j > i {
			state = state[i : j+1]
		}
		var frames []string
		for _, l := range lines[1:] {
			if !strings.HasPrefix(l, "\t") { // function lines; files are indented
				if i := strings.LastIndex(l, "("); i > 0 && strings.HasSuffix(l, ")") {
					l = l[:i] // without the arguments, which differ
				}
				frames = append(frames, l)
			}
			if len(frames) == 8 {
				break
			}
		}
		key := state + " " + strings.Join(frames, " < ")
		k := kinds[key]
		if k == nil {
			k = &kind{head: state + "\n    " + strings.Join(frames, "\n    ")}
			kinds[key] = k
			order = append(order, key)
		}
		k.n++
	}
	var out strings.Builder
	for i, key := range order {
		if i == max {
			fmt.Fprintf(&out, "... %d more kinds\n", len(order)-max)
			break
		}
		fmt.Fprintf(&out, "%d× %s\n", kinds[key].n, kinds[key].head)
	}
	return out.String()
}

// Tail returns the last n lines of a file.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Grep returns the lines of a file that contain any of subs (at most
// max, the last ones).
func Grep(path string, max int, subs ...string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "cluster peer unreachable") || strings.Contains(sc.Text(), "the console and its API are open") {
			continue
		}
		for _, s := range subs {
			if strings.Contains(sc.Text(), s) {
				out = append(out, sc.Text())
				break
			}
		}
	}
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return strings.Join(out, "\n")
}

// Status is a node's /api/v1/cluster (the fields the tests read).
type Status struct {
	NodeID uint64        `json:"node_id"`
	Groups []GroupStatus `json:"groups"`
}

// GroupStatus is one group in a Status.
type GroupStatus struct {
	ID       uint64 `json:"id"`
	Leader   uint64 `json:"leader"`
	Term     uint64 `json:"term"`
	Commit   uint64 `json:"commit"`
	Applied  uint64 `json:"applied"`
	Active   bool   `json:"active"`
	Messages int    `json:"messages"`
}

// Status asks node id for its view of the cluster.
func (c *Cluster) Status(id uint64) (Status, error) {
	var s Status
	res, err := c.http.Get("http://" + c.Nodes[id].Addrs.Console + "/api/v1/cluster")
	if err != nil {
		return s, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return s, fmt.Errorf("GET /api/v1/cluster: %d %s", res.StatusCode, b)
	}
	return s, json.NewDecoder(res.Body).Decode(&s)
}

// healthy reports whether every running node knows a leader for every
// group, all agree on it and its term, and that leader serves the group.
func (c *Cluster) healthy() (map[uint64]uint64, string) {
	leaders := map[uint64]uint64{}
	terms := map[uint64]uint64{}
	for id, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		s, err := c.Status(id)
		if err != nil {
			return nil, fmt.Sprintf("node %d: %v", id, err)
		}
		if len(s.Groups) != Groups {
			return nil, fmt.Sprintf("node %d knows %d groups", id, len(s.Groups))
		}
		for _, g := range s.Groups {
			if g.Leader == 0 {
				return nil, fmt.Sprintf("node %d knows no leader of group %d", id, g.ID)
			}
			if l, ok := leaders[g.ID]; ok && (l != g.Leader || terms[g.ID] != g.Term) {
				return nil, fmt.Sprintf("group %d: leader %d term %d on one node, %d term %d on node %d", g.ID, l, terms[g.ID], g.Leader, g.Term, id)
			}
			leaders[g.ID], terms[g.ID] = g.Leader, g.Term
			if g.Leader == id && !g.Active {
				return nil, fmt.Sprintf("node %d leads group %d but does not serve it yet", id, g.ID)
			}
		}
	}
	return leaders, ""
}

// WaitHealthy waits until the running nodes agree on an active leader of
// every group, and returns the leaders.
func (c *Cluster) WaitHealthy(d time.Duration) map[uint64]uint64 {
	c.T.Helper()
	deadline := time.Now().Add(d)
	for {
		leaders, why := c.healthy()
		if why == "" {
			c.Event("healthy: leaders %v", leaders)
			return leaders
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("cluster not healthy after %v: %s\n%s", d, why, c.LogExcerpts())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// LogExcerpts returns, for every node, its warnings and errors (and the
// last lines of its log).
func (c *Cluster) LogExcerpts() string {
	var b strings.Builder
	for id := uint64(1); id <= uint64(len(c.Nodes)); id++ {
		n := c.Nodes[id]
		fmt.Fprintf(&b, "--- node %d (%s): warnings and errors (but peer unreachable), last 25\n%s\n--- node %d: last 5 lines\n%s\n", id, n.Log,
			Grep(n.Log, 25, `"level":"warn"`, `"level":"error"`, "panic", "fatal error", "SIGQUIT"), id, Tail(n.Log, 5))
	}
	return b.String()
}

// CreateQueue creates a durable anycast queue through a node's console
// (trying each node until one succeeds).
func (c *Cluster) CreateQueue(name string) {
	c.T.Helper()
	var last string
	for try := 0; try < 50; try++ {
		for id := uint64(1); id <= uint64(len(c.Nodes)); id++ {
			res, err := c.http.Post("http://"+c.Nodes[id].Addrs.Console+"/api/v1/queues", "application/json",
				strings.NewReader(fmt.Sprintf(`{"name":%q,"routingType":"anycast"}`, name)))
			if err != nil {
				last = err.Error()
				continue
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusCreated {
				c.Event("queue %s (group %d) created through node %d", name, GroupOf(name), id)
				return
			}
			last = fmt.Sprintf("node %d: %d %s", id, res.StatusCode, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.T.Fatalf("create queue %s: %s", name, last)
}

// Load returns a ledger.Load for the cluster's network with the brokers
// in the order the given nodes are listed and pick chooses the listener.
func (c *Cluster) Load(led *ledger.Ledger, stop <-chan struct{}, pick func(Addrs) string, order ...uint64) ledger.Load {
	var addrs []string
	for _, id := range order {
		addrs = append(addrs, pick(c.Nodes[id].Addrs))
	}
	l := ledger.Load{Addrs: addrs, Ledger: led, Stop: stop}
	if _, ok := c.Net.(*NetnsNet); ok {
		l.Dial = c.Net.Dial
	}
	return l
}

// Label replaces the nodes' listener addresses in s by n1/stomp etc.
func (c *Cluster) Label(s string) string {
	var r []string
	for id, n := range c.Nodes {
		for _, p := range []struct{ name, addr string }{{"stomp", n.Addrs.STOMP}, {"mqtt", n.Addrs.MQTT}, {"amqp", n.Addrs.AMQP}} {
			r = append(r, p.addr, fmt.Sprintf("n%d/%s", id, p.name))
		}
	}
	return strings.NewReplacer(r...).Replace(s)
}

// NodeOf returns the node one of whose listeners is addr (0 if none).
func (c *Cluster) NodeOf(addr string) uint64 {
	for id, n := range c.Nodes {
		if addr == n.Addrs.STOMP || addr == n.Addrs.MQTT || addr == n.Addrs.AMQP {
			return id
		}
	}
	return 0
}

func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := freeport.Addrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}
