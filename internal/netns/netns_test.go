//go:build linux

package netns

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const port = 7000

// echoIn serves an echo on port inside node id's namespace until the
// test ends.
func echoIn(t *testing.T, n *Net, id uint64) {
	t.Helper()
	l, err := n.Listen(id, n.Addr(id, port))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// echoOK reports whether a round trip on c completes within d.
func echoOK(c net.Conn, d time.Duration) bool {
	c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("ping")); err != nil {
		return false
	}
	buf := make([]byte, 4)
	_, err := io.ReadFull(c, buf)
	return err == nil && string(buf) == "ping"
}

// connects reports whether node from can open a connection to node to's
// echo and use it, within d.
func connects(t *testing.T, n *Net, from, to uint64, d time.Duration) bool {
	t.Helper()
	c, err := n.Dial(from, n.Addr(to, port), d)
	if err != nil {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Logf("dial %d → %d: %v", from, to, err)
		}
		return false
	}
	defer c.Close()
	return echoOK(c, d)
}

// okWait and cutWait bound the checks: a working path answers well within okWait; a
// cut one must stay silent for cutWait (there is nothing to wait for).
const (
	okWait  = 10 * time.Second
	cutWait = 500 * time.Millisecond
)

func expect(t *testing.T, n *Net, from, to uint64, want bool) {
	t.Helper()
	d := okWait
	if !want {
		d = cutWait
	}
	if got := connects(t, n, from, to, d); got != want {
		t.Errorf("%d → %d: connected %v, want %v", from, to, got, want)
	}
}

func eachFirewall(t *testing.T, f func(t *testing.T, fw Firewall)) {
	SkipUnavailable(t)
	for _, fw := range Firewalls() {
		t.Run(string(fw), func(t *testing.T) { f(t, fw) })
	}
}

func TestPartitionAndHeal(t *testing.T) {
	eachFirewall(t, func(t *testing.T, fw Firewall) {
		n := Setup(t, fw, 1, 2, 3)
		for id := uint64(1); id <= 3; id++ {
			echoIn(t, n, id)
		}
		expect(t, n, 2, 1, true)
		held, err := n.Dial(2, n.Addr(1, port), okWait)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		if !echoOK(held, okWait) {
			t.Fatal("no echo on a fresh connection")
		}

		if err := n.Partition([]uint64{1}, []uint64{2, 3}); err != nil {
			t.Fatal(err)
		}
		expect(t, n, 2, 3, true)
		expect(t, n, 3, 2, true)
		expect(t, n, 2, 1, false)
		expect(t, n, 1, 2, false)
		expect(t, n, 1, 3, false)
		expect(t, n, 3, 1, false)
		// An established connection stalls...
		if echoOK(held, cutWait) {
			t.Error("an established connection crossed the partition")
		}

		if err := n.Heal(); err != nil {
			t.Fatal(err)
		}
		expect(t, n, 2, 1, true)
		expect(t, n, 1, 3, true)
		// ...and resumes after the heal: TCP retransmits what was lost
		// (the echo of the ping written during the cut comes first).
		held.SetReadDeadline(time.Now().Add(okWait))
		buf := make([]byte, 4)
		if _, err := io.ReadFull(held, buf); err != nil || string(buf) != "ping" {
			t.Errorf("the held connection after the heal: %q, %v", buf, err)
		}
		held.SetReadDeadline(time.Time{})
		if !echoOK(held, okWait) {
			t.Error("the held connection did not resume after the heal")
		}

		if err := n.Isolate(3); err != nil {
			t.Fatal(err)
		}
		expect(t, n, 1, 2, true)
		expect(t, n, 3, 1, false)
		expect(t, n, 2, 3, false)
	})
}

func TestOneWay(t *testing.T) {
	eachFirewall(t, func(t *testing.T, fw Firewall) {
		n := Setup(t, fw, 1, 2)
		echoIn(t, n, 1)
		echoIn(t, n, 2)
		held, err := n.Dial(1, n.Addr(2, port), okWait)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		if err := n.OneWay(1, 2); err != nil {
			t.Fatal(err)
		}
		// Node 2's connections to 1 work, replies included...
		expect(t, n, 2, 1, true)
		// ...node 1's do not, new or established.
		expect(t, n, 1, 2, false)
		if echoOK(held, cutWait) {
			t.Error("node 1's established connection crossed a one-way cut")
		}
		if err := n.Heal(); err != nil {
			t.Fatal(err)
		}
		expect(t, n, 1, 2, true)
	})
}

func TestCommandRunsInside(t *testing.T) {
	n := Setup(t, "", 1)
	out, err := n.Command(1, "ip", "-o", "-4", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), n.IP(1)+"/24") {
		t.Errorf("inside the namespace, eth0 is %q; want %s", out, n.IP(1))
	}
	// A process still running at Close is killed with its namespace.
	sleeper := n.Command(1, "sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the process in the namespace survived Close")
	}
	if _, err := os.Stat(runDir + "/" + n.Name(1)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the namespace is still there: %v", err)
	}
}

func TestDelay(t *testing.T) {
	n := Setup(t, "", 1, 2)
	echoIn(t, n, 1)
	const d = 100 * time.Millisecond
	if err := n.Delay(2, d); errors.Is(err, ErrNoNetem) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
	c, err := n.Dial(2, n.Addr(1, port), okWait)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if !echoOK(c, okWait) {
		t.Fatal("no echo")
	}
	if took := time.Since(start); took < d {
		t.Errorf("a round trip took %v with %v of delay", took, d)
	}
	if err := n.Delay(2, 0); err != nil {
		t.Fatal(err)
	}
}

// namespaces lists the namespaces whose names start with prefix.
func namespaces(t *testing.T, prefix string) []string {
	t.Helper()
	entries, err := os.ReadDir(runDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

func TestCloseAndSweepLeaveNothing(t *testing.T) {
	SkipUnavailable(t)
	links := func() string {
		out, err := exec.Command("ip", "-o", "link").Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	hostLinks := links()

	n, err := New("", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := namespaces(t, n.prefix); len(got) != 3 {
		t.Fatalf("namespaces %v, want a bridge and two nodes", got)
	}
	if links() != hostLinks {
		t.Error("the host's namespace gained interfaces")
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := namespaces(t, n.prefix); len(got) != 0 {
		t.Errorf("left behind: %v", got)
	}

	// A namespace of a run whose process is gone is swept; one of a
	// live process is not.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := "jn" + strconv.Itoa(dead.Process.Pid) + "-0badc0de-n1"
	live := "jn" + strconv.Itoa(os.Getpid()) + "-0badc0de-n1"
	for _, name := range []string{stale, live} {
		if err := run("ip", "netns", "add", name); err != nil {
			t.Fatal(err)
		}
	}
	defer run("ip", "netns", "del", live)
	if err := Sweep(); err != nil {
		t.Fatal(err)
	}
	if got := namespaces(t, stale); len(got) != 0 {
		t.Errorf("a dead run's namespace survived Sweep: %v", got)
	}
	if got := namespaces(t, live); len(got) != 1 {
		t.Errorf("Sweep removed a live run's namespace")
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of
// ending the goroutine.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Skip(args ...any)          { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatalf(f string, a ...any) { r.failed = fmt.Sprintf(f, a...) }

// TestRequired: without JUNCTION_REQUIRE_NETNS=1 a machine without
// namespaces skips the test; with it, the test fails, so that CI cannot
// pass with its partition tests unrun.
func TestRequired(t *testing.T) {
	err := fmt.Errorf("%w: not root", ErrUnavailable)
	for _, c := range []struct {
		env        string
		skip, fail bool
	}{{"", true, false}, {"0", true, false}, {"1", false, true}} {
		t.Setenv(RequireEnv, c.env)
		r := &recorder{TB: t}
		unavailable(r, err)
		if (r.skipped != "") != c.skip || (r.failed != "") != c.fail {
			t.Errorf("%s=%q: skipped %q, failed %q; want skip %v, fail %v", RequireEnv, c.env, r.skipped, r.failed, c.skip, c.fail)
		}
		if c.fail && !strings.Contains(r.failed, "not root") {
			t.Errorf("the failure %q does not say why", r.failed)
		}
	}
}
