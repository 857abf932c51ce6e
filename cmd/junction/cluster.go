package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/cluster"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/management"
)

// ClusterConfig makes the broker a node of a replicated cluster
// (package cluster). Without a node id the broker is a single broker.
type ClusterConfig struct {
	// NodeID is this node's id, unique in the cluster and never reused.
	NodeID uint64 `yaml:"node-id"`
	// Listen is the address other nodes reach this one at (host:port).
	Listen string `yaml:"listen"`
	// Peers lists the other members as "ID=HOST:PORT,..." (this node's
	// own entry may be included; it must then match Listen).
	Peers string `yaml:"peers"`
	// Groups is the number of Raft groups addresses are spread over;
	// fixed when the cluster is created.
	Groups int `yaml:"groups"`
	// Join: with an empty data directory, wait to be added to a running
	// cluster (junction cluster add) instead of founding one.
	Join bool `yaml:"join"`
	// ElectionTimeout: a group whose leader is silent this long elects
	// another (randomised up to twice this).
	ElectionTimeout time.Duration `yaml:"election-timeout"`
	// SecretFile holds the cluster secret (JUNCTION_CLUSTER_SECRET may
	// hold it instead); every node must have the same.
	SecretFile string `yaml:"secret-file"`
	// Cert and Key are this node's certificate (server and client use,
	// from `junction cert dev --node ID`), CA the cluster's CA.
	Cert string `yaml:"tls-cert"`
	Key  string `yaml:"tls-key"`
	CA   string `yaml:"tls-ca"`
	// Insecure lets nodes talk in plain TCP (no certificates): for tests
	// on loopback or in network namespaces only.
	Insecure bool `yaml:"insecure"`
}

func (c ClusterConfig) enabled() bool { return c.NodeID != 0 }

var clusterOptions = []option{
	uintOpt("cluster-node-id", "cluster.node-id", "this node's id in a cluster (0: no cluster, a single broker)", func(c *Config) *uint64 { return &c.Cluster.NodeID }),
	stringOpt("cluster-listen", "cluster.listen", "address other cluster nodes reach this one at (host:port)", func(c *Config) *string { return &c.Cluster.Listen }),
	stringOpt("cluster-peers", "cluster.peers", "the other members, ID=HOST:PORT,... (the same list on every node of a new cluster)", func(c *Config) *string { return &c.Cluster.Peers }),
	intOpt("cluster-groups", "cluster.groups", "Raft groups that addresses are spread over (fixed when the cluster is created)", func(c *Config) *int { return &c.Cluster.Groups }),
	boolOpt("cluster-join", "cluster.join", "with an empty data directory, wait to be added to a running cluster instead of founding one", func(c *Config) *bool { return &c.Cluster.Join }),
	durationOpt("cluster-election-timeout", "cluster.election-timeout", "a group whose leader is silent this long elects another", func(c *Config) *time.Duration { return &c.Cluster.ElectionTimeout }),
	stringOpt("cluster-secret-file", "cluster.secret-file", "file holding the cluster secret (or set JUNCTION_CLUSTER_SECRET)", func(c *Config) *string { return &c.Cluster.SecretFile }),
	stringOpt("cluster-tls-cert", "cluster.tls-cert", "this node's certificate for links between nodes (junction cert dev --node ID)", func(c *Config) *string { return &c.Cluster.Cert }),
	stringOpt("cluster-tls-key", "cluster.tls-key", "PEM private key of --cluster-tls-cert", func(c *Config) *string { return &c.Cluster.Key }),
	stringOpt("cluster-tls-ca", "cluster.tls-ca", "the cluster's CA: node certificates are verified against it", func(c *Config) *string { return &c.Cluster.CA }),
	boolOpt("cluster-insecure", "cluster.insecure", "links between nodes in plain TCP, no certificates (tests on loopback only)", func(c *Config) *bool { return &c.Cluster.Insecure }),
}

func uintOpt(name, path, usage string, field func(*Config) *uint64) option {
	return option{name, path, usage,
		func(c *Config, v string) error {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return fmt.Errorf("invalid number %q", v)
			}
			*field(c) = n
			return nil
		},
		func(c *Config) string { return strconv.FormatUint(*field(c), 10) }}
}

// parsePeers reads "ID=HOST:PORT,...".
func parsePeers(s string) (map[uint64]string, error) {
	peers := map[uint64]string{}
	for _, p := range commaList(s) {
		id, addr, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("peer %q: want ID=HOST:PORT", p)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("peer %q: the id must be a positive number", p)
		}
		addr = strings.TrimSpace(addr)
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("peer %q: %v", p, err)
		}
		if _, dup := peers[n]; dup {
			return nil, fmt.Errorf("peer %d named twice", n)
		}
		peers[n] = addr
	}
	return peers, nil
}

func (c *ClusterConfig) validate(bad func(path, format string, args ...any)) {
	if !c.enabled() {
		return
	}
	if c.Listen == "" {
		bad("cluster.listen", "a cluster node needs an address the others reach it at")
	} else if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("cluster.listen", "not a host:port address: %v", err)
	}
	peers, err := parsePeers(c.Peers)
	if err != nil {
		bad("cluster.peers", "%v", err)
	}
	if a, ok := peers[c.NodeID]; ok && a != c.Listen {
		bad("cluster.peers", "names this node (%d) at %s, but cluster.listen is %s", c.NodeID, a, c.Listen)
	}
	if len(peers) == 0 && !c.Join {
		bad("cluster.peers", "a new cluster needs its members (at least 3 for a majority to survive one loss)")
	}
	if c.Groups < 1 || c.Groups > 250 {
		bad("cluster.groups", "must be between 1 and 250")
	}
	if c.ElectionTimeout < 200*time.Millisecond {
		bad("cluster.election-timeout", "must be at least 200ms")
	}
	if c.Insecure {
		if c.Cert != "" {
			bad("cluster.insecure", "insecure and a node certificate do not go together")
		}
	} else if c.Cert == "" || c.Key == "" || c.CA == "" {
		bad("cluster.tls-cert", "links between nodes need tls-cert, tls-key and tls-ca (junction cert dev --node ID), or insecure for tests")
	}
}

// clusterSecret reads the secret from JUNCTION_CLUSTER_SECRET or the
// secret file.
func clusterSecret(c ClusterConfig, getenv func(string) string) ([]byte, error) {
	if s := getenv("JUNCTION_CLUSTER_SECRET"); s != "" {
		return []byte(s), nil
	}
	if c.SecretFile == "" {
		return nil, errors.New("cluster: no secret: set JUNCTION_CLUSTER_SECRET or --cluster-secret-file")
	}
	b, err := os.ReadFile(c.SecretFile)
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if len(s) < 16 {
		return nil, errors.New("cluster secret: at least 16 characters, please (32 random bytes are better)")
	}
	return []byte(s), nil
}

// clusterTLS loads the node certificate and the cluster CA.
func clusterTLS(c ClusterConfig) (*tls.Config, error) {
	if c.Insecure {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		return nil, fmt.Errorf("cluster node certificate: %w", err)
	}
	pem, err := os.ReadFile(c.CA)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("cluster CA %s: no certificate found", c.CA)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool, MinVersion: tls.VersionTLS13}, nil
}

// startCluster starts this broker's cluster node; bcfg is the template
// of its group brokers.
func startCluster(cfg Config, bcfg core.Config, getenv func(string) string, log zerolog.Logger) (*cluster.Node, error) {
	c := cfg.Cluster
	peers, err := parsePeers(c.Peers)
	if err != nil {
		return nil, err
	}
	delete(peers, c.NodeID)
	secret, err := clusterSecret(c, getenv)
	if err != nil {
		return nil, err
	}
	tc, err := clusterTLS(c)
	if err != nil {
		return nil, err
	}
	tick := 100 * time.Millisecond
	if c.ElectionTimeout < 10*tick {
		tick = c.ElectionTimeout / 10
	}
	return cluster.New(cluster.Config{
		NodeID: c.NodeID, Listen: c.Listen, Peers: peers, Groups: c.Groups, Join: c.Join,
		TLS: tc, Secret: secret, Dir: filepath.Join(cfg.DataDir, "cluster"),
		Tick: tick, ElectionTicks: int(c.ElectionTimeout / tick),
		MaxMessageBytes: clusterMaxMessage(cfg),
		Broker:          bcfg,
		Logger:          log,
	})
}

// clusterMaxMessage is the largest message a node must store: the
// largest any of its front-ends accepts. A cluster does not stream large
// bodies (each front-end reads them whole, within its frame or message
// limit), and a WebSocket message carries the same protocols' frames.
func clusterMaxMessage(cfg Config) int {
	return int(slices.Max([]ByteSize{cfg.Stomp.MaxFrameSize, cfg.MQTT.MaxPacketSize, cfg.AMQP.MaxMessageSize, min(cfg.WebSocket.MaxMessageSize, 10<<20+64<<10)}))
}

// clusterAdmin adapts a cluster node to the management API.
type clusterAdmin struct{ n *cluster.Node }

func (a clusterAdmin) Status() any { return a.n.Status() }
func (a clusterAdmin) AddMember(ctx context.Context, id uint64, addr string) error {
	return memberError(a.n.AddMember(ctx, id, addr))
}
func (a clusterAdmin) RemoveMember(ctx context.Context, id uint64) error {
	return memberError(a.n.RemoveMember(ctx, id))
}

// memberError marks the cluster's refusals for the API (409, not 500).
func memberError(err error) error {
	if errors.Is(err, cluster.ErrMembershipRefused) {
		return memberRefused{err}
	}
	return err
}

// memberRefused is a refusal of the cluster's, with its own words, that
// the API knows as management.ErrMemberRefused.
type memberRefused struct{ err error }

func (r memberRefused) Error() string   { return r.err.Error() }
func (r memberRefused) Unwrap() []error { return []error{management.ErrMemberRefused, r.err} }
func (a clusterAdmin) Metrics() management.ClusterMetrics {
	st := a.n.Status()
	m := management.ClusterMetrics{ForwardedOut: st.ForwardedOut, ForwardedIn: st.ForwardedIn, FencedConnections: st.FencedConnections, LinkResets: st.LinkResets}
	for _, g := range st.Groups {
		m.Groups = append(m.Groups, management.ClusterGroupMetrics{
			ID: g.ID, Leader: g.ID != 0 && g.Leader == st.NodeID, LeaderChanges: g.LeaderChanges,
			Term: g.Term, Commit: g.Commit, ApplyLag: g.ApplyLag, Messages: g.Messages,
			SnapshotBytes: g.SnapshotBytes, LogBytes: g.LogBytes,
			CommitLatencyBounds: secondsOf(g.CommitLatency.Bounds), CommitLatencyCounts: g.CommitLatency.Counts,
			CommitLatencySum: g.CommitLatency.Sum.Seconds(), CommitLatencyCount: g.CommitLatency.Count,
		})
	}
	return m
}

func secondsOf(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

// openCluster starts a cluster node and its access broker: the
// broker keeps no journals (the node's groups do); bcfg, with the memory
// budget and limits filled in, is the template of the group brokers.
func (in *instance) openCluster(cfg Config, bcfg core.Config) error {
	var goBudget int64
	bcfg.MaxMemory, goBudget = clusterBudgets(cfg.MaxMemory, cfg.Cluster.Groups)
	goLimit := softMemoryLimit(goBudget)
	in.log.Info().Int64("max_memory", bcfg.MaxMemory).Int64("group_max_memory", bcfg.MaxMemory/int64(max(cfg.Cluster.Groups, 1))).
		Int64("go_memory_limit", goLimit).
		Msg("memory budget for messages, shared by the node's groups: past its group's part each address applies its address-full-policy (PAGE holds the producers: a group does not page)")
	bcfg.MaxAutoCreatedQueuesPerUser = cfg.Limits.MaxAutoCreatedQueues
	// The group brokers hand their events to the access broker, which
	// publishes them with its own (cluster/events.go).
	bcfg.Events = cfg.Notifications
	// Virtual topics are the groups': a topic's consumer queues are in
	// its group, whose broker copies to them.
	bcfg.VirtualTopics = cfg.VirtualTopics
	// The group brokers apply no diverts (the access broker below
	// does), but the node tells its peers a digest of them, to warn of
	// nodes configured otherwise (cluster/params.go).
	bcfg.Diverts = cfg.Diverts
	node, err := startCluster(cfg, bcfg, os.Getenv, in.log.With().Str("component", "cluster").Logger())
	if err != nil {
		return err
	}
	acfg := core.Config{AddressSettings: cfg.AddressSettings, Logger: bcfg.Logger, Cluster: node.Cluster(),
		Authenticator: bcfg.Authenticator, Authorizer: bcfg.Authorizer,
		// The access broker is the one the clients log in to.
		PreAuthBudget: int64(cfg.Limits.PreAuthBudget), Events: cfg.Notifications,
		// And the one that applies diverts, where a send enters the
		// cluster (core.Session.clusterSendDiverted). Virtual topics
		// are its groups' (bcfg above); it reports them.
		Diverts: cfg.Diverts, VirtualTopics: cfg.VirtualTopics}
	b, err := core.New(acfg)
	if err != nil {
		node.Close()
		return err
	}
	in.broker, in.cluster = b, node
	in.sec.start(b)
	return nil
}

// clusterAdmin is the management API's view of the node; nil without.
func (in *instance) clusterAdmin() management.ClusterAdmin {
	if in.cluster == nil {
		return nil
	}
	return clusterAdmin{in.cluster}
}

const clusterUsage = `usage:
  junction cluster status                   members, and each group's leader, term, commit index and apply lag
  junction cluster add ID HOST:PORT         add a node (started with --cluster-join) to every group
  junction cluster remove ID                remove a node from every group
flags: --console URL or HOST:PORT of any node (default 127.0.0.1:8161, $JUNCTION_CONSOLE), --json,
  --user NAME and $JUNCTION_PASSWORD when the broker has users
`

// runCluster runs `junction cluster ...` against a node's API.
func runCluster(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("%s", clusterUsage)
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, clusterUsage)
		return nil
	}
	sub := args[0]
	fs, af := newAdminFlags("cluster "+sub, getenv, stderr)
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	err = clusterCommand(ctx, sub, pos, af, stdout)
	// A single broker has no cluster endpoints: say so, rather than
	// "no such endpoint: /api/v1/cluster (HTTP 404)".
	if ae := (*apiError)(nil); errors.As(err, &ae) && ae.status == http.StatusNotFound && strings.Contains(ae.msg, "/api/v1/cluster") {
		return fmt.Errorf("cluster: the broker at %s is not a cluster node (it was started without --cluster-node-id)", af.console)
	}
	return err
}

func clusterCommand(ctx context.Context, sub string, pos []string, af *adminFlags, stdout io.Writer) error {
	switch {
	case sub == "status" && len(pos) == 0:
		var st cluster.Status
		if err := af.call(ctx, http.MethodGet, "/cluster", nil, &st); err != nil {
			return err
		}
		if af.json {
			return printJSON(stdout, st)
		}
		printClusterStatus(stdout, st)
		return nil
	case sub == "add" && len(pos) == 2:
		id, err := strconv.ParseUint(pos[0], 10, 64)
		if err != nil || id == 0 {
			return usagef("cluster add: the id %q must be a positive number", pos[0])
		}
		if _, _, err := net.SplitHostPort(pos[1]); err != nil {
			return usagef("cluster add: %q: %v", pos[1], err)
		}
		if err := af.call(ctx, http.MethodPost, "/cluster/members", map[string]any{"id": id, "address": pos[1]}, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "node %d added to every group\n", id)
		return nil
	case sub == "remove" && len(pos) == 1:
		if err := af.call(ctx, http.MethodDelete, "/cluster/members/"+url.PathEscape(pos[0]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "node %s removed from every group\n", pos[0])
		return nil
	}
	return usagef("cluster: bad command line\n%s", clusterUsage)
}

func printClusterStatus(w io.Writer, st cluster.Status) {
	ids := slices.Sorted(maps.Keys(st.Members))
	fmt.Fprintf(w, "node %d's view; members:", st.NodeID)
	for _, id := range ids {
		fmt.Fprintf(w, " %d=%s", id, st.Members[id])
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tLEADER\tTERM\tCOMMIT\tAPPLY LAG\tVOTERS\tLEARNERS\tMESSAGES\tLEADER CHANGES")
	for _, g := range st.Groups {
		lead := "-"
		if g.Leader != 0 {
			lead = strconv.FormatUint(g.Leader, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%v\t%v\t%d\t%d\n", g.ID, lead, g.Term, g.Commit, g.ApplyLag, g.Voters, g.Learners, g.Messages, g.LeaderChanges)
	}
	tw.Flush()
	if st.OutOfCluster != "" {
		fmt.Fprintf(w, "OUT OF THE CLUSTER: %s\n", st.OutOfCluster)
	}
	for _, p := range st.Peers {
		verdict := "configuration differs (warning)"
		if p.Refused {
			verdict = "REFUSED"
		}
		fmt.Fprintf(w, "node %d: %s: %s\n", p.Node, verdict, strings.Join(p.Problems, "; "))
	}
}

// clusterCopies is about how many times a cluster node holds a message
// in memory: as its group broker's message on the group's leader, as
// the replicated record on every member, and in the group's Raft log
// until the log is compacted.
const clusterCopies = 3

// clusterLogShare is what a group's Raft log may hold besides its
// state's size: the entries since its snapshot (cluster.Config's
// SnapshotBytes, 16 MiB) and the catch-up entries kept below it
// (raftlog's CatchUpBytes, 16 MiB).
const clusterLogShare = 32 << 20

// clusterBudgets returns a cluster node's budget for messages (shared by
// its groups' brokers: cluster.Config.Broker) and what softMemoryLimit
// is to cover: each message's copies and the groups' logs. The default
// budget is a third of a single broker's, so that a node's memory comes
// to what one broker's does.
func clusterBudgets(configured ByteSize, groups int) (budget, goBudget int64) {
	budget = memoryBudget(configured)
	if configured <= 0 {
		budget /= clusterCopies
	}
	return budget, clusterCopies*budget + int64(groups)*clusterLogShare
}
