package main

import (
	"runtime/debug"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"
)

func TestMemoryBudgetAndGoLimit(t *testing.T) {
	if got := memoryBudget(64 << 20); got != 64<<20 {
		t.Fatalf("configured budget: %d", got)
	}
	if got := memoryBudget(0); got <= 0 {
		t.Fatalf("default budget: %d", got)
	}
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	t.Setenv("GOMEMLIMIT", "")
	want := int64(256<<20 + 64<<20 + memoryAllowance)
	if got := softMemoryLimit(256 << 20); got != want || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("soft limit %d (runtime %d), want %d", got, debug.SetMemoryLimit(-1), want)
	}
	t.Setenv("GOMEMLIMIT", "1GiB")
	if got := softMemoryLimit(256 << 20); got != 0 {
		t.Fatalf("with GOMEMLIMIT set the broker set a limit of %d", got)
	}
}

// TestMinFreeDiskRefusesDurableSends runs serve with a free-space floor
// no disk has: a persistent STOMP send gets an ERROR saying the disk is
// full, while non-persistent sends go on.
func TestMinFreeDiskRefusesDurableSends(t *testing.T) {
	cfg := testConfig(t)
	cfg.Persistence.MinFreeDisk = 1 << 60
	addr, _ := startServe(t, cfg)
	c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.MustDisconnect()
	if err := c.Send("/queue/disk", "text/plain", []byte("fine"), gostomp.SendOpt.Receipt); err != nil {
		t.Fatalf("non-persistent send: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for lastInstance.broker.DiskFull() == "" {
		if time.Now().After(deadline) {
			t.Fatal("the broker never saw its disk limit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	err = c.Send("/queue/disk", "text/plain", []byte("durable"), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true"))
	if err == nil || !strings.Contains(err.Error(), "disk") {
		t.Fatalf("persistent send past the disk limit: %v, want an ERROR about the disk", err)
	}
}
