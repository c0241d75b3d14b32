#!/usr/bin/env bash
# The hop between two processes (docs/benchmarks.md, "The hop between two
# processes"): what one forwarded message and one forwarded check cost, in
# a frame where the scheduler has as little say as this machine allows,
# beside the floor under them measured the same way.
#
# Two nodes at GOMAXPROCS=1, node1 pinned to CPU 0 and node2 to CPU 1
# (BENCH_PIN=0: unpinned), and a light load generator (BENCH_WORKERS
# callers, unpinned). Interleaved, BENCH_REPEATS times:
#
#   - random: unary checks, each to a random node, so about half are
#     forwarded to the other;
#   - owner: the same checks straight to each key's owner (no hop);
#   - tcp, grpc-stream, grpc-unary: cmd/rttbench's round trips between two
#     processes pinned as the nodes are, BENCH_WORKERS/2 at once (the
#     forwards in flight at the random runs' concurrency), messages of
#     BENCH_SIZE bytes: the floor.
#
# The hop per forwarded check = (random − owner) nodes' CPU per check ÷
# the share forwarded; per forwarded message = that × the checks per
# forward message (the nodes' metrics). A floor's round trip = both
# processes' CPU ÷ round trips. Each figure is the median over repeats.
# Then one more random and owner run each with CPU profiles of both nodes,
# whose samples are grouped (system calls, the Go scheduler and runtime,
# gRPC and HTTP/2, encoding, peerlimit's own code) and put in µs per check.
#
# Results (runs.tsv, table.md, profiles, logs) go to BENCH_OUT, by default
# a new temporary directory. About 3 minutes with the defaults.
#
# Environment: BENCH_REPEATS (5), BENCH_DURATION (5s), BENCH_WORKERS (8),
# BENCH_KEYS (10000), BENCH_SIZE (128), BENCH_PIN (1), BENCH_OUT, GO (go).
set -euo pipefail
cd "$(dirname "$0")/.."

repeats=${BENCH_REPEATS:-5}
duration=${BENCH_DURATION:-5s}
workers=${BENCH_WORKERS:-8}
nkeys=${BENCH_KEYS:-10000}
size=${BENCH_SIZE:-128}
pin=${BENCH_PIN:-1}
go=${GO:-go}
clk_tck=$(getconf CLK_TCK)
limit=1000000000000 # never reached: every check takes the path of an allowed one
floor_workers=$(((workers + 1) / 2))

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_setup hop
node_pids=()

command -v python3 >/dev/null || die "python3 is needed for the summary"
command -v curl >/dev/null || die "curl is needed to see when the cluster is ready and to read its metrics"
for p in 8080 8081 9090 9091 7946 7947 7100; do
	! port_in_use "$p" || die "port $p is in use (a cluster from make run, or another benchmark?); stop it first"
done

# on CPU n, or anywhere with BENCH_PIN=0.
on_cpu() {
	if [ "$pin" = 1 ]; then echo "taskset -c $1"; fi
}

log "building bin/peerlimit-node, bin/loadgen and bin/rttbench"
mkdir -p bin
CGO_ENABLED=0 "$go" build -trimpath -o bin/peerlimit-node ./cmd/node
"$go" build -o bin/loadgen ./cmd/loadgen
"$go" build -o bin/rttbench ./cmd/rttbench
write_env "$out/env.txt" "repeats=$repeats duration=$duration workers=$workers floor_workers=$floor_workers keys=$nkeys size=$size pin=$pin"
cat "$out/env.txt"

log "starting node1 (CPU 0) and node2 (CPU 1)"
for i in 0 1; do
	args=(--id "node$((i + 1))" --http-addr "127.0.0.1:$((8080 + i))" --grpc-addr "127.0.0.1:$((9090 + i))"
		--gossip-addr "127.0.0.1:$((7946 + i))" --gossip-profile local --pprof)
	[ "$i" -gt 0 ] && args+=(--join 127.0.0.1:7946)
	# shellcheck disable=SC2046 # on_cpu's words are the command's
	start_detached peerlimit-node "$work/logs/node$((i + 1)).log" env GOMAXPROCS=1 $(on_cpu "$i") bin/peerlimit-node "${args[@]}"
	node_pids+=("$started_pid")
done
wait_converged 90
endpoints=127.0.0.1:9090,127.0.0.1:9091

dur_s=$(duration_seconds "$duration")

# run_nodes ROUTE TAG: one loadgen run against the nodes; appends a row.
run_nodes() {
	local route=$1 tag=$2 d=${3:-$duration} before after cpu0 cpu1 fc fn fok seen
	local args=(-target peerlimit -api grpc -endpoints "$endpoints" -route "$route" -workers "$workers" -duration "$d"
		-keys "$nkeys" -dist uniform -algorithm counter -limit "$limit" -window 60s -progress=false -key-prefix "h$tag:")
	[ "$route" = owner ] && args+=(-coalesce=false)
	before=$(scrape_forwarding 8080 8081)
	cpu0=$(cpu_ticks "${node_pids[@]}")
	timeout --foreground -k 5 $((dur_s + 60)) bin/loadgen "${args[@]}" -json "$out/$tag.json" >"$out/$tag.log" 2>&1 ||
		{ cat "$out/$tag.log" >&2; die "loadgen failed: $tag"; }
	cpu1=$(cpu_ticks "${node_pids[@]}")
	after=$(scrape_forwarding 8080 8081)
	read -r fc fn fok seen <<<"$(delta4 "$before" "$after")"
	python3 - "$out/$tag.json" "$tag" "$route" "$((cpu1 - cpu0))" "$clk_tck" "$fc" "$fn" "$fok" "$seen" >>"$out/runs.tsv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
tag, route, ticks, hz = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
fc, fn, fok, seen = (int(x) if x.isdigit() else 0 for x in sys.argv[6:10])
print("\t".join(str(x) for x in (tag, route, r["checks"], r["checks_per_s"], r["latency_us"]["p99"], ticks / hz, fc, fn, fok, seen, r["errors"])))
PY
}

# run_floor TRANSPORT TAG: one rttbench run between two fresh processes
# pinned as the nodes are; appends a row with both processes' CPU.
run_floor() {
	local transport=$1 tag=$2 spid c0 c1
	# shellcheck disable=SC2046
	start_detached rttbench "$work/logs/$tag-serve.log" env GOMAXPROCS=1 $(on_cpu 1) bin/rttbench -mode serve -transport "$transport" -addr 127.0.0.1:7100
	spid=$started_pid
	c0=$(cpu_ticks "$spid")
	# shellcheck disable=SC2046
	env GOMAXPROCS=1 $(on_cpu 0) bin/rttbench -mode call -transport "$transport" -addr 127.0.0.1:7100 \
		-workers "$floor_workers" -size "$size" -duration "$duration" -json "$out/$tag.json" >"$out/$tag.log" 2>&1 ||
		{ cat "$out/$tag.log" >&2; die "rttbench failed: $tag"; }
	c1=$(cpu_ticks "$spid")
	stop_pids "$spid"
	python3 - "$out/$tag.json" "$tag" "$transport" "$((c1 - c0))" "$clk_tck" >>"$out/runs.tsv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ticks, hz = int(sys.argv[4]), int(sys.argv[5])
# Both sides: the caller's own rusage and the server's ticks.
print("\t".join(str(x) for x in (sys.argv[2], sys.argv[3], r["round_trips"], r["round_trips_per_s"], "-", r["cpu_seconds"] + ticks / hz, "-", "-", "-", "-", 0)))
PY
}

printf 'tag\tcase\tops\tops_per_s\tp99_us\tcpu_s\tfwd_checks\tfwd_calls\tfwd_ok\tnode_checks\terrors\n' >"$out/runs.tsv"
for rep in $(seq "$repeats"); do
	for c in random owner tcp grpc-stream grpc-unary; do
		case $c in
		random | owner) run_nodes "$c" "$c.r$rep" ;;
		*) run_floor "$c" "$c.r$rep" ;;
		esac
		log "repeat $rep: $(tail -1 "$out/runs.tsv")"
	done
done

# One run of each route, 2 s longer than the others, with both nodes
# profiled for all but its first and last second.
prof_s=$dur_s
for route in random owner; do
	curls=()
	(sleep 1; for i in 0 1; do
		curl -sf --max-time $((prof_s + 30)) -o "$out/$route-node$((i + 1)).pprof" \
			"http://127.0.0.1:$((8080 + i))/debug/pprof/profile?seconds=$prof_s" &
	done; wait) &
	curls+=($!)
	run_nodes "$route" "$route.profiled" "$((dur_s + 2))s"
	wait "${curls[@]}" || die "a CPU profile of the $route run failed"
	for i in 1 2; do
		"$go" tool pprof -traces "$out/$route-node$i.pprof" >"$out/$route-node$i.traces" 2>/dev/null ||
			die "go tool pprof failed on $out/$route-node$i.pprof"
	done
done
echo "finished: $(date -u +%FT%TZ); uptime: $(uptime)" >>"$out/env.txt"

python3 scripts/hop-summary.py "$out" | tee "$out/table.md"
log "results: $out (table.md, runs.tsv, profiles *.pprof and *.traces)"
