package clustertest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClusterFigures measures, side by side in one run, durable STOMP
// throughput (`junction bench --durable`, receipts) and broker CPU per
// confirmed message of a single broker and of a 3-node cluster (client
// on the group's leader, and on a follower that forwards), the confirm
// latency the clients see and the cluster's commit latency (from
// /metrics). It alternates the three set-ups JUNCTION_CLUSTER_FIGURES
// times (`make cluster-bench`) and logs each run and the medians. With
// JUNCTION_CLUSTER_FIGURES_BASE=path, the cluster is measured with the
// junction binary at path too (say, main's), in the same alternation:
// before and after side by side. Each run also reports each broker
// process's CPU per message and resident memory after the bench (a
// cluster's nodes in the order: the leader of the queue's group, the
// follower the second bench goes through, the other follower).
// JUNCTION_CLUSTER_FIGURES_DIR=dir puts the brokers' data directories
// under dir (say /dev/shm, a tmpfs: no fsync cost);
// JUNCTION_CLUSTER_FIGURES_CLIENTS=n runs n producers and n consumers
// (default 4).
func TestClusterFigures(t *testing.T) {
	s := os.Getenv("JUNCTION_CLUSTER_FIGURES")
	if s == "" {
		t.Skip("measurements: set JUNCTION_CLUSTER_FIGURES=runs (make cluster-bench)")
	}
	runs, err := strconv.Atoi(s)
	if err != nil || runs < 1 {
		t.Fatalf("JUNCTION_CLUSTER_FIGURES=%q", s)
	}
	dur := envDuration("JUNCTION_CLUSTER_FIGURES_DURATION", 10*time.Second)
	bin := Binary(t)
	where := figuresDir(t)
	base := os.Getenv("JUNCTION_CLUSTER_FIGURES_BASE")
	names := []string{"single node", "3 nodes, client on the leader", "3 nodes, client on a follower"}
	if base != "" {
		names = append(names, "base: 3 nodes, client on the leader", "base: 3 nodes, client on a follower")
	}
	results := map[string][]figure{}
	for run := range runs {
		if base != "" {
			t.Run(fmt.Sprintf("base%d", run), func(t *testing.T) {
				local, fwd := figuresCluster(t, base, bin, dur)
				results[names[3]] = append(results[names[3]], local)
				results[names[4]] = append(results[names[4]], fwd)
				t.Logf("%s: %v", names[3], local)
				t.Logf("%s: %v", names[4], fwd)
			})
		}
		t.Run(fmt.Sprintf("single%d", run), func(t *testing.T) {
			f := figuresSingle(t, bin, dur)
			results["single node"] = append(results["single node"], f)
			t.Logf("single node: %v", f)
		})
		t.Run(fmt.Sprintf("cluster%d", run), func(t *testing.T) {
			local, fwd := figuresCluster(t, bin, bin, dur)
			results["3 nodes, client on the leader"] = append(results["3 nodes, client on the leader"], local)
			results["3 nodes, client on a follower"] = append(results["3 nodes, client on a follower"], fwd)
			t.Logf("3 nodes, client on the leader: %v", local)
			t.Logf("3 nodes, client on a follower: %v", fwd)
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "medians of %d runs of %v each (%d producers, %[3]d consumers, 1 KiB, durable, window 16; data %s):\n", runs, dur, figuresClients(), where)
	fmt.Fprintf(&b, "%-38s %10s %14s %12s %12s %12s %12s %12s\n", "", "msgs/s", "CPU µs/msg", "confirm p50", "confirm p99", "commit p50", "commit p99", "RSS max")
	for _, name := range names {
		m := median(results[name])
		fmt.Fprintf(&b, "%-38s %10.0f %14.1f %10.2fms %10.2fms %12s %12s %10.0fMB\n", name, m.rate, m.cpuPerMsg, m.confirmP50, m.confirmP99, ms(m.commitP50), ms(m.commitP99), slices.Max(m.rss))
	}
	fmt.Fprintf(&b, "per process (the cluster's: the leader of the queue's group, the follower the second bench goes through, the other follower; RSS after the bench, the second on the nodes of the first):\n")
	fmt.Fprintf(&b, "%-38s %24s %24s\n", "", "CPU µs/msg", "RSS MB")
	for _, name := range names {
		m := median(results[name])
		fmt.Fprintf(&b, "%-38s %24s %24s\n", name, join(m.nodeCPU, "%.1f"), join(m.rss, "%.0f"))
	}
	t.Log("\n" + b.String())
}

// figuresClients is the bench's producers, and as many consumers:
// JUNCTION_CLUSTER_FIGURES_CLIENTS, default 4. With 4, each with 16
// sends unconfirmed, both set-ups are bound by their confirm latency
// (64 messages in flight); with more, by their CPU, and a cluster's
// entries carry more messages each.
func figuresClients() int {
	if n, err := strconv.Atoi(os.Getenv("JUNCTION_CLUSTER_FIGURES_CLIENTS")); err == nil && n > 0 {
		return n
	}
	return 4
}

// envDuration is the duration in the environment variable name, or def.
func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

type figure struct {
	rate, cpuPerMsg                              float64   // confirmed msgs/s; broker CPU µs per confirmed message, summed over nodes
	confirmP50, confirmP99, commitP50, commitP99 float64   // ms
	nodeCPU                                      []float64 // CPU µs per confirmed message of each broker process
	rss                                          []float64 // resident memory of each broker process after the bench, MB
}

func (f figure) String() string {
	return fmt.Sprintf("%.0f msgs/s, %.1f µs CPU/msg (per process %s), confirm p50 %.2f ms p99 %.2f ms, commit p50 %s p99 %s, RSS %s MB",
		f.rate, f.cpuPerMsg, join(f.nodeCPU, "%.1f"), f.confirmP50, f.confirmP99, ms(f.commitP50), ms(f.commitP99), join(f.rss, "%.0f"))
}

// join formats each of v with format, separated by slashes.
func join(v []float64, format string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(s, "/")
}

// ms formats milliseconds; NaN (no Raft: a single broker) as "-".
func ms(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2fms", v)
}

func median(fs []figure) figure {
	pick := func(get func(figure) float64) float64 {
		v := make([]float64, len(fs))
		for i, f := range fs {
			v[i] = get(f)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	each := func(get func(figure) []float64) []float64 {
		v := make([]float64, len(get(fs[0])))
		for i := range v {
			v[i] = pick(func(f figure) float64 { return get(f)[i] })
		}
		return v
	}
	return figure{
		nodeCPU:    each(func(f figure) []float64 { return f.nodeCPU }),
		rss:        each(func(f figure) []float64 { return f.rss }),
		rate:       pick(func(f figure) float64 { return f.rate }),
		cpuPerMsg:  pick(func(f figure) float64 { return f.cpuPerMsg }),
		confirmP50: pick(func(f figure) float64 { return f.confirmP50 }),
		confirmP99: pick(func(f figure) float64 { return f.confirmP99 }),
		commitP50:  pick(func(f figure) float64 { return f.commitP50 }),
		commitP99:  pick(func(f figure) float64 { return f.commitP99 }),
	}
}

// cpuTime is a process's user+system CPU time so far.
func cpuTime(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / 100 // USER_HZ
}

// rss is a process's resident memory (VmRSS) in bytes.
func rss(t *testing.T, pid int) int64 { return procStatus(t, pid, "VmRSS") }

// procStatus is a field of /proc/PID/status given in kB, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == field+":" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// rssMB is rss of each of pids, in MB.
func rssMB(t *testing.T, pids []int) []float64 {
	v := make([]float64, len(pids))
	for i, p := range pids {
		v[i] = float64(rss(t, p)) / 1e6
	}
	return v
}

// figuresDir applies JUNCTION_CLUSTER_FIGURES_DIR: the test's temporary
// directories, the brokers' data directories among them, are made under
// it (t.TempDir follows GOTMPDIR, else TMPDIR). It returns where they
// are, with the file system's type. Call it after Binary: the build
// stays where it is.
func figuresDir(t *testing.T) string {
	dir := os.Getenv("JUNCTION_CLUSTER_FIGURES_DIR")
	if dir == "" {
		if dir = os.Getenv("GOTMPDIR"); dir == "" {
			dir = os.TempDir()
		}
	} else {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			t.Fatalf("JUNCTION_CLUSTER_FIGURES_DIR=%q is not a directory (%v)", dir, err)
		}
		t.Setenv("TMPDIR", dir)
		t.Setenv("GOTMPDIR", dir) // which t.TempDir prefers
		if td := t.TempDir(); !strings.HasPrefix(td, filepath.Clean(dir)+"/") {
			t.Fatalf("JUNCTION_CLUSTER_FIGURES_DIR=%s: the test's temporary directories are made in %s", dir, filepath.Dir(td))
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	kind := fmt.Sprintf("file system type %#x", st.Type)
	switch st.Type {
	case 0x01021994:
		kind = "tmpfs"
	case 0xef53:
		kind = "ext4"
	case 0x58465342:
		kind = "xfs"
	case 0x9123683e:
		kind = "btrfs"
	case 0x794c7630:
		kind = "overlayfs"
	}
	return fmt.Sprintf("under %s (%s)", dir, kind)
}

type benchResult struct {
	Sent      int64   `json:"sent"`
	Stopped   string  `json:"stopped"`
	Confirmed int64   `json:"confirmed"`
	SendS     float64 `json:"send_s"`
	Confirm   struct {
		P50 float64 `json:"p50_us"`
		P99 float64 `json:"p99_us"`
	} `json:"confirm_latency"`
}

func runBench(t *testing.T, bin, addr, dest string, dur time.Duration, pids []int) figure {
	t.Helper()
	before := make([]time.Duration, len(pids))
	for i, p := range pids {
		before[i] = cpuTime(t, p)
	}
	out, err := exec.Command(bin, "bench", "--url", "stomp://"+addr, "--durable", "--duration", dur.String(),
		"--producers", strconv.Itoa(figuresClients()), "--consumers", strconv.Itoa(figuresClients()), "--destination", dest, "--json").Output()
	if err != nil {
		t.Fatalf("junction bench: %v\n%s", err, out)
	}
	var used time.Duration
	f := figure{nodeCPU: make([]float64, len(pids))}
	for i, p := range pids {
		d := cpuTime(t, p) - before[i]
		used += d
		f.nodeCPU[i] = float64(d.Microseconds())
	}
	f.rss = rssMB(t, pids)
	var r benchResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("junction bench output: %v\n%s", err, out)
	}
	if r.Confirmed == 0 {
		t.Fatalf("junction bench confirmed nothing:\n%s", out)
	}
	for i := range f.nodeCPU {
		f.nodeCPU[i] /= float64(r.Confirmed)
	}
	f.rate, f.cpuPerMsg = float64(r.Confirmed)/r.SendS, float64(used.Microseconds())/float64(r.Confirmed)
	f.confirmP50, f.confirmP99 = r.Confirm.P50/1000, r.Confirm.P99/1000
	return f
}

func figuresSingle(t *testing.T, bin string, dur time.Duration) figure {
	a := freeAddrs(t, 2)
	cmd := exec.Command(bin, "--data-dir", filepath.Join(t.TempDir(), "data"), "--stomp", a[0], "--console", a[1],
		"--mqtt", "", "--amqp", "", "--ws", "", "--all", "", "--log-level", "warn", "--connection-rate-per-ip", "0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	waitListen(t, a[0])
	f := runBench(t, bin, a[0], "fig.q", dur, []int{cmd.Process.Pid})
	f.commitP50, f.commitP99 = math.NaN(), math.NaN()
	return f
}

func waitListen(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(accepting(addr)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening after 30s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// figuresCluster runs the bench to a queue of group 1, once through its
// leader and once through another node (which forwards to the leader):
// nodes run nodeBin, the bench runs bin.
func figuresCluster(t *testing.T, nodeBin, bin string, dur time.Duration) (local, forwarded figure) {
	c := StartBinary(t, NewDirectNet(t, 3), nodeBin)
	q := Queues()[0]
	leader := c.WaitHealthy(30 * time.Second)[GroupOf(q)]
	follower := leader%3 + 1
	pids := c.pids(leader, follower, 6-leader-follower)
	local = c.bench(t, bin, leader, q, dur, pids)
	forwarded = c.bench(t, bin, follower, q, dur, pids)
	return local, forwarded
}

// bench runs the bench to queue q through node through, and adds the
// cluster's commit latency over it to the figure.
func (c *Cluster) bench(t *testing.T, bin string, through uint64, q string, dur time.Duration, pids []int) figure {
	h0 := c.commitHistogram(t)
	f := runBench(t, bin, c.Nodes[through].Addrs.STOMP, q, dur, pids)
	h := c.commitHistogram(t).minus(h0)
	f.commitP50, f.commitP99 = h.quantile(0.5)*1000, h.quantile(0.99)*1000
	c.Event("bench to %s (group %d) through node %d: %v", q, GroupOf(q), through, f)
	return f
}

// pids are the process ids of the nodes ids, in that order.
func (c *Cluster) pids(ids ...uint64) []int {
	var pids []int
	for _, id := range ids {
		pids = append(pids, c.Nodes[id].Pid())
	}
	return pids
}

// histogram is a Prometheus histogram's cumulative bucket counts by
// upper bound.
type histogram map[float64]float64

// commitHistogram sums junction_cluster_commit_latency_seconds over the
// nodes (and their label sets).
func (c *Cluster) commitHistogram(t *testing.T) histogram {
	h := histogram{}
	for id := range c.Nodes {
		c.scrape(t, id, func(line string) {
			if !strings.HasPrefix(line, "junction_cluster_commit_latency_seconds_bucket{") {
				return
			}
			i := strings.Index(line, `le="`)
			j := strings.Index(line[i+4:], `"`)
			le, err1 := strconv.ParseFloat(line[i+4:i+4+j], 64)
			if line[i+4:i+4+j] == "+Inf" {
				le, err1 = math.Inf(1), nil
			}
			f := strings.Fields(line)
			v, err2 := strconv.ParseFloat(f[len(f)-1], 64)
			if err1 == nil && err2 == nil {
				h[le] += v
			}
		})
	}
	return h
}

// scrape calls each with every line of node id's /metrics.
func (c *Cluster) scrape(t *testing.T, id uint64, each func(line string)) {
	t.Helper()
	res, err := c.http.Get("http://" + c.Nodes[id].Addrs.Console + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		each(sc.Text())
	}
}

// gauge is the value of an unlabelled metric of node id (NaN if absent).
func (c *Cluster) gauge(t *testing.T, id uint64, name string) float64 {
	v := math.NaN()
	c.scrape(t, id, func(line string) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			if x, err := strconv.ParseFloat(f[1], 64); err == nil {
				v = x
			}
		}
	})
	return v
}

func (h histogram) minus(o histogram) histogram {
	d := histogram{}
	for k, v := range h {
		d[k] = v - o[k]
	}
	return d
}

// quantile interpolates linearly within the bucket that holds q.
func (h histogram) quantile(q float64) float64 {
	var les []float64
	for k := range h {
		les = append(les, k)
	}
	sort.Float64s(les)
	if len(les) == 0 || h[les[len(les)-1]] == 0 {
		return math.NaN()
	}
	total := h[les[len(les)-1]]
	rank := q * total
	prevLe, prevN := 0.0, 0.0
	for _, le := range les {
		n := h[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				return prevLe
			}
			if n == prevN {
				return le
			}
			return prevLe + (le-prevLe)*(rank-prevN)/(n-prevN)
		}
		prevLe, prevN = le, n
	}
	return prevLe
}

func accepting(addrs ...string) []string {
	var open []string
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			open = append(open, a)
		}
	}
	return open
}

// TestClusterMemoryFigures measures a cluster node's memory (`make
// cluster-bench-memory`; JUNCTION_CLUSTER_FIGURES_MEMORY=runs), in two
// parts, each on a fresh 3-node cluster as TestClusterFigures starts it:
//
//   - bench: runs in a row of TestClusterFigures' durable bench
//     (JUNCTION_CLUSTER_FIGURES_DURATION each) through the leader of the
//     queue's group, everything sent consumed; each node's resident
//     memory after each run;
//   - backlog: the nodes' budget --max-memory
//     JUNCTION_CLUSTER_FIGURES_MAX_MEMORY (96MiB), two producers on a
//     queue of each group (through the group's leader: 1 KiB, durable,
//     window 16) and no consumers, for JUNCTION_CLUSTER_FIGURES_BACKLOG
//     (30s): the messages each group holds, second by second, and
//     whether and when its producers were made to wait (the count stops
//     rising); then each node's junction_memory_used_bytes and resident
//     memory (now and at its peak).
//
// JUNCTION_CLUSTER_FIGURES_BASE=path measures the cluster of the
// junction binary at path first, in each part (before and after);
// JUNCTION_CLUSTER_FIGURES_DIR as for TestClusterFigures.
func TestClusterMemoryFigures(t *testing.T) {
	s := os.Getenv("JUNCTION_CLUSTER_FIGURES_MEMORY")
	if s == "" {
		t.Skip("measurements: set JUNCTION_CLUSTER_FIGURES_MEMORY=runs (make cluster-bench-memory)")
	}
	runs, err := strconv.Atoi(s)
	if err != nil || runs < 1 {
		t.Fatalf("JUNCTION_CLUSTER_FIGURES_MEMORY=%q", s)
	}
	dur := envDuration("JUNCTION_CLUSTER_FIGURES_DURATION", 10*time.Second)
	backlog := envDuration("JUNCTION_CLUSTER_FIGURES_BACKLOG", 30*time.Second)
	budget := "96MiB"
	if b := os.Getenv("JUNCTION_CLUSTER_FIGURES_MAX_MEMORY"); b != "" {
		budget = b
	}
	bin := Binary(t)
	where := figuresDir(t)
	type version struct{ name, bin string }
	versions := []version{{"this", bin}}
	if base := os.Getenv("JUNCTION_CLUSTER_FIGURES_BASE"); base != "" {
		versions = []version{{"base", base}, {"this", bin}}
	}
	var b strings.Builder
	// go test -run 'TestClusterMemoryFigures/backlog' runs a part alone:
	// each part's heading comes with its first figures.
	heading := func(h string) func() {
		return func() {
			if h != "" {
				b.WriteString(h)
				h = ""
			}
		}
	}
	benchHeading := heading(fmt.Sprintf("resident memory of each node (the leader of the queue's group first), MB, after each of %d runs in a row of %v (%d producers, %[3]d consumers, 1 KiB, durable, window 16; data %s):\n", runs, dur, figuresClients(), where))
	for _, v := range versions {
		t.Run("bench-"+v.name, func(t *testing.T) {
			rows := memoryBenches(t, v.bin, bin, runs, dur)
			benchHeading()
			fmt.Fprintf(&b, "%-6s", v.name)
			for i, r := range rows {
				fmt.Fprintf(&b, "  after run %d: %s", i+1, join(r, "%.0f"))
			}
			b.WriteString("\n")
		})
	}
	backlogHeading := heading(fmt.Sprintf("backlog: --max-memory %s, 2 producers on a queue of each group (through its leader), no consumers, %v (data %s):\n", budget, backlog, where))
	for _, v := range versions {
		t.Run("backlog-"+v.name, func(t *testing.T) {
			r := memoryBacklog(t, v.bin, bin, budget, backlog)
			backlogHeading()
			fmt.Fprintf(&b, "%s:\n%s", v.name, r)
		})
	}
	t.Log("\n" + b.String())
}

// memoryBenches runs the bench runs times in a row on one cluster of
// nodeBin and returns each node's resident memory (MB) after each run,
// the leader of the queue's group first.
func memoryBenches(t *testing.T, nodeBin, bin string, runs int, dur time.Duration) [][]float64 {
	c := StartBinary(t, NewDirectNet(t, 3), nodeBin)
	q := Queues()[0]
	leader := c.WaitHealthy(30 * time.Second)[GroupOf(q)]
	follower := leader%3 + 1
	pids := c.pids(leader, follower, 6-leader-follower)
	var rows [][]float64
	for range runs {
		rows = append(rows, c.bench(t, bin, leader, q, dur, pids).rss)
	}
	return rows
}

// memoryBacklog runs the backlog part on a cluster of nodeBin with the
// budget maxMemory and returns its report.
func memoryBacklog(t *testing.T, nodeBin, bin, maxMemory string, dur time.Duration) string {
	c := start(t, NewDirectNet(t, 3), nodeBin, "max-memory: "+maxMemory+"\n")
	leaders := c.WaitHealthy(30 * time.Second)
	queues := Queues()
	held := func() []float64 {
		v := make([]float64, Groups)
		for g := uint64(1); g <= Groups; g++ {
			st, err := c.Status(leaders[g])
			if err != nil {
				t.Fatal(err)
			}
			for _, gs := range st.Groups {
				if gs.ID == g {
					v[g-1] = float64(gs.Messages)
				}
			}
		}
		return v
	}
	type sent struct {
		r   benchResult
		out []byte
		err error
	}
	results := make([]chan sent, Groups)
	for i, q := range queues {
		results[i] = make(chan sent, 1)
		addr := c.Nodes[leaders[GroupOf(q)]].Addrs.STOMP
		go func() {
			// Sends the brokers hold back are never confirmed: the bench
			// gives up on them 2 s (--drain) + 5 s (its grace) after
			// sending and says so (stopped), with a non-zero exit.
			out, err := exec.Command(bin, "bench", "--url", "stomp://"+addr, "--durable", "--duration", dur.String(),
				"--producers", "2", "--consumers", "0", "--destination", q, "--drain", "2s", "--json").Output()
			var s sent
			s.out, s.err = out, err
			if jerr := json.Unmarshal(out, &s.r); jerr != nil && s.err == nil {
				s.err = jerr
			}
			results[i] <- s
		}()
	}
	// The messages each group holds, every second while the producers
	// send.
	var samples [][]float64
	start := time.Now()
	for i := 0; time.Since(start) < dur; i++ {
		samples = append(samples, held())
		time.Sleep(time.Until(start.Add(time.Duration(i+1) * time.Second)))
	}
	var b strings.Builder
	for i, q := range queues {
		s := <-results[i]
		if s.r.Sent == 0 {
			t.Fatalf("junction bench to %s: %v\n%s", q, s.err, s.out)
		}
		g := GroupOf(q)
		counts := make([]float64, len(samples))
		for k := range samples {
			counts[k] = samples[k][g-1]
		}
		end := "every send confirmed"
		if s.r.Stopped != "" {
			end = fmt.Sprintf("sends still unconfirmed 7 s after sending ended (junction bench stopped: %s)", s.r.Stopped)
		}
		fmt.Fprintf(&b, "  group %d (%s, through node %d): %s; producers: %d confirmed, %s\n",
			g, q, leaders[g], waited(counts), s.r.Confirmed, end)
		c.Event("group %d held, second by second: %s", g, join(counts, "%.0f"))
	}
	fmt.Fprintf(&b, "  messages held per group at the end: %s\n", join(held(), "%.0f"))
	for id := uint64(1); id <= uint64(len(c.Nodes)); id++ {
		pid := c.Nodes[id].Pid()
		fmt.Fprintf(&b, "  node %d: junction_memory_used_bytes %.0f (%.1f MiB) of junction_memory_max_bytes %.0f; RSS %.0f MB, peak %.0f MB\n", id,
			c.gauge(t, id, "junction_memory_used_bytes"), c.gauge(t, id, "junction_memory_used_bytes")/(1<<20),
			c.gauge(t, id, "junction_memory_max_bytes"), float64(rss(t, pid))/1e6, float64(procStatus(t, pid, "VmHWM"))/1e6)
	}
	return b.String()
}

// waited describes a group's message count, sampled every second while
// its producers sent: the rate at which it grew, and whether it stopped
// growing (the producers made to wait) from some second to the end
// (every later second's growth under 2% of the fastest second's).
func waited(counts []float64) string {
	var peak float64
	for k := 1; k < len(counts); k++ {
		peak = max(peak, counts[k]-counts[k-1])
	}
	full := len(counts)
	for full > 1 && counts[full-1]-counts[full-2] <= peak/50 {
		full--
	}
	last := counts[len(counts)-1]
	if peak == 0 {
		return fmt.Sprintf("%.0f messages, never grew in %ds", last, len(counts)-1)
	}
	if full == len(counts) {
		return fmt.Sprintf("%.0f messages after %ds, never stopped growing (fastest %.0f msgs/s)", last, len(counts)-1, peak)
	}
	rateBefore := (counts[full-1] - counts[0]) / float64(full-1)
	rateAfter := (last - counts[full-1]) / float64(len(counts)-full)
	return fmt.Sprintf("held %.0f messages from second %d (%.0f msgs/s before, fastest %.0f); then %.1f msgs/s for %ds, to %.0f",
		counts[full-1], full-1, rateBefore, peak, rateAfter, len(counts)-full, last)
}
