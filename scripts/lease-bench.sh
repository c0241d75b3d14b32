#!/usr/bin/env bash
# Budget leases on (--lease-duration 250ms, the default) against off (0), in
# one run: 3 nodes on loopback (bin/peerlimit-node: make build), single gRPC
# checks from cmd/loadgen to random nodes (64 workers), for one key and for
# zipf s=2 over 10,000 keys, zipf s=1.1 over 1,000,000 keys
# (WORKLOADS="single zipf zipf11 uniform"). Prints, per
# run: checks, forwarded checks per check (from the nodes' metrics),
# checks admitted from leases, throughput and p99. docs/benchmarks.md,
# "Budget leases". Nodes are kill -9'd between runs.
# Usage: scripts/lease-bench.sh [REPEATS (3)] [DURATION (10s)]
set -uo pipefail
cd "$(dirname "$0")/.."
loadgen=${LOADGEN:-$(mktemp -d)/loadgen}
[ -x "$loadgen" ] || go build -o "$loadgen" ./cmd/loadgen
[ -x bin/peerlimit-node ] || make -s build
reps=${1:-3}; dur=${2:-10s}; workloads=${WORKLOADS:-single zipf}
metric_sum() { # name filter: sum over the 3 nodes
	local total=0 v
	for p in 8080 8081 8082; do
		v=$(curl -s localhost:$p/metrics | grep -E "^$1" | grep -E "$2" | awk '{s+=$2} END {printf "%.0f", s}')
		total=$((total + ${v:-0}))
	done
	echo $total
}
start() { # lease-duration
	for i in 1 2 3; do
		args=(--id "node$i" --http-addr "127.0.0.1:808$((i-1))" --grpc-addr "127.0.0.1:909$((i-1))"
			--gossip-addr "127.0.0.1:794$((i+5))" --gossip-profile local --lease-duration "$1" --log-level warn)
		[ "$i" -gt 1 ] && args+=(--join 127.0.0.1:7946)
		bin/peerlimit-node "${args[@]}" >/dev/null 2>&1 &
		pids+=($!)
	done
	for _ in $(seq 1 100); do
		[ "$(curl -s localhost:8082/v1/members | grep -o '"state":"alive"' | wc -l)" = 3 ] && [ "$(curl -s localhost:8080/v1/members | grep -o '"state":"alive"' | wc -l)" = 3 ] && break
		sleep 0.1
	done
	sleep 1
}
pids=()
# kill -9: a graceful leave would hand off and overlap the next run.
stop() { [ ${#pids[@]} -gt 0 ] && kill -9 "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; pids=(); }
trap stop EXIT
out=$(mktemp -d)
for r in $(seq 1 "$reps"); do
	for wl in $workloads; do
		for mode in 250ms 0; do
			start "$mode"
			c0=$(metric_sum peerlimit_checks_total 'outcome="(allowed|denied)"'); f0=$(metric_sum peerlimit_forwards_total 'result="ok"')
			case $wl in
			single) keys=(-keys 1) ;;
			zipf) keys=(-keys 10000 -dist zipf -zipf-s 2.0) ;;
			zipf11) keys=(-keys 1000000 -dist zipf -zipf-s 1.1) ;; # close to real traffic: warm keys, a long tail
			*) keys=(-keys 10000) ;;
			esac
			"$loadgen" -route random -api grpc "${keys[@]}" -duration "$dur" -progress=false -json "$out/r.json" >/dev/null 2>&1
			c1=$(metric_sum peerlimit_checks_total 'outcome="(allowed|denied)"'); f1=$(metric_sum peerlimit_forwards_total 'result="ok"')
			l1=$(metric_sum peerlimit_checks_total 'route="leased"')
			tput=$(grep -o '"checks_per_s": [0-9.]*' "$out/r.json" | cut -d: -f2 | tr -d ' ')
			p99=$(grep -o '"p99": [0-9.]*' "$out/r.json" | head -1 | cut -d: -f2 | tr -d ' ')
			echo "rep=$r workload=$wl lease=$mode checks=$((c1-c0)) forwards=$((f1-f0)) fwd_per_check=$(awk -v f=$((f1-f0)) -v c=$((c1-c0)) 'BEGIN{printf "%.3f", f/c}') leased=$l1 checks_per_s=$tput p99_us=$p99"
			stop
		done
	done
done
