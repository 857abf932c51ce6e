package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	gws "github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

// httpAs sends one request to addr (host:port) with the Host header
// forged to host, as a page on a DNS-rebinding domain makes a browser
// do, and returns the status and body.
func httpAs(t *testing.T, method, addr, path, host, body string, hdr ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// short cuts a response body for an error message.
func short(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

// wsAs dials a STOMP WebSocket at addr with the Host header forged to
// host (and a matching Origin, as a browser sends), and returns the
// connection (nil when refused) and the HTTP status of the answer.
func wsAs(t *testing.T, addr, host string) (*gws.Conn, int) {
	t.Helper()
	d := gws.Dialer{Subprotocols: []string{"v12.stomp"}, HandshakeTimeout: 5 * time.Second}
	ws, resp, err := d.Dial("ws://"+addr+"/stomp", http.Header{"Host": {host}, "Origin": {"http://" + host}})
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	if err != nil {
		return nil, status
	}
	return ws, status
}

// stompOverWS sends an anonymous CONNECT and reports whether CONNECTED
// came back.
func stompOverWS(t *testing.T, ws *gws.Conn) bool {
	t.Helper()
	defer ws.Close()
	ws.WriteMessage(gws.TextMessage, []byte("CONNECT\naccept-version:1.2\nhost:/\n\n\x00"))
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, msg, err := ws.ReadMessage()
	return err == nil && strings.HasPrefix(string(msg), "CONNECTED")
}

// rejectedMetric reads junction_http_requests_rejected_total for a
// listener and reason from /metrics (asked with an allowed Host).
func rejectedMetric(t *testing.T, console, listener, reason string) int {
	t.Helper()
	status, body := httpAs(t, "GET", console, "/metrics", console, "")
	if status != 200 {
		t.Fatalf("/metrics: %d", status)
	}
	re := regexp.MustCompile(`(?m)^junction_http_requests_rejected_total\{listener="` + regexp.QuoteMeta(listener) +
		`",reason="` + reason + `"\} (\d+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// DNS rebinding (issue 21): a page on attacker.example, resolved to
// 127.0.0.1 once loaded, makes the browser send Host: attacker.example
// with a matching Origin. Nothing it asks of the console, its API,
// /metrics or the WebSocket endpoints may happen.
func TestForeignHostRefused(t *testing.T) {
	startServe(t, testConfig(t))
	in := lastInstance
	console := in.addrs["console"].String()
	_, port, _ := strings.Cut(console, ":")
	evil := "attacker.example:" + port
	origin := []string{"Origin", "http://" + evil}
	if status, body := httpAs(t, "POST", console, "/api/v1/queues", console, `{"name":"existing"}`); status != http.StatusCreated {
		t.Fatalf("create with the console's own Host: %d %s", status, short(body))
	}

	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/v1/queues", `{"name":"rebound"}`},
		{"POST", "/api/v1/send", `{"address":"rebound","body":"x"}`},
		{"GET", "/api/v1/queues", ""},
		{"DELETE", "/api/v1/queues/existing", ""},
		{"GET", "/api/v1/broker", ""},
		{"GET", "/metrics", ""},
		{"GET", "/", ""},
		{"GET", "/app.js", ""},
	} {
		if status, body := httpAs(t, c.method, console, c.path, evil, c.body, origin...); status != http.StatusMisdirectedRequest {
			t.Errorf("%s %s with Host %s: %d %s, want 421", c.method, c.path, evil, status, short(body))
		}
	}
	// Nothing happened: no queue was created, none deleted, nothing sent.
	queues := map[string]bool{}
	for _, q := range in.broker.QueueStats() {
		queues[q.Name] = true
	}
	if queues["rebound"] || !queues["existing"] {
		t.Errorf("requests with a foreign Host had effects: queues %v", queues)
	}
	if n := rejectedMetric(t, console, "console", "host"); n != 8 {
		t.Errorf("junction_http_requests_rejected_total{listener=console,reason=host} = %d, want 8", n)
	}

	// Probes keep working whatever Host a load balancer or kubelet sends.
	for _, p := range []string{"/healthz", "/readyz"} {
		if status, _ := httpAs(t, "GET", console, p, "10.9.8.7:"+port, ""); status != 200 {
			t.Errorf("%s with an IP Host: %d, want 200", p, status)
		}
	}

	// The WebSocket port and the one port: no upgrade, so no anonymous
	// STOMP CONNECT; and the console they serve as a fallback is shut too.
	for _, name := range []string{"websocket", "all"} {
		addr := in.addrs[name].String()
		_, p, _ := strings.Cut(addr, ":")
		if ws, status := wsAs(t, addr, "attacker.example:"+p); ws != nil {
			connected := stompOverWS(t, ws)
			t.Errorf("%s: upgraded with a foreign Host (STOMP CONNECTED: %v)", name, connected)
		} else if status != http.StatusMisdirectedRequest {
			t.Errorf("%s: upgrade with a foreign Host answered %d, want 421", name, status)
		}
		if status, _ := httpAs(t, "POST", addr, "/api/v1/queues", "attacker.example:"+p, `{"name":"rebound"}`,
			"Origin", "http://attacker.example:"+p); status != http.StatusMisdirectedRequest {
			t.Errorf("%s: the console fallback with a foreign Host answered %d, want 421", name, status)
		}
		if n := rejectedMetric(t, console, name, "host"); n != 2 {
			t.Errorf("junction_http_requests_rejected_total{listener=%s,reason=host} = %d, want 2", name, n)
		}
	}
}

// The broker's own names still work: the listener's address, localhost
// and the loopback addresses, on every HTTP endpoint.
func TestOwnHostsAllowed(t *testing.T) {
	startServe(t, testConfig(t))
	in := lastInstance
	console := in.addrs["console"].String()
	_, port, _ := strings.Cut(console, ":")
	for _, host := range []string{console, "127.0.0.1", "localhost:" + port, "LOCALHOST.:" + port, "[::1]:" + port} {
		if status, body := httpAs(t, "POST", console, "/api/v1/queues", host, `{"name":"own-`+strings.NewReplacer(":", "", "[", "", "]", "", ".", "").Replace(host)+`"}`,
			"Origin", "http://"+host); status != http.StatusCreated {
			t.Errorf("create with Host %s: %d %s, want 201", host, status, short(body))
		}
		if status, _ := httpAs(t, "GET", console, "/metrics", host, ""); status != 200 {
			t.Errorf("/metrics with Host %s: %d", host, status)
		}
	}
	for _, name := range []string{"websocket", "all"} {
		addr := in.addrs[name].String()
		_, p, _ := strings.Cut(addr, ":")
		for _, host := range []string{addr, "localhost:" + p} {
			ws, status := wsAs(t, addr, host)
			if ws == nil {
				t.Errorf("%s with Host %s: refused %d", name, host, status)
				continue
			}
			if !stompOverWS(t, ws) {
				t.Errorf("%s with Host %s: no CONNECTED", name, host)
			}
		}
	}
}

// --console-allowed-hosts and --ws-allowed-hosts add names: host alone
// (any port) or host:port (that port only). The console's list governs
// the console wherever it is served, the WebSocket list the upgrades;
// wss is checked like ws.
func TestConfiguredAllowedHosts(t *testing.T) {
	ca, cert, key, _ := writeCerts(t, t.TempDir())
	cfg := testConfig(t)
	cfg.TLS.Cert, cfg.TLS.Key, cfg.TLS.WebSocket = cert, key, "127.0.0.1:0"
	cfg.Console.AllowedHosts = "Broker.Example.com, app.example:9999"
	cfg.WebSocket.AllowedHosts = "ws.example.com"
	startServe(t, cfg)
	in := lastInstance
	console := in.addrs["console"].String()
	_, port, _ := strings.Cut(console, ":")

	for host, want := range map[string]int{
		"broker.example.com:" + port: 201,
		"broker.example.com.":        201,
		"app.example:9999":           201,
		"app.example:" + port:        421,
		"ws.example.com:" + port:     421,
	} {
		name := "q" + strconv.Itoa(len(host)) + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' {
				return r
			}
			return -1
		}, host)
		if status, body := httpAs(t, "POST", console, "/api/v1/queues", host, `{"name":"`+name+`"}`, "Origin", "http://"+host); status != want {
			t.Errorf("console, Host %s: %d %s, want %d", host, status, short(body), want)
		}
	}

	ws := in.addrs["websocket"].String()
	_, wsPort, _ := strings.Cut(ws, ":")
	if conn, status := wsAs(t, ws, "ws.example.com:"+wsPort); conn == nil {
		t.Errorf("websocket, Host ws.example.com: refused %d", status)
	} else if !stompOverWS(t, conn) {
		t.Error("websocket, Host ws.example.com: no CONNECTED")
	}
	if conn, status := wsAs(t, ws, "broker.example.com:"+wsPort); conn != nil || status != http.StatusMisdirectedRequest {
		t.Errorf("websocket, Host allowed for the console only: upgraded %v, status %d; want 421", conn != nil, status)
	}
	// The console served on the WebSocket port follows the console's list.
	if status, _ := httpAs(t, "GET", ws, "/api/v1/broker", "broker.example.com:"+wsPort, ""); status != 200 {
		t.Errorf("console fallback on the WebSocket port, Host broker.example.com: %d, want 200", status)
	}
	if status, _ := httpAs(t, "GET", ws, "/api/v1/broker", "ws.example.com:"+wsPort, ""); status != 421 {
		t.Errorf("console fallback on the WebSocket port, Host ws.example.com: %d, want 421", status)
	}

	// wss: the same list.
	wss := in.addrs["websocket+tls"].String()
	_, wssPort, _ := strings.Cut(wss, ":")
	for host, ok := range map[string]bool{wss: true, "ws.example.com:" + wssPort: true, "attacker.example:" + wssPort: false} {
		d := gws.Dialer{Subprotocols: []string{"v12.stomp"}, HandshakeTimeout: 5 * time.Second,
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}}
		conn, resp, err := d.Dial("wss://"+wss+"/stomp", http.Header{"Host": {host}})
		switch {
		case ok && err != nil:
			t.Errorf("wss, Host %s: %v", host, err)
		case ok:
			if !stompOverWS(t, conn) {
				t.Errorf("wss, Host %s: no CONNECTED", host)
			}
		case err == nil:
			conn.Close()
			t.Errorf("wss, Host %s: upgraded", host)
		case resp == nil || resp.StatusCode != http.StatusMisdirectedRequest:
			t.Errorf("wss, Host %s: %v %v; want 421", host, resp, err)
		}
	}
	if n := rejectedMetric(t, console, "websocket+tls", "host"); n != 1 {
		t.Errorf("junction_http_requests_rejected_total{listener=websocket+tls} = %d, want 1", n)
	}
}

// The Origin check compares with the allow-list, not with the request's
// own Host: a page from a foreign origin cannot mutate through an
// allowed Host, nor open a WebSocket; pages from the broker's names can.
func TestOriginAgainstAllowList(t *testing.T) {
	startServe(t, testConfig(t))
	in := lastInstance
	console := in.addrs["console"].String()
	ws := in.addrs["websocket"].String()
	for origin, want := range map[string]int{
		"http://attacker.example:1234": 403,
		"null":                         403,
		"http://localhost:3000":        201, // another port of an allowed host
		"http://" + console:            201,
	} {
		name := "o" + strconv.Itoa(len(origin))
		if status, body := httpAs(t, "POST", console, "/api/v1/queues", console, `{"name":"`+name+`"}`, "Origin", origin); status != want {
			t.Errorf("Origin %s: %d %s, want %d", origin, status, short(body), want)
		}
	}
	d := gws.Dialer{Subprotocols: []string{"v12.stomp"}, HandshakeTimeout: 5 * time.Second}
	if conn, resp, err := d.Dial("ws://"+ws+"/stomp", http.Header{"Origin": {"http://attacker.example"}}); err == nil {
		conn.Close()
		t.Error("a foreign page opened a WebSocket")
	} else if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("foreign page: %v %v; want 403", resp, err)
	}
	conn, _, err := d.Dial("ws://"+ws+"/stomp", http.Header{"Origin": {"http://" + console}})
	if err != nil {
		t.Fatalf("the console's page: %v", err)
	}
	if !stompOverWS(t, conn) {
		t.Error("the console's page: no CONNECTED")
	}
}

func TestAllowedHostsConfig(t *testing.T) {
	cfg, errs := parseConfig([]byte("console:\n  allowed-hosts: broker.example.com, 10.0.0.5:8161\nwebsocket:\n  allowed-hosts: \"*\"\n"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if cfg.Console.AllowedHosts != "broker.example.com, 10.0.0.5:8161" || cfg.WebSocket.AllowedHosts != "*" {
		t.Fatalf("from YAML: console %q, websocket %q", cfg.Console.AllowedHosts, cfg.WebSocket.AllowedHosts)
	}
	cfg, err := loadConfig([]string{"--console-allowed-hosts", "a.example"}, func(k string) string {
		if k == "JUNCTION_WS_ALLOWED_HOSTS" {
			return "b.example:61614"
		}
		return ""
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Console.AllowedHosts != "a.example" || cfg.WebSocket.AllowedHosts != "b.example:61614" {
		t.Fatalf("from flag and env: console %q, websocket %q", cfg.Console.AllowedHosts, cfg.WebSocket.AllowedHosts)
	}
	_, errs = parseConfig([]byte("console:\n  allowed-hosts: http://broker.example.com\nwebsocket:\n  allowed-hosts: ok.example, \"*.example\"\n"))
	report := fmt.Sprint(errs)
	for _, want := range []string{"line 2: console.allowed-hosts", "http://broker.example.com", "line 4: websocket.allowed-hosts", "*.example"} {
		if !strings.Contains(report, want) {
			t.Errorf("errors lack %q: %s", want, report)
		}
	}
	if _, err := loadConfig([]string{"--ws-allowed-hosts", "a b"}, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "websocket.allowed-hosts") {
		t.Errorf("a bad --ws-allowed-hosts: %v", err)
	}
}

// "*" is warned about when it opens something without a login.
func TestAllowedHostsAnyWarns(t *testing.T) {
	for _, c := range []struct {
		console, ws       string
		login, anonymous  bool
		wantConsole, want bool
	}{
		{console: "*", wantConsole: true},
		{console: "*", login: true},
		{ws: "*", anonymous: true, want: true},
		{ws: "*"},
		{console: "x.example", ws: "y.example", anonymous: true},
	} {
		cfg := testConfig(t)
		cfg.Console.AllowedHosts, cfg.WebSocket.AllowedHosts = c.console, c.ws
		var buf strings.Builder
		if _, err := newHostGuard(cfg, zerolog.New(&buf), c.login, c.anonymous); err != nil {
			t.Fatal(err)
		}
		log := buf.String()
		if got := strings.Contains(log, "console-allowed-hosts is *"); got != c.wantConsole {
			t.Errorf("%+v: console warning %v, want %v: %s", c, got, c.wantConsole, log)
		}
		if got := strings.Contains(log, "ws-allowed-hosts is *"); got != c.want {
			t.Errorf("%+v: websocket warning %v, want %v: %s", c, got, c.want, log)
		}
	}
}

// Refusals are counted one by one and logged once per interval at most.
func TestHostRefusalsLoggedOncePerInterval(t *testing.T) {
	var buf strings.Builder
	g, err := newHostGuard(testConfig(t), zerolog.New(&buf), false, true)
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset() // the allow-lists, at debug level
	r := httptest.NewRequest("GET", "http://attacker.example/", nil)
	r = r.WithContext(context.WithValue(r.Context(), listenerKey{}, "console"))
	for range 50 {
		g.refused(r)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines for 50 refusals in one interval, want 1:\n%s", n, buf.String())
	}
	g.mu.Lock()
	g.last = g.last.Add(-g.every) // the interval has passed
	g.mu.Unlock()
	g.refused(r)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"console":50`) || !strings.Contains(lines[1], `"last_host":"attacker.example"`) {
		t.Fatalf("second line %q, want the 50 refusals since the first", lines[len(lines)-1])
	}
	if got := g.rejections()["console"]["host"]; got != 51 {
		t.Fatalf("counted %d refusals, want 51", got)
	}
}
