package encoding

import (
	"errors"
	"fmt"
)

// Symbol is the AMQP symbol type: a name from a constrained (ASCII) domain.
type Symbol string

// UUID is the AMQP uuid type, in network byte order (RFC 4122).
type UUID [16]byte

// String formats u in the canonical 8-4-4-4-12 hexadecimal form.
func (u UUID) String() string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Char is the AMQP char type: a single Unicode code point (UTF-32BE on the wire).
type Char rune

// Decimal32 holds an IEEE 754-2008 decimal32 number as its raw bytes.
type Decimal32 [4]byte

// Decimal64 holds an IEEE 754-2008 decimal64 number as its raw bytes.
type Decimal64 [8]byte

// Decimal128 holds an IEEE 754-2008 decimal128 number as its raw bytes.
type Decimal128 [16]byte

// Described is a described value: a descriptor (uint64 code or Symbol name)
// and the value it describes.
type Described struct {
	Descriptor any // uint64 or Symbol
	Value      any
}

// MapEntry is one key/value pair of a Map.
type MapEntry struct {
	Key, Value any
}

// Map is an AMQP map kept in wire order. Unlike a Go map it allows keys that
// are not hashable (such as []byte) and encodes deterministically.
type Map []MapEntry

// Get returns the value of the first entry whose key equals key (compared
// with ==, so only comparable keys can be found) and whether there was one.
func (m Map) Get(key any) (any, bool) {
	for _, e := range m {
		if comparableEqual(e.Key, key) {
			return e.Value, true
		}
	}
	return nil, false
}

// comparableEqual reports a == b without panicking on uncomparable values.
func comparableEqual(a, b any) bool {
	switch a.(type) {
	case []byte, []any, Map, Array, []Symbol, map[string]any, map[Symbol]any:
		return false
	}
	switch b.(type) {
	case []byte, []any, Map, Array, []Symbol, map[string]any, map[Symbol]any:
		return false
	}
	return a == b
}

// Raw is a value still encoded, constructor included. The writer
// copies it as it is, so a value can be passed on exactly as it arrived
// (see [Reader.ReadMapRaw]); it must hold exactly one valid value.
type Raw []byte

// Array is an AMQP array: a sequence of values of a single type. The writer
// takes the element type from the first element and rejects arrays whose
// elements are not all of that type.
type Array []any

// MaxDepth bounds the nesting of lists, maps, arrays and described values, in
// decoding and in encoding.
const MaxDepth = 32

// Errors returned by this package, wrapped with context.
var (
	// ErrTruncated means the input ended inside a value, or a size or count
	// promises more bytes than remain.
	ErrTruncated = errors.New("amqp: truncated value")
	// ErrInvalidType means a format code is unknown, or is not one that the
	// caller's type accepts.
	ErrInvalidType = errors.New("amqp: invalid type")
	// ErrInvalidSize means a compound or array size disagrees with its content.
	ErrInvalidSize = errors.New("amqp: invalid size or count")
	// ErrTooDeep means nesting exceeds MaxDepth.
	ErrTooDeep = errors.New("amqp: nesting too deep")
	// ErrInvalidUTF8 means a string is not valid UTF-8.
	ErrInvalidUTF8 = errors.New("amqp: string is not valid UTF-8")
	// ErrUnsupported means Writer.Value was given a Go value it cannot encode.
	ErrUnsupported = errors.New("amqp: unsupported Go type")
	// ErrNotHomogeneous means an Array's elements are not all of one type.
	ErrNotHomogeneous = errors.New("amqp: array elements differ in type")
)

// Format codes (Part 1 §1.6).
const (
	CodeDescribed  byte = 0x00
	CodeNull       byte = 0x40
	CodeTrue       byte = 0x41
	CodeFalse      byte = 0x42
	CodeUint0      byte = 0x43
	CodeUlong0     byte = 0x44
	CodeList0      byte = 0x45
	CodeUbyte      byte = 0x50
	CodeByte       byte = 0x51
	CodeSmallUint  byte = 0x52
	CodeSmallUlong byte = 0x53
	CodeSmallInt   byte = 0x54
	CodeSmallLong  byte = 0x55
	CodeBool       byte = 0x56
	CodeUshort     byte = 0x60
	CodeShort      byte = 0x61
	CodeUint       byte = 0x70
	CodeInt        byte = 0x71
	CodeFloat      byte = 0x72
	CodeChar       byte = 0x73
	CodeDecimal32  byte = 0x74
	CodeUlong      byte = 0x80
	CodeLong       byte = 0x81
	CodeDouble     byte = 0x82
	CodeTimestamp  byte = 0x83
	CodeDecimal64  byte = 0x84
	CodeDecimal128 byte = 0x94
	CodeUUID       byte = 0x98
	CodeVbin8      byte = 0xa0
	CodeStr8       byte = 0xa1
	CodeSym8       byte = 0xa3
	CodeVbin32     byte = 0xb0
	CodeStr32      byte = 0xb1
	CodeSym32      byte = 0xb3
	CodeList8      byte = 0xc0
	CodeMap8       byte = 0xc1
	CodeList32     byte = 0xd0
	CodeMap32      byte = 0xd1
	CodeArray8     byte = 0xe0
	CodeArray32    byte = 0xf0
)

// fixedWidth returns the number of data bytes that follow format code c, or
// -1 when c is not a fixed-width code.
func fixedWidth(c byte) int {
	switch c {
	case CodeNull, CodeTrue, CodeFalse, CodeUint0, CodeUlong0, CodeList0:
		return 0
	case CodeUbyte, CodeByte, CodeSmallUint, CodeSmallUlong, CodeSmallInt, CodeSmallLong, CodeBool:
		return 1
	case CodeUshort, CodeShort:
		return 2
	case CodeUint, CodeInt, CodeFloat, CodeChar, CodeDecimal32:
		return 4
	case CodeUlong, CodeLong, CodeDouble, CodeTimestamp, CodeDecimal64:
		return 8
	case CodeDecimal128, CodeUUID:
		return 16
	}
	return -1
}

// minWidth returns the fewest data bytes a value with format code c can
// take, or -1 for an unknown (or described) code.
func minWidth(c byte) int {
	if w := fixedWidth(c); w >= 0 {
		return w
	}
	switch c {
	case CodeVbin8, CodeStr8, CodeSym8:
		return 1
	case CodeVbin32, CodeStr32, CodeSym32:
		return 4
	case CodeList8, CodeMap8, CodeArray8:
		return 2
	case CodeList32, CodeMap32, CodeArray32:
		return 8
	}
	return -1
}

// typeError reports format code c where the named type was expected.
func typeError(want string, c byte) error {
	return fmt.Errorf("%w: format code 0x%02x where %s expected", ErrInvalidType, c, want)
}

// truncated reports that the input ended while reading the named thing.
func truncated(what string) error {
	return fmt.Errorf("%w: reading %s", ErrTruncated, what)
}
