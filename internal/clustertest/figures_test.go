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
	"sort"
	"strconv"
	"strings"
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
// before and after side by side.
func TestClusterFigures(t *testing.T) {
	s := os.Getenv("JUNCTION_CLUSTER_FIGURES")
	if s == "" {
		t.Skip("measurements: set JUNCTION_CLUSTER_FIGURES=runs (make cluster-bench)")
	}
	runs, err := strconv.Atoi(s)
	if err != nil || runs < 1 {
		t.Fatalf("JUNCTION_CLUSTER_FIGURES=%q", s)
	}
	dur := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("JUNCTION_CLUSTER_FIGURES_DURATION")); err == nil {
		dur = d
	}
	bin := Binary(t)
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
	fmt.Fprintf(&b, "medians of %d runs of %v each (4 producers, 4 consumers, 1 KiB, durable, window 16):\n", runs, dur)
	fmt.Fprintf(&b, "%-38s %10s %14s %12s %12s %12s %12s\n", "", "msgs/s", "CPU µs/msg", "confirm p50", "confirm p99", "commit p50", "commit p99")
	for _, name := range names {
		m := median(results[name])
		fmt.Fprintf(&b, "%-38s %10.0f %14.1f %10.2fms %10.2fms %12s %12s\n", name, m.rate, m.cpuPerMsg, m.confirmP50, m.confirmP99, ms(m.commitP50), ms(m.commitP99))
	}
	t.Log("\n" + b.String())
}

type figure struct {
	rate, cpuPerMsg                              float64 // confirmed msgs/s; broker CPU µs per confirmed message, summed over nodes
	confirmP50, confirmP99, commitP50, commitP99 float64 // ms
}

func (f figure) String() string {
	return fmt.Sprintf("%.0f msgs/s, %.1f µs CPU/msg, confirm p50 %.2f ms p99 %.2f ms, commit p50 %s p99 %s",
		f.rate, f.cpuPerMsg, f.confirmP50, f.confirmP99, ms(f.commitP50), ms(f.commitP99))
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
	return figure{
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

type benchResult struct {
	Confirmed int64   `json:"confirmed"`
	SendS     float64 `json:"send_s"`
	Confirm   struct {
		P50 float64 `json:"p50_us"`
		P99 float64 `json:"p99_us"`
	} `json:"confirm_latency"`
}

func runBench(t *testing.T, bin, addr, dest string, dur time.Duration, pids []int) figure {
	t.Helper()
	var before time.Duration
	for _, p := range pids {
		before += cpuTime(t, p)
	}
	out, err := exec.Command(bin, "bench", "--url", "stomp://"+addr, "--durable", "--duration", dur.String(),
		"--producers", "4", "--consumers", "4", "--destination", dest, "--json").Output()
	if err != nil {
		t.Fatalf("junction bench: %v\n%s", err, out)
	}
	var after time.Duration
	for _, p := range pids {
		after += cpuTime(t, p)
	}
	var r benchResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("junction bench output: %v\n%s", err, out)
	}
	if r.Confirmed == 0 {
		t.Fatalf("junction bench confirmed nothing:\n%s", out)
	}
	return figure{rate: float64(r.Confirmed) / r.SendS, cpuPerMsg: float64((after - before).Microseconds()) / float64(r.Confirmed),
		confirmP50: r.Confirm.P50 / 1000, confirmP99: r.Confirm.P99 / 1000}
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
	leaders := c.WaitHealthy(30 * time.Second)
	var pids []int
	for id := uint64(1); id <= 3; id++ {
		pids = append(pids, c.Nodes[id].Pid())
	}
	q := Queues()[0]
	leader := leaders[GroupOf(q)]
	for i, through := range []uint64{leader, leader%3 + 1} {
		h0 := c.commitHistogram(t)
		f := runBench(t, bin, c.Nodes[through].Addrs.STOMP, q, dur, pids)
		h := c.commitHistogram(t).minus(h0)
		f.commitP50, f.commitP99 = h.quantile(0.5)*1000, h.quantile(0.99)*1000
		c.Event("bench to group %d (led by %d) through node %d: %v", GroupOf(q), leader, through, f)
		if i == 0 {
			local = f
		} else {
			forwarded = f
		}
	}
	return local, forwarded
}

// histogram is a Prometheus histogram's cumulative bucket counts by
// upper bound.
type histogram map[float64]float64

// commitHistogram sums junction_cluster_commit_latency_seconds over the
// nodes (and their label sets).
func (c *Cluster) commitHistogram(t *testing.T) histogram {
	h := histogram{}
	for _, n := range c.Nodes {
		res, err := c.http.Get("http://" + n.Addrs.Console + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "junction_cluster_commit_latency_seconds_bucket{") {
				continue
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
		}
		res.Body.Close()
	}
	return h
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
