package websocket

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gws "github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/websocket/wstest"
)

func nop(context.Context, net.Conn) {}

func allHandlers(fn func(context.Context, net.Conn)) map[string]func(context.Context, net.Conn) {
	return map[string]func(context.Context, net.Conn){STOMP: fn, MQTT: fn, AMQP: fn}
}

func TestNewValidates(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no handlers":      {},
		"unknown protocol": {Handlers: map[string]func(context.Context, net.Conn){"xmpp": nop}},
		"nil handler":      {Handlers: map[string]func(context.Context, net.Conn){STOMP: nil}},
		"bad origin":       {Handlers: allHandlers(nop), AllowedOrigins: []string{"https://x.example/path"}},
		"empty origin":     {Handlers: allHandlers(nop), AllowedOrigins: []string{""}},
		"not an origin":    {Handlers: allHandlers(nop), AllowedOrigins: []string{"user@x.example"}},
	} {
		if _, err := New(cfg); err == nil || !strings.HasPrefix(err.Error(), "websocket: ") {
			t.Errorf("%s: New = %v, want a websocket: error", name, err)
		}
	}
}

func TestNegotiate(t *testing.T) {
	all, err := New(Config{Handlers: allHandlers(nop)})
	if err != nil {
		t.Fatal(err)
	}
	stompOnly, err := New(Config{Handlers: map[string]func(context.Context, net.Conn){STOMP: nop}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		h      *Handler
		path   string
		offer  []string // header lines of Sec-WebSocket-Protocol
		proto  string
		sub    string
		status int
	}{
		// The first subprotocol in the client's order that is served.
		{h: all, path: "/", offer: []string{"v12.stomp, v11.stomp, v10.stomp"}, proto: STOMP, sub: "v12.stomp"},
		{h: all, path: "/", offer: []string{"v10.stomp, v12.stomp"}, proto: STOMP, sub: "v10.stomp"},
		{h: all, path: "/ws", offer: []string{"stomp"}, proto: STOMP, sub: "stomp"},
		{h: all, path: "/", offer: []string{"mqtt"}, proto: MQTT, sub: "mqtt"},
		{h: all, path: "/", offer: []string{"mqttv3.1"}, proto: MQTT, sub: "mqttv3.1"},
		{h: all, path: "/", offer: []string{"amqp"}, proto: AMQP, sub: "amqp"},
		{h: all, path: "/", offer: []string{"binary, AMQPWSB10"}, proto: AMQP, sub: "AMQPWSB10"},
		{h: all, path: "/", offer: []string{"chat, mqtt, v12.stomp"}, proto: MQTT, sub: "mqtt"},
		{h: all, path: "/", offer: []string{"chat", "amqp"}, proto: AMQP, sub: "amqp"}, // two header lines
		{h: all, path: "/", offer: []string{" ,mqtt ,, "}, proto: MQTT, sub: "mqtt"},
		// Offered, none served: refused, never upgraded without one.
		{h: all, path: "/", offer: []string{"chat"}, status: 400},
		{h: all, path: "/", offer: []string{"MQTT"}, status: 400}, // tokens match exactly
		{h: all, path: "/mqtt", offer: []string{"chat"}, status: 400},
		// On a protocol's path, only that protocol's subprotocols.
		{h: all, path: "/mqtt", offer: []string{"v12.stomp"}, status: 400},
		{h: all, path: "/mqtt", offer: []string{"v12.stomp, mqtt"}, proto: MQTT, sub: "mqtt"},
		{h: all, path: "/stomp", offer: []string{"v12.stomp"}, proto: STOMP, sub: "v12.stomp"},
		// No subprotocol offered: the path selects, and none is answered.
		{h: all, path: "/stomp", proto: STOMP},
		{h: all, path: "/mqtt/", proto: MQTT},
		{h: all, path: "/amqp", proto: AMQP},
		{h: all, path: "/", status: 400},
		{h: all, path: "/ws", status: 400},
		{h: all, path: "/stomp/x", status: 400},
		// Only the protocols configured are offered.
		{h: stompOnly, path: "/", offer: []string{"mqtt, v12.stomp"}, proto: STOMP, sub: "v12.stomp"},
		{h: stompOnly, path: "/", offer: []string{"mqtt"}, status: 400},
		{h: stompOnly, path: "/mqtt", status: 404},
		{h: stompOnly, path: "/mqtt", offer: []string{"mqtt"}, status: 404},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "http://broker"+tt.path, nil)
		for _, v := range tt.offer {
			r.Header.Add("Sec-WebSocket-Protocol", v)
		}
		p, sub, status, msg := tt.h.negotiate(r)
		name := "none"
		if p != nil {
			name = p.name
		}
		if tt.status != 0 {
			if p != nil || status != tt.status {
				t.Errorf("%s %q: got %s %q status %d, want status %d", tt.path, tt.offer, name, sub, status, tt.status)
			} else if !strings.Contains(msg, "subprotocol") {
				t.Errorf("%s %q: refusal %q does not say what to offer", tt.path, tt.offer, msg)
			}
			continue
		}
		if p == nil || p.name != tt.proto || sub != tt.sub {
			t.Errorf("%s %q: got %s %q (status %d %q), want %s %q", tt.path, tt.offer, name, sub, status, msg, tt.proto, tt.sub)
		}
	}
}

// TestNegotiateLive checks the answer on the wire: the subprotocol
// chosen, none when none was offered, and a refusal with its text.
func TestNegotiateLive(t *testing.T) {
	s := serve(t, Config{Handlers: allHandlers(echo)})
	for _, tt := range []struct {
		path  string
		offer []string
		want  string
	}{
		{"/", []string{"v12.stomp", "v11.stomp", "v10.stomp"}, "v12.stomp"},
		{"/", []string{"binary", "AMQPWSB10", "amqp"}, "AMQPWSB10"},
		{"/mqtt", []string{"mqtt"}, "mqtt"},
		{"/mqtt", nil, ""},
	} {
		ws, resp, err := wstest.Dialer(tt.offer...).Dial(s.url(tt.path), nil)
		if err != nil {
			t.Fatalf("%s %v: %v", tt.path, tt.offer, err)
		}
		got, hdr := ws.Subprotocol(), resp.Header.Values("Sec-WebSocket-Protocol")
		ws.Close()
		if got != tt.want || (tt.want == "" && len(hdr) != 0) {
			t.Errorf("%s %v: subprotocol %q (header %q), want %q", tt.path, tt.offer, got, hdr, tt.want)
		}
	}
	_, resp, err := wstest.Dialer("chat").Dial(s.url("/"), nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("offering chat: err %v, resp %v; want a 400", err, resp)
	}
	body := make([]byte, 512)
	n, _ := resp.Body.Read(body)
	if !strings.Contains(string(body[:n]), "v12.stomp") || !strings.Contains(string(body[:n]), "/mqtt") {
		t.Errorf("refusal body %q does not name what is served", body[:n])
	}
}

// ourHost stands for an allow-list built by cmd: the names of a broker
// at broker.example, and loopback.
func ourHost(h string) bool {
	name, _, err := net.SplitHostPort(h)
	if err != nil {
		name = h
	}
	switch strings.ToLower(name) {
	case "broker.example", "localhost", "127.0.0.1", "::1", "2001:db8::1":
		return true
	}
	return false
}

func TestOrigins(t *testing.T) {
	type check struct {
		origins []string // Origin header lines
		host    string
		ok      bool
	}
	tests := []struct {
		allowed   []string
		allowHost func(string) bool
		checks    []check
	}{
		{nil, ourHost, []check{
			{nil, "broker.example:61614", true}, // not a browser
			{[]string{""}, "broker.example", true},
			{[]string{"http://localhost:3000"}, "broker.example", true},
			{[]string{"http://127.0.0.1:8080"}, "broker.example", true},
			{[]string{"http://[::1]:9"}, "broker.example", true},
			{[]string{"http://broker.example:8161"}, "broker.example:61614", true}, // the console's port
			{[]string{"https://BROKER.example"}, "broker.example", true},
			{[]string{"http://[2001:db8::1]:8161"}, "[2001:db8::1]:61614", true},
			{[]string{"http://evil.example"}, "broker.example", false},
			// DNS rebinding: the page's origin is the request's own Host,
			// which proves nothing.
			{[]string{"http://evil.example:61614"}, "evil.example:61614", false},
			{[]string{"http://broker.example.evil.example"}, "broker.example", false},
			{[]string{"null"}, "broker.example", false},
			{[]string{"http://localhost", "http://evil.example"}, "broker.example", false},
			{[]string{"http://evil.example"}, "", false},
		}},
		// Without AllowHost no page is trusted, not even a local one.
		{nil, nil, []check{
			{nil, "localhost:61614", true},
			{[]string{"http://localhost:3000"}, "localhost:61614", false},
			{[]string{"http://localhost:61614"}, "localhost:61614", false},
		}},
		{[]string{"https://app.example.com", "other.example", "x.example:8443"}, ourHost, []check{
			{[]string{"https://app.example.com"}, "broker.example", true},
			{[]string{"http://app.example.com"}, "broker.example", false},
			{[]string{"https://app.example.com:8443"}, "broker.example", false},
			{[]string{"http://other.example:1234"}, "broker.example", true},
			{[]string{"https://x.example:8443"}, "broker.example", true},
			{[]string{"https://x.example"}, "broker.example", false},
			{[]string{"http://localhost:3000"}, "broker.example", false}, // the list replaces the default
			{[]string{"http://broker.example"}, "broker.example", false},
			{nil, "broker.example", true},
		}},
		{[]string{"*"}, nil, []check{
			{[]string{"http://evil.example"}, "broker.example", true},
			{[]string{"null"}, "broker.example", true},
		}},
	}
	for _, tt := range tests {
		h, err := New(Config{Handlers: allHandlers(nop), AllowedOrigins: tt.allowed, AllowHost: tt.allowHost})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range tt.checks {
			r := httptest.NewRequest(http.MethodGet, "http://broker/stomp", nil)
			r.Host = c.host
			for _, o := range c.origins {
				r.Header.Add("Origin", o)
			}
			if _, ok := h.originAllowed(r); ok != c.ok {
				t.Errorf("allowed %q, AllowHost %v, origin %q, host %q: allowed=%v, want %v",
					tt.allowed, tt.allowHost != nil, c.origins, c.host, ok, c.ok)
			}
		}
	}

	// On the wire: 403 for a foreign page, an upgrade for a local one.
	s := serve(t, Config{Handlers: allHandlers(echo), AllowHost: ourHost})
	_, resp, err := wstest.Dialer("mqtt").Dial(s.url("/"), http.Header{"Origin": {"https://evil.example"}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign origin: err %v, resp %v; want a 403", err, resp)
	}
	ws, _, err := wstest.Dialer("mqtt").Dial(s.url("/"), http.Header{"Origin": {"http://localhost:8161"}})
	if err != nil {
		t.Fatalf("local origin: %v", err)
	}
	ws.Close()
}

// A request whose Host is not one of the server's names is answered 421
// before anything else: no upgrade, no protocol handler.
func TestHostRefused(t *testing.T) {
	var served, fellBack atomic.Int32
	var refusedMu sync.Mutex
	var refused []string
	cfg := Config{
		Handlers:  allHandlers(func(ctx context.Context, nc net.Conn) { served.Add(1); echo(ctx, nc) }),
		AllowHost: ourHost,
		OnHostRefused: func(r *http.Request) {
			refusedMu.Lock()
			refused = append(refused, r.Host)
			refusedMu.Unlock()
		},
	}
	s := serve(t, cfg)
	_, port, _ := net.SplitHostPort(s.addr)
	evil := "attacker.example:" + port
	_, resp, err := wstest.Dialer("v12.stomp").Dial(s.url("/stomp"), http.Header{"Host": {evil}, "Origin": {"http://" + evil}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("foreign Host: err %v, resp %v; want a 421", err, resp)
	}
	// Checked before the upgrade test: a plain request gets 421 too.
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/stomp", nil)
	req.Host = evil
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("plain request with a foreign Host: %v %v; want a 421", resp, err)
	} else {
		resp.Body.Close()
	}
	// The server's own names connect.
	for _, host := range []string{s.addr, "localhost:" + port, "[::1]:" + port} {
		ws, _, err := wstest.Dialer("v12.stomp").Dial(s.url("/stomp"), http.Header{"Host": {host}, "Origin": {"http://" + host}})
		if err != nil {
			t.Fatalf("Host %s: %v", host, err)
		}
		ws.WriteMessage(gws.TextMessage, []byte("hi"))
		if _, p := wstest.ReadMessage(t, ws); string(p) != "hi" {
			t.Fatalf("Host %s: echo %q", host, p)
		}
		ws.Close()
	}
	if n := served.Load(); n != 3 {
		t.Errorf("%d sessions served, want the 3 allowed", n)
	}
	refusedMu.Lock()
	if len(refused) != 2 || refused[0] != evil || refused[1] != evil {
		t.Errorf("OnHostRefused saw %q, want %s twice", refused, evil)
	}
	refusedMu.Unlock()

	// With a Fallback, plain requests go to it (it has its own policy);
	// upgrades are still checked here.
	cfg.Fallback = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fellBack.Add(1) })
	s = serve(t, cfg)
	if _, resp, err := wstest.Dialer("v12.stomp").Dial(s.url("/stomp"), http.Header{"Host": {evil}}); err == nil || resp == nil ||
		resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("foreign Host with a Fallback: err %v, resp %v; want a 421", err, resp)
	}
	req, _ = http.NewRequest(http.MethodGet, "http://"+s.addr+"/", nil)
	req.Host = evil
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req); err != nil || fellBack.Load() != 1 {
		t.Fatalf("plain request with a Fallback: %v %v, fallback called %d times", resp, err, fellBack.Load())
	} else {
		resp.Body.Close()
	}
	if n := served.Load(); n != 3 {
		t.Errorf("%d sessions served, want still 3", n)
	}
}

func TestNotAnUpgrade(t *testing.T) {
	s := serve(t, Config{Handlers: allHandlers(echo)})
	status, hdr, body := httpGet(t, "http://"+s.addr+"/stomp")
	if status != http.StatusUpgradeRequired || hdr.Get("Upgrade") != "websocket" || !strings.Contains(body, "WebSocket") {
		t.Errorf("GET: %d, Upgrade %q, body %q; want 426 naming WebSocket", status, hdr.Get("Upgrade"), body)
	}

	req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/stomp", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST upgrade: %d, want 405", resp.StatusCode)
	}

	// A bad handshake (no key) is refused by the upgrader, in text.
	req, _ = http.NewRequest(http.MethodGet, "http://"+s.addr+"/stomp", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	resp, err = (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("upgrade without a key: %d, want 400", resp.StatusCode)
	}
	if n := s.h.Connections(); n != 0 {
		t.Errorf("Connections = %d after refusals", n)
	}
}

// syncBuffer is a bytes.Buffer safe for the handler's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestLogging(t *testing.T) {
	var out syncBuffer
	s := serve(t, Config{Handlers: allHandlers(nop), Logger: zerolog.New(&out)})
	ws := wstest.Dial(t, s.url("/mqtt"))
	wstest.ExpectClose(t, ws, 1000)
	httpGet(t, "http://"+s.addr+"/")
	testserve.Eventually(t, "the log lines", func() bool {
		l := out.String()
		return strings.Contains(l, "websocket session open") && strings.Contains(l, "websocket session closed") &&
			strings.Contains(l, `"status":426`)
	})
}

func TestFallbackServesOtherRequests(t *testing.T) {
	console := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("console " + r.URL.Path))
	})
	s := serve(t, Config{Handlers: allHandlers(echo), Fallback: console})
	status, _, body := httpGet(t, "http://"+s.addr+"/api/v1/broker")
	if status != http.StatusOK || body != "console /api/v1/broker" {
		t.Fatalf("GET: %d %q, want the fallback's answer", status, body)
	}
	// Upgrades still reach the protocols.
	wstest.Dial(t, "ws://"+s.addr+"/", "v12.stomp").Close()
}
