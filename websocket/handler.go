package websocket

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	gws "github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

// Protocol names, the keys of [Config].Handlers.
const (
	STOMP = "stomp"
	MQTT  = "mqtt"
	AMQP  = "amqp"
)

// protocol describes how one protocol is carried over WebSocket.
type protocol struct {
	name         string
	display      string   // for messages: "STOMP"
	subprotocols []string // Sec-WebSocket-Protocol tokens, matched exactly
	path         string   // selects the protocol when the client offers no subprotocol
	binaryOnly   bool
	mirrorText   bool
}

// protocols is the table of what Junction carries over WebSocket. It is
// never written.
var protocols = [...]protocol{
	// STOMP frames are text except for binary bodies; browser clients
	// (stompjs) send text messages and read both kinds.
	{name: STOMP, display: "STOMP", subprotocols: []string{"v12.stomp", "v11.stomp", "v10.stomp", "stomp"},
		path: "/stomp", mirrorText: true},
	// MQTT 3.1.1 and 5 §6: binary messages only [MQTT-6.0.0-1]; the
	// subprotocol is "mqtt" (MQTT 3.1 clients send "mqttv3.1").
	{name: MQTT, display: "MQTT", subprotocols: []string{"mqtt", "mqttv3.1"},
		path: "/mqtt", binaryOnly: true},
	// AMQP WebSocket Binding 1.0: binary messages, subprotocol "amqp";
	// "AMQPWSB10" is the name in the binding's drafts, still sent by
	// Azure's SDKs and by rhea-based consoles.
	{name: AMQP, display: "AMQP", subprotocols: []string{"amqp", "AMQPWSB10"},
		path: "/amqp", binaryOnly: true},
}

func protocolNamed(name string) *protocol {
	for i := range protocols {
		if protocols[i].name == name {
			return &protocols[i]
		}
	}
	return nil
}

func protocolOfSubprotocol(token string) *protocol {
	for i := range protocols {
		if slices.Contains(protocols[i].subprotocols, token) {
			return &protocols[i]
		}
	}
	return nil
}

// protocolOfPath returns the protocol a request path names ("/mqtt" or
// "/mqtt/"), or nil.
func protocolOfPath(path string) *protocol {
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	for i := range protocols {
		if protocols[i].path == path {
			return &protocols[i]
		}
	}
	return nil
}

// Config configures a [Handler]. Zero fields take the defaults given.
type Config struct {
	// Handlers serves each upgraded connection, by protocol name (STOMP,
	// MQTT, AMQP): typically the protocol server's ServeConn. Only the
	// protocols present are offered. The handler must return when ctx is
	// cancelled or the connection ends; the Handler closes nc after it
	// returns. At least one is required.
	Handlers map[string]func(ctx context.Context, nc net.Conn)

	// AllowHost decides which Host headers name this endpoint: the
	// defence against DNS rebinding, where a page on attacker.example
	// whose name now resolves to this server's address sends requests
	// with Host: attacker.example. A request whose Host it refuses gets
	// 421 Misdirected Request before anything else is looked at: it is
	// not upgraded and reaches no protocol handler. Requests handed to
	// Fallback are not checked here (the Fallback applies its own
	// policy). Nil accepts every Host. It must be fast (a lookup, no
	// DNS): it runs for every request.
	AllowHost func(host string) bool

	// OnHostRefused, if set, is called after a request was refused for
	// its Host (421), in the request's goroutine: for counting and
	// logging. It must not block.
	OnHostRefused func(r *http.Request)

	// AllowedOrigins lists the browser origins that may connect. Empty:
	// the pages whose origin's host (host[:port]) AllowHost allows, and
	// none without AllowHost. Otherwise exactly those listed: "*" (any),
	// a full origin "https://app.example.com:8443" (scheme, host and
	// port must match), or a host name "example.com" (any scheme and
	// port) or "example.com:8443". A request without an Origin header
	// (not from a browser) is always allowed.
	AllowedOrigins []string

	// MaxMessageSize bounds one WebSocket message from a client (all its
	// fragments); a larger one closes the connection with 1009. Default
	// 10 MiB.
	MaxMessageSize int64

	// PingInterval is how often a ping is sent. A peer from which
	// nothing (no message, pong or ping) arrives for two intervals in a
	// row is disconnected. Default 30s; negative disables pings.
	PingInterval time.Duration

	// HandshakeTimeout bounds reading the upgrade request's header (when
	// served by Serve or ServeConn) and writing the response. Default 10s.
	HandshakeTimeout time.Duration

	// MaxHeaderBytes bounds the upgrade request's header when served by
	// Serve or ServeConn. Default 32 KiB.
	MaxHeaderBytes int

	// Fallback, if set, serves the requests that are not WebSocket
	// upgrades (the web console, on a port shared with WebSockets);
	// without it they get 426 Upgrade Required.
	Fallback http.Handler

	// Logger receives connection events at debug level. Zero logs
	// nothing.
	Logger zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = 10 << 20
	}
	if c.PingInterval == 0 {
		c.PingInterval = 30 * time.Second
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = 32 << 10
	}
	return c
}

// originRule is one parsed entry of Config.AllowedOrigins.
type originRule struct {
	origin string // "scheme://host[:port]", lower case; or ""
	host   string // host name, or host:port when port is set; lower case
	port   bool
}

func parseOrigins(list []string) (rules []originRule, any bool, err error) {
	for _, o := range list {
		o = strings.ToLower(strings.TrimSpace(o))
		switch {
		case o == "*":
			any = true
		case strings.Contains(o, "://"):
			u, perr := url.Parse(o)
			if perr != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
				return nil, false, fmt.Errorf("websocket: allowed origin %q is not an origin (scheme://host[:port])", o)
			}
			rules = append(rules, originRule{origin: u.Scheme + "://" + u.Host})
		case o == "" || strings.ContainsAny(o, "/?#@ "):
			return nil, false, fmt.Errorf("websocket: allowed origin %q is neither a host nor an origin", o)
		default:
			_, _, serr := net.SplitHostPort(o)
			rules = append(rules, originRule{host: o, port: serr == nil})
		}
	}
	return rules, any, nil
}

// Handler upgrades HTTP requests to WebSocket and hands each connection,
// as a net.Conn, to the handler of the protocol negotiated. It is an
// [http.Handler] and can be mounted on any http.Server; [Handler.Serve]
// and [Handler.ServeConn] run one with the configured limits. Create
// one with [New].
type Handler struct {
	cfg      Config
	handlers map[string]func(context.Context, net.Conn)
	origins  []originRule
	anyOrig  bool
	offer    string // what is served, for refusals
	upgrader gws.Upgrader
	log      zerolog.Logger
	errorLog *log.Logger // for the http.Servers of Serve and ServeConn

	// ctx is the parent of every session's context; cancel ends them.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex // guards the fields below
	closing bool
	conns   map[*conn]struct{}        // upgraded connections being served
	servers map[*http.Server]struct{} // those of Serve and ServeConn
	active  int                       // ServeHTTP calls past the checks (upgrading or serving)
	drained chan struct{}             // closed once closing and active is zero
	dclosed bool                      // drained is closed
}

// New returns a Handler for cfg. It reports an error for a protocol name
// it does not know, a nil handler, no handler at all, or an allowed
// origin it cannot parse.
func New(cfg Config) (*Handler, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Handlers) == 0 {
		return nil, errors.New("websocket: no protocol handlers")
	}
	h := &Handler{
		cfg:      cfg,
		handlers: make(map[string]func(context.Context, net.Conn), len(cfg.Handlers)),
		log:      cfg.Logger.With().Str("component", "websocket").Logger(),
		conns:    make(map[*conn]struct{}),
		servers:  make(map[*http.Server]struct{}),
		drained:  make(chan struct{}),
	}
	for name, fn := range cfg.Handlers {
		if protocolNamed(name) == nil {
			return nil, fmt.Errorf("websocket: unknown protocol %q (want %q, %q or %q)", name, STOMP, MQTT, AMQP)
		}
		if fn == nil {
			return nil, fmt.Errorf("websocket: nil handler for %q", name)
		}
		h.handlers[name] = fn
	}
	var err error
	if h.origins, h.anyOrig, err = parseOrigins(cfg.AllowedOrigins); err != nil {
		return nil, err
	}
	var subs, paths []string
	for i := range protocols {
		if p := &protocols[i]; h.handlers[p.name] != nil {
			subs = append(subs, p.subprotocols...)
			paths = append(paths, p.path)
		}
	}
	h.offer = fmt.Sprintf("offer one of the subprotocols %s, or connect to %s without one",
		strings.Join(subs, ", "), orList(paths))
	h.upgrader = gws.Upgrader{
		HandshakeTimeout: cfg.HandshakeTimeout,
		// Released between writes, so an idle connection holds no write
		// buffer. Reads reuse the HTTP server's buffer.
		WriteBufferPool: &sync.Pool{},
		// Origins are checked before the upgrade, by ServeHTTP.
		CheckOrigin: func(*http.Request) bool { return true },
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			h.refuse(w, r, status, reason.Error())
		},
		// permessage-deflate stays off: it costs memory per connection and
		// CPU per message, and decompression is a way around read limits.
		EnableCompression: false,
	}
	h.errorLog = log.New(debugWriter{h.log}, "", 0)
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h, nil
}

// orList joins "a", "b", "c" as "a, b or c".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// debugWriter logs each line of the http.Servers' ErrorLog at debug
// level.
type debugWriter struct{ log zerolog.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.log.Debug().Msg(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// ServeHTTP upgrades r and serves the connection with the handler of
// the protocol negotiated, returning when the session ends. Requests it
// refuses get a plain-text answer: 421 for a Host that AllowHost
// refuses (checked first), 426 for a request that is not a WebSocket
// upgrade, 405 for a method other than GET, 403 for an origin not
// allowed, 400 when no protocol served here could be chosen, 404 for a
// protocol path whose protocol is not served, 503 once shutting down.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	upgrade := gws.IsWebSocketUpgrade(r)
	if !upgrade && h.cfg.Fallback != nil {
		h.cfg.Fallback.ServeHTTP(w, r)
		return
	}
	if h.cfg.AllowHost != nil && !h.cfg.AllowHost(r.Host) {
		h.refuse(w, r, http.StatusMisdirectedRequest,
			fmt.Sprintf("websocket: misdirected request: %q is not a name of this server", r.Host))
		if h.cfg.OnHostRefused != nil {
			h.cfg.OnHostRefused(r)
		}
		return
	}
	if !upgrade {
		w.Header().Set("Upgrade", "websocket")
		w.Header().Set("Sec-WebSocket-Version", "13")
		h.refuse(w, r, http.StatusUpgradeRequired,
			"This is Junction's WebSocket endpoint: connect with a WebSocket client and "+h.offer+".")
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		h.refuse(w, r, http.StatusMethodNotAllowed, "websocket: the upgrade request must be a GET")
		return
	}
	if origin, ok := h.originAllowed(r); !ok {
		h.refuse(w, r, http.StatusForbidden, fmt.Sprintf("websocket: origin %q is not allowed", origin))
		return
	}
	p, sub, status, msg := h.negotiate(r)
	if p == nil {
		h.refuse(w, r, status, msg)
		return
	}
	if !h.enter() {
		h.refuse(w, r, http.StatusServiceUnavailable, "websocket: the server is shutting down")
		return
	}
	defer h.leave()

	var hdr http.Header
	if sub != "" {
		hdr = http.Header{"Sec-Websocket-Protocol": {sub}}
	}
	ws, err := h.upgrader.Upgrade(w, r, hdr)
	if err != nil {
		return // refused through upgrader.Error, or the connection failed
	}
	c := newConn(ws, p, h.cfg.MaxMessageSize)
	base := h.track(c)
	defer h.untrack(c)
	defer c.Close() // also if the protocol handler panics
	// The session ends with the Handler's context or the request's
	// (ServeConn's). Either way the server is going away: the close
	// frame says 1001, and so the mark is set before the handler can see
	// the cancellation.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	goAway := func() {
		c.goingAway.Store(true)
		cancel()
	}
	stopBase := context.AfterFunc(base, goAway)
	defer stopBase()
	stopReq := context.AfterFunc(r.Context(), goAway)
	defer stopReq()

	clog := h.log.With().Str("protocol", p.name).Str("remote", c.RemoteAddr().String()).Logger()
	clog.Debug().Str("subprotocol", sub).Str("path", r.URL.Path).Msg("websocket session open")
	start := time.Now()
	c.startPing(h.cfg.PingInterval)
	h.handlers[p.name](ctx, c)
	c.Close()
	ev := clog.Debug().Dur("duration", time.Since(start))
	if c.pingTimeout.Load() {
		ev = ev.Str("reason", "no answer to pings")
	}
	ev.Msg("websocket session closed")
}

// refuse answers a request that is not upgraded, in plain text.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.log.Debug().Int("status", status).Str("remote", r.RemoteAddr).Str("path", r.URL.Path).
		Str("reason", msg).Msg("websocket upgrade refused")
	http.Error(w, msg, status)
}

// offered returns the subprotocols r offers, in its order.
func offered(r *http.Request) []string {
	var out []string
	for _, v := range r.Header.Values("Sec-Websocket-Protocol") {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.Trim(t, " \t"); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

// negotiate chooses the protocol for r, per RFC 6455 §4.2.2: the first
// subprotocol in the client's order that is served here (and, on a
// protocol's path, belongs to that protocol); without subprotocols, the
// path's protocol, answered without Sec-WebSocket-Protocol. Offered
// subprotocols none of which is served are refused rather than upgraded
// without one: browsers fail such a connection anyway, and a 400 tells
// why.
func (h *Handler) negotiate(r *http.Request) (p *protocol, sub string, status int, msg string) {
	pathP := protocolOfPath(r.URL.Path)
	if pathP != nil && h.handlers[pathP.name] == nil {
		return nil, "", http.StatusNotFound, fmt.Sprintf("websocket: %s is not served here; %s.", pathP.display, h.offer)
	}
	offers := offered(r)
	for _, tok := range offers {
		p := protocolOfSubprotocol(tok)
		if p == nil || h.handlers[p.name] == nil || (pathP != nil && p != pathP) {
			continue
		}
		return p, tok, 0, ""
	}
	switch {
	case len(offers) > 0 && pathP != nil:
		return nil, "", http.StatusBadRequest, fmt.Sprintf("websocket: none of the subprotocols offered (%s) is %s; offer one of %s.",
			strings.Join(offers, ", "), pathP.display, strings.Join(pathP.subprotocols, ", "))
	case len(offers) > 0:
		return nil, "", http.StatusBadRequest, fmt.Sprintf("websocket: none of the subprotocols offered (%s) is served here; %s.",
			strings.Join(offers, ", "), h.offer)
	case pathP != nil:
		return pathP, "", 0, ""
	}
	return nil, "", http.StatusBadRequest, "websocket: no subprotocol offered; " + h.offer + "."
}

// originAllowed applies the origin policy to r; it returns the origin
// for the refusal message.
func (h *Handler) originAllowed(r *http.Request) (string, bool) {
	vals := r.Header.Values("Origin")
	if len(vals) == 0 || (len(vals) == 1 && vals[0] == "") {
		return "", true // not a browser
	}
	origin := vals[0]
	if len(vals) > 1 {
		return strings.Join(vals, ", "), false
	}
	if h.anyOrig {
		return origin, true
	}
	u, err := url.Parse(strings.ToLower(origin))
	if err != nil || u.Host == "" { // "null" (sandboxed pages, files) has no host
		return origin, false
	}
	if len(h.origins) == 0 {
		// The page must come from a host that names this server, not
		// merely from the request's own Host, which a page on a
		// DNS-rebinding domain chooses.
		return origin, h.cfg.AllowHost != nil && h.cfg.AllowHost(u.Host)
	}
	host := u.Hostname()
	for _, rule := range h.origins {
		switch {
		case rule.origin != "":
			if u.Scheme+"://"+u.Host == rule.origin {
				return origin, true
			}
		case rule.port:
			if u.Host == rule.host {
				return origin, true
			}
		default:
			if host == rule.host {
				return origin, true
			}
		}
	}
	return origin, false
}

// enter registers a ServeHTTP call about to upgrade; false once shutting
// down.
func (h *Handler) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.active++
	return true
}

func (h *Handler) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.active--
	h.drainedLocked()
}

func (h *Handler) drainedLocked() {
	if h.closing && h.active == 0 && !h.dclosed {
		h.dclosed = true
		close(h.drained)
	}
}

// track records an upgraded connection and returns the Handler's
// context.
func (h *Handler) track(c *conn) context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conns[c] = struct{}{}
	if h.closing {
		c.goingAway.Store(true)
	}
	return h.ctx
}

func (h *Handler) untrack(c *conn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
}

// addServer records an http.Server of Serve or ServeConn, so that
// shutdown closes it; false once shutting down.
func (h *Handler) addServer(srv *http.Server) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.servers[srv] = struct{}{}
	return true
}

func (h *Handler) removeServer(srv *http.Server) {
	h.mu.Lock()
	delete(h.servers, srv)
	h.mu.Unlock()
}

// Connections returns the number of WebSocket sessions being served.
func (h *Handler) Connections() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// beginClose starts shutting down: no further upgrades, sessions' close
// frames say 1001, every session's context is cancelled (each protocol
// says goodbye its own way: STOMP an ERROR frame, AMQP a close
// performative, MQTT closes), and the http.Servers of Serve and
// ServeConn stop (their listeners, and connections not upgraded).
func (h *Handler) beginClose() {
	h.mu.Lock()
	var servers []*http.Server
	if !h.closing {
		h.closing = true
		for c := range h.conns {
			c.goingAway.Store(true)
		}
		for srv := range h.servers {
			servers = append(servers, srv)
		}
		h.drainedLocked()
	}
	h.mu.Unlock()
	h.cancel()
	for _, srv := range servers {
		srv.Close()
	}
}

// closeConns closes the TCP connections of every session still open.
func (h *Handler) closeConns() {
	h.mu.Lock()
	conns := make([]*conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for _, c := range conns {
		c.forceClose()
	}
}

// Shutdown refuses new upgrades, cancels every session's context so that
// each protocol says goodbye, and waits for the sessions to end until
// ctx is done. Then it closes the connections still open and returns
// ctx's error (their handlers end soon after; Close waits for them).
// http.Server.Shutdown does not wait for upgraded connections: call this
// as well. Shutdown may be called more than once, and with Close.
func (h *Handler) Shutdown(ctx context.Context) error {
	h.beginClose()
	select {
	case <-h.drained:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-h.drained:
		return nil
	default:
	}
	h.closeConns()
	return ctx.Err()
}

// Close is Shutdown without the grace period: it cancels every session,
// closes their connections at once and waits for their handlers to
// return. It is idempotent.
func (h *Handler) Close() error {
	h.beginClose()
	h.closeConns()
	<-h.drained
	return nil
}
