package encoding

import (
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// ReadValue reads one value of any type and returns it as the Go type listed
// in the package documentation.
func (r *Reader) ReadValue() (any, error) {
	c, err := r.code("value")
	if err != nil {
		return nil, err
	}
	return r.body(c)
}

// body decodes the data that follows format code c.
func (r *Reader) body(c byte) (any, error) {
	switch c {
	case CodeDescribed:
		return r.described()
	case CodeNull:
		return nil, nil
	case CodeTrue:
		return true, nil
	case CodeFalse:
		return false, nil
	case CodeBool:
		return r.boolByte()
	case CodeUbyte:
		v, err := r.uintN(1, "ubyte")
		return uint8(v), err
	case CodeUshort:
		v, err := r.uintN(2, "ushort")
		return uint16(v), err
	case CodeUint0:
		return uint32(0), nil
	case CodeSmallUint:
		v, err := r.uintN(1, "uint")
		return uint32(v), err
	case CodeUint:
		v, err := r.uintN(4, "uint")
		return uint32(v), err
	case CodeUlong0:
		return uint64(0), nil
	case CodeSmallUlong:
		return r.uintN(1, "ulong")
	case CodeUlong:
		return r.uintN(8, "ulong")
	case CodeByte:
		v, err := r.uintN(1, "byte")
		return int8(v), err
	case CodeShort:
		v, err := r.uintN(2, "short")
		return int16(v), err
	case CodeSmallInt:
		v, err := r.uintN(1, "int")
		return int32(int8(v)), err
	case CodeInt:
		v, err := r.uintN(4, "int")
		return int32(v), err
	case CodeSmallLong:
		v, err := r.uintN(1, "long")
		return int64(int8(v)), err
	case CodeLong:
		v, err := r.uintN(8, "long")
		return int64(v), err
	case CodeFloat:
		v, err := r.uintN(4, "float")
		return math.Float32frombits(uint32(v)), err
	case CodeDouble:
		v, err := r.uintN(8, "double")
		return math.Float64frombits(v), err
	case CodeChar:
		v, err := r.uintN(4, "char")
		return Char(rune(v)), err
	case CodeTimestamp:
		v, err := r.uintN(8, "timestamp")
		return time.UnixMilli(int64(v)).UTC(), err
	case CodeDecimal32:
		var d Decimal32
		return d, r.fill(d[:], "decimal32")
	case CodeDecimal64:
		var d Decimal64
		return d, r.fill(d[:], "decimal64")
	case CodeDecimal128:
		var d Decimal128
		return d, r.fill(d[:], "decimal128")
	case CodeUUID:
		var u UUID
		return u, r.fill(u[:], "uuid")
	case CodeVbin8, CodeVbin32:
		return r.variable(c, CodeVbin8, "binary")
	case CodeStr8, CodeStr32:
		p, err := r.variable(c, CodeStr8, "string")
		if err != nil {
			return nil, err
		}
		if !utf8.Valid(p) {
			return nil, fmt.Errorf("%w: %q", ErrInvalidUTF8, p)
		}
		return string(p), nil
	case CodeSym8, CodeSym32:
		p, err := r.variable(c, CodeSym8, "symbol")
		return Symbol(p), err
	case CodeList0:
		return []any{}, nil
	case CodeList8, CodeList32:
		return r.listBody(c)
	case CodeMap8, CodeMap32:
		return r.mapBody(c)
	case CodeArray8, CodeArray32:
		return r.arrayBody(c)
	}
	return nil, fmt.Errorf("%w: unknown format code 0x%02x", ErrInvalidType, c)
}

// fill reads len(dst) bytes into dst.
func (r *Reader) fill(dst []byte, what string) error {
	p, err := r.take(len(dst), what)
	copy(dst, p)
	return err
}

// enter goes one level deeper, failing past MaxDepth; leave comes back.
func (r *Reader) enter(what string) error {
	if r.depth >= MaxDepth {
		return fmt.Errorf("%w: %s", ErrTooDeep, what)
	}
	r.depth++
	return nil
}

func (r *Reader) leave() { r.depth-- }

// described decodes a described value after its 0x00.
func (r *Reader) described() (any, error) {
	if err := r.enter("described value"); err != nil {
		return nil, err
	}
	defer r.leave()
	d, err := r.descriptor()
	if err != nil {
		return nil, err
	}
	v, err := r.ReadValue()
	if err != nil {
		return nil, err
	}
	return &Described{Descriptor: d, Value: v}, nil
}

// limit narrows r to its next n bytes (which must remain) and returns the
// bytes after them, to restore with done.
func (r *Reader) limit(n int) (rest []byte) {
	rest = r.b[n:]
	r.b = r.b[:n]
	return rest
}

// done checks that the narrowed input was consumed exactly and restores rest.
func (r *Reader) done(rest []byte, what string) error {
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d bytes left over in %s", ErrInvalidSize, len(r.b), what)
	}
	r.b = rest
	return nil
}

// listBody decodes a list after its constructor.
func (r *Reader) listBody(c byte) ([]any, error) {
	count, size, err := r.compoundHeader(c, "list")
	if err != nil {
		return nil, err
	}
	if err := r.enter("list"); err != nil {
		return nil, err
	}
	defer r.leave()
	rest := r.limit(size)
	l := make([]any, count)
	for i := range l {
		if l[i], err = r.ReadValue(); err != nil {
			return nil, err
		}
	}
	return l, r.done(rest, "list")
}

// mapBody decodes a map after its constructor; an empty map gives nil.
func (r *Reader) mapBody(c byte) (Map, error) {
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
		if m[i].Value, err = r.ReadValue(); err != nil {
			return nil, err
		}
	}
	return m, r.done(rest, "map")
}

// arrayBody decodes an array after its constructor.
func (r *Reader) arrayBody(c byte) (Array, error) {
	count, size, err := r.compoundHeader(c, "array")
	if err != nil {
		return nil, err
	}
	if err := r.enter("array"); err != nil {
		return nil, err
	}
	defer r.leave()
	depth := r.depth
	defer func() { r.depth = depth }()
	rest := r.limit(size)
	if count == 0 && len(r.b) == 0 { // tolerate a missing constructor
		r.b = rest
		return Array{}, nil
	}
	// The element constructor, possibly described (several times).
	var descs []any
	ec, err := r.code("array constructor")
	for err == nil && ec == CodeDescribed {
		if err = r.enter("described array element"); err != nil {
			break
		}
		var d any
		if d, err = r.descriptor(); err == nil {
			descs = append(descs, d)
			ec, err = r.code("array constructor")
		}
	}
	if err != nil {
		return nil, err
	}
	w := minWidth(ec)
	switch {
	case w < 0:
		return nil, fmt.Errorf("%w: unknown array element format code 0x%02x", ErrInvalidType, ec)
	case w == 0:
		// Elements take no bytes: bound their total.
		if count > r.budget {
			return nil, fmt.Errorf("%w: array of %d empty elements", ErrInvalidSize, count)
		}
		r.budget -= count
	case count > len(r.b)/w:
		return nil, fmt.Errorf("%w: array of %d elements in %d bytes", ErrInvalidSize, count, len(r.b))
	}
	a := make(Array, count)
	for i := range a {
		v, err := r.body(ec)
		if err != nil {
			return nil, err
		}
		for j := len(descs) - 1; j >= 0; j-- {
			v = &Described{Descriptor: descs[j], Value: v}
		}
		a[i] = v
	}
	return a, r.done(rest, "array")
}
