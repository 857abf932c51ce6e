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
