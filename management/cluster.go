package management

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrMemberRefused marks a membership change refused as asked; the API
// answers it 409, where a change that failed (no leader, a timeout) is
// 500.
var ErrMemberRefused = errors.New("membership change refused")

// ClusterAdmin is what the API needs of a cluster node (cmd adapts the
// cluster package's Node; management imports nothing but core).
type ClusterAdmin interface {
	// Status is the node's view of the cluster, served as JSON.
	Status() any
	// AddMember adds a node to every group; RemoveMember removes one.
	// A change refused as asked (the node is a member already, or is
	// none) returns an error wrapping ErrMemberRefused (409).
	AddMember(ctx context.Context, id uint64, addr string) error
	RemoveMember(ctx context.Context, id uint64) error
	// Metrics are the node's cluster counters, for /metrics.
	Metrics() ClusterMetrics
}

// ClusterMetrics are a node's cluster counters.
type ClusterMetrics struct {
	ForwardedOut, ForwardedIn uint64
	FencedConnections         uint64 // client connections reset by the fence
	LinkResets                uint64 // forwarding links reset (everything with a peer)
	Groups                    []ClusterGroupMetrics
}

// ClusterGroupMetrics are one group's, as this node sees it.
type ClusterGroupMetrics struct {
	ID                  uint64
	Leader              bool // this node leads the group
	LeaderChanges       uint64
	Term, Commit        uint64
	ApplyLag            uint64
	Messages            int
	SnapshotBytes       int64     // the latest durable snapshot's size on this node
	LogBytes            uint64    // the entries the group's log holds after it
	CommitLatencyBounds []float64 // seconds, increasing
	CommitLatencyCounts []uint64  // per bucket; one more than bounds (above the last)
	CommitLatencySum    float64
	CommitLatencyCount  uint64
}

// membershipTimeout bounds an add or remove made through the API.
const membershipTimeout = 2 * time.Minute

func (s *Server) clusterRoutes() {
	if s.cfg.Cluster == nil {
		s.notClusterRoutes()
		return
	}
	s.route("/cluster", map[string]http.HandlerFunc{"GET": s.getCluster})
	s.route("/cluster/members", map[string]http.HandlerFunc{"POST": s.addMember})
	s.route("/cluster/members/{id}", map[string]http.HandlerFunc{"DELETE": s.removeMember})
}

func (s *Server) getCluster(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.cfg.Cluster.Status())
}

type memberRequest struct {
	ID      uint64 `json:"id"`
	Address string `json:"address"`
}

func (s *Server) addMember(w http.ResponseWriter, r *http.Request) {
	var req memberRequest
	if !decode(w, r, &req) {
		return
	}
	if req.ID == 0 || req.Address == "" {
		writeError(w, http.StatusBadRequest, "a member needs an id and an address")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), membershipTimeout)
	defer cancel()
	if err := s.cfg.Cluster.AddMember(ctx, req.ID, req.Address); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info().Uint64("member", req.ID).Str("address", req.Address).Msg("cluster member added")
	writeJSON(w, http.StatusOK, s.cfg.Cluster.Status())
}

func (s *Server) removeMember(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		writeError(w, http.StatusBadRequest, "the member id must be a positive number")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), membershipTimeout)
	defer cancel()
	if err := s.cfg.Cluster.RemoveMember(ctx, id); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info().Uint64("member", id).Msg("cluster member removed")
	w.WriteHeader(http.StatusNoContent)
}

// clusterCollector serves a node's cluster metrics.
type clusterCollector struct {
	c ClusterAdmin

	leader, leaderChanges, term, commit, applyLag, messages, snapshotBytes, logBytes, forwarded, fenced, linkResets, commitLatency *prometheus.Desc
}

func newClusterCollector(c ClusterAdmin) *clusterCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("junction_cluster_"+name, help, labels, nil)
	}
	return &clusterCollector{c: c,
		leader:        d("group_leader", "1 while this node leads the group, else 0.", "group"),
		leaderChanges: d("leader_changes_total", "Leader changes of the group this node has seen.", "group"),
		term:          d("group_term", "The group's Raft term as this node knows it.", "group"),
		commit:        d("group_commit_index", "The group's commit index as this node knows it.", "group"),
		applyLag:      d("apply_lag_entries", "Committed entries of the group not yet applied on this node.", "group"),
		messages:      d("group_messages", "Live message records in the group's state on this node.", "group"),
		snapshotBytes: d("snapshot_bytes", "Size of the group's latest durable snapshot on this node (0: none yet).", "group"),
		logBytes:      d("log_bytes", "Size of the entries the group's Raft log holds on this node after its latest snapshot.", "group"),
		forwarded:     d("forwarded_total", "Client operations forwarded between nodes: out (sent by this node's clients to other nodes' groups) and in (served here for other nodes).", "direction"),
		fenced:        d("fenced_connections_total", "Client connections this node reset because it lost the majority's contact while they held deliveries another node may make again (the fence)."),
		linkResets:    d("link_resets_total", "Times this node reset its forwarding link with a peer (a frame lost, a restarted or silent peer): operations in flight on it failed as unknown and its consumers re-attached."),
		commitLatency: d("commit_latency_seconds", "Time from a group broker's write to its commit on a majority, for the groups this node led.", "group"),
	}
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leader, c.leaderChanges, c.term, c.commit, c.applyLag, c.messages, c.snapshotBytes, c.logBytes, c.forwarded, c.fenced, c.linkResets, c.commitLatency} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.c.Metrics()
	v := func(d *prometheus.Desc, t prometheus.ValueType, x float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, x, labels...)
	}
	v(c.forwarded, prometheus.CounterValue, float64(m.ForwardedOut), "out")
	v(c.forwarded, prometheus.CounterValue, float64(m.ForwardedIn), "in")
	v(c.fenced, prometheus.CounterValue, float64(m.FencedConnections))
	v(c.linkResets, prometheus.CounterValue, float64(m.LinkResets))
	for _, g := range m.Groups {
		id := strconv.FormatUint(g.ID, 10)
		lead := 0.0
		if g.Leader {
			lead = 1
		}
		v(c.leader, prometheus.GaugeValue, lead, id)
		v(c.leaderChanges, prometheus.CounterValue, float64(g.LeaderChanges), id)
		v(c.term, prometheus.GaugeValue, float64(g.Term), id)
		v(c.commit, prometheus.GaugeValue, float64(g.Commit), id)
		v(c.applyLag, prometheus.GaugeValue, float64(g.ApplyLag), id)
		v(c.messages, prometheus.GaugeValue, float64(g.Messages), id)
		v(c.snapshotBytes, prometheus.GaugeValue, float64(g.SnapshotBytes), id)
		v(c.logBytes, prometheus.GaugeValue, float64(g.LogBytes), id)
		buckets := make(map[float64]uint64, len(g.CommitLatencyBounds))
		var cum uint64
		for i, b := range g.CommitLatencyBounds {
			if i < len(g.CommitLatencyCounts) {
				cum += g.CommitLatencyCounts[i]
			}
			buckets[b] = cum
		}
		ch <- prometheus.MustNewConstHistogram(c.commitLatency, g.CommitLatencyCount, g.CommitLatencySum, buckets, id)
	}
}
