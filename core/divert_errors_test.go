package core

import (
	"errors"
	"strings"
	"testing"
)

// A divert that does not validate is ErrInvalidDivert, with a text that
// names the divert and the field at fault, never "invalid address" for
// what is not an address.
func TestDivertValidationErrors(t *testing.T) {
	b := newBroker(t)
	for _, c := range []struct {
		d    Divert
		want string
		is   error // besides ErrInvalidDivert
	}{
		{Divert{Address: "a", ForwardingAddress: "b"}, `core: invalid divert: name is required`, nil},
		{Divert{Name: "d", ForwardingAddress: "b"}, `core: invalid divert "d": address is required`, nil},
		{Divert{Name: "d", Address: "a..b", ForwardingAddress: "b"}, `core: invalid divert "d": address "a..b" has an empty word`, nil},
		{Divert{Name: "d", Address: "a"}, `core: invalid divert "d": forwarding-address is required`, nil},
		{Divert{Name: "d", Address: "a", ForwardingAddress: "b", RoutingType: "sideways"}, `core: invalid divert "d": routing-type must be PASS, ANYCAST, MULTICAST or STRIP; got "sideways"`, nil},
		{Divert{Name: "d", Address: "a", ForwardingAddress: "b", Filter: "a ==="}, `core: invalid divert "d": filter: `, ErrInvalidSelector},
		{Divert{Name: "d", Address: "a", ForwardingAddress: "b,c.*"}, `core: invalid divert "d": forwarding-address: "c.*" is a wildcard pattern`, ErrInvalidAddress},
		{Divert{Name: "d", Address: "a", ForwardingAddress: "queue://a"}, `core: invalid divert "d": forwards to its own address "a"`, nil},
	} {
		err := b.CreateDivert(c.d)
		if !errors.Is(err, ErrInvalidDivert) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("CreateDivert(%+v) = %v, want ErrInvalidDivert %q", c.d, err, c.want)
			continue
		}
		if strings.Count(err.Error(), "core:") != 1 {
			t.Errorf("CreateDivert(%+v) = %q: one core: prefix, please", c.d, err)
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("CreateDivert(%+v) = %v, not %v", c.d, err, c.is)
		}
		if c.is != ErrInvalidAddress && errors.Is(err, ErrInvalidAddress) {
			t.Errorf("CreateDivert(%+v) = %v: ErrInvalidAddress, but no address is at fault", c.d, err)
		}
		// Validate (the configuration file's check) says the same
		// without the prefix.
		if verr := c.d.Validate(); verr == nil || "core: invalid "+verr.Error() != err.Error() {
			t.Errorf("Validate(%+v) = %v, CreateDivert %v", c.d, verr, err)
		}
	}
}
