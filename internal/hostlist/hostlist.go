// Package hostlist decides whether the Host header of an HTTP request,
// or the host of a browser's Origin, names this broker. It is the
// defence against DNS rebinding: a page on attacker.example that has its
// name re-resolved to 127.0.0.1 makes the browser send requests to the
// broker's loopback port, same-origin with the attacker's page, but
// with Host: attacker.example; a Host allow-list refuses them. See
// docs/security.md, "Host allow-list".
//
// A List is built once from patterns and never changes, so Allows is a
// map lookup and never resolves a name:
//
//	l, err := hostlist.New(append(hostlist.Defaults("127.0.0.1:8161"), "broker.example.com")...)
//	l.Allows("localhost:8161")        // true
//	l.Allows("attacker.example:8161") // false
//
// A pattern is a host name, an IP address (IPv6 with or without
// brackets), either with a port ("broker.example.com:8443",
// "[::1]:8161"), or "*" for any host. A pattern without a port matches
// the host on any port, or none; one with a port matches only a Host
// that names that port. Matching ignores case and one trailing dot
// ("LocalHost." is "localhost"), and compares IP addresses by value
// ("[::ffff:127.0.0.1]" is 127.0.0.1). A Host that is not a valid host
// name, address or host:port matches nothing.
//
// The package imports nothing of Junction's: cmd builds the lists and
// hands the packages that serve HTTP (management, websocket) a
// func(host string) bool, so that they stay leaves.
package hostlist

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ErrPattern is wrapped by New's error for a pattern that is not a host
// name, an IP address, a host:port or "*".
var ErrPattern = errors.New("hostlist: not a host name, IP address or host:port")

// List is a Host allow-list. Its methods may be called from any
// goroutine.
type List struct {
	any   bool
	ports map[string][]string // canonical host → ports ("" for any port)
	text  []string            // the patterns, canonical, for logs
}

// New returns the list of patterns. Empty patterns (and surrounding
// blanks) are ignored; an invalid one is an error wrapping ErrPattern.
func New(patterns ...string) (*List, error) {
	l := &List{ports: make(map[string][]string)}
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		switch p {
		case "":
			continue
		case "*":
			if !l.any {
				l.any = true
				l.text = append(l.text, "*")
			}
			continue
		}
		host, port, ok := split(p)
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrPattern, p)
		}
		if slices.Contains(l.ports[host], port) {
			continue
		}
		l.ports[host] = append(l.ports[host], port)
		l.text = append(l.text, join(host, port))
	}
	return l, nil
}

// Allows reports whether hostport (a Host header, or the host[:port] of
// an Origin) is on the list.
func (l *List) Allows(hostport string) bool {
	if l.any {
		return true
	}
	host, port, ok := split(hostport)
	if !ok {
		return false
	}
	for _, p := range l.ports[host] {
		if p == "" || p == port {
			return true
		}
	}
	return false
}

// Any reports whether the list holds "*", allowing every host.
func (l *List) Any() bool { return l.any }

// Patterns returns the list's patterns in canonical form, in the order
// given, for logs.
func (l *List) Patterns() []string { return slices.Clone(l.text) }

// loopbackNames are allowed when a listener is reachable on loopback.
var loopbackNames = []string{"localhost", "127.0.0.1", "::1"}

// Defaults returns the patterns that name this machine for listeners
// bound to the listen addresses given (host:port, as configured): each
// listener's own host; localhost, 127.0.0.1 and ::1 when a listener is
// on loopback; for a wildcard bind (an empty host, 0.0.0.0 or ::) those
// and every address of the machine's interfaces, as they are now; and
// the machine's host name (os.Hostname). None has a port: a port says
// nothing about rebinding, whose trick is in the name, and a listener
// behind a port mapping is reached on another port. A name given as a
// listen host is allowed as written; the addresses it resolves to are
// not looked up.
func Defaults(listen ...string) []string {
	var out []string
	add := func(h string) {
		if h, _, ok := split(h); ok && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	if name, err := os.Hostname(); err == nil {
		add(name)
	}
	for _, a := range listen {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		ip, ipErr := netip.ParseAddr(host)
		switch {
		case host == "" || ipErr == nil && ip.IsUnspecified():
			for _, n := range loopbackNames {
				add(n)
			}
			addrs, _ := net.InterfaceAddrs()
			for _, ia := range addrs {
				if pfx, err := netip.ParsePrefix(ia.String()); err == nil {
					add(pfx.Addr().String())
				}
			}
		case strings.EqualFold(host, "localhost") || ipErr == nil && ip.IsLoopback():
			add(host)
			for _, n := range loopbackNames {
				add(n)
			}
		default:
			add(host)
		}
	}
	return out
}

// split parses a Host header value or pattern into its canonical host
// and its port ("" when absent): "[::1]:8161", "::1", "Broker.Example.:80".
func split(s string) (host, port string, ok bool) {
	switch {
	case s == "":
		return "", "", false
	case s[0] == '[':
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false
		}
		host, rest := s[1:end], s[end+1:]
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() {
			return "", "", false // brackets hold IPv6 only
		}
		if rest != "" {
			if rest[0] != ':' {
				return "", "", false
			}
			port = rest[1:]
		}
		s = host
	case strings.Count(s, ":") > 1: // a bare IPv6 address
	default:
		if i := strings.IndexByte(s, ':'); i >= 0 {
			s, port = s[:i], s[i+1:]
		}
	}
	if port, ok = canonPort(port); !ok {
		return "", "", false
	}
	host, ok = canonHost(s)
	return host, port, ok
}

// canonPort returns a port without leading zeros; "" stays "" (an empty
// port after a colon is no port, as in a URL).
func canonPort(p string) (string, bool) {
	if p == "" {
		return "", true
	}
	if len(p) > 5 || strings.Trim(p, "0123456789") != "" {
		return "", false
	}
	n, err := strconv.Atoi(p)
	if err != nil || n > 65535 {
		return "", false
	}
	return strconv.Itoa(n), true
}

// canonHost returns an IP address in its canonical form (IPv4-mapped
// IPv6 as IPv4, without zone), or a host name in lower case without a
// trailing dot; false for anything else.
func canonHost(h string) (string, bool) {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.WithZone("").Unmap().String(), true
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" || h[0] == '.' || strings.Contains(h, "..") {
		return "", false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", false
		}
	}
	return h, true
}

// join writes host and port back as a Host value.
func join(host, port string) string {
	if port == "" {
		return host
	}
	return net.JoinHostPort(host, port)
}
