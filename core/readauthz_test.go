package core_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/authztest"
)

// The security settings as a table: alice (admin) may do
// everything; bob (role devices) may do what a client does under
// devices.#, except under devices.secret.#, which only admins may use.
func devicesGrants() authztest.Grants {
	return authztest.Grants{"alice": grantAll("#"), "bob": grantAll("!devices.secret.#", "devices.#")}
}

func grantAll(patterns ...string) map[core.Permission][]string {
	m := map[core.Permission][]string{}
	for _, p := range []core.Permission{core.PermSend, core.PermConsume, core.PermCreateAddress,
		core.PermCreateNonDurableQueue, core.PermCreateDurableQueue, core.PermDeleteDurableQueue} {
		m[p] = patterns
	}
	return m
}

// switchAuthz is an Authorizer whose grants a test replaces, as a
// reload of the users file does.
type switchAuthz struct {
	g     atomic.Pointer[authztest.Grants]
	calls atomic.Int64
}

func newSwitchAuthz(g authztest.Grants) *switchAuthz {
	s := &switchAuthz{}
	s.g.Store(&g)
	return s
}

func (s *switchAuthz) set(g authztest.Grants) { s.g.Store(&g) }

func (s *switchAuthz) Authorize(user string, perm core.Permission, address string) bool {
	s.calls.Add(1)
	return s.g.Load().Authorize(user, perm, address)
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func authzBroker(t *testing.T, cfg core.Config) (*core.Broker, *logBuf) {
	t.Helper()
	logs := &logBuf{}
	cfg.Logger = zerolog.New(logs)
	cfg.ExpiryScanInterval = -1
	b, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, logs
}

func client(t *testing.T, b *core.Broker, user, clientID string) *core.Session {
	t.Helper()
	s, err := b.NewSession(core.SessionOptions{User: user, ClientID: clientID, Protocol: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// inbox records deliveries. Deliveries of an in-memory broker happen
// on the sender's goroutine, so what a Send delivers is in the inbox
// when Send returns.
type inbox struct {
	mu sync.Mutex
	ds []core.Delivery
}

func (in *inbox) handle(d core.Delivery) {
	in.mu.Lock()
	in.ds = append(in.ds, d)
	in.mu.Unlock()
}

// take returns the bodies delivered since the last take, acking each.
func (in *inbox) take(t *testing.T) []string {
	t.Helper()
	in.mu.Lock()
	ds := in.ds
	in.ds = nil
	in.mu.Unlock()
	var out []string
	for _, d := range ds {
		if err := d.Consumer.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
		out = append(out, string(d.Message.Body))
	}
	return out
}

func consume(t *testing.T, s *core.Session, o core.ConsumerOptions) (*core.Consumer, *inbox) {
	t.Helper()
	in := &inbox{}
	o.Handler = in.handle
	c, err := s.Subscribe(o)
	if err != nil {
		t.Fatal(err)
	}
	return c, in
}

func publish(t *testing.T, s *core.Session, addr, body string, durable bool) {
	t.Helper()
	m := &core.Message{Address: addr, RoutingType: core.Multicast, Body: []byte(body), Durable: durable, Priority: core.DefaultPriority}
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func wantBodies(t *testing.T, who string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s received %q, want %q", who, got, want)
	}
}

func depth(t *testing.T, b *core.Broker, queue string) int64 {
	t.Helper()
	q := b.Queue(queue)
	if q == nil {
		t.Fatalf("no queue %q", queue)
	}
	return q.Stats().Depth
}

// A wildcard subscription receives what its subscriber may consume and
// nothing else, whatever the pattern lets through: bob's devices.# (or
// devices.*.a) does not read devices.secret.a, alice's does.
func TestWildcardSubscriptionChecksEachAddress(t *testing.T) {
	for _, pattern := range []string{"devices.#", "devices.*.a"} {
		t.Run(pattern, func(t *testing.T) {
			b, logs := authzBroker(t, core.Config{Authorizer: devicesGrants()})
			alice, bob := client(t, b, "alice", ""), client(t, b, "bob", "")
			_, bobIn := consume(t, bob, core.ConsumerOptions{Address: pattern, RoutingType: core.Multicast, Credit: 100})
			_, aliceIn := consume(t, alice, core.ConsumerOptions{Address: pattern, RoutingType: core.Multicast, Credit: 100})
			for range 3 {
				publish(t, alice, "devices.secret.a", "secret", false)
				publish(t, alice, "devices.x.a", "x", false)
			}
			wantBodies(t, "bob", bobIn.take(t), "x", "x", "x")
			wantBodies(t, "alice", aliceIn.take(t), "secret", "x", "secret", "x", "secret", "x")

			// Each withheld message is a denial; the log has one line.
			if total, by := b.AuthzDenials(); total != 3 || by["test"] != 3 {
				t.Fatalf("denials %d %v, want 3", total, by)
			}
			out := logs.String()
			if n := strings.Count(out, "withheld from a wildcard subscription"); n != 1 {
				t.Fatalf("%d log lines for the refusals, want 1:\n%s", n, out)
			}
			for _, want := range []string{`"user":"bob"`, `"address":"devices.secret.a"`, `"pattern":"` + pattern + `"`, `"protocol":"test"`} {
				if !strings.Contains(out, want) {
					t.Fatalf("log lacks %s:\n%s", want, out)
				}
			}
			// The narrower pattern itself stays refused at subscribe.
			_, err := bob.Subscribe(core.ConsumerOptions{Address: "devices.secret.#", RoutingType: core.Multicast, Handler: func(core.Delivery) {}})
			if !errors.Is(err, core.ErrUnauthorized) {
				t.Fatalf("bob subscribed to devices.secret.#: %v", err)
			}
		})
	}
}

// A shared wildcard subscription with consumers of different users: no
// consumer is handed what its user may not consume; a message only some
// may read waits for them without holding up the rest, and one that no
// consumer left may read is removed rather than kept forever.
func TestSharedWildcardSubscriptionChecksEachConsumer(t *testing.T) {
	b, _ := authzBroker(t, core.Config{Authorizer: devicesGrants()})
	alice, bob, sender := client(t, b, "alice", ""), client(t, b, "bob", ""), client(t, b, "alice", "")
	opts := core.ConsumerOptions{Address: "devices.#", RoutingType: core.Multicast, SharedSubscriptionName: "g", Credit: 100}
	const shared = "$share/g/devices.#"
	_, bobIn := consume(t, bob, opts)
	_, aliceIn := consume(t, alice, opts)
	for range 10 {
		publish(t, sender, "devices.secret.a", "secret", false)
		publish(t, sender, "devices.x.a", "x", false)
	}
	got := bobIn.take(t)
	if slices.Contains(got, "secret") {
		t.Fatalf("bob received %q", got)
	}
	gotAlice := aliceIn.take(t)
	if n := strings.Count(strings.Join(gotAlice, " "), "secret"); n != 10 {
		t.Fatalf("alice received %d secrets, want all 10: %q", n, gotAlice)
	}
	if n := len(got) + len(gotAlice); n != 20 {
		t.Fatalf("%d messages delivered, want 20", n)
	}

	if total, _ := b.AuthzDenials(); total != 0 {
		t.Fatalf("%d denials: every secret had a consumer who may read it", total)
	}

	// Another group, where alice has no credit yet: a secret waits for
	// her, and bob still gets what follows it.
	const h = "$share/h/devices.#"
	opts.SharedSubscriptionName = "h"
	opts.Credit = 0
	aliceH, aliceHIn := consume(t, alice, opts)
	opts.Credit = 100
	_, bobHIn := consume(t, bob, opts)
	publish(t, sender, "devices.secret.a", "secret", false)
	publish(t, sender, "devices.x.a", "x", false)
	wantBodies(t, "bob", bobHIn.take(t), "x")
	if d := depth(t, b, h); d != 1 {
		t.Fatalf("group h holds %d messages, want the secret", d)
	}
	aliceH.Flow(1)
	wantBodies(t, "alice", aliceHIn.take(t), "secret")

	// Alice leaves with a secret waiting: nobody left may read it, so it
	// goes, and later secrets are not taken at all.
	publish(t, sender, "devices.secret.a", "secret", false)
	if d := depth(t, b, h); d != 1 {
		t.Fatalf("group h holds %d messages, want the secret", d)
	}
	aliceH.Close()
	if d := depth(t, b, h); d != 0 {
		t.Fatalf("group h holds %d messages after its last reader of secrets left, want 0", d)
	}
	publish(t, sender, "devices.secret.a", "secret", false)
	publish(t, sender, "devices.x.a", "x", false)
	wantBodies(t, "bob", bobHIn.take(t), "x")
	if d := depth(t, b, h); d != 0 {
		t.Fatalf("group h holds %d messages, want 0", d)
	}
	if total, _ := b.AuthzDenials(); total != 2 {
		t.Fatalf("%d denials, want 2 (the secret removed, the secret refused)", total)
	}
	aliceIn.take(t) // group g's share
	bobIn.take(t)
}

// A durable wildcard subscription keeps its subscriber across a restart:
// what bob may not read is not even kept for him while he is away,
// before and after the restart, and he receives the rest.
func TestDurableWildcardSubscriptionKeepsItsSubscriber(t *testing.T) {
	msgs, bindings := core.NewMemJournal(), core.NewMemJournal()
	cfg := core.Config{Authorizer: devicesGrants(), Messages: msgs, Bindings: bindings}
	b1, _ := authzBroker(t, cfg)
	bob := client(t, b1, "bob", "bob-app")
	const sub = "bob-app.feed"
	c, _ := consume(t, bob, core.ConsumerOptions{Address: "devices.#", RoutingType: core.Multicast, SubscriptionName: "feed"})
	c.Close()
	alice := client(t, b1, "alice", "")
	publish(t, alice, "devices.secret.a", "secret", true)
	publish(t, alice, "devices.x.a", "x1", true)
	if d := depth(t, b1, sub); d != 1 {
		t.Fatalf("bob's subscription holds %d messages, want x1 alone", d)
	}
	bob.Close()
	alice.Close()
	b1.Close()

	b2, _ := authzBroker(t, cfg)
	if d := depth(t, b2, sub); d != 1 {
		t.Fatalf("recovered subscription holds %d messages, want 1", d)
	}
	alice = client(t, b2, "alice", "")
	publish(t, alice, "devices.secret.a", "secret", true)
	publish(t, alice, "devices.x.a", "x2", true)
	if d := depth(t, b2, sub); d != 2 {
		t.Fatalf("recovered subscription holds %d messages, want x1 and x2: its subscriber was lost", d)
	}
	bob = client(t, b2, "bob", "bob-app")
	_, in := consume(t, bob, core.ConsumerOptions{Address: "devices.#", RoutingType: core.Multicast, SubscriptionName: "feed", Credit: 10})
	wantBodies(t, "bob", in.take(t), "x1", "x2")
}

// Subscribing to a durable wildcard subscription as a user other than
// its subscriber replaces it (as another pattern or selector would): the
// new user does not inherit what was kept for the old one.
func TestDurableWildcardSubscriptionOfAnotherUserIsReplaced(t *testing.T) {
	b, _ := authzBroker(t, core.Config{Authorizer: devicesGrants()})
	bob := client(t, b, "bob", "app")
	c, _ := consume(t, bob, core.ConsumerOptions{Address: "devices.#", RoutingType: core.Multicast, SubscriptionName: "feed"})
	c.Close()
	bob.Close()
	sender := client(t, b, "alice", "")
	publish(t, sender, "devices.x.a", "for bob", false)
	alice := client(t, b, "alice", "app")
	_, in := consume(t, alice, core.ConsumerOptions{Address: "devices.#", RoutingType: core.Multicast, SubscriptionName: "feed", Credit: 10})
	wantBodies(t, "alice", in.take(t))
	publish(t, sender, "devices.secret.a", "for alice", false)
	wantBodies(t, "alice", in.take(t), "for alice")
}

// A reload of the permissions (PermissionsChanged) takes effect for an
// existing wildcard subscription: for new messages, and for those it
// already holds.
func TestWildcardSubscriptionFollowsPermissionChanges(t *testing.T) {
	az := newSwitchAuthz(devicesGrants())
	b, _ := authzBroker(t, core.Config{Authorizer: az})
	alice, bob := client(t, b, "alice", ""), client(t, b, "bob", "bob-app")
	_, in := consume(t, bob, core.ConsumerOptions{Address: "devices.#", RoutingType: core.Multicast, Credit: 100})
	publish(t, alice, "devices.secret.a", "s1", false)
	publish(t, alice, "devices.x.a", "x1", false)
	wantBodies(t, "bob", in.take(t), "x1")

	// bob gains devices.secret.#: decisions are cached until the broker
	// is told.
	az.set(authztest.Grants{"alice": grantAll("#"), "bob": grantAll("devices.#")})
	publish(t, alice, "devices.secret.a", "s2", false)
	wantBodies(t, "bob", in.take(t))
	b.PermissionsChanged()
	publish(t, alice, "devices.secret.a", "s3", false)
	wantBodies(t, "bob", in.take(t), "s3")

	// bob loses everything but the right to hold the subscription.
	g := authztest.Grants{"alice": grantAll("#"), "bob": grantAll("devices.*")}
	az.set(g)
	b.PermissionsChanged()
	publish(t, alice, "devices.x.a", "x2", false)
	wantBodies(t, "bob", in.take(t))

	// What a subscription already holds is checked as it is delivered.
	az.set(devicesGrants())
	b.PermissionsChanged()
	dc, dIn := consume(t, bob, core.ConsumerOptions{Address: "devices.#", RoutingType: core.Multicast, SubscriptionName: "feed"})
	publish(t, alice, "devices.x.a", "x3", false)
	publish(t, alice, "devices.x.b", "x4", false)
	if d := depth(t, b, "bob-app.feed"); d != 2 {
		t.Fatalf("durable subscription holds %d, want 2", d)
	}
	g["bob"][core.PermConsume] = []string{"!devices.x.a", "devices.#"}
	az.set(g)
	b.PermissionsChanged()
	dc.Flow(10)
	wantBodies(t, "bob", dIn.take(t), "x4")
	if d := depth(t, b, "bob-app.feed"); d != 0 {
		t.Fatalf("durable subscription holds %d after the revoked message was reached, want 0", d)
	}
}

// A front-end that delivers to its own subscribers (MQTT's) asks
// Session.Authorize for consume on each message's address: answers are
// cached per session and dropped by PermissionsChanged.
func TestSessionConsumeDecisionsCachedUntilPermissionsChange(t *testing.T) {
	az := newSwitchAuthz(devicesGrants())
	b, _ := authzBroker(t, core.Config{Authorizer: az})
	bob := client(t, b, "bob", "")
	before := az.calls.Load()
	for range 5 {
		if err := bob.Authorize(core.PermConsume, "devices.x.a"); err != nil {
			t.Fatal(err)
		}
		if err := bob.Authorize(core.PermConsume, "devices.secret.a"); !errors.Is(err, core.ErrUnauthorized) {
			t.Fatalf("consume on devices.secret.a: %v", err)
		}
	}
	if n := az.calls.Load() - before; n != 2 {
		t.Fatalf("%d Authorizer calls for 10 checks of 2 addresses, want 2", n)
	}
	if total, _ := b.AuthzDenials(); total != 5 {
		t.Fatalf("%d denials, want 5", total)
	}
	az.set(authztest.Grants{"bob": grantAll("devices.#")})
	b.PermissionsChanged()
	if err := bob.Authorize(core.PermConsume, "devices.secret.a"); err != nil {
		t.Fatalf("after the change: %v", err)
	}
}

// Sends from several goroutines while the permissions are declared
// changed over and over (each time dropping every cached decision): bob
// never gets a secret, and nothing he may read is lost.
func TestWildcardChecksHoldUnderConcurrentReloads(t *testing.T) {
	b, _ := authzBroker(t, core.Config{Authorizer: devicesGrants()})
	alice, bob := client(t, b, "alice", ""), client(t, b, "bob", "")
	shared := core.ConsumerOptions{Address: "devices.#", RoutingType: core.Multicast, SharedSubscriptionName: "g", Credit: 100000}
	_, bobShared := consume(t, bob, shared)
	_, aliceShared := consume(t, alice, shared)
	_, bobOwn := consume(t, bob, core.ConsumerOptions{Address: "devices.*.a", RoutingType: core.Multicast, Credit: 100000})
	const senders, each = 4, 300
	done := make(chan struct{})
	var reloads sync.WaitGroup
	reloads.Add(1)
	go func() {
		defer reloads.Done()
		for {
			select {
			case <-done:
				return
			default:
				b.PermissionsChanged()
			}
		}
	}()
	var wg sync.WaitGroup
	for range senders {
		s := client(t, b, "alice", "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				for _, addr := range []string{"devices.secret.a", "devices.x.a"} {
					m := &core.Message{Address: addr, RoutingType: core.Multicast, Body: []byte(addr), Priority: core.DefaultPriority}
					if err := s.Send(context.Background(), m); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	reloads.Wait()
	count := func(bodies []string, what string) (n int) {
		for _, b := range bodies {
			if b == what {
				n++
			}
		}
		return n
	}
	bs, as, own := bobShared.take(t), aliceShared.take(t), bobOwn.take(t)
	if n := count(bs, "devices.secret.a") + count(own, "devices.secret.a"); n != 0 {
		t.Fatalf("bob received %d secrets", n)
	}
	const total = senders * each
	if n := count(as, "devices.secret.a"); n != total {
		t.Fatalf("alice's share has %d secrets, want %d", n, total)
	}
	if n := count(bs, "devices.x.a") + count(as, "devices.x.a"); n != total {
		t.Fatalf("the shared group got %d of %d x", n, total)
	}
	if n := count(own, "devices.x.a"); n != total {
		t.Fatalf("bob's own subscription got %d of %d x", n, total)
	}
}
