#!/usr/bin/env bash
# What a forwarding hop costs as the cluster grows (docs/benchmarks.md,
# "Scaling out"): for N = 1, 3, 5, 7 nodes on this machine, the same unary
# Check calls of cmd/loadgen, once to a random node (every check but 1/N
# forwarded to its owner) and once straight to the key's owner (the Go
# client's owner routing, coalescing off: the same unary calls, no hop):
#
#   - checks/s of each, and random ÷ owner;
#   - the CPU time of every node process over each run, per check;
#   - the forward batch size (checks per forward message) and the share
#     of checks forwarded, from the nodes' metrics;
#   - the hop per forwarded check: (random − owner) node CPU per check ÷
#     the forwarded share (N−1)/N.
#
# Every run is made twice, over two key distributions (BENCH_DISTS):
# uniform over BENCH_KEYS, the worst case for budget leases, where no key
# is warm anywhere; and Zipf (s = BENCH_ZIPF_S, 1.1) over BENCH_ZIPF_KEYS
# (1,000,000), close to real traffic. Both are always reported.
#
# The nodes run with GOMAXPROCS=1 (BENCH_NODE_GOMAXPROCS), as one node per
# machine would be; with 7 node processes on 2 cores they would otherwise
# spin threads for both cores each. Runs are interleaved (random, owner,
# random, …) and each figure is the median of BENCH_REPEATS runs. Results
# (runs.tsv, one JSON per run, table.md, scale.svg, node logs) go to
# BENCH_OUT, by default a new temporary directory. About 12 minutes with the
# defaults.
#
# Environment: BENCH_SCALE_NODES ("1 3 5 7"), BENCH_REPEATS (3),
# BENCH_DURATION (6s), BENCH_WORKERS (128), BENCH_KEYS (10000),
# BENCH_DISTS ("uniform zipf"), BENCH_ZIPF_S (1.1), BENCH_ZIPF_KEYS (1000000),
# BENCH_NODE_GOMAXPROCS (1), BENCH_NODE_ARGS (extra flags for every node),
# BENCH_OUT, GO (go).
set -euo pipefail
cd "$(dirname "$0")/.."

sizes=${BENCH_SCALE_NODES:-1 3 5 7}
repeats=${BENCH_REPEATS:-3}
duration=${BENCH_DURATION:-6s}
workers=${BENCH_WORKERS:-128}
nkeys=${BENCH_KEYS:-10000}
dists=${BENCH_DISTS:-uniform zipf}
zipf_s=${BENCH_ZIPF_S:-1.1}
zipf_keys=${BENCH_ZIPF_KEYS:-1000000}
node_gomaxprocs=${BENCH_NODE_GOMAXPROCS:-1}
read -r -a node_extra_args <<<"${BENCH_NODE_ARGS:-}"
go=${GO:-go}
clk_tck=$(getconf CLK_TCK)
limit=1000000000000 # never reached: every check takes the path of an allowed one

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_setup scale
node_pids=()

command -v python3 >/dev/null || die "python3 is needed for the summary"
command -v curl >/dev/null || die "curl is needed to see when the cluster is ready and to read its metrics"
max=$(for n in $sizes; do echo "$n"; done | sort -n | tail -1)
for i in $(seq 0 $((max - 1))); do
	for p in $((8080 + i)) $((9090 + i)) $((7946 + i)); do
		! port_in_use "$p" || die "port $p is in use (a cluster from make run, or another benchmark?); stop it first"
	done
done

log "building bin/peerlimit-node and bin/loadgen"
mkdir -p bin
CGO_ENABLED=0 "$go" build -trimpath -o bin/peerlimit-node ./cmd/node
"$go" build -o bin/loadgen ./cmd/loadgen
write_env "$out/env.txt" "sizes=$sizes repeats=$repeats duration=$duration workers=$workers keys=$nkeys dists=$dists zipf_s=$zipf_s zipf_keys=$zipf_keys node_gomaxprocs=$node_gomaxprocs node_args=${BENCH_NODE_ARGS:-}"
cat "$out/env.txt"

# start_cluster N starts nodes 1..N on loopback: HTTP 8080+, gRPC 9090+,
# gossip 7946+, and waits until every one sees N alive members that own
# partitions.
start_cluster() {
	local n=$1 i args node_env=(env "GOMAXPROCS=$node_gomaxprocs")
	node_pids=()
	for i in $(seq 0 $((n - 1))); do
		args=(--id "node$((i + 1))" --http-addr "127.0.0.1:$((8080 + i))" --grpc-addr "127.0.0.1:$((9090 + i))"
			--gossip-addr "127.0.0.1:$((7946 + i))" --gossip-profile local)
		[ "$i" -gt 0 ] && args+=(--join 127.0.0.1:7946)
		args+=("${node_extra_args[@]}")
		start_detached peerlimit-node "$work/logs/n$n-node$((i + 1)).log" "${node_env[@]}" bin/peerlimit-node "${args[@]}"
		node_pids+=("$started_pid")
	done
	wait_converged 90
}

# stop_cluster stops the nodes of start_cluster, gracefully.
stop_cluster() {
	stop_pids "${node_pids[@]}"
	local keep=() pid p
	for pid in "${started[@]}"; do
		p=1
		for x in "${node_pids[@]}"; do [ "$x" = "$pid" ] && p=0; done
		[ "$p" = 1 ] && keep+=("$pid")
	done
	started=("${keep[@]}")
	node_pids=()
}

dur_s=$(duration_seconds "$duration")
printf 'nodes\trun\troute\tdist\tnodes_cpu_s\tfwd_checks\tfwd_calls\tfwd_ok\tnode_checks\tidle_ms_per_s\n' >"$out/runs.tsv"
for n in $sizes; do
	log "$n node(s): starting"
	start_cluster "$n"
	http_ports=() endpoints=""
	for i in $(seq 0 $((n - 1))); do
		http_ports+=($((8080 + i)))
		endpoints+="${endpoints:+,}127.0.0.1:$((9090 + i))"
	done
	# What the idle nodes burn (gossip, timers) is inside every run's CPU;
	# it is measured once and reported beside it.
	idle_before=$(cpu_ticks "${node_pids[@]}")
	sleep 3
	idle_after=$(cpu_ticks "${node_pids[@]}")
	idle_ms=$(awk -v t=$((idle_after - idle_before)) -v h="$clk_tck" 'BEGIN { printf "%.0f", t / h / 3 * 1000 }')
	routes=(random owner)
	[ "$n" = 1 ] && routes=(random) # one node owns every key: no hop either way
	for rep in $(seq "$repeats"); do
		for dist in $dists; do
		for route in "${routes[@]}"; do
			keys=(-keys "$nkeys" -dist uniform)
			[ "$dist" = zipf ] && keys=(-keys "$zipf_keys" -dist zipf -zipf-s "$zipf_s")
			args=(-target peerlimit -api grpc -endpoints "$endpoints" -route "$route" -workers "$workers" -duration "$duration"
				"${keys[@]}" -algorithm counter -limit "$limit" -window 60s -progress=false
				-key-prefix "$(printf 'n%02dr%02d%s%s:' "$n" "$rep" "${route:0:1}" "${dist:0:1}")")
			[ "$route" = owner ] && args+=(-coalesce=false)
			json="$out/n$n-$route-$dist.r$rep.json"
			before=$(scrape_forwarding "${http_ports[@]}")
			cpu_before=$(cpu_ticks "${node_pids[@]}")
			timeout --foreground -k 5 $((dur_s + 60)) bin/loadgen "${args[@]}" -json "$json" >"$out/n$n-$route-$dist.r$rep.log" 2>&1 || {
				cat "$out/n$n-$route-$dist.r$rep.log" >&2
				die "loadgen failed: $n nodes, $route, $dist, repeat $rep"
			}
			cpu_after=$(cpu_ticks "${node_pids[@]}")
			after=$(scrape_forwarding "${http_ports[@]}")
			nodes_cpu=$(awk -v t=$((cpu_after - cpu_before)) -v h="$clk_tck" 'BEGIN { printf "%.3f", t / h }')
			read -r fc fn fok seen <<<"$(delta4 "$before" "$after")"
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$rep" "$route" "$dist" "$nodes_cpu" "$fc" "$fn" "$fok" "$seen" "$idle_ms" >>"$out/runs.tsv"
			python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
cpu, fc, fn = float(sys.argv[2]), sys.argv[3], sys.argv[4]
per = lambda s: s * 1e6 / r["checks"] if r["checks"] else float("nan")
line = "%8.0f checks/s  p50 %6.0f us  p99 %6.0f us  errors %d  CPU us/check: nodes %.1f loadgen %.1f" % (
    r["checks_per_s"], r["latency_us"]["p50"], r["latency_us"]["p99"], r["errors"], per(cpu), per(r["cpu_seconds"]))
if fn.isdigit() and int(fn):
    line += "  forward batches of %.2f" % (int(fc) / int(fn))
print(line)' "$json" "$nodes_cpu" "$fc" "$fn" | while read -r line; do log "$n nodes, $route, $dist (repeat $rep): $line"; done
		done
		done
	done
	log "$n node(s): stopping"
	stop_cluster
done
echo "finished: $(date -u +%FT%TZ); uptime: $(uptime)" >>"$out/env.txt"

# --- Summary: table.md and scale.svg ------------------------------------------

python3 - "$out" <<'PY'
import json, os, statistics, sys

out = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in list(open(os.path.join(out, "runs.tsv")))[1:]]
settings = open(os.path.join(out, "env.txt")).read()
runs = {}  # (n, route, dist) -> [dict]
for f in rows:
    n, rep, route, dist = int(f[0]), f[1], f[2], f[3]
    r = json.load(open(os.path.join(out, f"n{n}-{route}-{dist}.r{rep}.json")))
    d = dict(tput=r["checks_per_s"], p99=r["latency_us"]["p99"], checks=r["checks"], errors=r["errors"],
             cpu=float(f[4]) * 1e6 / r["checks"] if r["checks"] else None, idle=float(f[9]))
    fc, fn, fok, seen = f[5:9]
    d["batch"] = int(fc) / int(fn) if fn.isdigit() and fc.isdigit() and int(fn) else None
    d["fwd"] = int(fok) / int(seen) if fok.isdigit() and seen.isdigit() and int(seen) else None
    runs.setdefault((n, route, dist), []).append(d)

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def fmt(x, d=1):
    return "–" if x is None else f"{x:,.{d}f}"

sizes = sorted({n for n, _, _ in runs})
dists = sorted({d for _, _, d in runs}, key=lambda d: (d != "uniform", d))
lines, chart = [], []
for dist in dists:
  setting = lambda k: next((w.split("=", 1)[1] for w in settings.split() if w.startswith(k + "=")), "?")
  label = {"uniform": f"uniform over {int(setting('keys')):,} keys"}.get(dist, f"Zipf, s = {setting('zipf_s')}, over {int(setting('zipf_keys')):,} keys")
  lines += ["", f"**{label}**", "",
            "| nodes | random node, checks/s | owner, checks/s | random ÷ owner | nodes' CPU µs/check, random | owner | forwarded | "
            "forward batch (checks) | hop µs per forwarded check | errors |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for n in sizes:
    rnd, own = runs.get((n, "random", dist), []), runs.get((n, "owner", dist), [])
    rt, ot = med([d["tput"] for d in rnd]), med([d["tput"] for d in own])
    rc, oc = med([d["cpu"] for d in rnd]), med([d["cpu"] for d in own])
    share = med([d["fwd"] for d in rnd]) or (n - 1) / n  # what was forwarded: leases admit some checks without a hop
    hop = (rc - oc) / share if n > 1 and rc is not None and oc is not None and share else None
    ratio = rt / ot if rt and ot else None
    errors = sum(d["errors"] for d in rnd + own)
    lines.append(f"| {n} | {fmt(rt, 0)} | {fmt(ot, 0) if n > 1 else '–'} | {fmt(ratio, 2)} | {fmt(rc)} | {fmt(oc) if n > 1 else '–'} | "
                 f"{fmt(100 * med([d['fwd'] for d in rnd]) if med([d['fwd'] for d in rnd]) is not None else None, 0)}% | "
                 f"{fmt(med([d['batch'] for d in rnd]), 2)} | {fmt(hop)} | {errors} |")
    if dist == "uniform":
        chart.append((n, rc, oc if n > 1 else rc, hop))
open(os.path.join(out, "table.md"), "w").write("\n".join(lines).lstrip("\n") + "\n")
print("\n".join(lines))

# The chart: nodes' CPU per check against N, random and owner, and the hop.
W, H, L, R, T, B = 640, 360, 60, 150, 30, 40
ymax = max([v for _, a, b, h in chart for v in (a, b, h) if v is not None] + [1]) * 1.1
x = lambda n: L + (n - min(sizes)) / max(max(sizes) - min(sizes), 1) * (W - L - R)
y = lambda v: H - B - v / ymax * (H - T - B)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<text x="{L}" y="18" font-weight="bold">Nodes\' CPU per check against cluster size (µs)</text>',
       f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="#333"/><line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="#333"/>']
for i in range(5):
    v = ymax * i / 4
    svg.append(f'<text x="{L-6}" y="{y(v)+4:.0f}" text-anchor="end">{v:.0f}</text>'
               f'<line x1="{L}" y1="{y(v):.0f}" x2="{W-R}" y2="{y(v):.0f}" stroke="#ddd"/>')
for n in sizes:
    svg.append(f'<text x="{x(n):.0f}" y="{H-B+16}" text-anchor="middle">{n}</text>')
svg.append(f'<text x="{(L+W-R)/2:.0f}" y="{H-6}" text-anchor="middle">nodes</text>')
for idx, (name, color) in enumerate([("random node", "#d62728"), ("owner (no hop)", "#1f77b4"), ("hop per forwarded check", "#2ca02c")]):
    pts = [(x(n), y(v[idx])) for n, *v in chart if v[idx] is not None]
    if pts:
        svg.append('<polyline fill="none" stroke-width="2" stroke="%s" points="%s"/>' % (color, " ".join(f"{a:.0f},{b:.0f}" for a, b in pts)))
        svg.extend(f'<circle cx="{a:.0f}" cy="{b:.0f}" r="3" fill="{color}"/>' for a, b in pts)
    svg.append(f'<rect x="{W-R+10}" y="{T+idx*20}" width="12" height="3" fill="{color}"/><text x="{W-R+28}" y="{T+idx*20+5}">{name}</text>')
svg.append("</svg>")
open(os.path.join(out, "scale.svg"), "w").write("\n".join(svg) + "\n")
PY
log "results: $out (table.md, scale.svg, runs.tsv, one JSON per run)"
