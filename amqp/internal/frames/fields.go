package frames

import (
	"fmt"
	"math"
	"time"

	"github.com/junctionmq/junction/amqp/internal/encoding"
)

// fieldReader reads the fields of a composite type one by one. Fields past
// the end of the list read as null; null fields leave the destination
// untouched, so callers set defaults first. The first error sticks and makes
// the remaining reads no-ops.
type fieldReader struct {
	r    encoding.Reader // over the list's elements
	n    int             // fields left in the list
	i    int             // fields read so far
	name string          // the composite type, for errors
	err  error

	// When pooled, strings are cut from one copy of the list's bytes, so a
	// list of many strings costs one allocation.
	pooled bool
	src    []byte
	s      string
}

// readFields reads the list of a composite type whose descriptor has been read.
func readFields(r *encoding.Reader, name string) (fieldReader, error) {
	n, elems, err := r.ReadList()
	if err != nil {
		return fieldReader{}, fmt.Errorf("%s: %w", name, err)
	}
	return fieldReader{r: elems, n: n, name: name}, nil
}

// readComposite reads a described list that must have descriptor code.
func readComposite(r *encoding.Reader, code uint64, name string) (fieldReader, error) {
	got, err := readDescriptor(r)
	if err != nil {
		return fieldReader{}, fmt.Errorf("%s: %w", name, err)
	}
	if got != code {
		return fieldReader{}, fmt.Errorf("%w: descriptor %#x where %s expected", ErrInvalidField, got, name)
	}
	return readFields(r, name)
}

// pool makes the string fields share one copy of the list's bytes.
func (f *fieldReader) pool() {
	f.pooled = true
	f.src = f.r.Bytes()
}

// need fails with ErrMissingField unless the next field holds a value.
func (f *fieldReader) need(field string) {
	if f.err == nil && (f.n == 0 || f.r.PeekNull()) {
		f.err = fmt.Errorf("%w: %s %s", ErrMissingField, f.name, field)
	}
}

// next moves to the next field and reports whether it holds a value to read.
func (f *fieldReader) next() bool {
	f.i++
	if f.err != nil || f.n == 0 {
		return false
	}
	f.n--
	return !f.r.SkipNull()
}

func (f *fieldReader) fail(err error) {
	if f.err == nil && err != nil {
		f.err = fmt.Errorf("%s field %d: %w", f.name, f.i-1, err)
	}
}

// string converts bytes just read from f.r to a string.
func (f *fieldReader) string(p []byte) string {
	if !f.pooled || len(p) == 0 {
		return string(p)
	}
	if f.s == "" {
		f.s = string(f.src)
	}
	end := len(f.src) - f.r.Len()
	return f.s[end-len(p) : end]
}

func (f *fieldReader) str(dst *string) {
	if f.next() {
		p, err := f.r.ReadStringBytes()
		f.fail(err)
		*dst = f.string(p)
	}
}

// strp reads an optional string into *store (a new string when store is nil)
// and points *dst at it.
func (f *fieldReader) strp(dst **string, store *string) {
	if f.next() {
		p, err := f.r.ReadStringBytes()
		f.fail(err)
		if store == nil {
			store = new(string)
		}
		*store = f.string(p)
		*dst = store
	}
}

func (f *fieldReader) sym(dst *encoding.Symbol) {
	if f.next() {
		p, err := f.r.ReadSymbolBytes()
		f.fail(err)
		*dst = encoding.Symbol(f.string(p))
	}
}

func (f *fieldReader) syms(dst *[]encoding.Symbol) {
	if f.next() {
		v, err := f.r.ReadSymbols()
		f.fail(err)
		*dst = v
	}
}

func (f *fieldReader) bin(dst *[]byte) {
	if f.next() {
		v, err := f.r.ReadBinary()
		f.fail(err)
		*dst = v
	}
}

func (f *fieldReader) bool(dst *bool) {
	if f.next() {
		v, err := f.r.ReadBool()
		f.fail(err)
		*dst = v
	}
}

func (f *fieldReader) boolp(dst **bool, store *bool) {
	if f.next() {
		v, err := f.r.ReadBool()
		f.fail(err)
		if store == nil {
			store = new(bool)
		}
		*store = v
		*dst = store
	}
}

func (f *fieldReader) ubyte(dst *uint8) {
	if f.next() {
		v, err := f.r.ReadUbyte()
		f.fail(err)
		*dst = v
	}
}

func (f *fieldReader) ushort(dst *uint16) {
	if f.next() {
		v, err := f.r.ReadUshort()
		f.fail(err)
		*dst = v
	}
}

func (f *fieldReader) ushortp(dst **uint16) {
	if f.next() {
		v, err := f.r.ReadUshort()
		f.fail(err)
		*dst = &v
	}
}

func (f *fieldReader) uint(dst *uint32) {
	if f.next() {
		v, err := f.r.ReadUint()
		f.fail(err)
		*dst = v
	}
}

func (f *fieldReader) uintp(dst **uint32, store *uint32) {
	if f.next() {
		v, err := f.r.ReadUint()
		f.fail(err)
		if store == nil {
			store = new(uint32)
		}
		*store = v
		*dst = store
	}
}

func (f *fieldReader) ulong(dst *uint64) {
	if f.next() {
		v, err := f.r.ReadUlong()
		f.fail(err)
		*dst = v
	}
}

// millis reads a milliseconds field (a uint) as a duration.
func (f *fieldReader) millis(dst *time.Duration) {
	if f.next() {
		v, err := f.r.ReadUint()
		f.fail(err)
		*dst = time.Duration(v) * time.Millisecond
	}
}

func (f *fieldReader) timestamp(dst *time.Time) {
	if f.next() {
		v, err := f.r.ReadTimestamp()
		f.fail(err)
		*dst = v
	}
}

func (f *fieldReader) mapf(dst *encoding.Map) {
	if f.next() {
		v, err := f.r.ReadMap()
		f.fail(err)
		*dst = v
	}
}

// value reads a field of any type; strings are pooled like str's.
func (f *fieldReader) value(dst *any) {
	if !f.next() {
		return
	}
	if c, _ := f.r.PeekCode(); f.pooled && (c == encoding.CodeStr8 || c == encoding.CodeStr32) {
		p, err := f.r.ReadStringBytes()
		f.fail(err)
		*dst = f.string(p)
		return
	}
	v, err := f.r.ReadValue()
	f.fail(err)
	*dst = v
}

// state reads a delivery state field.
func (f *fieldReader) state(dst *DeliveryState) {
	if f.next() {
		v, err := readState(&f.r)
		f.fail(err)
		*dst = v
	}
}

// error reads an error field.
func (f *fieldReader) error(dst **Error) {
	if f.next() {
		v, err := readError(&f.r)
		f.fail(err)
		*dst = v
	}
}

// fieldWriter writes the fields of a composite type, leaving out trailing
// nulls. Optional fields holding their default value are written as null.
type fieldWriter struct {
	w *encoding.Writer
	f encoding.Fields
}

// beginComposite writes a descriptor and starts its field list.
func beginComposite(w *encoding.Writer, code uint64) fieldWriter {
	w.Descriptor(code)
	return fieldWriter{w: w, f: w.BeginFields()}
}

func (e *fieldWriter) end()  { e.w.EndFields(&e.f) }
func (e *fieldWriter) next() { e.w.Field(&e.f) }
func (e *fieldWriter) null() { e.w.Null(); e.next() }

func (e *fieldWriter) strReq(s string) { e.w.String(s); e.next() }

func (e *fieldWriter) str(s string) {
	if s == "" {
		e.null()
		return
	}
	e.strReq(s)
}

func (e *fieldWriter) strp(s *string) {
	if s == nil {
		e.null()
		return
	}
	e.strReq(*s)
}

func (e *fieldWriter) symReq(s encoding.Symbol) { e.w.Symbol(s); e.next() }

func (e *fieldWriter) sym(s encoding.Symbol) {
	if s == "" {
		e.null()
		return
	}
	e.symReq(s)
}

func (e *fieldWriter) syms(s []encoding.Symbol) { e.w.Symbols(s); e.next() }

func (e *fieldWriter) binReq(b []byte) { e.w.Binary(b); e.next() }

func (e *fieldWriter) bin(b []byte) {
	if b == nil {
		e.null()
		return
	}
	e.binReq(b)
}

func (e *fieldWriter) boolReq(v bool) { e.w.Bool(v); e.next() }

func (e *fieldWriter) bool(v bool) {
	if !v {
		e.null()
		return
	}
	e.boolReq(v)
}

func (e *fieldWriter) boolp(v *bool) {
	if v == nil {
		e.null()
		return
	}
	e.boolReq(*v)
}

func (e *fieldWriter) ubyte(v, def uint8) {
	if v == def {
		e.null()
		return
	}
	e.w.Ubyte(v)
	e.next()
}

func (e *fieldWriter) ushort(v, def uint16) {
	if v == def {
		e.null()
		return
	}
	e.w.Ushort(v)
	e.next()
}

func (e *fieldWriter) ushortp(v *uint16) {
	if v == nil {
		e.null()
		return
	}
	e.w.Ushort(*v)
	e.next()
}

func (e *fieldWriter) uintReq(v uint32) { e.w.Uint(v); e.next() }

func (e *fieldWriter) uint(v, def uint32) {
	if v == def {
		e.null()
		return
	}
	e.uintReq(v)
}

func (e *fieldWriter) uintp(v *uint32) {
	if v == nil {
		e.null()
		return
	}
	e.uintReq(*v)
}

func (e *fieldWriter) ulong(v, def uint64) {
	if v == def {
		e.null()
		return
	}
	e.w.Ulong(v)
	e.next()
}

// millis writes a duration as whole milliseconds (rounded up, at most
// 2^32-1), or null when it is 0.
func (e *fieldWriter) millis(d time.Duration) {
	if d <= 0 {
		e.null()
		return
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	e.uintReq(uint32(min(ms, math.MaxUint32)))
}

func (e *fieldWriter) timestamp(t time.Time) {
	if t.IsZero() {
		e.null()
		return
	}
	e.w.Timestamp(t)
	e.next()
}

func (e *fieldWriter) mapf(m encoding.Map) {
	if len(m) == 0 {
		e.null()
		return
	}
	_ = e.w.Map(m) // unencodable values are written as null
	e.next()
}

func (e *fieldWriter) value(v any) {
	_ = e.w.Value(v) // unencodable values are written as null
	e.next()
}

func (e *fieldWriter) state(s DeliveryState) {
	if !appendState(e.w, s) {
		e.w.Null()
	}
	e.next()
}

func (e *fieldWriter) error(err *Error) {
	if err == nil {
		e.null()
		return
	}
	err.encode(e.w)
	e.next()
}
