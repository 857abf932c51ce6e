package mqtt

import (
	"testing"

	"github.com/junctionmq/junction/core/wildcard"
)

func TestTopicAddressMapping(t *testing.T) {
	for _, c := range []struct{ topic, addr string }{
		{"a", "a"},
		{"sensors/kitchen/temp", "sensors.kitchen.temp"},
		{"v1.2/x", "v1//2.x"},
		{"a//b", "a..b"},
		{"/a", ".a"},
		{"a/", "a."},
		{"a.b.c", "a//b//c"},
	} {
		if got := TopicToAddress(c.topic); got != c.addr {
			t.Errorf("TopicToAddress(%q) = %q, want %q", c.topic, got, c.addr)
		}
		if got := AddressToTopic(c.addr); got != c.topic {
			t.Errorf("AddressToTopic(%q) = %q, want %q", c.addr, got, c.topic)
		}
	}
}

func TestFilterToPattern(t *testing.T) {
	for _, c := range []struct {
		filter, topic string
		match         bool
	}{
		{"a/+/c", "a/b/c", true},
		{"a/+/c", "a/b/d", false},
		{"a/#", "a/b/c", true},
		{"a/#", "a", true},
		{"#", "x/y", true},
		{"+/+", "x/y", true},
		{"+/+", "x", false},
		{"v1.2/+", "v1.2/x", true},
		{"v1.2/+", "v1/2/x", false},
	} {
		p := FilterToPattern(c.filter)
		if got := wildcard.Match(p, TopicToAddress(c.topic)); got != c.match {
			t.Errorf("filter %q (pattern %q) on %q: %v, want %v", c.filter, p, c.topic, got, c.match)
		}
	}
}

func FuzzTopicRoundTrip(f *testing.F) {
	for _, s := range []string{"a/b", "a.b", "a//b..c", "/", ".", "//.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		if got := AddressToTopic(TopicToAddress(topic)); got != topic {
			t.Fatalf("round trip of %q gave %q", topic, got)
		}
	})
}
