// Package encoding implements the AMQP 1.0 type system (OASIS AMQP 1.0,
// Part 1): every primitive type in every encoding, lists, maps, arrays and
// described types.
//
// Encoding is append-style: a [Writer] appends to a caller-provided []byte and
// always picks the most compact encoding of a value. Decoding reads from a
// []byte through a [Reader] whose typed readers accept every valid encoding of
// their type (and null), and whose generic [Reader.ReadValue] returns Go values:
//
//	AMQP type        Go type
//	null             nil
//	boolean          bool
//	ubyte..ulong     uint8, uint16, uint32, uint64
//	byte..long       int8, int16, int32, int64
//	float, double    float32, float64
//	decimal32..128   Decimal32, Decimal64, Decimal128 (raw bytes)
//	char             Char
//	timestamp        time.Time (UTC, millisecond precision)
//	uuid             UUID
//	binary           []byte (aliasing the input, never copied)
//	string           string (valid UTF-8)
//	symbol           Symbol
//	list             []any
//	map              Map (ordered; an empty map decodes as a nil Map)
//	array            Array
//	described        *Described
//
// Decoding is hardened against hostile input: every size and count is checked
// against the bytes that remain before anything is allocated, nesting is
// bounded by [MaxDepth], and no input makes it panic. Errors wrap the sentinel
// errors of this package (ErrTruncated, ErrInvalidType, ...), so callers can
// test them with errors.Is.
package encoding
