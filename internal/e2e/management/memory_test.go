// Package management_test tests the console over a persistent broker (a
// journal and page store): package management may not import persistence,
// even in its tests.
package management_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/e2e/e2etest"
	"github.com/junctionmq/junction/management"
	"github.com/junctionmq/junction/management/managementtest"
	"github.com/junctionmq/junction/persistence/fs"
	"github.com/junctionmq/junction/persistence/page"
)

// pagerAdapter makes a *page.Dir a core.Pager (as cmd/junction does).
type pagerAdapter struct{ d *page.Dir }

func (a pagerAdapter) Open(name string) (core.PageStore, error) {
	s, err := a.d.Open(name)
	if err != nil {
		return nil, err
	}
	return s, nil
}
func (a pagerAdapter) List() ([]string, error)  { return a.d.List() }
func (a pagerAdapter) Remove(name string) error { return a.d.Remove(name) }
func (a pagerAdapter) Bytes() int64             { return a.d.Bytes() }

// limitsEnv is a management server over a persistent broker with a
// memory budget, a page store, queues limited to 10 bytes with each
// full policy, and a disk limit switched by diskFull.
func limitsEnv(t *testing.T, diskFull *atomic.Bool) *managementtest.Env {
	t.Helper()
	dir := t.TempDir()
	bcfg := e2etest.Journals(t, dir, 256<<10)
	pages, err := page.Open(filepath.Join(dir, "pages"), fs.OS(), page.Options{})
	if err != nil {
		t.Fatal(err)
	}
	limited := func(addr, policy string) core.AddressSettings {
		max := int64(10)
		return core.AddressSettings{Match: addr, MaxSizeBytes: &max, FullPolicy: &policy}
	}
	usage := func() (int64, int64, error) {
		if diskFull.Load() {
			return 2000, 1 << 40, nil
		}
		return 0, 1 << 40, nil
	}
	bcfg.Pager, bcfg.MaxMemory = pagerAdapter{pages}, 1<<20
	bcfg.AddressSettings = []core.AddressSettings{limited("drop", "DROP"), limited("fail", "FAIL"), limited("paged", "PAGE")}
	bcfg.Disk = core.DiskLimits{Usage: usage, MaxUsage: 1000, Interval: 5 * time.Millisecond}
	b, err := core.New(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &managementtest.Env{T: t, Core: b}
	e.Serve(management.New(management.Config{Version: "1.2.3"}, b))
	return e
}

func TestMemoryAndDropStats(t *testing.T) {
	var diskFull atomic.Bool
	e := limitsEnv(t, &diskFull)
	s := e.Session(core.SessionOptions{Protocol: "stomp", RemoteAddr: "192.0.2.1:4000"})
	send := func(addr string, durable bool, i int) error {
		m := &core.Message{Address: addr, RoutingType: core.Anycast, Durable: durable, Body: fmt.Appendf(nil, "message%d", i)}
		return s.Send(context.Background(), m)
	}
	for i := range 3 {
		if err := send("drop", false, i); err != nil {
			t.Fatal(err)
		}
		if err := send("paged", true, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := send("fail", false, 0); err != nil {
		t.Fatal(err)
	}
	if err := send("fail", false, 1); !errors.Is(err, core.ErrAddressFull) {
		t.Fatalf("send to a full FAIL address: %v", err)
	}

	// REST: connections, queues, broker.
	cs := e.Want(200, "GET", "/api/v1/connections", nil)["connections"].([]any)
	if len(cs) != 1 {
		t.Fatalf("connections %v", cs)
	}
	if c := cs[0].(map[string]any); managementtest.Num(c["dropped"]) != 2 || managementtest.Num(c["refused"]) != 1 {
		t.Errorf("connection dropped %v refused %v, want 2 and 1", c["dropped"], c["refused"])
	}
	q := e.Want(200, "GET", "/api/v1/queues/paged", nil)
	if managementtest.Num(q["paged"]) != 2 || managementtest.Num(q["depth"]) != 3 {
		t.Errorf("queue paged %v depth %v, want 2 and 3", q["paged"], q["depth"])
	}
	if q := e.Want(200, "GET", "/api/v1/queues/drop", nil); managementtest.Num(q["paged"]) != 0 || managementtest.Num(q["dropped"]) != 2 {
		t.Errorf("queue drop: paged %v dropped %v, want 0 and 2", q["paged"], q["dropped"])
	}
	page := e.Want(200, "GET", "/api/v1/queues?sort=-paged&limit=1", nil)
	if qs := page["queues"].([]any); len(qs) != 1 || qs[0].(map[string]any)["name"] != "paged" {
		t.Errorf("sorted by paged: %v", qs)
	}
	br := e.Want(200, "GET", "/api/v1/broker", nil)
	mm, _ := br["messageMemory"].(map[string]any)
	if managementtest.Num(mm["used"]) <= 0 || managementtest.Num(mm["max"]) != 1<<20 {
		t.Errorf("messageMemory %v", br["messageMemory"])
	}
	if br["diskFull"] != "" {
		t.Errorf("diskFull %q before the disk limit", br["diskFull"])
	}

	// Metrics.
	fams := e.Metrics()
	for reason, want := range map[string]float64{"queue_full": 2, "refused_full": 1, "non_durable_over_budget": 0, "refused_disk_full": 0} {
		if v := managementtest.MetricValue(t, fams, "junction_messages_dropped_total", map[string]string{"reason": reason}); v != want {
			t.Errorf("dropped %s = %v, want %v", reason, v, want)
		}
	}
	if v := managementtest.MetricValue(t, fams, "junction_memory_used_bytes", nil); v <= 0 {
		t.Errorf("memory used %v", v)
	}
	if v := managementtest.MetricValue(t, fams, "junction_memory_max_bytes", nil); v != 1<<20 {
		t.Errorf("memory max %v", v)
	}
	if v := managementtest.MetricValue(t, fams, "junction_queue_paged_messages", map[string]string{"queue": "paged", "address": "paged"}); v != 2 {
		t.Errorf("paged %v, want 2", v)
	}
	if v := managementtest.MetricValue(t, fams, "junction_queue_paged_messages", map[string]string{"queue": "drop"}); v != 0 {
		t.Errorf("paged of drop %v, want 0", v)
	}
	if v := managementtest.MetricValue(t, fams, "junction_disk_full", nil); v != 0 {
		t.Errorf("disk_full %v before the disk limit", v)
	}

	// The disk limit.
	diskFull.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for e.Core.DiskFull() == "" {
		if time.Now().After(deadline) {
			t.Fatal("the disk limit was never seen")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := send("other", true, 0); !errors.Is(err, core.ErrDiskFull) {
		t.Fatalf("durable send past the disk limit: %v", err)
	}
	if br := e.Want(200, "GET", "/api/v1/broker", nil); br["diskFull"] == "" || br["diskFull"] != e.Core.DiskFull() {
		t.Errorf("diskFull %q, want %q", br["diskFull"], e.Core.DiskFull())
	}
	fams = e.Metrics()
	if v := managementtest.MetricValue(t, fams, "junction_disk_full", nil); v != 1 {
		t.Errorf("disk_full %v past the disk limit", v)
	}
	if v := managementtest.MetricValue(t, fams, "junction_messages_dropped_total", map[string]string{"reason": "refused_disk_full"}); v != 1 {
		t.Errorf("refused_disk_full %v, want 1", v)
	}
	if c := e.Want(200, "GET", "/api/v1/connections", nil)["connections"].([]any)[0].(map[string]any); managementtest.Num(c["refused"]) != 2 {
		t.Errorf("connection refused %v, want 2", c["refused"])
	}
}
