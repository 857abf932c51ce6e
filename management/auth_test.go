package management_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/management"
)

// twoUsers knows admin (may manage) and viewer (may not), with the
// password "pw-" + name.
type twoUsers struct{}

func (twoUsers) Authenticate(_ context.Context, login, pass string) (string, error) {
	if (login == "admin" || login == "viewer") && pass == "pw-"+login {
		return login, nil
	}
	return "", fmt.Errorf("%w: bad credentials", core.ErrAuthFailed)
}

func (twoUsers) Authorize(user string, perm core.Permission, _ string) bool {
	return perm != core.PermManage || user == "admin"
}

func newAuthServer(t *testing.T, require bool) *httptest.Server {
	t.Helper()
	b, err := core.New(core.Config{Authenticator: twoUsers{}, Authorizer: twoUsers{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(management.New(management.Config{RequireLogin: require}, b))
	t.Cleanup(func() {
		srv.Close()
		b.Close()
	})
	return srv
}

func get(t *testing.T, srv *httptest.Server, path, user, pass string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

func TestLoginRequired(t *testing.T) {
	srv := newAuthServer(t, true)
	for _, path := range []string{"/api/v1/broker", "/api/v1/queues", "/metrics", "/"} {
		res, _ := get(t, srv, path, "", "")
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without credentials: %d, want 401", path, res.StatusCode)
		}
		if !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("%s: no Basic challenge: %q", path, res.Header.Get("WWW-Authenticate"))
		}
		if res, _ := get(t, srv, path, "admin", "pw-admin"); res.StatusCode != http.StatusOK {
			t.Errorf("%s as admin: %d", path, res.StatusCode)
		}
	}
	res, _ := get(t, srv, "/api/v1/broker", "admin", "nope")
	if res.StatusCode != http.StatusUnauthorized || res.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("wrong password: %d", res.StatusCode)
	}
	res, _ = get(t, srv, "/api/v1/broker", "mallory", "pw-mallory")
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("unknown user: %d", res.StatusCode)
	}
	res, body := get(t, srv, "/api/v1/broker", "viewer", "pw-viewer")
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("viewer: %d, want 403", res.StatusCode)
	}
	if !strings.Contains(body, "manage") {
		t.Errorf("403 body %q does not say why", body)
	}
	// Probes stay open.
	for _, path := range []string{"/healthz", "/readyz"} {
		if res, _ := get(t, srv, path, "", ""); res.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", path, res.StatusCode)
		}
	}
}

func TestLoginNotRequiredWithoutUsers(t *testing.T) {
	srv := newAuthServer(t, false)
	if res, _ := get(t, srv, "/api/v1/broker", "", ""); res.StatusCode != http.StatusOK {
		t.Fatalf("open API: %d", res.StatusCode)
	}
}
