package transport

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Lane is a class of traffic with its own connection per peer, queue and
// frame limit.
type Lane uint8

const (
	LaneRaft Lane = iota // raft messages and heartbeats: small, latency-sensitive
	LaneRPC              // forwarded client traffic
	LaneBulk             // snapshots: large frames
	NumLanes             // the number of lanes
)

func (l Lane) String() string {
	switch l {
	case LaneRaft:
		return "raft"
	case LaneRPC:
		return "rpc"
	case LaneBulk:
		return "bulk"
	}
	return fmt.Sprintf("lane(%d)", uint8(l))
}

// Defaults for zero fields of [Config] and [LaneConfig].
const (
	DefaultDialTimeout      = 2 * time.Second
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultIdleTimeout      = 15 * time.Second
	DefaultMaxFrame         = 16 << 20 // LaneRaft and LaneRPC
	DefaultQueueBytes       = 32 << 20
	DefaultBulkMaxFrame     = 64 << 20
	DefaultBulkQueueBytes   = 128 << 20

	// MinSecret is the shortest cluster secret New accepts.
	MinSecret = 16
	// maxFrameLimit keeps a length clear of the keepalive marker.
	maxFrameLimit = 1 << 30
	// unreachableEvery is the least time between two OnUnreachable calls
	// for one peer.
	unreachableEvery = 100 * time.Millisecond
	// Reconnection backoff: from minBackoff doubling to maxBackoff, each
	// wait drawn in [d/2, d).
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
)

var (
	// ErrInvalidConfig: New was given a Config it cannot run (wrapped with
	// the detail).
	ErrInvalidConfig = errors.New("transport: invalid config")
	// ErrClosed is returned by AddPeer after Close.
	ErrClosed = errors.New("transport: closed")
)

// Config configures a [Transport]. NodeID, Listen (or Listener), Secret
// and Handler are required.
type Config struct {
	// NodeID is this node's id, not zero.
	NodeID uint64
	// Listen is the address to accept peers on, host:port
	// ("127.0.0.1:0" in tests). Ignored when Listener is set.
	Listen string
	// Listener, when set, is used instead of listening on Listen; the
	// Transport closes it.
	Listener net.Listener
	// Peers maps the other nodes' ids to their addresses. Only these nodes
	// may connect; see AddPeer and RemovePeer for changes.
	Peers map[uint64]string
	// TLS, when set, wraps every connection in TLS 1.3 with certificates
	// verified both ways against RootCAs (and ClientCAs, RootCAs when
	// nil), which must hold the cluster's CA and nothing else: the node
	// certificate (Certificates or GetCertificate/GetClientCertificate)
	// serves both as server and as client certificate, so it needs both
	// extended key usages. nil means plain TCP, for tests.
	TLS *tls.Config
	// Secret is the cluster secret both sides of every connection prove
	// they know; at least MinSecret bytes (32 random bytes recommended).
	Secret []byte
	// Handler receives every frame, in the reading connection's goroutine
	// (one per peer and lane, so calls for different connections run
	// concurrently). frame is valid only during the call; Handler must
	// not block long, or that connection's reading stalls.
	Handler func(from uint64, lane Lane, frame []byte)
	// OnUnreachable, when set, is called when frames for peer to were
	// dropped (link down, queue full, lost with a broken connection): the
	// place for raft's ReportUnreachable. It is called from the
	// Transport's own goroutine, never from Send, at most once per peer
	// every 100 ms; it must not block.
	OnUnreachable func(to uint64)
	// Lanes holds the limits of each lane; zero fields take defaults.
	Lanes [NumLanes]LaneConfig
	// DialTimeout bounds a TCP connect (default DefaultDialTimeout).
	DialTimeout time.Duration
	// Dial, when set, opens the TCP connections to peers (addr is a
	// peer's address) instead of a net.Dialer; tests use it to dial from
	// inside a network namespace. ctx carries DialTimeout.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// HandshakeTimeout bounds TLS plus the cluster handshake on both
	// sides (default DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// IdleTimeout: an accepted connection silent for this long, or a
	// megabyte not written within it, closes the connection. Idle
	// dialers send a keepalive every IdleTimeout/3 (default
	// DefaultIdleTimeout).
	IdleTimeout time.Duration
	// Params, at most ParamsLen bytes, are what this node tells each
	// peer in the handshake of every connection, for CheckParams (the
	// cluster puts in them what must agree across its nodes: the number
	// of groups, how addresses are placed, a digest of the routing
	// configuration). SetParams changes them for later connections.
	Params []byte
	// CheckParams, when set, judges a peer's Params on every connection,
	// both ways: on the acceptor before it answers, on the dialer once
	// the acceptor has proved the secret. theirs is nil for a peer that
	// speaks handshake version 1, which has none. An error refuses the
	// connection (counted in Stats.Refused as "params", the dialer's
	// error wraps ErrMismatch and CheckParams's); the transport logs the
	// refusals at debug level only, so CheckParams logs what it judges.
	// It must not block.
	CheckParams func(peer uint64, theirs []byte) error
	// Logger receives connection events; the zero value logs nothing.
	Logger zerolog.Logger

	// handshakeVersion, when set, is the newest handshake version the
	// Transport speaks: tests make an old node with 1.
	handshakeVersion uint16
}

// LaneConfig holds one lane's limits, per peer.
type LaneConfig struct {
	// MaxFrame is the largest frame, in bytes, sent or accepted on the
	// lane (default DefaultMaxFrame, DefaultBulkMaxFrame for LaneBulk).
	MaxFrame int
	// QueueBytes bounds the frames queued for one peer's connection,
	// 4 bytes of header each included; Send drops past it (default
	// DefaultQueueBytes, DefaultBulkQueueBytes for LaneBulk). At least
	// MaxFrame+4.
	QueueBytes int
}

// Transport holds the links of one node to its peers. Its methods are
// safe for concurrent use.
type Transport struct {
	cfg       Config
	log       zerolog.Logger
	ln        net.Listener
	hs        *handshaker
	tlsAccept *tls.Config // nil without TLS
	tlsDial   *tls.Config

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine

	mu     sync.Mutex // guards peers writes and closed
	closed bool
	peers  atomic.Pointer[map[uint64]*peer] // copy on write, read by Send

	conns connSet // every connection, dialled or accepted

	refused   [numReasons]atomic.Uint64
	refuseLog [numReasons]atomic.Int64 // unix nanos of the last log line per reason
	unreach   chan struct{}            // kicks notifyLoop (capacity 1)

	closeOnce sync.Once
	closeErr  error
}

// New checks cfg, listens, and starts dialing every peer.
func New(cfg Config) (*Transport, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	t := &Transport{cfg: cfg, log: cfg.Logger.With().Str("component", "cluster-transport").Uint64("node", cfg.NodeID).Logger()}
	t.hs = newHandshaker(cfg.NodeID, cfg.Secret, rand.Reader, t.isPeer)
	t.hs.setParams(cfg.Params)
	t.hs.check = cfg.CheckParams
	if cfg.handshakeVersion != 0 {
		t.hs.version = cfg.handshakeVersion
	}
	if cfg.TLS != nil {
		t.tlsAccept, t.tlsDial = tlsConfigs(cfg.TLS)
	}
	t.ln = cfg.Listener
	if t.ln == nil {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("transport: %w", err)
		}
		t.ln = ln
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.unreach = make(chan struct{}, 1)
	empty := map[uint64]*peer{}
	t.peers.Store(&empty)

	t.mu.Lock()
	for id, addr := range cfg.Peers {
		t.addPeerLocked(id, addr)
	}
	t.wg.Add(1)
	go t.acceptLoop()
	if cfg.OnUnreachable != nil {
		t.wg.Add(1)
		go t.notifyLoop()
	}
	t.mu.Unlock()
	t.log.Info().Str("listen", t.ln.Addr().String()).Bool("tls", cfg.TLS != nil).Int("peers", len(cfg.Peers)).Msg("cluster transport started")
	return t, nil
}

func (c *Config) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.NodeID == 0:
		return bad("NodeID is zero")
	case c.Listener == nil && c.Listen == "":
		return bad("no Listen address")
	case len(c.Secret) < MinSecret:
		return bad("the cluster secret has %d bytes, want at least %d", len(c.Secret), MinSecret)
	case c.Handler == nil:
		return bad("no Handler")
	case len(c.Params) > ParamsLen:
		return bad("Params has %d bytes, at most %d", len(c.Params), ParamsLen)
	}
	for id, addr := range c.Peers {
		if err := checkPeer(c.NodeID, id, addr); err != nil {
			return bad("%v", err)
		}
	}
	for i, l := range c.Lanes {
		if l.MaxFrame < 0 || l.MaxFrame > maxFrameLimit || l.QueueBytes < 0 {
			return bad("lane %s: MaxFrame %d, QueueBytes %d", Lane(i), l.MaxFrame, l.QueueBytes)
		}
	}
	if c.TLS != nil {
		if c.TLS.RootCAs == nil {
			return bad("TLS without RootCAs (the cluster CA)")
		}
		if len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil {
			return bad("TLS without a node certificate")
		}
	}
	return nil
}

func checkPeer(self, id uint64, addr string) error {
	switch {
	case id == 0:
		return errors.New("peer id 0")
	case id == self:
		return fmt.Errorf("peer %d is this node", id)
	case addr == "":
		return fmt.Errorf("peer %d has no address", id)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	for i := range c.Lanes {
		l := &c.Lanes[i]
		if l.MaxFrame == 0 {
			l.MaxFrame = DefaultMaxFrame
			if Lane(i) == LaneBulk {
				l.MaxFrame = DefaultBulkMaxFrame
			}
		}
		if l.QueueBytes == 0 {
			l.QueueBytes = max(DefaultQueueBytes, l.MaxFrame+4)
			if Lane(i) == LaneBulk {
				l.QueueBytes = max(DefaultBulkQueueBytes, l.MaxFrame+4)
			}
		}
		// A queue must hold the largest frame, or that frame could never
		// be sent.
		l.QueueBytes = max(l.QueueBytes, l.MaxFrame+4)
	}
}

// tlsConfigs derives the acceptor's and the dialer's configs: TLS 1.3
// (for the exported keying material) and client certificates required
// and verified against the cluster CA.
func tlsConfigs(c *tls.Config) (accept, dial *tls.Config) {
	accept = c.Clone()
	accept.MinVersion = tls.VersionTLS13
	accept.ClientAuth = tls.RequireAndVerifyClientCert
	if accept.ClientCAs == nil {
		accept.ClientCAs = c.RootCAs
	}
	dial = c.Clone()
	dial.MinVersion = tls.VersionTLS13
	dial.InsecureSkipVerify = false
	return accept, dial
}

// SetParams changes the parameters this node sends in the handshakes
// of its later connections (at most ParamsLen bytes; more are cut).
// Established connections are not checked again.
func (t *Transport) SetParams(p []byte) { t.hs.setParams(p) }

// Addr returns the address the Transport accepts peers on.
func (t *Transport) Addr() net.Addr { return t.ln.Addr() }

func (t *Transport) peer(id uint64) *peer { return (*t.peers.Load())[id] }

func (t *Transport) isPeer(id uint64) bool { return t.peer(id) != nil }

// Send queues frame (copied) for peer to on lane and returns at once. It
// returns false, and counts a drop, when the frame cannot be queued: the
// peer or lane is unknown (not counted), the link is down, the lane's
// queue is full, or the frame is larger than the lane's MaxFrame. Except
// for an unknown peer or a frame too large, a drop also schedules
// OnUnreachable.
func (t *Transport) Send(to uint64, lane Lane, frame []byte) bool {
	if lane >= NumLanes {
		return false
	}
	p := t.peer(to)
	if p == nil {
		return false
	}
	return p.links[lane].send(frame)
}

// AddPeer adds node id at addr, or changes the address of a known peer
// (used from the next connection on; an established connection stays,
// since its peer proved its id).
func (t *Transport) AddPeer(id uint64, addr string) error {
	if err := checkPeer(t.cfg.NodeID, id, addr); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if p := t.peer(id); p != nil {
		p.addr.Store(&addr)
		return nil
	}
	t.addPeerLocked(id, addr)
	return nil
}

func (t *Transport) addPeerLocked(id uint64, addr string) {
	p := newPeer(t, id, addr)
	old := *t.peers.Load()
	next := make(map[uint64]*peer, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[id] = p
	t.peers.Store(&next)
	for _, l := range p.links {
		t.wg.Add(1)
		p.wg.Add(1)
		go l.run()
	}
}

// RemovePeer forgets node id: its links and accepted connections close,
// its frames are no longer accepted, and RemovePeer returns once its
// goroutines have ended. Removing an unknown peer does nothing.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	p := t.peer(id)
	if p != nil {
		old := *t.peers.Load()
		next := make(map[uint64]*peer, len(old))
		for k, v := range old {
			if k != id {
				next[k] = v
			}
		}
		t.peers.Store(&next)
	}
	t.mu.Unlock()
	if p != nil {
		p.cancel()
		p.conns.closeAll()
		p.wg.Wait()
	}
}

// Stats is a snapshot of a Transport's counters.
type Stats struct {
	Peers []PeerStats // by ID
	// Refused counts connections refused during the handshake, by reason:
	// "magic" (not our protocol), "version", "lane", "receiver" (addressed
	// to another node id), "sender" (not a peer), "proof" (wrong secret),
	// "timeout", "tls", "io" (failed or closed mid-handshake), "params"
	// (CheckParams refused the peer's parameters).
	Refused map[string]uint64
}

// PeerStats describes one peer.
type PeerStats struct {
	ID    uint64
	Addr  string
	Lanes [NumLanes]LaneStats
}

// LaneStats describes the connections with one peer on one lane.
type LaneStats struct {
	Connected   bool // our connection to the peer is up: Send queues
	Inbound     bool // the peer's connection to us is up
	QueuedBytes int  // waiting for our writer
	FramesOut   uint64
	BytesOut    uint64 // written, length headers and keepalives included
	FramesIn    uint64
	BytesIn     uint64 // payload bytes received
	// Drops counts frames Send refused (link down, queue full, too large)
	// or that were lost with a broken connection.
	Drops uint64
	// Reconnects counts connections established after the first.
	Reconnects uint64
	// LastError is the last reason our connection failed or could not be
	// made; it stays after a reconnection.
	LastError string
}

// Stats returns the current counters.
func (t *Transport) Stats() Stats {
	var s Stats
	for _, p := range *t.peers.Load() {
		ps := PeerStats{ID: p.id, Addr: *p.addr.Load()}
		for i, l := range p.links {
			ps.Lanes[i] = l.stats()
		}
		s.Peers = append(s.Peers, ps)
	}
	sort.Slice(s.Peers, func(i, j int) bool { return s.Peers[i].ID < s.Peers[j].ID })
	s.Refused = make(map[string]uint64)
	for r := reasonMagic; r < numReasons; r++ {
		if n := t.refused[r].Load(); n > 0 {
			s.Refused[r.String()] = n
		}
	}
	return s
}

// Close stops accepting, closes every connection and returns once every
// goroutine of the Transport has ended. Frames still queued are dropped.
// It is idempotent; later calls return the first one's result.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		t.mu.Unlock()
		t.cancel()
		t.conns.closeAll()
		if err := t.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			t.closeErr = fmt.Errorf("transport: %w", err)
		}
		t.wg.Wait()
		t.log.Info().Msg("cluster transport closed")
	})
	return t.closeErr
}

// acceptLoop accepts connections until Close.
func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	var delay time.Duration
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary (out of file descriptors...): back off as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Warn().Err(err).Dur("retry_in", delay).Msg("cluster accept failed")
			select {
			case <-time.After(delay):
			case <-t.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		t.wg.Add(1)
		go t.serveInbound(c)
	}
}

// serveInbound runs the acceptor's handshake on raw, then reads frames
// until the connection fails, the peer is removed or Close.
func (t *Transport) serveInbound(raw net.Conn) {
	defer t.wg.Done()
	defer raw.Close()
	if !t.conns.add(raw, nil) {
		return
	}
	defer t.conns.remove(raw)

	_ = raw.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	var conn net.Conn = raw
	var binding []byte
	if t.tlsAccept != nil {
		tc := tls.Server(raw, t.tlsAccept)
		if err := tc.HandshakeContext(t.ctx); err != nil {
			why := reasonTLS
			if ioReason(err) == reasonTimeout {
				why = reasonTimeout
			}
			t.refuse(raw, why, 0, err)
			return
		}
		var err error
		if binding, err = exportBinding(tc); err != nil {
			t.refuse(raw, reasonTLS, 0, err)
			return
		}
		conn = tc
	}
	from, lane, why, err := t.hs.accept(conn, binding)
	if err != nil {
		if t.ctx.Err() == nil {
			t.refuse(raw, why, from, err)
		}
		return
	}
	_ = raw.SetDeadline(time.Time{})
	p := t.peer(from)
	if p == nil {
		return // removed meanwhile
	}
	if !p.conns.add(raw, &p.wg) {
		return // removed meanwhile
	}
	defer p.wg.Done()
	defer p.conns.remove(raw)
	l := p.links[lane]
	l.inboundOpened(raw)
	defer l.inboundClosed(raw)
	t.log.Debug().Uint64("peer", from).Stringer("lane", lane).Str("remote", raw.RemoteAddr().String()).Msg("cluster peer connected")

	err = l.readLoop(raw, conn)
	if t.ctx.Err() != nil || p.ctx.Err() != nil {
		return
	}
	ev := t.log.Info()
	if errors.Is(err, ErrFrameTooLarge) {
		ev = t.log.Error()
	}
	ev.Err(err).Uint64("peer", from).Stringer("lane", lane).Str("remote", raw.RemoteAddr().String()).Msg("cluster connection from peer closed")
}

// exportBinding returns the keying material that binds the handshake's
// proofs to this TLS session.
func exportBinding(tc *tls.Conn) ([]byte, error) {
	cs := tc.ConnectionState()
	return cs.ExportKeyingMaterial(exportLabel, nil, exportLen)
}

// refuse counts a refused handshake and logs it, at most once a second
// per reason (at debug level for "params": CheckParams logs those).
func (t *Transport) refuse(raw net.Conn, why reason, from uint64, err error) {
	t.refused[why].Add(1)
	if why == reasonParams {
		t.log.Debug().Err(err).Str("reason", why.String()).Uint64("claimed_node", from).Msg("cluster connection refused")
		return
	}
	now := time.Now().UnixNano()
	last := t.refuseLog[why].Load()
	if now-last < int64(time.Second) || !t.refuseLog[why].CompareAndSwap(last, now) {
		return
	}
	ev := t.log.Warn().Err(err).Str("reason", why.String()).Str("remote", raw.RemoteAddr().String()).Uint64("total", t.refused[why].Load())
	if from != 0 {
		ev = ev.Uint64("claimed_node", from)
	}
	ev.Msg("cluster connection refused")
}

// unreachable schedules an OnUnreachable call for p.
func (t *Transport) unreachable(p *peer) {
	if t.cfg.OnUnreachable == nil {
		return
	}
	p.unreachPending.Store(true)
	select {
	case t.unreach <- struct{}{}:
	default:
	}
}

// notifyLoop calls OnUnreachable for the peers flagged by unreachable,
// at most once per peer every unreachableEvery.
func (t *Transport) notifyLoop() {
	defer t.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-t.unreach:
		case <-timer.C:
		}
		var next time.Duration
		now := time.Now()
		for _, p := range *t.peers.Load() {
			if !p.unreachPending.Load() {
				continue
			}
			if wait := unreachableEvery - now.Sub(p.lastUnreach); wait > 0 {
				if next == 0 || wait < next {
					next = wait
				}
				continue
			}
			p.unreachPending.Store(false)
			p.lastUnreach = now
			t.cfg.OnUnreachable(p.id)
		}
		if next > 0 {
			timer.Reset(next)
		}
	}
}

// peer is one other node: a link per lane.
type peer struct {
	t      *Transport
	id     uint64
	addr   atomic.Pointer[string]
	links  [NumLanes]*link
	ctx    context.Context // cancelled by RemovePeer or Close
	cancel context.CancelFunc
	conns  connSet        // the peer's connections, both ways
	wg     sync.WaitGroup // the links' goroutines and the inbound readers

	unreachPending atomic.Bool
	lastUnreach    time.Time // notifyLoop's
}

func newPeer(t *Transport, id uint64, addr string) *peer {
	p := &peer{t: t, id: id}
	p.addr.Store(&addr)
	p.ctx, p.cancel = context.WithCancel(t.ctx)
	for i := range p.links {
		lc := t.cfg.Lanes[i]
		p.links[i] = &link{p: p, lane: Lane(i), maxFrame: lc.MaxFrame, limit: lc.QueueBytes, wake: make(chan struct{}, 1)}
	}
	return p
}

// jitter draws a wait in [d/2, d), so that nodes that lost each other
// at the same moment do not redial in step.
func jitter(d time.Duration) time.Duration {
	if d < 2 {
		return d
	}
	return d/2 + mrand.N(d/2)
}
