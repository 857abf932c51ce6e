package stomp_test

import (
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

// With the defaults, a client gets the heart-beats it asks for down to
// 1s each way (as ActiveMQ and RabbitMQ honour), not a slower interval
// of the broker's choosing.
func TestHeartBeatsAsTheClientAsks(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	for _, tc := range []struct{ ask, want string }{
		{"1000,1000", "1000,1000"},
		{"2500,4000", "4000,2500"}, // the broker beats every 4s, the client every 2.5s
		{"200,100", "1000,1000"},   // faster than the floor: the floor
		{"0,1000", "1000,0"},
		{"0,0", "0,0"},
	} {
		if hb := stomptest.Header(tb.Raw(t).Connect("heart-beat:"+tc.ask+"\n"), "heart-beat"); hb != tc.want {
			t.Errorf("client asks %s: CONNECTED heart-beat:%s, want %s", tc.ask, hb, tc.want)
		}
	}
}

// A client that promised beats every second and falls silent is
// disconnected after 1.5 times that, with an ERROR saying so; the
// broker beats every second to a client that asked for it; go-stomp
// beating every second stays connected.
func TestHeartBeatTimeoutAndBeats(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	silent := tb.Raw(t)
	silent.Connect("heart-beat:1000,0\n")
	start := time.Now()
	listener := tb.Raw(t)
	listener.Connect("heart-beat:0,1000\n")
	beating := tb.Dial(t, gostomp.ConnOpt.HeartBeat(time.Second, time.Second))

	f := silent.Frame()
	took := time.Since(start)
	if !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "message") != "heart-beat timeout" ||
		!strings.Contains(f, "No data from the client for 1.5s.") {
		t.Fatalf("got %q", f)
	}
	// Bounded above generously for a loaded machine; the 1.5s itself is
	// in the ERROR's body, from the deadline the broker set.
	if took < 1400*time.Millisecond || took > 6*time.Second {
		t.Fatalf("silent client disconnected after %v, want about 1.5s", took)
	}
	silent.Closed()

	// The broker beats to the listener every second: three beats come
	// within 3s of its CONNECTED (and the 3s give go-stomp's beats below
	// time to prove themselves).
	listener.Conn.SetReadDeadline(start.Add(4500 * time.Millisecond))
	for beats := 0; beats < 3; beats++ {
		b, err := listener.Reader.ReadByte()
		if err != nil || b != '\n' {
			t.Fatalf("after %d heart-beats in %v: %q %v", beats, time.Since(start), b, err)
		}
	}

	// go-stomp beating every second was not disconnected.
	stomptest.Send(t, beating, "/queue/alive", "x", gostomp.SendOpt.Receipt)
}
