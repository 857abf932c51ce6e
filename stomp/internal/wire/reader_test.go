package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/go-stomp/stomp/v3/frame"
)

// readAll reads frames until the first error.
func readAll(r io.Reader, lim Limits, v Version) ([]*frame.Frame, error) {
	rd := NewReader(r, lim)
	if v != 0 {
		rd.SetVersion(v)
	}
	var out []*frame.Frame
	for {
		f, err := rd.Read()
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
}

// frameDiff describes how got differs from want, or returns "".
// A nil frame is a heart-beat. Bodies must agree on nil too.
func frameDiff(got, want *frame.Frame) string {
	switch {
	case got == nil && want == nil:
		return ""
	case got == nil || want == nil:
		return fmt.Sprintf("got %s, want %s", show(got), show(want))
	}
	if got.Command != want.Command {
		return fmt.Sprintf("command %q, want %q", got.Command, want.Command)
	}
	if d := headerDiff(got.Header, want.Header); d != "" {
		return d
	}
	if !bytes.Equal(got.Body, want.Body) || (got.Body == nil) != (want.Body == nil) {
		return fmt.Sprintf("body %q (nil %t), want %q (nil %t)", got.Body, got.Body == nil, want.Body, want.Body == nil)
	}
	return ""
}

func headerDiff(got, want *frame.Header) string {
	if got.Len() != want.Len() {
		return fmt.Sprintf("headers %s, want %s", showHeader(got), showHeader(want))
	}
	for i := range got.Len() {
		gk, gv := got.GetAt(i)
		wk, wv := want.GetAt(i)
		if gk != wk || gv != wv {
			return fmt.Sprintf("header %d is %q:%q, want %q:%q", i, gk, gv, wk, wv)
		}
	}
	return ""
}

func show(f *frame.Frame) string {
	if f == nil {
		return "heart-beat"
	}
	return fmt.Sprintf("%s%s body %q", f.Command, showHeader(f.Header), f.Body)
}

func showHeader(h *frame.Header) string {
	var b strings.Builder
	b.WriteString("[")
	for i := range h.Len() {
		k, v := h.GetAt(i)
		fmt.Fprintf(&b, " %q:%q", k, v)
	}
	b.WriteString(" ]")
	return b.String()
}

func checkFrames(t *testing.T, got, want []*frame.Frame) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			t.Errorf("Read %d: missing %s", i, show(want[i]))
		case i >= len(want):
			t.Errorf("Read %d: unexpected %s", i, show(got[i]))
		default:
			if d := frameDiff(got[i], want[i]); d != "" {
				t.Errorf("Read %d: %s", i, d)
			}
		}
	}
}

func checkErr(t *testing.T, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Errorf("final error %v, want %v", got, want)
	}
	// io.EOF and io.ErrUnexpectedEOF are returned bare, so that callers
	// can compare with ==.
	if (want == io.EOF || want == io.ErrUnexpectedEOF) && got != want {
		t.Errorf("final error %#v, want bare %v", got, want)
	}
	var fe *FrameError
	if errors.As(got, &fe) != (want != io.EOF && want != io.ErrUnexpectedEOF) {
		t.Errorf("final error %#v: *FrameError is %t", got, errors.As(got, &fe))
	}
}

func TestRead(t *testing.T) {
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			readers := map[string]func() io.Reader{
				"whole":    func() io.Reader { return strings.NewReader(c.raw) },
				"one-byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(c.raw)) },
				"halves":   func() io.Reader { return halves([]byte(c.raw)) },
			}
			for name, mk := range readers {
				t.Run(name, func(t *testing.T) {
					got, err := readAll(mk(), c.lim, c.v)
					checkFrames(t, got, c.want)
					checkErr(t, err, c.err)
				})
			}
		})
	}
}

// TestRoundTrip encodes each case's frames with the case's version and
// reads them back.
func TestRoundTrip(t *testing.T) {
	for _, c := range cases {
		if c.noRoundTrip != "" || len(c.want) == 0 {
			continue
		}
		t.Run(c.id, func(t *testing.T) {
			v := c.v
			if v == 0 {
				v = V12
			}
			var buf []byte
			for _, f := range c.want {
				if f == nil {
					buf = EncodeHeartBeat(buf)
				} else {
					buf = Encode(buf, f, v)
				}
			}
			got, err := readAll(bytes.NewReader(buf), Limits{}, v)
			checkFrames(t, got, c.want)
			if err != io.EOF {
				t.Errorf("final error %v, want EOF; encoded %q", err, buf)
			}
		})
	}
}

// halves returns a reader that returns data in two reads.
func halves(data []byte) io.Reader {
	return &chunkReader{chunks: [][]byte{data[:len(data)/2], data[len(data)/2:]}}
}

type chunkReader struct{ chunks [][]byte }

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.chunks) > 0 && len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	return n, nil
}

func TestRepeatedHeaderFirstWins(t *testing.T) {
	f, err := NewReader(strings.NewReader("MESSAGE\nfoo:1\nfoo:2\n\n\x00"), Limits{}).Read()
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Header.Get("foo"); got != "1" {
		t.Errorf("Get(foo) = %q, want the first entry, 1", got)
	}
	if got := f.Header.GetAll("foo"); len(got) != 2 || got[1] != "2" {
		t.Errorf("GetAll(foo) = %q, want [1 2]", got)
	}
}

// TestContentLengthNotAllocated is go-stomp hazard 2 (STYLE.md §6): the
// 46-byte frame that made frame.Reader allocate 500 MB.
func TestContentLengthNotAllocated(t *testing.T) {
	const raw = "SEND\ndestination:/q\ncontent-length:500000000\n\n"
	if len(raw) != 46 {
		t.Fatalf("len(raw) = %d", len(raw))
	}
	for _, tc := range []struct {
		name string
		lim  Limits
		want error
	}{
		{"default limits", Limits{}, ErrFrameTooLarge},
		// Even when the limit allows it, the body is not allocated
		// before its bytes arrive.
		{"limit allows it", Limits{MaxFrameSize: 1 << 30}, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			alloc := allocated(func() {
				_, err = NewReader(strings.NewReader(raw), tc.lim).Read()
			})
			if !errors.Is(err, tc.want) {
				t.Errorf("Read: %v, want %v", err, tc.want)
			}
			if alloc > 1<<20 {
				t.Errorf("Read allocated %d bytes, want < 1 MiB", alloc)
			}
		})
	}
}

// allocated returns the bytes fn allocated on the heap.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestLargeBodies reads bodies past eagerBody (content-length) and past
// the buffer (NUL-terminated), whole and one byte at a time.
func TestLargeBodies(t *testing.T) {
	body := make([]byte, 3*eagerBody+7)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	body[100] = 0 // a NUL inside a counted body
	counted := fr("SEND", string(body), "content-length", fmt.Sprint(len(body)))
	body[100] = 'x'
	terminated := fr("SEND", string(body))
	for _, f := range []*frame.Frame{counted, terminated} {
		raw := Encode(nil, f, V12)
		for name, r := range map[string]io.Reader{
			"whole":    bytes.NewReader(raw),
			"one-byte": iotest.OneByteReader(bytes.NewReader(raw)),
		} {
			got, err := readAll(r, Limits{}, 0)
			if err != io.EOF {
				t.Errorf("%s: %v", name, err)
			}
			if len(got) != 1 {
				t.Fatalf("%s: %d frames", name, len(got))
			}
			if d := frameDiff(got[0], f); d != "" {
				t.Errorf("%s: %.200s", name, d)
			}
			if cap(got[0].Body) != len(got[0].Body) {
				t.Errorf("%s: body cap %d, len %d", name, cap(got[0].Body), len(got[0].Body))
			}
		}
	}
}

func TestErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		raw    string
		lim    Limits
		want   string
		header string
		limit  int
	}{
		{raw: "SEND\ndestination:/q\ncontent-length:500000000\n\n",
			want:   "stomp: frame too large (content-length 500000000, limit 10485760 bytes)",
			header: "content-length", limit: 10485760},
		{raw: "SEND\n\n" + strings.Repeat("x", 100) + "\x00", lim: Limits{MaxFrameSize: 64},
			want: "stomp: frame too large (limit 64 bytes)", limit: 64},
		{raw: "SEND\na:1\nb:2\n\n\x00", lim: Limits{MaxHeaders: 1},
			want: "stomp: too many headers (limit 1)", limit: 1},
		{raw: "SEND\nk:" + strings.Repeat("v", 100) + "\n\n\x00", lim: Limits{MaxHeaderLength: 32},
			want: "stomp: header line too long (limit 32 bytes)", limit: 32},
		{raw: "FOO\n", want: `stomp: invalid command "FOO"`},
		{raw: strings.Repeat("A", 100) + "\n", want: `stomp: invalid command "` + strings.Repeat("A", 64) + `"...`},
		{raw: "SEND\nfoo\n", want: `stomp: invalid header "foo" (no colon)`},
		{raw: "SEND\n:foo\n", want: `stomp: invalid header ":foo" (empty name)`},
		{raw: "SEND\nfoo:a\\tb\n", want: `stomp: invalid escape sequence "\\t" in header "foo"`, header: "foo"},
		{raw: "SEND\nf\\co:a\\\n", want: `stomp: invalid escape sequence "\\" in header "f:o"`, header: "f:o"},
		{raw: "SEND\nf\\x:a\n", want: `stomp: invalid escape sequence "\\x" in header "f\\x"`, header: "f\\x"},
		{raw: "SEND\ncontent-length:abc\n\n", want: `stomp: invalid content-length "abc"`, header: "content-length"},
		{raw: "SEND\ncontent-length:1\n\nab", want: "stomp: frame body not terminated by NUL (content-length 1)"},
	} {
		_, err := readAll(strings.NewReader(tc.raw), tc.lim, 0)
		var fe *FrameError
		if !errors.As(err, &fe) {
			t.Errorf("%q: %v is not a *FrameError", tc.raw, err)
			continue
		}
		if fe.Error() != tc.want || fe.Header != tc.header || fe.Limit != tc.limit {
			t.Errorf("%.40q:\n got %s (header %q, limit %d)\nwant %s (header %q, limit %d)",
				tc.raw, fe, fe.Header, fe.Limit, tc.want, tc.header, tc.limit)
		}
	}
}

// TestErrorsAreFinal checks that an error sticks, and that errors from the
// underlying reader are returned as they are.
func TestErrorsAreFinal(t *testing.T) {
	r := NewReader(iotest.TimeoutReader(strings.NewReader("SEND\n\n\x00")), Limits{MaxHeaderLength: 16})
	if f, err := r.Read(); err != nil || f == nil {
		t.Fatalf("first Read: %v, %v", f, err)
	}
	for range 2 {
		if _, err := r.Read(); err != iotest.ErrTimeout {
			t.Errorf("Read after the source failed: %v, want %v", err, iotest.ErrTimeout)
		}
	}

	r = NewReader(strings.NewReader("FOO\n\n\x00SEND\n\n\x00"), Limits{})
	_, err1 := r.Read()
	_, err2 := r.Read()
	if !errors.Is(err1, ErrInvalidCommand) || err2 != err1 {
		t.Errorf("Reads after a frame error: %v then %v", err1, err2)
	}
}

func TestSetVersionBetweenFrames(t *testing.T) {
	raw := "CONNECT\naccept-version:1.0\nlogin:a\\b\n\n\x00SEND\nk:a\\tb\n\n\x00"
	r := NewReader(strings.NewReader(raw), Limits{})
	f, err := r.Read()
	if err != nil || f.Header.Get("login") != `a\b` {
		t.Fatalf("CONNECT: %v, %v", f, err)
	}
	r.SetVersion(V10)
	f, err = r.Read()
	if err != nil || f.Header.Get("k") != `a\tb` {
		t.Fatalf("SEND after SetVersion(V10): %v, %v", f, err)
	}
}

// TestReadOwnership checks that a frame does not alias the Reader's buffer.
func TestReadOwnership(t *testing.T) {
	raw := "SEND\nfoo:bar\n\nbody1\x00SEND\nfoo:baz\n\nbody2\x00"
	r := NewReader(strings.NewReader(raw), Limits{})
	f1, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(); err != nil {
		t.Fatal(err)
	}
	if d := frameDiff(f1, fr("SEND", "body1", "foo", "bar")); d != "" {
		t.Error(d)
	}
}

func TestReadAllocs(t *testing.T) {
	raw := typicalSend()
	src := &repeatReader{data: raw}
	r := NewReader(src, Limits{})
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := r.Read(); err != nil {
			t.Fatal(err)
		}
	})
	// Frame and Header, the header slice, the names and values, the body.
	if allocs > 4 {
		t.Errorf("Read: %v allocs per frame, want <= 4", allocs)
	}
}

func TestStreamedBody(t *testing.T) {
	body := strings.Repeat("0123456789", 1000)
	in := "SEND\ndestination:q\ncontent-length:10000\n\n" + body + "\x00" +
		"SEND\ndestination:q\ncontent-length:5\n\nsmall\x00" +
		"SEND\ndestination:q\ncontent-length:20000\n\n"
	r := NewReader(strings.NewReader(in), Limits{MaxFrameSize: 1000})
	r.SetStreaming(100, 15000)
	f, err := r.Read()
	if err != nil || f.Body != nil || r.Streaming() != 10000 {
		t.Fatalf("Read: %v, body %d, streaming %d", err, len(f.Body), r.Streaming())
	}
	got, err := io.ReadAll(r.Body())
	if err != nil || string(got) != body {
		t.Fatalf("Body: %d bytes, %v", len(got), err)
	}
	f, err = r.Read()
	if err != nil || string(f.Body) != "small" || r.Streaming() != 0 {
		t.Fatalf("small frame: %v %q", err, f.Body)
	}
	// Over the streaming maximum: refused before any of the body is read.
	if _, err := r.Read(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("over the maximum: %v", err)
	}

	// Cut off mid-body; a missing NUL.
	r = NewReader(strings.NewReader("SEND\ndestination:q\ncontent-length:200\n\n"+body[:150]), Limits{})
	r.SetStreaming(100, 1000)
	if _, err := r.Read(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r.Body()); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut body: %v", err)
	}
	r = NewReader(strings.NewReader("SEND\ndestination:q\ncontent-length:200\n\n"+body[:201]), Limits{})
	r.SetStreaming(100, 1000)
	r.Read()
	if _, err := io.ReadAll(r.Body()); !errors.Is(err, ErrMissingNul) {
		t.Fatalf("no NUL: %v", err)
	}
	// A body left unread fails the next Read.
	r = NewReader(strings.NewReader("SEND\ndestination:q\ncontent-length:200\n\n"+body[:200]+"\x00"), Limits{})
	r.SetStreaming(100, 1000)
	r.Read()
	if _, err := r.Read(); err == nil {
		t.Fatal("Read with the body unread")
	}
}

// A pooled Reader keeps its buffer while a streamed body is left to
// read, although nothing is read ahead, and gives it back once the body
// and its NUL are read.
func TestStreamedBodyPooled(t *testing.T) {
	body := strings.Repeat("0123456789", 100)
	src := io.MultiReader(strings.NewReader("SEND\ndestination:q\ncontent-length:1000\n\n"),
		strings.NewReader(body+"\x00"), strings.NewReader("SEND\ndestination:q\n\nsmall\x00"))
	r := NewPooledReader(src, Limits{})
	r.SetStreaming(100, 5000)
	if _, err := r.Read(); err != nil || r.Streaming() != 1000 || r.Buffered() != 0 {
		t.Fatalf("Read: %v, streaming %d, buffered %d", err, r.Streaming(), r.Buffered())
	}
	r.Release()
	if r.br == nil {
		t.Fatal("Release gave the buffer back with the body unread")
	}
	got, err := io.ReadAll(r.Body())
	if err != nil || string(got) != body {
		t.Fatalf("Body: %d bytes, %v", len(got), err)
	}
	r.Release()
	if r.br != nil {
		t.Fatal("Release kept the buffer once the body was read")
	}
	f, err := r.Read()
	if err != nil || string(f.Body) != "small" {
		t.Fatalf("next frame: %v %q", err, f.Body)
	}
}

// Close gives a pooled Reader's buffer back although bytes are read
// ahead or a streamed body is left, and later Reads and Body reads fail.
func TestPooledReaderClose(t *testing.T) {
	src := strings.NewReader("SEND\ndestination:q\ncontent-length:200\n\n" + strings.Repeat("x", 200) + "\x00SEND\ndestination:q\n\nnext\x00")
	r := NewPooledReader(src, Limits{})
	r.SetStreaming(100, 5000)
	if _, err := r.Read(); err != nil || r.Streaming() != 200 {
		t.Fatalf("Read: %v, streaming %d", err, r.Streaming())
	}
	r.Close()
	if r.br != nil {
		t.Fatal("Close kept the buffer")
	}
	if _, err := r.Read(); !errors.Is(err, ErrReaderClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if _, err := r.Body().Read(make([]byte, 10)); !errors.Is(err, ErrReaderClosed) {
		t.Fatalf("Body after Close: %v", err)
	}
	r.Close()
	r.Release()
}
