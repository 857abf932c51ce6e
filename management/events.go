package management

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/junctionmq/junction/core"
)

// eventsCollector serves the counts of broker events published and
// dropped (a full buffer).
type eventsCollector struct {
	b                  *core.Broker
	published, dropped *prometheus.Desc
}

func newEventsCollector(b *core.Broker) *eventsCollector {
	return &eventsCollector{b: b,
		published: prometheus.NewDesc("junction_events_published_total", "Broker events published to the notification address.", nil, nil),
		dropped:   prometheus.NewDesc("junction_events_dropped_total", "Broker events dropped because the event buffer (notifications.buffer) was full.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *eventsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.published
	ch <- c.dropped
}

// Collect implements prometheus.Collector.
func (c *eventsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.b.EventStats()
	ch <- prometheus.MustNewConstMetric(c.published, prometheus.CounterValue, float64(st.Published))
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.Dropped))
}

// eventList is GET /api/v1/events.
type eventList struct {
	Enabled   bool         `json:"enabled"`
	Address   string       `json:"address,omitempty"`
	Published uint64       `json:"published"`
	Dropped   uint64       `json:"dropped"`
	Events    []core.Event `json:"events"`
}

// listEvents answers the last events published, newest first; ?type=
// keeps one type, ?limit= the newest n.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	addr, on := s.b.EventsEnabled()
	st := s.b.EventStats()
	all := s.b.RecentEvents()
	typ := r.URL.Query().Get("type")
	limit := len(all)
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "limit must be a number >= 0")
			return
		}
		limit = n
	}
	out := eventList{Enabled: on, Address: addr, Published: st.Published, Dropped: st.Dropped, Events: []core.Event{}}
	for i := len(all) - 1; i >= 0 && len(out.Events) < limit; i-- {
		if typ == "" || all[i].Type == typ {
			out.Events = append(out.Events, all[i])
		}
	}
	writeJSON(w, http.StatusOK, out)
}
