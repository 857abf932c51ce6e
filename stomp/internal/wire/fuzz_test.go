package wire

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/go-stomp/stomp/v3/frame"
)

var (
	// fuzzLimits are small, so that the fuzzer reaches them.
	fuzzLimits = Limits{MaxFrameSize: 64 << 10, MaxHeaders: 64, MaxHeaderLength: 1 << 10}
	// bigLimits are out of the way of any fuzz input.
	bigLimits = Limits{MaxFrameSize: 1 << 20, MaxHeaders: 1 << 16, MaxHeaderLength: 1 << 16}
)

// FuzzReader checks that the reader does not depend on how the input is
// split into reads, that it keeps its limits, that its errors are the
// documented ones, and that every frame it accepts survives Encode and Read
// (STYLE.md §4.14).
func FuzzReader(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		frames, err := readAll(bytes.NewReader(data), fuzzLimits, 0)
		checkFuzzErr(t, err)
		for name, r := range map[string]io.Reader{
			"halves":   halves(data),
			"one-byte": iotest.OneByteReader(bytes.NewReader(data)),
		} {
			frames2, err2 := readAll(r, fuzzLimits, 0)
			if len(frames2) != len(frames) {
				t.Fatalf("%s: %d frames, whole: %d", name, len(frames2), len(frames))
			}
			for i := range frames {
				if d := frameDiff(frames2[i], frames[i]); d != "" {
					t.Fatalf("%s: frame %d: %s", name, i, d)
				}
			}
			if err2.Error() != err.Error() {
				t.Fatalf("%s: error %v, whole: %v", name, err2, err)
			}
		}

		for i, fr := range frames {
			if fr == nil {
				continue
			}
			if fr.Header.Len() > fuzzLimits.MaxHeaders || len(fr.Body) > fuzzLimits.MaxFrameSize {
				t.Fatalf("frame %d exceeds the limits: %d headers, %d body bytes", i, fr.Header.Len(), len(fr.Body))
			}
			if fr.Body != nil && len(fr.Body) == 0 {
				t.Fatalf("frame %d: empty body is not nil", i)
			}
			if why := noRoundTrip(fr); why != "" {
				continue
			}
			enc := Encode(nil, fr, V12)
			got, err := readAll(bytes.NewReader(enc), bigLimits, 0)
			if err != io.EOF || len(got) != 1 {
				t.Fatalf("frame %d: re-reading %q: %d frames, %v", i, enc, len(got), err)
			}
			if d := frameDiff(got[0], fr); d != "" {
				t.Fatalf("frame %d: round trip through %q: %s", i, enc, d)
			}
		}
	})
}

// noRoundTrip says why Encode cannot reproduce f, or returns "". The only
// case: CONNECT and CONNECTED headers are not escaped, so a value that ends
// in CR loses it (the CR joins the EOL).
func noRoundTrip(f *frame.Frame) string {
	if escapeVersion(f.Command, V12) != V10 {
		return ""
	}
	for i := range f.Header.Len() {
		if _, v := f.Header.GetAt(i); strings.HasSuffix(v, "\r") {
			return "unescaped value ends in CR"
		}
	}
	return ""
}

var sentinels = []error{
	ErrFrameTooLarge, ErrTooManyHeaders, ErrHeaderTooLong, ErrInvalidCommand,
	ErrInvalidHeader, ErrInvalidEscape, ErrInvalidContentLength, ErrMissingNul,
}

// checkFuzzErr checks that err is a documented final error.
func checkFuzzErr(t *testing.T, err error) {
	t.Helper()
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return
	}
	var fe *FrameError
	if !errors.As(err, &fe) {
		t.Fatalf("undocumented error %#v", err)
	}
	for _, s := range sentinels {
		if fe.Err == s {
			return
		}
	}
	t.Fatalf("FrameError with unknown sentinel %#v", fe.Err)
}

// FuzzDifferential compares our Reader with go-stomp's frame.Reader
// (STYLE.md §4.14). go-stomp must accept every frame we accept, with the
// same command, headers in order, and body.
//
// Exclusions, each a documented difference rather than a bug:
//   - go-stomp is consulted only for frames we accept. Where we reject
//     (limits, undefined escapes, bad content-length) go-stomp may accept,
//     or may allocate whatever content-length says (STYLE.md §6), so it
//     is not run on the rest of the input.
//   - CONNECT and CONNECTED: go-stomp unescapes their headers, we do not
//     (STOMP 1.2 "Value Encoding"). Commands, bodies and the number of
//     headers must still agree, and so must every header whose name and
//     value contain no backslash.
//
// Line endings need no exclusion: both strip exactly one CRLF or LF.
func FuzzDifferential(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		ours := NewReader(bytes.NewReader(data), bigLimits)
		theirs := frame.NewReader(bytes.NewReader(data))
		for i := 0; ; i++ {
			a, err := ours.Read()
			if err != nil {
				return
			}
			b, err := theirs.Read()
			if err != nil {
				t.Fatalf("frame %d: we accept %s, go-stomp: %v", i, show(a), err)
			}
			if (a == nil) != (b == nil) {
				t.Fatalf("frame %d: we read %s, go-stomp %s", i, show(a), show(b))
			}
			if a == nil {
				continue
			}
			if d := differential(a, b); d != "" {
				t.Fatalf("frame %d: %s", i, d)
			}
		}
	})
}

// differential compares our frame a with go-stomp's b, within the
// exclusions documented on FuzzDifferential.
func differential(a, b *frame.Frame) string {
	if a.Command != b.Command || !bytes.Equal(a.Body, b.Body) {
		return fmt.Sprintf("we read %s, go-stomp %s", show(a), show(b))
	}
	if escapeVersion(a.Command, V12) != V10 {
		return headerDiff(a.Header, b.Header)
	}
	if a.Header.Len() != b.Header.Len() {
		return fmt.Sprintf("we read %s, go-stomp %s", show(a), show(b))
	}
	for i := range a.Header.Len() {
		ak, av := a.Header.GetAt(i)
		bk, bv := b.Header.GetAt(i)
		if strings.Contains(ak+av, `\`) {
			continue // go-stomp unescapes CONNECT headers
		}
		if ak != bk || av != bv {
			return fmt.Sprintf("%s header %d: we read %q:%q, go-stomp %q:%q", a.Command, i, ak, av, bk, bv)
		}
	}
	return ""
}

var writeSeeds = flag.Bool("write-seeds", false, "write the fuzz seed corpus from the case table")

// maxSeed bounds the cases that become seeds.
const maxSeed = 4 << 10

// TestFuzzSeeds checks that testdata/fuzz holds a seed for every small
// case of the table; with -write-seeds it writes them:
//
//	go test ./stomp/internal/wire/ -run TestFuzzSeeds -write-seeds
func TestFuzzSeeds(t *testing.T) {
	for _, target := range []string{"FuzzReader", "FuzzDifferential"} {
		dir := filepath.Join("testdata", "fuzz", target)
		if *writeSeeds {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range cases {
			if len(c.raw) > maxSeed {
				continue
			}
			want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", []byte(c.raw))
			path := filepath.Join(dir, c.id)
			if *writeSeeds {
				if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != want {
				t.Errorf("seed %s is missing or stale (%v); run with -write-seeds", path, err)
			}
		}
	}
}
