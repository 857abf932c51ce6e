package management_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/management"
)

type env struct {
	t     *testing.T
	b     *core.Broker
	srv   *httptest.Server
	ready atomic.Bool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	b, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, b: b}
	e.ready.Store(true)
	h := management.New(management.Config{
		Version:   "1.2.3",
		Listeners: func() map[string]string { return map[string]string{"stomp": "127.0.0.1:61613"} },
		Journal: func() management.JournalStats {
			return management.JournalStats{Appends: 10, Syncs: 4, Batches: 4, BatchRecords: 10, Compactions: 1,
				SyncSeconds: 0.012, SyncLatencyBuckets: []float64{0.001, 0.01}, SyncLatencyCounts: []uint64{1, 2, 1},
				Files: 2, Bytes: 1 << 20}
		},
		Ready:     e.ready.Load,
		AllowHost: loopbackHost,
	}, b)
	e.srv = httptest.NewServer(h)
	t.Cleanup(func() {
		e.srv.Close()
		b.Close()
	})
	return e
}

// do sends a request (a JSON body when body is not nil, or when the
// method is POST) and decodes a JSON answer into a generic value.
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

func (e *env) send(s *core.Session, addr string, body []byte, props map[string]any) {
	e.t.Helper()
	m := &core.Message{Address: addr, RoutingType: core.Anycast, Body: body, Properties: props}
	if err := s.Send(context.Background(), m); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) depth(queue string) int64 {
	e.t.Helper()
	q := e.b.Queue(queue)
	if q == nil {
		e.t.Fatalf("queue %q does not exist", queue)
	}
	return q.Stats().Depth
}

func num(v any) float64 { f, _ := v.(float64); return f }

func TestBroker(t *testing.T) {
	e := newEnv(t)
	e.session(core.SessionOptions{Protocol: "stomp", RemoteAddr: "10.0.0.1:5000"})
	out := e.want(200, "GET", "/api/v1/broker", nil)
	if out["version"] != "1.2.3" {
		t.Errorf("version %v", out["version"])
	}
	if l := out["listeners"].(map[string]any); l["stomp"] != "127.0.0.1:61613" {
		t.Errorf("listeners %v", l)
	}
	if num(out["uptimeSeconds"]) < 0 {
		t.Errorf("uptime %v", out["uptimeSeconds"])
	}
	if j := out["journal"].(map[string]any); num(j["appends"]) != 10 || num(j["files"]) != 2 {
		t.Errorf("journal %v", j)
	}
	if m := out["memory"].(map[string]any); num(m["heapAlloc"]) <= 0 {
		t.Errorf("memory %v", m)
	}
	ps := out["protocols"].([]any)
	if len(ps) != 1 || ps[0].(map[string]any)["protocol"] != "stomp" || num(ps[0].(map[string]any)["connections"]) != 1 {
		t.Errorf("protocols %v", ps)
	}
	if tot := out["totals"].(map[string]any); num(tot["connections"]) != 1 {
		t.Errorf("totals %v", tot)
	}
}

func TestBrokerWithoutJournal(t *testing.T) {
	b, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	srv := httptest.NewServer(management.New(management.Config{}, b))
	defer srv.Close()
	res, err := http.Get(srv.URL + "/api/v1/broker")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	json.NewDecoder(res.Body).Decode(&out)
	if res.StatusCode != 200 || out["journal"] != nil {
		t.Fatalf("status %d journal %v", res.StatusCode, out["journal"])
	}
	if res, err := http.Get(srv.URL + "/readyz"); err != nil || res.StatusCode != 200 {
		t.Fatalf("readyz without Ready: %v %v", res, err)
	}
}

func TestAddresses(t *testing.T) {
	e := newEnv(t)
	a := e.want(201, "POST", "/api/v1/addresses", map[string]any{"name": "orders", "routingType": "anycast"})
	if a["name"] != "orders" || a["anycast"] != true {
		t.Fatalf("created %v", a)
	}
	e.want(201, "POST", "/api/v1/addresses", map[string]any{"name": "news", "routingType": "MULTICAST"})
	list := e.want(200, "GET", "/api/v1/addresses", nil)
	if num(list["total"]) != 2 {
		t.Fatalf("list %v", list)
	}
	as := list["addresses"].([]any)
	if as[0].(map[string]any)["name"] != "news" || as[0].(map[string]any)["multicast"] != true {
		t.Errorf("first address %v", as[0])
	}
	if qs := as[1].(map[string]any)["queues"].([]any); len(qs) != 1 || qs[0] != "orders" {
		t.Errorf("orders queues %v", qs)
	}
	if f := e.want(200, "GET", "/api/v1/addresses?filter=NEW", nil); num(f["total"]) != 1 {
		t.Errorf("filtered %v", f)
	}
	e.want(200, "GET", "/api/v1/addresses/orders", nil)

	e.want(400, "POST", "/api/v1/addresses", map[string]any{"name": "x", "routingType": "broadcast"})
	e.want(400, "POST", "/api/v1/addresses", map[string]any{"name": "x"})
	e.want(400, "POST", "/api/v1/addresses", map[string]any{"routingType": "anycast"})
	e.want(400, "POST", "/api/v1/addresses", map[string]any{"name": "a.#", "routingType": "anycast"})

	e.want(204, "DELETE", "/api/v1/addresses/orders", nil)
	e.want(404, "DELETE", "/api/v1/addresses/orders", nil)
	e.want(404, "GET", "/api/v1/addresses/orders", nil)
	if q := e.b.Queue("orders"); q != nil {
		t.Error("queue orders survived its address")
	}
}

func TestQueueLifecycle(t *testing.T) {
	e := newEnv(t)
	q := e.want(201, "POST", "/api/v1/queues", map[string]any{"name": "jobs", "routingType": "anycast"})
	if q["name"] != "jobs" || q["routingType"] != "anycast" || num(q["depth"]) != 0 {
		t.Fatalf("created %v", q)
	}
	if out := e.want(409, "POST", "/api/v1/queues", map[string]any{"name": "jobs", "routingType": "anycast"}); !strings.Contains(out["error"].(string), "exists") {
		t.Errorf("409 error %v", out)
	}
	s := e.session(core.SessionOptions{})
	e.send(s, "jobs", []byte("x"), nil)
	q = e.want(200, "GET", "/api/v1/queues/jobs", nil)
	if num(q["depth"]) != 1 || num(q["enqueued"]) != 1 || q["oldestMessage"] == nil {
		t.Errorf("queue %v", q)
	}

	c, err := s.Subscribe(core.ConsumerOptions{Address: "jobs", RoutingType: core.Anycast, Handler: func(core.Delivery) {}})
	if err != nil {
		t.Fatal(err)
	}
	e.want(409, "DELETE", "/api/v1/queues/jobs", nil) // has a consumer
	c.Close()
	e.want(204, "DELETE", "/api/v1/queues/jobs", nil)
	e.want(404, "GET", "/api/v1/queues/jobs", nil)
	e.want(404, "DELETE", "/api/v1/queues/jobs", nil)
	e.want(404, "POST", "/api/v1/queues/jobs/purge", nil)
	e.want(404, "GET", "/api/v1/queues/jobs/messages", nil)
	e.want(404, "POST", "/api/v1/queues/jobs/move", map[string]any{"to": "x"})

	// A name with a slash travels percent-encoded.
	e.want(201, "POST", "/api/v1/queues", map[string]any{"name": "a/b"})
	if q := e.want(200, "GET", "/api/v1/queues/"+url.PathEscape("a/b"), nil); q["name"] != "a/b" {
		t.Errorf("a/b: %v", q)
	}
	e.want(204, "DELETE", "/api/v1/queues/a%2Fb", nil)
}

func TestQueuesPaging(t *testing.T) {
	e := newEnv(t)
	s := e.session(core.SessionOptions{})
	for i := range 25 {
		name := fmt.Sprintf("q%02d", i)
		if err := e.b.CreateQueue(name, core.Anycast); err != nil {
			t.Fatal(err)
		}
		for range i % 5 {
			e.send(s, name, []byte("m"), nil)
		}
	}
	names := func(out map[string]any) []string {
		var ns []string
		for _, q := range out["queues"].([]any) {
			ns = append(ns, q.(map[string]any)["name"].(string))
		}
		return ns
	}
	out := e.want(200, "GET", "/api/v1/queues?offset=20&limit=10", nil)
	if num(out["total"]) != 25 || strings.Join(names(out), ",") != "q20,q21,q22,q23,q24" {
		t.Errorf("last page: total %v names %v", out["total"], names(out))
	}
	if tot := out["totals"].(map[string]any); num(tot["queues"]) != 25 || num(tot["depth"]) != 50 || num(tot["enqueued"]) != 50 {
		t.Errorf("totals %v", tot)
	}
	out = e.want(200, "GET", "/api/v1/queues?sort=-depth&limit=3", nil)
	if got := strings.Join(names(out), ","); got != "q24,q19,q14" {
		t.Errorf("by depth desc: %s", got)
	}
	out = e.want(200, "GET", "/api/v1/queues?sort=depth&order=desc&limit=2&offset=1", nil)
	if got := strings.Join(names(out), ","); got != "q19,q14" {
		t.Errorf("order=desc page 2: %s", got)
	}
	out = e.want(200, "GET", "/api/v1/queues?filter=Q1&sort=name", nil)
	if num(out["total"]) != 10 || names(out)[0] != "q10" {
		t.Errorf("filter: total %v names %v", out["total"], names(out))
	}
	out = e.want(200, "GET", "/api/v1/queues?offset=100", nil)
	if num(out["total"]) != 25 || len(out["queues"].([]any)) != 0 {
		t.Errorf("past the end: %v", out)
	}
	for _, bad := range []string{"limit=0", "limit=5000", "limit=x", "offset=-1", "sort=colour", "order=up"} {
		e.want(400, "GET", "/api/v1/queues?"+bad, nil)
	}
}

func TestQueuesManyAreFast(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 queues")
	}
	e := newEnv(t)
	for i := range 10000 {
		if err := e.b.CreateQueue(fmt.Sprintf("queue.%05d", i), core.Anycast); err != nil {
			t.Fatal(err)
		}
	}
	e.want(200, "GET", "/api/v1/queues?sort=-depth&limit=50", nil) // warm up
	start := time.Now()
	const rounds = 5
	for range rounds {
		out := e.want(200, "GET", "/api/v1/queues?sort=-enqueued&filter=queue.01&offset=500&limit=50", nil)
		if num(out["total"]) != 1000 || len(out["queues"].([]any)) != 50 {
			t.Fatalf("total %v", out["total"])
		}
	}
	per := time.Since(start) / rounds
	t.Logf("GET /queues over 10,000 queues: %v per request", per)
	if per > 500*time.Millisecond {
		t.Errorf("GET /queues took %v over 10,000 queues", per)
	}
}

func TestBrowseDoesNotConsume(t *testing.T) {
	e := newEnv(t)
	s := e.session(core.SessionOptions{})
	big := append([]byte("a"), bytes.Repeat([]byte("é"), 700)...) // 1401 bytes: 1024 cuts an é
	binary := []byte{0xff, 0x00, 0xfe, 'a'}
	e.send(s, "inbox", []byte("hello"), map[string]any{"n": int64(7), "ok": true, core.InternalPropertyPrefix + "AMQP_BODY": []byte{0x00}})
	e.send(s, "inbox", binary, nil)
	e.send(s, "inbox", big, nil)

	out := e.want(200, "GET", "/api/v1/queues/inbox/messages", nil)
	if num(out["total"]) != 3 {
		t.Fatalf("total %v", out["total"])
	}
	ms := out["messages"].([]any)
	m0, m1, m2 := ms[0].(map[string]any), ms[1].(map[string]any), ms[2].(map[string]any)
	if m0["body"] != "hello" || m0["bodyEncoding"] != "text" || num(m0["size"]) != 5 || m0["truncated"] != false {
		t.Errorf("text message %v", m0)
	}
	if p := m0["properties"].(map[string]any); num(p["n"]) != 7 || p["ok"] != true || len(p) != 2 {
		t.Errorf("properties %v (a front-end's internal properties must not show)", p)
	}
	if m0["userId"] != "" && m0["userId"] != nil {
		t.Errorf("user %v", m0["userId"])
	}
	if m1["bodyEncoding"] != "base64" || m1["body"] != "/wD+YQ==" {
		t.Errorf("binary message %v", m1)
	}
	if m2["bodyEncoding"] != "text" || m2["truncated"] != true || num(m2["size"]) != 1401 || len(m2["body"].(string)) != 1023 {
		t.Errorf("big message: encoding %v truncated %v size %v preview %d bytes", m2["bodyEncoding"], m2["truncated"], m2["size"], len(m2["body"].(string)))
	}
	page := e.want(200, "GET", "/api/v1/queues/inbox/messages?offset=1&limit=1", nil)
	if pm := page["messages"].([]any); len(pm) != 1 || num(pm[0].(map[string]any)["id"]) != num(m1["id"]) {
		t.Errorf("page 2 %v", pm)
	}
	if d := e.depth("inbox"); d != 3 {
		t.Fatalf("depth %d after browsing, want 3", d)
	}

	// A consumer still gets all three; browsing then shows them in flight.
	got := make(chan core.Delivery, 3)
	c, err := s.Subscribe(core.ConsumerOptions{Address: "inbox", RoutingType: core.Anycast, Credit: 10,
		Handler: func(d core.Delivery) { got <- d }})
	if err != nil {
		t.Fatal(err)
	}
	var ds []core.Delivery
	for range 3 {
		select {
		case d := <-got:
			ds = append(ds, d)
		case <-time.After(5 * time.Second):
			t.Fatal("consumer did not get the browsed messages")
		}
	}
	if string(ds[0].Message.Body) != "hello" {
		t.Errorf("first delivery %q", ds[0].Message.Body)
	}
	out = e.want(200, "GET", "/api/v1/queues/inbox/messages", nil)
	if ms := out["messages"].([]any); len(ms) != 3 || ms[0].(map[string]any)["inFlight"] != true {
		t.Errorf("in flight not shown: %v", ms)
	}
	for _, d := range ds {
		if err := c.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
	}
	if d := e.depth("inbox"); d != 0 {
		t.Errorf("depth %d after acks", d)
	}
	e.want(400, "GET", "/api/v1/queues/inbox/messages?limit=-3", nil)
}

func TestPurge(t *testing.T) {
	e := newEnv(t)
	s := e.session(core.SessionOptions{})
	for range 5 {
		e.send(s, "work", []byte("m"), nil)
	}
	out := e.want(200, "POST", "/api/v1/queues/work/purge", nil)
	if num(out["purged"]) != 5 {
		t.Errorf("purged %v", out)
	}
	if d := e.depth("work"); d != 0 {
		t.Errorf("depth %d after purge", d)
	}
	e.send(s, "work", []byte("after"), nil)
	if d := e.depth("work"); d != 1 {
		t.Errorf("depth %d after a send", d)
	}
}

func TestMove(t *testing.T) {
	e := newEnv(t)
	s := e.session(core.SessionOptions{})
	for i := range 4 {
		e.send(s, "DLQ.orders", []byte(fmt.Sprint(i)), nil)
	}
	if err := e.b.CreateAddress("orders", core.Anycast); err != nil {
		t.Fatal(err)
	}
	out := e.want(200, "POST", "/api/v1/queues/DLQ.orders/move", map[string]any{"to": "orders", "max": 3})
	if num(out["moved"]) != 3 {
		t.Errorf("moved %v", out)
	}
	if d1, d2 := e.depth("DLQ.orders"), e.depth("orders"); d1 != 1 || d2 != 3 {
		t.Errorf("depths %d, %d after moving 3", d1, d2)
	}
	msgs := e.want(200, "GET", "/api/v1/queues/orders/messages", nil)["messages"].([]any)
	if msgs[0].(map[string]any)["body"] != "0" {
		t.Errorf("first moved message %v", msgs[0])
	}
	if out := e.want(200, "POST", "/api/v1/queues/DLQ.orders/move", map[string]any{"to": "orders"}); num(out["moved"]) != 1 {
		t.Errorf("move all: %v", out)
	}
	e.want(404, "POST", "/api/v1/queues/orders/move", map[string]any{"to": "nowhere"})
	e.want(400, "POST", "/api/v1/queues/orders/move", map[string]any{"to": "orders"})
	e.want(400, "POST", "/api/v1/queues/orders/move", map[string]any{})
	e.want(400, "POST", "/api/v1/queues/orders/move", map[string]any{"to": "DLQ.orders", "max": -1})
}

func TestSend(t *testing.T) {
	e := newEnv(t)
	out := e.want(201, "POST", "/api/v1/send", map[string]any{
		"address": "rpc", "routingType": "anycast", "body": "ping", "durable": true, "priority": 7,
		"contentType": "text/plain", "properties": map[string]any{"i": 3, "f": 1.5, "s": "x", "b": false, "nil": nil},
	})
	if num(out["id"]) == 0 || out["address"] != "rpc" {
		t.Fatalf("send answer %v", out)
	}
	e.want(201, "POST", "/api/v1/addresses/rpc/messages", map[string]any{"bodyBase64": "AAE="})

	ch := make(chan core.Delivery, 2)
	s := e.session(core.SessionOptions{})
	if _, err := s.Subscribe(core.ConsumerOptions{Address: "rpc", RoutingType: core.Anycast, Credit: 10,
		Handler: func(d core.Delivery) { ch <- d }}); err != nil {
		t.Fatal(err)
	}
	var got []core.Delivery
	for range 2 {
		select {
		case d := <-ch:
			got = append(got, d)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d deliveries", len(got))
		}
	}
	m := got[0].Message
	if string(m.Body) != "ping" || !m.Durable || m.Priority != 7 || m.ContentType != "text/plain" || m.UserID != "admin" {
		t.Errorf("message %+v", m)
	}
	if m.Properties["i"] != int64(3) || m.Properties["f"] != 1.5 || m.Properties["s"] != "x" || m.Properties["b"] != false {
		t.Errorf("properties %#v", m.Properties)
	}
	if v, ok := m.Properties["nil"]; !ok || v != nil {
		t.Errorf("nil property %#v", m.Properties)
	}
	if b := got[1].Message.Body; !bytes.Equal(b, []byte{0, 1}) {
		t.Errorf("base64 body %v", b)
	}

	for _, bad := range []map[string]any{
		{"body": "no address"},
		{"address": "a", "priority": 10},
		{"address": "a", "routingType": "sideways"},
		{"address": "a", "properties": map[string]any{"o": map[string]any{"x": 1}}},
		{"address": "a", "properties": map[string]any{"_JUNCTION_X": "y"}},
		{"address": "a", "body": "x", "bodyBase64": "eA=="},
		{"address": "a", "bodyBase64": "%%%"},
		{"address": "a", "unknownField": 1},
	} {
		e.want(400, "POST", "/api/v1/send", bad)
	}
	e.want(400, "POST", "/api/v1/addresses/rpc/messages", map[string]any{"address": "other"})
}

func TestSubscriptions(t *testing.T) {
	e := newEnv(t)
	if err := e.b.CreateAddress("news", core.Multicast); err != nil {
		t.Fatal(err)
	}
	s := e.session(core.SessionOptions{ClientID: "app1"})
	nop := func(core.Delivery) {}
	if _, err := s.Subscribe(core.ConsumerOptions{Address: "news", RoutingType: core.Multicast, SubscriptionName: "sub", Handler: nop}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Subscribe(core.ConsumerOptions{Address: "news", RoutingType: core.Multicast, SharedSubscriptionName: "workers", Handler: nop}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Subscribe(core.ConsumerOptions{Address: "news", RoutingType: core.Multicast, Handler: nop}); err != nil {
		t.Fatal(err)
	}
	e.want(201, "POST", "/api/v1/queues", map[string]any{"name": "plain"})
	out := e.want(200, "GET", "/api/v1/subscriptions", nil)
	if num(out["total"]) != 2 {
		t.Fatalf("subscriptions %v", out)
	}
	kinds := map[string]bool{}
	for _, x := range out["subscriptions"].([]any) {
		m := x.(map[string]any)
		kinds[m["kind"].(string)] = true
		if m["address"] != "news" || num(m["consumers"]) != 1 {
			t.Errorf("subscription %v", m)
		}
	}
	if !kinds["durable"] || !kinds["shared"] {
		t.Errorf("kinds %v", kinds)
	}
}

func TestConnections(t *testing.T) {
	e := newEnv(t)
	var closed atomic.Int32
	var s *core.Session
	s = e.session(core.SessionOptions{Protocol: "mqtt", RemoteAddr: "192.0.2.1:4000", User: "bob", ClientID: "dev1",
		Close: func() { closed.Add(1); go s.Close() }})
	e.session(core.SessionOptions{}) // internal: not a connection
	e.send(s, "telemetry", []byte("12345"), nil)

	out := e.want(200, "GET", "/api/v1/connections", nil)
	cs := out["connections"].([]any)
	if len(cs) != 1 {
		t.Fatalf("connections %v", cs)
	}
	c := cs[0].(map[string]any)
	if uint64(num(c["id"])) != s.ID() || c["protocol"] != "mqtt" || c["remoteAddr"] != "192.0.2.1:4000" ||
		c["user"] != "bob" || c["clientId"] != "dev1" || num(c["messagesIn"]) != 1 || num(c["bytesIn"]) != 5 {
		t.Errorf("connection %v", c)
	}
	e.want(204, "DELETE", fmt.Sprintf("/api/v1/connections/%d", s.ID()), nil)
	if closed.Load() != 1 {
		t.Error("Close not called")
	}
	e.want(404, "DELETE", "/api/v1/connections/999999", nil)
	e.want(400, "DELETE", "/api/v1/connections/abc", nil)
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t)
	e.want(201, "POST", "/api/v1/queues", map[string]any{"name": "q"})

	if out := e.want(400, "POST", "/api/v1/queues", `{"name": "x",`); !strings.HasPrefix(out["error"].(string), "malformed JSON") {
		t.Errorf("malformed: %v", out)
	}
	e.want(400, "POST", "/api/v1/queues", `{"name": "x"} {"name": "y"}`)
	e.want(400, "POST", "/api/v1/queues", `["x"]`)
	e.want(400, "POST", "/api/v1/queues/q/purge", `{"all": true}`)

	// Wrong methods: JSON 405 with Allow.
	for _, c := range []struct{ method, path, allow string }{
		{"PUT", "/api/v1/queues", "GET, HEAD, POST"},
		{"POST", "/api/v1/broker", "GET, HEAD"},
		{"GET", "/api/v1/queues/q/purge", "POST"},
		{"PATCH", "/api/v1/queues/q", "DELETE, GET, HEAD"},
		{"GET", "/api/v1/connections/1", "DELETE"},
	} {
		status, raw, hdr := e.raw(c.method, c.path, nil, "Content-Type", "application/json")
		if status != 405 || hdr.Get("Allow") != c.allow || !bytes.Contains(raw, []byte(`"error"`)) {
			t.Errorf("%s %s: %d Allow %q %s", c.method, c.path, status, hdr.Get("Allow"), raw)
		}
	}
	// Unknown API paths: JSON 404.
	if status, raw, _ := e.raw("GET", "/api/v1/nothing", nil); status != 404 || !bytes.Contains(raw, []byte(`"error"`)) {
		t.Errorf("unknown path: %d %s", status, raw)
	}

	// Cross-origin and non-JSON mutations are refused; nothing happens.
	e.send(e.session(core.SessionOptions{}), "q", []byte("keep"), nil)
	e.want(403, "POST", "/api/v1/queues/q/purge", nil, "Origin", "http://evil.example")
	e.want(403, "DELETE", "/api/v1/queues/q", nil, "Origin", "http://evil.example")
	e.want(403, "POST", "/api/v1/queues/q/purge", nil, "Origin", "null")
	e.want(403, "POST", "/api/v1/queues/q/purge", nil, "Sec-Fetch-Site", "cross-site")
	e.want(415, "POST", "/api/v1/queues/q/purge", "{}", "Content-Type", "text/plain")
	e.want(415, "POST", "/api/v1/queues/q/purge", "name=x", "Content-Type", "application/x-www-form-urlencoded")
	if d := e.depth("q"); d != 1 {
		t.Fatalf("a refused request purged the queue: depth %d", d)
	}
	// The console's own origin is accepted, and GETs are not checked.
	host := strings.TrimPrefix(e.srv.URL, "http://")
	e.want(200, "GET", "/api/v1/queues", nil, "Origin", "http://evil.example")
	e.want(200, "POST", "/api/v1/queues/q/purge", nil, "Origin", "http://"+host, "Sec-Fetch-Site", "same-origin",
		"Content-Type", "application/json; charset=utf-8")
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	s := e.session(core.SessionOptions{Protocol: "stomp"})
	for range 3 {
		e.send(s, "metered", []byte("abc"), nil)
	}
	status, raw, hdr := e.raw("GET", "/metrics", nil, "Accept", "text/plain")
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("content type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, raw)
	}
	find := func(name string, labels map[string]string) *dto.Metric {
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
	q := map[string]string{"queue": "metered", "address": "metered"}
	if v := find("junction_queue_depth", q).GetGauge().GetValue(); v != 3 {
		t.Errorf("depth %v", v)
	}
	if v := find("junction_queue_enqueued_total", q).GetCounter().GetValue(); v != 3 {
		t.Errorf("enqueued %v", v)
	}
	find("junction_queue_dequeued_total", q)
	find("junction_queue_consumers", q)
	if v := find("junction_connections", map[string]string{"protocol": "stomp"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("connections %v", v)
	}
	if v := find("junction_messages_in_total", map[string]string{"protocol": "stomp"}).GetCounter().GetValue(); v != 3 {
		t.Errorf("messages in %v", v)
	}
	if v := find("junction_bytes_in_total", map[string]string{"protocol": "stomp"}).GetCounter().GetValue(); v != 9 {
		t.Errorf("bytes in %v", v)
	}
	if v := find("junction_journal_appends_total", nil).GetCounter().GetValue(); v != 10 {
		t.Errorf("appends %v", v)
	}
	h := find("junction_journal_sync_seconds", nil).GetHistogram()
	if h.GetSampleCount() != 4 || h.GetSampleSum() != 0.012 || len(h.Bucket) < 2 ||
		h.Bucket[0].GetCumulativeCount() != 1 || h.Bucket[1].GetCumulativeCount() != 3 {
		t.Errorf("sync histogram %v", h)
	}
	for _, name := range []string{"junction_journal_syncs_total", "junction_journal_batches_total",
		"junction_journal_batch_records_total", "junction_journal_compactions_total", "junction_journal_files",
		"junction_journal_bytes", "junction_build_info", "junction_uptime_seconds", "junction_queues",
		"go_goroutines", "process_cpu_seconds_total"} {
		find(name, nil)
	}

	// The series follow the queue.
	if err := e.b.DeleteQueue("metered"); err != nil {
		t.Fatal(err)
	}
	_, raw, _ = e.raw("GET", "/metrics", nil)
	if bytes.Contains(raw, []byte(`queue="metered"`)) {
		t.Error("a deleted queue is still reported")
	}
}

func TestHealth(t *testing.T) {
	e := newEnv(t)
	if s, _, _ := e.raw("GET", "/healthz", nil); s != 200 {
		t.Errorf("healthz %d", s)
	}
	if s, _, _ := e.raw("GET", "/readyz", nil); s != 200 {
		t.Errorf("readyz %d", s)
	}
	e.ready.Store(false)
	if s, _, _ := e.raw("GET", "/readyz", nil); s != 503 {
		t.Errorf("readyz while not ready %d", s)
	}
	if s, _, _ := e.raw("GET", "/healthz", nil); s != 200 {
		t.Errorf("healthz while not ready %d", s)
	}
}

func TestConsoleFiles(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ path, ctype, contains string }{
		{"/", "text/html; charset=utf-8", `<script src="app.js"`},
		{"/index.html", "", ""}, // redirected to /
		{"/app.js", "text/javascript; charset=utf-8", `"data-queue"`},
		{"/style.css", "text/css; charset=utf-8", "#queues-table"},
	} {
		status, raw, hdr := e.raw("GET", c.path, nil)
		if status != 200 {
			t.Errorf("%s: status %d", c.path, status)
			continue
		}
		if c.ctype != "" && hdr.Get("Content-Type") != c.ctype {
			t.Errorf("%s: Content-Type %q, want %q", c.path, hdr.Get("Content-Type"), c.ctype)
		}
		if !bytes.Contains(raw, []byte(c.contains)) {
			t.Errorf("%s does not contain %q", c.path, c.contains)
		}
		if !strings.Contains(hdr.Get("Content-Security-Policy"), "default-src 'self'") || hdr.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: security headers %v", c.path, hdr)
		}
	}
	// The hooks a browser test relies on.
	_, js, _ := e.raw("GET", "/app.js", nil)
	_, html, _ := e.raw("GET", "/", nil)
	for _, s := range []string{`"depth num"`, `class: "purge"`, `"confirm-ok"`} {
		if !bytes.Contains(js, []byte(s)) {
			t.Errorf("app.js lacks %s", s)
		}
	}
	for _, s := range []string{`id="queues-table"`, `id="confirm-ok"`, `id="rate-chart"`, `id="send-form"`, `id="connections-table"`} {
		if !bytes.Contains(html, []byte(s)) {
			t.Errorf("index.html lacks %s", s)
		}
	}
	if status, _, _ := e.raw("GET", "/nope.js", nil); status != 404 {
		t.Errorf("unknown file: %d", status)
	}
	if status, _, _ := e.raw("POST", "/", "x"); status != 405 {
		t.Errorf("POST /: %d", status)
	}
}
