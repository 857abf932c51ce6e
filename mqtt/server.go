package mqtt

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core"
	inwait "github.com/junctionmq/junction/internal/inbound" // mqtt has a type inbound
)

// Config configures a Server. Zero fields take the defaults given.
type Config struct {
	// MaxPacketSize bounds an MQTT packet, fixed header included; it is
	// advertised to MQTT 5 clients as Maximum Packet Size. Default 10 MiB.
	// A larger packet closes the connection, after a DISCONNECT with
	// reason 0x95 (packet too large) on MQTT 5.
	MaxPacketSize int
	// MaxMessageSize bounds a PUBLISH whose payload the broker streams to
	// the large-message store as it arrives (one above the broker's
	// large-message threshold; see stream.go), fixed header included;
	// when the broker can stream, the larger of it and MaxPacketSize is
	// advertised as Maximum Packet Size. Default 256 MiB, MQTT's largest
	// packet.
	MaxMessageSize int
	// PreAuthMaxPacketSize bounds the CONNECT packet (read before the
	// client has authenticated) when smaller than MaxPacketSize: a larger
	// one gets CONNACK 0x95 (packet too large) on MQTT 5 and is closed.
	// Default 64 KiB, room for any will message and properties a device
	// sends. Its bytes are charged to the broker's pre-authentication
	// budget (core.Config.PreAuthBudget) as they arrive; a client the
	// budget has no room for gets CONNACK server busy (0x89 on MQTT 5,
	// 0x03 server unavailable on 3.1.1) or, before its version is known,
	// is closed.
	PreAuthMaxPacketSize int
	// MaxSessionExpiry caps how long a disconnected persistent session is
	// kept (an MQTT 5 client asking for longer is told the cap in
	// CONNACK). Default 1 hour.
	MaxSessionExpiry time.Duration
	// ReceiveMaximum is the number of QoS 1 and 2 publishes a client may
	// have unacknowledged toward the broker (advertised to MQTT 5 clients;
	// past it an MQTT 5 client is disconnected with 0x93, an MQTT 3.1.1
	// client's reads wait), and the most the broker has in flight to a
	// client (less if the client's own Receive Maximum is smaller).
	// Default 1024.
	ReceiveMaximum int
	// MaxSessionBytes is the byte budget of each subscription queue of a
	// client (what waits for a slow or offline device); overflow follows
	// the address's full policy: PAGE by default (durable messages go to
	// the page store when the broker persists; others are dropped), or
	// DROP (counted in the queue's Dropped statistic and logged), BLOCK,
	// FAIL. Default 64 MiB.
	MaxSessionBytes int64
	// ConnectTimeout bounds the wait for a connection's CONNECT packet.
	// Default 10s.
	ConnectTimeout time.Duration
	// FrameTimeout and FrameMinRate bound how long one packet may take
	// once its first byte has arrived: FrameTimeout, plus one second per
	// FrameMinRate bytes of it received (see core/guard). A client past
	// it is closed, after DISCONNECT 0x8D (keep alive timeout) on MQTT 5.
	// Defaults 30s and 4 KiB/s; a negative FrameTimeout disables the
	// bound.
	FrameTimeout time.Duration
	FrameMinRate int64
	// MaxSubscriptions bounds the topic filters one client holds; a
	// SUBSCRIBE filter past it is refused with SUBACK reason 0x97 (quota
	// exceeded) on MQTT 5, 0x80 on 3.1.1. Default 1000; negative means no
	// limit.
	MaxSubscriptions int
	// TopicAliasMaximum is the number of topic aliases an MQTT 5 client
	// may set on its publishes (advertised in CONNACK). Default 64;
	// negative means none.
	TopicAliasMaximum int
	// MaxKeepAlive, when set, caps the keep-alive of MQTT 5 clients: one
	// asking for none or for longer is told Server Keep Alive in CONNACK
	// and held to it. MQTT 3.1.1 has no way to tell a client, so its own
	// keep-alive applies.
	MaxKeepAlive time.Duration
	// MaxQoS is the highest QoS accepted, 1 or 2 (default 2). Below 2 it
	// is advertised to MQTT 5 clients as Maximum QoS; a subscription is
	// granted at most it, and a publish above it closes the connection
	// (DISCONNECT 0x9B on MQTT 5).
	MaxQoS int
	// WriteTimeout bounds each write to a client: one that reads nothing
	// for that long is disconnected. Default 30s.
	WriteTimeout time.Duration
	// SysInterval is how often the $SYS/broker/... topics are published.
	// Default 10s; negative disables them.
	SysInterval time.Duration
	// Version is the broker's version, for $SYS/broker/version.
	Version string
	// Logger receives the front-end's logs. Zero logs nothing.
	Logger zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxPacketSize <= 0 {
		c.MaxPacketSize = 10 << 20
	}
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = maxPacket
	}
	c.MaxMessageSize = min(c.MaxMessageSize, maxPacket)
	if c.PreAuthMaxPacketSize <= 0 {
		c.PreAuthMaxPacketSize = 64 << 10
	}
	if c.MaxSessionExpiry <= 0 {
		c.MaxSessionExpiry = time.Hour
	}
	if c.ReceiveMaximum <= 0 {
		c.ReceiveMaximum = 1024
	}
	c.ReceiveMaximum = min(c.ReceiveMaximum, 65535)
	if c.MaxSessionBytes <= 0 {
		c.MaxSessionBytes = 64 << 20
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.FrameTimeout == 0 {
		c.FrameTimeout = 30 * time.Second
	}
	if c.FrameTimeout < 0 {
		c.FrameTimeout = 0
	}
	if c.FrameMinRate <= 0 {
		c.FrameMinRate = 4 << 10
	}
	if c.MaxSubscriptions == 0 {
		c.MaxSubscriptions = 1000
	}
	switch {
	case c.TopicAliasMaximum == 0:
		c.TopicAliasMaximum = 64
	case c.TopicAliasMaximum < 0:
		c.TopicAliasMaximum = 0
	}
	c.TopicAliasMaximum = min(c.TopicAliasMaximum, 65535)
	if c.MaxQoS <= 0 || c.MaxQoS > 2 {
		c.MaxQoS = 2
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.SysInterval == 0 {
		c.SysInterval = 10 * time.Second
	}
	return c
}

// clientIDPrefix namespaces MQTT client ids among core's.
const clientIDPrefix = "mqtt/"

// Server is the MQTT front-end.
type Server struct {
	cfg Config
	b   *core.Broker
	log zerolog.Logger

	nextConn atomic.Uint64 // numbers connections (assigned client ids)
	started  time.Time

	mu      sync.Mutex
	closing bool                    // guarded by mu: Close has begun
	conns   map[*conn]struct{}      // guarded by mu: connections in ServeConn
	byID    map[string]*conn        // guarded by mu: the connection holding each MQTT client id
	away    map[string]*awaySession // guarded by mu: persistent sessions without a connection
	// ctxs are the contexts ServeConn was given, each watched once for
	// all the connections it serves (not once per connection).
	ctxs map[context.Context]*ctxWatch // guarded by mu
	wg   sync.WaitGroup                // ServeConn calls, timers' work and the $SYS loop

	done chan struct{} // closed by Close
	// sends is the context of the connections' sends, cancelled by
	// Close: a send waiting (for a cluster group's leader, say) ends at
	// once, so that a connection's handler returns and Close with it.
	sends       context.Context
	cancelSends context.CancelFunc
	closeOnce   sync.Once
	// workers run the connections' work (conn.inWorker).
	workers inwait.Workers
}

// New starts an MQTT front-end over broker b: it picks up the sessions a
// previous run left in core (expiring them in due time, publishing the
// wills of those that had one) and starts the $SYS topics.
func New(cfg Config, b *core.Broker) (*Server, error) {
	cfg = cfg.withDefaults()
	s := &Server{
		cfg: cfg, b: b, log: cfg.Logger, started: time.Now(),
		conns: make(map[*conn]struct{}), byID: make(map[string]*conn), away: make(map[string]*awaySession),
		ctxs: make(map[context.Context]*ctxWatch),
		done: make(chan struct{}),
	}
	s.sends, s.cancelSends = context.WithCancel(context.Background())
	if err := s.restore(); err != nil {
		return nil, err
	}
	if cfg.SysInterval > 0 {
		s.wg.Add(1)
		go s.sysLoop()
	}
	return s, nil
}

// ServeConn serves one MQTT connection until it ends, or until ctx is
// cancelled (then the connection is closed, after DISCONNECT 0x8B on
// MQTT 5).
func (s *Server) ServeConn(ctx context.Context, nc net.Conn) {
	c := &conn{s: s, nc: nc, ctx: ctx}
	// This goroutine only waits (see conn.serve); the work runs in
	// workers.
	c.serve()
	if !c.closed {
		c.inWorker(workClose)
	}
}

// open prepares a connection and registers it; c.err is set if it is
// refused (the server is closing).
func (c *conn) open() {
	s := c.s
	c.init()
	c.rd.yield = c.rd.raw != nil
	c.rd.setDeadline() // the CONNECT's, for the wait to come
	s.mu.Lock()
	if s.closing || c.ctx.Err() != nil {
		s.mu.Unlock()
		c.nc.Close()
		c.err = errServerClosing
		return
	}
	s.conns[c] = struct{}{}
	s.watchLocked(c.ctx)
	s.wg.Add(1)
	s.mu.Unlock()
}

// close ends a connection (conn.end) and forgets it.
func (c *conn) close() {
	c.end(c.err)
	s := c.s
	s.mu.Lock()
	delete(s.conns, c)
	s.unwatchLocked(c.ctx)
	s.mu.Unlock()
	s.wg.Done()
}

// ctxWatch stops the connections of a context when it ends.
type ctxWatch struct {
	n    int         // connections served with the context
	stop func() bool // context.AfterFunc's
}

// watchLocked counts a connection of ctx, watching ctx from its first.
func (s *Server) watchLocked(ctx context.Context) {
	w := s.ctxs[ctx]
	if w == nil {
		w = &ctxWatch{}
		w.stop = context.AfterFunc(ctx, func() { s.stopAll(ctx) })
		s.ctxs[ctx] = w
	}
	w.n++
}

// unwatchLocked forgets a connection of ctx, and ctx with its last.
func (s *Server) unwatchLocked(ctx context.Context) {
	if w := s.ctxs[ctx]; w != nil {
		if w.n--; w.n == 0 {
			w.stop()
			delete(s.ctxs, ctx)
		}
	}
}

// stopAll stops the connections served with ctx, which has ended.
func (s *Server) stopAll(ctx context.Context) {
	s.mu.Lock()
	var cs []*conn
	for c := range s.conns {
		if c.ctx == ctx {
			cs = append(cs, c)
		}
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.stop(stopShutdown)
	}
}

// Close disconnects every MQTT client (MQTT 5 clients get DISCONNECT
// 0x8B, server shutting down; connections still in their handshake are
// just closed), stops the session timers and the $SYS topics, and waits
// for all of it. Persistent sessions stay in core for the next start.
// Idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		conns := make([]*conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		for _, a := range s.away {
			a.stopTimers()
		}
		s.mu.Unlock()
		close(s.done)
		s.cancelSends()
		for _, c := range conns {
			c.stop(stopShutdown)
		}
		s.wg.Wait()
	})
	return nil
}

// isClosing reports whether Close has begun.
func (s *Server) isClosing() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Detect reports whether prefix starts an MQTT CONNECT packet: type 1 in
// the first byte, a remaining length, then the protocol name "MQTT"
// (3.1.1 and 5) or "MQIsdp" (3.1).
func Detect(prefix []byte) bool {
	if len(prefix) < 2 || prefix[0] != 0x10 {
		return false
	}
	i := 1
	for ; i < len(prefix) && i < 5 && prefix[i]&0x80 != 0; i++ {
	}
	i++ // last byte of the remaining length
	rest := prefix[min(i, len(prefix)):]
	return bytes.HasPrefix(rest, []byte("\x00\x04MQTT")) || bytes.HasPrefix(rest, []byte("\x00\x06MQIsdp"))
}

// claim makes c the connection of its client id. A connection holding
// the id is taken over: it is told so (DISCONNECT 0x8E on MQTT 5) and
// closed, and claim waits until it has let go of the session (bounded by
// the connect timeout). A persistent session waiting without a
// connection stops waiting (its expiry and delayed will are cancelled);
// claim returns it.
func (s *Server) claim(c *conn) (*awaySession, error) {
	deadline := time.Now().Add(s.cfg.ConnectTimeout)
	for {
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			return nil, errServerClosing
		}
		old := s.byID[c.clientID]
		if old == nil {
			s.byID[c.clientID] = c
			a := s.away[c.clientID]
			delete(s.away, c.clientID)
			s.mu.Unlock()
			if a != nil {
				a.stopTimers()
				a.wait() // a timer firing now finishes first
			}
			return a, nil
		}
		if old.gone == nil {
			old.gone = make(chan struct{})
		}
		gone := old.gone
		s.mu.Unlock()
		old.stop(stopTakenOver)
		select {
		case <-gone:
		case <-time.After(time.Until(deadline)):
			return nil, errTakeoverTimeout
		}
	}
}

var (
	errServerClosing   = errors.New("mqtt: server closing")
	errTakeoverTimeout = errors.New("mqtt: the previous connection of the client id did not end in time")
)

// validTopic reports whether topic may be published to: not empty, no
// wildcard characters [MQTT-3.3.2-2].
func validTopic(topic string) bool {
	return topic != "" && !strings.ContainsAny(topic, "+#")
}

// validFilter checks a topic filter's syntax [MQTT-4.7.1]: '#' only as
// the last level, '+' and '#' only as whole levels.
func validFilter(f string) bool {
	if f == "" {
		return false
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case l == "#":
			if i != len(levels)-1 {
				return false
			}
		case l == "+":
		case strings.ContainsAny(l, "+#"):
			return false
		}
	}
	return true
}

// splitShared splits an MQTT 5 shared subscription filter
// $share/GROUP/filter.
func splitShared(filter string) (group, f string, ok bool) {
	rest, ok := strings.CutPrefix(filter, "$share/")
	if !ok {
		return "", "", false
	}
	group, f, ok = strings.Cut(rest, "/")
	return group, f, ok && group != "" && f != "" && !strings.ContainsAny(group, "+#")
}
