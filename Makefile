# Junction's developer commands. `make` alone lists them.
GO        ?= go
PKGS      := ./...
FUZZTIME  ?= 10s
BENCHTIME ?= 2s
ROUNDS    ?= 10

.PHONY: help run build test race lint bench bench-stomp crash-test ha-test cluster-test cluster-bench cluster-bench-memory paging-test e2e interop fuzz clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

run: ## start the broker with embedded defaults
	$(GO) run ./cmd/junction

build: ## build bin/junction (its load generator is `junction bench`)
	$(GO) build -o bin/junction ./cmd/junction

test: ## run every test (short fuzz seeds included)
	$(GO) test -count=1 -timeout 30m $(PKGS)

race: ## run every test under the race detector
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

crash-test: ## kill -9 the broker under durable load ROUNDS times, restart, count lost/unexpected/corrupt
	JUNCTION_CRASH_ROUNDS=$(ROUNDS) $(GO) test -count=1 -run '^TestCrashKill9(MQTT|AMQP|Paging|Duplicates|RepeatingMessage|Large|PagingLarge)?$$' -v -timeout 60m ./cmd/junction/

ha-test: ## two brokers on one data directory: kill -9 the live one under STOMP, MQTT and AMQP load ROUNDS times, count lost/unexpected/corrupt/unflagged; SIGSTOP; lost lock; MQTT DUP and a paging queue at a takeover
	JUNCTION_HA_ROUNDS=$(ROUNDS) $(GO) test -count=1 -run '^TestHA' -v -timeout 60m ./cmd/junction/

# Three junction processes per scenario, behind fault proxies (and in
# network namespaces when root), under durable STOMP, MQTT and AMQP load:
# kill -9 a leader, partition it, partition a follower, cut it one way,
# SIGSTOP it, wipe a node and rejoin it; each checked by the ledger (0
# lost, invented, corrupt, unflagged) and for two leaders in one term.
# JUNCTION_CLUSTER_LOGS=dir keeps the nodes' logs of a failed round.
# CLUSTER_SKIP names scenarios to leave out (a go test -skip pattern).
CLUSTER_SKIP ?=
cluster-test: ## 3-node cluster processes under faults (proxies, netns when root) and STOMP/MQTT/AMQP load ROUNDS times; the ledger's checks and one leader per term
	JUNCTION_CLUSTER_ROUNDS=$(ROUNDS) $(GO) test -count=1 -run '^TestCluster' -skip '$(CLUSTER_SKIP)' -v -timeout 60m ./internal/clustertest/

# Measurements of TestClusterFigures and TestClusterMemoryFigures
# (internal/clustertest/figures_test.go), set by environment variables:
# JUNCTION_CLUSTER_FIGURES_DURATION (10s) each bench run;
# JUNCTION_CLUSTER_FIGURES_BASE=path measures the cluster of the junction
# binary at path too, in the same alternation (before and after);
# JUNCTION_CLUSTER_FIGURES_DIR=dir puts the brokers' data under dir
# (/dev/shm: tmpfs, no fsync cost); cluster-bench-memory's backlog part:
# JUNCTION_CLUSTER_FIGURES_BACKLOG (30s), JUNCTION_CLUSTER_FIGURES_MAX_MEMORY
# (96MiB).
cluster-bench: ## single broker and 3-node cluster side by side: durable msgs/s, CPU per message (per node), confirm and commit latency, RSS per node (JUNCTION_CLUSTER_FIGURES runs)
	JUNCTION_CLUSTER_FIGURES=$${JUNCTION_CLUSTER_FIGURES:-3} $(GO) test -count=1 -run '^TestClusterFigures$$' -v -timeout 30m ./internal/clustertest/

cluster-bench-memory: ## a cluster node's memory: RSS per node after each of JUNCTION_CLUSTER_FIGURES_MEMORY (3) bench runs in a row; a backlog over a small --max-memory, no consumers: messages held per group, producers made to wait, memory used and RSS per node
	JUNCTION_CLUSTER_FIGURES_MEMORY=$${JUNCTION_CLUSTER_FIGURES_MEMORY:-3} $(GO) test -count=1 -run '^TestClusterMemoryFigures$$' -v -timeout 30m ./internal/clustertest/

PAGING_BYTES ?= 1GiB
paging-test: ## send PAGING_BYTES (default 1GiB) of unconsumed durable messages to a broker with a 32 MiB budget; check its peak memory; drain in order
	JUNCTION_PAGING_BYTES=$(PAGING_BYTES) $(GO) test -count=1 -run '^TestPagingBoundsMemory$$' -v -timeout 30m ./cmd/junction/

lint: ## gofmt, go vet, go mod tidy and the import-graph rules
	$(GO) test -count=1 ./internal/lint/

bench: ## core and codec micro-benchmarks, then STOMP end to end
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) ./core/... ./stomp/... 
	$(MAKE) bench-stomp

# STOMP end to end: a fresh broker on a loopback port, driven by
# `junction bench stomp` (the go-stomp client); with ActiveMQ running on
# AMQ_ADDR (../shared/peers/start.sh activemq) the same scenarios run
# against it in the same loop, alternating, so both see the same machine.
BENCH_ADDR ?= 127.0.0.1:61699
AMQ_ADDR   ?= 127.0.0.1:26613
SCENARIOS  ?= queue fanout
BENCH_ARGS ?= -size 1024 -duration 10s -warmup 2s
bench-stomp: build ## STOMP end to end over loopback, side by side with ActiveMQ when it runs
	@dir=$$(mktemp -d); \
	./bin/junction --data-dir $$dir/data --stomp $(BENCH_ADDR) --mqtt '' --amqp '' --ws '' --all '' --console '' --log-level warn & pid=$$!; \
	trap 'kill $$pid 2>/dev/null; rm -rf '"$$dir" EXIT; \
	for i in $$(seq 50); do (exec 3<>/dev/tcp/$${BENCH_ADDR%:*}/$${BENCH_ADDR#*:}) 2>/dev/null && break; sleep 0.1; done; \
	amq=$$(cat $${PEERS_DIR:-/tmp/broker-peers-$$(id -u)}/activemq/activemq.pid 2>/dev/null); \
	kill -0 "$$amq" 2>/dev/null || amq=; \
	for run in 1 2 3; do for s in $(SCENARIOS); do \
	  echo "junction $$s"; ./bin/junction bench stomp -addr $(BENCH_ADDR) -scenario $$s $(BENCH_ARGS) -pid $$pid || exit 1; \
	  if [ -n "$$amq" ]; then echo "activemq $$s"; ./bin/junction bench stomp -addr $(AMQ_ADDR) -scenario $$s $(BENCH_ARGS) -pid $$amq || exit 1; fi; \
	done; done

# Browser end to end: a page with stompjs, MQTT.js and rhea (bundled
# from testdata/e2e/node_modules, no CDN) in headless Chromium talks to a
# fresh broker over WebSockets, on the WebSocket port and on the one
# port; each client must receive what the two others sent. Then the web
# console (testdata/e2e/console.mjs): queue depth and purge, the send
# form, replaced and dropped counts, the Addresses view's duplicates, the
# Events view, the Settings view's Reload (of the --config file written
# here, which the test rewrites) and a scheduled message's cancel. Needs
# node, npm and Debian's chromium (.ci/run installs them).
E2E_WS      ?= 127.0.0.1:61695
E2E_ALL     ?= 127.0.0.1:61696
E2E_CONSOLE ?= 127.0.0.1:61697
E2E_STOMP   ?= 127.0.0.1:61698
E2E_OUT     ?= testdata/e2e
e2e: build ## browser tests: clients over WebSockets, and the web console, in headless Chromium
	@cd testdata/e2e && { [ -d node_modules ] || npm ci --no-audit --no-fund; }
	@dir=$$(mktemp -d); \
	printf 'config-watch-interval: 0s # the console test reloads with its button\n' >$$dir/junction.yaml; \
	./bin/junction --config $$dir/junction.yaml --data-dir $$dir/data --stomp $(E2E_STOMP) --mqtt '' --amqp '' --ws $(E2E_WS) --all $(E2E_ALL) --console $(E2E_CONSOLE) --log-level warn & pid=$$!; \
	trap 'kill $$pid 2>/dev/null; rm -rf '"$$dir" EXIT; \
	for i in $$(seq 50); do (exec 3<>/dev/tcp/$${E2E_CONSOLE%:*}/$${E2E_CONSOLE#*:}) 2>/dev/null && break; sleep 0.1; done; \
	node testdata/e2e/run.mjs ws://$(E2E_WS) $(E2E_OUT)/e2e-ws-port.png && \
	node testdata/e2e/run.mjs ws://$(E2E_ALL) $(E2E_OUT)/e2e-one-port.png && \
	for i in 1 2 3; do ./bin/junction send --stomp $(E2E_STOMP) --to /queue/e2e.console --body "message $$i" --persistent || exit 1; done && \
	node testdata/e2e/console.mjs http://$(E2E_CONSOLE)/ e2e.console 3 $(E2E_OUT) $$dir/junction.yaml

# Cross-language interop: Qpid Proton, stomp.py, paho-mqtt (Debian's
# python3 packages), mosquitto_pub/sub, and rhea, MQTT.js, stompjs (Node,
# testdata/interop/node_modules) against a fresh broker on free loopback
# ports: every sender to every receiver, request/reply, competing
# consumers, durable subscribers. INTEROP_ARGS filters by scenario name.
INTEROP_ARGS ?=
interop: build ## cross-language interop: Python, mosquitto and Node clients of STOMP, MQTT and AMQP
	@cd testdata/interop && { [ -d node_modules ] || npm ci --no-audit --no-fund; }
	testdata/interop/run $(INTEROP_ARGS)

fuzz: ## run each fuzz target for FUZZTIME
	$(GO) test -run='^$$' -fuzz='^FuzzReader$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./stomp/internal/wire/
	$(GO) test -run='^$$' -fuzz='^FuzzDifferential$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./stomp/internal/wire/
	$(GO) test -run='^$$' -fuzz='^FuzzRecordReader$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./persistence/journal/
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeMessage$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./core/
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeDivert$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./core/
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./core/selector/
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./amqp/internal/encoding/
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeFrame$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./amqp/internal/frames/
	$(GO) test -run='^$$' -fuzz='^FuzzParseMessage$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./amqp/internal/frames/
	$(GO) test -run='^$$' -fuzz='^FuzzConn$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./amqp/
	$(GO) test -run='^$$' -fuzz='^FuzzConn$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./stomp/
	$(GO) test -run='^$$' -fuzz='^FuzzConn$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./mqtt/
	$(GO) test -run='^$$' -fuzz='^FuzzTopicRoundTrip$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./mqtt/

clean: ## remove build output
	rm -rf bin
