package management

import "github.com/prometheus/client_golang/prometheus"

// requestsCollector serves the HTTP requests the broker's HTTP listeners
// refused before serving them (a Host not on the allow-list), as counted
// by the process's wiring, which sees every listener: the console's and
// the WebSocket ports', where this handler may be the fallback.
type requestsCollector struct {
	rejections func() map[string]map[string]uint64
	rejected   *prometheus.Desc
}

func newRequestsCollector(rejections func() map[string]map[string]uint64) *requestsCollector {
	return &requestsCollector{rejections: rejections,
		rejected: prometheus.NewDesc("junction_http_requests_rejected_total",
			"HTTP requests a listener refused before serving them, by reason: host (a Host header not on the allow-list, 421).",
			[]string{"listener", "reason"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *requestsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.rejected }

// Collect implements prometheus.Collector.
func (c *requestsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.rejections == nil {
		return
	}
	for listener, byReason := range c.rejections() {
		for reason, n := range byReason {
			ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(n), listener, reason)
		}
	}
}
