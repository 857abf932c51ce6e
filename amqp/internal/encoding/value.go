package encoding

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
)

// Value appends v, choosing the AMQP type from its Go type:
//
//	nil                                null
//	bool                               boolean
//	uint8, uint16, uint32, uint64      ubyte, ushort, uint, ulong
//	uint                               ulong
//	int8, int16, int32, int64          byte, short, int, long
//	int                                long
//	float32, float64                   float, double
//	Char                               char
//	Decimal32, Decimal64, Decimal128   decimal32, decimal64, decimal128
//	time.Time                          timestamp
//	UUID                               uuid
//	[]byte                             binary
//	string                             string
//	Symbol                             symbol
//	[]Symbol                           array of symbols
//	[]any                              list
//	Map                                map, in order
//	map[string]any, map[Symbol]any     map, keys sorted
//	Array                              array
//	Described, *Described              described value (descriptor uint64 or Symbol)
//
// Value always appends exactly one well-formed value: a value it cannot
// encode (an unsupported Go type, an array whose elements differ in type, a
// descriptor that is neither uint64 nor Symbol, nesting deeper than
// MaxDepth), wherever it sits inside v, is written as null (an array as an
// empty array) and reported by the returned error, which wraps
// ErrUnsupported, ErrNotHomogeneous or ErrTooDeep.
func (w *Writer) Value(v any) error {
	var err error
	e := encoder{w: w, err: &err}
	e.value(v, 0)
	return err
}

// Map appends m as a map, like Value(m) but without converting m to an
// interface (which allocates).
func (w *Writer) Map(m Map) error {
	var err error
	e := encoder{w: w, err: &err}
	mm := w.BeginMap()
	n := e.mapEntries(m, 1)
	w.EndMap(mm, n)
	return err
}

// encoder carries the first error met while encoding a value. (The error
// lives outside the struct so that escape analysis does not make the Writer
// escape through the returned error.)
type encoder struct {
	w   *Writer
	err *error
}

func (e *encoder) fail(err error) {
	if *e.err == nil {
		*e.err = err
	}
}

func (e *encoder) value(v any, depth int) {
	w := e.w
	switch v := v.(type) {
	case nil:
		w.Null()
	case bool:
		w.Bool(v)
	case uint8:
		w.Ubyte(v)
	case uint16:
		w.Ushort(v)
	case uint32:
		w.Uint(v)
	case uint64:
		w.Ulong(v)
	case uint:
		w.Ulong(uint64(v))
	case int8:
		w.Byte(v)
	case int16:
		w.Short(v)
	case int32:
		w.Int(v)
	case int64:
		w.Long(v)
	case int:
		w.Long(int64(v))
	case float32:
		w.Float(v)
	case float64:
		w.Double(v)
	case Char:
		w.Char(rune(v))
	case Decimal32:
		w.Decimal32(v)
	case Decimal64:
		w.Decimal64(v)
	case Decimal128:
		w.Decimal128(v)
	case time.Time:
		w.Timestamp(v)
	case UUID:
		w.UUID(v)
	case []byte:
		w.Binary(v)
	case string:
		w.String(v)
	case Symbol:
		w.Symbol(v)
	case []Symbol:
		w.SymbolArray(v)
	case Raw:
		w.B = append(w.B, v...)
	default:
		if depth >= MaxDepth {
			w.Null()
			e.fail(fmt.Errorf("%w: encoding %T", ErrTooDeep, v))
			return
		}
		e.compound(v, depth+1)
	}
}

// compound appends the values that nest: lists, maps, arrays, described
// values. depth counts v itself.
func (e *encoder) compound(v any, depth int) {
	w := e.w
	switch v := v.(type) {
	case []any:
		m := w.BeginList()
		e.listBody(v, depth)
		w.EndList(m, len(v))
	case Map, map[string]any, map[Symbol]any:
		m := w.BeginMap()
		n := e.mapBody(v, depth)
		w.EndMap(m, n)
	case Array:
		pos := w.begin(CodeArray32)
		w.B = w.B[:pos+1]
		e.arrayBody(v, depth)
		w.compactArray(pos)
	case Described:
		e.described(&v, depth)
	case *Described:
		if v == nil {
			w.Null()
			return
		}
		e.described(v, depth)
	default:
		w.Null()
		e.fail(fmt.Errorf("%w: %T", ErrUnsupported, v))
	}
}

// listBody appends the elements of a list.
func (e *encoder) listBody(l []any, depth int) {
	for _, x := range l {
		e.value(x, depth)
	}
}

// mapEntries appends the keys and values of m and returns their number.
func (e *encoder) mapEntries(m Map, depth int) int {
	for _, x := range m {
		e.value(x.Key, depth)
		e.value(x.Value, depth)
	}
	return 2 * len(m)
}

// mapBody appends the keys and values of a Map, map[string]any or
// map[Symbol]any (the last two with sorted keys) and returns their number.
func (e *encoder) mapBody(v any, depth int) int {
	w := e.w
	switch v := v.(type) {
	case Map:
		return e.mapEntries(v, depth)
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			w.String(k)
			e.value(v[k], depth)
		}
		return 2 * len(keys)
	case map[Symbol]any:
		keys := make([]Symbol, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			w.Symbol(k)
			e.value(v[k], depth)
		}
		return 2 * len(keys)
	}
	return 0
}

func (e *encoder) described(d *Described, depth int) {
	if !e.descriptor(d.Descriptor) {
		e.w.Null()
		return
	}
	e.value(d.Value, depth)
}

// descriptor appends 0x00 and the descriptor d, or fails when d is neither a
// uint64 nor a Symbol.
func (e *encoder) descriptor(d any) bool {
	switch d := d.(type) {
	case uint64:
		e.w.Descriptor(d)
	case Symbol:
		e.w.SymbolDescriptor(d)
	default:
		e.fail(fmt.Errorf("%w: descriptor of type %T", ErrUnsupported, d))
		return false
	}
	return true
}

// compactArray turns the array32 begun at pos into an array8 when it fits.
// The size and count fields must already be filled in.
func (w *Writer) compactArray(pos int) {
	count := binary.BigEndian.Uint32(w.B[pos+5:])
	w.end(pos, int(count))
}

// arrayBody appends the size, count, element constructor and elements of a
// (always 32-bit) array. When the elements are not of one encodable type it
// appends an empty array of nulls instead and records the error.
func (e *encoder) arrayBody(a Array, depth int) {
	w := e.w
	pos := len(w.B)
	w.B = append(w.B, 0, 0, 0, 0, 0, 0, 0, 0)
	descs, code, err := arrayType(a)
	if err == nil {
		for _, d := range descs {
			e.descriptor(d)
		}
		w.B = append(w.B, code)
		for _, x := range a {
			for range descs {
				x = asDescribed(x).Value
			}
			e.elemBody(code, x, depth)
		}
	} else {
		e.fail(err)
		w.B = append(w.B[:pos+8], CodeNull)
		a = nil
	}
	binary.BigEndian.PutUint32(w.B[pos:], uint32(len(w.B)-pos-4))
	binary.BigEndian.PutUint32(w.B[pos+4:], uint32(len(a)))
}

// asDescribed returns v as a *Described, or nil when it is not one.
func asDescribed(v any) *Described {
	switch d := v.(type) {
	case *Described:
		return d
	case Described:
		return &d
	}
	return nil
}

// arrayType works out the element constructor of a: the descriptors of the
// described layers every element shares, and the format code of the values
// inside them.
func arrayType(a Array) (descs []any, code byte, err error) {
	if len(a) == 0 {
		return nil, CodeNull, nil
	}
	x := a[0]
	for d := asDescribed(x); d != nil; d = asDescribed(x) {
		switch d.Descriptor.(type) {
		case uint64, Symbol:
		default:
			return nil, 0, fmt.Errorf("%w: descriptor of type %T", ErrUnsupported, d.Descriptor)
		}
		if len(descs) >= MaxDepth {
			return nil, 0, fmt.Errorf("%w: encoding array", ErrTooDeep)
		}
		descs = append(descs, d.Descriptor)
		x = d.Value
	}
	code = elemCode(x)
	if code == 0 {
		return nil, 0, fmt.Errorf("%w: array of %T", ErrUnsupported, x)
	}
	wide := false
	for i, x := range a {
		for _, want := range descs {
			d := asDescribed(x)
			if d == nil || !comparableEqual(d.Descriptor, want) {
				return nil, 0, fmt.Errorf("%w: element %d", ErrNotHomogeneous, i)
			}
			x = d.Value
		}
		if c := elemCode(x); c != code {
			return nil, 0, fmt.Errorf("%w: element %d is %T", ErrNotHomogeneous, i, x)
		}
		if n := varLen(x); n > math.MaxUint8 {
			wide = true
		}
	}
	if wide {
		code += 0x10 // vbin8→vbin32, str8→str32, sym8→sym32
	}
	return descs, code, nil
}

// elemCode returns the format code an array uses for elements like v (the
// 8-bit variant for variable-width types), or 0 when v cannot be an element.
func elemCode(v any) byte {
	switch v.(type) {
	case nil:
		return CodeNull
	case bool:
		return CodeBool
	case uint8:
		return CodeUbyte
	case uint16:
		return CodeUshort
	case uint32:
		return CodeUint
	case uint64, uint:
		return CodeUlong
	case int8:
		return CodeByte
	case int16:
		return CodeShort
	case int32:
		return CodeInt
	case int64, int:
		return CodeLong
	case float32:
		return CodeFloat
	case float64:
		return CodeDouble
	case Char:
		return CodeChar
	case Decimal32:
		return CodeDecimal32
	case Decimal64:
		return CodeDecimal64
	case Decimal128:
		return CodeDecimal128
	case time.Time:
		return CodeTimestamp
	case UUID:
		return CodeUUID
	case []byte:
		return CodeVbin8
	case string:
		return CodeStr8
	case Symbol:
		return CodeSym8
	case []any:
		return CodeList32
	case Map, map[string]any, map[Symbol]any:
		return CodeMap32
	case Array, []Symbol:
		return CodeArray32
	}
	return 0
}

// varLen returns the length of a variable-width value, else 0.
func varLen(v any) int {
	switch v := v.(type) {
	case []byte:
		return len(v)
	case string:
		return len(v)
	case Symbol:
		return len(v)
	}
	return 0
}

// elemBody appends x, an array element of the type of code, without its
// constructor. depth counts the array holding x.
func (e *encoder) elemBody(code byte, x any, depth int) {
	w := e.w
	switch code {
	case CodeNull:
	case CodeVbin8, CodeStr8, CodeSym8:
		w.B = appendVar(append(w.B, byte(varLen(x))), x)
	case CodeVbin32, CodeStr32, CodeSym32:
		w.B = appendVar(binary.BigEndian.AppendUint32(w.B, uint32(varLen(x))), x)
	case CodeBool:
		b := byte(0)
		if x.(bool) {
			b = 1
		}
		w.B = append(w.B, b)
	case CodeList32, CodeMap32:
		pos := len(w.B)
		w.B = append(w.B, 0, 0, 0, 0, 0, 0, 0, 0)
		n := 0
		if depth >= MaxDepth {
			e.fail(fmt.Errorf("%w: encoding %T", ErrTooDeep, x))
		} else if l, ok := x.([]any); ok {
			e.listBody(l, depth+1)
			n = len(l)
		} else {
			n = e.mapBody(x, depth+1)
		}
		binary.BigEndian.PutUint32(w.B[pos:], uint32(len(w.B)-pos-4))
		binary.BigEndian.PutUint32(w.B[pos+4:], uint32(n))
	case CodeArray32:
		a, ok := x.(Array)
		if s, isSyms := x.([]Symbol); isSyms {
			a = make(Array, len(s))
			for i, v := range s {
				a[i] = v
			}
			ok = true
		}
		if !ok || depth >= MaxDepth {
			e.fail(fmt.Errorf("%w: encoding array", ErrTooDeep))
			a = nil
		}
		e.arrayBody(a, depth+1)
	default:
		// Fixed width: write it with its constructor, then drop that.
		start := len(w.B)
		e.fixed(code, x)
		w.B = append(w.B[:start], w.B[start+1:]...)
	}
}

func appendVar(b []byte, x any) []byte {
	switch x := x.(type) {
	case []byte:
		return append(b, x...)
	case string:
		return append(b, x...)
	case Symbol:
		return append(b, x...)
	}
	return b
}

// fixed appends x with the fixed-width constructor code (never a compact one).
func (e *encoder) fixed(code byte, x any) {
	w := e.w
	b := append(w.B, code)
	switch x := x.(type) {
	case uint8:
		b = append(b, x)
	case uint16:
		b = binary.BigEndian.AppendUint16(b, x)
	case uint32:
		b = binary.BigEndian.AppendUint32(b, x)
	case uint64:
		b = binary.BigEndian.AppendUint64(b, x)
	case uint:
		b = binary.BigEndian.AppendUint64(b, uint64(x))
	case int8:
		b = append(b, byte(x))
	case int16:
		b = binary.BigEndian.AppendUint16(b, uint16(x))
	case int32:
		b = binary.BigEndian.AppendUint32(b, uint32(x))
	case int64:
		b = binary.BigEndian.AppendUint64(b, uint64(x))
	case int:
		b = binary.BigEndian.AppendUint64(b, uint64(x))
	case float32:
		b = binary.BigEndian.AppendUint32(b, math.Float32bits(x))
	case float64:
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(x))
	case Char:
		b = binary.BigEndian.AppendUint32(b, uint32(x))
	case Decimal32:
		b = append(b, x[:]...)
	case Decimal64:
		b = append(b, x[:]...)
	case Decimal128:
		b = append(b, x[:]...)
	case time.Time:
		b = binary.BigEndian.AppendUint64(b, uint64(x.UnixMilli()))
	case UUID:
		b = append(b, x[:]...)
	}
	w.B = b
}
