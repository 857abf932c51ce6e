package cluster

import (
	"fmt"
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
