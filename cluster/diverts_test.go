package cluster

import (
	"errors"
	"testing"

	"github.com/junctionmq/junction/core"
)

// A cluster node refuses diverts, saying why, rather than keeping one
// that nothing applies.
func TestClusterRefusesDiverts(t *testing.T) {
	c := startCluster(t, 3, 2)
	err := c.access[0].CreateDivert(core.Divert{Name: "d", Address: "a", ForwardingAddress: "b"})
	if !errors.Is(err, core.ErrNotInCluster) {
		t.Fatalf("CreateDivert on a cluster node: %v, want ErrNotInCluster", err)
	}
	if err := c.access[0].DeleteDivert("d"); !errors.Is(err, core.ErrNotInCluster) {
		t.Fatalf("DeleteDivert on a cluster node: %v, want ErrNotInCluster", err)
	}
	if _, err := core.New(core.Config{Cluster: c.nodes[0].Cluster(), VirtualTopics: true}); !errors.Is(err, core.ErrNotInCluster) {
		t.Fatalf("an access broker with virtual topics: %v, want ErrNotInCluster", err)
	}
}
