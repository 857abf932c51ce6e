package encoding

import (
	"encoding/binary"
	"math"
	"time"
)

// Writer appends AMQP-encoded values to B. Every method picks the most
// compact encoding of its value. The zero Writer is ready to use; to encode
// into an existing buffer, start with Writer{B: buf}.
//
// Binary, string and symbol values must be shorter than 4 GiB.
type Writer struct {
	B []byte
}

// ListMark records where a list started; see BeginList.
type ListMark struct{ pos int }

// MapMark records where a map started; see BeginMap.
type MapMark struct{ pos int }

// Null appends a null.
func (w *Writer) Null() { w.B = append(w.B, CodeNull) }

// Bool appends a boolean (true or false, one byte).
func (w *Writer) Bool(v bool) {
	if v {
		w.B = append(w.B, CodeTrue)
	} else {
		w.B = append(w.B, CodeFalse)
	}
}

// Ubyte appends a ubyte.
func (w *Writer) Ubyte(v uint8) { w.B = append(w.B, CodeUbyte, v) }

// Ushort appends a ushort.
func (w *Writer) Ushort(v uint16) {
	w.B = binary.BigEndian.AppendUint16(append(w.B, CodeUshort), v)
}

// Uint appends a uint as uint0, smalluint or uint.
func (w *Writer) Uint(v uint32) {
	switch {
	case v == 0:
		w.B = append(w.B, CodeUint0)
	case v <= math.MaxUint8:
		w.B = append(w.B, CodeSmallUint, byte(v))
	default:
		w.B = binary.BigEndian.AppendUint32(append(w.B, CodeUint), v)
	}
}

// Ulong appends a ulong as ulong0, smallulong or ulong.
func (w *Writer) Ulong(v uint64) {
	switch {
	case v == 0:
		w.B = append(w.B, CodeUlong0)
	case v <= math.MaxUint8:
		w.B = append(w.B, CodeSmallUlong, byte(v))
	default:
		w.B = binary.BigEndian.AppendUint64(append(w.B, CodeUlong), v)
	}
}

// Byte appends a (signed) byte.
func (w *Writer) Byte(v int8) { w.B = append(w.B, CodeByte, byte(v)) }

// Short appends a short.
func (w *Writer) Short(v int16) {
	w.B = binary.BigEndian.AppendUint16(append(w.B, CodeShort), uint16(v))
}

// Int appends an int as smallint or int.
func (w *Writer) Int(v int32) {
	if v >= math.MinInt8 && v <= math.MaxInt8 {
		w.B = append(w.B, CodeSmallInt, byte(v))
		return
	}
	w.B = binary.BigEndian.AppendUint32(append(w.B, CodeInt), uint32(v))
}

// Long appends a long as smalllong or long.
func (w *Writer) Long(v int64) {
	if v >= math.MinInt8 && v <= math.MaxInt8 {
		w.B = append(w.B, CodeSmallLong, byte(v))
		return
	}
	w.B = binary.BigEndian.AppendUint64(append(w.B, CodeLong), uint64(v))
}

// Float appends an IEEE 754 binary32 float.
func (w *Writer) Float(v float32) {
	w.B = binary.BigEndian.AppendUint32(append(w.B, CodeFloat), math.Float32bits(v))
}

// Double appends an IEEE 754 binary64 double.
func (w *Writer) Double(v float64) {
	w.B = binary.BigEndian.AppendUint64(append(w.B, CodeDouble), math.Float64bits(v))
}

// Decimal32 appends a decimal32.
func (w *Writer) Decimal32(v Decimal32) { w.B = append(append(w.B, CodeDecimal32), v[:]...) }

// Decimal64 appends a decimal64.
func (w *Writer) Decimal64(v Decimal64) { w.B = append(append(w.B, CodeDecimal64), v[:]...) }

// Decimal128 appends a decimal128.
func (w *Writer) Decimal128(v Decimal128) { w.B = append(append(w.B, CodeDecimal128), v[:]...) }

// Char appends a char.
func (w *Writer) Char(v rune) {
	w.B = binary.BigEndian.AppendUint32(append(w.B, CodeChar), uint32(v))
}

// Timestamp appends a timestamp: t in milliseconds since the Unix epoch.
func (w *Writer) Timestamp(t time.Time) {
	w.B = binary.BigEndian.AppendUint64(append(w.B, CodeTimestamp), uint64(t.UnixMilli()))
}

// UUID appends a uuid.
func (w *Writer) UUID(u UUID) { w.B = append(append(w.B, CodeUUID), u[:]...) }

// Binary appends binary data as vbin8 or vbin32.
func (w *Writer) Binary(b []byte) {
	w.variable(CodeVbin8, len(b))
	w.B = append(w.B, b...)
}

// String appends a string as str8-utf8 or str32-utf8. The caller is
// responsible for s being valid UTF-8.
func (w *Writer) String(s string) {
	w.variable(CodeStr8, len(s))
	w.B = append(w.B, s...)
}

// Symbol appends a symbol as sym8 or sym32.
func (w *Writer) Symbol(s Symbol) {
	w.variable(CodeSym8, len(s))
	w.B = append(w.B, s...)
}

// variable appends the constructor and size of a variable-width value of n
// bytes; code8 is the one-byte-size code, whose four-byte variant is code8+0x10.
func (w *Writer) variable(code8 byte, n int) {
	if n <= math.MaxUint8 {
		w.B = append(w.B, code8, byte(n))
		return
	}
	w.B = binary.BigEndian.AppendUint32(append(w.B, code8+0x10), uint32(n))
}

// Symbols appends a field of type "symbol, multiple": null when s is empty,
// else an array of symbols (see SymbolArray).
func (w *Writer) Symbols(s []Symbol) {
	if len(s) == 0 {
		w.Null()
		return
	}
	w.SymbolArray(s)
}

// SymbolArray appends s as an array of sym8 (or sym32 when a symbol is longer
// than 255 bytes), even when s is empty.
func (w *Writer) SymbolArray(s []Symbol) {
	wide := false
	for _, x := range s {
		if len(x) > math.MaxUint8 {
			wide = true
		}
	}
	m := w.begin(CodeArray32)
	if wide {
		w.B = append(w.B, CodeSym32)
		for _, x := range s {
			w.B = binary.BigEndian.AppendUint32(w.B, uint32(len(x)))
			w.B = append(w.B, x...)
		}
	} else {
		w.B = append(w.B, CodeSym8)
		for _, x := range s {
			w.B = append(append(w.B, byte(len(x))), x...)
		}
	}
	w.end(m, len(s))
}

// Descriptor appends the start of a described value with a numeric
// descriptor: 0x00 then code as smallulong or ulong. The described value must
// be appended next.
func (w *Writer) Descriptor(code uint64) {
	w.B = append(w.B, CodeDescribed)
	w.Ulong(code)
}

// SymbolDescriptor appends the start of a described value with a symbolic
// descriptor. The described value must be appended next.
func (w *Writer) SymbolDescriptor(name Symbol) {
	w.B = append(w.B, CodeDescribed)
	w.Symbol(name)
}

// BeginList starts a list whose elements are appended next; EndList
// completes it.
func (w *Writer) BeginList() ListMark { return ListMark{w.begin(CodeList32)} }

// EndList completes the list started at m, holding count elements. It uses
// list0 when count is 0 (dropping anything appended since BeginList), list8
// when the list fits, else list32.
func (w *Writer) EndList(m ListMark, count int) { w.end(m.pos, count) }

// BeginMap starts a map whose keys and values are appended next, alternately;
// EndMap completes it.
func (w *Writer) BeginMap() MapMark { return MapMark{w.begin(CodeMap32)} }

// EndMap completes the map started at m; count is the number of keys plus
// the number of values.
func (w *Writer) EndMap(m MapMark, count int) { w.end(m.pos, count) }

// begin appends a 32-bit compound or array constructor with a placeholder
// size and count, and returns its position.
func (w *Writer) begin(code byte) int {
	pos := len(w.B)
	w.B = append(w.B, code, 0, 0, 0, 0, 0, 0, 0, 0)
	return pos
}

// end completes the compound or array begun at pos, compacting it to list0
// or to the 8-bit form when it fits.
func (w *Writer) end(pos, count int) {
	code := w.B[pos]
	if code == CodeList32 && count == 0 {
		w.B = append(w.B[:pos], CodeList0)
		return
	}
	n := len(w.B) - pos - 9 // bytes after the count
	if n+1 <= math.MaxUint8 && count <= math.MaxUint8 {
		w.B[pos] = code - 0x10 // list32→list8, map32→map8, array32→array8
		w.B[pos+1] = byte(n + 1)
		w.B[pos+2] = byte(count)
		copy(w.B[pos+3:], w.B[pos+9:])
		w.B = w.B[:len(w.B)-6]
		return
	}
	binary.BigEndian.PutUint32(w.B[pos+1:], uint32(n+4))
	binary.BigEndian.PutUint32(w.B[pos+5:], uint32(count))
}

// Fields builds the field list of a composite type (a performative, a
// message section, a delivery state...), leaving out trailing null fields as
// the specification allows. Use it as:
//
//	f := w.BeginFields()
//	w.String(name); w.Field(&f)
//	w.Null(); w.Field(&f)
//	w.EndFields(&f) // the list holds only the first field
type Fields struct {
	mark  ListMark
	n     int // fields written
	keepN int // fields up to the last non-null one
	keep  int // len(B) after the last non-null field
	start int // len(B) where the current field starts
}

// BeginFields starts a field list.
func (w *Writer) BeginFields() Fields {
	m := w.BeginList()
	return Fields{mark: m, keep: len(w.B), start: len(w.B)}
}

// Field ends one field: the single value appended since BeginFields or the
// previous call to Field.
func (w *Writer) Field(f *Fields) {
	f.n++
	if len(w.B) != f.start+1 || w.B[f.start] != CodeNull {
		f.keepN, f.keep = f.n, len(w.B)
	}
	f.start = len(w.B)
}

// EndFields drops the trailing null fields and completes the list.
func (w *Writer) EndFields(f *Fields) {
	w.B = w.B[:f.keep]
	w.EndList(f.mark, f.keepN)
}
