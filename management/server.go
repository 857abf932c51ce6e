// Package management serves Junction's HTTP management surface as one
// http.Handler: the REST API under /api/v1/, Prometheus metrics at
// /metrics, health checks at /healthz and /readyz, and the embedded web
// console at /. docs/api.md describes every endpoint.
//
// The handler reads the broker through core's exported API only: the
// statistics it serves are snapshots taken per request (or per scrape),
// and nothing here holds a broker lock across a response.
//
// Safety: with Config.RequireLogin every request but the health checks
// needs HTTP Basic credentials of a user holding the manage permission;
// without it the API is open (meant for a loopback or otherwise trusted
// listener). Either way it defends against other web origins driving a
// browser that can reach it:
//
//   - Every request but the health checks whose Host header
//     Config.AllowHost refuses gets 421 Misdirected Request before
//     anything else (login included). This stops DNS rebinding, where a
//     page on attacker.example has its name re-resolved to the broker's
//     address and talks to it same-origin, Host: attacker.example; no
//     Origin check can, since the page's origin is that very Host.
//   - Every mutating request (POST, DELETE) is refused when it carries
//     an Origin header whose host[:port] AllowHost refuses (without
//     AllowHost, any Origin), or Sec-Fetch-Site says cross-site or
//     same-site.
//   - Every POST must be Content-Type: application/json, which a
//     cross-origin form or a "simple" fetch cannot send without a CORS
//     preflight that this handler never answers.
package management

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core"
)

// Config configures a Server. The zero value serves a broker without
// journal statistics or listener list, always ready.
type Config struct {
	// Version is reported by /api/v1/broker and junction_build_info.
	Version string
	// Listeners returns the listeners' addresses by name ("stomp" →
	// "127.0.0.1:61613"); nil reports none.
	Listeners func() map[string]string
	// Rejections returns, per listener, the connections turned away by
	// a limit, by reason ("max_conns", "max_conns_per_ip", "rate"); nil
	// reports none.
	Rejections func() map[string]map[string]uint64
	// Journal returns the message journal's statistics; nil when
	// persistence is off (no journal section, no journal metrics).
	Journal func() JournalStats
	// Ready reports whether the broker is ready for clients (/readyz);
	// nil means always ready.
	Ready func() bool
	// Logger receives one info line per mutating API call and the
	// errors of failed ones. The zero value logs nothing.
	Logger zerolog.Logger
	// RequireLogin makes every request but /healthz and /readyz need
	// HTTP Basic credentials that the broker's Authenticator accepts, of
	// a user its Authorizer grants core.PermManage (401 with a challenge
	// otherwise, 403 for a known user without it). Set it when users are
	// configured; false keeps the API open, for loopback listeners.
	RequireLogin bool
	// AllowHost decides which Host headers name this server (an
	// allow-list; see the package doc). Every request but /healthz and
	// /readyz whose Host it refuses gets 421. It also decides which
	// pages' origins may mutate. Nil accepts every Host and no page's
	// Origin. It runs for every request: a lookup, never DNS.
	AllowHost func(host string) bool
	// OnHostRefused, if set, is called after a request was refused for
	// its Host, in the request's goroutine (for counting and logging);
	// it must not block.
	OnHostRefused func(r *http.Request)
	// RequestRejections returns, per listener, the HTTP requests refused
	// before they were served, by reason ("host"), for
	// junction_http_requests_rejected_total; nil reports none.
	RequestRejections func() map[string]map[string]uint64
	// Cluster, for a cluster node, serves /api/v1/cluster and the
	// junction_cluster_* metrics; nil for a single broker.
	Cluster ClusterAdmin
	// HA reports the broker's role in a shared-store group; nil without
	// one (no ha section in /api/v1/broker, no junction_ha_* metrics).
	HA func() HAStatus
	// Settings returns the configuration in force, for GET
	// /api/v1/config; Reload reads the configuration again, for POST
	// /api/v1/config/reload (its result, and an error when nothing
	// changed because the configuration is invalid). Nil: 404.
	Settings func() any
	Reload   func() (any, error)
}

// JournalStats are the message journal's counters, as the process's
// wiring adapts them from persistence (management does not import it).
type JournalStats struct {
	Appends, Syncs, Batches, BatchRecords, Compactions uint64
	// SyncSeconds is the total time spent in syncs.
	SyncSeconds float64
	// SyncLatencyBuckets are the upper bounds, in seconds and increasing,
	// of a histogram of sync durations. SyncLatencyCounts[i] counts the
	// syncs that took more than SyncLatencyBuckets[i-1] and at most
	// SyncLatencyBuckets[i] (per bucket, not cumulative); an extra last
	// element, when present, counts those above the last bound. Syncs
	// is the histogram's total count.
	SyncLatencyBuckets []float64
	SyncLatencyCounts  []uint64
	// Files and Bytes are the journal files on disk and their size.
	Files int
	Bytes int64
}

// Server is the management http.Handler. Its methods may be called from
// any goroutine.
type Server struct {
	cfg     Config
	b       *core.Broker
	log     zerolog.Logger
	mux     *http.ServeMux
	started time.Time
}

// consoleUser is the user stamped on messages sent through the API.
const consoleUser = "admin"

// New returns the management handler for b.
func New(cfg Config, b *core.Broker) *Server {
	s := &Server{cfg: cfg, b: b, log: cfg.Logger, mux: http.NewServeMux(), started: time.Now()}

	reg := prometheus.NewRegistry()
	if cfg.Cluster != nil {
		reg.MustRegister(newClusterCollector(cfg.Cluster))
	}
	reg.MustRegister(
		newCollector(cfg, b),
		newLimitsCollector(b, cfg.Rejections),
		newRequestsCollector(cfg.RequestRejections),
		newEventsCollector(b),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if cfg.HA != nil {
		reg.MustRegister(newHACollector(cfg.HA))
	}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if cfg.Ready != nil && !cfg.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("not ready\n"))
			return
		}
		w.Write([]byte("ok\n"))
	})
	s.clusterRoutes()
	s.routes()
	s.mux.Handle("/", consoleHandler())
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	// The Host first: a request for another name is answered before it
	// can cost a login attempt or change anything. Probes are exempt: a
	// load balancer or kubelet asks with whatever Host it likes, and
	// "ok" tells a rebinding page nothing.
	if s.cfg.AllowHost != nil && !openPaths[r.URL.Path] && !s.cfg.AllowHost(r.Host) {
		writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("misdirected request: %q is not a name of this server", r.Host))
		if s.cfg.OnHostRefused != nil {
			s.cfg.OnHostRefused(r)
		}
		return
	}
	if s.cfg.RequireLogin && !openPaths[r.URL.Path] {
		if r = s.login(w, r); r == nil {
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// route registers one API path (relative to /api/v1) with a handler per
// method; any other method gets a JSON 405 naming the allowed ones.
// Mutating methods go through the cross-origin checks.
func (s *Server) route(path string, handlers map[string]http.HandlerFunc) {
	full := "/api/v1" + path
	allow := ""
	for _, method := range slices.Sorted(maps.Keys(handlers)) {
		h := handlers[method]
		if method == http.MethodPost || method == http.MethodDelete {
			h = s.guard(h)
		}
		s.mux.Handle(method+" "+full, h)
		if allow != "" {
			allow += ", "
		}
		allow += method
		if method == http.MethodGet {
			allow += ", HEAD"
		}
	}
	s.mux.HandleFunc(full, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed; allowed: "+allow)
	})
}
