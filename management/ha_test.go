package management_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/management"
	"github.com/junctionmq/junction/management/managementtest"
)

// haState is a settable HA status, as cmd/junction keeps it.
type haState struct {
	mu sync.Mutex
	s  management.HAStatus
}

func (h *haState) get() management.HAStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.s
}

func newBackupEnv(t *testing.T, h *haState, requireLogin bool) *managementtest.Env {
	t.Helper()
	auth, err := core.New(core.Config{Authenticator: twoUsers{}, Authorizer: twoUsers{}})
	if err != nil {
		t.Fatal(err)
	}
	e := &managementtest.Env{T: t, Core: auth}
	e.Serve(management.NewBackup(management.Config{
		Version:      "1.2.3",
		Listeners:    func() map[string]string { return map[string]string{"console": "127.0.0.1:8161"} },
		HA:           h.get,
		RequireLogin: requireLogin,
	}, auth))
	return e
}

func TestBackupSaysItIsABackup(t *testing.T) {
	since := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	h := &haState{s: management.HAStatus{Role: management.RoleBackup, Holder: "hostA pid 12", HolderEpoch: 3, HolderSince: since}}
	e := newBackupEnv(t, h, false)
	status, raw, _ := e.Raw("GET", "/healthz", nil)
	if status != 200 {
		t.Fatalf("/healthz: %d", status)
	}
	status, raw, _ = e.Raw("GET", "/readyz", nil)
	if status != http.StatusServiceUnavailable || string(raw) != "not ready: backup\n" {
		t.Fatalf("/readyz: %d %q, want 503 with the role and nothing of the holder", status, raw)
	}
	status, b := e.Do("GET", "/api/v1/broker", nil)
	if status != 200 {
		t.Fatalf("/api/v1/broker: %d %v", status, b)
	}
	ha, _ := b["ha"].(map[string]any)
	if ha["role"] != "backup" || !strings.HasPrefix(ha["status"].(string), "backup, waiting for the store lock held since ") ||
		ha["holderEpoch"] != 3.0 || b["version"] != "1.2.3" {
		t.Fatalf("/api/v1/broker: %v", b)
	}
	status, q := e.Do("GET", "/api/v1/queues", nil)
	if status != http.StatusServiceUnavailable || !strings.Contains(q["error"].(string), "backup, waiting") {
		t.Fatalf("/api/v1/queues on a backup: %d %v", status, q)
	}
	status, _, _ = e.Raw("GET", "/", nil)
	if status != 200 {
		t.Fatalf("console page: %d", status)
	}
	fams := e.Metrics()
	if v := managementtest.MetricValue(t, fams, "junction_ha_role", map[string]string{"role": "backup"}); v != 1 {
		t.Fatalf("junction_ha_role{role=backup} = %v", v)
	}
	if v := managementtest.MetricValue(t, fams, "junction_ha_role", map[string]string{"role": "live"}); v != 0 {
		t.Fatalf("junction_ha_role{role=live} = %v", v)
	}
	if v := managementtest.MetricValue(t, fams, "junction_ha_takeovers_total", nil); v != 0 {
		t.Fatalf("takeovers %v", v)
	}
	if v := managementtest.MetricValue(t, fams, "junction_build_info", map[string]string{"version": "1.2.3"}); v != 1 {
		t.Fatalf("build info %v", v)
	}
}

func TestBackupConsoleNeedsLoginButProbesDoNot(t *testing.T) {
	h := &haState{s: management.HAStatus{Role: management.RoleBackup}}
	e := newBackupEnv(t, h, true)
	for _, path := range []string{"/api/v1/broker", "/metrics", "/"} {
		if res, _ := get(t, e.Server, path, "", ""); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without credentials: %d, want 401", path, res.StatusCode)
		}
		if res, _ := get(t, e.Server, path, "admin", "pw-admin"); res.StatusCode != http.StatusOK {
			t.Errorf("%s as admin: %d", path, res.StatusCode)
		}
	}
	if res, _ := get(t, e.Server, "/healthz", "", ""); res.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %d", res.StatusCode)
	}
	if res, body := get(t, e.Server, "/readyz", "", ""); res.StatusCode != http.StatusServiceUnavailable ||
		body != "not ready: backup\n" {
		t.Errorf("/readyz: %d %q", res.StatusCode, body)
	}
}

func TestLiveReportsItsRoleAndTakeovers(t *testing.T) {
	b, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	took := time.Date(2026, 3, 4, 5, 6, 8, 500e6, time.UTC)
	h := &haState{s: management.HAStatus{Role: management.RoleLive, Epoch: 4, Since: took, Takeovers: 1, LastTakeover: took}}
	e := &managementtest.Env{T: t, Core: b}
	e.Server = httptest.NewServer(management.New(management.Config{HA: h.get}, b))
	defer e.Server.Close()
	_, out := e.Do("GET", "/api/v1/broker", nil)
	ha, _ := out["ha"].(map[string]any)
	if ha["role"] != "live" || ha["status"] != "live, holding the store lock since 2026-03-04T05:06:08Z (epoch 4)" ||
		ha["takeovers"] != 1.0 || ha["lastTakeover"] != "2026-03-04T05:06:08.5Z" {
		t.Fatalf("/api/v1/broker ha: %v", ha)
	}
	fams := e.Metrics()
	if v := managementtest.MetricValue(t, fams, "junction_ha_role", map[string]string{"role": "live"}); v != 1 {
		t.Fatalf("role live %v", v)
	}
	if v := managementtest.MetricValue(t, fams, "junction_ha_epoch", nil); v != 4 {
		t.Fatalf("epoch %v", v)
	}
	if v := managementtest.MetricValue(t, fams, "junction_ha_takeovers_total", nil); v != 1 {
		t.Fatalf("takeovers %v", v)
	}
	if v := managementtest.MetricValue(t, fams, "junction_ha_last_takeover_timestamp_seconds", nil); v != float64(took.UnixNano())/1e9 {
		t.Fatalf("last takeover %v", v)
	}
	// Without HA there is neither the section nor the metrics.
	plain := newEnv(t)
	if _, out := plain.Do("GET", "/api/v1/broker", nil); out["ha"] != nil {
		t.Fatalf("ha section without HA: %v", out["ha"])
	}
	if _, ok := plain.Metrics()["junction_ha_role"]; ok {
		t.Fatal("junction_ha_role without HA")
	}
}

func TestBackupChecksTheHost(t *testing.T) {
	h := &haState{s: management.HAStatus{Role: management.RoleBackup}}
	auth, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer auth.Close()
	var refused atomic.Int64
	srv := httptest.NewServer(management.NewBackup(management.Config{
		HA:            h.get,
		AllowHost:     func(host string) bool { return strings.HasPrefix(host, "127.0.0.1:") },
		OnHostRefused: func(*http.Request) { refused.Add(1) },
		RequestRejections: func() map[string]map[string]uint64 {
			return map[string]map[string]uint64{"console": {"host": uint64(refused.Load())}}
		},
	}, auth))
	defer srv.Close()
	do := func(path string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Host = "rebound.example"
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := do("/api/v1/broker"); code != http.StatusMisdirectedRequest {
		t.Fatalf("/api/v1/broker for another Host: %d, want 421", code)
	}
	if code := do("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz for another Host: %d, want the probe's 503", code)
	}
	e := &managementtest.Env{T: t, Server: srv}
	if v := managementtest.MetricValue(t, e.Metrics(), "junction_http_requests_rejected_total", map[string]string{"listener": "console", "reason": "host"}); v != 1 {
		t.Fatalf("refusals counted: %v, want 1", v)
	}
}
