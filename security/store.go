package security

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/bcrypt"

	"github.com/junctionmq/junction/core"
)

// Options configure a Store.
type Options struct {
	// Users is the initial users table; nil means no users file: any
	// login is then accepted as the user it names, without a password
	// check (Junction's behaviour before users existed), provided
	// AllowAnonymous is set, and refused otherwise.
	Users *Users
	// Settings are added to DefaultSettings; one with the same pattern as
	// a default replaces it.
	Settings []Setting
	// AnonymousRoles are the roles of anonymous clients; nil means
	// []string{RoleAnonymous}.
	AnonymousRoles []string
	// AllowAnonymous accepts clients that give no login.
	AllowAnonymous bool
}

// Store authenticates clients against a users table and authorizes them
// against security settings. It implements core.Authenticator and
// core.Authorizer and is safe for concurrent use; SetUsers swaps the
// table atomically (see Reloader).
type Store struct {
	allowAnon bool
	salt      [32]byte

	users atomic.Pointer[table]
	umu   sync.Mutex // serializes SetUsers and SetSettings

	// verified remembers successful bcrypt checks (see the package doc).
	vmu      sync.Mutex
	verified map[[32]byte]struct{}

	// decisions caches Authorize's answers per user and address for the
	// current table: bit permBit(p) set means granted.
	dmu       sync.RWMutex
	decisions map[decisionKey]uint16
	dtable    *table // the table decisions were computed with
}

// table is one immutable users table, with the security settings and
// anonymous roles in force with it (SetSettings replaces those).
type table struct {
	users     map[string]User // nil: no users file
	settings  []compiled
	given     []Setting
	anonRoles []string
}

type decisionKey struct{ user, address string }

// Cache bounds: past these sizes a cache is emptied and refilled.
const (
	maxVerified  = 10000
	maxDecisions = 100000
)

// dummyHash is compared against for unknown users, so that a wrong user
// name costs as long as a wrong password.
var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("junction: no such user"), hashCost)
	return h
})

// New returns a Store, or an error for invalid settings.
func New(opts Options) (*Store, error) {
	settings, err := compile(opts.Settings)
	if err != nil {
		return nil, err
	}
	anon := opts.AnonymousRoles
	if anon == nil {
		anon = []string{RoleAnonymous}
	}
	s := &Store{
		allowAnon: opts.AllowAnonymous,
		verified:  map[[32]byte]struct{}{},
		decisions: map[decisionKey]uint16{},
	}
	rand.Read(s.salt[:])
	s.users.Store(&table{settings: settings, given: slices.Clone(opts.Settings), anonRoles: slices.Clone(anon)})
	s.SetUsers(opts.Users)
	return s, nil
}

// SetSettings replaces the security settings (over DefaultSettings, as
// Options.Settings) and the anonymous roles (nil: RoleAnonymous) in
// force, and drops the cached authorization decisions; on invalid
// settings nothing changes. Connected clients keep their session; their
// next Authorize uses the new settings.
func (s *Store) SetSettings(settings []Setting, anonRoles []string) error {
	c, err := compile(settings)
	if err != nil {
		return err
	}
	if anonRoles == nil {
		anonRoles = []string{RoleAnonymous}
	}
	s.umu.Lock()
	defer s.umu.Unlock()
	old := s.users.Load()
	s.users.Store(&table{users: old.users, settings: c, given: slices.Clone(settings), anonRoles: slices.Clone(anonRoles)})
	return nil
}

// Settings returns the security settings in force, as given (without
// DefaultSettings).
func (s *Store) Settings() []Setting { return slices.Clone(s.users.Load().given) }

// SetUsers replaces the users table (nil: no users file) and drops the
// cached authorization decisions. Connected clients keep their session;
// their next Authorize uses the new roles.
func (s *Store) SetUsers(u *Users) {
	s.umu.Lock()
	defer s.umu.Unlock()
	old := s.users.Load()
	t := &table{settings: old.settings, given: old.given, anonRoles: old.anonRoles}
	if u != nil {
		t.users = make(map[string]User, len(u.Users))
		for n, e := range u.Users {
			t.users[n] = User{PasswordHash: e.PasswordHash, Roles: slices.Clone(e.Roles)}
		}
	}
	s.users.Store(t)
}

// HasUsers reports whether a users table (possibly empty) is in force.
func (s *Store) HasUsers() bool { return s.users.Load().users != nil }

// HasUser reports whether the users table in force lists name.
func (s *Store) HasUser(name string) bool {
	_, ok := s.users.Load().users[name]
	return ok
}

// AllowsAnonymous reports whether clients without a login are accepted.
func (s *Store) AllowsAnonymous() bool { return s.allowAnon }

// Authenticate implements core.Authenticator. An empty login is an
// anonymous client; otherwise the password is checked against the
// user's bcrypt hash (successes are cached, see the package doc).
// Errors wrap core.ErrAuthFailed and never contain the password.
func (s *Store) Authenticate(_ context.Context, login, password string) (string, error) {
	if login == "" {
		if !s.allowAnon {
			return "", fmt.Errorf("%w: anonymous clients are not allowed", core.ErrAuthFailed)
		}
		return "", nil
	}
	t := s.users.Load()
	if t.users == nil {
		if !s.allowAnon {
			return "", fmt.Errorf("%w: no users are configured", core.ErrAuthFailed)
		}
		return login, nil
	}
	e, ok := t.users[login]
	if !ok || e.PasswordHash == "" {
		bcrypt.CompareHashAndPassword(dummyHash(), []byte(password))
		if !ok {
			return "", fmt.Errorf("%w: unknown user %q", core.ErrAuthFailed, login)
		}
		return "", fmt.Errorf("%w: user %q has no password", core.ErrAuthFailed, login)
	}
	key := s.verifyKey(login, password, e.PasswordHash)
	s.vmu.Lock()
	_, hit := s.verified[key]
	s.vmu.Unlock()
	if hit {
		return login, nil
	}
	if err := bcrypt.CompareHashAndPassword([]byte(e.PasswordHash), []byte(password)); err != nil {
		return "", fmt.Errorf("%w: wrong password for user %q", core.ErrAuthFailed, login)
	}
	s.vmu.Lock()
	if len(s.verified) >= maxVerified {
		clear(s.verified)
	}
	s.verified[key] = struct{}{}
	s.vmu.Unlock()
	return login, nil
}

// verifyKey is the cache key of a successful check: a SHA-256 of a
// per-process random salt, the user, the password and the stored hash,
// each length-prefixed so that no two triples collide.
func (s *Store) verifyKey(user, password, hash string) [32]byte {
	h := sha256.New()
	h.Write(s.salt[:])
	for _, v := range []string{user, password, hash} {
		var n [8]byte
		l := uint64(len(v))
		for i := range n {
			n[i] = byte(l >> (8 * i))
		}
		h.Write(n[:])
		h.Write([]byte(v))
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// Roles returns the roles user holds now: the anonymous roles for "",
// otherwise RoleAuthenticated plus those the users file lists for it.
func (s *Store) Roles(user string) []string {
	return slices.Clone(s.roles(s.users.Load(), user))
}

func (s *Store) roles(t *table, user string) []string {
	if user == "" {
		return t.anonRoles
	}
	e := t.users[user]
	return append([]string{RoleAuthenticated}, e.Roles...)
}

// Authorize implements core.Authorizer: user may do perm on address
// when one of its roles is listed for perm in the most specific setting
// matching address (the "#" setting for the empty address). Decisions
// are cached per (user, address) until the users table changes.
func (s *Store) Authorize(user string, perm core.Permission, address string) bool {
	bit := permBit(perm)
	if bit == 0 {
		return false
	}
	t := s.users.Load()
	k := decisionKey{user, address}
	s.dmu.RLock()
	bits, ok := s.decisions[k]
	valid := s.dtable == t
	s.dmu.RUnlock()
	if ok && valid {
		return bits&bit != 0
	}
	bits = 0
	if set := lookup(t.settings, address); set != nil {
		for _, r := range s.roles(t, user) {
			bits |= set.roles[r]
		}
	}
	s.dmu.Lock()
	if s.dtable != t || len(s.decisions) >= maxDecisions {
		clear(s.decisions)
		s.dtable = t
	}
	s.decisions[k] = bits
	s.dmu.Unlock()
	return bits&bit != 0
}

// The Store is what core's ports expect.
var (
	_ core.Authenticator = (*Store)(nil)
	_ core.Authorizer    = (*Store)(nil)
)
