package wire

import (
	"errors"
	"strconv"
)

// Sentinel errors for malformed or oversized frames. [Reader.Read] returns
// them wrapped in a [*FrameError], so match them with [errors.Is]. Each
// one is a fatal protocol error: the server answers with an ERROR frame
// (the error's text is suitable for its message header) and closes the
// connection (STOMP 1.2 "ERROR").
var (
	// ErrFrameTooLarge means the frame, or the body its content-length
	// announces, exceeds Limits.MaxFrameSize.
	ErrFrameTooLarge = errors.New("stomp: frame too large")
	// ErrTooManyHeaders means the frame has more than Limits.MaxHeaders
	// header lines.
	ErrTooManyHeaders = errors.New("stomp: too many headers")
	// ErrHeaderTooLong means a command or header line, EOL included, is
	// longer than Limits.MaxHeaderLength.
	ErrHeaderTooLong = errors.New("stomp: header line too long")
	// ErrInvalidCommand means the command line is not a STOMP command.
	ErrInvalidCommand = errors.New("stomp: invalid command")
	// ErrInvalidHeader means a header line has no colon or an empty name.
	ErrInvalidHeader = errors.New("stomp: invalid header")
	// ErrInvalidEscape means a header name or value contains a backslash
	// sequence the negotiated version does not define, or ends in a
	// backslash (STOMP 1.2 "Value Encoding").
	ErrInvalidEscape = errors.New("stomp: invalid escape sequence")
	// ErrInvalidContentLength means the content-length header is not a
	// non-negative decimal integer.
	ErrInvalidContentLength = errors.New("stomp: invalid content-length")
	// ErrMissingNul means the content-length bytes of the body are not
	// followed by a NUL.
	ErrMissingNul = errors.New("stomp: frame body not terminated by NUL")
)

// ErrReaderClosed is returned by Read after Reader.Close; it is not a
// protocol error.
var ErrReaderClosed = errors.New("stomp: frame reader closed")

// FrameError describes why a frame was rejected. Err is one of the
// sentinels above. Error() starts with the sentinel's text and adds the
// specifics, e.g. "stomp: frame too large (limit 10485760 bytes)" or
// `stomp: invalid escape sequence "\\t" in header "foo"`. Peer-supplied
// text in the message is quoted and truncated to 64 bytes.
type FrameError struct {
	// Err is the sentinel: ErrFrameTooLarge, ErrInvalidEscape, ...
	Err error
	// Header is the name of the offending header when one header is at
	// fault (an escape, content-length): unescaped, or as received if the
	// name itself holds the bad escape. "" otherwise.
	Header string
	// Limit is the limit that was exceeded, for ErrFrameTooLarge,
	// ErrTooManyHeaders and ErrHeaderTooLong; zero otherwise.
	Limit int

	msg string
}

// Error returns the sentinel's text followed by the specifics.
func (e *FrameError) Error() string {
	if e.msg == "" {
		return e.Err.Error()
	}
	return e.msg
}

// Unwrap returns Err, so that errors.Is(err, ErrFrameTooLarge) works.
func (e *FrameError) Unwrap() error { return e.Err }

// maxQuoted bounds how much peer-supplied text goes into an error message.
const maxQuoted = 64

// quote quotes peer-supplied text for an error message, truncated.
func quote[T string | []byte](b T) string {
	if len(b) > maxQuoted {
		return strconv.Quote(string(b[:maxQuoted])) + "..."
	}
	return strconv.Quote(string(b))
}

// limitError reports that limit was exceeded; what, if not empty, says by
// what ("content-length 500000000").
func limitError(err error, limit int, what string) *FrameError {
	unit := " bytes)"
	if err == ErrTooManyHeaders {
		unit = ")"
	}
	if what != "" {
		what += ", "
	}
	return &FrameError{
		Err:   err,
		Limit: limit,
		msg:   err.Error() + " (" + what + "limit " + strconv.Itoa(limit) + unit,
	}
}

// syntaxError reports malformed input; detail is appended to the
// sentinel's text after a space.
func syntaxError(err error, header, detail string) *FrameError {
	return &FrameError{Err: err, Header: header, msg: err.Error() + " " + detail}
}

// errBodyNotRead: Read was called before the streamed body of the frame
// before it was read to its end (a bug of the caller).
var errBodyNotRead = errors.New("stomp: streamed body not read before the next frame")
