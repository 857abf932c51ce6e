package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/freeport"
)

// jsonLog collects a broker's JSON log lines (an io.Writer for serve, or
// the stderr of a broker process) and lets a test wait for a message.
type jsonLog struct {
	mu     sync.Mutex
	buf    []byte
	events []map[string]any
	text   strings.Builder // every line but debug, for failure output
	notify chan struct{}   // closed at each new event
}

func newJSONLog() *jsonLog { return &jsonLog{notify: make(chan struct{})} }

func (l *jsonLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := l.buf[:i]
		l.buf = l.buf[i+1:]
		var ev map[string]any
		if json.Unmarshal(line, &ev) != nil {
			l.text.Write(line)
			l.text.WriteByte('\n')
			continue
		}
		if ev["level"] != "debug" {
			l.text.Write(line)
			l.text.WriteByte('\n')
		}
		l.events = append(l.events, ev)
		close(l.notify)
		l.notify = make(chan struct{})
	}
	return len(p), nil
}

func (l *jsonLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

// find returns the first event with this message, or nil.
func (l *jsonLog) find(msg string) map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.events {
		if ev["message"] == msg {
			return ev
		}
	}
	return nil
}

// waitFor waits for an event with this message until d passes or stop
// is closed (nil: never).
func (l *jsonLog) waitFor(msg string, d time.Duration, stop <-chan struct{}) map[string]any {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		ch := l.notify
		l.mu.Unlock()
		if ev := l.find(msg); ev != nil {
			return ev
		}
		select {
		case <-ch:
		case <-stop:
			return l.find(msg)
		case <-deadline.C:
			return nil
		}
	}
}

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago (brokers that list each other need fixed addresses).
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := freeport.Addrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// refused reports the addresses among addrs that accept a connection.
func accepting(addrs ...string) []string {
	var open []string
	for _, a := range addrs {
		if a == "" {
			continue
		}
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			open = append(open, a)
		}
	}
	return open
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	res, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// haSlot is one broker's fixed addresses in a shared-store pair.
type haSlot struct{ stomp, mqtt, amqp, console string }

func newSlots(t testing.TB) [2]haSlot {
	a := freeAddrs(t, 8)
	return [2]haSlot{{a[0], a[1], a[2], a[3]}, {a[4], a[5], a[6], a[7]}}
}

func (s haSlot) messaging() []string { return []string{s.stomp, s.mqtt, s.amqp} }

// haProc is a broker process of a shared-store pair.
type haProc struct {
	cmd  *exec.Cmd
	slot haSlot
	log  *jsonLog
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done
}

// startHAProc starts the binary with --ha shared-store on dataDir with
// the slot's addresses (and extra flags) and returns at once.
func startHAProc(t testing.TB, bin, dataDir string, slot haSlot, extra ...string) *haProc {
	t.Helper()
	args := append([]string{"--ha", "shared-store", "--data-dir", dataDir,
		"--stomp", slot.stomp, "--mqtt", slot.mqtt, "--amqp", slot.amqp, "--console", slot.console,
		"--ws", "", "--all", "", "--log-format", "json", "--log-level", "debug", "--stomp-heart-beat-min", "0"}, extra...)
	p := &haProc{cmd: exec.Command(bin, args...), slot: slot, log: newJSONLog(), done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		io.Copy(p.log, stderr)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// await waits for a log message of the process; it fails the test if
// the process exits or d passes first.
func (p *haProc) await(t testing.TB, msg string, d time.Duration) map[string]any {
	t.Helper()
	ev := p.log.waitFor(msg, d, p.done)
	if ev == nil {
		select {
		case <-p.done:
			t.Fatalf("broker %s exited (%v) before %q:\n%s", p.slot.stomp, p.err, msg, p.log)
		default:
			t.Fatalf("broker %s: no %q within %v:\n%s", p.slot.stomp, msg, d, p.log)
		}
	}
	return ev
}

func (p *haProc) kill9() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *haProc) terminate(t testing.TB) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("broker %s exited with %v after SIGTERM:\n%s", p.slot.stomp, p.err, p.log)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("broker %s did not stop within 30s of SIGTERM", p.slot.stomp)
	}
}

// createQueue creates a durable anycast queue through the console API.
func createQueue(t *testing.T, console, name string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	res, err := c.Post("http://"+console+"/api/v1/queues", "application/json",
		strings.NewReader(fmt.Sprintf(`{"name":%q,"routingType":"anycast"}`, name)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create queue %s: %d %s", name, res.StatusCode, body)
	}
}

func haRounds(t *testing.T) int {
	if s := os.Getenv("JUNCTION_HA_ROUNDS"); s != "" {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
			t.Fatalf("JUNCTION_HA_ROUNDS=%q", s)
		}
		return n
	}
	return 2
}
