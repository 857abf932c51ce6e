package encoding

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// Reader decodes AMQP values from a byte slice. Its typed readers accept
// every valid encoding of their type and also null, for which they return
// the zero value (use PeekNull or SkipNull where null must be told apart).
// Unsigned readers also accept the narrower unsigned types, and signed
// readers the narrower signed types. Values that come back as []byte alias
// the input: they are sub-slices (with capped capacity), not copies.
//
// After an error the position of the Reader is unspecified.
type Reader struct {
	b      []byte
	depth  int
	budget int // array elements of zero width still allowed
}

// MaxEmptyElements bounds the total number of array elements of zero width
// (arrays whose element constructor is null, true, false, uint0, ulong0 or
// list0) that one Reader decodes. Such elements take no input bytes, so
// without a bound a few bytes could make the decoder allocate gigabytes.
const MaxEmptyElements = 4096

// NewReader returns a Reader over b.
func NewReader(b []byte) *Reader {
	r := new(Reader)
	r.Reset(b)
	return r
}

// Reset makes r read b from the start.
func (r *Reader) Reset(b []byte) { *r = Reader{b: b, budget: MaxEmptyElements} }

// Len returns the number of unread bytes.
func (r *Reader) Len() int { return len(r.b) }

// Bytes returns the unread bytes (aliasing the input).
func (r *Reader) Bytes() []byte { return r.b }

// PeekCode returns the format code of the next value without consuming it;
// ok is false at the end of the input.
func (r *Reader) PeekCode() (code byte, ok bool) {
	if len(r.b) == 0 {
		return 0, false
	}
	return r.b[0], true
}

// PeekNull reports whether the next value is a null.
func (r *Reader) PeekNull() bool { return len(r.b) > 0 && r.b[0] == CodeNull }

// SkipNull consumes the next value if it is a null, and reports whether it did.
func (r *Reader) SkipNull() bool {
	if r.PeekNull() {
		r.b = r.b[1:]
		return true
	}
	return false
}

// code consumes a format code.
func (r *Reader) code(what string) (byte, error) {
	if len(r.b) == 0 {
		return 0, truncated(what)
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c, nil
}

// take consumes n bytes, returning them with capacity n.
func (r *Reader) take(n int, what string) ([]byte, error) {
	if n < 0 || n > len(r.b) {
		return nil, truncated(what)
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p, nil
}

// uintN consumes an n-byte (1, 2, 4 or 8) big-endian unsigned integer.
func (r *Reader) uintN(n int, what string) (uint64, error) {
	if len(r.b) < n {
		return 0, truncated(what)
	}
	var v uint64
	switch n {
	case 1:
		v = uint64(r.b[0])
	case 2:
		v = uint64(binary.BigEndian.Uint16(r.b))
	case 4:
		v = uint64(binary.BigEndian.Uint32(r.b))
	default:
		v = binary.BigEndian.Uint64(r.b)
	}
	r.b = r.b[n:]
	return v, nil
}

// unsigned reads an unsigned integer of a type no wider than maxWidth bytes,
// in any encoding of that type.
func (r *Reader) unsigned(what string, maxWidth int) (uint64, error) {
	c, err := r.code(what)
	if err != nil {
		return 0, err
	}
	typeWidth, n := 0, 0 // width of the AMQP type, bytes of data
	switch c {
	case CodeNull:
		return 0, nil
	case CodeUbyte:
		typeWidth, n = 1, 1
	case CodeUshort:
		typeWidth, n = 2, 2
	case CodeUint0:
		typeWidth, n = 4, 0
	case CodeSmallUint:
		typeWidth, n = 4, 1
	case CodeUint:
		typeWidth, n = 4, 4
	case CodeUlong0:
		typeWidth, n = 8, 0
	case CodeSmallUlong:
		typeWidth, n = 8, 1
	case CodeUlong:
		typeWidth, n = 8, 8
	}
	if typeWidth == 0 || typeWidth > maxWidth {
		return 0, typeError(what, c)
	}
	if n == 0 {
		return 0, nil
	}
	return r.uintN(n, what)
}

// signed reads any signed integer encoding no wider than maxWidth bytes.
func (r *Reader) signed(what string, maxWidth int) (int64, error) {
	c, err := r.code(what)
	if err != nil {
		return 0, err
	}
	n := 0
	switch c {
	case CodeNull:
		return 0, nil
	case CodeByte, CodeSmallInt, CodeSmallLong:
		n = 1
	case CodeShort:
		n = 2
	case CodeInt:
		n = 4
	case CodeLong:
		n = 8
	}
	typeWidth := n
	if c == CodeSmallInt {
		typeWidth = 4
	} else if c == CodeSmallLong {
		typeWidth = 8
	}
	if n == 0 || typeWidth > maxWidth {
		return 0, typeError(what, c)
	}
	v, err := r.uintN(n, what)
	switch n {
	case 1:
		return int64(int8(v)), err
	case 2:
		return int64(int16(v)), err
	case 4:
		return int64(int32(v)), err
	}
	return int64(v), err
}

// ReadBool reads a boolean (false for null).
func (r *Reader) ReadBool() (bool, error) {
	c, err := r.code("boolean")
	if err != nil {
		return false, err
	}
	switch c {
	case CodeNull, CodeFalse:
		return false, nil
	case CodeTrue:
		return true, nil
	case CodeBool:
		return r.boolByte()
	}
	return false, typeError("boolean", c)
}

func (r *Reader) boolByte() (bool, error) {
	v, err := r.uintN(1, "boolean")
	if err != nil {
		return false, err
	}
	if v > 1 {
		return false, fmt.Errorf("%w: boolean byte 0x%02x", ErrInvalidType, v)
	}
	return v == 1, nil
}

// ReadUbyte reads a ubyte.
func (r *Reader) ReadUbyte() (uint8, error) {
	v, err := r.unsigned("ubyte", 1)
	return uint8(v), err
}

// ReadUshort reads a ushort (or a ubyte).
func (r *Reader) ReadUshort() (uint16, error) {
	v, err := r.unsigned("ushort", 2)
	return uint16(v), err
}

// ReadUint reads a uint in any of its encodings (or a ubyte or ushort).
func (r *Reader) ReadUint() (uint32, error) {
	v, err := r.unsigned("uint", 4)
	return uint32(v), err
}

// ReadUlong reads a ulong in any of its encodings (or a narrower unsigned type).
func (r *Reader) ReadUlong() (uint64, error) {
	return r.unsigned("ulong", 8)
}

// ReadInt reads an int in any of its encodings (or a byte or short).
func (r *Reader) ReadInt() (int32, error) {
	v, err := r.signed("int", 4)
	return int32(v), err
}

// ReadLong reads a long in any of its encodings (or a narrower signed type).
func (r *Reader) ReadLong() (int64, error) {
	return r.signed("long", 8)
}

// ReadTimestamp reads a timestamp as a UTC time; null gives the zero time.
func (r *Reader) ReadTimestamp() (time.Time, error) {
	c, err := r.code("timestamp")
	if err != nil {
		return time.Time{}, err
	}
	switch c {
	case CodeNull:
		return time.Time{}, nil
	case CodeTimestamp:
		v, err := r.uintN(8, "timestamp")
		return time.UnixMilli(int64(v)).UTC(), err
	}
	return time.Time{}, typeError("timestamp", c)
}

// variable reads the size of a variable-width value with code c (whose
// one-byte-size form is code8) and returns its bytes.
func (r *Reader) variable(c, code8 byte, what string) ([]byte, error) {
	var n uint64
	var err error
	switch c {
	case code8:
		n, err = r.uintN(1, what)
	case code8 + 0x10:
		n, err = r.uintN(4, what)
	default:
		return nil, typeError(what, c)
	}
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) {
		return nil, fmt.Errorf("%w: %s of %d bytes, %d left", ErrTruncated, what, n, len(r.b))
	}
	return r.take(int(n), what)
}

// ReadBinary reads binary data (nil for null). The result aliases the input.
func (r *Reader) ReadBinary() ([]byte, error) {
	c, err := r.code("binary")
	if err != nil || c == CodeNull {
		return nil, err
	}
	return r.variable(c, CodeVbin8, "binary")
}

// ReadStringBytes reads a string ("" for null) and returns its UTF-8 bytes,
// aliasing the input, without converting them to a Go string.
func (r *Reader) ReadStringBytes() ([]byte, error) {
	c, err := r.code("string")
	if err != nil || c == CodeNull {
		return nil, err
	}
	p, err := r.variable(c, CodeStr8, "string")
	if err == nil && !utf8.Valid(p) {
		err = fmt.Errorf("%w: %q", ErrInvalidUTF8, p)
	}
	return p, err
}

// ReadString reads a string ("" for null), which must be valid UTF-8.
func (r *Reader) ReadString() (string, error) {
	p, err := r.ReadStringBytes()
	if err != nil {
		return "", err
	}
	return string(p), nil
}

// ReadSymbolBytes reads a symbol (nil for null) and returns its bytes,
// aliasing the input.
func (r *Reader) ReadSymbolBytes() ([]byte, error) {
	c, err := r.code("symbol")
	if err != nil || c == CodeNull {
		return nil, err
	}
	return r.variable(c, CodeSym8, "symbol")
}

// ReadSymbol reads a symbol ("" for null).
func (r *Reader) ReadSymbol() (Symbol, error) {
	p, err := r.ReadSymbolBytes()
	return Symbol(p), err
}

// ReadSymbols reads a field of type "symbol, multiple": null (nil), a single
// symbol, or an array of symbols. An empty array also gives nil.
func (r *Reader) ReadSymbols() ([]Symbol, error) {
	c, ok := r.PeekCode()
	if !ok {
		return nil, truncated("symbols")
	}
	switch c {
	case CodeNull:
		r.b = r.b[1:]
		return nil, nil
	case CodeSym8, CodeSym32:
		s, err := r.ReadSymbol()
		if err != nil {
			return nil, err
		}
		return []Symbol{s}, nil
	case CodeArray8, CodeArray32:
	default:
		return nil, typeError("symbols", c)
	}
	r.b = r.b[1:]
	count, size, err := r.compoundHeader(c, "symbol array")
	if err != nil {
		return nil, err
	}
	body := r.b[:size]
	r.b = r.b[size:]
	if count == 0 {
		return nil, nil
	}
	if len(body) == 0 {
		return nil, truncated("symbol array constructor")
	}
	ec := body[0]
	sub := Reader{b: body[1:]}
	width := minWidth(ec)
	if ec != CodeSym8 && ec != CodeSym32 {
		return nil, typeError("symbol array element", ec)
	}
	if count > len(sub.b)/width {
		return nil, fmt.Errorf("%w: %d symbols in %d bytes", ErrInvalidSize, count, len(sub.b))
	}
	out := make([]Symbol, count)
	for i := range out {
		p, err := sub.variable(ec, CodeSym8, "symbol")
		if err != nil {
			return nil, err
		}
		out[i] = Symbol(p)
	}
	if len(sub.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last symbol of an array", ErrInvalidSize, len(sub.b))
	}
	return out, nil
}

// compoundHeader reads the size and count that follow a list, map or array
// constructor c, and checks the size against the remaining input and (for
// lists and maps, whose elements take at least a byte each) the count
// against the size. It returns the count and the number of bytes that follow
// the count field.
func (r *Reader) compoundHeader(c byte, what string) (count, size int, err error) {
	var sz, n uint64
	var width int
	switch c {
	case CodeList0:
		return 0, 0, nil
	case CodeList8, CodeMap8, CodeArray8:
		width = 1
	case CodeList32, CodeMap32, CodeArray32:
		width = 4
	default:
		return 0, 0, typeError(what, c)
	}
	if sz, err = r.uintN(width, what); err != nil {
		return 0, 0, err
	}
	if sz < uint64(width) {
		return 0, 0, fmt.Errorf("%w: %s size %d cannot hold its count", ErrInvalidSize, what, sz)
	}
	if sz > uint64(len(r.b)) {
		return 0, 0, fmt.Errorf("%w: %s of %d bytes, %d left", ErrTruncated, what, sz, len(r.b))
	}
	n, _ = r.uintN(width, what)
	size = int(sz) - width
	if c != CodeArray8 && c != CodeArray32 && n > uint64(size) {
		return 0, 0, fmt.Errorf("%w: %s of %d elements in %d bytes", ErrInvalidSize, what, n, size)
	}
	if n > math.MaxInt32 {
		return 0, 0, fmt.Errorf("%w: %s of %d elements", ErrInvalidSize, what, n)
	}
	return int(n), size, nil
}

// ReadListHeader reads the constructor, size and count of a list (a null
// reads as an empty list) and returns the count, leaving r at the first
// element. Typed decoders read the elements one by one; fewer elements than
// a composite type defines means the rest are null.
func (r *Reader) ReadListHeader() (count int, err error) {
	c, err := r.code("list")
	if err != nil || c == CodeNull {
		return 0, err
	}
	if c != CodeList0 && c != CodeList8 && c != CodeList32 {
		return 0, typeError("list", c)
	}
	count, _, err = r.compoundHeader(c, "list")
	return count, err
}

// ReadList reads the header of a list (a null reads as an empty list) and
// returns its count and a Reader over exactly its elements; r moves past the
// whole list. Use it to decode composite types field by field.
func (r *Reader) ReadList() (count int, elems Reader, err error) {
	c, err := r.code("list")
	if err != nil || c == CodeNull {
		return 0, Reader{}, err
	}
	if c != CodeList0 && c != CodeList8 && c != CodeList32 {
		return 0, Reader{}, typeError("list", c)
	}
	count, size, err := r.compoundHeader(c, "list")
	if err != nil {
		return 0, Reader{}, err
	}
	if r.depth >= MaxDepth {
		return 0, Reader{}, fmt.Errorf("%w: list", ErrTooDeep)
	}
	elems = Reader{b: r.b[:size:size], depth: r.depth + 1, budget: r.budget}
	r.b = r.b[size:]
	return count, elems, nil
}

// ReadMap reads a map (nil for null or an empty map).
func (r *Reader) ReadMap() (Map, error) {
	c, err := r.code("map")
	if err != nil || c == CodeNull {
		return nil, err
	}
	if c != CodeMap8 && c != CodeMap32 {
		return nil, typeError("map", c)
	}
	return r.mapBody(c)
}

// ReadMapRaw reads a map like ReadMap but leaves each value encoded: an
// entry's Value is a Raw aliasing the input, checked for its sizes (as
// Skip checks) but not decoded. Keys are decoded.
func (r *Reader) ReadMapRaw() (Map, error) {
	c, err := r.code("map")
	if err != nil || c == CodeNull {
		return nil, err
	}
	if c != CodeMap8 && c != CodeMap32 {
		return nil, typeError("map", c)
	}
	count, size, err := r.compoundHeader(c, "map")
	if err != nil {
		return nil, err
	}
	if count%2 != 0 {
		return nil, fmt.Errorf("%w: map with an odd count %d", ErrInvalidSize, count)
	}
	if err := r.enter("map"); err != nil {
		return nil, err
	}
	defer r.leave()
	rest := r.limit(size)
	var m Map
	if count > 0 {
		m = make(Map, count/2)
	}
	for i := range m {
		if m[i].Key, err = r.ReadValue(); err != nil {
			return nil, err
		}
		start := r.b
		if err := r.Skip(); err != nil {
			return nil, err
		}
		n := len(start) - len(r.b)
		m[i].Value = Raw(start[:n:n])
	}
	return m, r.done(rest, "map")
}

// ReadDescriptor reads the 0x00 that starts a described value and its
// descriptor, which it returns as a uint64 or a Symbol. The described value
// follows.
func (r *Reader) ReadDescriptor() (any, error) {
	c, err := r.code("descriptor")
	if err != nil {
		return nil, err
	}
	if c != CodeDescribed {
		return nil, typeError("described value", c)
	}
	return r.descriptor()
}

// descriptor reads a descriptor value: a ulong or a symbol.
func (r *Reader) descriptor() (any, error) {
	c, err := r.code("descriptor")
	if err != nil {
		return nil, err
	}
	switch c {
	case CodeUlong0:
		return uint64(0), nil
	case CodeSmallUlong:
		return r.uintN(1, "descriptor")
	case CodeUlong:
		return r.uintN(8, "descriptor")
	case CodeSym8, CodeSym32:
		p, err := r.variable(c, CodeSym8, "descriptor")
		return Symbol(p), err
	}
	return nil, typeError("descriptor (ulong or symbol)", c)
}

// PeekDescriptor returns the code of the next value's numeric descriptor
// without consuming anything; ok is false when the next value is not a
// described value with a ulong descriptor.
func (r *Reader) PeekDescriptor() (code uint64, ok bool) {
	b := r.b
	if len(b) < 2 || b[0] != CodeDescribed {
		return 0, false
	}
	switch b[1] {
	case CodeUlong0:
		return 0, true
	case CodeSmallUlong:
		if len(b) >= 3 {
			return uint64(b[2]), true
		}
	case CodeUlong:
		if len(b) >= 10 {
			return binary.BigEndian.Uint64(b[2:]), true
		}
	}
	return 0, false
}

// Skip consumes one value without decoding it. It checks the value's sizes
// against the input but not the content of lists, maps and arrays.
func (r *Reader) Skip() error {
	c, err := r.code("value")
	if err != nil {
		return err
	}
	for i := 0; c == CodeDescribed; i++ {
		if i >= MaxDepth {
			return fmt.Errorf("%w: described value", ErrTooDeep)
		}
		if _, err := r.descriptor(); err != nil {
			return err
		}
		if c, err = r.code("described value"); err != nil {
			return err
		}
	}
	if w := fixedWidth(c); w >= 0 {
		_, err := r.take(w, "value")
		return err
	}
	switch c {
	case CodeVbin8, CodeStr8, CodeSym8:
		_, err = r.variable(c, c, "value")
	case CodeVbin32, CodeStr32, CodeSym32:
		_, err = r.variable(c, c-0x10, "value")
	default:
		var size int
		_, size, err = r.compoundHeader(c, "value")
		if err == nil {
			r.b = r.b[size:]
		}
	}
	return err
}
