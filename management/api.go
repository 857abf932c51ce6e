package management

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/junctionmq/junction/core"
)

const (
	maxRequestBody  = 16 << 20 // a sent message's body, base64 included
	defaultPageSize = 100
	maxPageSize     = 1000
	previewBytes    = 1024 // body bytes shown by the message browser
)

func (s *Server) routes() {
	s.route("/broker", map[string]http.HandlerFunc{"GET": s.getBroker})
	s.route("/addresses", map[string]http.HandlerFunc{"GET": s.listAddresses, "POST": s.createAddress})
	s.route("/addresses/{name}", map[string]http.HandlerFunc{"GET": s.getAddress, "DELETE": s.deleteAddress})
	s.route("/addresses/{name}/messages", map[string]http.HandlerFunc{"POST": s.sendToAddress})
	s.route("/send", map[string]http.HandlerFunc{"POST": s.send})
	s.route("/queues", map[string]http.HandlerFunc{"GET": s.listQueues, "POST": s.createQueue})
	s.route("/queues/{name}", map[string]http.HandlerFunc{"GET": s.getQueue, "DELETE": s.deleteQueue})
	s.route("/queues/{name}/purge", map[string]http.HandlerFunc{"POST": s.purgeQueue})
	s.route("/queues/{name}/move", map[string]http.HandlerFunc{"POST": s.moveMessages})
	s.route("/queues/{name}/messages", map[string]http.HandlerFunc{"GET": s.browse})
	s.scheduledRoutes()
	s.route("/subscriptions", map[string]http.HandlerFunc{"GET": s.listSubscriptions})
	s.route("/connections", map[string]http.HandlerFunc{"GET": s.listConnections})
	s.route("/connections/{id}", map[string]http.HandlerFunc{"DELETE": s.closeConnection})
	s.route("/events", map[string]http.HandlerFunc{"GET": s.listEvents})
	s.route("/diverts", map[string]http.HandlerFunc{"GET": s.listDiverts, "POST": s.createDivert})
	s.route("/diverts/{name}", map[string]http.HandlerFunc{"DELETE": s.deleteDivert})
	s.route("/config", map[string]http.HandlerFunc{"GET": s.getConfig})
	s.route("/config/reload", map[string]http.HandlerFunc{"POST": s.reloadConfig})
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	})
}

// ---- plumbing ----

type apiError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	// Bodies and errors read as written (an XML body's "<order>", not
	// "\u003corder\u003e"): the answer is application/json with nosniff,
	// never HTML, so nothing needs escaping for a browser.
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Error: msg})
}

// fail answers err with the status its core sentinel calls for.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, core.ErrQueueNotFound), errors.Is(err, core.ErrAddressNotFound),
		errors.Is(err, core.ErrConnectionNotFound), errors.Is(err, core.ErrScheduledNotFound):
		status = http.StatusNotFound
	case errors.Is(err, core.ErrQueueExists), errors.Is(err, core.ErrSubscriptionInUse),
		errors.Is(err, core.ErrAddressFull), errors.Is(err, core.ErrUnroutable), errors.Is(err, ErrMemberRefused):
		status = http.StatusConflict
	case errors.Is(err, core.ErrInvalidAddress), errors.Is(err, core.ErrInvalidMessage),
		errors.Is(err, core.ErrRoutingMismatch):
		status = http.StatusBadRequest
	case errors.Is(err, core.ErrClosed):
		status = http.StatusServiceUnavailable
	}
	if status >= 500 {
		s.log.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Msg("management API call failed")
	}
	writeError(w, status, err.Error())
}

// deleteError words core's refusals of a deletion for an operator: core
// says ErrSubscriptionInUse (`core: address "a": queue "q" has
// consumers`) for any queue with consumers, a plain queue included; this
// adds what to do. Its not-found sentinels carry no name.
func deleteError(err error, kind, name string) error {
	switch {
	case errors.Is(err, core.ErrSubscriptionInUse):
		which := fmt.Sprintf("%s %q", kind, name)
		if _, rest, ok := strings.Cut(err.Error(), ": queue "); ok && kind == "address" {
			if q, err := strconv.QuotedPrefix(rest); err == nil {
				which = fmt.Sprintf("the queue %s of address %q", q, name)
			}
		}
		return reworded{which + " has consumers: close them, or their connections, first", err}
	case err == core.ErrQueueNotFound || err == core.ErrAddressNotFound:
		return fmt.Errorf("%w: %q", err, name)
	}
	return err
}

// reworded is an error with the text an operator reads and the cause
// the status is chosen by.
type reworded struct {
	msg string
	err error
}

func (e reworded) Error() string { return e.msg }
func (e reworded) Unwrap() error { return e.err }

// guard refuses mutating requests from other web origins (see the
// package doc) and POSTs that are not JSON.
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
			writeError(w, http.StatusForbidden, "cross-origin request refused")
			return
		}
		// The page must come from a name of this server. Comparing with
		// the request's own Host would prove nothing: a page on a
		// DNS-rebinding domain sends Origin and Host alike.
		if origin := r.Header.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			if err != nil || u.Host == "" || s.cfg.AllowHost == nil || !s.cfg.AllowHost(u.Host) {
				writeError(w, http.StatusForbidden, "cross-origin request refused: origin "+origin+" is not this server")
				return
			}
		}
		if r.Method == http.MethodPost {
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if err != nil || mt != "application/json" {
				writeError(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
				return
			}
		}
		h(w, r)
	}
}

// decode reads r's JSON body into v; an empty body leaves v as it is.
// It answers 400 itself and returns false when the body is malformed.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", tooBig.Limit))
		} else {
			writeError(w, http.StatusBadRequest, "reading request body: "+err.Error())
		}
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "malformed JSON: "+jsonProblem(err))
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "malformed JSON: data after the object")
		return false
	}
	return true
}

// jsonProblem words a decoding error for the API's users, in JSON's
// terms rather than Go's: `field "priority": a string where a number is
// wanted`, not `cannot unmarshal string into Go struct field
// sendRequest.priority of type int`.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Type == nil {
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	var want string
	switch te.Type.Kind() {
	case reflect.Bool:
		want = "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "an integer"
	case reflect.Float32, reflect.Float64:
		want = "a number"
	case reflect.String:
		want = "a string"
	case reflect.Slice, reflect.Array:
		want = "a list"
	default:
		want = "an object"
	}
	got := te.Value
	switch {
	case got == "array":
		got = "a list"
	case got == "object":
		got = "an object"
	case strings.HasPrefix(got, "number"):
		got = "a number"
	case got != "":
		got = "a " + got
	}
	if te.Field == "" {
		return fmt.Sprintf("the body is %s where %s is wanted", got, want)
	}
	return fmt.Sprintf("field %q: %s where %s is wanted", te.Field, got, want)
}

// page reads offset and limit, answering 400 itself on bad values.
func page(w http.ResponseWriter, r *http.Request) (offset, limit int, ok bool) {
	q := r.URL.Query()
	offset, limit = 0, defaultPageSize
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "offset must be a non-negative integer")
			return 0, 0, false
		}
		offset = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageSize {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be an integer from 1 to %d", maxPageSize))
			return 0, 0, false
		}
		limit = n
	}
	return offset, limit, true
}

func parseRouting(w http.ResponseWriter, s string, required bool) (core.RoutingType, bool) {
	rt, err := core.ParseRoutingType(strings.ToLower(s))
	if required && s == "" {
		writeError(w, http.StatusBadRequest, `routingType is required: "anycast" or "multicast"`)
		return 0, false
	}
	if err != nil || (required && rt == core.RoutingDefault) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("routingType must be \"anycast\" or \"multicast\", not %q", s))
		return 0, false
	}
	return rt, true
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// ---- broker ----

type brokerJSON struct {
	Version       string            `json:"version"`
	Started       time.Time         `json:"started"`
	UptimeSeconds float64           `json:"uptimeSeconds"`
	Listeners     map[string]string `json:"listeners"`
	Protocols     []protocolJSON    `json:"protocols"`
	Totals        brokerTotals      `json:"totals"`
	Journal       *journalJSON      `json:"journal"`
	Memory        memoryJSON        `json:"memory"`
	// MessageMemory is the broker's accounting of messages held in
	// memory against its budget (max-memory).
	MessageMemory messageMemoryJSON `json:"messageMemory"`
	// DiskFull says why durable sends are refused (the stores are over
	// their disk limits); empty when they are not.
	DiskFull   string `json:"diskFull"`
	Goroutines int    `json:"goroutines"`
	// HA is the broker's role in a shared-store group; absent without
	// one.
	HA *haJSON `json:"ha,omitempty"`
}

type messageMemoryJSON struct {
	Used int64 `json:"used"` // estimated bytes
	Max  int64 `json:"max"`  // 0 = unlimited
}

type protocolJSON struct {
	Protocol         string `json:"protocol"`
	Connections      int    `json:"connections"`
	ConnectionsTotal uint64 `json:"connectionsTotal"`
	MessagesIn       uint64 `json:"messagesIn"`
	MessagesOut      uint64 `json:"messagesOut"`
	BytesIn          uint64 `json:"bytesIn"`
	BytesOut         uint64 `json:"bytesOut"`
}

type brokerTotals struct {
	Connections int    `json:"connections"`
	MessagesIn  uint64 `json:"messagesIn"`
	MessagesOut uint64 `json:"messagesOut"`
	BytesIn     uint64 `json:"bytesIn"`
	BytesOut    uint64 `json:"bytesOut"`
	Addresses   int    `json:"addresses"`
	Queues      int    `json:"queues"`
}

type journalJSON struct {
	Appends      uint64  `json:"appends"`
	Syncs        uint64  `json:"syncs"`
	Batches      uint64  `json:"batches"`
	BatchRecords uint64  `json:"batchRecords"`
	Compactions  uint64  `json:"compactions"`
	SyncSeconds  float64 `json:"syncSeconds"`
	Files        int     `json:"files"`
	Bytes        int64   `json:"bytes"`
}

type memoryJSON struct {
	HeapAlloc   uint64 `json:"heapAlloc"`
	HeapInuse   uint64 `json:"heapInuse"`
	HeapObjects uint64 `json:"heapObjects"`
	Sys         uint64 `json:"sys"`
	TotalAlloc  uint64 `json:"totalAlloc"`
	NumGC       uint32 `json:"numGC"`
}

func (s *Server) getBroker(w http.ResponseWriter, r *http.Request) {
	started := s.b.Started()
	out := brokerJSON{
		Version:       s.cfg.Version,
		Started:       started,
		UptimeSeconds: time.Since(started).Seconds(),
		Listeners:     map[string]string{},
		Protocols:     []protocolJSON{},
		Goroutines:    runtime.NumGoroutine(),
	}
	if s.cfg.Listeners != nil {
		for k, v := range s.cfg.Listeners() {
			out.Listeners[k] = v
		}
	}
	for _, p := range s.b.ProtocolStats() {
		out.Protocols = append(out.Protocols, protocolJSON{Protocol: p.Protocol, Connections: p.Connections,
			ConnectionsTotal: p.ConnectionsTotal, MessagesIn: p.MessagesIn, MessagesOut: p.MessagesOut,
			BytesIn: p.BytesIn, BytesOut: p.BytesOut})
		out.Totals.Connections += p.Connections
		out.Totals.MessagesIn += p.MessagesIn
		out.Totals.MessagesOut += p.MessagesOut
		out.Totals.BytesIn += p.BytesIn
		out.Totals.BytesOut += p.BytesOut
	}
	slices.SortFunc(out.Protocols, func(a, b protocolJSON) int { return cmp.Compare(a.Protocol, b.Protocol) })
	out.Totals.Addresses = len(s.b.Addresses())
	out.Totals.Queues = len(s.b.QueueStats())
	if s.cfg.Journal != nil {
		j := s.cfg.Journal()
		out.Journal = &journalJSON{Appends: j.Appends, Syncs: j.Syncs, Batches: j.Batches, BatchRecords: j.BatchRecords,
			Compactions: j.Compactions, SyncSeconds: j.SyncSeconds, Files: j.Files, Bytes: j.Bytes}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out.Memory = memoryJSON{HeapAlloc: ms.HeapAlloc, HeapInuse: ms.HeapInuse, HeapObjects: ms.HeapObjects,
		Sys: ms.Sys, TotalAlloc: ms.TotalAlloc, NumGC: ms.NumGC}
	mm := s.b.Memory()
	out.MessageMemory = messageMemoryJSON{Used: mm.Used, Max: mm.Max}
	out.DiskFull = s.b.DiskFull()
	if s.cfg.HA != nil {
		out.HA = haOf(s.cfg.HA())
	}
	writeJSON(w, http.StatusOK, out)
}

// ---- addresses ----

type addressJSON struct {
	Name      string   `json:"name"`
	Anycast   bool     `json:"anycast"`
	Multicast bool     `json:"multicast"`
	Temporary bool     `json:"temporary"`
	Queues    []string `json:"queues"`
	Routed    uint64   `json:"routed"`
	Unrouted  uint64   `json:"unrouted"`
	// Duplicates counts the sends refused as duplicates (_AMQ_DUPL_ID)
	// since the broker started.
	Duplicates uint64 `json:"duplicates"`
}

func (s *Server) addresses() []addressJSON {
	stats := map[string]core.AddressStats{}
	for _, a := range s.b.AddressStats() {
		stats[a.Name] = a
	}
	infos := s.b.Addresses()
	dups := s.b.Duplicates()
	out := make([]addressJSON, 0, len(infos))
	for _, a := range infos {
		qs := a.Queues
		if qs == nil {
			qs = []string{}
		}
		st := stats[a.Name]
		out = append(out, addressJSON{Name: a.Name, Anycast: a.Anycast, Multicast: a.Multicast, Temporary: a.Temporary,
			Queues: qs, Routed: st.Routed, Unrouted: st.Unrouted, Duplicates: dups[a.Name]})
	}
	slices.SortFunc(out, func(a, b addressJSON) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (s *Server) listAddresses(w http.ResponseWriter, r *http.Request) {
	all := s.addresses()
	if f := strings.ToLower(r.URL.Query().Get("filter")); f != "" {
		all = slices.DeleteFunc(all, func(a addressJSON) bool { return !strings.Contains(strings.ToLower(a.Name), f) })
	}
	writeJSON(w, http.StatusOK, map[string]any{"total": len(all), "addresses": all})
}

func (s *Server) address(name string) (addressJSON, bool) {
	for _, a := range s.addresses() {
		if a.Name == name {
			return a, true
		}
	}
	return addressJSON{}, false
}

func (s *Server) getAddress(w http.ResponseWriter, r *http.Request) {
	a, ok := s.address(r.PathValue("name"))
	if !ok {
		s.fail(w, r, fmt.Errorf("%w: %q", core.ErrAddressNotFound, r.PathValue("name")))
		return
	}
	writeJSON(w, http.StatusOK, a)
}

type createRequest struct {
	Name        string `json:"name"`
	RoutingType string `json:"routingType"`
}

// decodeCreate reads a createRequest, answering 400 for a missing name or
// a bad routing type (an empty one allowed when allowDefault).
func decodeCreate(w http.ResponseWriter, r *http.Request, routingRequired bool) (createRequest, core.RoutingType, bool) {
	var req createRequest
	if !decode(w, r, &req) {
		return req, 0, false
	}
	if req.Name == "" {
		writeError(w, http.StatusBadRequest, "name is required")
		return req, 0, false
	}
	rt, ok := parseRouting(w, req.RoutingType, routingRequired)
	return req, rt, ok
}

func (s *Server) createAddress(w http.ResponseWriter, r *http.Request) {
	req, rt, ok := decodeCreate(w, r, true)
	if !ok {
		return
	}
	if err := s.b.CreateAddress(req.Name, rt); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info().Str("address", req.Name).Stringer("routingType", rt).Str("remote", r.RemoteAddr).Msg("console: address created")
	a, _ := s.address(req.Name)
	writeJSON(w, http.StatusCreated, a)
}

func (s *Server) deleteAddress(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.b.DeleteAddress(name); err != nil {
		s.fail(w, r, deleteError(err, "address", name))
		return
	}
	s.log.Info().Str("address", name).Str("remote", r.RemoteAddr).Msg("console: address deleted")
	w.WriteHeader(http.StatusNoContent)
}

// ---- queues ----

type queueJSON struct {
	Name         string `json:"name"`
	Address      string `json:"address"`
	RoutingType  string `json:"routingType"`
	Durable      bool   `json:"durable"`
	Temporary    bool   `json:"temporary"`
	ClientID     string `json:"clientId,omitempty"`
	Selector     string `json:"selector,omitempty"`
	Depth        int64  `json:"depth"`
	InFlight     int64  `json:"inFlight"`
	Scheduled    int64  `json:"scheduled"`
	Consumers    int64  `json:"consumers"`
	Enqueued     uint64 `json:"enqueued"`
	Dequeued     uint64 `json:"dequeued"`
	Expired      uint64 `json:"expired"`
	DeadLettered uint64 `json:"deadLettered"`
	Dropped      uint64 `json:"dropped"`
	Replaced     uint64 `json:"replaced"`
	// NonDestructive: consumers leave the messages queued; absent when not.
	NonDestructive bool       `json:"nonDestructive,omitempty"`
	Paged          int64      `json:"paged"`
	Bytes          int64      `json:"bytes"`
	MaxBytes       int64      `json:"maxBytes"`
	OldestMessage  *time.Time `json:"oldestMessage,omitempty"`
}

func queueOf(q core.QueueStats) queueJSON {
	return queueJSON{Name: q.Name, Address: q.Address, RoutingType: q.RoutingType.String(), Durable: q.Durable,
		Temporary: q.Temporary, ClientID: q.ClientID, Selector: q.Selector, Depth: q.Depth, InFlight: q.InFlight, Scheduled: q.Scheduled,
		Consumers: q.Consumers, Enqueued: q.Enqueued, Dequeued: q.Dequeued, Expired: q.Expired,
		DeadLettered: q.DeadLettered, Dropped: q.Dropped, Replaced: q.Replaced, Paged: q.Paged, Bytes: q.Bytes, MaxBytes: q.MaxBytes,
		OldestMessage: timePtr(q.OldestMessage), NonDestructive: q.NonDestructive}
}

// queueTotals sums every queue, whatever the filter: the console derives
// its message rates from them.
type queueTotals struct {
	Queues    int    `json:"queues"`
	Depth     int64  `json:"depth"`
	InFlight  int64  `json:"inFlight"`
	Consumers int64  `json:"consumers"`
	Enqueued  uint64 `json:"enqueued"`
	Dequeued  uint64 `json:"dequeued"`
	Bytes     int64  `json:"bytes"`
}

// queueSorts are the columns GET /queues sorts by; ties go by name.
var queueSorts = map[string]func(a, b *core.QueueStats) int{
	"name":         func(a, b *core.QueueStats) int { return 0 },
	"address":      func(a, b *core.QueueStats) int { return strings.Compare(a.Address, b.Address) },
	"routingType":  func(a, b *core.QueueStats) int { return cmp.Compare(a.RoutingType, b.RoutingType) },
	"depth":        func(a, b *core.QueueStats) int { return cmp.Compare(a.Depth, b.Depth) },
	"inFlight":     func(a, b *core.QueueStats) int { return cmp.Compare(a.InFlight, b.InFlight) },
	"scheduled":    func(a, b *core.QueueStats) int { return cmp.Compare(a.Scheduled, b.Scheduled) },
	"consumers":    func(a, b *core.QueueStats) int { return cmp.Compare(a.Consumers, b.Consumers) },
	"enqueued":     func(a, b *core.QueueStats) int { return cmp.Compare(a.Enqueued, b.Enqueued) },
	"dequeued":     func(a, b *core.QueueStats) int { return cmp.Compare(a.Dequeued, b.Dequeued) },
	"expired":      func(a, b *core.QueueStats) int { return cmp.Compare(a.Expired, b.Expired) },
	"deadLettered": func(a, b *core.QueueStats) int { return cmp.Compare(a.DeadLettered, b.DeadLettered) },
	"dropped":      func(a, b *core.QueueStats) int { return cmp.Compare(a.Dropped, b.Dropped) },
	"replaced":     func(a, b *core.QueueStats) int { return cmp.Compare(a.Replaced, b.Replaced) },
	"paged":        func(a, b *core.QueueStats) int { return cmp.Compare(a.Paged, b.Paged) },
	"bytes":        func(a, b *core.QueueStats) int { return cmp.Compare(a.Bytes, b.Bytes) },
	"durable": func(a, b *core.QueueStats) int {
		return cmp.Compare(btoi(a.Durable), btoi(b.Durable))
	},
	"oldestMessage": func(a, b *core.QueueStats) int { return a.OldestMessage.Compare(b.OldestMessage) },
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) {
	offset, limit, ok := page(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	key, desc := q.Get("sort"), false
	if k, ok := strings.CutPrefix(key, "-"); ok {
		key, desc = k, true
	}
	if key == "" {
		key = "name"
	}
	by, ok := queueSorts[key]
	if !ok {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("cannot sort by %q", key))
		return
	}
	switch q.Get("order") {
	case "", "asc":
	case "desc":
		desc = true // as a leading "-" does; the two together are not ascending
	default:
		writeError(w, http.StatusBadRequest, "order must be asc or desc")
		return
	}
	filter := strings.ToLower(q.Get("filter"))

	all := s.b.QueueStats()
	var totals queueTotals
	totals.Queues = len(all)
	kept := all[:0]
	for i := range all {
		st := &all[i]
		totals.Depth += st.Depth
		totals.InFlight += st.InFlight
		totals.Consumers += st.Consumers
		totals.Enqueued += st.Enqueued
		totals.Dequeued += st.Dequeued
		totals.Bytes += st.Bytes
		if filter == "" || strings.Contains(strings.ToLower(st.Name), filter) || strings.Contains(strings.ToLower(st.Address), filter) {
			kept = append(kept, *st)
		}
	}
	slices.SortFunc(kept, func(a, b core.QueueStats) int {
		// An empty queue has no oldest message: it goes last whichever
		// the direction (ascending put it first, as the zero time).
		if key == "oldestMessage" {
			if az, bz := a.OldestMessage.IsZero(), b.OldestMessage.IsZero(); az != bz {
				return btoi(az) - btoi(bz)
			}
		}
		c := by(&a, &b)
		if c == 0 {
			c = strings.Compare(a.Name, b.Name)
		}
		if desc {
			c = -c
		}
		return c
	})
	total := len(kept)
	lo, hi := min(offset, total), min(offset+limit, total)
	out := make([]queueJSON, 0, hi-lo)
	for _, st := range kept[lo:hi] {
		out = append(out, queueOf(st))
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"total": total, "offset": offset, "limit": limit, "queues": out, "totals": totals,
	})
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request) {
	st, err := s.b.QueueStat(r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, queueOf(st))
}

func (s *Server) createQueue(w http.ResponseWriter, r *http.Request) {
	req, rt, ok := decodeCreate(w, r, false)
	if !ok {
		return
	}
	if rt == core.RoutingDefault {
		rt = core.Anycast
	}
	if err := s.b.CreateQueue(req.Name, rt); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info().Str("queue", req.Name).Stringer("routingType", rt).Str("remote", r.RemoteAddr).Msg("console: queue created")
	if rt == core.Multicast {
		// No queue was made: the address now takes multicast sends. Its
		// anycast queue of the same name, if any, is not what was created.
		a, _ := s.address(req.Name)
		writeJSON(w, http.StatusCreated, a)
		return
	}
	st, err := s.b.QueueStat(req.Name)
	if err != nil { // deleted meanwhile
		writeJSON(w, http.StatusCreated, map[string]string{"name": req.Name})
		return
	}
	writeJSON(w, http.StatusCreated, queueOf(st))
}

func (s *Server) deleteQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.b.DeleteQueue(name); err != nil {
		s.fail(w, r, deleteError(err, "queue", name))
		return
	}
	s.log.Info().Str("queue", name).Str("remote", r.RemoteAddr).Msg("console: queue deleted")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) purgeQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var none struct{}
	if !decode(w, r, &none) {
		return
	}
	n, err := s.b.PurgeQueue(name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info().Str("queue", name).Int("messages", n).Str("remote", r.RemoteAddr).Msg("console: queue purged")
	writeJSON(w, http.StatusOK, map[string]any{"queue": name, "purged": n})
}

type moveRequest struct {
	To  string `json:"to"`
	Max int    `json:"max"`
}

func (s *Server) moveMessages(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var req moveRequest
	if !decode(w, r, &req) {
		return
	}
	if req.To == "" {
		writeError(w, http.StatusBadRequest, "to is required")
		return
	}
	if req.Max < 0 {
		writeError(w, http.StatusBadRequest, "max must not be negative (0 moves every message)")
		return
	}
	n, err := s.b.MoveMessages(name, req.To, req.Max)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info().Str("queue", name).Str("to", req.To).Int("messages", n).Str("remote", r.RemoteAddr).Msg("console: messages moved")
	writeJSON(w, http.StatusOK, map[string]any{"from": name, "to": req.To, "moved": n})
}

// ---- browse ----

type messageJSON struct {
	ID            uint64         `json:"id"`
	Address       string         `json:"address"`
	RoutingType   string         `json:"routingType"`
	Durable       bool           `json:"durable"`
	Priority      uint8          `json:"priority"`
	Timestamp     *time.Time     `json:"timestamp,omitempty"`
	Expiration    *time.Time     `json:"expiration,omitempty"`
	DeliveryTime  *time.Time     `json:"deliveryTime,omitempty"`
	ContentType   string         `json:"contentType,omitempty"`
	CorrelationID string         `json:"correlationId,omitempty"`
	ReplyTo       string         `json:"replyTo,omitempty"`
	GroupID       string         `json:"groupId,omitempty"`
	UserID        string         `json:"userId,omitempty"`
	Properties    map[string]any `json:"properties"`
	DeliveryCount uint32         `json:"deliveryCount"`
	InFlight      bool           `json:"inFlight"`
	Scheduled     bool           `json:"scheduled"`
	Size          int64          `json:"size"`
	Body          string         `json:"body"`
	BodyEncoding  string         `json:"bodyEncoding"` // "text" or "base64"
	Truncated     bool           `json:"truncated"`
}

// preview returns the first previewBytes of body as text when they are
// UTF-8 (a rune cut by the limit is dropped), else as base64.
func preview(body []byte) (text, encoding string, truncated bool) {
	p := body
	if len(p) > previewBytes {
		p, truncated = p[:previewBytes], true
	}
	if truncated {
		// Drop a rune the cut split: at most utf8.UTFMax-1 bytes.
		for i := 0; i < utf8.UTFMax-1 && len(p) > 0 && !utf8.Valid(p); i++ {
			p = p[:len(p)-1]
		}
	}
	if utf8.Valid(p) {
		return string(p), "text", truncated
	}
	p = body[:min(len(body), previewBytes)]
	return base64.StdEncoding.EncodeToString(p), "base64", truncated
}

func messageOf(bm core.BrowsedMessage) messageJSON {
	m := bm.Message
	// A front-end's internal properties (the AMQP sections it keeps to
	// deliver them as sent, ...) are its own business, as they are for
	// every client.
	props := make(map[string]any, len(m.Properties))
	for k, v := range m.Properties {
		if !core.IsInternalProperty(k) {
			props[k] = v
		}
	}
	// A large body stays in its file: only its start is read (by
	// reference, as the queue holds it).
	head, err := m.BodyHead(previewBytes + 1)
	if err != nil {
		head = nil
	}
	body, enc, trunc := preview(head)
	trunc = trunc || int64(len(head)) < m.Size()
	return messageJSON{ID: m.ID, Address: m.Address, RoutingType: m.RoutingType.String(), Durable: m.Durable,
		Priority: m.Priority, Timestamp: timePtr(m.Timestamp), Expiration: timePtr(m.Expiration),
		DeliveryTime: timePtr(m.DeliveryTime), ContentType: m.ContentType, CorrelationID: m.CorrelationID,
		ReplyTo: m.ReplyTo, GroupID: m.GroupID, UserID: m.UserID, Properties: props,
		DeliveryCount: bm.DeliveryCount, InFlight: bm.InFlight, Scheduled: bm.Scheduled,
		Size: m.Size(), Body: body, BodyEncoding: enc, Truncated: trunc}
}

func (s *Server) browse(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	offset, limit, ok := page(w, r)
	if !ok {
		return
	}
	msgs, total, err := s.b.Browse(name, offset, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]messageJSON, 0, len(msgs))
	for _, bm := range msgs {
		out = append(out, messageOf(bm))
	}
	writeJSON(w, http.StatusOK, map[string]any{"queue": name, "total": total, "offset": offset, "limit": limit, "messages": out})
}

// ---- send ----

type sendRequest struct {
	Address     string                     `json:"address"`
	RoutingType string                     `json:"routingType"`
	Body        string                     `json:"body"`
	BodyBase64  string                     `json:"bodyBase64"`
	Properties  map[string]json.RawMessage `json:"properties"`
	Durable     bool                       `json:"durable"`
	Priority    *int                       `json:"priority"`
	ContentType string                     `json:"contentType"`
}

// property converts a JSON property value to one core carries: string,
// bool, null, int64 for integral numbers, float64 for the others.
func property(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case nil, string, bool:
		return v, nil
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i, nil
		}
		return v.Float64()
	}
	return nil, errors.New("values must be strings, numbers, booleans or null")
}

func (s *Server) sendToAddress(w http.ResponseWriter, r *http.Request) {
	s.sendMessage(w, r, r.PathValue("name"))
}

func (s *Server) send(w http.ResponseWriter, r *http.Request) { s.sendMessage(w, r, "") }

func (s *Server) sendMessage(w http.ResponseWriter, r *http.Request, address string) {
	var req sendRequest
	if !decode(w, r, &req) {
		return
	}
	if address != "" {
		if req.Address != "" && req.Address != address {
			writeError(w, http.StatusBadRequest, "address in the body differs from the URL's")
			return
		}
		req.Address = address
	}
	if req.Address == "" {
		writeError(w, http.StatusBadRequest, "address is required")
		return
	}
	rt, ok := parseRouting(w, req.RoutingType, false)
	if !ok {
		return
	}
	if strings.Contains(req.Address, ",") {
		// An ActiveMQ composite destination (docs/features.md).
		req.Address = core.CompositeAddress(req.Address, rt)
	}
	m := &core.Message{Address: req.Address, RoutingType: rt, Durable: req.Durable,
		Priority: core.DefaultPriority, ContentType: req.ContentType}
	switch {
	case req.Body != "" && req.BodyBase64 != "":
		writeError(w, http.StatusBadRequest, "give body or bodyBase64, not both")
		return
	case req.BodyBase64 != "":
		b, err := base64.StdEncoding.DecodeString(req.BodyBase64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bodyBase64: "+err.Error())
			return
		}
		m.Body = b
	default:
		m.Body = []byte(req.Body)
	}
	if req.Priority != nil {
		if *req.Priority < 0 || *req.Priority > core.MaxPriority {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("priority must be from 0 to %d", core.MaxPriority))
			return
		}
		m.Priority = uint8(*req.Priority)
	}
	if len(req.Properties) > 0 {
		m.Properties = make(map[string]any, len(req.Properties))
		for k, raw := range req.Properties {
			if k == "" || core.IsInternalProperty(k) {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("property name %q is not allowed", k))
				return
			}
			v, err := property(raw)
			if err != nil {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("property %q: %v", k, err))
				return
			}
			m.Properties[k] = v
		}
	}
	sess, err := s.b.NewSession(core.SessionOptions{User: requestUser(r)})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer sess.Close()
	if err := sess.Send(r.Context(), m); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info().Str("address", m.Address).Uint64("id", m.ID).Str("remote", r.RemoteAddr).Msg("console: message sent")
	writeJSON(w, http.StatusCreated, map[string]any{"id": m.ID, "address": m.Address, "routingType": m.RoutingType.String()})
}

// ---- subscriptions ----

type subscriptionJSON struct {
	queueJSON
	Kind string `json:"kind"` // "durable" or "shared"
}

// sharedPrefix begins the queue name of a shared subscription.
const sharedPrefix = "$share/"

func (s *Server) listSubscriptions(w http.ResponseWriter, r *http.Request) {
	var out []subscriptionJSON
	for _, st := range s.b.QueueStats() {
		if st.RoutingType != core.Multicast {
			continue
		}
		kind := ""
		switch {
		case strings.HasPrefix(st.Name, sharedPrefix):
			kind = "shared"
		case st.Durable || st.ClientID != "":
			kind = "durable"
		default:
			continue
		}
		out = append(out, subscriptionJSON{queueJSON: queueOf(st), Kind: kind})
	}
	if out == nil {
		out = []subscriptionJSON{}
	}
	slices.SortFunc(out, func(a, b subscriptionJSON) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, map[string]any{"total": len(out), "subscriptions": out})
}

// ---- connections ----

type connectionJSON struct {
	ID          uint64    `json:"id"`
	Protocol    string    `json:"protocol"`
	RemoteAddr  string    `json:"remoteAddr"`
	User        string    `json:"user"`
	ClientID    string    `json:"clientId"`
	Opened      time.Time `json:"opened"`
	Consumers   int       `json:"consumers"`
	MessagesIn  uint64    `json:"messagesIn"`
	MessagesOut uint64    `json:"messagesOut"`
	BytesIn     uint64    `json:"bytesIn"`
	BytesOut    uint64    `json:"bytesOut"`
	// Dropped counts the connection's messages a queue dropped (DROP, or
	// non-durable over a PAGE limit); Refused its sends refused (FAIL, or
	// the disk limit).
	Dropped uint64 `json:"dropped"`
	Refused uint64 `json:"refused"`
}

func (s *Server) listConnections(w http.ResponseWriter, r *http.Request) {
	conns := s.b.Connections()
	out := make([]connectionJSON, 0, len(conns))
	for _, c := range conns {
		out = append(out, connectionJSON{ID: c.ID, Protocol: c.Protocol, RemoteAddr: c.RemoteAddr, User: c.User,
			ClientID: c.ClientID, Opened: c.Opened, Consumers: c.Consumers, MessagesIn: c.MessagesIn,
			MessagesOut: c.MessagesOut, BytesIn: c.BytesIn, BytesOut: c.BytesOut, Dropped: c.Dropped, Refused: c.Refused})
	}
	slices.SortFunc(out, func(a, b connectionJSON) int { return cmp.Compare(a.ID, b.ID) })
	writeJSON(w, http.StatusOK, map[string]any{"total": len(out), "connections": out})
}

func (s *Server) closeConnection(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "connection id must be an unsigned integer")
		return
	}
	if err := s.b.CloseConnection(id); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info().Uint64("connection", id).Str("remote", r.RemoteAddr).Msg("console: connection closed")
	w.WriteHeader(http.StatusNoContent)
}
