package management_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/management"
)

// loopbackHost stands for the allow-list cmd builds: here, 127.0.0.1
// and localhost on any port.
func loopbackHost(h string) bool {
	name, _, err := net.SplitHostPort(h)
	if err != nil {
		name = h
	}
	return name == "127.0.0.1" || name == "localhost"
}

// hostReq sends a request with the Host header forged to host.
func hostReq(t *testing.T, srv *httptest.Server, method, path, host, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// A request for a name that is not the server's is answered 421 before
// anything else, login included; the probes answer whatever the Host.
func TestForeignHostMisdirected(t *testing.T) {
	for _, login := range []bool{false, true} {
		b, err := core.New(core.Config{Authenticator: twoUsers{}, Authorizer: twoUsers{}})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var refused []string
		srv := httptest.NewServer(management.New(management.Config{
			RequireLogin: login,
			AllowHost:    loopbackHost,
			OnHostRefused: func(r *http.Request) {
				mu.Lock()
				refused = append(refused, r.Method+" "+r.URL.Path)
				mu.Unlock()
			},
			RequestRejections: func() map[string]map[string]uint64 {
				return map[string]map[string]uint64{"console": {"host": 7}}
			},
		}, b))
		t.Cleanup(func() {
			srv.Close()
			b.Close()
		})
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
		evil := "attacker.example:" + port
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/api/v1/queues", `{"name":"rebound"}`},
			{"POST", "/api/v1/send", `{"address":"rebound","body":"x"}`},
			{"GET", "/api/v1/queues", ""},
			{"DELETE", "/api/v1/queues/rebound", ""},
			{"GET", "/metrics", ""},
			{"GET", "/", ""},
		} {
			status, body := hostReq(t, srv, c.method, c.path, evil, c.body, "Origin", "http://"+evil)
			if status != http.StatusMisdirectedRequest || !strings.Contains(body, `"error"`) {
				t.Errorf("login %v: %s %s with Host %s: %d %s, want a JSON 421", login, c.method, c.path, evil, status, body)
			}
		}
		if qs := b.QueueStats(); len(qs) != 0 {
			t.Errorf("login %v: refused requests created %d queues", login, len(qs))
		}
		mu.Lock()
		if len(refused) != 6 || refused[0] != "POST /api/v1/queues" {
			t.Errorf("login %v: OnHostRefused saw %q, want the 6 requests", login, refused)
		}
		mu.Unlock()
		for _, p := range []string{"/healthz", "/readyz"} {
			if status, _ := hostReq(t, srv, "GET", p, "10.1.2.3:"+port, ""); status != 200 {
				t.Errorf("login %v: %s with an IP Host: %d, want 200", login, p, status)
			}
		}
		// The server's own names are served (after the login, if any).
		want := 200
		if login {
			want = http.StatusUnauthorized
		}
		for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port} {
			if status, body := hostReq(t, srv, "GET", "/api/v1/queues", host, ""); status != want {
				t.Errorf("login %v: Host %s: %d %s, want %d", login, host, status, body, want)
			}
		}
		if !login {
			if _, body := hostReq(t, srv, "GET", "/metrics", "127.0.0.1:"+port, ""); !strings.Contains(body,
				`junction_http_requests_rejected_total{listener="console",reason="host"} 7`) {
				t.Error("/metrics lacks junction_http_requests_rejected_total")
			}
		}
	}
}

// Without AllowHost no page is trusted to mutate, not even one whose
// origin is the request's own Host.
func TestNoAllowHostTrustsNoPage(t *testing.T) {
	b, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(management.New(management.Config{}, b))
	t.Cleanup(func() {
		srv.Close()
		b.Close()
	})
	host := strings.TrimPrefix(srv.URL, "http://")
	if status, body := hostReq(t, srv, "POST", "/api/v1/queues", host, `{"name":"q"}`, "Origin", "http://"+host); status != http.StatusForbidden {
		t.Errorf("same-host Origin without AllowHost: %d %s, want 403", status, body)
	}
	if status, body := hostReq(t, srv, "POST", "/api/v1/queues", "anything.example", `{"name":"q"}`); status != http.StatusCreated {
		t.Errorf("no Origin, any Host, without AllowHost: %d %s, want 201", status, body)
	}
}
