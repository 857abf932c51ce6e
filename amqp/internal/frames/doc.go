// Package frames encodes and decodes AMQP 1.0 frames (OASIS AMQP 1.0,
// Part 2 §2.3): the frame header, the performatives of the transport and
// SASL layers, the delivery states and terminus types they carry, the
// transaction types (Part 4), and the sections of a message (Part 3 §3.2).
//
// Decoding accepts every valid encoding of a field, numeric or symbolic
// descriptors, and fewer list fields than a type defines (the rest take
// their defaults); it ignores extra trailing fields. A mandatory field that
// is absent or null is an error wrapping ErrMissingField. Encoding leaves out
// trailing null fields and writes null for fields that hold their default.
//
// Decoded []byte values (delivery tags, transfer payloads, binary message
// sections and fields, binary values inside maps and lists) alias the input
// buffer: copy them before reusing the buffer. Strings are always copies.
package frames
