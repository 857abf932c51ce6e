package core

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Permission is one thing a user may do on an address, as in Artemis'
// security-settings.
type Permission string

// The permissions an Authorizer grants per address.
const (
	PermSend                  Permission = "send"
	PermConsume               Permission = "consume"
	PermBrowse                Permission = "browse"
	PermCreateAddress         Permission = "createAddress"
	PermDeleteAddress         Permission = "deleteAddress"
	PermCreateDurableQueue    Permission = "createDurableQueue"
	PermDeleteDurableQueue    Permission = "deleteDurableQueue"
	PermCreateNonDurableQueue Permission = "createNonDurableQueue"
	PermManage                Permission = "manage"
)

// Permissions lists every Permission, in the order documents show them.
var Permissions = []Permission{
	PermSend, PermConsume, PermBrowse, PermCreateAddress, PermDeleteAddress,
	PermCreateDurableQueue, PermDeleteDurableQueue, PermCreateNonDurableQueue, PermManage,
}

// Authorizer decides whether a user may do something on an address. The
// user is the name an Authenticator returned ("" for anonymous clients).
// Authorize must be safe for concurrent use and fast: core calls it on
// every send to a new address, every subscribe, and for each new address
// a wildcard subscription's consumer is to be handed (readauthz.go),
// which it may do with a queue's lock held, so Authorize must not call
// into the broker nor wait for anything that does. When its answers
// change (a reload), tell the broker with [Broker.PermissionsChanged].
type Authorizer interface {
	Authorize(user string, perm Permission, address string) bool
}

// ErrUnauthorized is returned (wrapped in *AuthzError) when the
// Authorizer refuses an operation.
var ErrUnauthorized = errors.New("core: not authorized")

// AuthzError says who was refused what, on which address.
type AuthzError struct {
	User       string
	Permission Permission
	Address    string
}

func (e *AuthzError) Error() string {
	u := e.User
	if u == "" {
		u = "anonymous"
	}
	return fmt.Sprintf("core: user %q may not %s on %q", u, e.Permission, e.Address)
}

// Unwrap makes errors.Is(err, ErrUnauthorized) hold.
func (e *AuthzError) Unwrap() error { return ErrUnauthorized }

// Authorize checks that user may do perm on address, returning a
// *AuthzError (wrapping ErrUnauthorized) when the broker's Authorizer
// refuses. Without an Authorizer everything is allowed.
func (b *Broker) Authorize(user string, perm Permission, address string) error {
	if b.authz == nil || b.authz.Authorize(user, perm, address) {
		return nil
	}
	return &AuthzError{User: user, Permission: perm, Address: address}
}

// Authorization of sessions
//
// Core checks a client session's operations itself, so that every
// protocol enforces the same rules:
//
//	send (Session.Send, SendAsync, Tx.Send)      send on the message's address
//	  auto-creating the address                  createAddress (and
//	                                             createDurableQueue for an
//	                                             anycast queue)
//	Subscribe                                    consume on the address or
//	                                             pattern (a queue read by
//	                                             name: on its address)
//	  each message to a wildcard subscription    consume on the message's
//	                                             address, for the
//	                                             subscription's readers and
//	                                             for each consumer
//	                                             (readauthz.go)
//	  auto-creating the address                  createAddress (and
//	                                             createDurableQueue for an
//	                                             anycast queue)
//	  a new non-durable or shared subscription   createNonDurableQueue
//	  a new durable subscription                 createDurableQueue
//	  replacing a durable subscription           deleteDurableQueue and
//	                                             createDurableQueue
//	Unsubscribe                                  deleteDurableQueue
//	CreateTemporaryQueue                         createNonDurableQueue on
//	                                             the new queue's name
//
// Only sessions with a Protocol (clients' connections) are checked; a
// front-end's internal sessions act for the broker. Administrative
// operations of Broker (CreateAddress, DeleteAddress, DeleteQueue,
// Browse...) take no user: their caller (management) checks manage.
// A refusal returns a *AuthzError (errors.Is ErrUnauthorized), is
// counted per protocol ([Broker.AuthzDenials]) and logged at warn level
// once per connection for each (permission, address); a message withheld
// from a wildcard subscription is counted each time and logged once per
// subscription and address.

// authzCacheTTL is how long a session trusts a send permission once
// granted: sends to the same address then cost a map lookup, and a
// revoked permission takes effect within this time (Artemis' security
// cache invalidates after 10 s too), or at once when the broker is told
// that permissions changed (Broker.PermissionsChanged).
const authzCacheTTL = 10 * time.Second

// authzCacheMax bounds a session's cache of granted sends; a session
// sending to more addresses starts the cache over.
const authzCacheMax = 256

// readOKMax bounds a session's cache of consume decisions
// (Session.Authorize for PermConsume, which a front-end asks for each
// delivery it checks itself).
const readOKMax = 4096

// authzLogMax bounds the refusals a session remembers having logged;
// beyond it further refusals are counted but not logged.
const authzLogMax = 1024

// sessionAuthz is a session's authorization state. Its mutex is never
// held with another lock.
type sessionAuthz struct {
	mu     sync.Mutex
	gen    uint64                // guarded by mu: Broker.permGen of sendOK and readOK
	sendOK map[string]time.Time  // guarded by mu: address → granted until
	readOK map[string]bool       // guarded by mu: address → consume granted
	logged map[authzKey]struct{} // guarded by mu: refusals logged
	capped bool                  // guarded by mu: logged reached authzLogMax
}

// syncGenLocked drops the session's cached decisions if permissions
// changed since they were made (z.mu held).
func (z *sessionAuthz) syncGenLocked(gen uint64) {
	if z.gen < gen {
		clear(z.sendOK)
		clear(z.readOK)
		z.gen = gen
	}
}

type authzKey struct {
	perm    Permission
	address string
}

// denialCounts counts refusals per protocol.
type denialCounts struct {
	mu      sync.Mutex
	byProto map[string]uint64 // guarded by mu
}

func (d *denialCounts) add(proto string) {
	d.mu.Lock()
	if d.byProto == nil {
		d.byProto = make(map[string]uint64)
	}
	d.byProto[proto]++
	d.mu.Unlock()
}

// AuthzDenials returns how many operations of client sessions the
// Authorizer refused since the broker started, in total and per
// protocol (SessionOptions.Protocol).
func (b *Broker) AuthzDenials() (total uint64, byProtocol map[string]uint64) {
	b.denials.mu.Lock()
	defer b.denials.mu.Unlock()
	byProtocol = make(map[string]uint64, len(b.denials.byProto))
	for p, n := range b.denials.byProto {
		byProtocol[p] = n
		total += n
	}
	return total, byProtocol
}

// trusted reports whether s skips authorization: the broker has no
// Authorizer, or s is a front-end's internal session.
func (s *Session) trusted() bool { return s.b.authz == nil || s.opts.Protocol == "" }

// Authorize checks that the session's user may do perm on address,
// counting and logging a refusal as core's own checks do. Front-ends
// call it for what they must decide before core is involved: an AMQP
// sending link's attach (send), an MQTT ACL check, a delivery to a
// subscriber the front-end serves itself (consume on the message's
// address: decisions are cached per session until the permissions
// change, see [Broker.PermissionsChanged]). It returns nil for sessions
// core does not check (see trusted).
func (s *Session) Authorize(perm Permission, address string) error {
	switch perm {
	case PermSend:
		return s.authorizeSend(address, time.Now())
	case PermConsume:
		return s.authorizeConsume(address)
	}
	return s.authorize(perm, address)
}

// authorizeConsume checks consume on address, from the session's cache
// of decisions when it has one.
func (s *Session) authorizeConsume(address string) error {
	if s.trusted() {
		return nil
	}
	z := &s.az
	gen := s.b.permGen.Load()
	z.mu.Lock()
	z.syncGenLocked(gen)
	ok, hit := z.readOK[address]
	z.mu.Unlock()
	if !hit {
		ok = s.b.authz.Authorize(s.opts.User, PermConsume, address)
		z.mu.Lock()
		if z.gen == gen {
			if z.readOK == nil || len(z.readOK) >= readOKMax {
				z.readOK = make(map[string]bool)
			}
			z.readOK[address] = ok
		}
		z.mu.Unlock()
	}
	if !ok {
		return s.denied(PermConsume, address)
	}
	return nil
}

func (s *Session) authorize(perm Permission, address string) error {
	if s.trusted() || s.b.authz.Authorize(s.opts.User, perm, address) {
		return nil
	}
	return s.denied(perm, address)
}

// authorizeSend checks send on address, trusting a grant for
// authzCacheTTL or until the permissions change.
func (s *Session) authorizeSend(address string, now time.Time) error {
	if s.trusted() {
		return nil
	}
	z := &s.az
	gen := s.b.permGen.Load()
	z.mu.Lock()
	z.syncGenLocked(gen)
	until, ok := z.sendOK[address]
	z.mu.Unlock()
	if ok && now.Before(until) {
		return nil
	}
	if !s.b.authz.Authorize(s.opts.User, PermSend, address) {
		return s.denied(PermSend, address)
	}
	z.mu.Lock()
	if z.gen == gen {
		if z.sendOK == nil || len(z.sendOK) >= authzCacheMax {
			z.sendOK = make(map[string]time.Time)
		}
		z.sendOK[address] = now.Add(authzCacheTTL)
	}
	z.mu.Unlock()
	return nil
}

// denied counts a refusal, logs it if this connection has not logged
// the same one, and returns its error.
func (s *Session) denied(perm Permission, address string) error {
	s.b.denials.add(s.opts.Protocol)
	k := authzKey{perm, address}
	z := &s.az
	z.mu.Lock()
	_, seen := z.logged[k]
	capped := false
	if !seen {
		switch {
		case len(z.logged) < authzLogMax:
			if z.logged == nil {
				z.logged = make(map[authzKey]struct{})
			}
			z.logged[k] = struct{}{}
		case !z.capped:
			z.capped, capped = true, true
		default:
			seen = true
		}
	}
	z.mu.Unlock()
	if !seen {
		ev := s.b.log.Warn().Str("user", s.opts.User).Str("permission", string(perm)).Str("address", address).
			Str("protocol", s.opts.Protocol).Str("remote", s.opts.RemoteAddr).Uint64("connection", s.id)
		if capped {
			ev.Msg("not authorized (further refusals on this connection are not logged)")
		} else {
			ev.Msg("not authorized")
		}
	}
	return &AuthzError{User: s.opts.User, Permission: perm, Address: address}
}

// grants are the permissions a Subscribe has obtained so far (see
// Session.queueFor). all: the session is not checked.
type grants struct {
	all  bool
	have []authzKey
}

// authzNeed is a permission an operation still needs.
type authzNeed = authzKey

// missing returns the first of perms on address not granted yet, or nil.
func (g *grants) missing(address string, perms ...Permission) *authzNeed {
	if g.all {
		return nil
	}
	for _, p := range perms {
		k := authzKey{p, address}
		if !slices.Contains(g.have, k) {
			return &k
		}
	}
	return nil
}

// AuthorizeSubscribe checks, without subscribing or creating anything,
// every permission Subscribe(o) would need as the broker stands: a
// front-end that must answer before it subscribes (MQTT's SUBACK) asks
// this first. It returns nil, a *AuthzError, or another error Subscribe
// would return (an unknown queue, an invalid address).
func (s *Session) AuthorizeSubscribe(o ConsumerOptions) error {
	if s.trusted() {
		return nil
	}
	sel, err := parseSelector(o.Selector)
	if err != nil {
		return err
	}
	if s.remote != nil {
		// The group broker checks what creating the subscription needs
		// when it is attached; here only what needs no state.
		addr := o.Address
		if o.Queue != "" {
			addr = o.Queue
		}
		return s.authorize(PermConsume, addr)
	}
	_, err = s.queueFor(o, sel, true)
	return err
}

// authorizeCreate checks what auto-creating address for a send of
// routing type rt needs: createAddress, and createDurableQueue for an
// anycast address's queue. s may be nil (the broker's own send).
func (s *Session) authorizeCreate(address string, rt RoutingType) error {
	if s == nil || s.trusted() {
		return nil
	}
	if err := s.authorize(PermCreateAddress, address); err != nil {
		return err
	}
	if rt == Anycast {
		return s.authorize(PermCreateDurableQueue, address)
	}
	return nil
}

// AuthorizeSend checks, without sending or creating anything, the
// permissions a send of routing type rt to address would need as the
// broker stands: send, and what auto-creating the address needs when it
// does not take rt yet. A front-end that must answer before the first
// message (an AMQP sending link's attach) or before it delivers to its
// own subscribers (MQTT) asks this first; the send is checked again
// (send from the session's cache).
func (s *Session) AuthorizeSend(address string, rt RoutingType) error {
	if s.trusted() {
		return nil
	}
	if parts, ok := parseComposite(address); ok {
		for _, p := range parts {
			if err := s.AuthorizeSend(p.addr, p.rt); err != nil {
				return err
			}
		}
		return nil
	}
	if err := s.authorizeSend(address, time.Now()); err != nil {
		return err
	}
	b := s.b
	if b.cluster != nil {
		return nil // creation is the group broker's to check
	}
	b.mu.RLock()
	a := b.addresses[address]
	b.mu.RUnlock()
	if a != nil && b.supports(a, rt) {
		return nil
	}
	st := b.settings.resolve(address)
	if !st.AutoCreate || isTemporaryName(address) {
		return nil // the send fails, but not for want of a permission
	}
	if rt == RoutingDefault {
		rt = st.DefaultRoutingType
	}
	return s.authorizeCreate(address, rt)
}

// Authorizing reports whether the broker has an Authorizer, so that a
// front-end can skip preparing checks that would all pass.
func (b *Broker) Authorizing() bool { return b.authz != nil }
