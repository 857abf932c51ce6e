package mqtt

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/core/guard"
)

// clientReadBuffer is the size of mochi's read buffer per connection.
const clientReadBuffer = 512

// listenerID names the stub listener Junction's connections are
// established under, so that mochi's Close reaches them.
const listenerID = "junction"

// Config configures a Server. Zero fields take the defaults given.
type Config struct {
	// MaxPacketSize bounds an MQTT packet. Default 10 MiB (mochi's own
	// default is unlimited). A larger packet closes the connection, after
	// a DISCONNECT with reason 0x95 (packet too large) on MQTT 5.
	MaxPacketSize int
	// MaxSessionExpiry caps how long a disconnected persistent session is
	// kept. Default 1 hour (mochi's default is about 136 years).
	MaxSessionExpiry time.Duration
	// ReceiveMaximum is the number of QoS 1 and 2 messages in flight to a
	// client. Default 1024.
	ReceiveMaximum int
	// MaxWritesPending bounds the packets queued for one client; past it
	// mochi drops deliveries to that client (counted), so a slow
	// subscriber never delays another client. Default 8192. Memory: mochi
	// allocates the queue (8 bytes a slot) for every connection, idle or
	// not. At 8192 slots it is a 64 KiB allocation whose pages stay
	// untouched on a fresh heap but become resident in full when the
	// memory is reused after disconnects (about 64 KiB per connection in
	// a broker that has seen reconnects); below 4096 slots it is resident
	// at once (8 bytes a slot) but never more. A smaller queue drops QoS 0
	// (and mochi-served QoS 1) deliveries to a subscriber sooner when it
	// falls behind a burst.
	MaxWritesPending int
	// MaxSessionBytes is the byte budget of each subscription of a
	// persistent session (what waits for an offline device) in memory;
	// overflow follows the address's full policy: PAGE by default (QoS 1
	// and 2 messages go to the page store when the broker persists, and
	// publishers wait without one; QoS 0 messages are dropped), or DROP
	// (counted in the queue's Dropped statistic and logged), BLOCK, FAIL.
	// Default 64 MiB.
	MaxSessionBytes int64
	// BridgeCredit is the window of messages the bridge takes from core
	// before injecting them into mochi. Default 1024.
	BridgeCredit int
	// ConnectTimeout bounds the wait for a connection's CONNECT packet,
	// from ServeConn on: a client that has not sent all of it by then is
	// closed (mochi itself waits forever). Default 10s.
	ConnectTimeout time.Duration
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
	// Logger receives mochi's logs and the bridge's. Zero logs nothing.
	Logger zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxPacketSize <= 0 {
		c.MaxPacketSize = 10 << 20
	}
	if c.MaxSessionExpiry <= 0 {
		c.MaxSessionExpiry = time.Hour
	}
	if c.ReceiveMaximum <= 0 {
		c.ReceiveMaximum = 1024
	}
	if c.MaxWritesPending <= 0 {
		c.MaxWritesPending = 8192
	}
	if c.MaxSessionBytes <= 0 {
		c.MaxSessionBytes = 64 << 20
	}
	if c.BridgeCredit <= 0 {
		c.BridgeCredit = 1024
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.PreAuthMaxPacketSize <= 0 {
		c.PreAuthMaxPacketSize = 64 << 10
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
	return c
}

// Server is the MQTT front-end: a mochi engine without listeners of its
// own and the bridge between it and core.
type Server struct {
	cfg    Config
	broker *core.Broker
	mochi  *mochi.Server
	bridge *bridge

	stub      *stubListener
	closeOnce sync.Once

	mu      sync.Mutex
	closing bool               // guarded by mu: Close has begun; ServeConn turns connections away
	conns   map[*corkConn]bool // guarded by mu: connections in ServeConn; true once mochi has them as clients
}

// New starts an MQTT front-end over broker b.
func New(cfg Config, b *core.Broker) (*Server, error) {
	cfg = cfg.withDefaults()
	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = uint32(cfg.MaxPacketSize)
	caps.MaximumSessionExpiryInterval = uint32(cfg.MaxSessionExpiry / time.Second)
	caps.ReceiveMaximum = uint16(min(cfg.ReceiveMaximum, 65535))
	caps.MaximumClientWritesPending = int32(cfg.MaxWritesPending)
	// mochi's default caps every message at 24 h and tells MQTT 5
	// subscribers so even when the publisher set no expiry; core keeps
	// each message's own expiration, so mochi must not add one.
	caps.MaximumMessageExpiryInterval = 0
	ms := mochi.New(&mochi.Options{
		Capabilities: caps,
		// Allocated for every connection, idle or not; corkConn reads
		// ahead into a pooled buffer while data is flowing.
		ClientNetReadBufferSize: clientReadBuffer,
		// Allocated only while packets queue up for a client: mochi then
		// gathers them and writes when this much is pending (or the queue
		// is empty).
		ClientNetWriteBufferSize: 32 << 10,
		Logger:                   slog.New(zerolog.NewSlogHandler(cfg.Logger.With().Str("component", "mochi").Logger())),
	})
	s := &Server{cfg: cfg, broker: b, mochi: ms, stub: &stubListener{done: make(chan struct{}), mochi: ms}, conns: make(map[*corkConn]bool)}
	br, err := newBridge(s, b)
	if err != nil {
		return nil, err
	}
	s.bridge = br
	if err := ms.AddHook(br, nil); err != nil {
		br.close()
		return nil, err
	}
	// After the bridge: see limitHook.
	if err := ms.AddHook(newLimitHook(s, cfg.MaxSubscriptions), nil); err != nil {
		br.close()
		return nil, err
	}
	// Retained messages kept by core (journaled) go back into mochi's
	// store, which serves them to new subscribers.
	now := time.Now()
	for _, m := range b.Retained() {
		pk := publishFromMessage(m, now)
		pk.FixedHeader.Retain = true
		pk.Created = now.Unix()
		ms.Topics.RetainMessage(pk)
	}
	if err := ms.AddListener(s.stub); err != nil {
		br.close()
		return nil, err
	}
	if err := ms.Serve(); err != nil {
		br.close()
		return nil, err
	}
	return s, nil
}

// ServeConn serves one MQTT connection until it ends, or until ctx is
// cancelled (then the connection is closed).
func (s *Server) ServeConn(ctx context.Context, nc net.Conn) {
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	// The CONNECT is read under this deadline (readConnect); mochi then
	// replaces it with the keep-alive's (or none).
	nc.SetReadDeadline(time.Now().Add(s.cfg.ConnectTimeout))
	cc := newCorkConn(nc)
	cc.clock = guard.NewClock(nc, guard.Rule{Timeout: s.cfg.FrameTimeout, MinRate: s.cfg.FrameMinRate})
	cc.limit = &packetLimit{max: s.cfg.MaxPacketSize, clock: cc.clock}
	cc.timedOut = func() { s.broker.CountFrameTimeout("mqtt") }
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.conns[cc] = false
	// mochi's Close waits on ClientsWg, to which EstablishConnection adds
	// from this goroutine; sync.WaitGroup needs a first Add ordered before
	// Wait, which adding here, under mu and before Close has begun, does.
	s.mochi.Listeners.ClientsWg.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, cc)
		s.mu.Unlock()
		s.mochi.Listeners.ClientsWg.Done()
	}()
	limit := min(s.cfg.MaxPacketSize, s.cfg.PreAuthMaxPacketSize)
	// readConnect reads exactly the packet (at most a 5-byte fixed
	// header and limit-1 bytes): no read-ahead to charge.
	cc.preauth = s.broker.PreAuth(limit + 5)
	defer cc.preauth.Close()
	pkt, err := readConnect(nc, limit, cc.preauth)
	if err != nil {
		s.refuseConnect(nc, err)
		nc.Close()
		return
	}
	cc.replay = pkt
	err = s.mochi.EstablishConnection(listenerID, cc)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		s.cfg.Logger.Debug().Err(err).Str("remote", nc.RemoteAddr().String()).Msg("mqtt connection ended")
	}
}

// CONNACKs for refused CONNECTs: MQTT 5 with a reason code and no
// properties, MQTT 3.1.1 with a return code.
var (
	connackTooLarge     = []byte{0x20, 0x03, 0x00, packets.ErrPacketTooLarge.Code, 0x00}
	connackBusy         = []byte{0x20, 0x03, 0x00, packets.ErrServerBusy.Code, 0x00}
	connackUnavailable3 = []byte{0x20, 0x02, 0x00, packets.Err3ServerUnavailable.Code}
)

// refuseConnect answers a CONNECT that readConnect refused, in the
// client's version when it is known, and counts the refusal; the caller
// closes the connection. MQTT 3.1.1 has no return code for a packet
// too large: the client is just closed.
func (s *Server) refuseConnect(nc net.Conn, err error) {
	var r *connectRefusal
	if !errors.As(err, &r) {
		s.cfg.Logger.Debug().Err(err).Str("remote", nc.RemoteAddr().String()).Msg("mqtt connection ended before CONNECT")
		return
	}
	s.cfg.Logger.Debug().Err(err).Str("remote", nc.RemoteAddr().String()).Msg("mqtt CONNECT refused")
	var answer []byte
	switch {
	case r.TooLarge > 0:
		s.broker.CountPreAuthRefusal("mqtt", core.PreAuthFrameTooLarge)
		if r.Level == 5 {
			answer = connackTooLarge
		}
	case errors.Is(err, guard.ErrBudget):
		s.broker.CountPreAuthRefusal("mqtt", core.PreAuthBudget)
		switch r.Level {
		case 5:
			answer = connackBusy
		case 3, 4:
			answer = connackUnavailable3
		}
	}
	if answer != nil {
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write(answer)
	}
}

// Close disconnects every MQTT client (MQTT 5 clients get DISCONNECT with
// "server shutting down"; connections still in their handshake are just
// closed), stops mochi and the bridge. Idempotent: mochi panics on a
// second Close of its own.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		var shaking []*corkConn
		for cc, client := range s.conns {
			if !client {
				shaking = append(shaking, cc)
			}
		}
		s.mu.Unlock()
		// mochi does not know these as clients yet, so it would not
		// disconnect them, and its Close waits for every connection.
		for _, cc := range shaking {
			cc.Conn.Close()
		}
		// Likewise a client whose publish waits in core for room
		// (address-full-policy BLOCK): closing the sessions ends the
		// wait, and with it the read loop mochi's Close waits for.
		s.bridge.closeSessions()
		s.mochi.Close()
		s.bridge.close()
	})
	return nil
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

// stubListener is registered with mochi so that mochi's Close reaches
// the connections Junction hands it; it accepts nothing itself.
type stubListener struct {
	done  chan struct{}
	once  sync.Once
	mochi *mochi.Server
}

func (l *stubListener) Init(*slog.Logger) error { return nil }
func (l *stubListener) Serve(listeners.EstablishFn) {
	<-l.done
}
func (l *stubListener) ID() string       { return listenerID }
func (l *stubListener) Address() string  { return "" }
func (l *stubListener) Protocol() string { return "tcp" }

// Close disconnects the listener's clients itself rather than through
// mochi's closeClients: that one (Clients.GetByListener) takes the client
// list's read lock twice, and deadlocks when a disconnecting client asks
// for the write lock in between (mochi v2.7.9). GetAll takes it once.
func (l *stubListener) Close(listeners.CloseFn) {
	l.once.Do(func() { close(l.done) })
	for _, cl := range l.mochi.Clients.GetAll() {
		if cl.Net.Listener == listenerID && !cl.Closed() {
			l.mochi.DisconnectClient(cl, packets.ErrServerShuttingDown)
		}
	}
}
