#!/usr/bin/env bash
# Each algorithm's cost through a node: one node on loopback
# (bin/peerlimit-node: make build), cmd/loadgen sending unary gRPC checks
# of one algorithm at a time (64 workers, 10,000 uniform keys, a limit no
# check reaches), the algorithms interleaved, REPEATS rounds. Prints per
# run the checks/s and the node's CPU µs per check (its /proc utime+stime
# over the run, divided by the checks the load generator completed).
# docs/benchmarks.md, "Algorithms through a node".
# Usage: scripts/algo-bench.sh [REPEATS (3)] [DURATION (10s)] [ALGORITHMS ("counter gcra log")]
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
out=$work
source scripts/bench-lib.sh
reps=${1:-3}; dur=${2:-10s}; algos=${3:-counter gcra log}
mkdir -p "$work/logs"
trap 'finish $? "the node log"' EXIT
[ -x bin/peerlimit-node ] || make -s build
go build -o "$work/loadgen" ./cmd/loadgen
port_in_use 18080 && die "port 18080 is in use"
start_detached peerlimit-node "$work/logs/node.log" bin/peerlimit-node --id algo-bench \
	--http-addr 127.0.0.1:18080 --grpc-addr 127.0.0.1:19090 --gossip-addr 127.0.0.1:17946 --log-level warn
node=$started_pid
for _ in $(seq 1 100); do curl -sf localhost:18080/healthz >/dev/null && break; sleep 0.1; done
log "node pid $node; $reps rounds of: $algos; $dur each"
for r in $(seq 1 "$reps"); do
	for a in $algos; do
		limit=1000000000
		[ "$a" = log ] && limit=10000
		[ "$a" = gcra ] && limit=60000000 # its fastest rate per 60 s: one hit per µs
		t0=$(cpu_ticks "$node")
		"$work/loadgen" -target peerlimit -endpoints 127.0.0.1:19090 -api grpc -route node -workers 64 -keys 10000 -dist uniform \
			-algorithm "$a" -limit "$limit" -window 60s -duration "$dur" -progress=false -json "$work/r.json" >/dev/null
		t1=$(cpu_ticks "$node")
		checks=$(grep -o '"checks": [0-9]*' "$work/r.json" | head -1 | tr -dc 0-9)
		tput=$(grep -o '"checks_per_s": [0-9.]*' "$work/r.json" | head -1 | cut -d: -f2 | tr -d ' ')
		awk -v r="$r" -v a="$a" -v c="$checks" -v t="$tput" -v ticks=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" \
			'BEGIN { printf "round=%d algorithm=%s checks=%d checks_per_s=%.0f node_cpu_us_per_check=%.2f\n", r, a, c, t, ticks / hz * 1e6 / c }'
	done
done
