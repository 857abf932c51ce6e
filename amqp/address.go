package amqp

import (
	"strings"

	"github.com/junctionmq/junction/amqp/internal/encoding"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
)

// Address prefixes naming the routing type (ActiveMQ's and Qpid JMS's
// destination URIs).
const (
	queueScheme = "queue://"
	topicScheme = "topic://"
)

// resolve maps a terminus or to address onto a core address and routing
// type. The rule, first match wins:
//  1. a queue:// or topic:// prefix;
//  2. the terminus capability queue, temporary-queue or anycast
//     (anycast), topic, temporary-topic or multicast (multicast), as
//     Artemis reads them;
//  3. a bare name follows the routing type of the existing address
//     (multicast when it has only subscriptions);
//  4. otherwise anycast.
func (c *conn) resolve(addr string, caps []encoding.Symbol) (string, core.RoutingType, error) {
	if strings.Contains(addr, ",") {
		// An ActiveMQ composite destination: "queue://a,topic://b", or
		// a list whose bare parts take the capability's routing type
		// (anycast without one).
		rt := core.RoutingDefault
		switch {
		case hasCap(caps, capTopic), hasCap(caps, capTempTopic), hasCap(caps, capMulticast):
			rt = core.Multicast
		}
		comp := core.CompositeAddress(addr, rt)
		for _, p := range strings.Split(comp, ",") {
			if a, _ := core.ParseDestination(p); a == "" {
				return "", rt, linkErr(frames.ErrCondInvalidField, "composite destination %q has an empty part", addr)
			}
		}
		_, first := core.ParseDestination(comp)
		return comp, first, nil
	}
	if a, ok := strings.CutPrefix(addr, queueScheme); ok {
		return checkAddress(a, core.Anycast)
	}
	if a, ok := strings.CutPrefix(addr, topicScheme); ok {
		return checkAddress(a, core.Multicast)
	}
	switch {
	case hasCap(caps, capQueue), hasCap(caps, capTempQueue), hasCap(caps, capAnycast):
		return checkAddress(addr, core.Anycast)
	case hasCap(caps, capTopic), hasCap(caps, capTempTopic), hasCap(caps, capMulticast):
		return checkAddress(addr, core.Multicast)
	}
	if anycast, multicast, ok := c.s.broker.AddressRoutingTypes(addr); ok && multicast && !anycast {
		return checkAddress(addr, core.Multicast)
	}
	return checkAddress(addr, core.Anycast)
}

func checkAddress(a string, rt core.RoutingType) (string, core.RoutingType, error) {
	if a == "" {
		return "", rt, linkErr(frames.ErrCondInvalidField, "the address is empty")
	}
	return a, rt, nil
}

// jmsDestCaps reads the JMS mapping's x-opt-jms-dest annotation (0
// queue, 1 topic, 2 temporary queue, 3 temporary topic) as the
// capability it stands for, for a message sent through the anonymous
// relay with a bare to.
func jmsDestCaps(pm *frames.Message) []encoding.Symbol {
	for _, e := range pm.MessageAnnotations {
		if e.Key != annJMSDest {
			continue
		}
		if n, ok := asInt(e.Value); ok {
			switch n {
			case 0, 2:
				return []encoding.Symbol{capQueue}
			case 1, 3:
				return []encoding.Symbol{capTopic}
			}
		}
	}
	return nil
}
