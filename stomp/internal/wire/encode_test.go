package wire

import (
	"strings"
	"testing"

	"github.com/go-stomp/stomp/v3/frame"
)

func TestEncode(t *testing.T) {
	special := fr("MESSAGE", "body", "a:b\\", "x\ny\r\\:z")
	for _, tc := range []struct {
		id   string
		f    *frame.Frame
		v    Version
		want string
	}{
		{"v12", special, V12, "MESSAGE\na\\cb\\\\:x\\ny\\r\\\\\\cz\n\nbody\x00"},
		{"zero-version-is-v12", special, 0, "MESSAGE\na\\cb\\\\:x\\ny\\r\\\\\\cz\n\nbody\x00"},
		{"v11-no-cr-escape", special, V11, "MESSAGE\na\\cb\\\\:x\\ny\r\\\\\\cz\n\nbody\x00"},
		{"v10-lf-becomes-space", special, V10, "MESSAGE\na:b\\:x y\r\\:z\n\nbody\x00"},
		{"connect-not-escaped", fr("CONNECT", "", "login", "a:b\\c", "passcode", "p\nq"), V12,
			"CONNECT\nlogin:a:b\\c\npasscode:p q\n\n\x00"},
		{"connected-not-escaped", fr("CONNECTED", "", "server", "s:1\\"), V12, "CONNECTED\nserver:s:1\\\n\n\x00"},
		{"stomp-escaped", fr("STOMP", "", "passcode", "a:b"), V12, "STOMP\npasscode:a\\cb\n\n\x00"},
		{"nil-header", &frame.Frame{Command: "DISCONNECT"}, V12, "DISCONNECT\n\n\x00"},
		{"repeated-in-order", fr("SEND", "", "k", "1", "k", "2"), V12, "SEND\nk:1\nk:2\n\n\x00"},
		{"no-content-length-added", fr("SEND", "a\x00b"), V12, "SEND\n\na\x00b\x00"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			got := string(Encode([]byte("prefix"), tc.f, tc.v))
			if got != "prefix"+tc.want {
				t.Errorf("Encode:\n got %q\nwant %q", got, "prefix"+tc.want)
			}
		})
	}
	if got := string(EncodeHeartBeat([]byte("x"))); got != "x\n" {
		t.Errorf("EncodeHeartBeat = %q", got)
	}
}

// TestEncodeNoInjection checks that a header value can never add a line,
// whatever the version.
func TestEncodeNoInjection(t *testing.T) {
	evil := "x\ndestination:/queue/other\n\nbody\x00SEND"
	for _, v := range []Version{V10, V11, V12} {
		for _, cmd := range []string{"MESSAGE", "CONNECTED"} {
			enc := Encode(nil, fr(cmd, "", "k", evil), v)
			if n := strings.Count(string(enc), "\n"); n != 3 {
				t.Errorf("%s %v: %d LFs in %q, want 3", cmd, v, n, enc)
			}
		}
	}
}

func TestEncodeAllocs(t *testing.T) {
	f := typicalMessage()
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(1000, func() {
		buf = Encode(buf[:0], f, V12)
	})
	if allocs != 0 {
		t.Errorf("Encode into a buffer with room: %v allocs, want 0", allocs)
	}
}

func TestVersionString(t *testing.T) {
	for v, want := range map[Version]string{V10: "1.0", V11: "1.1", V12: "1.2", 0: "1.2"} {
		if v.String() != want {
			t.Errorf("Version(%d).String() = %q, want %q", int(v), v.String(), want)
		}
	}
}
