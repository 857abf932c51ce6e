#!/usr/bin/env bash
# Durable end-to-end throughput and latency for each protocol, Junction
# and the peer brokers side by side, with `junction bench` (the same
# client for every broker). Peers are measured when they run: start
# them with ../shared/peers/start.sh (ActiveMQ Classic: STOMP 26613,
# MQTT 21883; RabbitMQ: AMQP 1.0 35672, STOMP 36613, MQTT 31883;
# Mosquitto: MQTT 41883). Prints a markdown table for docs/benchmarks.md.
#
# usage: scripts/bench-peers.sh [DURATION]   (default 10s)
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-10s}
go build -o bin/junction ./cmd/junction
dir=$(mktemp -d)
bin/junction --data-dir "$dir/data" --stomp 127.0.0.1:61681 --mqtt 127.0.0.1:61682 --amqp 127.0.0.1:61683 \
	--ws '' --all '' --console '' --log-level warn &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$dir"' EXIT
for i in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/61683) 2>/dev/null && break; sleep 0.1; done

up() { (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
rnd=$RANDOM
# broker protocol url [extra flags]
runs=(
	"Junction|stomp|stomp://127.0.0.1:61681|"
	"ActiveMQ 5.17|stomp|stomp://127.0.0.1:26613|"
	"RabbitMQ 3.10|stomp|stomp://guest:guest@127.0.0.1:36613|"
	"Junction|mqtt|mqtt://127.0.0.1:61682|"
	"Mosquitto 2.0|mqtt|mqtt://127.0.0.1:41883|"
	"ActiveMQ 5.17|mqtt|mqtt://127.0.0.1:21883|"
	"RabbitMQ 3.10|mqtt|mqtt://guest:guest@127.0.0.1:31883|"
	"Junction|amqp|amqp://127.0.0.1:61683|"
	"RabbitMQ 3.10|amqp|amqp://guest:guest@127.0.0.1:35672|--destination /queue/bench.peers.$rnd"
)
echo "| protocol | broker | sent/s | received/s | e2e p50 | p90 | p99 | p99.9 | max |"
echo "|---|---|---|---|---|---|---|---|---|"
for r in "${runs[@]}"; do
	IFS='|' read -r broker proto url extra <<<"$r"
	port=${url##*:}
	if ! up "$port"; then
		echo "| $proto | $broker | not running | | | | | | |"
		continue
	fi
	# shellcheck disable=SC2086
	if out=$(bin/junction bench --url "$url" --durable --duration "$dur" --json $extra 2>&1); then
		echo "$out" | jq -r --arg b "$broker" --arg p "$proto" \
			'"| \($p) | \($b) | \(.send_rate|floor) | \(.receive_rate|floor) | \(.e2e_latency.p50_us/1000*100|floor/100) ms | \(.e2e_latency.p90_us/1000*100|floor/100) ms | \(.e2e_latency.p99_us/1000*100|floor/100) ms | \(.e2e_latency.p99_9_us/1000*100|floor/100) ms | \(.e2e_latency.max_us/1000*100|floor/100) ms |"'
	else
		echo "| $proto | $broker | failed: $(echo "$out" | tail -1 | tr '|' '/') | | | | | | |"
	fi
done
