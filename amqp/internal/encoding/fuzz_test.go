package encoding

import (
	"testing"
)

// FuzzDecode decodes arbitrary bytes with ReadValue. Whatever decodes must
// be skippable to the same point, must encode without error, and must decode
// again to an equal value, and re-encode to the same bytes. A map read
// with ReadMapRaw and written back reads raw as the same entries.
func FuzzDecode(f *testing.F) {
	for _, tc := range decodeCases {
		f.Add(hx(tc.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if m, err := NewReader(data).ReadMapRaw(); err == nil {
			// Written back and read raw again: the same keys, the same
			// value bytes.
			var w Writer
			if err := w.Map(m); err != nil {
				t.Fatalf("writing a raw map: %v", err)
			}
			m2, err := NewReader(w.B).ReadMapRaw()
			if err != nil || len(m2) != len(m) {
				t.Fatalf("a raw map written back (% x) reads as %v, %v", w.B, m2, err)
			}
			for i := range m {
				if !equalValues(m[i].Key, m2[i].Key) || string(m[i].Value.(Raw)) != string(m2[i].Value.(Raw)) {
					t.Fatalf("entry %d: %#v became %#v", i, m[i], m2[i])
				}
			}
		}
		r := NewReader(data)
		v, err := r.ReadValue()
		if err != nil {
			return
		}
		s := NewReader(data)
		if err := s.Skip(); err != nil || s.Len() != r.Len() {
			t.Fatalf("Skip: %v, %d left; ReadValue left %d", err, s.Len(), r.Len())
		}
		var w Writer
		if err := w.Value(v); err != nil {
			t.Fatalf("encoding %#v: %v", v, err)
		}
		r2 := NewReader(w.B)
		v2, err := r2.ReadValue()
		if err != nil {
			t.Fatalf("decoding the re-encoding % x: %v", w.B, err)
		}
		if r2.Len() != 0 {
			t.Fatalf("%d bytes left after the re-encoding", r2.Len())
		}
		if !equalValues(v, v2) {
			t.Fatalf("round trip: %#v became %#v", v, v2)
		}
		var w2 Writer
		if err := w2.Value(v2); err != nil || string(w2.B) != string(w.B) {
			t.Fatalf("re-encoding is not stable: % x then % x (%v)", w.B, w2.B, err)
		}
	})
}
