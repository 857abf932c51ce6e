package mqtt

import (
	"context"
	"strconv"
	"time"

	"github.com/junctionmq/junction/core"
)

// The $SYS topics: the broker's statistics, every protocol's, published
// every Config.SysInterval (the values that changed) and kept as
// retained messages (in memory: they are published again at the next
// start), so that a client subscribing to $SYS/# gets them at once.
// Wildcards that begin a filter do not match them [MQTT-4.7.2-1].
//
//	$SYS/broker/version                      "Junction <version>"
//	$SYS/broker/uptime                       seconds since start, "<n> seconds"
//	$SYS/broker/clients/connected            open connections, every protocol
//	$SYS/broker/clients/total                connections since start
//	$SYS/broker/clients/<protocol>/connected open connections of a protocol
//	$SYS/broker/messages/received            messages sent into the broker
//	$SYS/broker/messages/sent                messages delivered to consumers
//	$SYS/broker/messages/<protocol>/received the same per protocol
//	$SYS/broker/messages/<protocol>/sent
//	$SYS/broker/bytes/received               message body bytes in (not framing)
//	$SYS/broker/bytes/sent                   message body bytes out
//	$SYS/broker/retained messages/count      retained messages
//	$SYS/broker/subscriptions/count          subscriptions of every protocol

// sysLoop publishes the $SYS topics until the server closes.
func (s *Server) sysLoop() {
	defer s.wg.Done()
	sess, err := s.b.NewSession(core.SessionOptions{})
	if err != nil {
		return
	}
	defer sess.Close()
	last := make(map[string]string)
	t := time.NewTicker(s.cfg.SysInterval)
	defer t.Stop()
	for {
		s.publishSys(sess, last)
		select {
		case <-s.done:
			return
		case <-t.C:
		}
	}
}

// sysValues returns the current $SYS values by topic.
func (s *Server) sysValues() map[string]string {
	v := make(map[string]string, 24)
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	version := s.cfg.Version
	if version == "" {
		version = "(unknown)"
	}
	v["$SYS/broker/version"] = "Junction " + version
	v["$SYS/broker/uptime"] = strconv.FormatInt(int64(time.Since(s.b.Started())/time.Second), 10) + " seconds"
	var conns int
	var total, in, out, bin, bout uint64
	for _, p := range s.b.ProtocolStats() {
		conns += p.Connections
		total += p.ConnectionsTotal
		in += p.MessagesIn
		out += p.MessagesOut
		bin += p.BytesIn
		bout += p.BytesOut
		v["$SYS/broker/clients/"+p.Protocol+"/connected"] = strconv.Itoa(p.Connections)
		v["$SYS/broker/messages/"+p.Protocol+"/received"] = u(p.MessagesIn)
		v["$SYS/broker/messages/"+p.Protocol+"/sent"] = u(p.MessagesOut)
	}
	v["$SYS/broker/clients/connected"] = strconv.Itoa(conns)
	v["$SYS/broker/clients/total"] = u(total)
	v["$SYS/broker/messages/received"] = u(in)
	v["$SYS/broker/messages/sent"] = u(out)
	v["$SYS/broker/bytes/received"] = u(bin)
	v["$SYS/broker/bytes/sent"] = u(bout)
	v["$SYS/broker/retained messages/count"] = strconv.Itoa(s.b.RetainedCount())
	v["$SYS/broker/subscriptions/count"] = strconv.Itoa(s.b.SubscriptionCount())
	return v
}

// publishSys publishes the values that changed since last.
func (s *Server) publishSys(sess *core.Session, last map[string]string) {
	for topic, value := range s.sysValues() {
		if last[topic] == value {
			continue
		}
		last[topic] = value
		m := &core.Message{
			Address: TopicToAddress(topic), RoutingType: core.Multicast, Priority: core.DefaultPriority,
			Body: []byte(value), Properties: sysProperties,
		}
		// Sent first: Send stamps the message, which is shared once kept.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := sess.Send(ctx, m)
		cancel()
		if err == nil {
			err = s.b.RetainInMemory(m)
		}
		if err != nil {
			s.log.Debug().Err(err).Str("topic", topic).Msg("mqtt: $SYS value not published")
		}
	}
}

// sysProperties mark $SYS messages as retained ones, as MQTT brokers
// publish them.
var sysProperties = map[string]any{PropRetain: true, PropQoS: int64(0)}
