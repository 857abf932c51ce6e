// Package e2etest holds what the integration tests of internal/e2e
// share: a broker's configuration over journals, with a large-message
// store or a disk limit always exceeded, in a test's temporary
// directory, and the bodies and file counts of the large-message tests.
// Only the tests of internal/e2e import it.
package e2etest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/persistence/journal"
	"github.com/junctionmq/junction/persistence/large"
)

// Journals opens, in dir, a message journal of files of fileSize bytes
// (dir/journal) and a bindings journal of 64 KiB files (dir/bindings),
// both closed when the test ends, and returns a broker configuration
// with them.
func Journals(t testing.TB, dir string, fileSize int64) core.Config {
	t.Helper()
	msgs, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "journal"), FileSize: fileSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { msgs.Close() })
	bindings, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "bindings"), FileSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bindings.Close() })
	return core.Config{Messages: msgs, Bindings: bindings}
}

// Large returns the configuration of a broker with journals (files of
// 1 MiB) and a large-message store (threshold 64 KiB) in a temporary
// directory, and the store's directory.
func Large(t testing.TB) (core.Config, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := Journals(t, dir, 1<<20)
	ls, err := large.Open(filepath.Join(dir, "large"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Large, cfg.LargeMessageThreshold = ls, 64<<10
	return cfg, filepath.Join(dir, "large")
}

// DiskFull returns the configuration of a broker with journals (files
// of 256 KiB) in a temporary directory, whose disk limit is always
// exceeded: durable sends are refused once the broker has checked
// (WaitDiskFull).
func DiskFull(t testing.TB) core.Config {
	t.Helper()
	cfg := Journals(t, t.TempDir(), 256<<10)
	usage := func() (int64, int64, error) { return 2000, 1 << 40, nil }
	cfg.Disk = core.DiskLimits{Usage: usage, MaxUsage: 1000, Interval: 5 * time.Millisecond}
	return cfg
}

// WaitDiskFull waits for b to have seen its disk limit exceeded.
func WaitDiskFull(t testing.TB, b *core.Broker) {
	t.Helper()
	testserve.Eventually(t, "the disk limit to be seen", func() bool { return b.DiskFull() != "" })
}

// Pattern returns n bytes of a pattern that does not repeat every 256.
func Pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + i>>16)
	}
	return b
}

// CountFiles returns the number of entries in dir.
func CountFiles(t testing.TB, dir string) int {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// EventuallyGC is testserve.Eventually, running the collector before
// each look: a non-durable body's file goes once nothing references its
// message.
func EventuallyGC(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testserve.Eventually(t, what, func() bool {
		runtime.GC()
		return cond()
	})
}
