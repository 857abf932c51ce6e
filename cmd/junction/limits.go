package main

import (
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/transports"
)

// LimitsConfig holds the limits against abuse shared by every protocol
// (the frame and packet sizes are each protocol's own). See
// docs/security.md, "Limits".
type LimitsConfig struct {
	// MaxConnectionsPerIP caps the connections one source IP has open
	// on a listener; 0 means no limit.
	MaxConnectionsPerIP int `yaml:"max-connections-per-ip"`
	// ConnectionRatePerIP is the connection attempts per second one
	// source IP may make on a listener, in bursts of up to
	// ConnectionBurstPerIP; 0 means no limit.
	ConnectionRatePerIP  float64 `yaml:"connection-rate-per-ip"`
	ConnectionBurstPerIP int     `yaml:"connection-burst-per-ip"`
	// HandshakeTimeout bounds the protocol handshake: STOMP's CONNECT,
	// MQTT's CONNECT, AMQP's headers, SASL and open.
	HandshakeTimeout time.Duration `yaml:"handshake-timeout"`
	// MaxSubscriptions caps, per connection, STOMP subscriptions, MQTT
	// topic filters and AMQP links (consumers and producers); 0 means no
	// limit.
	MaxSubscriptions int `yaml:"max-subscriptions-per-connection"`
	// MaxAutoCreatedQueues caps the anycast queues one user's sends and
	// consumers auto-create; 0 means no limit.
	MaxAutoCreatedQueues int `yaml:"max-auto-created-queues-per-user"`
	// PreAuthMaxFrameSize bounds a frame or packet a client sends before
	// it has authenticated: STOMP's CONNECT, MQTT's CONNECT (AMQP's SASL
	// frames are at most 512 bytes by the protocol).
	PreAuthMaxFrameSize ByteSize `yaml:"preauth-max-frame-size"`
	// PreAuthBudget bounds the bytes held for every connection not yet
	// authenticated, together; 0 means no bound.
	PreAuthBudget ByteSize `yaml:"preauth-budget"`
	// FrameTimeout bounds how long one frame may take once its first
	// byte has arrived, plus one second per FrameMinRate bytes of it
	// received; 0 disables the bound.
	FrameTimeout time.Duration `yaml:"frame-timeout"`
	FrameMinRate ByteSize      `yaml:"frame-min-rate"`
}

func defaultLimits() LimitsConfig {
	return LimitsConfig{
		MaxConnectionsPerIP:  1000,
		ConnectionRatePerIP:  100,
		ConnectionBurstPerIP: 500,
		HandshakeTimeout:     10 * time.Second,
		MaxSubscriptions:     1000,
		MaxAutoCreatedQueues: 10000,
		PreAuthMaxFrameSize:  64 << 10,
		PreAuthBudget:        64 << 20,
		FrameTimeout:         30 * time.Second,
		FrameMinRate:         4 << 10,
	}
}

// validate reports values that parse but make no sense.
func (l *LimitsConfig) validate(bad func(path, format string, args ...any)) {
	if l.MaxConnectionsPerIP < 0 {
		bad("limits.max-connections-per-ip", "must be >= 0")
	}
	if l.ConnectionRatePerIP < 0 {
		bad("limits.connection-rate-per-ip", "must be >= 0")
	}
	if l.ConnectionBurstPerIP < 0 || l.ConnectionRatePerIP > 0 && l.ConnectionBurstPerIP < 1 {
		bad("limits.connection-burst-per-ip", "must be at least 1 with a connection rate")
	}
	if l.HandshakeTimeout <= 0 {
		bad("limits.handshake-timeout", "must be > 0")
	}
	if l.MaxSubscriptions < 0 {
		bad("limits.max-subscriptions-per-connection", "must be >= 0")
	}
	if l.MaxAutoCreatedQueues < 0 {
		bad("limits.max-auto-created-queues-per-user", "must be >= 0")
	}
	if l.PreAuthMaxFrameSize < 1024 {
		bad("limits.preauth-max-frame-size", "must be at least 1KiB")
	}
	if l.PreAuthBudget != 0 && l.PreAuthBudget < l.PreAuthMaxFrameSize {
		bad("limits.preauth-budget", "must be 0 (no bound) or at least preauth-max-frame-size")
	}
	if l.FrameTimeout < 0 {
		bad("limits.frame-timeout", "must be >= 0")
	}
	if l.FrameMinRate < 1 {
		bad("limits.frame-min-rate", "must be at least 1 byte (per second)")
	}
}

// frameTimeout maps the configuration's 0 (off) to the protocol
// packages' negative (their 0 means their default).
func (l *LimitsConfig) frameTimeout() time.Duration {
	if l.FrameTimeout == 0 {
		return -1
	}
	return l.FrameTimeout
}

// unlimitedIfZero maps the configuration's 0 (no limit) to the protocol
// packages' negative (their 0 means their default).
func unlimitedIfZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// rejectLog logs the connections a listener turns away by a limit
// without writing a line per connection, which a flood would turn into
// a flood of lines: the first rejection after a quiet interval is logged
// at once, then one line per interval at most, with the counts since the
// last line. The totals are in the listener's transports.Stats.
type rejectLog struct {
	log   zerolog.Logger
	every time.Duration

	mu         sync.Mutex
	last       time.Time                         // when the last line was written
	counts     [transports.RejectRate + 1]uint64 // rejections not yet logged, by reason
	lastRemote string                            // the last source rejected
}

// reject is the listener's Events.OnReject. It runs in the accept loop:
// it takes a lock briefly and writes a line once per interval at most.
func (r *rejectLog) reject(conn net.Conn, reason transports.RejectReason) {
	now := time.Now()
	r.mu.Lock()
	r.counts[reason]++
	if a := conn.RemoteAddr(); a != nil {
		r.lastRemote = a.String()
	}
	if now.Sub(r.last) < r.every {
		r.mu.Unlock()
		return
	}
	counts, remote, since := r.counts, r.lastRemote, r.last
	r.counts = [len(r.counts)]uint64{}
	r.last = now
	r.mu.Unlock()

	ev := r.log.Warn().Str("last_remote", remote)
	for reason, n := range counts {
		if n > 0 {
			ev = ev.Uint64(transports.RejectReason(reason).String(), n)
		}
	}
	if !since.IsZero() && now.Sub(since) < 2*r.every {
		ev = ev.Dur("over", now.Sub(since))
	}
	ev.Msg("connections rejected by limits (logged once per interval at most)")
}
