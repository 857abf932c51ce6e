// Package managementtest is the harness of the console's tests: a
// management handler over a broker on an httptest server, requests with
// JSON answers, and the Prometheus figures of /metrics. Package
// management's tests and the integration tests of internal/e2e share it;
// no production code may import it (internal/lint).
package managementtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/junctionmq/junction/core"
)

// Env is a console under test: its broker and its HTTP server.
type Env struct {
	T      *testing.T
	Core   *core.Broker     // the broker (nil for a test of the HTTP side alone)
	Server *httptest.Server // serving the console
	Ready  atomic.Bool      // for a Config.Ready of e.Ready.Load
}

// Serve serves h on an httptest server; when the test ends the server is
// closed, then the broker (e.Core, which must be set).
func (e *Env) Serve(h http.Handler) {
	e.Server = httptest.NewServer(h)
	e.T.Cleanup(func() {
		e.Server.Close()
		e.Core.Close()
	})
}

// Do sends a request (a JSON body when body is not nil, or when the
// method is POST) and decodes a JSON answer into a generic value.
func (e *Env) Do(method, path string, body any, hdr ...string) (int, map[string]any) {
	e.T.Helper()
	status, raw, _ := e.Raw(method, path, body, hdr...)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			e.T.Fatalf("%s %s: answer is not a JSON object: %v\n%s", method, path, err, raw)
		}
	}
	return status, out
}

// Raw sends a request as Do does and returns the status, the body and
// the headers of the answer.
func (e *Env) Raw(method, path string, body any, hdr ...string) (int, []byte, http.Header) {
	e.T.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.T.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.Server.URL+path, rd)
	if err != nil {
		e.T.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		e.T.Fatal(err)
	}
	return res.StatusCode, raw, res.Header
}

// Want is Do, failing the test unless the status is status.
func (e *Env) Want(status int, method, path string, body any, hdr ...string) map[string]any {
	e.T.Helper()
	got, out := e.Do(method, path, body, hdr...)
	if got != status {
		e.T.Fatalf("%s %s: status %d, want %d; %v", method, path, got, status, out)
	}
	return out
}

// Session opens a session on the broker, closed when the test ends.
func (e *Env) Session(opts core.SessionOptions) *core.Session {
	e.T.Helper()
	s, err := e.Core.NewSession(opts)
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(s.Close)
	return s
}

// Send sends body to the anycast address addr on s.
func (e *Env) Send(s *core.Session, addr string, body []byte, props map[string]any) {
	e.T.Helper()
	m := &core.Message{Address: addr, RoutingType: core.Anycast, Body: body, Properties: props}
	if err := s.Send(context.Background(), m); err != nil {
		e.T.Fatal(err)
	}
}

// Depth is the depth of queue, failing the test if there is none.
func (e *Env) Depth(queue string) int64 {
	e.T.Helper()
	q := e.Core.Queue(queue)
	if q == nil {
		e.T.Fatalf("queue %q does not exist", queue)
	}
	return q.Stats().Depth
}

// Num is v as a JSON number, or 0.
func Num(v any) float64 { f, _ := v.(float64); return f }

// Metrics reads /metrics in the text format.
func (e *Env) Metrics() map[string]*dto.MetricFamily {
	e.T.Helper()
	status, raw, _ := e.Raw("GET", "/metrics", nil, "Accept", "text/plain")
	if status != 200 {
		e.T.Fatalf("metrics: status %d", status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		e.T.Fatalf("parse: %v\n%s", err, raw)
	}
	return fams
}

// Metric returns the series of name with labels; it fails the test if
// there is none.
func Metric(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no metric family %s", name)
	}
next:
	for _, m := range f.Metric {
		for k, v := range labels {
			found := false
			for _, lp := range m.Label {
				found = found || (lp.GetName() == k && lp.GetValue() == v)
			}
			if !found {
				continue next
			}
		}
		return m
	}
	t.Fatalf("no %s%v", name, labels)
	return nil
}

// MetricValue returns the value of the series of name with labels (a
// gauge's or a counter's); it fails the test if there is none.
func MetricValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	m := Metric(t, fams, name, labels)
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
