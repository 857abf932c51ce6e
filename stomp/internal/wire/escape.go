package wire

import (
	"bytes"

	"github.com/go-stomp/stomp/v3/frame"
)

// Version is a STOMP protocol version. It selects the header escaping rules
// for [Reader.SetVersion] and [Encode]; see the package doc. A value other
// than V10 and V11, including the zero value, means V12.
type Version int

// The STOMP versions.
const (
	V10 Version = 10 // STOMP 1.0: no escaping
	V11 Version = 11 // STOMP 1.1: \n \c \\
	V12 Version = 12 // STOMP 1.2: \n \c \\ \r
)

// String returns the version as it appears in the version header: "1.0",
// "1.1" or "1.2".
func (v Version) String() string {
	switch v {
	case V10:
		return "1.0"
	case V11:
		return "1.1"
	}
	return "1.2"
}

// escapeVersion returns the escaping rules that apply to the headers of a
// frame with the given command when v has been negotiated.
func escapeVersion(command string, v Version) Version {
	// STOMP 1.2 "Value Encoding": "CONNECT and CONNECTED frames do not
	// escape the carriage return, line feed or colon octets in order to
	// remain backward compatible with STOMP 1.0 clients."
	if command == frame.CONNECT || command == frame.CONNECTED {
		return V10
	}
	switch v {
	case V10, V11:
		return v
	}
	return V12
}

// appendUnescaped appends the decoding of src under the rules of v to dst.
// If src contains an undefined or truncated escape sequence, it returns
// that sequence as bad, and dst holds a prefix of the decoding.
func appendUnescaped(dst, src []byte, v Version) (out []byte, bad string) {
	if v == V10 {
		return append(dst, src...), ""
	}
	for {
		i := bytes.IndexByte(src, '\\')
		if i < 0 {
			return append(dst, src...), ""
		}
		dst = append(dst, src[:i]...)
		if i+1 == len(src) {
			// STOMP 1.2 "Value Encoding": a trailing lone backslash is
			// an incomplete, hence undefined, escape sequence.
			return dst, `\`
		}
		var c byte
		switch src[i+1] {
		case 'n':
			c = '\n'
		case 'c':
			c = ':'
		case '\\':
			c = '\\'
		case 'r':
			if v != V12 {
				return dst, `\r` // STOMP 1.1 defines only \n, \c and \\.
			}
			c = '\r'
		default:
			// STOMP 1.2 "Value Encoding": "Undefined escape sequences
			// such as \t (octet 92 and 116) MUST be treated as a fatal
			// protocol error."
			return dst, string(src[i : i+2])
		}
		dst = append(dst, c)
		src = src[i+2:]
	}
}

// appendEscaped appends s, encoded under the rules of v, to buf.
// Under V10 rules a LF, which cannot be represented, is written as a space.
func appendEscaped(buf []byte, s string, v Version) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		var esc byte
		switch s[i] {
		case '\\':
			esc = '\\'
		case '\n':
			esc = 'n'
		case ':':
			esc = 'c'
		case '\r':
			esc = 'r'
		default:
			continue
		}
		switch {
		case v == V12:
		case v == V11 && esc != 'r':
		case s[i] == '\n':
			// No escaping (V10, CONNECT, CONNECTED): a raw LF would end
			// the header line and let the value inject lines.
			buf = append(buf, s[start:i]...)
			buf = append(buf, ' ')
			start = i + 1
			continue
		default:
			continue // written as is
		}
		buf = append(buf, s[start:i]...)
		buf = append(buf, '\\', esc)
		start = i + 1
	}
	return append(buf, s[start:]...)
}
