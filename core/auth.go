package core

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"
	"weak"
)

// Authenticator checks a client's credentials when it connects. A
// front-end calls it with what the protocol carried (STOMP login and
// passcode, MQTT username and password, AMQP SASL PLAIN) and uses the
// returned user name as the session's identity.
type Authenticator interface {
	// Authenticate returns the user name for the credentials, or an error
	// wrapping ErrAuthFailed.
	Authenticate(ctx context.Context, login, passcode string) (user string, err error)
}

// AllowAll accepts every client; the user is the login as given (empty
// for anonymous). It is the default, meant for loopback-only brokers.
type AllowAll struct{}

// Authenticate implements Authenticator.
func (AllowAll) Authenticate(_ context.Context, login, _ string) (string, error) {
	return login, nil
}

// Failed-login backoff: the first failure from an IP costs
// LoginBackoffMin, each further one doubles it, up to LoginBackoffMax.
// A success from the IP, or LoginBackoffQuiet without a failure, forgets
// its failures.
const (
	LoginBackoffMin   = 100 * time.Millisecond
	LoginBackoffMax   = 5 * time.Second
	LoginBackoffQuiet = time.Minute
)

// AuthenticateFrom is Authenticate for a client connecting from remote
// (host:port, as net.Conn.RemoteAddr gives it), with a penalty for
// guessing: each failed login from an IP delays the answer to that IP's
// logins (the failed one and those that arrive while the delay runs),
// doubling from LoginBackoffMin to LoginBackoffMax; a success resets it.
// Every failure is logged at warn with the login and the remote address
// (never the passcode). The wait ends early when ctx is done.
func (b *Broker) AuthenticateFrom(ctx context.Context, remote, login, passcode string) (string, error) {
	lim := limiterOf(b)
	ip := remoteIP(remote)
	if err := lim.wait(ctx, ip); err != nil {
		return "", fmt.Errorf("%w: %v", ErrAuthFailed, err)
	}
	user, err := b.Authenticate(ctx, login, passcode)
	if err == nil {
		lim.succeeded(ip)
		return user, nil
	}
	delay := lim.failed(ip)
	name := login
	if name == "" {
		name = "(anonymous)"
	}
	b.log.Warn().Str("user", name).Str("remote", remote).Dur("delay", delay).AnErr("reason", err).
		Msg("authentication failed")
	b.emit(Event{Type: EventAuthFailure, User: login, RemoteAddr: remote, Reason: err.Error()})
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return "", err
}

// remoteIP is the host part of a host:port address, or the whole string.
func remoteIP(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// loginLimiter holds one broker's failed-login state per IP.
type loginLimiter struct {
	mu    sync.Mutex
	ips   map[string]*loginFailures
	calls int // since the last sweep
}

type loginFailures struct {
	n     int       // consecutive failures
	last  time.Time // of the last failure
	until time.Time // logins from the IP wait until then
}

// limiters maps each broker (weakly, so a closed broker is collected) to
// its limiter; the Broker struct has no field for it.
var limiters sync.Map // weak.Pointer[Broker] → *loginLimiter

func limiterOf(b *Broker) *loginLimiter {
	key := weak.Make(b)
	if v, ok := limiters.Load(key); ok {
		return v.(*loginLimiter)
	}
	v, loaded := limiters.LoadOrStore(key, &loginLimiter{ips: map[string]*loginFailures{}})
	if !loaded {
		runtime.AddCleanup(b, func(k weak.Pointer[Broker]) { limiters.Delete(k) }, key)
	}
	return v.(*loginLimiter)
}

// wait blocks until the IP's current delay has passed.
func (l *loginLimiter) wait(ctx context.Context, ip string) error {
	l.mu.Lock()
	var until time.Time
	if f := l.ips[ip]; f != nil {
		until = f.until
	}
	l.mu.Unlock()
	d := time.Until(until)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *loginLimiter) succeeded(ip string) {
	l.mu.Lock()
	delete(l.ips, ip)
	l.mu.Unlock()
}

// failed counts a failure and returns the delay it earns.
func (l *loginLimiter) failed(ip string) time.Duration {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(now)
	f := l.ips[ip]
	if f == nil || now.Sub(f.last) > LoginBackoffQuiet {
		f = &loginFailures{}
		l.ips[ip] = f
	}
	f.n++
	f.last = now
	d := LoginBackoffMax
	if f.n <= 16 {
		d = min(LoginBackoffMin<<(f.n-1), LoginBackoffMax)
	}
	f.until = now.Add(d)
	return d
}

// sweepLocked forgets, every 256 failures, the IPs quiet for long enough.
func (l *loginLimiter) sweepLocked(now time.Time) {
	l.calls++
	if l.calls < 256 {
		return
	}
	l.calls = 0
	for ip, f := range l.ips {
		if now.Sub(f.last) > LoginBackoffQuiet {
			delete(l.ips, ip)
		}
	}
}
