package page

import (
	"testing"
)

// BenchmarkAppendSync appends 1 KiB records to a store on the real file
// system, waiting for a Sync every 100 records.
func BenchmarkAppendSync(b *testing.B) {
	d, err := Open(b.TempDir(), nil, Options{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := d.Open("bench")
	if err != nil {
		b.Fatal(err)
	}
	rec := make([]byte, 1024)
	b.SetBytes(int64(len(rec)))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := s.Append(rec); err != nil {
			b.Fatal(err)
		}
		if i%100 == 99 {
			if err := syncWait(s); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}
