package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A node started with another --cluster-groups than the cluster's and
// added with `junction cluster add` is refused: the add fails within a
// few seconds saying how the node differs, and leaves it in no group;
// the node says (junction cluster status, /api/v1/cluster) that it is
// out of the cluster, /readyz says it is not ready, and its log tells
// each peer's refusal once.
func TestClusterRefusesANodeWithOtherGroups(t *testing.T) {
	rounds(t) // with the scenarios (make cluster-test): once, it is deterministic
	c := Start(t, NewDirectNet(t, 3))
	bin := Binary(t)
	a := freeAddrs(t, 5)
	n4 := Addrs{a[0], a[1], a[2], a[3], a[4]}
	var peers []string
	for id := uint64(1); id <= 3; id++ {
		peers = append(peers, fmt.Sprintf("%d=%s", id, c.Nodes[id].Addrs.Cluster))
	}
	logPath := filepath.Join(c.Dir, "node-4.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--data-dir", filepath.Join(c.Dir, "data-4"),
		"--stomp", n4.STOMP, "--mqtt", n4.MQTT, "--amqp", n4.AMQP, "--console", n4.Console,
		"--ws", "", "--all", "", "--log-format", "json", "--log-level", "info",
		"--cluster-node-id", "4", "--cluster-listen", n4.Cluster, "--cluster-peers", strings.Join(peers, ","),
		"--cluster-insecure", "--cluster-groups", fmt.Sprint(Groups+2), "--cluster-election-timeout", "1s", "--cluster-join")
	cmd.Env = append(os.Environ(), "JUNCTION_CLUSTER_SECRET="+Secret)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("node 4's log:\n%s", Tail(logPath, 60))
		}
	}()
	c.Event("node 4: started with %d groups, joining", Groups+2)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, bin, "cluster", "add", "4", n4.Cluster, "--console", c.Nodes[1].Addrs.Console).CombinedOutput()
	took := time.Since(t0)
	c.Event("junction cluster add 4: %v after %v: %s", err, took, out)
	want := fmt.Sprintf("node 4 has %d groups, this node %d", Groups+2, Groups)
	if err == nil || !strings.Contains(string(out), "node 4 was not added") || !strings.Contains(string(out), want) {
		t.Fatalf("junction cluster add of a node with other groups (after %v): %v: %s", took, err, out)
	}
	if took > 15*time.Second {
		t.Errorf("the refusal took %v", took)
	}
	for id := uint64(1); id <= 3; id++ {
		st, err := c.Status(id)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Groups) != Groups {
			t.Errorf("node %d has %d groups", id, len(st.Groups))
		}
	}
	var full struct {
		Groups []struct {
			ID       uint64   `json:"id"`
			Voters   []uint64 `json:"voters"`
			Learners []uint64 `json:"learners"`
		} `json:"groups"`
	}
	getJSON(t, c, c.Nodes[1].Addrs.Console, &full)
	for _, g := range full.Groups {
		for _, m := range append(g.Voters, g.Learners...) {
			if m == 4 {
				t.Errorf("group %d still has node 4: voters %v learners %v", g.ID, g.Voters, g.Learners)
			}
		}
	}

	// Node 4 knows it is out of the cluster, and says so.
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := c.Net.Dial(context.Background(), n4.Console)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("node 4 exited")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 4's console not listening after 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.Event("node 4: console listening")
	var st4 struct {
		Out   string `json:"out_of_cluster"`
		Peers []struct {
			Node    uint64 `json:"node"`
			Refused bool   `json:"refused"`
		} `json:"peer_config"`
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		getJSON(t, c, n4.Console, &st4)
		if st4.Out != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(st4.Out, fmt.Sprintf("has %d groups, this node %d", Groups, Groups+2)) || len(st4.Peers) != 3 {
		t.Errorf("node 4's status: out of cluster %q, peers %+v", st4.Out, st4.Peers)
	}
	res, err := c.http.Get("http://" + n4.Console + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("node 4's /readyz: %d, want 503", res.StatusCode)
	}
	out, err = exec.Command(bin, "cluster", "status", "--console", n4.Console).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OUT OF THE CLUSTER") || !strings.Contains(string(out), "node 1: REFUSED") {
		t.Errorf("junction cluster status on node 4: %v:\n%s", err, out)
	}
	for id := uint64(1); id <= 3; id++ {
		lines := Grep(logPath, 100, "cluster peer refused")
		if k := strings.Count(lines, fmt.Sprintf(`"peer":%d,`, id)); k != 1 {
			t.Errorf("node 4 logged node %d's refusal %d times:\n%s", id, k, lines)
		}
	}
}

func getJSON(t *testing.T, c *Cluster, console string, v any) {
	t.Helper()
	res, err := c.http.Get("http://" + console + "/api/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
