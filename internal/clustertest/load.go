package clustertest

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/junctionmq/junction/internal/ledger"
)

// Protocols are the protocols of the load.
var Protocols = []string{"stomp", "mqtt", "amqp"}

// Topic is the multicast address the MQTT subscriber reads ("ct/m").
const Topic = "ct.m"

// Queues returns an anycast queue name for each group (Queues()[g-1] is
// in group g).
func Queues() []string {
	q := make([]string, Groups)
	for i, found := 0, 0; found < Groups; i++ {
		name := fmt.Sprintf("ct.q%d", i)
		if g := GroupOf(name); q[g-1] == "" {
			q[g-1] = name
			found++
		}
	}
	return q
}

// Run is the durable load of one scenario and its ledger:
//
//   - for each group's queue, a STOMP, an MQTT and an AMQP producer, and
//     a STOMP and an AMQP consumer (each holding up to 20 deliveries
//     unacknowledged on its first connection);
//   - on the multicast address ct.m, a STOMP, an MQTT and an AMQP
//     producer, and an MQTT subscriber (persistent session, QoS 1)
//     whose first broker is node Home;
//
// each client lists every node, its first a different one, and fails
// over to the next when a send or its connection fails.
type Run struct {
	C      *Cluster
	Ledger *ledger.Ledger
	Queues []string
	// Home is the MQTT subscriber's first node; its persistent session
	// is replicated, so it fails over like the other clients.
	Home uint64

	stopProducers, stopConsumers, bounce chan struct{}
	producers, consumers                 sync.WaitGroup
}

// order lists the nodes starting at the k-th (mod 3), Home excluded
// from nothing.
func order(k int) []uint64 {
	o := make([]uint64, 3)
	for i := range 3 {
		o[i] = uint64(1 + (k+i)%3)
	}
	return o
}

func stompAddr(a Addrs) string { return a.STOMP }
func mqttAddr(a Addrs) string  { return a.MQTT }
func amqpAddr(a Addrs) string  { return a.AMQP }

// StartLoad creates the queues, starts the consumers then the producers
// (ids from round), and waits until every protocol has a confirmed
// message and a confirmed message is held.
func StartLoad(c *Cluster, round int, home uint64) *Run {
	c.T.Helper()
	r := &Run{C: c, Ledger: ledger.New(), Queues: Queues(), Home: home,
		stopProducers: make(chan struct{}), stopConsumers: make(chan struct{}), bounce: make(chan struct{})}
	for _, q := range r.Queues {
		c.CreateQueue(q)
	}
	consumer := func(pick func(Addrs) string, k int) ledger.Load {
		l := c.Load(r.Ledger, r.stopConsumers, pick, order(k)...)
		l.Hold, l.Bounce = 20, r.bounce
		return l
	}
	producer := func(pick func(Addrs) string, k int) ledger.Load {
		return c.Load(r.Ledger, r.stopProducers, pick, order(k)...)
	}
	// The MQTT subscriber first: what is sent to ct.m before it
	// subscribes goes nowhere.
	ml := consumer(mqttAddr, int(home-1))
	ml.Hold = 10
	if err := ledger.MQTTConsumer(fmt.Sprintf("ct-sub-%d", round), strings.ReplaceAll(Topic, ".", "/"), ml); err != nil {
		c.T.Fatal(err)
	}
	for qi, q := range r.Queues {
		r.consumers.Add(2)
		go func() { defer r.consumers.Done(); ledger.StompConsumer("/queue/"+q, consumer(stompAddr, qi+1)) }()
		go func() { defer r.consumers.Done(); ledger.AMQPConsumer("queue://"+q, consumer(amqpAddr, qi+2)) }()
	}
	base := round * 100
	for qi, q := range r.Queues {
		id := base + qi*10
		r.producers.Add(3)
		go func() { defer r.producers.Done(); ledger.StompProducer(id, "/queue/"+q, producer(stompAddr, qi)) }()
		go func() {
			defer r.producers.Done()
			ledger.MQTTProducer(id+1, strings.ReplaceAll(q, ".", "/"), producer(mqttAddr, qi+1))
		}()
		go func() { defer r.producers.Done(); ledger.AMQPProducer(id+2, "queue://"+q, producer(amqpAddr, qi+2)) }()
	}
	id := base + 90
	r.producers.Add(3)
	go func() { defer r.producers.Done(); ledger.StompProducer(id, "/topic/"+Topic, producer(stompAddr, 1)) }()
	go func() {
		defer r.producers.Done()
		ledger.MQTTProducer(id+1, strings.ReplaceAll(Topic, ".", "/"), producer(mqttAddr, 2))
	}()
	go func() { defer r.producers.Done(); ledger.AMQPProducer(id+2, "topic://"+Topic, producer(amqpAddr, 0)) }()

	if !ledger.WaitUntil(60*time.Second, func() bool {
		for _, p := range Protocols {
			if n, _ := r.Ledger.Confirmations(p); n == 0 {
				return false
			}
		}
		return r.Ledger.HeldConfirmed()
	}) {
		r.abort()
		c.T.Fatalf("not every protocol had a message confirmed, or none was held, within 60s: %v\n%s", r.Ledger.Check(), c.LogExcerpts())
	}
	c.Event("load running: %v", r.Ledger.Check())
	return r
}

func (r *Run) abort() {
	select {
	case <-r.stopProducers:
	default:
		close(r.stopProducers)
	}
	r.producers.Wait()
	select {
	case <-r.stopConsumers:
	default:
		close(r.stopConsumers)
	}
	r.consumers.Wait()
}

// Mark starts counting confirmations by the nodes for which by is true.
func (r *Run) Mark(by func(node uint64) bool) {
	r.Ledger.Mark(func(addr string) bool { return by(r.C.NodeOf(addr)) })
}

// Progress waits until every protocol has n confirmations since Mark; it
// reports whether they came within d.
func (r *Run) Progress(n int, d time.Duration) bool {
	ok := ledger.WaitUntil(d, func() bool {
		for _, p := range Protocols {
			if _, after := r.Ledger.Confirmations(p); after < n {
				return false
			}
		}
		return true
	})
	r.C.Event("progress since the mark: %v (want %d each: %v)", r.Ledger.After(), n, ok)
	return ok
}

// Finish stops the producers, makes every consumer drop its connection
// once (so that what it holds comes again), waits until everything
// confirmed was delivered, stops the consumers, and checks the ledger
// and the watcher. It fails the test with the details on a violation.
func (r *Run) Finish() ledger.Counts {
	c := r.C
	c.T.Helper()
	close(r.stopProducers)
	r.producers.Wait()
	c.Event("producers stopped: %v", r.Ledger.Check())
	close(r.bounce)
	drained := ledger.WaitUntil(45*time.Second, func() bool { return r.Ledger.Drained(2 * time.Second) })
	close(r.stopConsumers)
	r.consumers.Wait()
	counts := r.Ledger.Check()
	violations := c.watch.Violations()
	c.Event("checked: %v; drained %v; %s", counts, drained, c.watch.Summary())
	if counts.Bad() > 0 || len(violations) > 0 {
		c.T.Errorf("%v\n%stwo leaders in one term: %d %v\n%s", counts, c.Label(counts.Details()), len(violations), violations, c.LogExcerpts())
	}
	if counts.Held == 0 {
		c.T.Errorf("no confirmed message was held unacknowledged: the round proved nothing about redelivery")
	}
	return counts
}
