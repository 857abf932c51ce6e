package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"
	gws "github.com/gorilla/websocket"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/security"
	"github.com/junctionmq/junction/websocket/wstest"
)

// The test users' passwords: distinctive, so the log grep cannot match
// anything else.
const (
	alicePassword = "Alice-S3cret-Passw0rd-7741"
	bobPassword   = "Bob-S3cret-Passw0rd-9902"
	wrongPassword = "Wr0ng-Guess-Passw0rd-5150"
)

// syncLog is a log sink tests can read while the broker writes to it.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// writeUsers writes a users file with alice (admin) and bob (no roles)
// through the CLI, as an operator would.
func writeUsers(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.yaml")
	for _, args := range [][]string{
		{"user", "add", "--file", path, "alice", "--password", alicePassword, "--role", "admin"},
		{"user", "add", "--file", path, "bob", "--password", bobPassword},
	} {
		if err := run(context.Background(), args, noEnv, io.Discard, io.Discard); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	return path
}

// startSecure runs serve with cfg and returns the instance and its log.
func startSecure(t *testing.T, cfg Config) (*instance, *syncLog) {
	t.Helper()
	logs := &syncLog{}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *instance, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, logs, func(in *instance) { ready <- in }) }()
	select {
	case in := <-ready:
		t.Cleanup(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Error("serve did not return within 15s of cancel")
			}
		})
		return in, logs
	case err := <-done:
		cancel()
		t.Fatalf("serve failed: %v\n%s", err, logs)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("serve not ready within 10s")
	}
	return nil, nil
}

func secureConfig(t *testing.T, users string, anonymous bool) Config {
	cfg := testConfig(t) // debug logging
	cfg.Users = users
	cfg.AllowAnonymous = &anonymous
	return cfg
}

func stompLogin(in *instance, login, pass string) error {
	opts := []func(*gostomp.Conn) error{gostomp.ConnOpt.HeartBeat(0, 0)}
	if login != "" {
		opts = append(opts, gostomp.ConnOpt.Login(login, pass))
	}
	c, err := gostomp.Dial("tcp", in.addrs["stomp"].String(), opts...)
	if err != nil {
		return err
	}
	// A round trip proves the session works.
	err = c.Send("/queue/auth.check", "text/plain", []byte("x"), gostomp.SendOpt.Receipt)
	c.Disconnect()
	return err
}

func mqttLogin(in *instance, login, pass string) error {
	o := paho.NewClientOptions().AddBroker("tcp://" + in.addrs["mqtt"].String()).
		SetClientID("auth-" + login).SetAutoReconnect(false).SetConnectRetry(false).SetProtocolVersion(4).
		SetConnectTimeout(10 * time.Second)
	if login != "" {
		o.SetUsername(login).SetPassword(pass)
	}
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(15 * time.Second) {
		return errors.New("mqtt connect timed out")
	}
	if err := tok.Error(); err != nil {
		return err
	}
	c.Disconnect(100)
	return nil
}

// mqtt5Login connects with MQTT 5 (paho.golang); a refused login is a
// CONNACK with a failure reason code.
func mqtt5Login(in *instance, login, pass string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	nc, err := net.Dial("tcp", in.addrs["mqtt"].String())
	if err != nil {
		return err
	}
	c := paho5.NewClient(paho5.ClientConfig{ClientID: "auth5-" + login, Conn: nc})
	cp := &paho5.Connect{ClientID: "auth5-" + login, KeepAlive: 30, CleanStart: true}
	if login != "" {
		cp.Username, cp.UsernameFlag = login, true
		cp.Password, cp.PasswordFlag = []byte(pass), true
	}
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		nc.Close()
		return err
	}
	if ca.ReasonCode != 0 {
		nc.Close()
		return fmt.Errorf("CONNACK reason 0x%02x", ca.ReasonCode)
	}
	return c.Disconnect(&paho5.Disconnect{})
}

// wsStompLogin logs in with STOMP over a WebSocket (subprotocol
// v12.stomp) on the WebSocket port.
func wsStompLogin(in *instance, login, pass string) error {
	d := gws.Dialer{Subprotocols: []string{"v12.stomp"}, HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.Dial("ws://"+in.addrs["websocket"].String()+"/stomp", nil)
	if err != nil {
		return err
	}
	opts := []func(*gostomp.Conn) error{gostomp.ConnOpt.HeartBeat(0, 0)}
	if login != "" {
		opts = append(opts, gostomp.ConnOpt.Login(login, pass))
	}
	c, err := gostomp.Connect(wstest.NewConn(ws), opts...)
	if err != nil {
		ws.Close()
		return err
	}
	err = c.Send("/queue/auth.check", "text/plain", []byte("x"), gostomp.SendOpt.Receipt)
	c.Disconnect()
	return err
}

func amqpLogin(in *instance, sasl goamqp.SASLType) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var opts *goamqp.ConnOptions
	if sasl != nil {
		opts = &goamqp.ConnOptions{SASLType: sasl}
	}
	c, err := goamqp.Dial(ctx, "amqp://"+in.addrs["amqp"].String(), opts)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		return err
	}
	return s.Close(ctx)
}

func consoleGet(t *testing.T, in *instance, path, user, pass string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+in.addrs["console"].String()+path, nil)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestAuthEveryProtocol logs in over STOMP, MQTT, AMQP and the console
// with right and wrong passwords, unknown users and no credentials
// (anonymous off), with debug logging, then checks that no password
// reached the log.
func TestAuthEveryProtocol(t *testing.T) {
	in, logs := startSecure(t, secureConfig(t, writeUsers(t), false))

	check := func(what string, err error, wantOK bool) {
		t.Helper()
		if wantOK && err != nil {
			t.Errorf("%s: %v", what, err)
		}
		if !wantOK && err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
	t.Run("stomp", func(t *testing.T) {
		check("stomp right password", stompLogin(in, "bob", bobPassword), true)
		check("stomp wrong password", stompLogin(in, "bob", wrongPassword), false)
		check("stomp unknown user", stompLogin(in, "mallory", wrongPassword), false)
		check("stomp anonymous", stompLogin(in, "", ""), false)
		check("stomp admin", stompLogin(in, "alice", alicePassword), true)
	})
	t.Run("mqtt", func(t *testing.T) {
		check("mqtt right password", mqttLogin(in, "bob", bobPassword), true)
		check("mqtt wrong password", mqttLogin(in, "bob", wrongPassword), false)
		check("mqtt unknown user", mqttLogin(in, "mallory", wrongPassword), false)
		check("mqtt anonymous", mqttLogin(in, "", ""), false)
		check("mqtt admin", mqttLogin(in, "alice", alicePassword), true)
	})
	t.Run("mqtt5", func(t *testing.T) {
		check("mqtt5 right password", mqtt5Login(in, "bob", bobPassword), true)
		check("mqtt5 wrong password", mqtt5Login(in, "bob", wrongPassword), false)
		check("mqtt5 unknown user", mqtt5Login(in, "mallory", wrongPassword), false)
		check("mqtt5 anonymous", mqtt5Login(in, "", ""), false)
	})
	t.Run("websocket", func(t *testing.T) {
		check("stomp over ws right password", wsStompLogin(in, "bob", bobPassword), true)
		check("stomp over ws wrong password", wsStompLogin(in, "bob", wrongPassword), false)
		check("stomp over ws unknown user", wsStompLogin(in, "mallory", wrongPassword), false)
		check("stomp over ws anonymous", wsStompLogin(in, "", ""), false)
	})
	t.Run("amqp", func(t *testing.T) {
		check("amqp right password", amqpLogin(in, goamqp.SASLTypePlain("bob", bobPassword)), true)
		check("amqp wrong password", amqpLogin(in, goamqp.SASLTypePlain("bob", wrongPassword)), false)
		check("amqp unknown user", amqpLogin(in, goamqp.SASLTypePlain("mallory", wrongPassword)), false)
		check("amqp SASL ANONYMOUS", amqpLogin(in, goamqp.SASLTypeAnonymous()), false)
		check("amqp without SASL", amqpLogin(in, nil), false)
		check("amqp admin", amqpLogin(in, goamqp.SASLTypePlain("alice", alicePassword)), true)
	})
	t.Run("console", func(t *testing.T) {
		for _, c := range []struct {
			path, user, pass string
			want             int
		}{
			{"/api/v1/broker", "alice", alicePassword, http.StatusOK},
			{"/api/v1/broker", "bob", bobPassword, http.StatusForbidden},
			{"/api/v1/broker", "alice", wrongPassword, http.StatusUnauthorized},
			{"/api/v1/broker", "", "", http.StatusUnauthorized},
			{"/metrics", "", "", http.StatusUnauthorized},
			{"/healthz", "", "", http.StatusOK},
			{"/readyz", "", "", http.StatusOK},
		} {
			if got := consoleGet(t, in, c.path, c.user, c.pass); got != c.want {
				t.Errorf("GET %s as %q: %d, want %d", c.path, c.user, got, c.want)
			}
		}
		// The admin commands log in with --user and $JUNCTION_PASSWORD.
		console := in.addrs["console"].String()
		env := func(k string) string {
			if k == "JUNCTION_PASSWORD" {
				return alicePassword
			}
			return ""
		}
		var out bytes.Buffer
		if err := run(context.Background(), []string{"queue", "ls", "--console", console, "--user", "alice"}, env, &out, &out); err != nil {
			t.Errorf("junction queue ls --user alice: %v\n%s", err, out.String())
		}
		err := run(context.Background(), []string{"queue", "ls", "--console", console}, noEnv, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("junction queue ls without a user: %v, want an HTTP 401 error", err)
		}
	})

	out := logs.String()
	if testing.Verbose() {
		t.Log(out)
	}
	for _, secret := range []string{alicePassword, bobPassword, wrongPassword} {
		if strings.Contains(out, secret) {
			t.Errorf("the log contains a password (%s...)", secret[:6])
		}
	}
	// The failures are logged, with user and remote address.
	if !strings.Contains(out, "authentication failed") || !strings.Contains(out, "mallory") {
		t.Errorf("failed logins are not logged:\n%s", out)
	}
	if !strings.Contains(out, "level=debug") && !strings.Contains(out, "DBG") {
		t.Errorf("the log has no debug lines; the grep proves little")
	}
}

// TestAnonymousAllowedOnLoopback: without users, on loopback, clients
// need no credentials (today's behaviour).
func TestAnonymousAllowedOnLoopback(t *testing.T) {
	in, _ := startSecure(t, testConfig(t))
	if err := stompLogin(in, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := amqpLogin(in, goamqp.SASLTypeAnonymous()); err != nil {
		t.Fatal(err)
	}
	if code := consoleGet(t, in, "/api/v1/broker", "", ""); code != http.StatusOK {
		t.Fatalf("console without users: %d", code)
	}
}

// TestRefuseAnonymousOnNetwork: a non-loopback listener with anonymous
// clients allowed by default refuses to start, saying why.
func TestRefuseAnonymousOnNetwork(t *testing.T) {
	cfg := testConfig(t)
	cfg.Stomp.Listen = "0.0.0.0:0"
	var logs syncLog
	err := serve(context.Background(), cfg, &logs, func(*instance) { t.Error("the broker started") })
	if err == nil || !strings.Contains(err.Error(), "not loopback") || !strings.Contains(err.Error(), "--allow-anonymous") {
		t.Fatalf("serve: %v", err)
	}
	if !strings.Contains(logs.String(), "stomp.listen binds 0.0.0.0:0") {
		t.Errorf("the log does not say why:\n%s", logs.String())
	}

	// The same through flags: refused, then accepted with an explicit
	// --allow-anonymous (bare or =true) or with users.
	if _, err := loadConfig([]string{"--stomp", "0.0.0.0:61613"}, noEnv, io.Discard); err == nil {
		t.Error("loadConfig accepted a public listener with anonymous clients")
	}
	for _, args := range [][]string{
		{"--stomp", "0.0.0.0:61613", "--allow-anonymous"},
		{"--stomp", "0.0.0.0:61613", "--allow-anonymous=true"},
		{"--stomp", "0.0.0.0:61613", "--allow-anonymous=false"},
		{"--stomp", ":61613", "--users", "users.yaml"},
	} {
		c, err := loadConfig(args, noEnv, io.Discard)
		if err != nil {
			t.Errorf("%v: %v", args, err)
			continue
		}
		allow, _, _ := c.anonymousPolicy()
		if want := args[len(args)-1] != "--allow-anonymous=false" && args[2] != "--users"; allow != want {
			t.Errorf("%v: anonymous %v, want %v", args, allow, want)
		}
	}
	env := func(k string) string {
		return map[string]string{"JUNCTION_STOMP": "0.0.0.0:61613", "JUNCTION_ALLOW_ANONYMOUS": "true"}[k]
	}
	if _, err := loadConfig(nil, env, io.Discard); err != nil {
		t.Errorf("JUNCTION_ALLOW_ANONYMOUS: %v", err)
	}
	c, errs := parseConfig([]byte("stomp:\n  listen: 0.0.0.0:61613\nallow-anonymous: true\nusers: u.yaml\n" +
		"anonymous-roles: [guests]\nsecurity-settings:\n  - match: \"orders.#\"\n    permissions:\n      send: [shop]\n"))
	if len(errs) > 0 || c.AllowAnonymous == nil || !*c.AllowAnonymous || len(c.SecuritySettings) != 1 {
		t.Errorf("YAML: %+v %v", c, errs)
	}
	if _, errs := parseConfig([]byte("security-settings:\n  - match: \"#\"\n    permissions:\n      fly: [x]\n")); len(errs) == 0 {
		t.Error("an unknown permission passed validation")
	}
	if !isLoopback("127.0.0.1:1") || !isLoopback("[::1]:1") || !isLoopback("localhost:1") ||
		isLoopback(":1") || isLoopback("0.0.0.0:1") || isLoopback("10.1.2.3:1") {
		t.Error("isLoopback")
	}
}

// TestAnonymousWithUsers: users configured and anonymous allowed: the
// anonymous client connects but, by default, holds no permission; the
// console still wants a login.
func TestAnonymousWithUsers(t *testing.T) {
	in, _ := startSecure(t, secureConfig(t, writeUsers(t), true))
	if err := mqttLogin(in, "", ""); err != nil {
		t.Fatalf("anonymous MQTT client refused: %v", err)
	}
	if !in.sec.store.Authorize("bob", "send", "x") || in.sec.store.Authorize("", "send", "x") {
		t.Error("default permissions: bob may not send, or anonymous may")
	}
	if code := consoleGet(t, in, "/api/v1/broker", "", ""); code != http.StatusUnauthorized {
		t.Errorf("console: %d, want 401", code)
	}
}

func TestUserCLI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.yaml")
	runUserCmd := func(stdin string, args ...string) (string, error) {
		var out bytes.Buffer
		err := runUser(args, noEnv, strings.NewReader(stdin), &out, io.Discard)
		return out.String(), err
	}
	if _, err := runUserCmd("", "add", "--file", path, "alice", "--password", "pw1", "--role", "admin", "--role", "ops,audit"); err != nil {
		t.Fatal(err)
	}
	// The password from stdin, flags before the name.
	if _, err := runUserCmd("pw2\n", "add", "--file", path, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := runUserCmd("", "add", "--file", path, "bob", "--password", "x"); err == nil {
		t.Error("added bob twice")
	}
	if _, err := runUserCmd("", "add", "--file", path, "carol"); err == nil {
		t.Error("added carol with an empty password")
	}
	out, err := runUserCmd("", "ls", "--file", path)
	if err != nil || out != "alice\tadmin,ops,audit\nbob\t\n" {
		t.Fatalf("ls: %q, %v", out, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode: %v, %v", fi, err)
	}
	u, err := security.LoadUsers(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := security.New(security.Options{Users: u})
	if _, err := st.Authenticate(context.Background(), "bob", "pw2"); err != nil {
		t.Fatalf("bob's stdin password: %v", err)
	}
	if _, err := runUserCmd("pw3\n", "passwd", "--file", path, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := runUserCmd("", "roles", "--file", path, "bob", "--role", "devices"); err != nil {
		t.Fatal(err)
	}
	if _, err := runUserCmd("", "passwd", "--file", path, "nobody", "--password", "x"); !errors.Is(err, security.ErrNoSuchUser) {
		t.Errorf("passwd nobody: %v", err)
	}
	u, _ = security.LoadUsers(path)
	st.SetUsers(u)
	if _, err := st.Authenticate(context.Background(), "bob", "pw3"); err != nil {
		t.Fatalf("bob's new password: %v", err)
	}
	if _, err := runUserCmd("", "rm", "--file", path, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := runUserCmd("", "rm", "--file", path, "alice"); err == nil {
		t.Error("removed alice twice")
	}
	out, _ = runUserCmd("", "ls", "--file", path)
	if out != "bob\tdevices\n" {
		t.Fatalf("ls after rm: %q", out)
	}
	data, _ := os.ReadFile(path)
	if bytes.Contains(data, []byte("pw3")) {
		t.Fatal("the file holds a password")
	}
	// Through run, with the file from the environment.
	env := func(k string) string { return map[string]string{"JUNCTION_USERS": path}[k] }
	var lsOut bytes.Buffer
	if err := run(context.Background(), []string{"user", "ls"}, env, &lsOut, io.Discard); err != nil || lsOut.String() != "bob\tdevices\n" {
		t.Fatalf("run user ls: %q, %v", lsOut.String(), err)
	}
	if err := run(context.Background(), []string{"user", "ls"}, noEnv, io.Discard, io.Discard); err == nil {
		t.Error("no --file and no JUNCTION_USERS accepted")
	}
}

// junction user add NAME --password ” refuses the empty password; it
// took the flag as absent and asked for a password (or read stdin).
func TestUserEmptyPasswordFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.yaml")
	for _, args := range [][]string{
		{"add", "--file", path, "dave", "--password", ""},
		{"add", "--file", path, "--password=", "dave"},
	} {
		var out bytes.Buffer
		// A line on stdin, which the prompt would have taken.
		err := runUser(args, noEnv, strings.NewReader("fromstdin\n"), &out, &out)
		if err == nil || !strings.Contains(err.Error(), "--password is empty") {
			t.Errorf("junction user %s: %v, want the empty --password refused\n%s", strings.Join(args, " "), err, out.String())
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("junction user %s wrote the users file: %v", strings.Join(args, " "), err)
		}
	}
	if err := runUser([]string{"add", "--file", path, "dave", "--password", "pw1"}, noEnv, strings.NewReader(""), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	// passwd too: the old password stays.
	if err := runUser([]string{"passwd", "--file", path, "dave", "--password", ""}, noEnv, strings.NewReader("fromstdin\n"), io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "--password is empty") {
		t.Errorf("junction user passwd --password '': %v", err)
	}
	u, err := security.LoadUsers(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := security.New(security.Options{Users: u})
	if _, err := st.Authenticate(context.Background(), "dave", "pw1"); err != nil {
		t.Fatalf("dave's password changed: %v", err)
	}
}

// TestUsersFileReload: users added, broken and removed while the broker
// runs take effect without a restart; a broken file keeps the old table.
func TestUsersFileReload(t *testing.T) {
	old := usersReloadInterval
	usersReloadInterval = 50 * time.Millisecond
	defer func() { usersReloadInterval = old }()
	path := writeUsers(t)
	in, logs := startSecure(t, secureConfig(t, path, false))

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s\n%s", what, logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// (HasUser, not Authenticate, to poll: an unknown user costs a full
	// bcrypt comparison, seconds under the race detector.)
	carolCan := func() bool { return in.sec.store.HasUser("carol") }
	if carolCan() {
		t.Fatal("carol exists before she was added")
	}
	if err := runUser([]string{"add", "--file", path, "carol", "--password", "carol-pw"}, noEnv, nil, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	waitFor("carol's account", carolCan)
	if err := stompLogin(in, "carol", "carol-pw"); err != nil {
		t.Fatalf("carol over STOMP: %v", err)
	}
	// A broken file: logged, and carol keeps working.
	if err := os.WriteFile(path, []byte("users: [this is not a table\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor("the reload error", func() bool { return strings.Contains(logs.String(), "users file not reloaded") })
	if err := stompLogin(in, "carol", "carol-pw"); err != nil {
		t.Fatalf("carol after a broken file: %v", err)
	}
	// Fixed, without carol: she is refused.
	u := &security.Users{}
	if err := u.Add("bob", bobPassword, nil); err != nil {
		t.Fatal(err)
	}
	if err := u.Save(path); err != nil {
		t.Fatal(err)
	}
	waitFor("carol's removal", func() bool { return !carolCan() })
	if err := stompLogin(in, "carol", "carol-pw"); err == nil {
		t.Fatal("carol accepted after her removal")
	}
}

// TestCertificateUserRoles: an AMQP client logging in with SASL EXTERNAL
// is the user its certificate names; listed in the users file (here
// without a password), it holds the roles listed there; not listed, it
// is an authenticated user without them. Anonymous clients are refused.
func TestCertificateUserRoles(t *testing.T) {
	ca, cert, key, caFile := writeCerts(t, t.TempDir())
	path := writeUsers(t)
	if err := runUser([]string{"add", "--file", path, "device-admin", "--no-password", "--role", "admin"}, noEnv, nil, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	cfg := secureConfig(t, path, false)
	cfg.TLS.Cert, cfg.TLS.Key, cfg.TLS.ClientCA = cert, key, caFile
	cfg.TLS.AMQP = "127.0.0.1:0"
	in, _ := startSecure(t, cfg)

	external := func(cn string) error {
		c, err := ca.Client(cn)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tc, err := tls.Dial("tcp", in.addrs["amqp+tls"].String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1",
			Certificates: []tls.Certificate{c.TLSCertificate()}})
		if err != nil {
			return err
		}
		ac, err := goamqp.NewConn(ctx, tc, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeExternal("")})
		if err != nil {
			return err
		}
		return ac.Close()
	}
	for _, cn := range []string{"device-admin", "device-7"} {
		if err := external(cn); err != nil {
			t.Fatalf("SASL EXTERNAL as %s: %v", cn, err)
		}
	}
	st := in.sec.store
	if !st.Authorize("device-admin", core.PermManage, "") || !st.Authorize("device-admin", core.PermDeleteAddress, "x") {
		t.Error("the listed certificate user lacks its admin role")
	}
	if st.Authorize("device-7", core.PermManage, "") || !st.Authorize("device-7", core.PermSend, "x") {
		t.Error("an unlisted certificate user should be a plain authenticated user")
	}
	// Without a password, the user cannot log in with one.
	if err := stompLogin(in, "device-admin", ""); err == nil {
		t.Error("a certificate-only user logged in without a certificate")
	}
}
