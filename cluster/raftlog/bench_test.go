package raftlog

import (
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// BenchmarkSave measures Save on the machine's disk (b.TempDir, the OS
// file system): each op is one raft-loop pass persisting 4 entries of 128
// bytes and a hard state for each of N groups, with one fdatasync. Every
// group takes a snapshot every 4096 entries (keeping 512) so that memory
// stays bounded. Reported: entries/s and saves/s (= fsyncs/s).
func BenchmarkSave(b *testing.B) {
	for _, groups := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			cfg := Config{Dir: b.TempDir(), CatchUpEntries: 512}
			l, err := Open(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			const perGroup = 4
			data := make([]byte, 128)
			next := make([]uint64, groups+1)
			us := make([]Update, groups)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				for g := range groups {
					gid := uint64(g + 1)
					ents := make([]*pb.Entry, perGroup)
					for k := range ents {
						next[gid]++
						ents[k] = &pb.Entry{Index: new(next[gid]), Term: new(uint64(1)), Data: data}
					}
					us[g] = Update{Group: gid, Entries: ents, HardState: &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(next[gid])}}
				}
				if err := l.Save(us); err != nil {
					b.Fatal(err)
				}
				if next[1]%4096 < perGroup {
					for g := range groups {
						gid := uint64(g + 1)
						if err := l.Storage(gid).CreateSnapshot(next[gid], nil, data); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			secs := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N*groups*perGroup)/secs, "entries/s")
			b.ReportMetric(float64(b.N)/secs, "saves/s")
			st := l.Stats()
			if st.Journal.Syncs > 0 {
				b.ReportMetric(st.Journal.SyncSeconds/float64(st.Journal.Syncs)*1e6, "µs/fsync")
			}
		})
	}
}
