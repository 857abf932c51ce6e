package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/persistence/fs"
)

// slowSnapFS is the OS's file system on which syncing a snapshot file
// takes a long time, as writing a large state to a slow disk does.
type slowSnapFS struct{ fs.FS }

type slowSnapFile struct{ fs.File }

func (f slowSnapFS) Create(name string) (fs.File, error) {
	file, err := f.FS.Create(name)
	if err != nil || !strings.Contains(name, "/snap/") {
		return file, err
	}
	return slowSnapFile{file}, nil
}

func (f slowSnapFile) Datasync() error {
	time.Sleep(2 * time.Second) // ten election timeouts of this test
	return f.File.Datasync()
}

// TestClusterSnapshotDoesNotStallGroup: a snapshot's file is written off
// the raft loop, so a group whose snapshot takes its disk two seconds
// (ten election timeouts here) keeps its leader and goes on committing
// meanwhile; written in the loop, every node stopped its heartbeats and
// commits for those seconds.
func TestClusterSnapshotDoesNotStallGroup(t *testing.T) {
	c := startClusterWith(t, 3, 1, func(cfg *Config) {
		cfg.SnapshotEntries = 30
		cfg.FS = slowSnapFS{fs.OS()}
	})
	term := func() (max uint64) {
		for _, n := range c.nodes {
			if tm := n.rlog.Stats().Groups[0].Term; tm > max {
				max = tm
			}
		}
		return max
	}
	before := term()
	s := session(t, c.access[0], "")
	// Send for two and a half seconds, through the snapshots' writes.
	var slowest time.Duration
	end := time.Now().Add(2500 * time.Millisecond)
	for i := 0; i < 2000 && time.Now().Before(end); i++ {
		m := &core.Message{Address: fmt.Sprintf("s%d", i%3), RoutingType: core.Anycast, Durable: true, Body: []byte("x"), Priority: core.DefaultPriority}
		start := time.Now()
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		slowest = max(slowest, time.Since(start))
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, n := range c.nodes {
		for n.rlog.Stats().Groups[0].SnapshotIndex == 0 {
			if time.Now().After(deadline) {
				t.Fatal("a node took no snapshot: the test shows nothing")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if after := term(); after != before {
		t.Fatalf("the group held an election while snapshots were written: term %d, then %d", before, after)
	}
	if slowest > time.Second {
		t.Fatalf("a send took %v while snapshots were written", slowest)
	}
}
