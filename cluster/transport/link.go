package transport

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// errUnexpectedData: an acceptor wrote after the handshake.
var errUnexpectedData = errors.New("transport: the peer wrote on a send-only connection")

// link is our side of one peer and lane: the queue Send fills, the
// goroutine that dials and writes it, and the counters of both
// directions.
type link struct {
	p        *peer
	lane     Lane
	maxFrame int
	limit    int // QueueBytes

	mu      sync.Mutex
	up      bool  // a connection is established: Send queues
	pending queue // frames the writer has not taken yet
	spare   queue // the writer's: the previous pending, emptied
	lastErr string
	inbound net.Conn // the peer's newest accepted connection on this lane

	wake chan struct{} // capacity 1: frames were queued

	framesOut, bytesOut, framesIn, bytesIn, drops, reconnects atomic.Uint64
}

// send queues frame; see Transport.Send.
func (l *link) send(frame []byte) bool {
	if len(frame) > l.maxFrame {
		l.drops.Add(1)
		return false
	}
	l.mu.Lock()
	if !l.up || l.pending.bytes+4+len(frame) > l.limit {
		l.mu.Unlock()
		l.drops.Add(1)
		l.p.t.unreachable(l.p)
		return false
	}
	l.pending.push(frame)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

// run dials, writes until the connection fails, and dials again, until
// the peer is removed or the Transport closed.
func (l *link) run() {
	t := l.p.t
	defer t.wg.Done()
	defer l.p.wg.Done()
	ctx := l.p.ctx
	log := t.log.With().Uint64("peer", l.p.id).Stringer("lane", l.lane).Logger()
	backoff := minBackoff
	established := false
	failing := false // the last attempt failed, and was logged
	v := t.hs.version
	for ctx.Err() == nil {
		addr := *l.p.addr.Load()
		conn, raw, err := l.connect(ctx, addr, v)
		if old := (oldPeer{}); errors.As(err, &old) && old.version < v {
			// A node of an older version, during an upgrade: speak its
			// version from the next attempt on (at once), until this
			// connection ends.
			log.Debug().Uint16("version", old.version).Str("addr", addr).Msg("cluster peer speaks an older handshake")
			v = old.version
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			switch {
			case errors.Is(err, ErrMismatch):
				// CheckParams logged it, once.
				l.setError(err)
			case l.setError(err) || !failing:
				log.Warn().Err(err).Str("addr", addr).Msg("cluster peer unreachable")
			}
			failing = true
			select {
			case <-time.After(jitter(backoff)):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		if established {
			l.reconnects.Add(1)
		}
		established = true
		if failing {
			log.Info().Str("addr", addr).Msg("cluster peer reachable again")
		} else {
			log.Debug().Str("addr", addr).Msg("cluster peer connected")
		}
		failing = false
		start := time.Now()
		err = l.serve(ctx, conn, raw)
		v = t.hs.version // an older peer may have been upgraded meanwhile
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("connection closed")
		}
		l.setError(err)
		log.Info().Err(err).Str("addr", addr).Msg("cluster connection to peer lost")
		// A connection that breaks at once (a peer refusing us after the
		// handshake, say) must not make us redial in a tight loop.
		if time.Since(start) > maxBackoff {
			backoff = minBackoff
		}
		select {
		case <-time.After(jitter(backoff)):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// setError records err as the link's last error and reports whether it
// differs from the previous one.
func (l *link) setError(err error) bool {
	s := err.Error()
	l.mu.Lock()
	defer l.mu.Unlock()
	changed := s != l.lastErr
	l.lastErr = s
	return changed
}

// connect dials addr and runs TLS and the dialer's handshake. It returns
// the connection to write on and the TCP connection beneath it.
func (l *link) connect(ctx context.Context, addr string, v uint16) (net.Conn, net.Conn, error) {
	t := l.p.t
	raw, err := l.dial(ctx, addr)
	if err != nil {
		return nil, nil, err
	}
	// Tracked, raw is closed by Close or RemovePeer, which ends the
	// handshake at once.
	if !t.conns.add(raw, nil) || !l.p.conns.add(raw, nil) {
		l.forget(raw)
		return nil, nil, ErrClosed
	}
	conn, err := l.handshake(ctx, raw, addr, v)
	if err != nil {
		l.forget(raw)
		return nil, nil, err
	}
	return conn, raw, nil
}

func (l *link) dial(ctx context.Context, addr string) (net.Conn, error) {
	t := l.p.t
	if t.cfg.Dial == nil {
		d := net.Dialer{Timeout: t.cfg.DialTimeout}
		return d.DialContext(ctx, "tcp", addr)
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	return t.cfg.Dial(ctx, addr)
}

// handshake runs TLS, when configured, and the dialer's handshake of
// version v on raw.
func (l *link) handshake(ctx context.Context, raw net.Conn, addr string, v uint16) (net.Conn, error) {
	t := l.p.t
	_ = raw.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	conn := raw
	var binding []byte
	if t.tlsDial != nil {
		cfg := t.tlsDial
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("TLS: %w", err)
		}
		var err error
		if binding, err = exportBinding(tc); err != nil {
			return nil, fmt.Errorf("TLS: %w", err)
		}
		conn = tc
	}
	if err := t.hs.dialVersion(conn, l.p.id, l.lane, binding, v); err != nil {
		return nil, err
	}
	_ = raw.SetDeadline(time.Time{})
	return conn, nil
}

// serve writes queued frames on conn until it fails or ctx is done. A
// watcher goroutine reads conn, on which the acceptor never writes after
// the handshake, so that a peer closing is noticed even when we are idle.
// serve closes raw, the TCP connection beneath conn (closing a TLS conn
// would first try to send an alert, which can block on a stalled peer).
func (l *link) serve(ctx context.Context, conn, raw net.Conn) error {
	l.mu.Lock()
	l.up = true
	l.mu.Unlock()

	dead := make(chan struct{})
	var watchErr error
	go func() {
		defer close(dead)
		var b [1]byte
		if _, err := conn.Read(b[:]); err != nil {
			watchErr = err
		} else {
			watchErr = errUnexpectedData
		}
	}()
	err := l.writeLoop(ctx, conn, dead)
	l.forget(raw)
	<-dead
	if err == nil {
		err = watchErr
	}

	l.mu.Lock()
	l.up = false
	lost := l.pending.frames
	l.pending.reset()
	l.mu.Unlock()
	if lost > 0 {
		l.drops.Add(uint64(lost))
		l.p.t.unreachable(l.p)
	}
	return err
}

// forget closes raw, a dialled connection, and stops tracking it.
func (l *link) forget(raw net.Conn) {
	raw.Close()
	l.p.t.conns.remove(raw)
	l.p.conns.remove(raw)
}

var keepalive = binary.BigEndian.AppendUint32(nil, keepaliveLen)

// writeLoop takes everything queued at each wake-up and writes it at
// once. It returns nil when the watcher saw conn end (dead closed), and
// the write error otherwise.
func (l *link) writeLoop(ctx context.Context, conn net.Conn, dead <-chan struct{}) error {
	idle := l.p.t.cfg.IdleTimeout
	timer := time.NewTimer(idle / 3)
	defer timer.Stop()
	for {
		ping := false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-dead:
			return nil
		case <-l.wake:
		case <-timer.C:
			ping = true
		}
		l.mu.Lock()
		l.pending, l.spare = l.spare, l.pending
		l.mu.Unlock()
		q := &l.spare // the writer's alone until the next swap
		if q.bytes == 0 {
			if !ping {
				continue
			}
			q.write(keepalive)
		}
		n, size := q.frames, q.bytes
		if err := q.writeTo(conn, idle); err != nil {
			l.drops.Add(uint64(n))
			l.p.t.unreachable(l.p)
			return err
		}
		l.framesOut.Add(uint64(n))
		l.bytesOut.Add(uint64(size))
		timer.Reset(idle / 3)
	}
}

// inboundOpened records the peer's new connection on this lane; an older
// one still open is closed, since the peer only writes on its newest.
func (l *link) inboundOpened(raw net.Conn) {
	l.mu.Lock()
	old := l.inbound
	l.inbound = raw
	l.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

func (l *link) inboundClosed(raw net.Conn) {
	l.mu.Lock()
	if l.inbound == raw {
		l.inbound = nil
	}
	l.mu.Unlock()
}

// readLoop hands the frames read from conn (raw beneath TLS) to the
// Handler until conn fails.
func (l *link) readLoop(raw, conn net.Conn) error {
	t := l.p.t
	idle := t.cfg.IdleTimeout
	fr := newFrameReader(conn, l.maxFrame)
	var deadline time.Time
	for {
		// Moving the deadline costs a timer update; do it only when an
		// eighth of the idle time has passed.
		if now := time.Now(); deadline.Sub(now) < idle-idle/8 {
			deadline = now.Add(idle)
			_ = raw.SetReadDeadline(deadline)
		}
		frame, keepalive, err := fr.next()
		if err != nil {
			return err
		}
		if keepalive {
			continue
		}
		l.framesIn.Add(1)
		l.bytesIn.Add(uint64(len(frame)))
		t.cfg.Handler(l.p.id, l.lane, frame)
	}
}

func (l *link) stats() LaneStats {
	l.mu.Lock()
	s := LaneStats{
		Connected:   l.up,
		Inbound:     l.inbound != nil,
		QueuedBytes: l.pending.bytes,
		LastError:   l.lastErr,
	}
	l.mu.Unlock()
	s.FramesOut = l.framesOut.Load()
	s.BytesOut = l.bytesOut.Load()
	s.FramesIn = l.framesIn.Load()
	s.BytesIn = l.bytesIn.Load()
	s.Drops = l.drops.Load()
	s.Reconnects = l.reconnects.Load()
	return s
}
