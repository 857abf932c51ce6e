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

type denyAll struct{}

func (denyAll) Authorize(string, core.Permission, string) bool { return false }

func TestAuthorizationDenialsMetric(t *testing.T) {
	b, err := core.New(core.Config{Authorizer: denyAll{}, ExpiryScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(management.New(management.Config{}, b))
	t.Cleanup(func() {
		srv.Close()
		b.Close()
	})
	s, err := b.NewSession(core.SessionOptions{User: "u", Protocol: "stomp"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 2 {
		if err := s.Send(context.Background(), &core.Message{Address: "x"}); err == nil {
			t.Fatal("send allowed")
		}
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `junction_authorization_denials_total{protocol="stomp"} 2`; !strings.Contains(string(raw), want) {
		t.Fatalf("no %s in\n%s", want, raw)
	}
}
