#!/usr/bin/env bash
# Memory and throughput while paging, with `junction bench` over AMQP
# (durable 1 KiB messages, 4 producers with a window of 64 each):
#
#   1. paging vs not: COUNT messages sent with nobody consuming, then
#      drained, against a broker whose budget holds them all (4 GiB: no
#      paging) and one with a 32 MiB budget (pages nearly everything),
#      alternating REPS times; prints each run and the medians.
#   2. a backlog of BACKLOG messages (default 10 M, 10 GiB of bodies)
#      built and drained with the default budget of 256 MiB set here,
#      sampling the broker's resident memory (VmRSS) every second; prints
#      the peak.
#
# usage: scripts/bench-paging.sh [COUNT] [REPS] [BACKLOG]   (defaults 500000 3 10000000; COUNT 0 skips part 1)
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-500000}
reps=${2:-3}
backlog=${3:-10000000}
go build -o bin/junction ./cmd/junction
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$dir"' EXIT

start() { # budget
	rm -rf "$dir/data"
	bin/junction --data-dir "$dir/data" --max-memory "$1" --amqp 127.0.0.1:61693 --stomp '' --mqtt '' \
		--ws '' --all '' --console '' --log-level warn &
	pid=$!
	for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/61693) 2>/dev/null && return; sleep 0.1; done
	echo "broker did not start" >&2
	exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
bench() { bin/junction bench --url amqp://127.0.0.1:61693 --destination queue://paging --durable --json --window 64 "$@"; }
rss() { awk '/VmRSS/ {print int($2/1024)}' "/proc/$pid/status"; }
hwm() { awk '/VmHWM/ {print int($2/1024)}' "/proc/$pid/status"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

if [ "$count" -gt 0 ]; then
echo "## paging vs not: $count durable 1 KiB messages sent unconsumed, then drained"
echo
echo "| run | budget | send/s | drain/s | peak RSS |"
echo "|---|---|---|---|---|"
: >"$dir/rates"
for rep in $(seq "$reps"); do
	for budget in 4GiB 32MiB; do
		start "$budget"
		s=$(bench --producers 4 --consumers 0 --count "$count" | jq -r '.send_rate|floor')
		d=$(bench --producers 0 --consumers 1 --count "$count" --drain 30s | jq -r '.receive_rate|floor')
		peak=$(hwm)
		stop
		echo "| $rep | $budget | $s | $d | $peak MiB |"
		echo "$budget $s $d" >>"$dir/rates"
	done
done
echo
for budget in 4GiB 32MiB; do
	s=$(awk -v b=$budget '$1==b {print $2}' "$dir/rates" | median)
	d=$(awk -v b=$budget '$1==b {print $3}' "$dir/rates" | median)
	echo "median, budget $budget: send $s/s, drain $d/s"
done
fi

echo
echo "## backlog of $backlog durable 1 KiB messages, budget 256 MiB"
start 256MiB
peak=0
( while kill -0 "$pid" 2>/dev/null; do r=$(rss 2>/dev/null || echo 0); echo "$r"; sleep 1; done ) >"$dir/rss" &
sampler=$!
t0=$(date +%s)
fill=$(bench --producers 4 --consumers 0 --count "$backlog" | jq -r '"sent \(.sent) at \(.send_rate|floor)/s"')
t1=$(date +%s)
mid=$(hwm)
du=$(du -sm "$dir/data" | cut -f1)
drain=$(bench --producers 0 --consumers 1 --count "$backlog" --drain 60s | jq -r '"received \(.received) at \(.receive_rate|floor)/s"')
t2=$(date +%s)
peak=$(hwm)
stop
kill $sampler 2>/dev/null || true
echo "build: $fill in $((t1 - t0)) s; peak RSS while building $mid MiB; data directory $du MiB"
echo "drain: $drain in $((t2 - t1)) s; peak RSS overall $peak MiB"
echo "RSS samples (MiB, one a second): min $(sort -n "$dir/rss" | head -1), median $(median <"$dir/rss"), max $(sort -n "$dir/rss" | tail -1)"
