package ha

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as the child process of the tests that need a second
// process: with HA_TEST_TRYLOCK=dir it tries the store lock of dir once
// and prints "locked" or "acquired".
func TestMain(m *testing.M) {
	if dir := os.Getenv("HA_TEST_TRYLOCK"); dir != "" {
		l, err := TryLock(dir)
		switch {
		case errors.Is(err, ErrLocked):
			fmt.Println("locked")
		case err != nil:
			fmt.Println("error:", err)
			os.Exit(1)
		default:
			fmt.Println("acquired")
			l.Release()
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// tryLockElsewhere asks another process whether it can take the lock.
func tryLockElsewhere(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HA_TEST_TRYLOCK="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func mustLock(t *testing.T, dir string) *Lock {
	t.Helper()
	l, err := TryLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release() })
	return l
}

func TestTryLockExcludesAndEpochsGrow(t *testing.T) {
	dir := t.TempDir()
	l1 := mustLock(t, dir)
	if _, err := TryLock(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second TryLock in this process: %v, want ErrLocked", err)
	}
	if got := tryLockElsewhere(t, dir); got != "locked" {
		t.Fatalf("another process: %q, want locked", got)
	}
	s, err := ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !s.same(l1.State()) || s.State != StateLive || s.Epoch != 1 || s.PID != os.Getpid() {
		t.Fatalf("state file %+v, lock %+v", s, l1.State())
	}
	if err := l1.Release(); err != nil {
		t.Fatal(err)
	}
	if s, _ := ReadState(dir); s.State != StateStopped || s.Epoch != 1 {
		t.Fatalf("after Release the state file says %+v, want stopped at epoch 1", s)
	}
	l2 := mustLock(t, dir)
	if l2.State().Epoch != 2 {
		t.Fatalf("next holder's epoch %d, want 2", l2.State().Epoch)
	}
	hb, err := os.ReadFile(filepath.Join(dir, LockFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(hb) != heartbeatSize || !strings.Contains(string(hb), fmt.Sprintf("pid %d epoch 2 checked ", os.Getpid())) {
		t.Fatalf("lock file heartbeat %q", hb)
	}
}

// The reason for OFD locks: with a classic POSIX lock, closing any
// descriptor of the lock file anywhere in the process drops the lock.
func TestClosingAnotherDescriptorKeepsTheLock(t *testing.T) {
	dir := t.TempDir()
	mustLock(t, dir)
	f, err := os.Open(filepath.Join(dir, LockFile))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := tryLockElsewhere(t, dir); got != "locked" {
		t.Fatalf("after closing another descriptor of the lock file, another process got %q, want locked", got)
	}
}

func TestAcquireWaitsForTheHolder(t *testing.T) {
	dir := t.TempDir()
	l1 := mustLock(t, dir)
	waited := make(chan State, 100)
	type result struct {
		l   *Lock
		err error
	}
	res := make(chan result, 1)
	go func() {
		l, err := Acquire(context.Background(), dir, 10*time.Millisecond, func(h State, err error) {
			if err != nil {
				t.Errorf("waiting reported %v", err)
			}
			select {
			case waited <- h:
			default:
			}
		})
		res <- result{l, err}
	}()
	select {
	case h := <-waited:
		if !h.same(l1.State()) {
			t.Fatalf("waiting for %+v, want the holder %+v", h, l1.State())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire never reported waiting")
	}
	select {
	case r := <-res:
		t.Fatalf("Acquire returned while the lock was held: %v", r.err)
	default:
	}
	l1.Release()
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatal(r.err)
		}
		defer r.l.Release()
		if r.l.State().Epoch != 2 {
			t.Fatalf("epoch %d after the takeover, want 2", r.l.State().Epoch)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not take the released lock")
	}
}

func TestAcquireStopsWithItsContext(t *testing.T) {
	dir := t.TempDir()
	mustLock(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Acquire(ctx, dir, 10*time.Millisecond, func(State, error) {}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v, want the context's error", err)
	}
}

// monitored starts a monitor checking every 20 ms and returns the
// channel its loss arrives on.
func monitored(t *testing.T, l *Lock, timeout time.Duration) chan error {
	t.Helper()
	lost := make(chan error, 1)
	l.Monitor(20*time.Millisecond, timeout, func(err error) { lost <- err })
	return lost
}

func expectLost(t *testing.T, lost chan error, within time.Duration, want string) {
	t.Helper()
	select {
	case err := <-lost:
		if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), want) {
			t.Fatalf("lost with %v, want ErrLost mentioning %q", err, want)
		}
	case <-time.After(within):
		t.Fatalf("the monitor did not report the loss (%s) within %v", want, within)
	}
}

func TestMonitorQuietWhileHeld(t *testing.T) {
	l := mustLock(t, t.TempDir())
	lost := monitored(t, l, 5*time.Second)
	select {
	case err := <-lost:
		t.Fatalf("monitor reported %v for a lock that is held", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
}

// Replacing the lock file lets a second broker lock the new file while
// the first still holds the old one: the first must notice.
func TestMonitorLockFileReplaced(t *testing.T) {
	dir := t.TempDir()
	l := mustLock(t, dir)
	lost := monitored(t, l, 5*time.Second)
	tmp := filepath.Join(dir, "other")
	if err := os.WriteFile(tmp, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, LockFile)); err != nil {
		t.Fatal(err)
	}
	if got := tryLockElsewhere(t, dir); got != "acquired" {
		t.Fatalf("another process on the replaced lock file: %q", got)
	}
	expectLost(t, lost, 5*time.Second, "was replaced")
	// A lost holder writes nothing more, not even "stopped".
	before, _ := os.ReadFile(filepath.Join(dir, StateFile))
	l.Release()
	after, _ := os.ReadFile(filepath.Join(dir, StateFile))
	if string(before) != string(after) {
		t.Fatalf("Release after the loss rewrote the state file:\n%s\n%s", before, after)
	}
}

func TestMonitorLockFileRemoved(t *testing.T) {
	dir := t.TempDir()
	l := mustLock(t, dir)
	lost := monitored(t, l, 5*time.Second)
	os.Remove(filepath.Join(dir, LockFile))
	expectLost(t, lost, 5*time.Second, "the lock file")
}

func TestMonitorWatchedFileReplaced(t *testing.T) {
	dir := t.TempDir()
	jl := filepath.Join(dir, "journal", "LOCK")
	os.MkdirAll(filepath.Dir(jl), 0o755)
	if err := os.WriteFile(jl, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l := mustLock(t, dir)
	if err := l.Watch(jl); err != nil {
		t.Fatal(err)
	}
	lost := monitored(t, l, 5*time.Second)
	select {
	case err := <-lost:
		t.Fatalf("lost before anything changed: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := os.WriteFile(jl+".new", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(jl+".new", jl); err != nil {
		t.Fatal(err)
	}
	expectLost(t, lost, 5*time.Second, jl+" was replaced")
}

func TestMonitorStateNamesAnotherHolder(t *testing.T) {
	dir := t.TempDir()
	l := mustLock(t, dir)
	lost := monitored(t, l, 5*time.Second)
	other := l.State()
	other.Epoch++
	other.PID++
	if err := writeState(dir, other); err != nil {
		t.Fatal(err)
	}
	expectLost(t, lost, 5*time.Second, "not this broker")
}

// A check that hangs (here: the state file is a FIFO nobody writes, as a
// read on a dead NFS mount would hang) is reported at its deadline.
func TestMonitorCheckDeadline(t *testing.T) {
	dir := t.TempDir()
	l := mustLock(t, dir)
	fifo := filepath.Join(dir, StateFile)
	os.Remove(fifo)
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	lost := monitored(t, l, 200*time.Millisecond)
	expectLost(t, lost, 10*time.Second, "did not finish within 200ms")
	if d := time.Since(start); d < 200*time.Millisecond+pauseGrace {
		t.Fatalf("reported after %v, before the deadline and its grace", d)
	}
	// Unblock the hung read: open the FIFO for writing and close it.
	if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
		w.Close()
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
}

// A failing write of the heartbeat (here: through a read-only
// descriptor, as a lost NFS lock makes writes fail with EIO) is a loss.
func TestMonitorWriteFails(t *testing.T) {
	dir := t.TempDir()
	l := mustLock(t, dir)
	ro, err := os.Open(filepath.Join(dir, LockFile))
	if err != nil {
		t.Fatal(err)
	}
	locked := l.f
	l.f = ro
	lost := monitored(t, l, 5*time.Second)
	expectLost(t, lost, 5*time.Second, "bad file descriptor")
	l.loop.Wait()
	l.inflight.Wait()
	l.f = locked
	ro.Close()
}
