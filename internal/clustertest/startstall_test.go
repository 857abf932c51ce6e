package clustertest

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStartsWithoutStall starts a 3-node cluster, then kills (kill -9)
// and restarts one node after another JUNCTION_START_ROUNDS times
// (skipped without it), and reports how long each restart took until the
// node listened, failing a round whose node logged "no answer from
// node": a request answered by a node whose forwarding connection to it
// was not up yet (its dialer backing off after the kill) lost its
// answer, and the restarted node's MQTT front-end, restoring its
// sessions, waited the whole request timeout (10 s) for it before it
// opened its listeners (cluster/links.go). JUNCTION_START_BIN runs
// another junction binary instead of this tree's (to compare with an
// earlier version); JUNCTION_START_SHOWLOG=1 logs each restart's log.
func TestStartsWithoutStall(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("JUNCTION_START_ROUNDS"))
	if n <= 0 {
		t.Skip("set JUNCTION_START_ROUNDS=N to restart a cluster's nodes N times")
	}
	bin := os.Getenv("JUNCTION_START_BIN")
	if bin == "" {
		bin = Binary(t)
	}
	c := StartBinary(t, NewDirectNet(t, 3), bin)
	var took []time.Duration
	stalls := 0
	for i := range min(n, 100) {
		node := c.Nodes[uint64(i%3+1)]
		node.Kill9()
		// Long enough for the others' dialers to back off to their
		// longest wait (a second).
		time.Sleep(2 * time.Second)
		var from int64
		if fi, err := os.Stat(node.Log); err == nil {
			from = fi.Size()
		}
		t0 := time.Now()
		node.Start(false)
		d := time.Since(t0)
		took = append(took, d)
		c.WaitHealthy(60 * time.Second)
		hits := grepFrom(node.Log, from, "no answer from node")
		if os.Getenv("JUNCTION_START_SHOWLOG") != "" {
			t.Log(grepFrom(node.Log, from, ""))
		}
		t.Logf("round %d: node %d restarted in %v", i, node.ID, d.Round(time.Millisecond))
		if hits != "" {
			stalls++
			t.Errorf("round %d: node %d waited for an answer that was lost (restart %v):\n%s", i, node.ID, d, hits)
		}
	}
	slices.Sort(took)
	if len(took) > 0 {
		t.Logf("%d restarts: median %v, max %v; %d with a lost answer", len(took), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), stalls)
	}
}

// grepFrom returns the lines of path from byte offset on that contain sub.
func grepFrom(path string, offset int64, sub string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b[min(offset, int64(len(b))):]), "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
