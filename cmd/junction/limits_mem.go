package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/persistence/journal"
	"github.com/junctionmq/junction/persistence/page"
)

// defaultMemoryShare of the machine's memory is the default budget for
// messages held in memory (ActiveMQ Classic's memoryUsage defaults to a
// share of the heap the same way).
const defaultMemoryShare = 4

// memoryBudget returns the budget for messages in memory: the configured
// one, or a quarter of the memory available to the process (the cgroup's
// limit when lower than the machine's).
func memoryBudget(configured ByteSize) int64 {
	if configured > 0 {
		return int64(configured)
	}
	var si unix.Sysinfo_t
	total := int64(0)
	if unix.Sysinfo(&si) == nil {
		total = int64(si.Totalram) * int64(si.Unit)
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			total = n
		}
	}
	if total <= 0 {
		return 1 << 30 // unknown: 1 GiB
	}
	return total / defaultMemoryShare
}

// diskLimits measures the stores under the data directory for core's disk
// limits: journal files (preallocated, so counted whole), page stores,
// and the free space of the file system holding them. The large-message
// store is not counted: listing it every check would cost more than the
// check is worth; its bodies are bounded by the journal records naming
// them.
func diskLimits(cfg Config, msgs, bindings *journal.Journal, pages *page.Dir) core.DiskLimits {
	p := cfg.Persistence
	dir := filepath.Clean(cfg.DataDir)
	// Checked before every large body is taken, whatever the limits.
	free := func() (int64, error) {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return 0, err
		}
		return int64(st.Bavail) * st.Bsize, nil
	}
	if p.MaxDiskUsage == 0 && p.MinFreeDisk == 0 {
		return core.DiskLimits{Free: free}
	}
	return core.DiskLimits{
		Free:     free,
		MaxUsage: int64(p.MaxDiskUsage),
		MinFree:  int64(p.MinFreeDisk),
		Usage: func() (used, free int64, err error) {
			used = int64(msgs.Stats().Files)*int64(p.FileSize) + int64(bindings.Stats().Files)*bindingsFileSize + pages.Bytes()
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				return used, 0, err
			}
			return used, int64(st.Bavail) * st.Bsize, nil
		},
	}
}

// bindingsFileSize is the size of each bindings journal file: queue
// definitions are few and small.
const bindingsFileSize = 1 << 20

// softMemoryLimit tells the Go runtime how much memory the broker may
// use, unless GOMEMLIMIT says otherwise: the message budget, a quarter
// more for what the estimates miss, and a fixed allowance for the
// runtime, buffers and indexes. Without it the collector lets the heap
// grow to twice what is live (GOGC=100), so a full budget would cost
// twice its size in resident memory. It returns the limit set (0: none).
func softMemoryLimit(budget int64) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	limit := budget + budget/4 + memoryAllowance
	debug.SetMemoryLimit(limit)
	return limit
}

// memoryAllowance is the fixed part of softMemoryLimit.
const memoryAllowance = 128 << 20
