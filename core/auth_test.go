package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// onePassword accepts alice with "right".
type onePassword struct{}

func (onePassword) Authenticate(_ context.Context, login, pass string) (string, error) {
	if login == "alice" && pass == "right" {
		return login, nil
	}
	return "", fmt.Errorf("%w: no", ErrAuthFailed)
}

type authLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *authLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *authLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAuthenticateFromBacksOff(t *testing.T) {
	var logs authLogBuffer
	b, err := New(Config{Authenticator: onePassword{}, Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	timed := func(remote, login, pass string) (time.Duration, error) {
		start := time.Now()
		_, err := b.AuthenticateFrom(ctx, remote, login, pass)
		return time.Since(start), err
	}
	// Failures from one IP: 100ms, 200ms, 400ms.
	for i, want := range []time.Duration{100, 200, 400} {
		d, err := timed("10.0.0.1:1234", "alice", "wrong-"+fmt.Sprint(i))
		if !errors.Is(err, ErrAuthFailed) {
			t.Fatalf("failure %d: %v", i, err)
		}
		if want *= time.Millisecond; d < want || d > want+300*time.Millisecond {
			t.Errorf("failure %d took %v, want about %v", i, d, want)
		}
	}
	// Another IP is not slowed down by them.
	if d, err := timed("10.0.0.2:1", "alice", "right"); err != nil || d > 50*time.Millisecond {
		t.Errorf("other IP: %v, %v", d, err)
	}
	// A success resets the IP.
	if _, err := timed("10.0.0.1:999", "alice", "right"); err != nil {
		t.Fatal(err)
	}
	if d, _ := timed("10.0.0.1:5", "bob", "x"); d > 400*time.Millisecond {
		t.Errorf("after a success the first failure took %v", d)
	}
	out := logs.String()
	if !strings.Contains(out, `"user":"alice"`) || !strings.Contains(out, `"remote":"10.0.0.1:1234"`) {
		t.Errorf("failure not logged with user and remote:\n%s", out)
	}
	if strings.Contains(out, "wrong-") {
		t.Errorf("the log holds a password:\n%s", out)
	}
}

func TestAuthenticateFromCapAndCancel(t *testing.T) {
	lim := &loginLimiter{ips: map[string]*loginFailures{}}
	var d time.Duration
	for range 20 {
		d = lim.failed("ip")
	}
	if d != LoginBackoffMax {
		t.Fatalf("delay after 20 failures %v, want %v", d, LoginBackoffMax)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := lim.wait(ctx, "ip"); err == nil || time.Since(start) > time.Second {
		t.Fatalf("wait: %v after %v", err, time.Since(start))
	}
}
