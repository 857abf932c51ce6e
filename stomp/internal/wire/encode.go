package wire

import "github.com/go-stomp/stomp/v3/frame"

// Encode appends the encoding of f for a peer speaking version v to buf and
// returns the extended buffer. It allocates only to grow buf, and does not
// flush or write anything, so a connection's writer can encode several
// frames into one buffer and write them at once.
//
// The output is f.Command and LF, each header as name:value and LF with
// names and values escaped per v (never for CONNECT and CONNECTED; see the
// package doc), a blank line, f.Body, and a NUL. Encode does not check the
// command and does not add content-length: a caller whose body may contain
// a NUL must set content-length itself (STOMP 1.2 "Header content-length"),
// and any content-length it sets must be len(f.Body). A nil f.Header
// encodes no headers.
func Encode(buf []byte, f *frame.Frame, v Version) []byte {
	v = escapeVersion(f.Command, v)
	buf = append(buf, f.Command...)
	buf = append(buf, '\n')
	if h := f.Header; h != nil {
		for i := range h.Len() {
			name, value := h.GetAt(i)
			buf = appendEscaped(buf, name, v)
			buf = append(buf, ':')
			buf = appendEscaped(buf, value, v)
			buf = append(buf, '\n')
		}
	}
	buf = append(buf, '\n')
	buf = append(buf, f.Body...)
	return append(buf, 0)
}

// EncodeHeartBeat appends one heart-beat, a single LF (STOMP 1.2
// "Heart-beating"), to buf and returns the extended buffer.
func EncodeHeartBeat(buf []byte) []byte {
	return append(buf, '\n')
}

// AppendHeader appends one header line, name:value and its LF, escaped
// under the rules of v (for MESSAGE frames built without a frame.Frame),
// and returns the extended buffer.
func AppendHeader(buf []byte, name, value string, v Version) []byte {
	buf = appendEscaped(buf, name, v)
	buf = append(buf, ':')
	buf = appendEscaped(buf, value, v)
	return append(buf, '\n')
}
