package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
	gws "github.com/gorilla/websocket"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/security"
	"github.com/junctionmq/junction/websocket/wstest"
)

// Wildcard subscriptions read only what their user may consume, through
// every protocol's real client, over TCP, WebSockets and the one port.
// The security settings are the issue's: "#" for admins only,
// "devices.#" for the role devices too, and "devices.secret.#" for
// admins only (and, for consuming, the role secrets). alice is an
// admin; bob holds the role devices. bob may subscribe to devices.#
// (the pattern falls under the devices.# setting) but must not receive
// what alice sends to devices.secret.a.

func wildcardSettings() []security.Setting {
	admin := []string{security.RoleAdmin}
	all := func(roles []string) map[core.Permission][]string {
		m := map[core.Permission][]string{}
		for _, p := range core.Permissions {
			m[p] = roles
		}
		return m
	}
	devices := map[core.Permission][]string{}
	for _, p := range []core.Permission{core.PermSend, core.PermConsume, core.PermCreateAddress,
		core.PermCreateNonDurableQueue, core.PermCreateDurableQueue, core.PermDeleteDurableQueue} {
		devices[p] = []string{"devices", security.RoleAdmin}
	}
	secret := all(admin)
	secret[core.PermConsume] = []string{"secrets", security.RoleAdmin}
	return []security.Setting{
		{Match: "#", Permissions: all(admin)},
		{Match: "devices.#", Permissions: devices},
		{Match: "devices.secret.#", Permissions: secret},
	}
}

// wildcardConfig writes the users (alice: admin, bob: devices) and
// returns a configuration with them and wildcardSettings, and its users
// file.
func wildcardConfig(t *testing.T) (Config, string) {
	t.Helper()
	path := writeUsers(t)
	if err := runUser([]string{"roles", "--file", path, "bob", "--role", "devices"}, noEnv, nil, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	cfg := secureConfig(t, path, false)
	cfg.SecuritySettings = wildcardSettings()
	return cfg, path
}

// runSecure is startSecure with a stop function, for restarts.
func runSecure(t *testing.T, cfg Config) (*instance, *syncLog, func()) {
	t.Helper()
	logs := &syncLog{}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *instance, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, logs, func(in *instance) { ready <- in }) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Error("serve did not return within 15s of cancel")
			}
		})
	}
	select {
	case in := <-ready:
		t.Cleanup(stop)
		return in, logs, stop
	case err := <-done:
		cancel()
		t.Fatalf("serve failed: %v\n%s", err, logs)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("serve not ready within 10s")
	}
	return nil, nil, nil
}

func userPassword(user string) string {
	if user == "alice" {
		return alicePassword
	}
	return bobPassword
}

// wcNet is one way to reach the broker: its own ports, WebSockets, or
// the one port.
type wcNet struct {
	name    string
	dial    func(t *testing.T, proto string) net.Conn // proto: stomp, mqtt or amqp
	mqttURL string                                    // for paho 3
}

func wcNets(in *instance) []wcNet {
	addr := func(name string) string { return in.addrs[name].String() }
	dialTCP := func(name string) func(*testing.T, string) net.Conn {
		return func(t *testing.T, proto string) net.Conn {
			t.Helper()
			listener := name
			if listener == "" {
				listener = proto
			}
			c, err := net.Dial("tcp", addr(listener))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	ws := func(t *testing.T, proto string) net.Conn {
		t.Helper()
		sub := map[string]string{"stomp": "v12.stomp", "mqtt": "mqtt", "amqp": "amqp"}[proto]
		d := gws.Dialer{Subprotocols: []string{sub}, HandshakeTimeout: 10 * time.Second}
		c, _, err := d.Dial("ws://"+addr("websocket")+"/", nil)
		if err != nil {
			t.Fatalf("%s over WebSocket: %v", proto, err)
		}
		return wstest.NewConn(c)
	}
	return []wcNet{
		{name: "tcp", dial: dialTCP(""), mqttURL: "tcp://" + addr("mqtt")},
		{name: "websocket", dial: ws, mqttURL: "ws://" + addr("websocket") + "/mqtt"},
		{name: "one port", dial: dialTCP("all"), mqttURL: "tcp://" + addr("all")},
	}
}

// inbox hands a client's received bodies to the test without blocking
// the client.
func newInbox() chan string { return make(chan string, 1000) }

func put(ch chan string, body string) {
	select {
	case ch <- body:
	default:
	}
}

// expectBodies waits for want, in order, as the next bodies on ch. A
// mismatch is an error, not fatal, so that every client is reported.
func expectBodies(t *testing.T, who string, ch <-chan string, want ...string) {
	t.Helper()
	for i, w := range want {
		select {
		case got := <-ch:
			if got != w {
				t.Errorf("%s: message %d is %q, want %q (of %q)", who, i+1, got, w, want)
				return
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: no message %d (%q) within 10s", who, i+1, w)
			return
		}
	}
}

func mqttTopic(pattern string) string {
	return strings.NewReplacer(".", "/", "*", "+").Replace(pattern)
}

// ---- STOMP ----

func wcStomp(t *testing.T, conn net.Conn, user string, opts ...func(*gostomp.Conn) error) *gostomp.Conn {
	t.Helper()
	opts = append([]func(*gostomp.Conn) error{gostomp.ConnOpt.HeartBeat(0, 0), gostomp.ConnOpt.Login(user, userPassword(user)), quiet}, opts...)
	c, err := gostomp.Connect(conn, opts...)
	if err != nil {
		t.Fatalf("stomp connect as %s: %v", user, err)
	}
	t.Cleanup(func() { c.Disconnect() })
	return c
}

// wcStompSub subscribes and returns once the broker has the
// subscription (a later frame's receipt is back).
func wcStompSub(t *testing.T, c *gostomp.Conn, dest string, opts ...func(*frame.Frame) error) chan string {
	t.Helper()
	sub, err := c.Subscribe(dest, gostomp.AckAuto, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send("/queue/devices.barrier", "", nil, gostomp.SendOpt.Receipt); err != nil {
		t.Fatalf("barrier: %v", err)
	}
	ch := newInbox()
	go func() {
		for m := range sub.C {
			if m.Err != nil {
				return
			}
			put(ch, string(m.Body))
		}
	}()
	return ch
}

// publisher is alice's STOMP connection; sends are confirmed (receipts).
type publisher struct{ c *gostomp.Conn }

func newPublisher(t *testing.T, in *instance) publisher {
	t.Helper()
	c, err := net.Dial("tcp", in.addrs["stomp"].String())
	if err != nil {
		t.Fatal(err)
	}
	return publisher{wcStomp(t, c, "alice")}
}

func (p publisher) send(t *testing.T, addr, body string) {
	t.Helper()
	if err := p.c.Send("/topic/"+addr, "text/plain", []byte(body), gostomp.SendOpt.Receipt,
		gostomp.SendOpt.Header("persistent", "true")); err != nil {
		t.Fatalf("send to %s: %v", addr, err)
	}
}

// ---- MQTT 3.1.1 ----

func wcMQTT3(t *testing.T, url, id, user string, clean bool, ch chan string) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker(url).SetClientID(id).SetProtocolVersion(4).
		SetUsername(user).SetPassword(userPassword(user)).SetCleanSession(clean).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(10 * time.Second).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { put(ch, string(m.Payload())) })
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(15*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt connect %s: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

func wcMQTT3Sub(t *testing.T, c paho.Client, filter string, ch chan string) {
	t.Helper()
	tok := c.Subscribe(filter, 1, func(_ paho.Client, m paho.Message) { put(ch, string(m.Payload())) })
	if err := mqttWait(tok); err != nil {
		t.Fatal(err)
	}
	if code := tok.(*paho.SubscribeToken).Result()[filter]; code > 2 {
		t.Fatalf("SUBACK %#x for %s", code, filter)
	}
}

// ---- MQTT 5 ----

func wcMQTT5(t *testing.T, conn net.Conn, id, user string, expiry uint32, clean bool, ch chan string) *paho5.Client {
	t.Helper()
	c := paho5.NewClient(paho5.ClientConfig{ClientID: id, Conn: conn,
		OnPublishReceived: []func(paho5.PublishReceived) (bool, error){func(r paho5.PublishReceived) (bool, error) {
			put(ch, string(r.Packet.Payload))
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho5.Connect{ClientID: id, KeepAlive: 30, CleanStart: clean,
		Username: user, UsernameFlag: true, Password: []byte(userPassword(user)), PasswordFlag: true,
		Properties: &paho5.ConnectProperties{SessionExpiryInterval: &expiry}})
	if err != nil || ca.ReasonCode != 0 {
		t.Fatalf("mqtt5 connect %s: %v %+v", id, err, ca)
	}
	t.Cleanup(func() { c.Disconnect(&paho5.Disconnect{}) })
	return c
}

func wcMQTT5Sub(t *testing.T, c *paho5.Client, filter string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: filter, QoS: 1}}})
	if err != nil || len(sa.Reasons) != 1 || sa.Reasons[0] > 2 {
		t.Fatalf("mqtt5 subscribe %s: %v %+v", filter, err, sa)
	}
}

// ---- AMQP ----

func wcAMQP(t *testing.T, conn net.Conn, user, containerID string) (*goamqp.Conn, *goamqp.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := goamqp.NewConn(ctx, conn, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(user, userPassword(user)), ContainerID: containerID})
	if err != nil {
		t.Fatalf("amqp connect as %s: %v", user, err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func wcAMQPRecv(t *testing.T, s *goamqp.Session, addr string, opts *goamqp.ReceiverOptions) chan string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if opts == nil {
		opts = &goamqp.ReceiverOptions{}
	}
	opts.Credit = 10
	r, err := s.NewReceiver(ctx, addr, opts)
	if err != nil {
		t.Fatalf("amqp receiver %s: %v", addr, err)
	}
	ch := newInbox()
	go func() {
		for {
			m, err := r.Receive(context.Background(), nil)
			if err != nil {
				return
			}
			r.AcceptMessage(context.Background(), m)
			put(ch, string(m.GetData()))
		}
	}()
	return ch
}

// TestWildcardSubscriptionsReadOnlyPermittedAddresses: on every
// protocol and way in, bob's devices.# and devices.*.a subscriptions
// receive devices.x.a but not devices.secret.a; alice's receive both.
func TestWildcardSubscriptionsReadOnlyPermittedAddresses(t *testing.T) {
	cfg, _ := wildcardConfig(t)
	in, logs := startSecure(t, cfg)
	pub := newPublisher(t, in)
	for _, n := range wcNets(in) {
		for pi, pattern := range []string{"devices.#", "devices.*.a"} {
			t.Run(n.name+"/"+pattern, func(t *testing.T) {
				subs := map[string]chan string{}
				for _, user := range []string{"bob", "alice"} {
					id := fmt.Sprintf("%s-%s-%d", user, strings.ReplaceAll(n.name, " ", ""), pi)
					subs["stomp "+user] = wcStompSub(t, wcStomp(t, n.dial(t, "stomp"), user), "/topic/"+pattern)

					ch := newInbox()
					wcMQTT3Sub(t, wcMQTT3(t, n.mqttURL, id+"-3", user, true, ch), mqttTopic(pattern), ch)
					subs["mqtt3 "+user] = ch

					ch = newInbox()
					wcMQTT5Sub(t, wcMQTT5(t, n.dial(t, "mqtt"), id+"-5", user, 0, true, ch), mqttTopic(pattern))
					subs["mqtt5 "+user] = ch

					_, s := wcAMQP(t, n.dial(t, "amqp"), user, "")
					subs["amqp "+user] = wcAMQPRecv(t, s, "topic://"+pattern, nil)
				}
				pub.send(t, "devices.secret.a", "secret")
				pub.send(t, "devices.x.a", "x")
				for name, ch := range subs {
					if strings.HasSuffix(name, "bob") {
						expectBodies(t, name, ch, "x")
					} else {
						expectBodies(t, name, ch, "secret", "x")
					}
				}
			})
		}
	}
	if !strings.Contains(logs.String(), "withheld from a wildcard subscription") {
		t.Error("the refusals are not logged")
	}
	_, by := in.broker.AuthzDenials()
	for _, p := range []string{"stomp", "mqtt", "amqp"} {
		if by[p] == 0 {
			t.Errorf("no %s denial counted: %v", p, by)
		}
	}
}

// amqpShared is a receiver of the shared subscription name, as Qpid JMS
// and Artemis name one: the capabilities "shared" and "global" on the
// source, the link named by the subscription ("|global" appended).
func amqpShared(name string) *goamqp.ReceiverOptions {
	return &goamqp.ReceiverOptions{Name: name + "|global", SourceCapabilities: []string{"shared", "global"}}
}

func wcAMQPSession(t *testing.T, conn net.Conn, user string) *goamqp.Session {
	t.Helper()
	_, s := wcAMQP(t, conn, user, "")
	return s
}

// TestSharedWildcardSubscriptionsCheckEachConsumer: bob and alice share
// a subscription (MQTT 5 $share, STOMP shared-subscription-name, AMQP
// links with the capabilities shared and global, over TCP, WebSockets
// and the one port): every secret goes to alice, none to bob, and the
// rest is shared.
func TestSharedWildcardSubscriptionsCheckEachConsumer(t *testing.T) {
	cfg, _ := wildcardConfig(t)
	in, _ := startSecure(t, cfg)
	pub := newPublisher(t, in)
	for gi, n := range wcNets(in) {
		t.Run(n.name, func(t *testing.T) {
			group := fmt.Sprintf("g%d", gi)
			type member struct{ bob, alice chan string }
			groups := map[string]member{}
			m := member{newInbox(), newInbox()}
			wcMQTT5Sub(t, wcMQTT5(t, n.dial(t, "mqtt"), "bob-share-"+group, "bob", 0, true, m.bob), "$share/"+group+"/devices/#")
			wcMQTT5Sub(t, wcMQTT5(t, n.dial(t, "mqtt"), "alice-share-"+group, "alice", 0, true, m.alice), "$share/"+group+"/devices/#")
			groups["mqtt5 $share"] = m
			shared := gostomp.SubscribeOpt.Header("shared-subscription-name", "s"+group)
			groups["stomp shared"] = member{
				wcStompSub(t, wcStomp(t, n.dial(t, "stomp"), "bob"), "/topic/devices.#", shared),
				wcStompSub(t, wcStomp(t, n.dial(t, "stomp"), "alice"), "/topic/devices.#", shared),
			}
			groups["amqp shared"] = member{
				wcAMQPRecv(t, wcAMQPSession(t, n.dial(t, "amqp"), "bob"), "topic://devices.#", amqpShared("a"+group)),
				wcAMQPRecv(t, wcAMQPSession(t, n.dial(t, "amqp"), "alice"), "topic://devices.#", amqpShared("a"+group)),
			}
			const secrets = 6
			for range secrets {
				pub.send(t, "devices.secret.a", "secret")
			}
			pub.send(t, "devices.x.a", "x")
			pub.send(t, "devices.x.a", "x")
			for name, m := range groups {
				got := map[string]int{}
				for got["alice secret"] < secrets || got["alice x"]+got["bob x"] < 2 {
					select {
					case b := <-m.alice:
						got["alice "+b]++
					case b := <-m.bob:
						got["bob "+b]++
						if b != "x" {
							t.Fatalf("%s: bob received %q", name, b)
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("%s: received %v, want all %d secrets with alice and 2 x", name, got, secrets)
					}
				}
			}
			// Shared: each message went to one member only.
			time.Sleep(300 * time.Millisecond)
			for name, m := range groups {
				if len(m.alice)+len(m.bob) > 0 {
					t.Errorf("%s: %d more messages for alice and %d for bob: not one subscription", name, len(m.alice), len(m.bob))
				}
			}
		})
	}
}

// TestSharedWildcardSubscriptionOfOneUser: bob alone shares a
// subscription between two consumers (two connections; MQTT 5 $share,
// STOMP shared-subscription-name, AMQP shared global links, and an AMQP
// link and a STOMP subscription of one name): they
// receive every message of devices.x.a once between them and no secret,
// sent before, among and after those they may read.
func TestSharedWildcardSubscriptionOfOneUser(t *testing.T) {
	cfg, _ := wildcardConfig(t)
	in, _ := startSecure(t, cfg)
	pub := newPublisher(t, in)
	n := wcNets(in)[0]
	groups := map[string][2]chan string{}
	var m5 [2]chan string
	for i := range m5 {
		m5[i] = newInbox()
		wcMQTT5Sub(t, wcMQTT5(t, n.dial(t, "mqtt"), fmt.Sprintf("bob-share-%d", i), "bob", 0, true, m5[i]), "$share/m-bobs/devices/#")
	}
	groups["mqtt5 $share"] = m5
	shared := gostomp.SubscribeOpt.Header("shared-subscription-name", "s-bobs")
	groups["stomp shared"] = [2]chan string{
		wcStompSub(t, wcStomp(t, n.dial(t, "stomp"), "bob"), "/topic/devices.#", shared),
		wcStompSub(t, wcStomp(t, n.dial(t, "stomp"), "bob"), "/topic/devices.#", shared),
	}
	groups["amqp shared"] = [2]chan string{
		wcAMQPRecv(t, wcAMQPSession(t, n.dial(t, "amqp"), "bob"), "topic://devices.#", amqpShared("a-bobs")),
		wcAMQPRecv(t, wcAMQPSession(t, n.dial(t, "amqp"), "bob"), "topic://devices.#", amqpShared("a-bobs")),
	}
	// One name is one subscription whatever the protocol
	// (docs/protocol-mapping.md).
	groups["amqp and stomp"] = [2]chan string{
		wcAMQPRecv(t, wcAMQPSession(t, n.dial(t, "amqp"), "bob"), "topic://devices.#", amqpShared("mixed")),
		wcStompSub(t, wcStomp(t, n.dial(t, "stomp"), "bob"), "/topic/devices.#", gostomp.SubscribeOpt.Header("shared-subscription-name", "mixed")),
	}
	const xs = 8
	for i := range xs {
		pub.send(t, "devices.secret.a", fmt.Sprintf("secret %d", i))
		pub.send(t, "devices.x.a", fmt.Sprintf("x%d", i))
	}
	pub.send(t, "devices.secret.b", "secret last")
	for name, m := range groups {
		got := map[string]int{}
		each := [2]int{}
	receive:
		for total := 0; total < xs; total++ {
			var b string
			select {
			case b = <-m[0]:
				each[0]++
			case b = <-m[1]:
				each[1]++
			case <-time.After(10 * time.Second):
				t.Errorf("%s: received %v, want x0 to x%d once each", name, got, xs-1)
				break receive
			}
			if !strings.HasPrefix(b, "x") || got[b] > 0 {
				t.Errorf("%s: bob received %q after %v", name, b, got)
				break receive
			}
			got[b]++
		}
		t.Logf("%s: %d and %d", name, each[0], each[1])
	}
	time.Sleep(300 * time.Millisecond)
	for name, m := range groups {
		for _, ch := range m {
			select {
			case b := <-ch:
				t.Errorf("%s: then %q", name, b)
			default:
			}
		}
	}
}

// TestDurableWildcardSubscriptionsAcrossRestart: bob's durable
// subscriptions (STOMP, MQTT 3 and 5 persistent sessions, AMQP) keep
// reading as bob across a restart: what alice sends to the secret
// address before and after it is not kept for him; the rest is.
func TestDurableWildcardSubscriptionsAcrossRestart(t *testing.T) {
	cfg, _ := wildcardConfig(t)
	in, _, stop := runSecure(t, cfg)
	nets := wcNets(in)
	stompDurable := gostomp.SubscribeOpt.Header("activemq.subscriptionName", "feed")
	amqpDurable := &goamqp.ReceiverOptions{Name: "feed", SourceDurability: goamqp.DurabilityUnsettledState, SourceExpiryPolicy: goamqp.ExpiryPolicyNever}
	{
		// Subscribe durably, then go away: the first three over TCP, the
		// others over WebSockets, the MQTT 3 one on the one port.
		sc := wcStomp(t, nets[0].dial(t, "stomp"), "bob", gostomp.ConnOpt.Header("client-id", "bob-stomp"))
		wcStompSub(t, sc, "/topic/devices.#", stompDurable)
		sc.Disconnect()
		m3 := wcMQTT3(t, nets[2].mqttURL, "bob-mqtt3", "bob", false, newInbox())
		wcMQTT3Sub(t, m3, "devices/#", newInbox())
		m3.Disconnect(100)
		m5 := wcMQTT5(t, nets[1].dial(t, "mqtt"), "bob-mqtt5", "bob", 3600, true, newInbox())
		wcMQTT5Sub(t, m5, "devices/+/a")
		m5.Disconnect(&paho5.Disconnect{})
		ac, as := wcAMQP(t, nets[1].dial(t, "amqp"), "bob", "bob-amqp")
		wcAMQPRecv(t, as, "topic://devices.#", amqpDurable)
		ac.Close()
	}
	pub := newPublisher(t, in)
	pub.send(t, "devices.secret.a", "secret 1")
	pub.send(t, "devices.x.a", "x1")
	stop()

	in, _, _ = runSecure(t, cfg)
	nets = wcNets(in)
	pub = newPublisher(t, in)
	pub.send(t, "devices.secret.a", "secret 2")
	pub.send(t, "devices.x.a", "x2")

	sc := wcStomp(t, nets[1].dial(t, "stomp"), "bob", gostomp.ConnOpt.Header("client-id", "bob-stomp"))
	expectBodies(t, "stomp", wcStompSub(t, sc, "/topic/devices.#", stompDurable), "x1", "x2")
	ch := newInbox()
	wcMQTT3(t, nets[0].mqttURL, "bob-mqtt3", "bob", false, ch)
	expectBodies(t, "mqtt3", ch, "x1", "x2")
	ch = newInbox()
	wcMQTT5(t, nets[2].dial(t, "mqtt"), "bob-mqtt5", "bob", 3600, false, ch)
	expectBodies(t, "mqtt5", ch, "x1", "x2")
	_, as := wcAMQP(t, nets[0].dial(t, "amqp"), "bob", "bob-amqp")
	expectBodies(t, "amqp", wcAMQPRecv(t, as, "topic://devices.#", amqpDurable), "x1", "x2")
}

// TestWildcardSubscriptionsFollowUsersReload: bob's roles change in the
// users file while his wildcard subscriptions stay: given the role
// secrets he receives devices.secret.a, and once it is taken away he no
// longer does.
func TestWildcardSubscriptionsFollowUsersReload(t *testing.T) {
	old := usersReloadInterval
	usersReloadInterval = 50 * time.Millisecond
	defer func() { usersReloadInterval = old }()
	cfg, path := wildcardConfig(t)
	in, logs := startSecure(t, cfg)
	pub := newPublisher(t, in)
	n := wcNets(in)[0]
	subs := map[string]chan string{"stomp": wcStompSub(t, wcStomp(t, n.dial(t, "stomp"), "bob"), "/topic/devices.#")}
	ch := newInbox()
	wcMQTT3Sub(t, wcMQTT3(t, n.mqttURL, "bob-reload", "bob", true, ch), "devices/#", ch)
	subs["mqtt3"] = ch
	_, s := wcAMQP(t, n.dial(t, "amqp"), "bob", "")
	subs["amqp"] = wcAMQPRecv(t, s, "topic://devices.#", nil)

	reloads := 0
	setRoles := func(roles string) {
		t.Helper()
		if err := runUser([]string{"roles", "--file", path, "bob", "--role", roles}, noEnv, nil, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
		reloads++
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(logs.String(), "users file reloaded") < reloads {
			if time.Now().After(deadline) {
				t.Fatalf("the users file was not reloaded\n%s", logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	pub.send(t, "devices.secret.a", "secret 1")
	pub.send(t, "devices.x.a", "x1")
	for name, ch := range subs {
		expectBodies(t, name, ch, "x1")
	}
	setRoles("devices,secrets")
	pub.send(t, "devices.secret.a", "secret 2")
	for name, ch := range subs {
		expectBodies(t, name, ch, "secret 2")
	}
	setRoles("devices")
	pub.send(t, "devices.secret.a", "secret 3")
	pub.send(t, "devices.x.a", "x2")
	for name, ch := range subs {
		expectBodies(t, name, ch, "x2")
	}
}
