// Package wire reads and writes STOMP 1.0, 1.1 and 1.2 frames.
//
// It keeps go-stomp's [frame.Frame] and [frame.Header] types and replaces
// go-stomp's frame.Reader and frame.Writer, which are unsafe on a server:
// the reader's header lines are unbounded, it allocates whatever
// content-length claims before reading a byte of the body, and it accepts
// undefined escapes; the writer flushes every frame. See STYLE.md §6.
//
// # Frame format
//
// STOMP 1.2 "Augmented BNF":
//
//	frame   = command EOL *( header EOL ) EOL *OCTET NULL *( EOL )
//	EOL     = [CR] LF
//	header  = header-name ":" header-value
//
//	SEND\r\n                     command line
//	destination:/queue/a\n       header lines, split at the first ':'
//	content-length:5\n
//	\n                           blank line ends the headers
//	hello\x00                    body, then NUL
//	\n\n                         optional EOLs: heart-beats
//
// A line ends with LF or CRLF in every version; exactly one CR before the LF
// is removed. An EOL where a command is expected is a heart-beat (STOMP 1.2
// "Heart-beating"): [Reader.Read] consumes one EOL and returns (nil, nil), so
// the caller can count the activity. The EOLs that may follow a frame's NUL
// therefore come out as heart-beats on the following calls.
//
// The body is the content-length header's number of bytes followed by a NUL
// (the body may then contain NULs), or, without content-length, every byte
// up to the first NUL (STOMP 1.2 "Header content-length"). When a header is
// repeated, every entry is kept in order and the first one wins (STOMP 1.2
// "Repeated Header Entries"); that is also what [frame.Header.Get] does.
//
// The accepted commands are the client frames CONNECT, STOMP, SEND,
// SUBSCRIBE, UNSUBSCRIBE, ACK, NACK, BEGIN, COMMIT, ABORT and DISCONNECT,
// and the server frames CONNECTED, MESSAGE, RECEIPT and ERROR, so that test
// clients can use the reader too. Anything else is [ErrInvalidCommand].
//
// # Limits
//
// Every quantity a peer can inflate is bounded by [Limits] before memory is
// committed to it:
//
//   - a command or header line, EOL included, is at most MaxHeaderLength
//     bytes (default [DefaultMaxHeaderLength]); lines are read with
//     bufio.Reader.ReadSlice, never ReadBytes ([ErrHeaderTooLong]);
//   - a frame has at most MaxHeaders header lines (default
//     [DefaultMaxHeaders]; [ErrTooManyHeaders]);
//   - a frame is at most MaxFrameSize bytes (default [DefaultMaxFrameSize];
//     [ErrFrameTooLarge]). The size counts the command line, the header
//     lines and the blank line with their EOLs, and the body; not the NUL
//     and not heart-beats. A content-length larger than what is left of the
//     budget is rejected before anything is allocated for it, and a body
//     without content-length is read in buffer-sized chunks, checking the
//     budget after each.
//
// Even an accepted content-length is not allocated in advance of the data:
// a body over 64 KiB grows, by doubling, as its bytes arrive, so a peer that
// announces a large body and stops sending costs at most 64 KiB. The final
// body always has exactly content-length bytes.
//
// # Escaping
//
// Header names and values are escaped (STOMP 1.2 "Value Encoding"):
//
//	version  escapes decoded / encoded
//	1.0      none
//	1.1      \n (LF)  \c (:)  \\ (\)
//	1.2      \n (LF)  \c (:)  \\ (\)  \r (CR)
//
// In 1.1 and 1.2 any other backslash sequence, and a backslash that ends a
// name or value, is a fatal protocol error ([ErrInvalidEscape]); 1.1 treats
// \r as undefined. CONNECT and CONNECTED frames are never escaped or
// unescaped, whatever the version ("CONNECT and CONNECTED frames do not
// escape ... in order to remain backward compatible with STOMP 1.0
// clients"). The STOMP frame is escaped like any other frame: the spec
// exempts only CONNECT and CONNECTED, and clients such as stomp.py escape
// the STOMP frame's headers.
//
// The version is not known until CONNECT has been answered. A [Reader]
// therefore starts with 1.2 rules, the strictest set that accepts every
// correctly escaped 1.1 frame too, and the server calls [Reader.SetVersion]
// once it has negotiated. A frame from a 1.0 client that contains a
// backslash may be rejected before that, but a 1.0 client's first frame is
// CONNECT, which is never unescaped.
//
// [Encode] writes no escape sequence the peer's version does not define.
// Where a version has no way to represent a byte (a LF in a 1.0, CONNECT or
// CONNECTED header; a CR at the end of a 1.0 or 1.1 value) the output is
// still exactly one well-formed frame: an unrepresentable LF is written as a
// space, so header values from one client can never inject lines into
// another client's stream.
//
// # Ownership
//
// A frame returned by [Reader.Read] is new and owned by the caller: its
// strings and its Body do not alias the Reader's buffers, and the Reader
// never touches them again. An empty body is nil. All the names and values
// of one frame share one backing string, so keeping any of them keeps that
// frame's header block (a few hundred bytes, typically) alive.
//
// [Encode] only reads the frame, and returns buf extended; the caller owns
// the result, which may share buf's backing array.
package wire
