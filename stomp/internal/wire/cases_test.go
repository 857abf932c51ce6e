package wire

import (
	"io"
	"strings"

	"github.com/go-stomp/stomp/v3/frame"
)

// wireCase is one entry of the shared table of raw-bytes cases
// (STYLE.md §4.16). TestRead walks every case, TestRoundTrip every case
// without noRoundTrip, and TestFuzzSeeds turns the small ones into the
// seed corpus of FuzzReader and FuzzDifferential.
type wireCase struct {
	id  string
	raw string
	v   Version // passed to SetVersion; 0 leaves the default (V12 rules)
	lim Limits  // zero fields mean the defaults
	// want is what successive Reads return before the final error; a nil
	// entry is a heart-beat.
	want []*frame.Frame
	// err is the final error: io.EOF, io.ErrUnexpectedEOF or a sentinel.
	err error
	// noRoundTrip says why Encode cannot reproduce want, if it cannot.
	noRoundTrip string
}

// fr builds an expected frame; an empty body is nil, as Read returns it.
func fr(cmd, body string, headers ...string) *frame.Frame {
	f := frame.New(cmd, headers...)
	if body != "" {
		f.Body = []byte(body)
	}
	return f
}

// hb is an expected heart-beat.
var hb *frame.Frame

var cases = []wireCase{
	// Framing (STOMP 1.2 "Augmented BNF").
	{id: "send-lf", raw: "SEND\ndestination:/q\n\nhello\x00",
		want: []*frame.Frame{fr("SEND", "hello", "destination", "/q")}, err: io.EOF},
	{id: "send-crlf", raw: "SEND\r\ndestination:/q\r\n\r\nhello\x00",
		want: []*frame.Frame{fr("SEND", "hello", "destination", "/q")}, err: io.EOF},
	{id: "empty-stream", raw: "", err: io.EOF},
	{id: "no-headers-no-body", raw: "DISCONNECT\n\n\x00",
		want: []*frame.Frame{fr("DISCONNECT", "")}, err: io.EOF},
	{id: "heart-beats-only", raw: "\n\r\n\n",
		want: []*frame.Frame{hb, hb, hb}, err: io.EOF},
	{id: "heart-beats-between-frames", raw: "\n\r\nSEND\n\n\x00\n\nSEND\n\nb\x00\r\n",
		want: []*frame.Frame{hb, hb, fr("SEND", ""), hb, hb, fr("SEND", "b"), hb}, err: io.EOF},
	{id: "frames-back-to-back", raw: "BEGIN\ntransaction:t\n\n\x00COMMIT\ntransaction:t\n\n\x00",
		want: []*frame.Frame{fr("BEGIN", "", "transaction", "t"), fr("COMMIT", "", "transaction", "t")}, err: io.EOF},
	{id: "all-commands", raw: "CONNECT\n\n\x00STOMP\n\n\x00CONNECTED\n\n\x00SEND\n\n\x00SUBSCRIBE\n\n\x00" +
		"UNSUBSCRIBE\n\n\x00ACK\n\n\x00NACK\n\n\x00BEGIN\n\n\x00COMMIT\n\n\x00ABORT\n\n\x00DISCONNECT\n\n\x00" +
		"MESSAGE\n\n\x00RECEIPT\n\n\x00ERROR\n\n\x00",
		want: []*frame.Frame{fr("CONNECT", ""), fr("STOMP", ""), fr("CONNECTED", ""), fr("SEND", ""),
			fr("SUBSCRIBE", ""), fr("UNSUBSCRIBE", ""), fr("ACK", ""), fr("NACK", ""), fr("BEGIN", ""),
			fr("COMMIT", ""), fr("ABORT", ""), fr("DISCONNECT", ""), fr("MESSAGE", ""), fr("RECEIPT", ""),
			fr("ERROR", "")}, err: io.EOF},
	{id: "subscribe", raw: "SUBSCRIBE\nid:0\ndestination:/queue/foo\nack:client\n\n\x00",
		want: []*frame.Frame{fr("SUBSCRIBE", "", "id", "0", "destination", "/queue/foo", "ack", "client")}, err: io.EOF},
	{id: "message", raw: "MESSAGE\nsubscription:0\nmessage-id:007\ndestination:/queue/a\ncontent-type:text/plain\n\nhello queue a\x00\n",
		want: []*frame.Frame{fr("MESSAGE", "hello queue a", "subscription", "0", "message-id", "007",
			"destination", "/queue/a", "content-type", "text/plain"), hb}, err: io.EOF},
	{id: "cr-inside-value", raw: "SEND\nfoo:a\rb\n\n\x00",
		want: []*frame.Frame{fr("SEND", "", "foo", "a\rb")}, err: io.EOF},
	{id: "cr-crlf-value", raw: "SEND\nfoo:a\r\r\n\n\x00",
		want: []*frame.Frame{fr("SEND", "", "foo", "a\r")}, err: io.EOF},
	{id: "colons-in-value", raw: "SEND\ndestination:/q:a:b\n\n\x00",
		want: []*frame.Frame{fr("SEND", "", "destination", "/q:a:b")}, err: io.EOF},
	{id: "empty-value", raw: "SEND\nfoo:\n\n\x00",
		want: []*frame.Frame{fr("SEND", "", "foo", "")}, err: io.EOF},
	{id: "nul-in-header", raw: "SEND\nfoo:a\x00b\n\n\x00",
		want: []*frame.Frame{fr("SEND", "", "foo", "a\x00b")}, err: io.EOF},
	{id: "space-around-colon-kept", raw: "SEND\nfoo : bar \n\n\x00",
		want: []*frame.Frame{fr("SEND", "", "foo ", " bar ")}, err: io.EOF},
	{id: "body-then-invalid-command", raw: "SEND\n\n\x00FOO\n\n\x00",
		want: []*frame.Frame{fr("SEND", "")}, err: ErrInvalidCommand},

	// STOMP 1.2 "Repeated Header Entries".
	{id: "repeated-headers", raw: "MESSAGE\nfoo:1\nfoo:2\nbar:x\nfoo:3\n\n\x00",
		want: []*frame.Frame{fr("MESSAGE", "", "foo", "1", "foo", "2", "bar", "x", "foo", "3")}, err: io.EOF},
	{id: "repeated-content-length-first-wins", raw: "SEND\ncontent-length:1\ncontent-length:3\n\na\x00",
		want: []*frame.Frame{fr("SEND", "a", "content-length", "1", "content-length", "3")}, err: io.EOF},

	// STOMP 1.2 "Value Encoding".
	{id: "escapes-v12", raw: "SEND\nk\\c\\\\\\n\\r:a\\nb\\cc\\\\d\\re\n\n\x00",
		want: []*frame.Frame{fr("SEND", "", "k:\\\n\r", "a\nb:c\\d\re")}, err: io.EOF},
	{id: "escapes-default-is-v12", raw: "MESSAGE\nk:\\r\\n\\c\\\\\n\n\x00",
		want: []*frame.Frame{fr("MESSAGE", "", "k", "\r\n:\\")}, err: io.EOF},
	{id: "escapes-v11", v: V11, raw: "SEND\nk\\c:a\\nb\\cc\\\\d\n\n\x00",
		want: []*frame.Frame{fr("SEND", "", "k:", "a\nb:c\\d")}, err: io.EOF},
	{id: "escape-r-invalid-in-v11", v: V11, raw: "SEND\nk:a\\rb\n\n\x00", err: ErrInvalidEscape},
	{id: "escapes-v10-none", v: V10, raw: "SEND\nk\\t:a\\n\\c\\q\\\n\n\x00",
		want: []*frame.Frame{fr("SEND", "", "k\\t", "a\\n\\c\\q\\")}, err: io.EOF},
	{id: "escape-t-invalid-v12", v: V12, raw: "SEND\nx:a\\tb\n\n\x00", err: ErrInvalidEscape},
	{id: "escape-t-invalid-v11", v: V11, raw: "SEND\nx:a\\tb\n\n\x00", err: ErrInvalidEscape},
	{id: "escape-t-invalid-default", raw: "SEND\nx:a\\tb\n\n\x00", err: ErrInvalidEscape},
	{id: "escape-invalid-in-name", raw: "SEND\nx\\y:a\n\n\x00", err: ErrInvalidEscape},
	{id: "escape-trailing-backslash-value", raw: "SEND\nx:a\\\n\n\x00", err: ErrInvalidEscape},
	{id: "escape-trailing-backslash-value-crlf", raw: "SEND\nx:a\\\r\n\r\n\x00", err: ErrInvalidEscape},
	{id: "escape-trailing-backslash-name", raw: "SEND\nx\\:a\n\n\x00", err: ErrInvalidEscape},
	{id: "connect-not-unescaped", raw: "CONNECT\naccept-version:1.2\nlogin:a\\tb\npasscode:x\\cy\\\n\n\x00",
		want: []*frame.Frame{fr("CONNECT", "", "accept-version", "1.2", "login", "a\\tb", "passcode", "x\\cy\\")}, err: io.EOF},
	{id: "connected-not-unescaped", v: V12, raw: "CONNECTED\nversion:1.2\nserver:a\\nb\n\n\x00",
		want: []*frame.Frame{fr("CONNECTED", "", "version", "1.2", "server", "a\\nb")}, err: io.EOF},
	{id: "connect-trailing-cr", raw: "CONNECT\nlogin:a\r\r\n\n\x00",
		want:        []*frame.Frame{fr("CONNECT", "", "login", "a\r")},
		err:         io.EOF,
		noRoundTrip: "CONNECT headers are not escaped, so a value ending in CR cannot be written"},
	{id: "v11-trailing-cr", v: V11, raw: "SEND\nk:a\r\r\n\n\x00",
		want:        []*frame.Frame{fr("SEND", "", "k", "a\r")},
		err:         io.EOF,
		noRoundTrip: "STOMP 1.1 has no \\r escape, so a value ending in CR cannot be written"},
	{id: "stomp-frame-unescaped", raw: "STOMP\naccept-version:1.1,1.2\npasscode:a\\cb\n\n\x00",
		want: []*frame.Frame{fr("STOMP", "", "accept-version", "1.1,1.2", "passcode", "a:b")}, err: io.EOF},
	{id: "stomp-frame-invalid-escape", raw: "STOMP\npasscode:a\\tb\n\n\x00", err: ErrInvalidEscape},

	// STOMP 1.2 "Header content-length".
	{id: "content-length-nuls-in-body", raw: "SEND\ndestination:/q\ncontent-length:5\n\na\x00b\x00c\x00",
		want: []*frame.Frame{fr("SEND", "a\x00b\x00c", "destination", "/q", "content-length", "5")}, err: io.EOF},
	{id: "content-length-zero", raw: "SEND\ncontent-length:0\n\n\x00",
		want: []*frame.Frame{fr("SEND", "", "content-length", "0")}, err: io.EOF},
	{id: "content-length-leading-zeros", raw: "SEND\ncontent-length:003\n\nabc\x00",
		want: []*frame.Frame{fr("SEND", "abc", "content-length", "003")}, err: io.EOF},
	{id: "content-length-then-heart-beat", raw: "SEND\ncontent-length:1\n\n\n\x00\n",
		want: []*frame.Frame{fr("SEND", "\n", "content-length", "1"), hb}, err: io.EOF},
	{id: "content-length-missing-nul", raw: "SEND\ncontent-length:2\n\nabc\x00", err: ErrMissingNul},
	{id: "content-length-negative", raw: "SEND\ncontent-length:-1\n\n\x00", err: ErrInvalidContentLength},
	{id: "content-length-plus", raw: "SEND\ncontent-length:+1\n\na\x00", err: ErrInvalidContentLength},
	{id: "content-length-empty", raw: "SEND\ncontent-length:\n\n\x00", err: ErrInvalidContentLength},
	{id: "content-length-space", raw: "SEND\ncontent-length: 1\n\na\x00", err: ErrInvalidContentLength},
	{id: "content-length-hex", raw: "SEND\ncontent-length:0x1\n\na\x00", err: ErrInvalidContentLength},
	{id: "content-length-escaped", raw: "SEND\ncontent-length:1\\c\n\na\x00", err: ErrInvalidContentLength},
	{id: "content-length-huge", raw: "SEND\ndestination:/q\ncontent-length:500000000\n\n", err: ErrFrameTooLarge},
	{id: "content-length-overflow", raw: "SEND\ncontent-length:99999999999999999999999999\n\n", err: ErrFrameTooLarge},
	{id: "content-length-over-budget", lim: Limits{MaxFrameSize: 32}, raw: "SEND\ncontent-length:16\n\n0123456789abcdef\x00",
		err: ErrFrameTooLarge},
	{id: "content-length-at-budget", lim: Limits{MaxFrameSize: 40}, raw: "SEND\ncontent-length:16\n\n0123456789abcdef\x00",
		want: []*frame.Frame{fr("SEND", "0123456789abcdef", "content-length", "16")}, err: io.EOF},

	// Limits.
	{id: "body-over-limit", lim: Limits{MaxFrameSize: 64}, raw: "SEND\n\n" + strings.Repeat("x", 100) + "\x00",
		err: ErrFrameTooLarge},
	{id: "body-at-limit", lim: Limits{MaxFrameSize: 64}, raw: "SEND\n\n" + strings.Repeat("x", 58) + "\x00",
		want: []*frame.Frame{fr("SEND", strings.Repeat("x", 58))}, err: io.EOF},
	{id: "body-over-limit-by-one", lim: Limits{MaxFrameSize: 64}, raw: "SEND\n\n" + strings.Repeat("x", 59) + "\x00",
		err: ErrFrameTooLarge},
	{id: "body-over-limit-many-chunks", lim: Limits{MaxFrameSize: 1000, MaxHeaderLength: 16},
		raw: "SEND\n\n" + strings.Repeat("x", 2000) + "\x00", err: ErrFrameTooLarge},
	{id: "body-many-chunks", lim: Limits{MaxHeaderLength: 16},
		raw:  "SEND\n\n" + strings.Repeat("0123456789", 10) + "\x00",
		want: []*frame.Frame{fr("SEND", strings.Repeat("0123456789", 10))}, err: io.EOF},
	{id: "headers-over-frame-limit", lim: Limits{MaxFrameSize: 16}, raw: "SEND\nfoo:bar\nbaz:qux\n\n\x00",
		err: ErrFrameTooLarge},
	{id: "command-over-frame-limit", lim: Limits{MaxFrameSize: 4}, raw: "SEND\n\n\x00", err: ErrFrameTooLarge},
	{id: "too-many-headers", lim: Limits{MaxHeaders: 2}, raw: "SEND\na:1\nb:2\nc:3\n\n\x00", err: ErrTooManyHeaders},
	{id: "max-headers", lim: Limits{MaxHeaders: 2}, raw: "SEND\na:1\nb:2\n\n\x00",
		want: []*frame.Frame{fr("SEND", "", "a", "1", "b", "2")}, err: io.EOF},
	{id: "header-line-at-limit", lim: Limits{MaxHeaderLength: 32}, raw: "SEND\nk:" + strings.Repeat("v", 29) + "\n\n\x00",
		want: []*frame.Frame{fr("SEND", "", "k", strings.Repeat("v", 29))}, err: io.EOF},
	{id: "header-line-over-limit", lim: Limits{MaxHeaderLength: 32}, raw: "SEND\nk:" + strings.Repeat("v", 30) + "\n\n\x00",
		err: ErrHeaderTooLong},
	{id: "header-line-crlf-over-limit", lim: Limits{MaxHeaderLength: 32}, raw: "SEND\nk:" + strings.Repeat("v", 29) + "\r\n\n\x00",
		err: ErrHeaderTooLong},
	{id: "header-line-1MiB", raw: "SEND\nk:" + strings.Repeat("v", 1<<20) + "\n\n\x00", err: ErrHeaderTooLong},
	{id: "header-line-limit-below-buffer-minimum", lim: Limits{MaxHeaderLength: 8}, raw: "SEND\nabc:1234\n\n\x00",
		err: ErrHeaderTooLong},
	{id: "command-line-over-limit", lim: Limits{MaxHeaderLength: 16}, raw: "SEND" + strings.Repeat(" ", 20) + "\n\n\x00",
		err: ErrHeaderTooLong},
	{id: "eol-run-over-limit", lim: Limits{MaxHeaderLength: 16}, raw: strings.Repeat("\r", 20) + "\n", err: ErrHeaderTooLong},

	// Malformed frames.
	{id: "unknown-command", raw: "FOO\n\n\x00", err: ErrInvalidCommand},
	{id: "lowercase-command", raw: "send\n\n\x00", err: ErrInvalidCommand},
	{id: "command-trailing-space", raw: "SEND \n\n\x00", err: ErrInvalidCommand},
	{id: "command-leading-nul", raw: "\x00SEND\n\n\x00", err: ErrInvalidCommand},
	{id: "cr-only-line", raw: "\r\r\nSEND\n\n\x00", err: ErrInvalidCommand},
	{id: "header-missing-colon", raw: "SEND\nfoo\n\n\x00", err: ErrInvalidHeader},
	{id: "header-empty-name", raw: "SEND\n:bar\n\n\x00", err: ErrInvalidHeader},

	// End of stream.
	{id: "eof-in-command", raw: "SEN", err: io.ErrUnexpectedEOF},
	{id: "eof-after-command", raw: "SEND\n", err: io.ErrUnexpectedEOF},
	{id: "eof-in-header", raw: "SEND\ndest", err: io.ErrUnexpectedEOF},
	{id: "eof-in-body", raw: "SEND\n\nbody", err: io.ErrUnexpectedEOF},
	{id: "eof-in-counted-body", raw: "SEND\ncontent-length:5\n\nab", err: io.ErrUnexpectedEOF},
	{id: "eof-before-nul", raw: "SEND\ncontent-length:2\n\nab", err: io.ErrUnexpectedEOF},
	{id: "eof-lone-cr", raw: "SEND\n\n\x00\r", want: []*frame.Frame{fr("SEND", "")}, err: io.ErrUnexpectedEOF},
}
