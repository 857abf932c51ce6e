package transports_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/junctionmq/junction/transports"
)

// Detectors shaped like the protocols' own (stomp.Detect, mqtt.Detect,
// amqp.Detect), which transports may not import. cmd's tests run the
// real ones.
func detectAMQP(p []byte) bool { return bytes.HasPrefix(p, []byte("AMQP")) }

func detectMQTT(p []byte) bool {
	if len(p) < 2 || p[0] != 0x10 {
		return false
	}
	i := 1
	for ; i < len(p) && i < 5 && p[i]&0x80 != 0; i++ {
	}
	rest := p[min(i+1, len(p)):]
	return bytes.HasPrefix(rest, []byte("\x00\x04MQTT"))
}

func detectSTOMP(p []byte) bool {
	p = bytes.TrimLeft(p, "\r\n")
	for _, c := range []string{"CONNECT\n", "CONNECT\r\n", "STOMP\n", "STOMP\r\n"} {
		if bytes.HasPrefix(p, []byte(c)) {
			return true
		}
	}
	return false
}

// tagged returns a handler that writes name and a newline, then echoes
// everything it reads: a client reading its own bytes back after the tag
// proves the route and the byte-for-byte replay of the prefix.
func tagged(name string) transports.Handler {
	return func(_ context.Context, c net.Conn) {
		_, _ = io.WriteString(c, name+"\n")
		_, _ = io.Copy(c, c)
	}
}

func protocols() []transports.Protocol {
	return []transports.Protocol{
		{Name: "http", Detect: transports.DetectHTTP, Handler: tagged("http")},
		{Name: "amqp", Detect: detectAMQP, Handler: tagged("amqp")},
		{Name: "mqtt", Detect: detectMQTT, Handler: tagged("mqtt")},
		{Name: "stomp", Detect: detectSTOMP, Handler: tagged("stomp")},
	}
}

// unknownLog records OnUnknown calls.
type unknownLog struct {
	mu    sync.Mutex
	calls []unknownCall
	ch    chan unknownCall
}

type unknownCall struct {
	prefix string
	err    error
}

func newUnknownLog() *unknownLog { return &unknownLog{ch: make(chan unknownCall, 100)} }

func (l *unknownLog) hook(_ net.Conn, prefix []byte, err error) {
	c := unknownCall{string(prefix), err}
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	l.ch <- c
}

func (l *unknownLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// startMux serves mux on a loopback port and returns its address.
func startMux(t *testing.T, mux *transports.Mux) (string, *transports.Server) {
	t.Helper()
	s := &transports.Server{Name: "all", Handler: mux.ServeConn, OnLimit: mux.Reject}
	addr, _ := start(t, s)
	return addr, s
}

// expectRoute reads the handler's tag from c, then checks that sent
// comes back.
func expectRoute(t *testing.T, c net.Conn, name, sent string) {
	t.Helper()
	r := bufio.NewReader(c)
	tag, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading tag: %v (got %q)", err, tag)
	}
	if tag != name+"\n" {
		t.Fatalf("routed to %q, want %q", strings.TrimSpace(tag), name)
	}
	got := make([]byte, len(sent))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("reading echo: %v (got %q)", err, got)
	}
	if string(got) != sent {
		t.Fatalf("echo %q, want %q", got, sent)
	}
}

var mqttConnect = string([]byte{
	0x10, 16, // CONNECT, remaining length
	0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, // protocol name, level 4, clean session, keep-alive
	0, 4, 'a', 'b', 'c', 'd', // client id
})

var routeCases = []struct {
	name, proto, first string
}{
	{"amqp", "amqp", "AMQP\x00\x01\x00\x00"},
	{"amqp-sasl", "amqp", "AMQP\x03\x01\x00\x00"},
	{"mqtt", "mqtt", mqttConnect},
	{"stomp-connect", "stomp", "CONNECT\naccept-version:1.2\nhost:/\n\n\x00"},
	{"stomp-stomp-crlf", "stomp", "STOMP\r\naccept-version:1.2\r\n\r\n\x00"},
	{"stomp-after-eols", "stomp", "\n\r\n\nCONNECT\n\n\x00"},
	// A first frame far longer than MaxPrefix: replay, then the rest.
	{"stomp-long", "stomp", "CONNECT\nlogin:" + strings.Repeat("x", 5000) + "\n\n\x00"},
	{"http-get", "http", "GET /stomp HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n\r\n"},
	{"http-post", "http", "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n"},
	{"http-connect", "http", "CONNECT localhost:61613 HTTP/1.1\r\n\r\n"},
}

func TestMuxRoutes(t *testing.T) {
	addr, _ := startMux(t, &transports.Mux{Protocols: protocols()})
	for _, tc := range routeCases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			if _, err := io.WriteString(c, tc.first+"more"); err != nil {
				t.Fatal(err)
			}
			expectRoute(t, c, tc.proto, tc.first+"more")
			roundTrip(t, c, "and again")
		})
	}
}

// TestMuxRoutesDribbled sends each first packet a byte at a time, so
// detection has to grow its prefix across reads.
func TestMuxRoutesDribbled(t *testing.T) {
	addr, _ := startMux(t, &transports.Mux{Protocols: protocols()})
	for _, tc := range routeCases {
		if len(tc.first) > 100 {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := dial(t, addr)
			if tcp, ok := c.(*net.TCPConn); ok {
				_ = tcp.SetNoDelay(true)
			}
			for i := range len(tc.first) {
				if _, err := c.Write([]byte{tc.first[i]}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond)
			}
			expectRoute(t, c, tc.proto, tc.first)
		})
	}
}

// TestMuxOrder checks that the first Protocol to say yes wins.
func TestMuxOrder(t *testing.T) {
	yes := func([]byte) bool { return true }
	addr, _ := startMux(t, &transports.Mux{Protocols: []transports.Protocol{
		{Name: "first", Detect: yes, Handler: tagged("first")},
		{Name: "second", Detect: yes, Handler: tagged("second")},
	}})
	c := dial(t, addr)
	_, _ = io.WriteString(c, "x")
	expectRoute(t, c, "first", "x")
}

func TestMuxSilentClientTimesOut(t *testing.T) {
	const detect = 300 * time.Millisecond
	log := newUnknownLog()
	addr, _ := startMux(t, &transports.Mux{Protocols: protocols(), DetectTimeout: detect, OnUnknown: log.hook})

	for _, tc := range []struct{ name, sent string }{
		{"nothing", ""},
		{"incomplete", "CONNE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			begin := time.Now()
			_, _ = io.WriteString(c, tc.sent)
			expectEOF(t, c, "")
			el := time.Since(begin)
			if el < detect-50*time.Millisecond || el > detect+2*time.Second {
				t.Fatalf("closed after %v, want about %v", el, detect)
			}
			call := recv(t, log.ch, "OnUnknown")
			if call.prefix != tc.sent || !errors.Is(call.err, transports.ErrDetectTimeout) {
				t.Fatalf("OnUnknown(%q, %v), want (%q, ErrDetectTimeout)", call.prefix, call.err, tc.sent)
			}
		})
	}
}

// TestMuxDribblerTimesOut: a client that keeps sending, a byte at a
// time, bytes that could still begin a protocol (STOMP allows end of
// lines before CONNECT) is cut at DetectTimeout all the same: the
// deadline is set once, not per read.
func TestMuxDribblerTimesOut(t *testing.T) {
	const detect = 300 * time.Millisecond
	log := newUnknownLog()
	addr, _ := startMux(t, &transports.Mux{Protocols: protocols(), DetectTimeout: detect, OnUnknown: log.hook})
	c := dial(t, addr)
	begin := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if _, err := c.Write([]byte("\n")); err != nil {
				return
			}
		}
	}()
	expectEOF(t, c, "")
	if el := time.Since(begin); el > detect+2*time.Second {
		t.Fatalf("dribbler closed after %v, want about %v", el, detect)
	}
	call := recv(t, log.ch, "OnUnknown")
	if !errors.Is(call.err, transports.ErrDetectTimeout) || strings.Trim(call.prefix, "\n") != "" || call.prefix == "" {
		t.Fatalf("OnUnknown(%q, %v), want newlines and ErrDetectTimeout", call.prefix, call.err)
	}
}

func TestMuxGarbageClosedQuickly(t *testing.T) {
	log := newUnknownLog()
	// The default DetectTimeout (5s): garbage must not wait for it.
	addr, _ := startMux(t, &transports.Mux{Protocols: protocols(), OnUnknown: log.hook})

	garbage := strings.Repeat("\x00\xffjunk", 30)
	c := dial(t, addr)
	begin := time.Now()
	_, _ = io.WriteString(c, garbage)
	expectEOF(t, c, "")
	if el := time.Since(begin); el > time.Second {
		t.Fatalf("garbage closed after %v, want well under DetectTimeout", el)
	}
	call := recv(t, log.ch, "OnUnknown")
	if call.prefix != garbage[:64] || !errors.Is(call.err, transports.ErrUnknownProtocol) {
		t.Fatalf("OnUnknown(%q, %v), want the first 64 bytes and ErrUnknownProtocol", call.prefix, call.err)
	}

	// A peer that connects and hangs up (a TCP health check).
	c = dial(t, addr)
	c.Close()
	call = recv(t, log.ch, "OnUnknown")
	if call.prefix != "" || call.err != io.EOF {
		t.Fatalf("OnUnknown(%q, %v), want (\"\", EOF)", call.prefix, call.err)
	}
}

func TestMuxMaxPrefix(t *testing.T) {
	log := newUnknownLog()
	addr, _ := startMux(t, &transports.Mux{Protocols: protocols(), MaxPrefix: 8, OnUnknown: log.hook})
	// 8 end-of-lines, then CONNECT: past MaxPrefix.
	c := dial(t, addr)
	_, _ = io.WriteString(c, "\n\n\n\n\n\n\n\nCONNECT\n\n\x00")
	expectEOF(t, c, "")
	if call := recv(t, log.ch, "OnUnknown"); call.prefix != "\n\n\n\n\n\n\n\n" || !errors.Is(call.err, transports.ErrUnknownProtocol) {
		t.Fatalf("OnUnknown(%q, %v)", call.prefix, call.err)
	}
	c = dial(t, addr)
	_, _ = io.WriteString(c, "AMQP\x00\x01\x00\x00")
	expectRoute(t, c, "amqp", "AMQP\x00\x01\x00\x00")
}

// TestMuxKeepsServing holds connections in detection while others are
// routed and served, then shuts down: detection is cut short by the
// Server's context, without OnUnknown.
func TestMuxKeepsServing(t *testing.T) {
	log := newUnknownLog()
	addr, s := startMux(t, &transports.Mux{Protocols: protocols(), OnUnknown: log.hook})

	for range 10 {
		c := dial(t, addr)
		_, _ = io.WriteString(c, "CONN") // never completed
	}
	begin := time.Now()
	var wg sync.WaitGroup
	for i := range 20 {
		tc := routeCases[i%len(routeCases)]
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", addr, timeout)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(timeout))
			_, _ = io.WriteString(c, tc.first)
			r := bufio.NewReader(c)
			tag, err := r.ReadString('\n')
			if err != nil || tag != tc.proto+"\n" {
				t.Errorf("%s: tag %q, %v", tc.name, tag, err)
				return
			}
			got := make([]byte, len(tc.first))
			if _, err := io.ReadFull(r, got); err != nil || string(got) != tc.first {
				t.Errorf("%s: echo %q, %v", tc.name, got, err)
			}
		})
	}
	wg.Wait()
	if el := time.Since(begin); el > 2*time.Second {
		t.Fatalf("20 connections took %v beside 10 stalled ones", el)
	}
	// The served connections' goroutines end once their clients hang up.
	for deadline := time.Now().Add(timeout); s.Stats().Open != 10; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Stats = %+v, want the 10 stalled connections open", s.Stats())
		}
	}

	begin = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if el := time.Since(begin); el > time.Second {
		t.Fatalf("Shutdown took %v with connections in detection", el)
	}
	if n := log.count(); n != 0 {
		t.Fatalf("OnUnknown called %d times for connections cut by shutdown", n)
	}
}

// TestMuxReject checks that a connection over MaxConns reaches its
// protocol's Reject with the prefix replayed.
func TestMuxReject(t *testing.T) {
	protos := protocols()
	for i := range protos {
		if protos[i].Name == "stomp" {
			protos[i].Reject = func(c net.Conn) {
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = fmt.Fprintf(c, "busy, you said %q", line)
			}
		}
	}
	mux := &transports.Mux{Protocols: protos}
	s := &transports.Server{Handler: mux.ServeConn, OnLimit: mux.Reject, MaxConns: 1}
	addr, _ := start(t, s)

	c1 := dial(t, addr)
	_, _ = io.WriteString(c1, "AMQP\x00\x01\x00\x00")
	expectRoute(t, c1, "amqp", "AMQP\x00\x01\x00\x00")

	c2 := dial(t, addr)
	_, _ = io.WriteString(c2, "CONNECT\n\n\x00")
	expectEOF(t, c2, `busy, you said "CONNECT\n"`)

	// A protocol without Reject: closed.
	c3 := dial(t, addr)
	_, _ = io.WriteString(c3, "AMQP\x00\x01\x00\x00")
	expectEOF(t, c3, "")
}

// TestMuxConnDeadlines checks that the handler's conn has no deadline
// left from detection, and that its own deadlines work.
func TestMuxConnDeadlines(t *testing.T) {
	const detect = 200 * time.Millisecond
	proto := transports.Protocol{
		Name:   "amqp",
		Detect: detectAMQP,
		Handler: func(_ context.Context, c net.Conn) {
			buf := make([]byte, 12)
			if _, err := io.ReadFull(c, buf); err != nil {
				_, _ = fmt.Fprintf(c, "read: %v", err)
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			_, err := c.Read(buf)
			_, _ = fmt.Fprintf(c, "%s %v", buf, errors.Is(err, os.ErrDeadlineExceeded))
		},
	}
	addr, _ := startMux(t, &transports.Mux{Protocols: []transports.Protocol{proto}, DetectTimeout: detect})
	c := dial(t, addr)
	_, _ = io.WriteString(c, "AMQP\x00\x01\x00\x00")
	time.Sleep(2 * detect)
	_, _ = io.WriteString(c, "late")
	expectEOF(t, c, "AMQP\x00\x01\x00\x00late true")
}

// TestMuxHTTP routes HTTP requests to the HTTP handler, which reads
// them whole (the method replayed) and answers on the same connection,
// keep-alive included, while the port serves other protocols.
func TestMuxHTTP(t *testing.T) {
	protos := protocols()
	protos[0].Handler = func(_ context.Context, c net.Conn) {
		r := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(r)
			if err != nil {
				return
			}
			body := "hello " + req.Method + " " + req.URL.Path
			resp := &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, ContentLength: int64(len(body)),
				Body: io.NopCloser(strings.NewReader(body)), Request: req}
			if err := resp.Write(c); err != nil {
				return
			}
		}
	}
	addr, s := startMux(t, &transports.Mux{Protocols: protos})

	client := &http.Client{Timeout: timeout}
	defer client.CloseIdleConnections()
	for _, path := range []string{"/a", "/b"} {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "hello GET "+path {
			t.Fatalf("GET %s = %q", path, body)
		}
	}
	if st := s.Stats(); st.Accepted != 1 {
		t.Fatalf("Stats = %+v, want the two requests on one connection", st)
	}
	c := dial(t, addr)
	_, _ = io.WriteString(c, "STOMP\n\n\x00")
	expectRoute(t, c, "stomp", "STOMP\n\n\x00")
}

func TestDetectHTTP(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   bool
	}{
		{"GET / HTTP/1.1\r\n", true},
		{"GET ", true},
		{"HEAD /", true},
		{"OPTIONS * HTTP/1.1", true},
		{"CONNECT host:1 HTTP/1.1", true},
		{"GET", false},
		{"GETX /", false},
		{"CONNECT\n", false}, // STOMP
		{"get / HTTP/1.1", false},
		{"PRI * HTTP/2.0", false},
		{"", false},
	} {
		if got := transports.DetectHTTP([]byte(tc.prefix)); got != tc.want {
			t.Errorf("DetectHTTP(%q) = %v, want %v", tc.prefix, got, tc.want)
		}
	}
}

func TestDetectTLS(t *testing.T) {
	for _, tc := range []struct {
		prefix []byte
		want   bool
	}{
		{[]byte{22, 3, 1, 0, 200, 1}, true},
		{[]byte{22, 3, 3}, true},
		{[]byte{22, 3}, false},
		{[]byte{22, 2, 0}, false}, // SSL 2
		{[]byte{23, 3, 3}, false}, // application data
		{[]byte("AMQP"), false},
	} {
		if got := transports.DetectTLS(tc.prefix); got != tc.want {
			t.Errorf("DetectTLS(%v) = %v, want %v", tc.prefix, got, tc.want)
		}
	}
}

func TestConnectionStatePlain(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, ok := transports.ConnectionState(a); ok {
		t.Fatal("ConnectionState of a pipe: ok")
	}
	if _, ok := transports.PeerCertificate(a); ok {
		t.Fatal("PeerCertificate of a pipe: ok")
	}
	if _, ok := transports.ConnectionState(nil); ok {
		t.Fatal("ConnectionState(nil): ok")
	}
}
