package journal

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/junctionmq/junction/persistence/fs"
)

const testDir = "/j"

// The tests' journal files are 64 KiB, as large as recovery's first read:
// with the windows this small, every test's recovery (the crash tests',
// the fuzzer's) moves its window through each file record by record.
func init() {
	firstRead, viewChunk = segHeaderSize+recHeaderSize, recAlign
}

func testConfig(f fs.FS) Config {
	return Config{Dir: testDir, FS: f, FileSize: 64 << 10, MinFiles: 2, PoolFiles: 4, CompactMinRatio: -1}
}

func mustOpen(t testing.TB, cfg Config) *Journal {
	t.Helper()
	j, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return j
}

// waitErr runs op with a done func and waits for it.
func waitErr(op func(done func(error))) error {
	ch := make(chan error, 1)
	op(func(err error) { ch <- err })
	return <-ch
}

type liveRec struct {
	utype   uint16
	payload string
	updates []string
}

func (r liveRec) String() string { return fmt.Sprintf("{%d %q %q}", r.utype, r.payload, r.updates) }

func load(t testing.TB, j *Journal) (map[uint64]liveRec, []uint64) {
	t.Helper()
	m := map[uint64]liveRec{}
	var order []uint64
	err := j.Load(func(id uint64, ut uint16, p []byte, ups []Update) error {
		r := liveRec{utype: ut, payload: string(p)}
		for _, u := range ups {
			r.updates = append(r.updates, fmt.Sprintf("%d:%s", u.UserType, u.Payload))
		}
		if _, dup := m[id]; dup {
			return fmt.Errorf("duplicate id %d", id)
		}
		m[id] = r
		order = append(order, id)
		return nil
	})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return m, order
}

func payloadFor(id uint64, n int) []byte {
	b := bytes.Repeat([]byte{byte(id)}, n)
	copy(b, fmt.Sprintf("id=%d;", id))
	return b
}

// model tracks what the test expects to be live.
type model struct {
	mu   sync.Mutex
	live map[uint64]liveRec
}

func newModel() *model { return &model{live: map[uint64]liveRec{}} }

func (m *model) check(t testing.TB, got map[uint64]liveRec) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []string
	for id, want := range m.live {
		g, ok := got[id]
		if !ok {
			errs = append(errs, fmt.Sprintf("id %d missing", id))
			continue
		}
		if g.String() != want.String() {
			errs = append(errs, fmt.Sprintf("id %d = %v, want %v", id, g, want))
		}
	}
	for id := range got {
		if _, ok := m.live[id]; !ok {
			errs = append(errs, fmt.Sprintf("id %d unexpected", id))
		}
	}
	sort.Strings(errs)
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Sprintf("... %d more", len(errs)-10))
	}
	for _, e := range errs {
		t.Error(e)
	}
}

func isCorruption(err error) (*CorruptionError, bool) {
	var ce *CorruptionError
	return ce, errors.As(err, &ce)
}
