package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// File names in the data directory.
const (
	LockFile  = "ha.lock"
	StateFile = "ha.state"
)

var (
	// ErrLocked is returned by TryLock while another broker holds the
	// store lock.
	ErrLocked = errors.New("ha: the store lock is held by another broker")
	// ErrLost is reported by Monitor (wrapped with the reason) when the
	// holder can no longer prove that it holds the store.
	ErrLost = errors.New("ha: lost the store")
)

// States written to the state file.
const (
	StateLive    = "live"    // held by a broker
	StateStopped = "stopped" // released by a graceful stop
)

// State is the content of the state file: who holds the store, or last
// held it, and since when.
type State struct {
	State string    `json:"state"`
	Node  string    `json:"node"` // host name
	PID   int       `json:"pid"`
	Epoch uint64    `json:"epoch"` // one more at each new holder
	Since time.Time `json:"since"` // when the holder took the lock
}

// String describes the holder for people: "host pid 12 (epoch 3)".
func (s State) String() string {
	if s.Epoch == 0 {
		return "an unknown broker (no readable " + StateFile + ")"
	}
	return fmt.Sprintf("%s pid %d (epoch %d)", s.Node, s.PID, s.Epoch)
}

// same reports whether a and b name one holder. Since is part of it, so
// a holder after a state file that could not be read (epoch starting
// again at 1) is still told apart from an older one.
func (s State) same(o State) bool {
	return s.Node == o.Node && s.PID == o.PID && s.Epoch == o.Epoch && s.Since.Equal(o.Since)
}

// ReadState reads the state file of the data directory dir.
func ReadState(dir string) (State, error) {
	var s State
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, fmt.Errorf("ha: %s: %w", filepath.Join(dir, StateFile), err)
	}
	return s, nil
}

// writeState replaces the state file atomically and durably.
func writeState(dir string, s State) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	tmp := filepath.Join(dir, StateFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, StateFile))
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("ha: writing %s: %w", StateFile, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// lockErr turns a failed fcntl into ErrLocked when another holder has
// the lock.
func lockErr(f *os.File, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EACCES):
		return ErrLocked
	default:
		return &os.PathError{Op: "fcntl lock", Path: f.Name(), Err: err}
	}
}

// heartbeatSize is the fixed length of the heartbeat line in the lock
// file, so each rewrite is one small write in place.
const heartbeatSize = 256

// Lock is a held store lock. Its methods may be called from any
// goroutine.
type Lock struct {
	dir   string
	f     *os.File    // the locked file; one descriptor for the Lock's life
	fi    os.FileInfo // the locked file's identity
	state State

	mu      sync.Mutex
	watched []watchedFile
	lost    bool // set once Monitor reported ErrLost

	stop      chan struct{}
	loop      sync.WaitGroup // the monitor goroutine
	inflight  sync.WaitGroup // a check started by the monitor
	timeout   time.Duration  // the monitor's check deadline (0: no monitor)
	closeOnce sync.Once
	closeErr  error
}

type watchedFile struct {
	path string
	fi   os.FileInfo
}

// TryLock takes the store lock of the data directory dir (created if
// needed) without waiting. It returns ErrLocked while another broker
// holds it. Once it holds the lock it writes the state file with the
// next epoch and the first heartbeat.
func TryLock(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("ha: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	var f *os.File
	var fi os.FileInfo
	// The file may be replaced between our open and our lock; a lock on
	// a file no longer at the path guards nothing, so try again.
	for attempt := 0; ; attempt++ {
		var err error
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("ha: %w", err)
		}
		if err := setlk(f); err != nil {
			f.Close()
			return nil, err
		}
		fi, err = f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("ha: %w", err)
		}
		cur, err := os.Stat(path)
		if err == nil && os.SameFile(fi, cur) {
			break
		}
		unlk(f)
		f.Close()
		if attempt == 2 {
			return nil, fmt.Errorf("ha: %s keeps being replaced while it is locked", path)
		}
	}
	prev, _ := ReadState(dir) // unreadable: start the epochs again (Since still tells holders apart)
	host, _ := os.Hostname()
	l := &Lock{dir: dir, f: f, fi: fi, stop: make(chan struct{}), state: State{
		State: StateLive, Node: host, PID: os.Getpid(), Epoch: prev.Epoch + 1,
		Since: time.Now().UTC().Round(0),
	}}
	err := writeState(dir, l.state)
	if err == nil {
		err = f.Truncate(heartbeatSize)
	}
	if err == nil {
		err = l.heartbeat()
	}
	if err != nil {
		unlk(f)
		f.Close()
		return nil, err
	}
	return l, nil
}

// Acquire takes the store lock, trying every poll until it succeeds or
// ctx is done (then it returns ctx's error). After each attempt that
// finds the lock held it calls waiting with the holder as the state file
// describes it (the zero State when unreadable) and a nil error; an
// attempt that fails otherwise is retried too, and reported to waiting
// with its error, except the first, which Acquire returns (a data
// directory that cannot be opened at all is a configuration error, not
// something to wait for).
func Acquire(ctx context.Context, dir string, poll time.Duration, waiting func(holder State, err error)) (*Lock, error) {
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for first := true; ; first = false {
		l, err := TryLock(dir)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, ErrLocked) {
			if first {
				return nil, err
			}
			waiting(State{}, err)
		} else {
			holder, _ := ReadState(dir)
			waiting(holder, nil)
		}
		t.Reset(poll)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// State returns the state this holder wrote.
func (l *Lock) State() State { return l.state }

// Dir returns the data directory.
func (l *Lock) Dir() string { return l.dir }

// Watch records the identity (device and inode) of files that must stay
// the same while the lock is held; Check fails once one of them is
// replaced or removed. The broker watches the journals' LOCK files: a
// second journal could lock a new file at the same path.
func (l *Lock) Watch(paths ...string) error {
	ws := make([]watchedFile, 0, len(paths))
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("ha: watch: %w", err)
		}
		ws = append(ws, watchedFile{p, fi})
	}
	l.mu.Lock()
	l.watched = append(l.watched, ws...)
	l.mu.Unlock()
	return nil
}

// Check proves once that the lock still guards the store: the lock file
// and every watched file are the files they were, the state file names
// this holder, and the heartbeat is written and synced. Its errors wrap
// ErrLost.
func (l *Lock) Check() error {
	path := filepath.Join(l.dir, LockFile)
	cur, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: the lock file: %w", ErrLost, err)
	}
	if !os.SameFile(l.fi, cur) {
		return fmt.Errorf("%w: the lock file %s was replaced by another file", ErrLost, path)
	}
	l.mu.Lock()
	watched := l.watched
	l.mu.Unlock()
	for _, w := range watched {
		cur, err := os.Stat(w.path)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrLost, err)
		}
		if !os.SameFile(w.fi, cur) {
			return fmt.Errorf("%w: %s was replaced by another file", ErrLost, w.path)
		}
	}
	s, err := ReadState(l.dir)
	if err != nil {
		return fmt.Errorf("%w: reading the state file: %w", ErrLost, err)
	}
	if !s.same(l.state) {
		return fmt.Errorf("%w: the state file names %s since %s, not this broker (%s)",
			ErrLost, s, s.Since.Format(time.RFC3339Nano), l.state)
	}
	if err := l.heartbeat(); err != nil {
		return fmt.Errorf("%w: %w", ErrLost, err)
	}
	return nil
}

// heartbeat rewrites the lock file's line and syncs it: proof that the
// store still takes this holder's writes.
func (l *Lock) heartbeat() error {
	line := fmt.Sprintf("%s pid %d epoch %d checked %s", l.state.Node, l.state.PID, l.state.Epoch,
		time.Now().UTC().Format(time.RFC3339Nano))
	buf := make([]byte, heartbeatSize)
	for i := range buf {
		buf[i] = ' '
	}
	copy(buf, line)
	buf[heartbeatSize-1] = '\n'
	if _, err := l.f.WriteAt(buf, 0); err != nil {
		return err
	}
	if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
		return &os.PathError{Op: "fdatasync", Path: l.f.Name(), Err: err}
	}
	return nil
}

// Release stops the monitor and gives the lock up. After a graceful run
// it first marks the state file "stopped"; after ErrLost it writes
// nothing (the store may have another holder by now) and only closes its
// descriptor. A monitor check that hangs (a dead NFS mount) is given the
// monitor's deadline; past it the descriptor is left open, since closing
// it under a running check could hand its number to another file, and
// the process is expected to exit. Release is idempotent.
func (l *Lock) Release() error {
	l.closeOnce.Do(func() {
		close(l.stop)
		l.loop.Wait()
		done := make(chan struct{})
		go func() { l.inflight.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(max(l.timeout, time.Second)):
			l.closeErr = errors.New("ha: a store check still hangs; the lock file is left open")
			return
		}
		l.mu.Lock()
		lost := l.lost
		l.mu.Unlock()
		var errs []error
		if !lost {
			if s, err := ReadState(l.dir); err == nil && s.same(l.state) {
				st := l.state
				st.State = StateStopped
				errs = append(errs, writeState(l.dir, st))
			}
		}
		errs = append(errs, unlk(l.f), l.f.Close())
		l.closeErr = errors.Join(errs...)
	})
	return l.closeErr
}
