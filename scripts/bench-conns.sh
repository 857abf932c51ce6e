#!/bin/sh
# What a STOMP or AMQP connection costs Junction: idle memory (fresh and
# after churn) and connects/s, with junction bench conns, a fresh broker
# per run (persistence on). Brokers named on the command line are
# compared side by side, scenario by scenario, round by round.
#
#   scripts/bench-conns.sh ROUNDS CONNS BINARY...
#
# e.g. scripts/bench-conns.sh 3 10000 /tmp/junction-main bin/junction
# Every client comes from 127.0.0.1, so the per-IP limits are lifted.
# PROTOS="stomp amqp mqtt" adds MQTT (junction bench mqtt, paho client);
# the default is "stomp amqp". SCENARIOS picks among "idle churn
# connect" (the default, all three). JB is the junction binary whose
# bench client runs (default bin/junction).
set -eu
rounds=$1 conns=$2
shift 2
jb=${JB:-bin/junction}
stomp=127.0.0.1:${STOMP_PORT:-27613} amqp=127.0.0.1:${AMQP_PORT:-27672} mqtt=127.0.0.1:${MQTT_PORT:-27883}
ulimit -n $((conns * 2 + 1000)) 2>/dev/null || true # Go raises its own soft limit to the hard one
run() { # binary proto scenario args...
	bin=$1 proto=$2
	shift 2
	dir=$(mktemp -d) m=''
	[ "$proto" = mqtt ] && m=$mqtt
	"$bin" --data-dir "$dir" --stomp "$stomp" --amqp "$amqp" --mqtt "$m" --ws '' --all '' --console '' \
		--log-level warn --max-connections-per-ip 0 --connection-rate-per-ip 0 >"$dir/log" 2>&1 &
	pid=$!
	sleep 1.5
	printf '%s\t' "$bin"
	case $proto in
	stomp) "$jb" bench conns -proto stomp -addr "$stomp" -pid "$pid" "$@" || true ;;
	amqp) "$jb" bench conns -proto amqp -addr "$amqp" -pid "$pid" "$@" || true ;;
	mqtt) "$jb" bench mqtt -addr "$mqtt" -pid "$pid" "$@" || true ;;
	esac
	kill "$pid" 2>/dev/null || echo "broker exited early: $(tail -3 "$dir/log")"
	wait "$pid" 2>/dev/null || true
	rm -rf "$dir"
}
for r in $(seq "$rounds"); do
	for proto in ${PROTOS:-stomp amqp}; do
		for sc in ${SCENARIOS:-idle churn connect}; do
			case $sc in
			idle) for b in "$@"; do run "$b" "$proto" -scenario idle -conns "$conns"; done ;;
			churn) for b in "$@"; do run "$b" "$proto" -scenario idle -conns "$conns" -churn 2; done ;;
			connect) for b in "$@"; do run "$b" "$proto" -scenario connect -duration 10s -warmup 2s; done ;;
			esac
		done
	done
done
