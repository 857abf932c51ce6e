package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/junctionmq/junction/cluster"
	"github.com/junctionmq/junction/management"
)

// TestClusterHelp: `junction cluster -h`, which the top-level usage
// names, prints the cluster commands and succeeds (it was "bad command
// line", exit 2).
func TestClusterHelp(t *testing.T) {
	for _, h := range []string{"-h", "--help", "help"} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), []string{"cluster", h}, func(string) string { return "" }, &out, &errs); err != nil {
			t.Fatalf("junction cluster %s: %v", h, err)
		}
		if !strings.Contains(out.String(), "junction cluster add ID HOST:PORT") {
			t.Fatalf("junction cluster %s printed %q", h, out.String())
		}
	}
}

// TestClusterCommandsOnASingleBroker: `junction cluster status` against
// a broker that is no cluster node says so (it said "no such endpoint:
// /api/v1/cluster (HTTP 404)").
func TestClusterCommandsOnASingleBroker(t *testing.T) {
	startServe(t, testConfig(t))
	console := lastInstance.addrs["console"].String()
	for _, args := range [][]string{{"cluster", "status"}, {"cluster", "remove", "2"}, {"cluster", "add", "4", "127.0.0.1:1"}} {
		var out, errs bytes.Buffer
		err := run(context.Background(), append(args, "--console", console), func(string) string { return "" }, &out, &errs)
		if err == nil || !strings.Contains(err.Error(), "is not a cluster node") {
			t.Fatalf("junction %s on a single broker: %v", strings.Join(args, " "), err)
		}
	}
}

// TestMemberRefusalIs409: the cluster's refusals of a membership change
// reach the API as management.ErrMemberRefused (409), in their own words;
// other failures stay what they are (500).
func TestMemberRefusalIs409(t *testing.T) {
	refused := memberError(fmt.Errorf("%w: node 9 is not a member of any group", cluster.ErrMembershipRefused))
	if !errors.Is(refused, management.ErrMemberRefused) || !errors.Is(refused, cluster.ErrMembership) {
		t.Fatalf("%v: not a refusal for the API", refused)
	}
	if got, want := refused.Error(), "cluster: membership change refused: node 9 is not a member of any group"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	failed := memberError(fmt.Errorf("%w: group 1 has no leader", cluster.ErrMembership))
	if errors.Is(failed, management.ErrMemberRefused) {
		t.Fatalf("%v: a failure taken for a refusal", failed)
	}
}

// TestClusterStatusShowsPeersThatDiffer: `junction cluster status` says
// which peers' parameters differ, refused or only warned about, and when
// the node is out of the cluster.
func TestClusterStatusShowsPeersThatDiffer(t *testing.T) {
	var b strings.Builder
	printClusterStatus(&b, cluster.Status{NodeID: 4, Members: map[uint64]string{4: "h4:7100"},
		OutOfCluster: "node 4 is not part of the cluster: node 1 has 8 groups, this node 16",
		Peers: []cluster.PeerConfig{
			{Node: 1, Refused: true, Problems: []string{"node 1 has 8 groups, this node 16"}},
			{Node: 2, Problems: []string{"node 2's diverts differ from this node's"}},
		}})
	out := b.String()
	for _, want := range []string{
		"OUT OF THE CLUSTER: node 4 is not part of the cluster",
		"node 1: REFUSED: node 1 has 8 groups, this node 16",
		"node 2: configuration differs (warning): node 2's diverts differ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}
