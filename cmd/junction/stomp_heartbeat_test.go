package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// --stomp-heart-beat-min (flag, JUNCTION_STOMP_HEART_BEAT_MIN, YAML
// stomp.heart-beat-min; --stomp-heart-beat is its former name) is the
// fastest heart-beat interval the broker agrees to: the CONNECTED of a
// client asking for 1s beats says so.
func TestStompHeartBeatMin(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("stomp:\n  heart-beat-min: 3s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	former := filepath.Join(t.TempDir(), "former.yaml")
	if err := os.WriteFile(former, []byte("stomp:\n  heart-beat: 7s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		args []string
		env  map[string]string
		want time.Duration
	}{
		{"default", nil, nil, time.Second},
		{"flag", []string{"--stomp-heart-beat-min", "250ms"}, nil, 250 * time.Millisecond},
		{"env", nil, map[string]string{"JUNCTION_STOMP_HEART_BEAT_MIN": "2s"}, 2 * time.Second},
		{"yaml", []string{"--config", file}, nil, 3 * time.Second},
		{"former yaml key", []string{"--config", former}, nil, 7 * time.Second},
		{"former flag", []string{"--stomp-heart-beat", "0"}, nil, 0},
		{"former env", nil, map[string]string{"JUNCTION_STOMP_HEART_BEAT": "5s"}, 5 * time.Second},
	} {
		cfg, err := loadConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err != nil || cfg.Stomp.HeartBeatMin != tc.want {
			t.Errorf("%s: heart-beat-min %v (%v), want %v", tc.what, cfg.Stomp.HeartBeatMin, err, tc.want)
		}
	}
	if _, err := loadConfig([]string{"--stomp-heart-beat-min", "-1s"}, noEnv, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "stomp.heart-beat-min") {
		t.Errorf("negative accepted: %v", err)
	}

	for _, tc := range []struct {
		min  time.Duration
		want string
	}{{time.Second, "1000,1000"}, {2 * time.Second, "2000,2000"}, {0, "0,0"}} {
		cfg := testConfig(t)
		cfg.Stomp.HeartBeatMin = tc.min
		addr, stop := startServe(t, cfg)
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(nc, "CONNECT\naccept-version:1.2\nhost:/\nheart-beat:1000,1000\n\n\x00")
		f, err := bufio.NewReader(nc).ReadString(0)
		nc.Close()
		if err != nil || !strings.HasPrefix(f, "CONNECTED\n") || !strings.Contains(f, "\nheart-beat:"+tc.want+"\n") {
			t.Errorf("heart-beat-min %v, client asks 1000,1000: %q %v; want heart-beat:%s", tc.min, f, err, tc.want)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
}
