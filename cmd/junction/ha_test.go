package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/ha"
)

// These tests run brokers of a shared-store pair in this process (OFD
// locks and the journals' flocks exclude each other between two open
// files of one process too). ha_kill_test.go runs them as processes.

// serving is serve running in the background.
type serving struct {
	log    *jsonLog
	ready  chan *instance
	cancel context.CancelFunc
	exited chan struct{}
	err    error // serve's result, once exited is closed
}

func serveBG(t *testing.T, cfg Config) *serving {
	t.Helper()
	cfg.LogFormat = "json"
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{log: newJSONLog(), ready: make(chan *instance, 1), cancel: cancel, exited: make(chan struct{})}
	go func() {
		s.err = serve(ctx, cfg, s.log, func(in *instance) { s.ready <- in })
		close(s.exited)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			t.Errorf("serve did not return within 20s of cancel")
		}
	})
	return s
}

// live waits for the broker to be ready.
func (s *serving) live(t *testing.T, d time.Duration) *instance {
	t.Helper()
	select {
	case in := <-s.ready:
		return in
	case <-s.exited:
		t.Fatalf("serve returned %v before it was ready:\n%s", s.err, s.log)
	case <-time.After(d):
		t.Fatalf("not ready within %v:\n%s", d, s.log)
	}
	return nil
}

// stop cancels serve and returns its result.
func (s *serving) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not return within 20s of cancel")
	}
	return s.err
}

func haConfig(t *testing.T, dir string, slot haSlot) Config {
	cfg := defaultConfig()
	cfg.DataDir = dir
	cfg.Stomp.Listen, cfg.MQTT.Listen, cfg.AMQP.Listen, cfg.Console.Listen = slot.stomp, slot.mqtt, slot.amqp, slot.console
	cfg.WebSocket.Listen, cfg.All.Listen = "", ""
	cfg.LogLevel = "debug"
	cfg.HA = haSharedStore
	cfg.HALockPoll = 50 * time.Millisecond
	cfg.HACheckInterval = 50 * time.Millisecond
	return cfg
}

func stompSend(t *testing.T, addr, dest, body string) {
	t.Helper()
	c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	if err := c.Send(dest, "text/plain", []byte(body), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true")); err != nil {
		t.Fatal(err)
	}
}

// stompReceive receives len(want) messages from dest on one
// subscription, acknowledging each, and checks their bodies in order.
func stompReceive(t *testing.T, addr, dest string, want ...string) []*gostomp.Message {
	t.Helper()
	c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	sub, err := c.Subscribe(dest, gostomp.AckClientIndividual)
	if err != nil {
		t.Fatal(err)
	}
	var got []*gostomp.Message
	for _, w := range want {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			if string(m.Body) != w {
				t.Fatalf("got %q from %s, want %q", m.Body, dest, w)
			}
			if err := c.Ack(m); err != nil {
				t.Fatal(err)
			}
			got = append(got, m)
		case <-time.After(10 * time.Second):
			t.Fatalf("no %q on %s within 10s", w, dest)
		}
	}
	return got
}

func TestHABackupWaitsWithoutListenersThenTakesOver(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	slots := newSlots(t)
	a := serveBG(t, haConfig(t, dir, slots[0]))
	a.live(t, 20*time.Second)
	stompSend(t, slots[0].stomp, "/queue/ha.kept", "kept across the takeover")
	if code, body := httpGet(t, "http://"+slots[0].console+"/api/v1/broker"); code != 200 ||
		!strings.Contains(body, `"role":"live"`) || !strings.Contains(body, `"status":"live, holding the store lock since `) {
		t.Fatalf("live broker's /api/v1/broker: %d %s", code, body)
	}

	b := serveBG(t, haConfig(t, dir, slots[1]))
	ev := b.log.waitFor("junction started as a backup: no messaging listener until it holds the store lock", 20*time.Second, b.exited)
	if ev == nil {
		t.Fatalf("the second broker did not become a backup:\n%s", b.log)
	}
	if ev["console"] != slots[1].console {
		t.Fatalf("backup's console %v, want %s", ev["console"], slots[1].console)
	}
	if open := accepting(slots[1].messaging()...); len(open) > 0 {
		t.Fatalf("the backup accepts connections on %v", open)
	}
	wantWait := "backup, waiting for the store lock held since "
	wantHolder := fmt.Sprintf(" pid %d (epoch 1)", os.Getpid())
	// The probe says the role and nothing else: it answers any Host
	// without a login. Whom the backup waits for is in the API.
	code, body := httpGet(t, "http://"+slots[1].console+"/readyz")
	if code != 503 || body != "not ready: backup\n" {
		t.Fatalf("backup's /readyz: %d %q, want 503 %q", code, body, "not ready: backup\n")
	}
	if code, body := httpGet(t, "http://"+slots[1].console+"/healthz"); code != 200 {
		t.Fatalf("backup's /healthz: %d %s", code, body)
	}
	if code, body := httpGet(t, "http://"+slots[1].console+"/api/v1/broker"); code != 200 || !strings.Contains(body, `"role":"backup"`) ||
		!strings.Contains(body, wantWait) || !strings.Contains(body, wantHolder) {
		t.Fatalf("backup's /api/v1/broker: %d %s", code, body)
	}
	// The backup's console checks the Host allow-list as the live one does.
	req, _ := http.NewRequest(http.MethodGet, "http://"+slots[1].console+"/api/v1/broker", nil)
	req.Host = "rebound.example"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("backup's console for another Host: %d, want 421", res.StatusCode)
	}
	if _, body := httpGet(t, "http://"+slots[1].console+"/metrics"); !strings.Contains(body, `junction_ha_role{role="backup"} 1`) ||
		!strings.Contains(body, "junction_ha_takeovers_total 0") {
		t.Fatalf("backup's metrics:\n%s", grepLines(body, "junction_ha_"))
	}

	// The live broker stops; the backup takes over on the same console
	// listener and has the durable message.
	if err := a.stop(t); err != nil {
		t.Fatalf("live broker's serve: %v", err)
	}
	b.live(t, 20*time.Second)
	took := b.log.find("took over the shared store: live")
	if took == nil || took["lock_to_ready"] == nil || took["epoch"] != 2.0 {
		t.Fatalf("no takeover line with lock_to_ready and epoch 2:\n%s", b.log)
	}
	if code, body := httpGet(t, "http://"+slots[1].console+"/readyz"); code != 200 {
		t.Fatalf("/readyz after the takeover: %d %s", code, body)
	}
	_, metrics := httpGet(t, "http://"+slots[1].console+"/metrics")
	for _, want := range []string{`junction_ha_role{role="live"} 1`, "junction_ha_takeovers_total 1", "junction_ha_epoch 2"} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("metrics after the takeover lack %q:\n%s", want, grepLines(metrics, "junction_ha_"))
		}
	}
	if strings.Contains(metrics, "junction_ha_last_takeover_timestamp_seconds 0\n") {
		t.Fatal("no time of the last takeover")
	}
	m := stompReceive(t, slots[1].stomp, "/queue/ha.kept", "kept across the takeover")[0]
	if m.Header.Get("redelivered") != "true" {
		t.Fatal("a message recovered by the takeover is not flagged redelivered")
	}
	st, err := ha.ReadState(dir)
	if err != nil || st.State != ha.StateLive || st.Epoch != 2 {
		t.Fatalf("state file after the takeover: %+v %v", st, err)
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Without --ha a data directory in use is refused at once, with the way
// out in the message; with it the broker waits (the test above).
func TestHAWithoutHARefusesADataDirectoryInUse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	slots := newSlots(t)
	a := serveBG(t, haConfig(t, dir, slots[0]))
	a.live(t, 20*time.Second)
	cfg := haConfig(t, dir, slots[1])
	cfg.HA = "off"
	c := serveBG(t, cfg)
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("a broker without --ha kept running on a data directory in use")
	}
	if c.err == nil || !strings.Contains(c.err.Error(), "is in use by another broker") || !strings.Contains(c.err.Error(), "--ha shared-store") {
		t.Fatalf("serve without --ha: %v", c.err)
	}
	if open := accepting(slots[1].messaging()...); len(open) > 0 {
		t.Fatalf("the refused broker left listeners on %v", open)
	}
}

// A broker started without --ha holds the journals but not the store
// lock: one with --ha takes the store lock, finds the journal locked,
// waits as a backup, and takes over when the other stops.
func TestHAWaitsForABrokerStartedWithoutHA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	slots := newSlots(t)
	cfg := haConfig(t, dir, slots[0])
	cfg.HA = "off"
	a := serveBG(t, cfg)
	a.live(t, 20*time.Second)
	b := serveBG(t, haConfig(t, dir, slots[1]))
	if b.log.waitFor("holding the store lock, but a journal of the data directory is locked by another process "+
		"(a broker started without --ha, or one that lost the store lock and is stopping); waiting", 20*time.Second, b.exited) == nil {
		t.Fatalf("no wait for the journal:\n%s", b.log)
	}
	if open := accepting(slots[1].messaging()...); len(open) > 0 {
		t.Fatalf("the waiting broker accepts connections on %v", open)
	}
	if code, body := httpGet(t, "http://"+slots[1].console+"/readyz"); code != 503 {
		t.Fatalf("/readyz while waiting for the journal: %d %q", code, body)
	}
	if code, body := httpGet(t, "http://"+slots[1].console+"/api/v1/broker"); code != 200 ||
		!strings.Contains(body, "waiting for a journal locked by another process") {
		t.Fatalf("/api/v1/broker while waiting for the journal: %d %q", code, body)
	}
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	b.live(t, 20*time.Second)
	if code, _ := httpGet(t, "http://"+slots[1].console+"/readyz"); code != 200 {
		t.Fatalf("/readyz after the takeover: %d", code)
	}
}

// A live broker that cannot prove it still holds the store stops:
// serve returns ErrLost, the listeners are closed, and the state file is
// left as the store's new holder would have it.
func TestHALiveBrokerStopsWhenItLosesTheStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(t *testing.T, dir string)
		want string
	}{
		{"lock file replaced", func(t *testing.T, dir string) {
			replaceFile(t, filepath.Join(dir, ha.LockFile))
		}, ha.LockFile + " was replaced"},
		{"journal LOCK replaced", func(t *testing.T, dir string) {
			replaceFile(t, filepath.Join(dir, "journal", "LOCK"))
		}, filepath.Join("journal", "LOCK") + " was replaced"},
		{"bindings LOCK removed", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "bindings", "LOCK")); err != nil {
				t.Fatal(err)
			}
		}, "no such file"},
		{"state names another holder", func(t *testing.T, dir string) {
			// Written as a broker writes it (ha.writeState: a new file
			// renamed over the old), not in place: the live broker reads
			// the file every poll and could catch an in-place write half
			// done (it then stops too, for an unreadable state).
			data := fmt.Sprintf(`{"state":"live","node":"elsewhere","pid":1,"epoch":9,"since":%q}`, time.Now().UTC().Format(time.RFC3339Nano))
			tmp := filepath.Join(dir, ha.StateFile+".test")
			if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(dir, ha.StateFile)); err != nil {
				t.Fatal(err)
			}
		}, "names elsewhere pid 1 (epoch 9)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			slot := newSlots(t)[0]
			a := serveBG(t, haConfig(t, dir, slot))
			a.live(t, 20*time.Second)
			before, _ := ha.ReadState(dir)
			tc.do(t, dir)
			after, _ := ha.ReadState(dir)
			select {
			case <-a.exited:
			case <-time.After(20 * time.Second):
				t.Fatalf("the broker kept serving after: %s\n%s", tc.name, a.log)
			}
			if !errors.Is(a.err, ha.ErrLost) || !strings.Contains(a.err.Error(), tc.want) {
				t.Fatalf("serve returned %v, want ErrLost mentioning %q", a.err, tc.want)
			}
			if a.log.find("lost the shared store: writing nothing more, closing the listeners and exiting") == nil {
				t.Fatalf("no log line for the loss:\n%s", a.log)
			}
			if open := accepting(slot.messaging()...); len(open) > 0 {
				t.Fatalf("listeners still open after the loss: %v", open)
			}
			if st, _ := ha.ReadState(dir); st != after || st.State != ha.StateLive {
				t.Fatalf("the lost broker rewrote the state file: %+v (was %+v, before the loss %+v)", st, after, before)
			}
		})
	}
}

// replaceFile puts a new file (another inode) at path.
func replaceFile(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path+".new", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// With users, a backup's console asks for a login as the live one does,
// with the same users file; the probes stay open.
func TestHABackupConsoleNeedsALogin(t *testing.T) {
	users := writeUsers(t)
	dir := filepath.Join(t.TempDir(), "data")
	slots := newSlots(t)
	cfgA := haConfig(t, dir, slots[0])
	cfgA.Users = users
	serveBG(t, cfgA).live(t, 20*time.Second)
	cfgB := haConfig(t, dir, slots[1])
	cfgB.Users = users
	b := serveBG(t, cfgB)
	if b.log.waitFor(backupMsg, 20*time.Second, b.exited) == nil {
		t.Fatalf("no backup:\n%s", b.log)
	}
	get := func(path, user, pass string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+slots[1].console+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for path, want := range map[string]int{"/api/v1/broker": 401, "/metrics": 401, "/healthz": 200, "/readyz": 503} {
		if got := get(path, "", ""); got != want {
			t.Errorf("%s without a login: %d, want %d", path, got, want)
		}
	}
	if got := get("/api/v1/broker", "alice", "wrong"); got != 401 {
		t.Errorf("a wrong password: %d", got)
	}
	if got := get("/api/v1/broker", "bob", bobPassword); got != 403 {
		t.Errorf("a user who may not manage: %d, want 403", got)
	}
	if got := get("/api/v1/broker", "alice", alicePassword); got != 200 {
		t.Errorf("alice: %d", got)
	}
}
