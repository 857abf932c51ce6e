// Package authztest gives the front-ends' tests a core.Authorizer they
// can write as a table, without the security package.
package authztest

import (
	"strings"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/core/wildcard"
)

// Grants is a test Authorizer: per user, the address patterns (wildcards
// as in subscriptions) each permission is granted on. The patterns are
// tried in order and the first that equals or matches the address
// decides; one written "!pattern" refuses, so that
//
//	"bob": {core.PermConsume: {"!devices.secret.#", "devices.#"}}
//
// lets bob consume from devices.x.a and subscribe to devices.# but not
// consume from devices.secret.a, as security settings where a narrower
// match refuses what a wider one grants.
type Grants map[string]map[core.Permission][]string

// Authorize implements core.Authorizer.
func (g Grants) Authorize(user string, perm core.Permission, address string) bool {
	for _, p := range g[user][perm] {
		p, deny := strings.CutPrefix(p, "!")
		if p == address || wildcard.Match(p, address) {
			return !deny
		}
	}
	return false
}
