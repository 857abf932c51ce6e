package core

import (
	"errors"
	"fmt"
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
// every send to a new address and every subscribe.
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
