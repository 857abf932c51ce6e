// Package scenario holds the fixed scenarios of `junction bench stomp`,
// `junction bench mqtt` and `junction bench amqp`: the runs that produce
// the figures of docs/benchmarks.md. It measures STOMP brokers with the
// go-stomp client (github.com/go-stomp/stomp/v3) and a raw STOMP
// producer, MQTT brokers with the paho v3 client
// (github.com/eclipse/paho.mqtt.golang) and AMQP 1.0 brokers with go-amqp,
// so that Junction and its peers (ActiveMQ Classic, RabbitMQ, Mosquitto)
// are measured by the same client, side by side. It shares the latency
// histogram, the time stamps and the go-stomp options with the free-form
// runs of package bench (`junction bench --url ...`).
//
// Usage:
//
//	junction bench stomp -addr 127.0.0.1:61613 -scenario S [flags]
//	junction bench mqtt -addr 127.0.0.1:1883 -scenario S [flags]
//	junction bench amqp -addr 127.0.0.1:5672 -scenario S [flags]
//
// Run "junction bench stomp -h" for every flag (one dash or two). Each run uses a fresh
// destination (/queue/bench.<scenario>.<random> or /topic/...), runs for
// -warmup, measures for -duration, stops the producers, drains what is left
// for at most -drain, and prints one line per run: plain text by default,
// one JSON object per line with -json. With -runs N it runs N times and adds
// a line with the median of every figure.
//
// # Scenarios
//
// queue: P producers (-producers, default 1) send non-persistent messages to
// one queue with go-stomp's Send without a receipt; C consumers (-consumers,
// default 1) subscribe with -ack auto (default) or client-individual (each
// message acked), optionally with a prefetch (-prefetch, sent as both
// activemq.prefetchSize and prefetch-count). It reports sent msgs/s
// (producer side) and delivered msgs/s (consumer side); a broker that lets
// producers outrun consumers shows sent > delivered and a growing e2e latency.
//
// fanout: one producer publishes non-persistent messages to a topic with S
// subscribers (-subscribers, default 10). Before the clock starts the
// producer sends probe messages until every subscriber has received one, so
// no subscriber misses the start. It reports published msgs/s and
// deliveries/s (the sum over all subscribers, ideally S times the former).
//
// durable-wait: P producers (default 2) send persistent:true messages with
// go-stomp's Send and a receipt, so each waits for its RECEIPT before the
// next send: one message in flight per connection, the latency-bound case.
// C consumers (default 1) use client-individual ack and ack every message.
// It reports confirmed msgs/s (receipts) and consumed msgs/s (acked).
//
// Consumers in client-individual mode ack from a second goroutine fed by an
// unbounded queue, never from the goroutine reading the subscription:
// go-stomp v3.1.3 deadlocks otherwise as soon as the broker delivers faster
// than the consumer acks (see the consumer type in bench.go).
//
// durable-pipelined: as durable-wait, but with up to N receipts outstanding
// in total (-inflight, default 200) spread over P producer connections
// (default 2). go-stomp's Send holds its connection lock until the RECEIPT
// arrives (STYLE.md §6.x), so these producers write SEND frames with receipt
// headers on their own TCP connections and read RECEIPTs on another
// goroutine, with a minimal STOMP 1.2 frame writer and reader (rawstomp.go).
// It reports confirmed msgs/s and consumed msgs/s. This is the figure that
// shows whether a broker batches its fsyncs (group commit).
//
// # Figures
//
// Every message body is -size bytes (at least 8); its first 8 bytes carry the
// send time (nanoseconds since the tool started, big-endian), so consumers
// report end-to-end latency percentiles (e2e_p50/e2e_p99). The durable
// scenarios also report send-to-RECEIPT latency (confirm_p50/confirm_p99).
// Only messages received inside the measured window count.
//
// With -pid N (the broker's process id), the tool reads utime+stime from
// /proc/N/stat at both ends of the measured window and reports the broker's
// CPU time per message (broker_cpu_us_per_msg) and the cores it used. The
// message counted is the scenario's main one: delivered for queue, published
// for fanout (per delivery is reported too), confirmed for the durable ones.
//
// client_cores is this tool's own CPU use and machine_cores the busy CPU of
// the whole machine over the window (from /proc/self/stat and /proc/stat).
// When client_cores is high, or machine_cores nears the core count, the
// figure is bounded by the machine rather than the broker; when
// machine_cores is well above broker plus client, something else competed.
//
// undrained is how many messages had not reached the consumers when the
// bounded drain ended (for fanout, missing deliveries); -1 means producers
// had not finished by then. A non-zero value means a backlog, or lost
// messages.
//
// # MQTT scenarios
//
// The mqtt subcommand speaks MQTT 3.1.1 with paho (no automatic reconnect,
// keep-alive 60 s); a lost connection fails the run. Each run uses a fresh
// topic bench/<scenario>/<random>, and prints one line (or JSON object)
// per run, plus a median line with -runs N, as for STOMP. Payloads carry
// the send time in their first 8 bytes, as STOMP bodies do.
//
// qos1: one publisher sends QoS 1 with up to -inflight (default 200)
// publishes unacknowledged (paho's asynchronous Publish tokens behind a
// semaphore; a message is confirmed when its token completes without
// error, i.e. on PUBACK) to one subscriber with a persistent session
// (clean session false, client id -client-id, QoS 1 subscription,
// SetOrderMatters(false), a handler that only does atomics). The session is
// cleared by a clean connect before and after the run. It reports
// published, confirmed and delivered msgs/s, Publish-to-PUBACK latency
// (confirm_p50/confirm_p99) and, with -pid, broker CPU per confirmed
// message.
//
// fanout: one publisher sends QoS 0 as fast as paho allows until the end
// of the window to -subscribers (default 10) QoS 0 subscribers of the
// topic. Probes first make sure every subscriber is receiving. It reports
// published msgs/s and deliveries/s (summed over subscribers), and
// undrained: deliveries still missing when the bounded drain ended.
//
// connect: -clients (default 8) workers each connect a fresh paho client
// (clean session, unique id), then disconnect it (DISCONNECT), over and
// over; it reports completed cycles per second, failed connects (errors)
// and dial-to-CONNACK latency (connect_p50/connect_p99).
//
// idle: opens -conns (default 10000) connections, -concurrency (default
// 64) at a time, each with a hand-written MQTT 3.1.1 CONNECT (clean
// session, keep-alive 600 s) answered by CONNACK, and holds them with no
// paho client, so this tool's memory stays small. It reads the broker's
// VmRSS from /proc/PID/status (-pid is required) before opening and -settle
// (default 2 s) after the last CONNACK, and reports
// rss_kib_per_conn = (after - before) / conns. closed_by_broker counts
// connections found closed after settling. With -churn N it first opens
// all the connections and closes them again, N times (waiting -settle
// after each close), with "before" read ahead of that: a broker that
// frees per-connection memory on disconnect and reuses it for the next
// connection may make it resident only then (a Go allocation that the
// first connections never touched in full is cleared in full when it is
// reused), so the first round alone can understate what the same number
// of connections cost in a broker that has been running. The tool raises
// its own RLIMIT_NOFILE soft limit to the hard limit at start, and refuses
// -conns above it.
//
// # AMQP scenarios
//
// The amqp subcommand speaks AMQP 1.0 with the go-amqp client
// (github.com/Azure/go-amqp), one connection and session per sender or
// receiver, SASL ANONYMOUS unless -user/-pass ask for PLAIN, no idle
// timeout asked of the broker. Each run uses a fresh queue or topic,
// bench.<scenario>.<random>, named in the format of -addr-style: junction
// (queue://NAME, topic://NAME) or rabbitmq (/queue/NAME, /topic/NAME for
// RabbitMQ 3.x's AMQP 1.0 plugin, which declares the queue, or binds a
// queue of its own to amq.topic). Receivers attach first, senders second;
// every receiver has -credit (default 500) link credit, which go-amqp
// replenishes as it settles. Bodies are one data section of -size bytes
// carrying the send time, as for STOMP; the output line is the STOMP one,
// prefixed amqp- and ending in addr_style (JSON: the same fields plus
// protocol and addr_style; ack is accept or settled, prefetch the credit).
//
// durable-pipelined: one sender sends durable messages (header
// durable=true), unsettled, with SendWithReceipt while fewer than
// -inflight (default 200) await their disposition; a collector waits for
// the receipts in order. One receiver accepts every message. It reports
// confirmed (accepted dispositions), sent and consumed msgs/s, and
// send-to-disposition latency (confirm_p50/confirm_p99).
//
// durable-wait: -producers (default 2) senders each send a durable message
// and wait for its disposition before the next; one receiver accepts.
// Same figures. Any outcome but accepted (rejected, released, modified)
// fails the run.
//
// settled: one sender sends non-durable messages pre-settled as fast as
// go-amqp writes them; one receiver asks for pre-settled deliveries. Sent
// counts what the client wrote; delivered, what arrived, is the figure.
//
// fanout: one sender sends pre-settled to a topic with -subscribers
// (default 10) receivers, each asking for pre-settled deliveries; probes
// first make sure every receiver is receiving. It reports published and
// deliveries/s (summed over receivers).
//
// Links ask for configuration durability of the queue's terminus in the
// durable scenarios, none otherwise: RabbitMQ declares a /queue/ durable
// only when asked, and sender and receiver must agree; Junction ignores
// it on queues. RabbitMQ 3.10 leaves behind the queues these runs create,
// and for fanout its amq.gen-* queue per receiver (it answers a closing
// detach with a non-closing one, and keeps the queue after the
// connection closes): delete them with rabbitmqctl, or wipe the peer's
// data. It also lets a pre-settled sender far outrun delivery, so
// settled and fanout there show sent well above delivered and a large
// undrained count.
//
// # Limits
//
// The tool only targets loopback addresses (127.0.0.0/8, ::1, or names that
// resolve only to them) and refuses others: this workplace forbids load on
// any other address. Every loop is bounded by -warmup + -duration + -drain
// plus short fixed grace periods, so it never runs forever. A signal
// (SIGINT, SIGTERM) during a measured window ends it there: that run's
// line is printed with the figures of the window so far, marked
// interrupted (JSON: "interrupted": true), and no median follows.
//
// All connections disable STOMP heart-beats (heart-beat:0,0): go-stomp's default is one
// minute each way, and a loaded broker that is late with a heart-beat would
// otherwise make the client drop the connection.
package scenario
