package security

import (
	"fmt"
	"slices"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/core/wildcard"
)

// Built-in role names.
const (
	// RoleAuthenticated is held implicitly by every user that logged in
	// (with a password or a verified client certificate), never by an
	// anonymous client.
	RoleAuthenticated = "authenticated"
	// RoleAnonymous is what anonymous clients hold unless
	// Options.AnonymousRoles says otherwise. DefaultSettings grant it
	// nothing.
	RoleAnonymous = "anonymous"
	// RoleAdmin is the role DefaultSettings give deleteAddress and manage.
	RoleAdmin = "admin"
)

// Setting grants permissions on the addresses matching a pattern, like
// one <security-setting> of ActiveMQ Artemis. In YAML:
//
//   - match: "orders.#"
//     permissions:
//     send: [shop, admin]
//     consume: [billing, admin]
type Setting struct {
	// Match is an address or a core/wildcard pattern ("#" for all).
	Match string `yaml:"match"`
	// Permissions lists, per permission, the roles that hold it on the
	// matching addresses. A permission not listed is refused.
	Permissions map[core.Permission][]string `yaml:"permissions"`
}

// Validate checks the pattern and the permission names.
func (s Setting) Validate() error {
	if err := wildcard.Validate(s.Match); err != nil {
		return fmt.Errorf("match %q: %w", s.Match, err)
	}
	for p, roles := range s.Permissions {
		if !slices.Contains(core.Permissions, p) {
			return fmt.Errorf("match %q: unknown permission %q (known: %v)", s.Match, p, core.Permissions)
		}
		for _, r := range roles {
			if err := validName(r); err != nil {
				return fmt.Errorf("match %q, %s: %w", s.Match, p, err)
			}
		}
	}
	return nil
}

// DefaultSettings are the settings in force where the configuration gives
// none: on every address ("#"), each authenticated user may send,
// consume, browse, create addresses and create or delete durable and
// non-durable queues; deleting addresses and managing the broker (the
// console and its API) take RoleAdmin. Anonymous clients get nothing.
func DefaultSettings() []Setting {
	all := []string{RoleAuthenticated}
	admin := []string{RoleAdmin}
	return []Setting{{
		Match: "#",
		Permissions: map[core.Permission][]string{
			core.PermSend:                  all,
			core.PermConsume:               all,
			core.PermBrowse:                all,
			core.PermCreateAddress:         all,
			core.PermCreateDurableQueue:    all,
			core.PermDeleteDurableQueue:    all,
			core.PermCreateNonDurableQueue: all,
			core.PermDeleteAddress:         admin,
			core.PermManage:                admin,
		},
	}}
}

// permBit numbers the permissions for the per-(user, address) bit sets.
func permBit(p core.Permission) uint16 {
	if i := slices.Index(core.Permissions, p); i >= 0 {
		return 1 << i
	}
	return 0
}

// compiled is a setting ready for lookups: per role, the permission bits.
type compiled struct {
	match string
	roles map[string]uint16
}

// compile merges the configured settings over the defaults (a configured
// setting replaces the default with the same pattern) and orders them
// from most to least specific.
func compile(configured []Setting) ([]compiled, error) {
	byMatch := map[string]Setting{}
	for _, s := range DefaultSettings() {
		byMatch[s.Match] = s
	}
	for _, s := range configured {
		if err := s.Validate(); err != nil {
			return nil, err
		}
		m := s.Match
		if m == ">" {
			m = "#"
		}
		byMatch[m] = s
	}
	out := make([]compiled, 0, len(byMatch))
	for m, s := range byMatch {
		c := compiled{match: m, roles: map[string]uint16{}}
		for p, roles := range s.Permissions {
			for _, r := range roles {
				c.roles[r] |= permBit(p)
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b compiled) int {
		if d := wildcard.Compare(b.match, a.match); d != 0 {
			return d
		}
		return cmpString(a.match, b.match)
	})
	return out, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// lookup returns the most specific setting for address; for the empty
// address (broker-wide permissions such as manage) the "#" setting.
func lookup(settings []compiled, address string) *compiled {
	for i := range settings {
		s := &settings[i]
		if address == "" {
			if s.match == "#" {
				return s
			}
			continue
		}
		if wildcard.Match(s.match, address) {
			return s
		}
	}
	return nil
}
