package management

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/junctionmq/junction/core"
)

// Scheduled messages (core/schedule.go): those a queue holds back until
// their delivery time, and the repeating jobs the broker keeps
// (AMQ_SCHEDULED_REPEAT, AMQ_SCHEDULED_CRON); listed, counted and
// cancelled.

func (s *Server) scheduledRoutes() {
	s.route("/queues/{name}/scheduled", map[string]http.HandlerFunc{"GET": s.listQueueScheduled})
	s.route("/queues/{name}/scheduled/{id}", map[string]http.HandlerFunc{"DELETE": s.cancelQueueScheduled})
	s.route("/scheduled", map[string]http.HandlerFunc{"GET": s.listJobs})
	s.route("/scheduled/{id}", map[string]http.HandlerFunc{"DELETE": s.cancelJob})
}

type scheduledJSON struct {
	messageJSON
	Due time.Time `json:"due"`
}

type jobJSON struct {
	ID          uint64      `json:"id"`
	Address     string      `json:"address"`
	RoutingType string      `json:"routingType"`
	Next        time.Time   `json:"next"`
	Sent        uint64      `json:"sent"`
	Repeat      uint64      `json:"repeat"`
	PeriodMS    int64       `json:"periodMs"`
	DelayMS     int64       `json:"delayMs,omitempty"`
	Cron        string      `json:"cron,omitempty"`
	Message     messageJSON `json:"message"`
}

func jobOf(j core.ScheduledJob) jobJSON {
	return jobJSON{ID: j.ID, Address: j.Address, RoutingType: j.RoutingType.String(), Next: j.Next, Sent: j.Sent,
		Repeat: j.Repeat, PeriodMS: j.Period.Milliseconds(), DelayMS: j.Delay.Milliseconds(), Cron: j.Cron,
		Message: messageOf(core.BrowsedMessage{Message: j.Message, Scheduled: true})}
}

// jobsFor lists the jobs sending to address ("" for all).
func (s *Server) jobsFor(address string) []jobJSON {
	out := []jobJSON{}
	for _, j := range s.b.ScheduledJobs() {
		if address == "" || j.Address == address {
			out = append(out, jobOf(j))
		}
	}
	return out
}

func (s *Server) listQueueScheduled(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	offset, limit, ok := page(w, r)
	if !ok {
		return
	}
	st, err := s.b.QueueStat(name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	msgs, total, err := s.b.ScheduledMessages(name, offset, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]scheduledJSON, 0, len(msgs))
	for _, sm := range msgs {
		out = append(out, scheduledJSON{messageJSON: messageOf(core.BrowsedMessage{Message: sm.Message, DeliveryCount: sm.DeliveryCount, Scheduled: true}), Due: sm.Due})
	}
	writeJSON(w, http.StatusOK, map[string]any{"queue": name, "total": total, "offset": offset, "limit": limit,
		"messages": out, "jobs": s.jobsFor(st.Address)})
}

func pathID(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "id must be a message id (a number)")
		return 0, false
	}
	return id, true
}

// cancelQueueScheduled cancels a message the queue holds back, or a job
// sending to the queue's address.
func (s *Server) cancelQueueScheduled(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	err := s.b.CancelScheduled(name, id)
	if errors.Is(err, core.ErrScheduledNotFound) {
		if st, e := s.b.QueueStat(name); e == nil {
			for _, j := range s.b.ScheduledJobs() {
				if j.ID == id && j.Address == st.Address {
					err = s.b.CancelJob(id)
					break
				}
			}
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	jobs := s.jobsFor("")
	writeJSON(w, http.StatusOK, map[string]any{"total": len(jobs), "jobs": jobs})
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if err := s.b.CancelJob(id); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
