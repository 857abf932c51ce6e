package encoding

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// hx decodes hexadecimal written with optional spaces.
func hx(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

// equalValues is reflect.DeepEqual, except that floats compare by bits (so
// that NaN equals itself).
func equalValues(a, b any) bool {
	switch x := a.(type) {
	case float32:
		y, ok := b.(float32)
		return ok && math.Float32bits(x) == math.Float32bits(y)
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case []any:
		y, ok := b.([]any)
		return ok && equalSlices(x, y)
	case Array:
		y, ok := b.(Array)
		return ok && equalSlices(x, y)
	case Map:
		y, ok := b.(Map)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalValues(x[i].Key, y[i].Key) || !equalValues(x[i].Value, y[i].Value) {
				return false
			}
		}
		return true
	case *Described:
		y, ok := b.(*Described)
		return ok && (x == nil) == (y == nil) && (x == nil ||
			equalValues(x.Descriptor, y.Descriptor) && equalValues(x.Value, y.Value))
	}
	return reflect.DeepEqual(a, b)
}

func equalSlices(x, y []any) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if !equalValues(x[i], y[i]) {
			return false
		}
	}
	return true
}

var uuid1 = UUID{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8}

// decodeCases are hand-written encodings from the spec's tables, and the
// values they decode to. Compact and wide forms of a value sit side by side.
var decodeCases = []struct {
	name string
	in   string
	want any
}{
	{"null", "40", nil},
	{"true", "41", true},
	{"false", "42", false},
	{"boolean 1", "56 01", true},
	{"boolean 0", "56 00", false},
	{"ubyte", "50 ff", uint8(255)},
	{"ushort", "60 01 02", uint16(0x0102)},
	{"uint0", "43", uint32(0)},
	{"smalluint", "52 07", uint32(7)},
	{"uint", "70 00 00 00 07", uint32(7)},
	{"uint max", "70 ff ff ff ff", uint32(math.MaxUint32)},
	{"ulong0", "44", uint64(0)},
	{"smallulong", "53 07", uint64(7)},
	{"ulong", "80 00 00 00 00 00 00 00 07", uint64(7)},
	{"ulong max", "80 ff ff ff ff ff ff ff ff", uint64(math.MaxUint64)},
	{"byte", "51 ff", int8(-1)},
	{"short", "61 ff fe", int16(-2)},
	{"smallint", "54 fd", int32(-3)},
	{"int", "71 ff ff ff fd", int32(-3)},
	{"smalllong", "55 fc", int64(-4)},
	{"long", "81 ff ff ff ff ff ff ff fc", int64(-4)},
	{"float", "72 3f c0 00 00", float32(1.5)},
	{"double", "82 3f f8 00 00 00 00 00 00", float64(1.5)},
	{"decimal32", "74 01 02 03 04", Decimal32{1, 2, 3, 4}},
	{"decimal64", "84 01 02 03 04 05 06 07 08", Decimal64{1, 2, 3, 4, 5, 6, 7, 8}},
	{"decimal128", "94 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f",
		Decimal128{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
	{"char", "73 00 01 f6 00", Char('😀')},
	{"timestamp", "83 00 00 01 8b cf e5 68 00", time.UnixMilli(1700000000000).UTC()},
	{"timestamp before epoch", "83 ff ff ff ff ff ff ff ff", time.UnixMilli(-1).UTC()},
	{"uuid", "98 12 34 56 78 9a bc de f0 01 02 03 04 05 06 07 08", uuid1},
	{"vbin8", "a0 03 61 62 63", []byte("abc")},
	{"vbin32", "b0 00 00 00 03 61 62 63", []byte("abc")},
	{"vbin8 empty", "a0 00", []byte{}},
	{"str8", "a1 05 68 c3 a9 6c 6c", "héll"},
	{"str32", "b1 00 00 00 02 68 69", "hi"},
	{"sym8", "a3 02 68 69", Symbol("hi")},
	{"sym32", "b3 00 00 00 02 68 69", Symbol("hi")},
	{"list0", "45", []any{}},
	{"list8", "c0 04 02 41 52 05", []any{true, uint32(5)}},
	{"list32", "d0 00 00 00 07 00 00 00 02 41 52 05", []any{true, uint32(5)}},
	{"list8 nested", "c0 05 02 45 c0 01 00", []any{[]any{}, []any{}}},
	{"map8", "c1 07 02 a3 01 6b a1 01 76", Map{{Symbol("k"), "v"}}},
	{"map32", "d1 00 00 00 0a 00 00 00 02 a3 01 6b a1 01 76", Map{{Symbol("k"), "v"}}},
	{"map8 empty", "c1 01 00", Map(nil)},
	{"map binary key", "c1 06 02 a0 01 00 50 01", Map{{[]byte{0}, uint8(1)}}},
	{"array8 ubyte", "e0 05 03 50 01 02 03", Array{uint8(1), uint8(2), uint8(3)}},
	{"array32 uint", "f0 00 00 00 0d 00 00 00 02 70 00 00 00 01 00 00 03 e8",
		Array{uint32(1), uint32(1000)}},
	{"array of smalluint", "e0 04 02 52 01 02", Array{uint32(1), uint32(2)}},
	{"array of true", "e0 02 03 41", Array{true, true, true}},
	{"array of boolean", "e0 04 02 56 00 01", Array{false, true}},
	{"array of sym8", "e0 06 02 a3 01 61 01 62", Array{Symbol("a"), Symbol("b")}},
	{"array of lists", "e0 07 02 c0 01 00 02 01 40", Array{[]any{}, []any{nil}}},
	{"array of arrays", "e0 09 02 e0 02 00 40 03 01 50 07", Array{Array{}, Array{uint8(7)}}},
	{"array empty", "e0 02 00 40", Array{}},
	{"array empty no constructor", "e0 01 00", Array{}},
	{"array of described", "e0 07 02 00 53 2a 52 01 02",
		Array{&Described{uint64(0x2a), uint32(1)}, &Described{uint64(0x2a), uint32(2)}}},
	{"described ulong", "00 53 24 45", &Described{uint64(0x24), []any{}}},
	{"described ulong0", "00 44 40", &Described{uint64(0), nil}},
	{"described ulong wide", "00 80 00 00 46 8c 00 00 00 04 a1 01 78",
		&Described{uint64(0x468c00000004), "x"}},
	{"described symbol", "00 a3 04 74 65 73 74 a1 01 78", &Described{Symbol("test"), "x"}},
	{"described described", "00 53 01 00 53 02 40",
		&Described{uint64(1), &Described{uint64(2), nil}}},
}

func TestDecodeCases(t *testing.T) {
	for _, tc := range decodeCases {
		in := hx(tc.in)
		r := NewReader(in)
		got, err := r.ReadValue()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !equalValues(got, tc.want) {
			t.Errorf("%s: got %#v, want %#v", tc.name, got, tc.want)
		}
		if r.Len() != 0 {
			t.Errorf("%s: %d bytes left", tc.name, r.Len())
		}
		// Skip must consume the same bytes.
		s := NewReader(in)
		if err := s.Skip(); err != nil || s.Len() != 0 {
			t.Errorf("%s: Skip: %v, %d left", tc.name, err, s.Len())
		}
		// Re-encoding must decode to the same value.
		var w Writer
		if err := w.Value(got); err != nil {
			t.Errorf("%s: encode: %v", tc.name, err)
			continue
		}
		again, err := NewReader(w.B).ReadValue()
		if err != nil || !equalValues(again, got) {
			t.Errorf("%s: re-decoded %x as %#v, %v", tc.name, w.B, again, err)
		}
		// Every proper prefix must fail cleanly.
		for i := range in {
			if _, err := NewReader(in[:i]).ReadValue(); err == nil {
				t.Errorf("%s: prefix of %d bytes decoded", tc.name, i)
			}
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want error
	}{
		{"empty", "", ErrTruncated},
		{"unknown code", "01", ErrInvalidType},
		{"unknown code 0xff", "ff", ErrInvalidType},
		{"boolean 2", "56 02", ErrInvalidType},
		{"bad utf8", "a1 02 c3 28", ErrInvalidUTF8},
		{"str8 too long", "a1 05 61", ErrTruncated},
		{"str32 huge", "b1 ff ff ff ff 61", ErrTruncated},
		{"list8 count > size", "c0 02 05 40", ErrInvalidSize},
		{"list8 size 0", "c0 00", ErrInvalidSize},
		{"list32 2^32-1 elements", "d0 00 00 00 06 ff ff ff ff 40 40", ErrInvalidSize},
		{"list32 huge size", "d0 ff ff ff ff ff ff ff ff 40", ErrTruncated},
		{"list8 short content", "c0 03 02 40 a0 00", ErrTruncated},
		{"list8 count beyond size", "c0 02 02 40", ErrInvalidSize},
		{"list8 leftover bytes", "c0 03 01 40 40", ErrInvalidSize},
		{"map odd count", "c1 03 01 40 40", ErrInvalidSize},
		{"array32 huge count", "f0 00 00 00 06 7f ff ff ff 70 00", ErrInvalidSize},
		{"array of nulls beyond budget", "f0 00 00 00 05 00 01 00 00 40", ErrInvalidSize},
		{"array of uint short", "e0 06 02 70 00 00 00 01", ErrInvalidSize},
		{"array unknown element", "e0 03 01 01 00", ErrInvalidType},
		{"descriptor not ulong/symbol", "00 52 01 40", ErrInvalidType},
		{"described no value", "00 53 01", ErrTruncated},
		{"array leftover", "e0 04 01 50 01 02", ErrInvalidSize},
	} {
		_, err := NewReader(hx(tc.in)).ReadValue()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestDepthLimit(t *testing.T) {
	nest := func(n int, open string) []byte {
		var b []byte
		for range n {
			b = append(b, hx(open)...)
		}
		return append(b, 0x40)
	}
	// Lists of one element, each 0xc0 size 1 count: sizes do not matter for
	// the depth check since it fires before the content is read.
	var b []byte
	for i := MaxDepth + 5; i > 0; i-- {
		b = append([]byte{0xd0, 0, 0, 0, 0, 0, 0, 0, 1}, b...)
	}
	b = append(b, 0x40)
	// Fix up the 32-bit sizes from the inside out.
	for i := MaxDepth + 4; i >= 0; i-- {
		pos := i * 9
		size := len(b) - pos - 5
		b[pos+1], b[pos+2], b[pos+3], b[pos+4] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
	}
	if _, err := NewReader(b).ReadValue(); !errors.Is(err, ErrTooDeep) {
		t.Errorf("deep lists: %v", err)
	}
	if _, err := NewReader(nest(MaxDepth+1, "00 53 01")).ReadValue(); !errors.Is(err, ErrTooDeep) {
		t.Errorf("deep described: %v", err)
	}
	if _, err := NewReader(nest(MaxDepth-1, "00 53 01")).ReadValue(); err != nil {
		t.Errorf("described at the limit: %v", err)
	}
	// A value nested too deep does not encode either.
	var v any = "x"
	for range MaxDepth + 1 {
		v = []any{v}
	}
	var w Writer
	if err := w.Value(v); !errors.Is(err, ErrTooDeep) {
		t.Errorf("encoding deep lists: %v", err)
	}
	if _, err := NewReader(w.B).ReadValue(); err != nil {
		t.Errorf("the too-deep encoding is not well-formed: %v", err)
	}
}

func TestHostileCountsDoNotAllocate(t *testing.T) {
	for _, in := range []string{
		"d0 00 00 00 06 ff ff ff ff 40 40",          // list of 2^32-1 elements
		"d1 00 00 00 06 ff ff ff fe 40 40",          // map of 2^31-1 pairs
		"f0 00 00 00 06 00 ff ff ff 40",             // array of 2^24-1 nulls
		"f0 00 00 00 07 7f ff ff ff 80 00 00",       // array of 2^31-1 ulongs
		"b0 ff ff ff ff 00",                         // binary of 4 GiB
		"e0 04 02 e0 ff ff 40 ff ff 40 ff ff 40 ff", // arrays of arrays of nulls
	} {
		b := hx(in)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 10 {
			NewReader(b).ReadValue()
		}
		runtime.ReadMemStats(&after)
		// Only errors are allocated, never the claimed elements.
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Errorf("%s: %d bytes allocated", in, n)
		}
	}
}

func TestWriterEncodings(t *testing.T) {
	long := strings.Repeat("x", 256)
	for _, tc := range []struct {
		name  string
		write func(w *Writer)
		want  string
	}{
		{"null", func(w *Writer) { w.Null() }, "40"},
		{"true", func(w *Writer) { w.Bool(true) }, "41"},
		{"false", func(w *Writer) { w.Bool(false) }, "42"},
		{"ubyte", func(w *Writer) { w.Ubyte(9) }, "50 09"},
		{"ushort", func(w *Writer) { w.Ushort(0x102) }, "60 01 02"},
		{"uint0", func(w *Writer) { w.Uint(0) }, "43"},
		{"smalluint", func(w *Writer) { w.Uint(255) }, "52 ff"},
		{"uint", func(w *Writer) { w.Uint(256) }, "70 00 00 01 00"},
		{"ulong0", func(w *Writer) { w.Ulong(0) }, "44"},
		{"smallulong", func(w *Writer) { w.Ulong(255) }, "53 ff"},
		{"ulong", func(w *Writer) { w.Ulong(256) }, "80 00 00 00 00 00 00 01 00"},
		{"byte", func(w *Writer) { w.Byte(-1) }, "51 ff"},
		{"short", func(w *Writer) { w.Short(-2) }, "61 ff fe"},
		{"smallint", func(w *Writer) { w.Int(-128) }, "54 80"},
		{"int", func(w *Writer) { w.Int(128) }, "71 00 00 00 80"},
		{"smalllong", func(w *Writer) { w.Long(127) }, "55 7f"},
		{"long", func(w *Writer) { w.Long(-129) }, "81 ff ff ff ff ff ff ff 7f"},
		{"float", func(w *Writer) { w.Float(1.5) }, "72 3f c0 00 00"},
		{"double", func(w *Writer) { w.Double(1.5) }, "82 3f f8 00 00 00 00 00 00"},
		{"char", func(w *Writer) { w.Char('A') }, "73 00 00 00 41"},
		{"timestamp", func(w *Writer) { w.Timestamp(time.UnixMilli(1700000000000)) }, "83 00 00 01 8b cf e5 68 00"},
		{"uuid", func(w *Writer) { w.UUID(uuid1) }, "98 12 34 56 78 9a bc de f0 01 02 03 04 05 06 07 08"},
		{"vbin8", func(w *Writer) { w.Binary([]byte("ab")) }, "a0 02 61 62"},
		{"str8", func(w *Writer) { w.String("ab") }, "a1 02 61 62"},
		{"sym8", func(w *Writer) { w.Symbol("ab") }, "a3 02 61 62"},
		{"str32", func(w *Writer) { w.String(long) }, "b1 00 00 01 00" + strings.Repeat("78", 256)},
		{"symbols empty", func(w *Writer) { w.Symbols(nil) }, "40"},
		{"symbols", func(w *Writer) { w.Symbols([]Symbol{"a", "b"}) }, "e0 06 02 a3 01 61 01 62"},
		{"symbol array empty", func(w *Writer) { w.SymbolArray(nil) }, "e0 02 00 a3"},
		{"descriptor", func(w *Writer) { w.Descriptor(0x10) }, "00 53 10"},
		{"descriptor wide", func(w *Writer) { w.Descriptor(0x468C00000004) }, "00 80 00 00 46 8c 00 00 00 04"},
		{"list0", func(w *Writer) { w.EndList(w.BeginList(), 0) }, "45"},
		{"list8", func(w *Writer) {
			m := w.BeginList()
			w.Bool(true)
			w.Uint(5)
			w.EndList(m, 2)
		}, "c0 04 02 41 52 05"},
		{"list32", func(w *Writer) {
			m := w.BeginList()
			w.Binary(make([]byte, 300))
			w.EndList(m, 1)
		}, "d0 00 00 01 35 00 00 00 01 b0 00 00 01 2c" + strings.Repeat("00", 300)},
		{"map empty", func(w *Writer) { w.EndMap(w.BeginMap(), 0) }, "c1 01 00"},
		{"map8", func(w *Writer) {
			m := w.BeginMap()
			w.Symbol("k")
			w.String("v")
			w.EndMap(m, 2)
		}, "c1 07 02 a3 01 6b a1 01 76"},
		{"fields trailing nulls", func(w *Writer) {
			f := w.BeginFields()
			w.String("a")
			w.Field(&f)
			w.Null()
			w.Field(&f)
			w.Null()
			w.Field(&f)
			w.EndFields(&f)
		}, "c0 04 01 a1 01 61"},
		{"fields inner null kept", func(w *Writer) {
			f := w.BeginFields()
			w.Null()
			w.Field(&f)
			w.Uint(64) // 52 40: ends in 0x40 but is not null
			w.Field(&f)
			w.Null()
			w.Field(&f)
			w.EndFields(&f)
		}, "c0 04 02 40 52 40"},
		{"fields all null", func(w *Writer) {
			f := w.BeginFields()
			w.Null()
			w.Field(&f)
			w.EndFields(&f)
		}, "45"},
	} {
		w := Writer{B: []byte{0xee}} // appends after existing content
		tc.write(&w)
		if want := append([]byte{0xee}, hx(tc.want)...); !bytes.Equal(w.B, want) {
			t.Errorf("%s: got % x, want % x", tc.name, w.B, want)
		}
	}
}

func TestValueEncodings(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"int as long", int(-1), "55 ff"},
		{"uint as ulong", uint(1), "53 01"},
		{"map[string]any sorted", map[string]any{"b": nil, "a": true}, "c1 09 04 a1 01 61 41 a1 01 62 40"},
		{"map[Symbol]any sorted", map[Symbol]any{"b": nil, "a": true}, "c1 09 04 a3 01 61 41 a3 01 62 40"},
		{"[]Symbol", []Symbol{"a"}, "e0 04 01 a3 01 61"},
		{"array uint fixed width", Array{uint32(1), uint32(1000)}, "e0 0a 02 70 00 00 00 01 00 00 03 e8"},
		{"array empty", Array{}, "e0 02 00 40"},
		{"array bool", Array{true, false}, "e0 04 02 56 01 00"},
		{"array long strings", Array{"a", strings.Repeat("b", 256)},
			"f0 00 00 01 0e 00 00 00 02 b1 00 00 00 01 61 00 00 01 00" + strings.Repeat("62", 256)},
		{"array described", Array{&Described{Symbol("d"), uint64(1)}, Described{Symbol("d"), uint64(2)}},
			"e0 16 02 00 a3 01 64 80 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 02"},
		{"array of lists", Array{[]any{}, []any{true}},
			"e0 13 02 d0 00 00 00 04 00 00 00 00 00 00 00 05 00 00 00 01 41"},
		{"array of maps", Array{Map{{"a", nil}}},
			"e0 0e 01 d1 00 00 00 08 00 00 00 02 a1 01 61 40"},
		{"array of arrays", Array{Array{uint8(1)}, []Symbol{"x"}},
			"e0 17 02 f0 00 00 00 06 00 00 00 01 50 01 00 00 00 07 00 00 00 01 a3 01 78"},
		{"described", Described{uint64(0x24), []any{}}, "00 53 24 45"},
		{"nil *Described", (*Described)(nil), "40"},
	} {
		var w Writer
		if err := w.Value(tc.v); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if want := hx(tc.want); !bytes.Equal(w.B, want) {
			t.Errorf("%s: got % x, want % x", tc.name, w.B, want)
		}
		if _, err := NewReader(w.B).ReadValue(); err != nil {
			t.Errorf("%s: decoding % x: %v", tc.name, w.B, err)
		}
	}
}

func TestValueEncodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want error
	}{
		{"unsupported", struct{}{}, ErrUnsupported},
		{"unsupported in list", []any{1, make(chan int)}, ErrUnsupported},
		{"mixed array", Array{uint32(1), "x"}, ErrNotHomogeneous},
		{"mixed descriptors", Array{&Described{uint64(1), nil}, &Described{uint64(2), nil}}, ErrNotHomogeneous},
		{"bad descriptor", &Described{Descriptor: 5, Value: nil}, ErrUnsupported},
		{"unsupported array", Array{struct{}{}}, ErrUnsupported},
	} {
		var w Writer
		err := w.Value(tc.v)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
		// The output is still one well-formed value.
		r := NewReader(w.B)
		if _, err := r.ReadValue(); err != nil || r.Len() != 0 {
			t.Errorf("%s: output % x does not decode: %v", tc.name, w.B, err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	values := []any{
		nil, true, false,
		uint8(0), uint8(255), uint16(0), uint16(65535),
		uint32(0), uint32(255), uint32(256), uint32(math.MaxUint32),
		uint64(0), uint64(255), uint64(256), uint64(math.MaxUint64),
		int8(-128), int8(127), int16(-32768), int16(32767),
		int32(-128), int32(127), int32(-129), int32(128), int32(math.MinInt32), int32(math.MaxInt32),
		int64(-128), int64(127), int64(-129), int64(128), int64(math.MinInt64), int64(math.MaxInt64),
		float32(-0.25), float32(math.Inf(1)), float32(math.NaN()), 3.25, math.Inf(-1), math.NaN(),
		Decimal32{1, 2, 3, 4}, Decimal64{7: 9}, Decimal128{15: 1},
		Char('x'), Char('😀'),
		time.UnixMilli(0).UTC(), time.UnixMilli(1700000000123).UTC(), time.UnixMilli(-5).UTC(),
		uuid1,
		[]byte{}, []byte("x"), bytes.Repeat([]byte("y"), 255), bytes.Repeat([]byte("y"), 256),
		"", "ü", strings.Repeat("s", 255), strings.Repeat("s", 256),
		Symbol(""), Symbol("amqp:open:list"), Symbol(strings.Repeat("q", 300)),
		[]any{}, []any{nil, uint32(1), "two", []any{Symbol("three")}},
		make([]any, 300),
		Map{{Symbol("a"), int32(1)}, {uint64(2), []byte("b")}, {[]byte("k"), Map{{"x", nil}}}},
		Array{}, Array{int64(1), int64(-1)}, Array{"a", "b"}, Array{Symbol("s")},
		Array{uuid1, uuid1}, Array{nil, nil}, Array{Char('a')}, Array{time.UnixMilli(7).UTC()},
		Array{Array{uint16(1)}, Array{}},
		Array{&Described{Symbol("d"), Array{int8(1)}}, &Described{Symbol("d"), Array{}}},
		Array{&Described{uint64(7), &Described{uint64(8), "v"}}},
		&Described{uint64(0x70), []any{true, nil, uint32(1)}},
		&Described{Symbol("x:y"), Map{{"k", 1.5}}},
	}
	for _, v := range values {
		var w Writer
		if err := w.Value(v); err != nil {
			t.Errorf("%#v: %v", v, err)
			continue
		}
		r := NewReader(w.B)
		got, err := r.ReadValue()
		if err != nil {
			t.Errorf("%#v: decoding % x: %v", v, w.B, err)
			continue
		}
		if r.Len() != 0 {
			t.Errorf("%#v: %d bytes left", v, r.Len())
		}
		if !equalValues(got, v) {
			t.Errorf("round trip of %#v gave %#v", v, got)
		}
		s := NewReader(w.B)
		if err := s.Skip(); err != nil || s.Len() != 0 {
			t.Errorf("%#v: Skip: %v, %d left", v, err, s.Len())
		}
	}
}

func TestTypedReaders(t *testing.T) {
	type reader func(r *Reader) (any, error)
	u := func(r *Reader) (any, error) { return r.ReadUint() }
	ul := func(r *Reader) (any, error) { return r.ReadUlong() }
	us := func(r *Reader) (any, error) { return r.ReadUshort() }
	ub := func(r *Reader) (any, error) { return r.ReadUbyte() }
	i := func(r *Reader) (any, error) { return r.ReadInt() }
	l := func(r *Reader) (any, error) { return r.ReadLong() }
	bo := func(r *Reader) (any, error) { return r.ReadBool() }
	s := func(r *Reader) (any, error) { return r.ReadString() }
	sy := func(r *Reader) (any, error) { return r.ReadSymbol() }
	bi := func(r *Reader) (any, error) { return r.ReadBinary() }
	ts := func(r *Reader) (any, error) { return r.ReadTimestamp() }
	sys := func(r *Reader) (any, error) { return r.ReadSymbols() }
	m := func(r *Reader) (any, error) { return r.ReadMap() }
	lh := func(r *Reader) (any, error) { return r.ReadListHeader() }
	for _, tc := range []struct {
		name string
		read reader
		in   string
		want any // an error to expect one
	}{
		{"uint null", u, "40", uint32(0)},
		{"uint0", u, "43", uint32(0)},
		{"smalluint", u, "52 09", uint32(9)},
		{"uint", u, "70 00 01 00 00", uint32(65536)},
		{"uint from ubyte", u, "50 09", uint32(9)},
		{"uint from ushort", u, "60 01 00", uint32(256)},
		{"uint from ulong", u, "53 01", ErrInvalidType},
		{"uint from string", u, "a1 00", ErrInvalidType},
		{"uint truncated", u, "70 00 00", ErrTruncated},
		{"ulong0", ul, "44", uint64(0)},
		{"smallulong", ul, "53 09", uint64(9)},
		{"ulong from uint", ul, "70 00 00 00 09", uint64(9)},
		{"ulong from uint0", ul, "43", uint64(0)},
		{"ushort", us, "60 ff ff", uint16(65535)},
		{"ushort from ubyte", us, "50 07", uint16(7)},
		{"ushort from uint", us, "52 07", ErrInvalidType},
		{"ubyte", ub, "50 07", uint8(7)},
		{"ubyte null", ub, "40", uint8(0)},
		{"int smallint", i, "54 ff", int32(-1)},
		{"int", i, "71 80 00 00 00", int32(math.MinInt32)},
		{"int from short", i, "61 ff fe", int32(-2)},
		{"int from long", i, "55 01", ErrInvalidType},
		{"long", l, "81 80 00 00 00 00 00 00 00", int64(math.MinInt64)},
		{"long smalllong", l, "55 fe", int64(-2)},
		{"long from int", l, "71 ff ff ff fe", int64(-2)},
		{"bool null", bo, "40", false},
		{"bool true", bo, "41", true},
		{"bool 56 01", bo, "56 01", true},
		{"bool 56 00", bo, "56 00", false},
		{"bool 56 02", bo, "56 02", ErrInvalidType},
		{"string null", s, "40", ""},
		{"string str32", s, "b1 00 00 00 01 61", "a"},
		{"string bad utf8", s, "a1 01 ff", ErrInvalidUTF8},
		{"string from symbol", s, "a3 01 61", ErrInvalidType},
		{"symbol", sy, "a3 01 61", Symbol("a")},
		{"symbol sym32", sy, "b3 00 00 00 01 61", Symbol("a")},
		{"symbol null", sy, "40", Symbol("")},
		{"binary null", bi, "40", []byte(nil)},
		{"binary vbin32", bi, "b0 00 00 00 01 61", []byte("a")},
		{"timestamp null", ts, "40", time.Time{}},
		{"timestamp", ts, "83 00 00 00 00 00 00 03 e8", time.Unix(1, 0).UTC()},
		{"symbols null", sys, "40", []Symbol(nil)},
		{"symbols single", sys, "a3 01 61", []Symbol{"a"}},
		{"symbols array8", sys, "e0 06 02 a3 01 61 01 62", []Symbol{"a", "b"}},
		{"symbols array32 of sym32", sys, "f0 00 00 00 0c 00 00 00 01 b3 00 00 00 03 61 62 63", []Symbol{"abc"}},
		{"symbols empty array", sys, "e0 02 00 a3", []Symbol(nil)},
		{"symbols array of strings", sys, "e0 04 01 a1 01 61", ErrInvalidType},
		{"symbols hostile count", sys, "f0 00 00 00 06 7f ff ff ff a3 00", ErrInvalidSize},
		{"map null", m, "40", Map(nil)},
		{"map", m, "c1 03 02 40 41", Map{{nil, true}}},
		{"map from list", m, "45", ErrInvalidType},
		{"list header null", lh, "40", 0},
		{"list header list0", lh, "45", 0},
		{"list header list8", lh, "c0 03 02 40 40", 2},
		{"list header list32", lh, "d0 00 00 00 06 00 00 00 02 40 40", 2},
		{"list header hostile", lh, "d0 00 00 00 05 ff ff ff ff 40", ErrInvalidSize},
		{"list header from map", lh, "c1 01 00", ErrInvalidType},
	} {
		got, err := tc.read(NewReader(hx(tc.in)))
		if want, ok := tc.want.(error); ok {
			if !errors.Is(err, want) {
				t.Errorf("%s: got %v, %v; want error %v", tc.name, got, err, want)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %#v, %v; want %#v", tc.name, got, err, tc.want)
		}
	}
}

func TestReadBinaryAliases(t *testing.T) {
	in := hx("a0 03 61 62 63 40")
	r := NewReader(in)
	b, err := r.ReadBinary()
	if err != nil {
		t.Fatal(err)
	}
	if &b[0] != &in[2] {
		t.Error("ReadBinary copied")
	}
	if cap(b) != 3 {
		t.Errorf("cap %d: appending would overwrite the input", cap(b))
	}
}

func TestReadListFields(t *testing.T) {
	// A list of three fields followed by another value.
	r := NewReader(hx("c0 06 03 a1 01 61 40 41 52 07"))
	n, elems, err := r.ReadList()
	if err != nil || n != 3 {
		t.Fatalf("ReadList: %d, %v", n, err)
	}
	if s, _ := elems.ReadString(); s != "a" {
		t.Errorf("field 0: %q", s)
	}
	if !elems.SkipNull() {
		t.Error("field 1 not null")
	}
	if v, _ := elems.ReadBool(); !v {
		t.Error("field 2")
	}
	if elems.Len() != 0 {
		t.Errorf("%d bytes left in the list", elems.Len())
	}
	if v, err := r.ReadUint(); v != 7 || err != nil {
		t.Errorf("after the list: %d, %v", v, err)
	}
}

func TestDescriptors(t *testing.T) {
	r := NewReader(hx("00 53 10 45"))
	if code, ok := r.PeekDescriptor(); !ok || code != 0x10 {
		t.Errorf("PeekDescriptor: %x, %v", code, ok)
	}
	if d, err := r.ReadDescriptor(); err != nil || d != uint64(0x10) {
		t.Errorf("ReadDescriptor: %v, %v", d, err)
	}
	if r.Len() != 1 {
		t.Errorf("%d bytes left", r.Len())
	}
	r = NewReader(hx("00 a3 0e 61 6d 71 70 3a 6f 70 65 6e 3a 6c 69 73 74 45"))
	if _, ok := r.PeekDescriptor(); ok {
		t.Error("PeekDescriptor accepted a symbolic descriptor")
	}
	if d, err := r.ReadDescriptor(); err != nil || d != Symbol("amqp:open:list") {
		t.Errorf("ReadDescriptor: %v, %v", d, err)
	}
	r = NewReader(hx("00 80 00 00 46 8c 00 00 00 04"))
	if code, ok := r.PeekDescriptor(); !ok || code != 0x468c00000004 {
		t.Errorf("PeekDescriptor wide: %x, %v", code, ok)
	}
	if _, ok := NewReader(hx("00 53")).PeekDescriptor(); ok {
		t.Error("PeekDescriptor of a truncated descriptor")
	}
	if _, err := NewReader(hx("45")).ReadDescriptor(); !errors.Is(err, ErrInvalidType) {
		t.Errorf("ReadDescriptor of a list: %v", err)
	}
}

func TestMapGet(t *testing.T) {
	m := Map{{[]byte("k"), 1}, {Symbol("a"), 2}, {"a", 3}}
	if v, ok := m.Get("a"); !ok || v != 3 {
		t.Errorf("Get string: %v %v", v, ok)
	}
	if v, ok := m.Get(Symbol("a")); !ok || v != 2 {
		t.Errorf("Get symbol: %v %v", v, ok)
	}
	if _, ok := m.Get([]byte("k")); ok {
		t.Error("Get found an uncomparable key")
	}
}

// ReadMapRaw keeps each value as it was encoded, and the writer copies a
// Raw back as it is: a map read raw and written again is the same bytes,
// even where re-encoding the decoded value would differ (a str32 that
// fits a str8, an empty array's element type).
func TestReadMapRawRoundTrip(t *testing.T) {
	in := hx("d1 00000029 00000008" + // map32, size, 8 elements
		"a1 01 61  b1 00000002 6869" + // "a": "hi" as str32
		"a1 01 62  e0 02 00 71" + // "b": an empty array of int
		"a1 01 63  00 a3 03 666f6f 52 05" + // "c": a described uint (descriptor :foo)
		"a1 01 64  c0 04 02 54 ff 40") // "d": a list [int8(-1), null] in list8
	var r Reader
	r.Reset(in)
	m, err := r.ReadMapRaw()
	if err != nil || r.Len() != 0 {
		t.Fatalf("ReadMapRaw: %v, %d left", err, r.Len())
	}
	want := []string{"b1 00000002 6869", "e0 02 00 71", "00 a3 03 666f6f 52 05", "c0 04 02 54 ff 40"}
	for i, e := range m {
		if raw, ok := e.Value.(Raw); !ok || !bytes.Equal(raw, hx(want[i])) {
			t.Errorf("entry %d (%v): %T % x, want % x", i, e.Key, e.Value, e.Value, hx(want[i]))
		}
	}
	var w Writer
	if err := w.Value(Map{{Key: "b", Value: m[1].Value}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.B, hx("c1 08 02 a1 01 62 e0 02 00 71")) {
		t.Errorf("raw value rewritten as % x", w.B)
	}
	// Sizes are checked as Skip checks them.
	r.Reset(hx("c1 06 02 a1 01 61 b1 00"))
	if _, err := r.ReadMapRaw(); !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrInvalidSize) {
		t.Errorf("truncated value: %v", err)
	}
	r.Reset(hx("40"))
	if m, err := r.ReadMapRaw(); m != nil || err != nil {
		t.Errorf("null: %v %v", m, err)
	}
}
