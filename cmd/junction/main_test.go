package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/stompclient"
)

func noEnv(string) string { return "" }

// startServe runs the serve command in the background with args and
// returns the STOMP address once it listens, and a function that stops
// it and returns serve's error.
func startServe(t *testing.T, cfg Config) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *instance, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() { done <- serve(ctx, cfg, &lockedWriter{w: &logs}, func(in *instance) { ready <- in }) }()
	select {
	case in := <-ready:
		var once sync.Once
		var serveErr error
		stop := func() error {
			once.Do(func() {
				cancel()
				select {
				case serveErr = <-done:
				case <-time.After(15 * time.Second):
					serveErr = errors.New("serve did not return within 15s of cancel")
				}
			})
			return serveErr
		}
		t.Cleanup(func() { stop() })
		lastInstance = in
		return in.addrs["stomp"].String(), stop
	case err := <-done:
		cancel()
		t.Fatalf("serve failed: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("serve not ready within 10s")
	}
	return "", nil
}

// lastInstance is the instance startServe started last, for tests that
// need its other listeners.
var lastInstance *instance

func testConfig(t *testing.T) Config {
	cfg := defaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Stomp.Listen = "127.0.0.1:0"
	cfg.MQTT.Listen = "127.0.0.1:0"
	cfg.AMQP.Listen = "127.0.0.1:0"
	cfg.WebSocket.Listen = "127.0.0.1:0"
	cfg.All.Listen = "127.0.0.1:0"
	cfg.Console.Listen = "127.0.0.1:0"
	cfg.LogLevel = "debug"
	return cfg
}

func TestServeSendReceiveAndGracefulShutdown(t *testing.T) {
	addr, stop := startServe(t, testConfig(t))
	c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe("/queue/hello", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send("/queue/hello", "text/plain", []byte("world"), gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-sub.C:
		if string(m.Body) != "world" {
			t.Fatalf("got %q", m.Body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message")
	}
	// Shutdown tells the connected client and returns.
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("serve returned %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("graceful shutdown took %v", d)
	}
	select {
	case m := <-sub.C:
		if m.Err == nil || !strings.Contains(m.Err.Error(), "shutting down") {
			t.Fatalf("client saw %v, want the shutdown ERROR", m.Err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("client not told about the shutdown")
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("listener still open after shutdown")
	}
}

func TestConnectionLimit(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxConnections = 2
	addr, _ := startServe(t, cfg)
	var conns []*gostomp.Conn
	for range 2 {
		c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(nc)
	if !strings.HasPrefix(string(b), "ERROR\n") || !strings.Contains(string(b), "message:too many connections") {
		t.Fatalf("third connection got %q", b)
	}
	// A slot frees when a client leaves.
	conns[0].Disconnect()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0))
		if err == nil {
			c.Disconnect()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot after a client left: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	conns[1].Disconnect()
}

func TestConfigPrecedence(t *testing.T) {
	file := t.TempDir() + "/j.yaml"
	os.WriteFile(file, []byte("data-dir: /from/file\nlog-level: warn\nstomp:\n  listen: 127.0.0.1:1111\n  max-headers: 50\n"), 0o600)
	env := map[string]string{"JUNCTION_CONFIG": file, "JUNCTION_STOMP": "127.0.0.1:2222", "JUNCTION_LOG_LEVEL": "error"}
	cfg, err := loadConfig([]string{"--log-level", "debug", "--stomp-max-frame-size", "1MiB"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"data dir from file":       cfg.DataDir == "/from/file",
		"headers from file":        cfg.Stomp.MaxHeaders == 50,
		"listen from env":          cfg.Stomp.Listen == "127.0.0.1:2222",
		"log level from flag":      cfg.LogLevel == "debug",
		"frame size from flag":     cfg.Stomp.MaxFrameSize == 1<<20,
		"prefetch stays default":   cfg.Stomp.Prefetch == 1000,
		"heart-beat stays default": cfg.Stomp.HeartBeatMin == time.Second,
	}
	for what, ok := range want {
		if ok != true {
			t.Errorf("%s: config %+v", what, cfg)
		}
	}
	if _, err := loadConfig([]string{"--max-connections", "lots"}, noEnv, io.Discard); err == nil {
		t.Error("bad flag value accepted")
	}
	if _, err := loadConfig(nil, func(k string) string {
		if k == "JUNCTION_STOMP_HEART_BEAT" {
			return "often"
		}
		return ""
	}, io.Discard); err == nil || !strings.Contains(err.Error(), "JUNCTION_STOMP_HEART_BEAT") {
		t.Errorf("bad env value: %v", err)
	}
	if cfg, err := loadConfig(nil, noEnv, io.Discard); err != nil || cfg.Stomp.Listen != "127.0.0.1:61613" || cfg.DataDir != "./data" {
		t.Errorf("defaults: %+v %v", cfg, err)
	}
}

func TestConfigValidate(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"config", "validate", "../../testdata/config/full.yaml"}, noEnv, &out, io.Discard); err != nil {
		t.Fatalf("full.yaml: %v\n%s", err, out.String())
	}
	out.Reset()
	err := run(context.Background(), []string{"config", "validate", "../../testdata/config/bad.yaml"}, noEnv, &out, io.Discard)
	if err == nil {
		t.Fatal("bad.yaml validated")
	}
	report := out.String()
	for _, want := range []string{
		"line 2: log-level",
		"line 4: stomp.listen",
		"line 5:", // max-headers: many
		"line 6: stomp.heart-beat-min",
		"line 7: field colour not found",
		"line 9: address-settings.0",
		"line 10: address-settings.1",
		"line 13: cannot unmarshal !!str `maybe` into bool", // non-destructive
		"line 15: notifications.buffer",
		"line 16: config-watch-interval",
		"line 18: diverts.0", // forwards to its own address
		"line 21: diverts.1", // a bad selector
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}

func TestVersionAndUnknownCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, noEnv, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "junction ") {
		t.Fatalf("version: %q %v", out.String(), err)
	}
	if err := run(context.Background(), []string{"frobnicate"}, noEnv, io.Discard, io.Discard); err == nil {
		t.Fatal("unknown command accepted")
	}
}

func TestRunFailsOnBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := testConfig(t)
	cfg.Stomp.Listen = l.Addr().String()
	err = serve(context.Background(), cfg, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "stomp listener") {
		t.Fatalf("serve on a busy port: %v", err)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("error does not wrap the cause: %v", err)
	}
}

// quiet silences go-stomp's logging in tests.
var quiet = stompclient.Quiet

func TestSecondBrokerOnOneDataDirIsRefused(t *testing.T) {
	cfg := testConfig(t)
	startServe(t, cfg)
	err := serve(context.Background(), cfg, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second broker on the same data dir: %v", err)
	}
}

func TestPersistenceOffNeverTouchesTheDisk(t *testing.T) {
	cfg := testConfig(t)
	cfg.Persistence.Enabled = false
	addr, stop := startServe(t, cfg)
	c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send("/queue/q", "text/plain", []byte("x"), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true")); err != nil {
		t.Fatal(err)
	}
	c.Disconnect()
	stop()
	entries, err := os.ReadDir(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("persistence off, yet the data dir holds %d entries", len(entries))
	}
}

// A cluster node takes diverts and virtual topics in its configuration:
// its access broker applies diverts where a send enters the cluster,
// its groups' brokers virtual topics (a topic's consumer queues are in
// its group).
func TestConfigValidateTakesDivertsOnACluster(t *testing.T) {
	cfg := defaultConfig()
	cfg.Diverts = []core.Divert{{Name: "d", Address: "a", ForwardingAddress: "b"}}
	cfg.VirtualTopics = true
	has := func(errs []fieldError, path string) bool {
		return slices.ContainsFunc(errs, func(e fieldError) bool { return e.path == path })
	}
	for _, node := range []uint64{0, 1} {
		cfg.Cluster.NodeID = node
		if errs := cfg.validate(); has(errs, "diverts") || has(errs, "virtual-topics") {
			t.Fatalf("cluster node id %d refuses diverts or virtual topics: %v", node, errs)
		}
	}
}
