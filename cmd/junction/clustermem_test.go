package main

import "testing"

// TestClusterBudgets: a cluster node's default budget is a third of a
// single broker's (it holds each message about three times), a
// configured one is kept, and the Go memory limit covers the copies
// and every group's log.
func TestClusterBudgets(t *testing.T) {
	single := memoryBudget(0)
	b, g := clusterBudgets(0, 8)
	if b != single/clusterCopies {
		t.Fatalf("default cluster budget %d, want a third of %d", b, single)
	}
	if g != clusterCopies*b+8*clusterLogShare {
		t.Fatalf("Go budget %d for a default budget of %d and 8 groups", g, b)
	}
	b, g = clusterBudgets(96<<20, 3)
	if b != 96<<20 || g != 3*96<<20+3*32<<20 {
		t.Fatalf("configured 96 MiB, 3 groups: budget %d, Go budget %d", b, g)
	}
}
