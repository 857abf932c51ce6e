// Package authztest gives the front-ends' tests a core.Authorizer they
// can write as a table, without the security package.
package authztest

import (
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/core/wildcard"
)

// Grants is a test Authorizer: per user, the address patterns (wildcards
// as in subscriptions) each permission is granted on.
type Grants map[string]map[core.Permission][]string

// Authorize implements core.Authorizer.
func (g Grants) Authorize(user string, perm core.Permission, address string) bool {
	for _, p := range g[user][perm] {
		if p == address || wildcard.Match(p, address) {
			return true
		}
	}
	return false
}
