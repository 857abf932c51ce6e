package management

import (
	"fmt"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/junctionmq/junction/core"
)

// Roles of a broker in a shared-store group.
const (
	RoleLive   = "live"
	RoleBackup = "backup"
)

// HAStatus is a broker's place in a shared-store group, as the process's
// wiring reports it (management does not import ha).
type HAStatus struct {
	Role string // RoleLive or RoleBackup
	// Epoch and Since describe the store lock this broker holds (live).
	Epoch uint64
	Since time.Time
	// Holder, HolderEpoch and HolderSince describe the broker a backup
	// waits for, as the store's state file names it (Holder "" when it
	// names nobody readable).
	Holder      string
	HolderEpoch uint64
	HolderSince time.Time
	// Detail, when set, replaces the description of what a backup waits
	// for (a store lock it holds while the journal is still locked).
	Detail string
	// Takeovers counts the times this process became live after waiting
	// as a backup; LastTakeover is the last (zero: never).
	Takeovers    uint64
	LastTakeover time.Time
}

// Describe says in one line what the broker is doing: "live, holding the
// store lock since … (epoch 3)" or "backup, waiting for the store lock
// held since … by host pid 12 (epoch 2)".
func (s HAStatus) Describe() string {
	if s.Role == RoleLive {
		return fmt.Sprintf("live, holding the store lock since %s (epoch %d)", s.Since.UTC().Format(time.RFC3339), s.Epoch)
	}
	if s.Detail != "" {
		return "backup, " + s.Detail
	}
	if s.Holder == "" {
		return "backup, waiting for the store lock (its state file names no holder)"
	}
	return fmt.Sprintf("backup, waiting for the store lock held since %s by %s (epoch %d)",
		s.HolderSince.UTC().Format(time.RFC3339), s.Holder, s.HolderEpoch)
}

type haJSON struct {
	Role         string     `json:"role"`
	Status       string     `json:"status"`
	Epoch        uint64     `json:"epoch,omitempty"`
	Since        *time.Time `json:"since,omitempty"`
	Holder       string     `json:"holder,omitempty"`
	HolderEpoch  uint64     `json:"holderEpoch,omitempty"`
	HolderSince  *time.Time `json:"holderSince,omitempty"`
	Takeovers    uint64     `json:"takeovers"`
	LastTakeover *time.Time `json:"lastTakeover,omitempty"`
}

func haOf(s HAStatus) *haJSON {
	return &haJSON{Role: s.Role, Status: s.Describe(), Epoch: s.Epoch, Since: timePtr(s.Since),
		Holder: s.Holder, HolderEpoch: s.HolderEpoch, HolderSince: timePtr(s.HolderSince),
		Takeovers: s.Takeovers, LastTakeover: timePtr(s.LastTakeover)}
}

// haCollector serves junction_ha_*: the role (one series per role, 1 for
// the current one), the epoch held, takeovers and the last one's time.
type haCollector struct {
	status                                 func() HAStatus
	role, epoch, takeovers, lastTakeoverTS *prometheus.Desc
}

func newHACollector(status func() HAStatus) *haCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("junction_ha_"+name, help, labels, nil)
	}
	return &haCollector{status: status,
		role:           d("role", "1 for this broker's role in its shared-store group (live: holds the store lock and serves clients; backup: waits for the lock), 0 for the others.", "role"),
		epoch:          d("epoch", "The epoch of the store lock this broker holds; 0 while it is a backup."),
		takeovers:      d("takeovers_total", "Times this process took the store over after waiting as a backup."),
		lastTakeoverTS: d("last_takeover_timestamp_seconds", "Unix time of this process's last takeover; 0 if none."),
	}
}

// Describe implements prometheus.Collector.
func (c *haCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.role
	ch <- c.epoch
	ch <- c.takeovers
	ch <- c.lastTakeoverTS
}

// Collect implements prometheus.Collector.
func (c *haCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.status()
	for _, r := range []string{RoleLive, RoleBackup} {
		v := 0.0
		if s.Role == r {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.role, prometheus.GaugeValue, v, r)
	}
	epoch := 0.0
	if s.Role == RoleLive {
		epoch = float64(s.Epoch)
	}
	ch <- prometheus.MustNewConstMetric(c.epoch, prometheus.GaugeValue, epoch)
	ch <- prometheus.MustNewConstMetric(c.takeovers, prometheus.CounterValue, float64(s.Takeovers))
	last := 0.0
	if !s.LastTakeover.IsZero() {
		last = float64(s.LastTakeover.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(c.lastTakeoverTS, prometheus.GaugeValue, last)
}

// NewBackup returns the handler a backup broker serves on its console
// listener while it waits for the store lock: /healthz (200), /readyz
// (503 with the role and nothing else), /api/v1/broker (the version, the listeners and the
// ha section; no queues, no journal: the backup has opened neither),
// /metrics (junction_build_info, junction_uptime_seconds, junction_ha_*,
// junction_http_requests_rejected_total, the Go and process collectors),
// the console page (which shows the role), and 503 with the role for
// every other API path. Host allow-list and login are checked as by New.
// cfg.HA must be set. auth is used only to check console logins
// (cfg.RequireLogin): a broker that holds nothing, built with the
// security configuration of the broker to come.
func NewBackup(cfg Config, auth *core.Broker) *Server {
	s := &Server{cfg: cfg, b: auth, log: cfg.Logger, mux: http.NewServeMux(), started: time.Now()}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		&backupCollector{s: s,
			buildInfo: prometheus.NewDesc("junction_build_info", "Always 1; the version label names the running build.", []string{"version"}, nil),
			uptime:    prometheus.NewDesc("junction_uptime_seconds", "Seconds since the broker started.", nil, nil)},
		newHACollector(cfg.HA),
		newRequestsCollector(cfg.RequestRejections),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// The role only: probes answer any Host and need no login, so
		// whom the backup waits for (host, pid, epoch) is for the API,
		// which checks both (docs/security.md).
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(backupNotReady))
	})
	s.route("/broker", map[string]http.HandlerFunc{"GET": s.getBackup})
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusServiceUnavailable, "this broker is a "+cfg.HA().Describe()+"; its queues are served by the live broker")
	})
	s.mux.Handle("/", consoleHandler())
	return s
}

// backupNotReady is a backup's /readyz body.
const backupNotReady = "not ready: backup\n"

// getBackup answers /api/v1/broker on a backup: brokerJSON's shape, so
// the console renders it, with nothing counted.
func (s *Server) getBackup(w http.ResponseWriter, r *http.Request) {
	out := brokerJSON{
		Version:       s.cfg.Version,
		Started:       s.started,
		UptimeSeconds: time.Since(s.started).Seconds(),
		Listeners:     map[string]string{},
		Protocols:     []protocolJSON{},
		Goroutines:    runtime.NumGoroutine(),
		HA:            haOf(s.cfg.HA()),
	}
	if s.cfg.Listeners != nil {
		for k, v := range s.cfg.Listeners() {
			out.Listeners[k] = v
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out.Memory = memoryJSON{HeapAlloc: ms.HeapAlloc, HeapInuse: ms.HeapInuse, HeapObjects: ms.HeapObjects,
		Sys: ms.Sys, TotalAlloc: ms.TotalAlloc, NumGC: ms.NumGC}
	writeJSON(w, http.StatusOK, out)
}

// backupCollector serves a backup's build info and uptime.
type backupCollector struct {
	s                 *Server
	buildInfo, uptime *prometheus.Desc
}

func (c *backupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.buildInfo
	ch <- c.uptime
}

func (c *backupCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.buildInfo, prometheus.GaugeValue, 1, c.s.cfg.Version)
	ch <- prometheus.MustNewConstMetric(c.uptime, prometheus.GaugeValue, time.Since(c.s.started).Seconds())
}
