package management_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/management"
	"github.com/junctionmq/junction/management/managementtest"
)

func newEnv(t *testing.T) *managementtest.Env {
	t.Helper()
	b, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := &managementtest.Env{T: t, Core: b}
	e.Ready.Store(true)
	h := management.New(management.Config{
		Version:   "1.2.3",
		Listeners: func() map[string]string { return map[string]string{"stomp": "127.0.0.1:61613"} },
		Journal: func() management.JournalStats {
			return management.JournalStats{Appends: 10, Syncs: 4, Batches: 4, BatchRecords: 10, Compactions: 1,
				SyncSeconds: 0.012, SyncLatencyBuckets: []float64{0.001, 0.01}, SyncLatencyCounts: []uint64{1, 2, 1},
				Files: 2, Bytes: 1 << 20}
		},
		Ready:     e.Ready.Load,
		AllowHost: loopbackHost,
	}, b)
	e.Serve(h)
	return e
}

func TestBroker(t *testing.T) {
	e := newEnv(t)
	e.Session(core.SessionOptions{Protocol: "stomp", RemoteAddr: "10.0.0.1:5000"})
	out := e.Want(200, "GET", "/api/v1/broker", nil)
	if out["version"] != "1.2.3" {
		t.Errorf("version %v", out["version"])
	}
	if l := out["listeners"].(map[string]any); l["stomp"] != "127.0.0.1:61613" {
		t.Errorf("listeners %v", l)
	}
	if managementtest.Num(out["uptimeSeconds"]) < 0 {
		t.Errorf("uptime %v", out["uptimeSeconds"])
	}
	if j := out["journal"].(map[string]any); managementtest.Num(j["appends"]) != 10 || managementtest.Num(j["files"]) != 2 {
		t.Errorf("journal %v", j)
	}
	if m := out["memory"].(map[string]any); managementtest.Num(m["heapAlloc"]) <= 0 {
		t.Errorf("memory %v", m)
	}
	ps := out["protocols"].([]any)
	if len(ps) != 1 || ps[0].(map[string]any)["protocol"] != "stomp" || managementtest.Num(ps[0].(map[string]any)["connections"]) != 1 {
		t.Errorf("protocols %v", ps)
	}
	if tot := out["totals"].(map[string]any); managementtest.Num(tot["connections"]) != 1 {
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
	a := e.Want(201, "POST", "/api/v1/addresses", map[string]any{"name": "orders", "routingType": "anycast"})
	if a["name"] != "orders" || a["anycast"] != true {
		t.Fatalf("created %v", a)
	}
	e.Want(201, "POST", "/api/v1/addresses", map[string]any{"name": "news", "routingType": "MULTICAST"})
	list := e.Want(200, "GET", "/api/v1/addresses", nil)
	if managementtest.Num(list["total"]) != 2 {
		t.Fatalf("list %v", list)
	}
	as := list["addresses"].([]any)
	if as[0].(map[string]any)["name"] != "news" || as[0].(map[string]any)["multicast"] != true {
		t.Errorf("first address %v", as[0])
	}
	if qs := as[1].(map[string]any)["queues"].([]any); len(qs) != 1 || qs[0] != "orders" {
		t.Errorf("orders queues %v", qs)
	}
	if f := e.Want(200, "GET", "/api/v1/addresses?filter=NEW", nil); managementtest.Num(f["total"]) != 1 {
		t.Errorf("filtered %v", f)
	}
	e.Want(200, "GET", "/api/v1/addresses/orders", nil)

	e.Want(400, "POST", "/api/v1/addresses", map[string]any{"name": "x", "routingType": "broadcast"})
	e.Want(400, "POST", "/api/v1/addresses", map[string]any{"name": "x"})
	e.Want(400, "POST", "/api/v1/addresses", map[string]any{"routingType": "anycast"})
	e.Want(400, "POST", "/api/v1/addresses", map[string]any{"name": "a.#", "routingType": "anycast"})

	e.Want(204, "DELETE", "/api/v1/addresses/orders", nil)
	e.Want(404, "DELETE", "/api/v1/addresses/orders", nil)
	e.Want(404, "GET", "/api/v1/addresses/orders", nil)
	if q := e.Core.Queue("orders"); q != nil {
		t.Error("queue orders survived its address")
	}
}

func TestQueueLifecycle(t *testing.T) {
	e := newEnv(t)
	q := e.Want(201, "POST", "/api/v1/queues", map[string]any{"name": "jobs", "routingType": "anycast"})
	if q["name"] != "jobs" || q["routingType"] != "anycast" || managementtest.Num(q["depth"]) != 0 {
		t.Fatalf("created %v", q)
	}
	if out := e.Want(409, "POST", "/api/v1/queues", map[string]any{"name": "jobs", "routingType": "anycast"}); !strings.Contains(out["error"].(string), "exists") {
		t.Errorf("409 error %v", out)
	}
	s := e.Session(core.SessionOptions{})
	e.Send(s, "jobs", []byte("x"), nil)
	q = e.Want(200, "GET", "/api/v1/queues/jobs", nil)
	if managementtest.Num(q["depth"]) != 1 || managementtest.Num(q["enqueued"]) != 1 || q["oldestMessage"] == nil {
		t.Errorf("queue %v", q)
	}

	c, err := s.Subscribe(core.ConsumerOptions{Address: "jobs", RoutingType: core.Anycast, Handler: func(core.Delivery) {}})
	if err != nil {
		t.Fatal(err)
	}
	e.Want(409, "DELETE", "/api/v1/queues/jobs", nil) // has a consumer
	c.Close()
	e.Want(204, "DELETE", "/api/v1/queues/jobs", nil)
	e.Want(404, "GET", "/api/v1/queues/jobs", nil)
	e.Want(404, "DELETE", "/api/v1/queues/jobs", nil)
	e.Want(404, "POST", "/api/v1/queues/jobs/purge", nil)
	e.Want(404, "GET", "/api/v1/queues/jobs/messages", nil)
	e.Want(404, "POST", "/api/v1/queues/jobs/move", map[string]any{"to": "x"})

	// A name with a slash travels percent-encoded.
	e.Want(201, "POST", "/api/v1/queues", map[string]any{"name": "a/b"})
	if q := e.Want(200, "GET", "/api/v1/queues/"+url.PathEscape("a/b"), nil); q["name"] != "a/b" {
		t.Errorf("a/b: %v", q)
	}
	e.Want(204, "DELETE", "/api/v1/queues/a%2Fb", nil)
}

func TestQueuesPaging(t *testing.T) {
	e := newEnv(t)
	s := e.Session(core.SessionOptions{})
	for i := range 25 {
		name := fmt.Sprintf("q%02d", i)
		if err := e.Core.CreateQueue(name, core.Anycast); err != nil {
			t.Fatal(err)
		}
		for range i % 5 {
			e.Send(s, name, []byte("m"), nil)
		}
	}
	names := func(out map[string]any) []string {
		var ns []string
		for _, q := range out["queues"].([]any) {
			ns = append(ns, q.(map[string]any)["name"].(string))
		}
		return ns
	}
	out := e.Want(200, "GET", "/api/v1/queues?offset=20&limit=10", nil)
	if managementtest.Num(out["total"]) != 25 || strings.Join(names(out), ",") != "q20,q21,q22,q23,q24" {
		t.Errorf("last page: total %v names %v", out["total"], names(out))
	}
	if tot := out["totals"].(map[string]any); managementtest.Num(tot["queues"]) != 25 || managementtest.Num(tot["depth"]) != 50 || managementtest.Num(tot["enqueued"]) != 50 {
		t.Errorf("totals %v", tot)
	}
	out = e.Want(200, "GET", "/api/v1/queues?sort=-depth&limit=3", nil)
	if got := strings.Join(names(out), ","); got != "q24,q19,q14" {
		t.Errorf("by depth desc: %s", got)
	}
	out = e.Want(200, "GET", "/api/v1/queues?sort=depth&order=desc&limit=2&offset=1", nil)
	if got := strings.Join(names(out), ","); got != "q19,q14" {
		t.Errorf("order=desc page 2: %s", got)
	}
	out = e.Want(200, "GET", "/api/v1/queues?filter=Q1&sort=name", nil)
	if managementtest.Num(out["total"]) != 10 || names(out)[0] != "q10" {
		t.Errorf("filter: total %v names %v", out["total"], names(out))
	}
	out = e.Want(200, "GET", "/api/v1/queues?offset=100", nil)
	if managementtest.Num(out["total"]) != 25 || len(out["queues"].([]any)) != 0 {
		t.Errorf("past the end: %v", out)
	}
	for _, bad := range []string{"limit=0", "limit=5000", "limit=x", "offset=-1", "sort=colour", "order=up"} {
		e.Want(400, "GET", "/api/v1/queues?"+bad, nil)
	}
}

// GET /queues filters, sorts and pages on the server at a cost that
// grows with the queues as n log n at most: ten times the queues cost
// about ten times as much, where anything quadratic (a lookup per queue
// in a list of them, a sort that asks core per comparison) costs a
// hundred. Performance is measured, not asserted: the test compares the
// two sizes in one run, so that the machine's speed does not count, by
// the CPU time the process spends on a request (client and server are
// both in it), so that other processes on a loaded machine do not count
// either; the median of a few requests at each size leaves out a
// garbage collection that happens to fall in one.
func TestQueuesManyScale(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 queues")
	}
	e := newEnv(t)
	const n, rounds = 1000, 7
	created := 0
	cost := func(queues int) (cpu, wall time.Duration) {
		for ; created < queues; created++ {
			// A tenth of them match the filter, at either size.
			if err := e.Core.CreateQueue(fmt.Sprintf("queue.%05d.r%d", created, created%10), core.Anycast); err != nil {
				t.Fatal(err)
			}
		}
		e.Want(200, "GET", "/api/v1/queues?sort=-depth&limit=50", nil) // warm up
		var cpus, walls []time.Duration
		for range rounds {
			c0, w0 := processCPU(t), time.Now()
			out := e.Want(200, "GET", "/api/v1/queues?sort=-enqueued&filter=.r1&offset=50&limit=50", nil)
			cpus, walls = append(cpus, processCPU(t)-c0), append(walls, time.Since(w0))
			if managementtest.Num(out["total"]) != float64(queues/10) || len(out["queues"].([]any)) != 50 {
				t.Fatalf("%d queues: total %v, %d on the page", queues, out["total"], len(out["queues"].([]any)))
			}
		}
		slices.Sort(cpus)
		slices.Sort(walls)
		return cpus[rounds/2], walls[rounds/2]
	}
	small, smallWall := cost(n)
	large, largeWall := cost(10 * n)
	ratio := float64(large) / float64(small)
	t.Logf("GET /queues, median of %d: %v CPU (%v) over %d queues, %v CPU (%v) over %d: x%.1f",
		rounds, small, smallWall, n, large, largeWall, 10*n, ratio)
	// n log n: x10 to x13, less for the fixed cost of a request (x4 to
	// x17 seen, the machine loaded); n²: x100, less for the same (x40 to
	// x46 for a mere string comparison per pair of queues).
	if ratio > 30 {
		t.Errorf("GET /queues over %d queues took %.0f times the CPU it took over %d (%v, %v)", 10*n, ratio, n, large, small)
	}
}

// processCPU is the CPU time the process has used, user and system.
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestBrowseDoesNotConsume(t *testing.T) {
	e := newEnv(t)
	s := e.Session(core.SessionOptions{})
	big := append([]byte("a"), bytes.Repeat([]byte("é"), 700)...) // 1401 bytes: 1024 cuts an é
	binary := []byte{0xff, 0x00, 0xfe, 'a'}
	e.Send(s, "inbox", []byte("hello"), map[string]any{"n": int64(7), "ok": true, core.InternalPropertyPrefix + "AMQP_BODY": []byte{0x00}})
	e.Send(s, "inbox", binary, nil)
	e.Send(s, "inbox", big, nil)

	out := e.Want(200, "GET", "/api/v1/queues/inbox/messages", nil)
	if managementtest.Num(out["total"]) != 3 {
		t.Fatalf("total %v", out["total"])
	}
	ms := out["messages"].([]any)
	m0, m1, m2 := ms[0].(map[string]any), ms[1].(map[string]any), ms[2].(map[string]any)
	if m0["body"] != "hello" || m0["bodyEncoding"] != "text" || managementtest.Num(m0["size"]) != 5 || m0["truncated"] != false {
		t.Errorf("text message %v", m0)
	}
	if p := m0["properties"].(map[string]any); managementtest.Num(p["n"]) != 7 || p["ok"] != true || len(p) != 2 {
		t.Errorf("properties %v (a front-end's internal properties must not show)", p)
	}
	if m0["userId"] != "" && m0["userId"] != nil {
		t.Errorf("user %v", m0["userId"])
	}
	if m1["bodyEncoding"] != "base64" || m1["body"] != "/wD+YQ==" {
		t.Errorf("binary message %v", m1)
	}
	if m2["bodyEncoding"] != "text" || m2["truncated"] != true || managementtest.Num(m2["size"]) != 1401 || len(m2["body"].(string)) != 1023 {
		t.Errorf("big message: encoding %v truncated %v size %v preview %d bytes", m2["bodyEncoding"], m2["truncated"], m2["size"], len(m2["body"].(string)))
	}
	page := e.Want(200, "GET", "/api/v1/queues/inbox/messages?offset=1&limit=1", nil)
	if pm := page["messages"].([]any); len(pm) != 1 || managementtest.Num(pm[0].(map[string]any)["id"]) != managementtest.Num(m1["id"]) {
		t.Errorf("page 2 %v", pm)
	}
	if d := e.Depth("inbox"); d != 3 {
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
	out = e.Want(200, "GET", "/api/v1/queues/inbox/messages", nil)
	if ms := out["messages"].([]any); len(ms) != 3 || ms[0].(map[string]any)["inFlight"] != true {
		t.Errorf("in flight not shown: %v", ms)
	}
	for _, d := range ds {
		if err := c.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
	}
	if d := e.Depth("inbox"); d != 0 {
		t.Errorf("depth %d after acks", d)
	}
	e.Want(400, "GET", "/api/v1/queues/inbox/messages?limit=-3", nil)
}

func TestPurge(t *testing.T) {
	e := newEnv(t)
	s := e.Session(core.SessionOptions{})
	for range 5 {
		e.Send(s, "work", []byte("m"), nil)
	}
	out := e.Want(200, "POST", "/api/v1/queues/work/purge", nil)
	if managementtest.Num(out["purged"]) != 5 {
		t.Errorf("purged %v", out)
	}
	if d := e.Depth("work"); d != 0 {
		t.Errorf("depth %d after purge", d)
	}
	e.Send(s, "work", []byte("after"), nil)
	if d := e.Depth("work"); d != 1 {
		t.Errorf("depth %d after a send", d)
	}
}

func TestMove(t *testing.T) {
	e := newEnv(t)
	s := e.Session(core.SessionOptions{})
	for i := range 4 {
		e.Send(s, "DLQ.orders", []byte(fmt.Sprint(i)), nil)
	}
	if err := e.Core.CreateAddress("orders", core.Anycast); err != nil {
		t.Fatal(err)
	}
	out := e.Want(200, "POST", "/api/v1/queues/DLQ.orders/move", map[string]any{"to": "orders", "max": 3})
	if managementtest.Num(out["moved"]) != 3 {
		t.Errorf("moved %v", out)
	}
	if d1, d2 := e.Depth("DLQ.orders"), e.Depth("orders"); d1 != 1 || d2 != 3 {
		t.Errorf("depths %d, %d after moving 3", d1, d2)
	}
	msgs := e.Want(200, "GET", "/api/v1/queues/orders/messages", nil)["messages"].([]any)
	if msgs[0].(map[string]any)["body"] != "0" {
		t.Errorf("first moved message %v", msgs[0])
	}
	if out := e.Want(200, "POST", "/api/v1/queues/DLQ.orders/move", map[string]any{"to": "orders"}); managementtest.Num(out["moved"]) != 1 {
		t.Errorf("move all: %v", out)
	}
	e.Want(404, "POST", "/api/v1/queues/orders/move", map[string]any{"to": "nowhere"})
	e.Want(400, "POST", "/api/v1/queues/orders/move", map[string]any{"to": "orders"})
	e.Want(400, "POST", "/api/v1/queues/orders/move", map[string]any{})
	e.Want(400, "POST", "/api/v1/queues/orders/move", map[string]any{"to": "DLQ.orders", "max": -1})
	// A multicast address with no subscription would drop what is moved
	// there: refused, the messages stay.
	if err := e.Core.CreateAddress("nobody", core.Multicast); err != nil {
		t.Fatal(err)
	}
	e.Want(409, "POST", "/api/v1/queues/orders/move", map[string]any{"to": "nobody"})
	if d := e.Depth("orders"); d != 4 {
		t.Errorf("depth %d after a refused move, want 4", d)
	}
}

func TestSend(t *testing.T) {
	e := newEnv(t)
	out := e.Want(201, "POST", "/api/v1/send", map[string]any{
		"address": "rpc", "routingType": "anycast", "body": "ping", "durable": true, "priority": 7,
		"contentType": "text/plain", "properties": map[string]any{"i": 3, "f": 1.5, "s": "x", "b": false, "nil": nil},
	})
	if managementtest.Num(out["id"]) == 0 || out["address"] != "rpc" {
		t.Fatalf("send answer %v", out)
	}
	e.Want(201, "POST", "/api/v1/addresses/rpc/messages", map[string]any{"bodyBase64": "AAE="})

	ch := make(chan core.Delivery, 2)
	s := e.Session(core.SessionOptions{})
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
		e.Want(400, "POST", "/api/v1/send", bad)
	}
	e.Want(400, "POST", "/api/v1/addresses/rpc/messages", map[string]any{"address": "other"})
}

func TestSubscriptions(t *testing.T) {
	e := newEnv(t)
	if err := e.Core.CreateAddress("news", core.Multicast); err != nil {
		t.Fatal(err)
	}
	s := e.Session(core.SessionOptions{ClientID: "app1"})
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
	e.Want(201, "POST", "/api/v1/queues", map[string]any{"name": "plain"})
	out := e.Want(200, "GET", "/api/v1/subscriptions", nil)
	if managementtest.Num(out["total"]) != 2 {
		t.Fatalf("subscriptions %v", out)
	}
	kinds := map[string]bool{}
	for _, x := range out["subscriptions"].([]any) {
		m := x.(map[string]any)
		kinds[m["kind"].(string)] = true
		if m["address"] != "news" || managementtest.Num(m["consumers"]) != 1 {
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
	s = e.Session(core.SessionOptions{Protocol: "mqtt", RemoteAddr: "192.0.2.1:4000", User: "bob", ClientID: "dev1",
		Close: func() { closed.Add(1); go s.Close() }})
	e.Session(core.SessionOptions{}) // internal: not a connection
	e.Send(s, "telemetry", []byte("12345"), nil)

	out := e.Want(200, "GET", "/api/v1/connections", nil)
	cs := out["connections"].([]any)
	if len(cs) != 1 {
		t.Fatalf("connections %v", cs)
	}
	c := cs[0].(map[string]any)
	if uint64(managementtest.Num(c["id"])) != s.ID() || c["protocol"] != "mqtt" || c["remoteAddr"] != "192.0.2.1:4000" ||
		c["user"] != "bob" || c["clientId"] != "dev1" || managementtest.Num(c["messagesIn"]) != 1 || managementtest.Num(c["bytesIn"]) != 5 {
		t.Errorf("connection %v", c)
	}
	e.Want(204, "DELETE", fmt.Sprintf("/api/v1/connections/%d", s.ID()), nil)
	if closed.Load() != 1 {
		t.Error("Close not called")
	}
	e.Want(404, "DELETE", "/api/v1/connections/999999", nil)
	e.Want(400, "DELETE", "/api/v1/connections/abc", nil)
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t)
	e.Want(201, "POST", "/api/v1/queues", map[string]any{"name": "q"})

	if out := e.Want(400, "POST", "/api/v1/queues", `{"name": "x",`); !strings.HasPrefix(out["error"].(string), "malformed JSON") {
		t.Errorf("malformed: %v", out)
	}
	e.Want(400, "POST", "/api/v1/queues", `{"name": "x"} {"name": "y"}`)
	e.Want(400, "POST", "/api/v1/queues", `["x"]`)
	e.Want(400, "POST", "/api/v1/queues/q/purge", `{"all": true}`)

	// Wrong methods: JSON 405 with Allow.
	for _, c := range []struct{ method, path, allow string }{
		{"PUT", "/api/v1/queues", "GET, HEAD, POST"},
		{"POST", "/api/v1/broker", "GET, HEAD"},
		{"GET", "/api/v1/queues/q/purge", "POST"},
		{"PATCH", "/api/v1/queues/q", "DELETE, GET, HEAD"},
		{"GET", "/api/v1/connections/1", "DELETE"},
	} {
		status, raw, hdr := e.Raw(c.method, c.path, nil, "Content-Type", "application/json")
		if status != 405 || hdr.Get("Allow") != c.allow || !bytes.Contains(raw, []byte(`"error"`)) {
			t.Errorf("%s %s: %d Allow %q %s", c.method, c.path, status, hdr.Get("Allow"), raw)
		}
	}
	// Unknown API paths: JSON 404.
	if status, raw, _ := e.Raw("GET", "/api/v1/nothing", nil); status != 404 || !bytes.Contains(raw, []byte(`"error"`)) {
		t.Errorf("unknown path: %d %s", status, raw)
	}

	// Cross-origin and non-JSON mutations are refused; nothing happens.
	e.Send(e.Session(core.SessionOptions{}), "q", []byte("keep"), nil)
	e.Want(403, "POST", "/api/v1/queues/q/purge", nil, "Origin", "http://evil.example")
	e.Want(403, "DELETE", "/api/v1/queues/q", nil, "Origin", "http://evil.example")
	e.Want(403, "POST", "/api/v1/queues/q/purge", nil, "Origin", "null")
	e.Want(403, "POST", "/api/v1/queues/q/purge", nil, "Sec-Fetch-Site", "cross-site")
	e.Want(415, "POST", "/api/v1/queues/q/purge", "{}", "Content-Type", "text/plain")
	e.Want(415, "POST", "/api/v1/queues/q/purge", "name=x", "Content-Type", "application/x-www-form-urlencoded")
	if d := e.Depth("q"); d != 1 {
		t.Fatalf("a refused request purged the queue: depth %d", d)
	}
	// The console's own origin is accepted, and GETs are not checked.
	host := strings.TrimPrefix(e.Server.URL, "http://")
	e.Want(200, "GET", "/api/v1/queues", nil, "Origin", "http://evil.example")
	e.Want(200, "POST", "/api/v1/queues/q/purge", nil, "Origin", "http://"+host, "Sec-Fetch-Site", "same-origin",
		"Content-Type", "application/json; charset=utf-8")
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	s := e.Session(core.SessionOptions{Protocol: "stomp"})
	for range 3 {
		e.Send(s, "metered", []byte("abc"), nil)
	}
	status, raw, hdr := e.Raw("GET", "/metrics", nil, "Accept", "text/plain")
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
		return managementtest.Metric(t, fams, name, labels)
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
	if err := e.Core.DeleteQueue("metered"); err != nil {
		t.Fatal(err)
	}
	_, raw, _ = e.Raw("GET", "/metrics", nil)
	if bytes.Contains(raw, []byte(`queue="metered"`)) {
		t.Error("a deleted queue is still reported")
	}
}

func TestHealth(t *testing.T) {
	e := newEnv(t)
	if s, _, _ := e.Raw("GET", "/healthz", nil); s != 200 {
		t.Errorf("healthz %d", s)
	}
	if s, _, _ := e.Raw("GET", "/readyz", nil); s != 200 {
		t.Errorf("readyz %d", s)
	}
	e.Ready.Store(false)
	if s, _, _ := e.Raw("GET", "/readyz", nil); s != 503 {
		t.Errorf("readyz while not ready %d", s)
	}
	if s, _, _ := e.Raw("GET", "/healthz", nil); s != 200 {
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
		status, raw, hdr := e.Raw("GET", c.path, nil)
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
	_, js, _ := e.Raw("GET", "/app.js", nil)
	_, html, _ := e.Raw("GET", "/", nil)
	for _, s := range []string{`"depth num"`, `"replaced num"`, `"dropped num"`, `"duplicates num"`, `class: "purge"`, `"confirm-ok"`} {
		if !bytes.Contains(js, []byte(s)) {
			t.Errorf("app.js lacks %s", s)
		}
	}
	for _, s := range []string{`id="queues-table"`, `id="confirm-ok"`, `id="rate-chart"`, `id="send-form"`, `id="connections-table"`, `id="addresses-table"`} {
		if !bytes.Contains(html, []byte(s)) {
			t.Errorf("index.html lacks %s", s)
		}
	}
	if status, _, _ := e.Raw("GET", "/nope.js", nil); status != 404 {
		t.Errorf("unknown file: %d", status)
	}
	if status, _, _ := e.Raw("POST", "/", "x"); status != 405 {
		t.Errorf("POST /: %d", status)
	}
}
