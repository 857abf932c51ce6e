// Command junction-bench is Junction's load generator. It measures STOMP
// brokers over loopback with the go-stomp client
// (github.com/go-stomp/stomp/v3), so that Junction and its peers (ActiveMQ
// Classic, RabbitMQ) are measured by the same client, side by side.
//
// Usage:
//
//	junction-bench stomp -addr 127.0.0.1:61613 -scenario S [flags]
//
// Run "junction-bench stomp -h" for every flag. Each run uses a fresh
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
// # Limits
//
// The tool only targets loopback addresses (127.0.0.0/8, ::1, or names that
// resolve only to them) and refuses others: this workplace forbids load on
// any other address. Every loop is bounded by -warmup + -duration + -drain
// plus short fixed grace periods, so it never runs forever. All connections
// disable STOMP heart-beats (heart-beat:0,0): go-stomp's default is one
// minute each way, and a loaded broker that is late with a heart-beat would
// otherwise make the client drop the connection.
package main
