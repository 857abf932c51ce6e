package main

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/internal/hostlist"
	"github.com/junctionmq/junction/transports"
)

// commaList splits a comma-separated option into its trimmed, non-empty
// items.
func commaList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// httpListeners returns, by listener name, the configured addresses of
// the listeners that serve HTTP: the console, the WebSocket ports and the
// one port (which serve the console too, as the fallback of plain
// requests).
func (c *Config) httpListeners() map[string]string {
	m := map[string]string{}
	for name, addr := range map[string]string{
		"console": c.Console.Listen, "websocket": c.WebSocket.Listen, "all": c.All.Listen,
	} {
		if addr != "" {
			m[name] = addr
		}
	}
	if c.TLS.enabled() && c.TLS.WebSocket != "" {
		m["websocket+tls"] = c.TLS.WebSocket
	}
	return m
}

// hostGuard holds the Host allow-lists of the HTTP endpoints (see
// docs/security.md, "Host allow-list") and counts and logs the requests
// they refuse. management and websocket check the lists through the
// Allows funcs they are given and report refusals to refused.
type hostGuard struct {
	console *hostlist.List // the console, REST API and /metrics, on any port
	ws      *hostlist.List // WebSocket upgrades
	log     zerolog.Logger
	every   time.Duration

	mu         sync.Mutex
	total      map[string]uint64 // refusals by listener since start, for /metrics
	pending    map[string]uint64 // refusals by listener not yet logged
	last       time.Time         // when the last line was written
	lastHost   string
	lastRemote string
}

// newHostGuard builds the allow-lists: the names every HTTP listener is
// reached by (hostlist.Defaults of their addresses), plus
// --console-allowed-hosts and --ws-allowed-hosts. A "*" is warned about
// when it opens something without a login: the console without users,
// WebSockets with anonymous clients.
func newHostGuard(cfg Config, log zerolog.Logger, consoleLogin, anonymous bool) (*hostGuard, error) {
	listeners := cfg.httpListeners()
	var addrs []string
	for _, a := range listeners {
		addrs = append(addrs, a)
	}
	defaults := hostlist.Defaults(addrs...)
	console, err := hostlist.New(slices.Concat(defaults, commaList(cfg.Console.AllowedHosts))...)
	if err != nil {
		return nil, err
	}
	ws, err := hostlist.New(slices.Concat(defaults, commaList(cfg.WebSocket.AllowedHosts))...)
	if err != nil {
		return nil, err
	}
	g := &hostGuard{console: console, ws: ws, log: log, every: 10 * time.Second,
		total: make(map[string]uint64), pending: make(map[string]uint64)}
	for name := range listeners {
		g.total[name] = 0 // every HTTP listener has a series, zero or not
	}
	log.Debug().Strs("console", console.Patterns()).Strs("websocket", ws.Patterns()).Msg("Host allow-lists")
	if console.Any() && cfg.Console.Listen != "" && !consoleLogin {
		log.Warn().Msg("console-allowed-hosts is * and no users are configured: any web page, opened in a browser " +
			"that can reach the console, can use its API through DNS rebinding")
	}
	if ws.Any() && anonymous && (cfg.WebSocket.Listen != "" || cfg.All.Listen != "" || cfg.TLS.WebSocket != "") {
		log.Warn().Msg("ws-allowed-hosts is * and anonymous clients are accepted: any web page, opened in a browser " +
			"that can reach the WebSocket ports, can connect through DNS rebinding")
	}
	return g, nil
}

// listenerKey is the context key of the name of the listener a request
// came in on, so that refusals are counted per listener.
type listenerKey struct{}

// withListener passes the listener's name to the HTTP server h starts
// for each connection, through the context its requests inherit.
func withListener(name string, h transports.Handler) transports.Handler {
	return func(ctx context.Context, nc net.Conn) {
		h(context.WithValue(ctx, listenerKey{}, name), nc)
	}
}

// refused counts a request refused for its Host and logs refusals
// without writing a line per request, which a rebinding page could turn
// into a flood: the first after a quiet interval at once, then one line
// per interval at most, with the counts since the last line.
func (g *hostGuard) refused(r *http.Request) {
	name, _ := r.Context().Value(listenerKey{}).(string)
	host := r.Host
	if len(host) > 256 {
		host = host[:256] + "..."
	}
	now := time.Now()
	g.mu.Lock()
	g.total[name]++
	g.pending[name]++
	g.lastHost, g.lastRemote = host, r.RemoteAddr
	if now.Sub(g.last) < g.every {
		g.mu.Unlock()
		return
	}
	pending, since := g.pending, g.last
	g.pending = make(map[string]uint64)
	g.last = now
	g.mu.Unlock()

	ev := g.log.Warn().Str("last_host", host).Str("last_remote", r.RemoteAddr)
	for listener, n := range pending {
		ev = ev.Uint64(listener, n)
	}
	if !since.IsZero() && now.Sub(since) < 2*g.every {
		ev = ev.Dur("over", now.Sub(since))
	}
	ev.Msg("HTTP requests refused (421): their Host is not a name of this broker, as with DNS rebinding; " +
		"if it is one, add it to --console-allowed-hosts or --ws-allowed-hosts (logged once per interval at most)")
}

// rejections reports the refusals per listener, for /metrics.
func (g *hostGuard) rejections() map[string]map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := make(map[string]map[string]uint64, len(g.total))
	for name, n := range g.total {
		m[name] = map[string]uint64{"host": n}
	}
	return m
}
