package management_test

import (
	"bytes"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metrics and metricValue read /metrics; the test of memory and drop
// statistics, which needs persistence, is in internal/e2e/management.

func (e *env) metrics() map[string]*dto.MetricFamily {
	e.t.Helper()
	status, raw, _ := e.raw("GET", "/metrics", nil, "Accept", "text/plain")
	if status != 200 {
		e.t.Fatalf("metrics: status %d", status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		e.t.Fatalf("parse: %v\n%s", err, raw)
	}
	return fams
}

// metricValue returns the value of the series of name with labels (a
// gauge's or a counter's); it fails the test if there is none.
func metricValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
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
		if m.Counter != nil {
			return m.Counter.GetValue()
		}
		return m.Gauge.GetValue()
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}
