package mqtt

import (
	"strings"
)

// TopicToAddress maps an MQTT topic name to a core address:
//
//	'/' (level separator)  →  '.' (word separator)
//	'.' (inside a level)   →  "//"
//
// so "sensors/kitchen/temp" is the address "sensors.kitchen.temp", which
// STOMP reaches as /topic/sensors.kitchen.temp. Empty levels map to empty
// words ("a//b" → "a..b", "/a" → ".a"). The mapping is reversible with
// AddressToTopic because core addresses of MQTT origin never hold a lone
// '/': a '.' inside a level becomes the pair "//", which cannot come from
// two level separators (those become "..").
func TopicToAddress(topic string) string {
	if !strings.ContainsAny(topic, "/.") {
		return topic // the common one-level case allocates nothing
	}
	var b strings.Builder
	b.Grow(len(topic) + 4)
	for i := 0; i < len(topic); i++ {
		switch c := topic[i]; c {
		case '/':
			b.WriteByte('.')
		case '.':
			b.WriteString("//")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// AddressToTopic is the inverse of TopicToAddress: '.' → '/', "//" → '.'.
// A lone '/' in an address (one not made by TopicToAddress, e.g. sent by
// STOMP to /topic/a/b) is kept as '/', so such an address reaches MQTT
// as a deeper topic ("a/b" → topic "a/b").
func AddressToTopic(addr string) string {
	if !strings.ContainsAny(addr, "/.") {
		return addr
	}
	var b strings.Builder
	b.Grow(len(addr))
	for i := 0; i < len(addr); i++ {
		switch c := addr[i]; {
		case c == '.':
			b.WriteByte('/')
		case c == '/' && i+1 < len(addr) && addr[i+1] == '/':
			b.WriteByte('.')
			i++
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// FilterToPattern maps an MQTT topic filter to a core wildcard pattern:
// levels as TopicToAddress maps them, '+' → '*' (one word), '#' → '#'
// (any number of words, MQTT allows it only last).
func FilterToPattern(filter string) string {
	levels := strings.Split(filter, "/")
	for i, l := range levels {
		switch l {
		case "+":
			levels[i] = "*"
		case "#":
			levels[i] = "#"
		default:
			levels[i] = strings.ReplaceAll(l, ".", "//")
		}
	}
	return strings.Join(levels, ".")
}
