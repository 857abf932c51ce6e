package security

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
)

func TestMain(m *testing.M) {
	hashCost = bcrypt.MinCost
	os.Exit(m.Run())
}

// testUsers builds a table with cheap hashes (bcrypt.MinCost) so the
// tests do not spend seconds hashing.
func testUsers(t *testing.T, entries map[string][]string) *Users {
	t.Helper()
	u := &Users{Users: map[string]User{}}
	for name, roles := range entries {
		h, err := bcrypt.GenerateFromPassword([]byte(name+"-pw"), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		u.Users[name] = User{PasswordHash: string(h), Roles: roles}
	}
	return u
}

func TestAuthenticate(t *testing.T) {
	s, err := New(Options{Users: testUsers(t, map[string][]string{"alice": {"admin"}, "bob": nil})})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if u, err := s.Authenticate(ctx, "alice", "alice-pw"); err != nil || u != "alice" {
		t.Fatalf("right password: %q, %v", u, err)
	}
	// Again, from the cache.
	if u, err := s.Authenticate(ctx, "alice", "alice-pw"); err != nil || u != "alice" {
		t.Fatalf("cached: %q, %v", u, err)
	}
	for _, c := range []struct{ login, pw string }{
		{"alice", "Tr0ub4dor"}, {"alice", ""}, {"carol", "carol-pw"}, {"", ""}, {"bob", "alice-pw"},
	} {
		u, err := s.Authenticate(ctx, c.login, c.pw)
		if !errors.Is(err, core.ErrAuthFailed) {
			t.Errorf("%q/%q: got %q, %v; want ErrAuthFailed", c.login, c.pw, u, err)
		}
		if err != nil && c.pw != "" && strings.Contains(err.Error(), c.pw) {
			t.Errorf("error %q contains the password", err)
		}
	}
}

func TestAuthenticateCacheIsPerHash(t *testing.T) {
	u := testUsers(t, map[string][]string{"alice": nil})
	s, _ := New(Options{Users: u})
	ctx := context.Background()
	if _, err := s.Authenticate(ctx, "alice", "alice-pw"); err != nil {
		t.Fatal(err)
	}
	// A new password: the old one, though cached, no longer works.
	h, _ := bcrypt.GenerateFromPassword([]byte("new"), bcrypt.MinCost)
	u2 := &Users{Users: map[string]User{"alice": {PasswordHash: string(h)}}}
	s.SetUsers(u2)
	if _, err := s.Authenticate(ctx, "alice", "alice-pw"); err == nil {
		t.Fatal("old password accepted after the change")
	}
	if _, err := s.Authenticate(ctx, "alice", "new"); err != nil {
		t.Fatal(err)
	}
	// A removed user cannot log in even with cached credentials.
	s.SetUsers(&Users{Users: map[string]User{}})
	if _, err := s.Authenticate(ctx, "alice", "new"); err == nil {
		t.Fatal("removed user accepted")
	}
}

func TestAnonymous(t *testing.T) {
	ctx := context.Background()
	on, _ := New(Options{Users: testUsers(t, nil), AllowAnonymous: true})
	if u, err := on.Authenticate(ctx, "", ""); err != nil || u != "" {
		t.Fatalf("anonymous allowed: %q, %v", u, err)
	}
	off, _ := New(Options{Users: testUsers(t, nil)})
	if _, err := off.Authenticate(ctx, "", ""); !errors.Is(err, core.ErrAuthFailed) {
		t.Fatalf("anonymous refused: %v", err)
	}
	// Without a users file: today's behaviour when anonymous is allowed
	// (the login is taken as given), nobody otherwise.
	open, _ := New(Options{AllowAnonymous: true})
	if u, err := open.Authenticate(ctx, "whoever", "x"); err != nil || u != "whoever" {
		t.Fatalf("no users file: %q, %v", u, err)
	}
	closed, _ := New(Options{})
	if _, err := closed.Authenticate(ctx, "whoever", "x"); err == nil {
		t.Fatal("no users file and no anonymous: login accepted")
	}
}

func TestAuthorizeDefaults(t *testing.T) {
	s, _ := New(Options{Users: testUsers(t, map[string][]string{"alice": {"admin"}, "bob": {"devices"}})})
	for _, c := range []struct {
		user string
		perm core.Permission
		addr string
		want bool
	}{
		{"bob", core.PermSend, "orders", true},
		{"bob", core.PermConsume, "a.b.c", true},
		{"bob", core.PermCreateDurableQueue, "x", true},
		{"bob", core.PermDeleteAddress, "orders", false},
		{"bob", core.PermManage, "", false},
		{"alice", core.PermManage, "", true},
		{"alice", core.PermDeleteAddress, "orders", true},
		// A certificate user not in the file is still authenticated.
		{"CN=device-9", core.PermSend, "orders", true},
		{"CN=device-9", core.PermManage, "", false},
		{"", core.PermSend, "orders", false},
		{"", core.PermConsume, "orders", false},
		{"bob", core.Permission("fly"), "orders", false},
	} {
		if got := s.Authorize(c.user, c.perm, c.addr); got != c.want {
			t.Errorf("Authorize(%q, %s, %q) = %v, want %v", c.user, c.perm, c.addr, got, c.want)
		}
	}
}

func TestAuthorizeMostSpecificWins(t *testing.T) {
	s, err := New(Options{
		Users: testUsers(t, map[string][]string{"shop": {"shop"}, "billing": {"billing"}, "root": {"admin"}}),
		Settings: []Setting{
			{Match: "orders.#", Permissions: map[core.Permission][]string{
				core.PermSend: {"shop"}, core.PermConsume: {"billing"}, core.PermManage: {"admin"}}},
			{Match: "orders.eu.*", Permissions: map[core.Permission][]string{
				core.PermSend: {"shop"}, core.PermConsume: {"shop"}}},
			{Match: "public", Permissions: map[core.Permission][]string{
				core.PermSend: {RoleAnonymous}, core.PermConsume: {RoleAnonymous, RoleAuthenticated}}},
		},
		AllowAnonymous: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		user string
		perm core.Permission
		addr string
		want bool
	}{
		{"shop", core.PermSend, "orders.us.new", true},
		{"shop", core.PermConsume, "orders.us.new", false},
		{"billing", core.PermConsume, "orders.us.new", true},
		{"billing", core.PermSend, "orders.us.new", false},
		// No merging: orders.eu.* alone decides, so billing lost consume.
		{"billing", core.PermConsume, "orders.eu.new", false},
		{"shop", core.PermConsume, "orders.eu.new", true},
		{"root", core.PermSend, "orders.eu.new", false},
		// Elsewhere the default "#" setting applies.
		{"billing", core.PermSend, "other", true},
		{"root", core.PermManage, "", true},
		{"", core.PermSend, "public", true},
		{"", core.PermConsume, "public", true},
		{"", core.PermSend, "other", false},
		{"shop", core.PermSend, "public", false},
		{"shop", core.PermConsume, "public", true},
	} {
		if got := s.Authorize(c.user, c.perm, c.addr); got != c.want {
			t.Errorf("Authorize(%q, %s, %q) = %v, want %v", c.user, c.perm, c.addr, got, c.want)
		}
	}
}

func TestOverrideDefaultAndAnonymousRoles(t *testing.T) {
	s, err := New(Options{
		Settings: []Setting{{Match: "#", Permissions: map[core.Permission][]string{
			core.PermSend: {"guests"}, core.PermManage: {"ops"}}}},
		AnonymousRoles: []string{"guests"},
		Users:          testUsers(t, map[string][]string{"alice": {"admin"}, "olga": {"ops"}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Authorize("", core.PermSend, "x") {
		t.Error("anonymous with role guests may not send")
	}
	if s.Authorize("alice", core.PermSend, "x") || s.Authorize("alice", core.PermManage, "") {
		t.Error("the configured # setting did not replace the default")
	}
	if !s.Authorize("olga", core.PermManage, "") {
		t.Error("ops may not manage")
	}
}

func TestAuthorizeFollowsReload(t *testing.T) {
	s, _ := New(Options{Users: testUsers(t, map[string][]string{"bob": nil})})
	if s.Authorize("bob", core.PermManage, "") {
		t.Fatal("bob may manage")
	}
	s.SetUsers(testUsers(t, map[string][]string{"bob": {"admin"}}))
	if !s.Authorize("bob", core.PermManage, "") {
		t.Fatal("bob's new role not seen")
	}
	if !s.HasUser("bob") || s.HasUser("carol") || !s.HasUsers() {
		t.Fatal("HasUser")
	}
	if r := s.Roles("bob"); len(r) != 2 || r[0] != RoleAuthenticated || r[1] != "admin" {
		t.Fatalf("Roles(bob) = %v", r)
	}
	if r := s.Roles(""); len(r) != 1 || r[0] != RoleAnonymous {
		t.Fatalf("Roles(anonymous) = %v", r)
	}
}

func TestSettingValidate(t *testing.T) {
	for _, bad := range []Setting{
		{Match: ""},
		{Match: "a..b"},
		{Match: "#", Permissions: map[core.Permission][]string{"fly": {"x"}}},
		{Match: "#", Permissions: map[core.Permission][]string{core.PermSend: {"two words"}}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v validated", bad)
		}
		if _, err := New(Options{Settings: []Setting{bad}}); err == nil {
			t.Errorf("New accepted %+v", bad)
		}
	}
}

func TestUsersFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.yaml")
	u := &Users{}
	if err := u.Add("alice", "s3cret", []string{"admin"}); err != nil {
		t.Fatal(err)
	}
	if err := u.Add("alice", "x", nil); err == nil {
		t.Fatal("added alice twice")
	}
	if err := u.Add("bad name", "x", nil); !errors.Is(err, ErrInvalidUser) {
		t.Fatalf("bad name: %v", err)
	}
	if err := u.Add("bob", "pw", nil); err != nil {
		t.Fatal(err)
	}
	if err := u.Save(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), "s3cret") {
		t.Fatal("the file holds the password in clear")
	}
	got, err := LoadUsers(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := got.Names(); len(n) != 2 || n[0] != "alice" || n[1] != "bob" {
		t.Fatalf("names %v", n)
	}
	s, _ := New(Options{Users: got})
	if _, err := s.Authenticate(context.Background(), "alice", "s3cret"); err != nil {
		t.Fatal(err)
	}
	if err := got.SetPassword("alice", "other"); err != nil {
		t.Fatal(err)
	}
	if err := got.Remove("bob"); err != nil {
		t.Fatal(err)
	}
	if err := got.Remove("bob"); !errors.Is(err, ErrNoSuchUser) {
		t.Fatalf("remove twice: %v", err)
	}
	if err := got.SetPassword("nobody", "x"); !errors.Is(err, ErrNoSuchUser) {
		t.Fatalf("passwd of nobody: %v", err)
	}
	if strings.Contains(got.String(), "$2a$") {
		t.Fatal("String shows hashes")
	}
	// No temporary files left behind.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries", len(entries))
	}
}

func TestParseUsersErrors(t *testing.T) {
	for _, bad := range []string{
		"users: [",
		"users:\n  alice:\n    password-hash: plain\n",
		"users:\n  alice:\n    roles: [a]\n    colour: red\n",
		"userz: {}\n",
		"users:\n  alice:\n    roles: [\"has space\"]\n",
	} {
		if _, err := ParseUsers([]byte(bad)); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
	u, err := ParseUsers(nil)
	if err != nil || len(u.Users) != 0 {
		t.Fatalf("empty file: %v, %v", u, err)
	}
}

func TestReloader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.yaml")
	first := testUsers(t, map[string][]string{"alice": nil})
	if err := first.Save(path); err != nil {
		t.Fatal(err)
	}
	s, _ := New(Options{Users: first})
	var mu sync.Mutex
	var reloads, errs int
	r := &Reloader{Path: path, Store: s, Interval: 10 * time.Millisecond,
		OnReload: func(*Users) { mu.Lock(); reloads++; mu.Unlock() },
		OnError:  func(error) { mu.Lock(); errs++; mu.Unlock() },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testserve.Eventually(t, what, cond)
	}
	second := testUsers(t, map[string][]string{"alice": nil, "bob": {"admin"}})
	if err := second.Save(path); err != nil {
		t.Fatal(err)
	}
	// (Authorize, not Authenticate: an unknown user costs a full bcrypt
	// comparison, seconds under the race detector.)
	waitFor("bob", func() bool { return s.Authorize("bob", core.PermManage, "") })
	// A broken file keeps the table and is reported.
	if err := os.WriteFile(path, []byte("users: [broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor("the error", func() bool { mu.Lock(); defer mu.Unlock(); return errs > 0 })
	if _, err := s.Authenticate(context.Background(), "bob", "bob-pw"); err != nil {
		t.Fatalf("bad file dropped the table: %v", err)
	}
	if !s.Authorize("bob", core.PermManage, "") {
		t.Fatal("bad file dropped bob's roles")
	}
	mu.Lock()
	if reloads != 1 {
		t.Errorf("%d reloads, want 1", reloads)
	}
	mu.Unlock()
	// An empty file, as a rewrite in place leaves it for a moment (and
	// for longer than a poll on a busy machine), is not "no users".
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r.Reload() {
		t.Fatal("an empty users file was installed")
	}
	if !s.Authorize("bob", core.PermManage, "") {
		t.Fatal("an empty file dropped the table")
	}
}

func BenchmarkAuthorize(b *testing.B) {
	s, _ := New(Options{Users: &Users{Users: map[string]User{"bob": {Roles: []string{"devices"}}}}})
	b.ReportAllocs()
	for b.Loop() {
		s.Authorize("bob", core.PermSend, "sensors.kitchen.temp")
	}
}

func BenchmarkAuthenticateCached(b *testing.B) {
	u := &Users{}
	u.Add("bob", "pw", nil)
	s, _ := New(Options{Users: u})
	ctx := context.Background()
	s.Authenticate(ctx, "bob", "pw")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Authenticate(ctx, "bob", "pw"); err != nil {
			b.Fatal(err)
		}
	}
}
