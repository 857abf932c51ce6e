package management_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/management"
)

// fakeCluster is a node whose counters the test sets.
type fakeCluster struct{ m management.ClusterMetrics }

func (f fakeCluster) Status() any                                     { return nil }
func (f fakeCluster) AddMember(context.Context, uint64, string) error { return nil }
func (f fakeCluster) RemoveMember(context.Context, uint64) error      { return nil }
func (f fakeCluster) Metrics() management.ClusterMetrics              { return f.m }

func TestClusterMetrics(t *testing.T) {
	b, err := core.New(core.Config{ExpiryScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	c := fakeCluster{management.ClusterMetrics{ForwardedOut: 7, ForwardedIn: 5, FencedConnections: 3, LinkResets: 2,
		Groups: []management.ClusterGroupMetrics{{ID: 2, SnapshotBytes: 4096, LogBytes: 1234}}}}
	srv := httptest.NewServer(management.New(management.Config{Cluster: c}, b))
	t.Cleanup(func() {
		srv.Close()
		b.Close()
	})
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`junction_cluster_forwarded_total{direction="out"} 7`,
		`junction_cluster_forwarded_total{direction="in"} 5`,
		"junction_cluster_fenced_connections_total 3",
		"junction_cluster_link_resets_total 2",
		`junction_cluster_snapshot_bytes{group="2"} 4096`,
		`junction_cluster_log_bytes{group="2"} 1234`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("no %s in /metrics", want)
		}
	}
}
