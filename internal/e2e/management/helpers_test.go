package management_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/junctionmq/junction/core"
)

// env and its methods are package management's test helpers, for the
// tests that need persistence too.

type env struct {
	t     *testing.T
	b     *core.Broker
	srv   *httptest.Server
	ready atomic.Bool
}

func (e *env) do(method, path string, body any, hdr ...string) (int, map[string]any) {
	e.t.Helper()
	status, raw, _ := e.raw(method, path, body, hdr...)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			e.t.Fatalf("%s %s: answer is not a JSON object: %v\n%s", method, path, err, raw)
		}
	}
	return status, out
}

func (e *env) raw(method, path string, body any, hdr ...string) (int, []byte, http.Header) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.StatusCode, raw, res.Header
}

func (e *env) want(status int, method, path string, body any, hdr ...string) map[string]any {
	e.t.Helper()
	got, out := e.do(method, path, body, hdr...)
	if got != status {
		e.t.Fatalf("%s %s: status %d, want %d; %v", method, path, got, status, out)
	}
	return out
}

func (e *env) session(opts core.SessionOptions) *core.Session {
	e.t.Helper()
	s, err := e.b.NewSession(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(s.Close)
	return s
}

func num(v any) float64 { f, _ := v.(float64); return f }
