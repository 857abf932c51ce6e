package hostlist

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestAllows(t *testing.T) {
	l, err := New("127.0.0.1", "localhost", "::1", "Broker.Example.COM.", "app.example:8443", "[2001:db8::7]:9000", " ", "10.0.0.5")
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		// Without a port in the pattern: any port, or none.
		"127.0.0.1":             true,
		"127.0.0.1:8161":        true,
		"127.0.0.1:":            true,
		"localhost:8161":        true,
		"LOCALHOST:8161":        true,
		"localhost.:8161":       true,
		"[::1]:8161":            true,
		"[::1]":                 true,
		"::1":                   true, // a bare IPv6 address is taken as one
		"[0:0::1]:8161":         true, // addresses compare by value
		"[::ffff:127.0.0.1]:1":  true, // IPv4-mapped is IPv4
		"broker.example.com":    true,
		"BROKER.example.com.:1": true,
		"10.0.0.5:08161":        true, // leading zeros of a port
		// With a port in the pattern: that port only.
		"app.example:8443":     true,
		"APP.example.:8443":    true,
		"app.example:443":      false,
		"app.example":          false,
		"[2001:db8::7]:9000":   true,
		"[2001:db8:0::7]:9000": true,
		"[2001:db8::7]:9001":   false,
		// Not on the list.
		"attacker.example:8161":      false,
		"localhost.attacker.example": false,
		"127.0.0.1.attacker.example": false,
		"127.0.0.2:8161":             false,
		"broker.example.com.evil:80": false,
		"evil.broker.example.com":    false,
		"2130706433:8161":            false, // 127.0.0.1 in decimal: a name here, never resolved
		"0x7f.1":                     false,
		// Malformed.
		"":                 false,
		":8161":            false,
		"[::1":             false,
		"[::1]x":           false,
		"[127.0.0.1]:8161": false,
		"localhost:port":   false,
		"localhost:99999":  false,
		"localhost:123456": false,
		"local host":       false,
		"localhost..":      false,
		".localhost":       false,
		"user@localhost":   false,
		"localhost/x":      false,
		"localhost\x00":    false,
		"localhost:8161:1": false, // three colons: not an IPv6 address
	} {
		if got := l.Allows(host); got != want {
			t.Errorf("Allows(%q) = %v, want %v", host, got, want)
		}
	}
	if l.Any() {
		t.Error("Any without *")
	}
	if got, want := l.Patterns(), []string{"127.0.0.1", "localhost", "::1", "broker.example.com", "app.example:8443", "[2001:db8::7]:9000", "10.0.0.5"}; !slices.Equal(got, want) {
		t.Errorf("Patterns() = %q, want %q", got, want)
	}
}

func TestAny(t *testing.T) {
	l, err := New("localhost", "*")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Any() || !l.Allows("attacker.example:8161") || !l.Allows("") {
		t.Error("* does not allow every host")
	}
	empty, _ := New()
	if empty.Allows("localhost") || empty.Allows("127.0.0.1:8161") {
		t.Error("an empty list allows a host")
	}
}

func TestNewRefusesBadPatterns(t *testing.T) {
	for _, p := range []string{"http://broker.example", "broker.example/", "*.example.com", "[::1", "host:x", "a b", "localhost:70000", "@x"} {
		if _, err := New("localhost", p); !errors.Is(err, ErrPattern) || !strings.Contains(err.Error(), p) {
			t.Errorf("New(%q): %v, want an ErrPattern naming it", p, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	name, err := os.Hostname()
	if err != nil {
		t.Skip("no host name:", err)
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	allowed := func(t *testing.T, listen []string, yes, no []string) {
		t.Helper()
		l, err := New(Defaults(listen...)...)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range yes {
			if !l.Allows(h) {
				t.Errorf("listen %q: %q refused; defaults %q", listen, h, l.Patterns())
			}
		}
		for _, h := range no {
			if l.Allows(h) {
				t.Errorf("listen %q: %q allowed; defaults %q", listen, h, l.Patterns())
			}
		}
	}
	t.Run("loopback", func(t *testing.T) {
		allowed(t, []string{"127.0.0.1:8161"},
			[]string{"127.0.0.1:8161", "127.0.0.1", "localhost:8161", "localhost:18161", "[::1]:8161", name, name + ":8161"},
			[]string{"attacker.example:8161", "10.1.2.3:8161", "0.0.0.0:8161"})
		allowed(t, []string{"[::1]:0", "localhost:61614"}, []string{"[::1]:43210", "localhost", "127.0.0.1:1"}, []string{"attacker.example"})
		allowed(t, []string{"127.0.0.2:8161"}, []string{"127.0.0.2:8161", "localhost:8161"}, []string{"attacker.example"})
	})
	t.Run("specific address", func(t *testing.T) {
		allowed(t, []string{"192.0.2.10:8161"}, []string{"192.0.2.10:8161", "192.0.2.10", name}, []string{"localhost:8161", "127.0.0.1:8161", "attacker.example"})
		allowed(t, []string{"broker.internal:8161"}, []string{"broker.internal:8161", "BROKER.internal."}, []string{"localhost", "attacker.example"})
	})
	t.Run("wildcard", func(t *testing.T) {
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			t.Skip(err)
		}
		var yes []string
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				yes = append(yes, net.JoinHostPort(p.Addr().String(), "8161"))
			}
		}
		if len(yes) == 0 {
			t.Fatal("no interface addresses")
		}
		yes = append(yes, "localhost:8161", "127.0.0.1:8161", name)
		for _, bind := range []string{":8161", "0.0.0.0:8161", "[::]:8161"} {
			allowed(t, []string{bind}, yes, []string{"attacker.example:8161", "192.0.2.99:8161"})
		}
	})
	if d := Defaults("not an address", ""); !slices.Equal(d, Defaults()) {
		t.Errorf("unparsable listen addresses added %q", d)
	}
}
