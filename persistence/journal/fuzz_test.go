package journal

import (
	"testing"

	"github.com/junctionmq/junction/persistence/fs"
)

const fuzzGen = 0x1234567890abcdef

// fuzzImage builds a journal directory holding one file whose data region
// (after the 4096-byte header) is data.
func fuzzImage(data []byte) *fs.MemFS {
	mem := fs.NewCrashableMem()
	mem.MkdirAll(testDir)
	f, _ := mem.Create(fileName(testDir, 0))
	f.Preallocate(64 << 10)
	f.WriteAt(encodeHeader(segHeader{seq: 1, gen: fuzzGen}), 0)
	if len(data) > 64<<10-segHeaderSize {
		data = data[:64<<10-segHeaderSize]
	}
	f.WriteAt(data, segHeaderSize)
	f.Datasync()
	f.Close()
	mem.SyncDir(testDir)
	return mem
}

func fuzzSeed() []byte {
	var b []byte
	seed := seedOf(fuzzGen)
	recs := []record{
		{typ: recAdd, lsn: 1, id: 1, utype: 1, payload: []byte("hello")},
		{typ: recUpdate, lsn: 2, id: 1, utype: 2, payload: []byte("u")},
		{typ: recAddTx, lsn: 3, id: 2, txid: 9, payload: []byte("t")},
		{typ: recCommit, lsn: 4, txid: 9, payload: commitPayload(3, 1)},
		{typ: recDelete, lsn: 5, id: 1, lag: 1},
	}
	for i := range recs {
		b = appendRecord(b, seed, &recs[i])
	}
	return b
}

// FuzzRecordReader feeds arbitrary bytes to the record decoder and to full
// recovery (Strict and Salvage): no panic, bounded work, and every record
// returned validates.
func FuzzRecordReader(f *testing.F) {
	f.Add(fuzzSeed())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for off := 0; off+recHeaderSize <= len(data); off += recAlign {
			r, n, err := decodeRecord(data[off:], seedOf(fuzzGen), 1<<16)
			if err == nil && (n < recHeaderSize || n > len(data)-off || len(r.payload) > 1<<16) {
				t.Fatalf("bad decode size %d", n)
			}
		}
		for _, mode := range []RecoveryMode{Strict, Salvage} {
			cfg := testConfig(fuzzImage(data))
			cfg.Recovery = mode
			cfg.MinFiles, cfg.PoolFiles = 1, 1
			j, err := Open(cfg)
			if err != nil {
				if _, ok := isCorruption(err); !ok {
					t.Fatalf("mode %d: unexpected error %v", mode, err)
				}
				continue
			}
			j.Load(func(id uint64, _ uint16, p []byte, _ []Update) error {
				if len(p) > 64<<10 {
					t.Fatalf("payload too large")
				}
				return nil
			})
			j.Close()
		}
	})
}
