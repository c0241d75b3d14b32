#!/usr/bin/env bash
# What replication costs (docs/benchmarks.md, "Replicas: what a round
# costs"): the nodes' CPU per check and checks/s of a 3-node cluster with
# --replication-factor 0 (off) against 1 (the default, on), for each node
# binary given, the settings interleaved (off, on, off, on, …), a fresh
# cluster per run.
#
# Each run: 3 nodes at GOMAXPROCS=1 on loopback, the Go client's owner
# routing (checks straight to each key's owner: no hop, so what changes
# is the rounds; BENCH_COALESCE=true lets the client coalesce concurrent
# checks into batches, as the table in docs/benchmarks.md was measured,
# where a node's cost per check is small and a round's share of it
# large; false, the default, sends unary checks), BENCH_WORKERS callers over
# BENCH_KEYS uniform keys, the worst case for replication (nearly every
# check changes a key that the next round sends). A 2 s warm-up (the
# first rounds send every partition whole) is not measured. The nodes'
# CPU is read from /proc over the measured run.
#
# BENCH_BINS is a space-separated list of NAME=PATH node binaries (default:
# "head=bin/peerlimit-node", built from this tree), so that a change can be
# measured against a build of its parent in the same run. Results
# (runs.tsv, table.md, logs) go to BENCH_OUT, by default a new temporary
# directory. About 2 minutes per binary with the defaults.
#
# Environment: BENCH_BINS, BENCH_COALESCE (false), BENCH_REPEATS (3), BENCH_DURATION (8s),
# BENCH_WORKERS (64), BENCH_KEYS (10000), BENCH_OUT, GO (go).
set -euo pipefail
cd "$(dirname "$0")/.."

repeats=${BENCH_REPEATS:-3}
duration=${BENCH_DURATION:-8s}
workers=${BENCH_WORKERS:-64}
nkeys=${BENCH_KEYS:-10000}
coalesce=${BENCH_COALESCE:-false}
go=${GO:-go}
clk_tck=$(getconf CLK_TCK)
limit=1000000000000 # never reached: every check takes the path of an allowed one

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_setup replica
node_pids=()

command -v python3 >/dev/null || die "python3 is needed for the summary"
command -v curl >/dev/null || die "curl is needed to see when the cluster is ready"
for p in 8080 8081 8082 9090 9091 9092 7946 7947 7948; do
	! port_in_use "$p" || die "port $p is in use (a cluster from make run, or another benchmark?); stop it first"
done

log "building bin/peerlimit-node and bin/loadgen"
mkdir -p bin
CGO_ENABLED=0 "$go" build -trimpath -o bin/peerlimit-node ./cmd/node
"$go" build -o bin/loadgen ./cmd/loadgen
read -r -a bins <<<"${BENCH_BINS:-head=bin/peerlimit-node}"
for b in "${bins[@]}"; do
	[ -x "${b#*=}" ] || die "BENCH_BINS: ${b#*=} is not an executable"
done
write_env "$out/env.txt" "bins=${bins[*]} coalesce=$coalesce repeats=$repeats duration=$duration workers=$workers keys=$nkeys"
cat "$out/env.txt"

# start_cluster BIN RF: three nodes of BIN with --replication-factor RF.
start_cluster() {
	local bin=$1 rf=$2 i args
	node_pids=()
	for i in 0 1 2; do
		args=(--id "node$((i + 1))" --http-addr "127.0.0.1:$((8080 + i))" --grpc-addr "127.0.0.1:$((9090 + i))"
			--gossip-addr "127.0.0.1:$((7946 + i))" --gossip-profile local --replication-factor "$rf")
		[ "$i" -gt 0 ] && args+=(--join 127.0.0.1:7946)
		start_detached "$(basename "$bin")" "$work/logs/$tag-node$((i + 1)).log" env GOMAXPROCS=1 "$bin" "${args[@]}"
		node_pids+=("$started_pid")
	done
	wait_converged 90
}

# loadgen_run DURATION JSON: owner-routed unary checks.
loadgen_run() {
	timeout --foreground -k 5 60 bin/loadgen -target peerlimit -api grpc -endpoints 127.0.0.1:9090,127.0.0.1:9091,127.0.0.1:9092 \
		-route owner -coalesce="$coalesce" -workers "$workers" -duration "$1" -keys "$nkeys" -dist uniform -algorithm counter \
		-limit "$limit" -window 60s -progress=false -key-prefix "$tag:" -json "$2" >"$work/logs/$tag-loadgen.log" 2>&1 ||
		{ cat "$work/logs/$tag-loadgen.log" >&2; die "loadgen failed: $tag"; }
}

printf 'bin\trf\trepeat\tnodes_cpu_s\n' >"$out/runs.tsv"
for rep in $(seq "$repeats"); do
	for b in "${bins[@]}"; do
		for rf in 0 1; do
			name=${b%%=*} tag="${b%%=*}-rf$rf-r$rep"
			start_cluster "${b#*=}" "$rf"
			loadgen_run 2s "$work/warm.json"
			c0=$(cpu_ticks "${node_pids[@]}")
			loadgen_run "$duration" "$out/$tag.json"
			c1=$(cpu_ticks "${node_pids[@]}")
			printf '%s\t%s\t%s\t%s\n' "$name" "$rf" "$rep" "$(awk -v t=$((c1 - c0)) -v h="$clk_tck" 'BEGIN { printf "%.3f", t / h }')" >>"$out/runs.tsv"
			stop_pids "${node_pids[@]}"
			log "$tag: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.0f checks/s" % r["checks_per_s"])' "$out/$tag.json")"
		done
	done
done
echo "finished: $(date -u +%FT%TZ); uptime: $(uptime)" >>"$out/env.txt"

python3 - "$out" <<'PY' | tee "$out/table.md"
import json, os, statistics, sys
out = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in list(open(os.path.join(out, "runs.tsv")))[1:]]
runs = {}
for name, rf, rep, cpu in rows:
    r = json.load(open(os.path.join(out, f"{name}-rf{rf}-r{rep}.json")))
    runs.setdefault((name, rf), []).append((r["checks_per_s"], float(cpu) * 1e6 / r["checks"]))
print(open(os.path.join(out, "env.txt")).read().strip().replace("\n", "; "))
print()
print("| binary | replication | checks/s (median; each run) | nodes' CPU µs/check (median; each run) | on ÷ off: CPU, checks/s (of the medians) | on ÷ off, CPU, median of each repeat's pair |")
print("|---|---|---:|---:|---|---|")
for name in dict.fromkeys(n for n, _ in runs):
    med = {rf: (statistics.median(t for t, _ in runs[(name, rf)]), statistics.median(c for _, c in runs[(name, rf)])) for rf in ("0", "1")}
    for rf in ("0", "1"):
        each = runs[(name, rf)]
        ratio = "" if rf == "0" else "**%+.0f %%**, %+.0f %%" % ((med["1"][1] / med["0"][1] - 1) * 100, (med["1"][0] / med["0"][0] - 1) * 100)
        # The machine drifts between repeats; each repeat's on and off ran
        # back to back, so their ratio drifts less.
        paired = "" if rf == "0" else "%+.0f %%" % ((statistics.median(on[1] / off[1] for on, off in zip(runs[(name, "1")], runs[(name, "0")])) - 1) * 100)
        print("| %s | %s | %s (%s) | %.2f (%s) | %s | %s |" % (name, "on" if rf == "1" else "off", f"{med[rf][0]:,.0f}",
              ", ".join(f"{t/1000:.0f}k" for t, _ in each), med[rf][1], ", ".join(f"{c:.2f}" for _, c in each), ratio, paired))
PY
log "results: $out (table.md, runs.tsv)"
