#!/usr/bin/env bash
# Compares a 3-node peerlimit cluster with Redis running the seeds' Lua
# scripts, on this machine, over loopback (docs/benchmarks.md):
#
#   - throughput and per-call latency of cmd/loadgen, for
#     {counter, log} x {single checks, batches of 100} x
#     {redis, peerlimit route=owner, peerlimit route=random},
#     each case BENCH_REPEATS times, interleaved;
#   - memory per key: cmd/redismem against limiter's BenchmarkMemoryPerKey.
#
# It installs redis-server with apt-get when missing, builds bin/peerlimit-node,
# bin/loadgen and bin/redismem, starts the cluster as scripts/run-local.sh
# does and a scratch redis-server on 127.0.0.1:BENCH_REDIS_PORT, and stops
# every process it started when it exits, also on failure or Ctrl-C.
# Results (one JSON per run, memory JSON, load samples, table.md and
# benchmarks.svg) go to BENCH_OUT, by default a new temporary directory.
#
# Environment: BENCH_REPEATS (3), BENCH_DURATION (10s), BENCH_WORKERS (64),
# BENCH_KEYS (10000), BENCH_REDIS_PORT (6399), BENCH_OUT, GO (go), and
# BENCH_NODE_GOMAXPROCS (unset: Go's default, every core), the nodes'
# GOMAXPROCS: with 3 nodes on 2 cores, 1 simulates a node per machine
# better (docs/benchmarks.md, "Three nodes on two cores").
set -euo pipefail
cd "$(dirname "$0")/.."

repeats=${BENCH_REPEATS:-3}
duration=${BENCH_DURATION:-10s}
workers=${BENCH_WORKERS:-64}
nkeys=${BENCH_KEYS:-10000}
redis_port=${BENCH_REDIS_PORT:-6399}
node_gomaxprocs=${BENCH_NODE_GOMAXPROCS:-}
go=${GO:-go}
endpoints=127.0.0.1:9090,127.0.0.1:9091,127.0.0.1:9092
# Limits that are never reached, so that every check takes the path of an
# allowed request. The log's is the node's --max-log-limit default.
counter_limit=1000000000000
log_limit=10000

work=$(mktemp -d -t bench-compare.XXXXXX)
out=${BENCH_OUT:-$work/bench-results}
mkdir -p "$out" "$work/logs" "$work/redis"
out=$(cd "$out" && pwd)

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "error: $*" >&2; exit 1; }

node_pids=()
redis_pid=
started=() # every long-running process started, for the cleanup
sampler_pid=

# Stops everything this script started: each node gets one TERM (a second
# signal would cut its handoff short), then KILL after 15 s; redis-server
# likewise. Runs on every exit.
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	if [ -n "$sampler_pid" ]; then
		kill -TERM "$sampler_pid" 2>/dev/null || true
		wait "$sampler_pid" 2>/dev/null || true
	fi
	local pids=()
	[ "${#started[@]}" -gt 0 ] && pids+=("${started[@]}")
	if [ "${#pids[@]}" -gt 0 ]; then
		log "stopping the ${#pids[@]} processes this script started (nodes, redis-server)..."
		kill -TERM "${pids[@]}" 2>/dev/null || true
		local deadline=$((SECONDS + 15)) pid
		for pid in "${pids[@]}"; do
			while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
			if kill -0 "$pid" 2>/dev/null; then
				log "pid $pid still running after 15 s: KILL"
				kill -KILL "$pid" 2>/dev/null || true
			fi
			wait "$pid" 2>/dev/null || true
		done
	fi
	rm -rf "$work/redis"
	if [ "$rc" -ne 0 ]; then
		log "failed (exit $rc); node and redis logs are in $work/logs" >&2
	elif [[ $out != "$work"/* ]]; then
		rm -rf "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Starts "$@" in its own session (so that Ctrl-C reaches only this script,
# as in scripts/run-local.sh) and sets started_pid. A script without job
# control runs setsid outside any group lead, so it does not fork and $! is
# the program itself; checked, since the cleanup signals that pid.
start_detached() {
	local name=$1 logfile=$2
	shift 2
	setsid "$@" >"$logfile" 2>&1 &
	started_pid=$!
	started+=("$started_pid")
	sleep 0.2
	local comm
	comm=$(ps -o comm= -p "$started_pid" 2>/dev/null || true)
	[ "$comm" = "$name" ] || [ "${comm:0:15}" = "${name:0:15}" ] ||
		die "expected $name as pid $started_pid, found '${comm}'; see $logfile"
}

# --- Prerequisites ---------------------------------------------------------

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
	log "installing redis-server with apt-get"
	sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	export DEBIAN_FRONTEND=noninteractive
	if ! timeout 300 "${sudo[@]}" apt-get install -y -qq redis-server >/dev/null; then
		timeout 300 "${sudo[@]}" apt-get update -qq
		timeout 300 "${sudo[@]}" apt-get install -y -qq redis-server >/dev/null
	fi
fi
command -v python3 >/dev/null || die "python3 is needed for the summary"
command -v curl >/dev/null || die "curl is needed to see when the cluster is ready"
for p in 8080 8081 8082 9090 9091 9092 7946 7947 7948 "$redis_port"; do
	! port_in_use "$p" || die "port $p is in use (a cluster from make run, or another benchmark?); stop it first"
done

log "building bin/peerlimit-node, bin/loadgen, bin/redismem"
mkdir -p bin
CGO_ENABLED=0 "$go" build -trimpath -o bin/peerlimit-node ./cmd/node
"$go" build -o bin/loadgen ./cmd/loadgen
"$go" build -o bin/redismem ./cmd/redismem

{
	echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "go: $("$go" version)"
	echo "redis: $(redis-server --version)"
	echo "started: $(date -u +%FT%TZ); uptime: $(uptime)"
	echo "settings: repeats=$repeats duration=$duration workers=$workers keys=$nkeys node_gomaxprocs=${node_gomaxprocs:-default}"
} >"$out/env.txt"
cat "$out/env.txt"

# A sample of the machine every 5 s, to tell afterwards whether something
# else competed for the CPU: top's second iteration (the first averages
# since boot), the summary and the busiest processes, and the pids that are
# this script's own (its descendants: nodes, redis-server, loadgen), since
# another engineer's nodes or load generator have the same names.
descendants() {
	ps -eo pid=,ppid= | awk -v root="$1" '{ p[$1] = $2 }
		END { for (x in p) { y = x; while ((y in p) && y != root && y > 1) y = p[y]; if (y == root) printf "%s ", x } }'
}
(
	trap 'kill $(jobs -p) 2>/dev/null; exit 0' TERM
	while :; do
		{
			echo "@@ $(date +%s) mine: $(descendants $$)"
			top -b -n 2 -d 1 -w 160 | awk '/^top -/ { n++ } n == 2' | sed -n '1,3p;7,16p'
			echo "@@mine: $(descendants $$)"
		} >>"$out/load.log" 2>/dev/null &
		wait $! || true
		sleep 4 &
		wait $! || true
	done
) &
sampler_pid=$!

# --- Redis -----------------------------------------------------------------

start_detached redis-server "$work/logs/redis.log" redis-server --port "$redis_port" --bind 127.0.0.1 \
	--save '' --appendonly no --daemonize no --dir "$work/redis"
redis_pid=$started_pid
rcli() { timeout 10 redis-cli -p "$redis_port" "$@"; }
for _ in $(seq 50); do
	[ "$(rcli ping 2>/dev/null)" = PONG ] && break
	sleep 0.2
done
[ "$(rcli ping 2>/dev/null)" = PONG ] || die "redis-server did not answer PING; see $work/logs/redis.log"
log "redis-server ready on 127.0.0.1:$redis_port (pid $redis_pid)"

# --- Memory per key (before the cluster starts: a quiet machine) ----------

log "memory per key: Redis (cmd/redismem, ~15 s)"
timeout 300 bin/redismem -addr "127.0.0.1:$redis_port" -json "$out/redismem.json" | tee "$out/redismem.txt"
log "memory per key: peerlimit (go test ./limiter -bench MemoryPerKey)"
timeout 300 "$go" test ./limiter -run '^$' -bench MemoryPerKey -count 1 | tee "$out/peerlimit-mem.txt"

# --- The cluster, as scripts/run-local.sh starts it ------------------------

for i in 1 2 3; do
	args=(--id "node$i" --http-addr "127.0.0.1:808$((i - 1))" --grpc-addr "127.0.0.1:909$((i - 1))"
		--gossip-addr "127.0.0.1:794$((i + 5))" --gossip-profile local)
	[ "$i" -gt 1 ] && args+=(--join 127.0.0.1:7946)
	node_env=()
	[ -n "$node_gomaxprocs" ] && node_env=(env "GOMAXPROCS=$node_gomaxprocs")
	start_detached peerlimit-node "$work/logs/node$i.log" "${node_env[@]}" bin/peerlimit-node "${args[@]}"
	node_pids+=("$started_pid")
done

# Ready when every node sees 3 alive members that all own partitions.
alive() {
	curl -sf --max-time 2 "localhost:$1/v1/members" | python3 -c '
import json, sys
m = json.load(sys.stdin)["members"]
print(sum(1 for x in m if x["state"] == "alive" and x["partitions"] > 0))' 2>/dev/null || echo 0
}
deadline=$((SECONDS + 60))
until [ "$(alive 8080)" = 3 ] && [ "$(alive 8081)" = 3 ] && [ "$(alive 8082)" = 3 ]; do
	for pid in "${node_pids[@]}"; do
		kill -0 "$pid" 2>/dev/null || die "node pid $pid exited; see $work/logs"
	done
	[ "$SECONDS" -lt "$deadline" ] || die "the cluster did not converge to 3 alive members in 60 s; see $work/logs"
	sleep 0.5
done
log "cluster ready: 3 alive members on every node (pids ${node_pids[*]})"

# --- Throughput --------------------------------------------------------------

cases=()
for algo in counter log; do
	for wl in single batch100; do
		for tgt in redis owner random; do
			cases+=("$algo-$wl-$tgt")
		done
	done
done
dur_s=$(python3 -c 'import sys,re; m=re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", sys.argv[1]); print(int(float(m[1]) * {"ms": 0.001, "s": 1, "m": 60}[m[2]] + 0.999))' "$duration")
total=$((${#cases[@]} * repeats))
log "throughput: ${#cases[@]} cases x $repeats repeats x $duration (about $((total * (dur_s + 3) / 60 + 1)) min)"
printf 'run\tcase\tstart\tend\tload_before\tload_after\n' >"$out/runs.tsv"

n=0
for rep in $(seq "$repeats"); do
	c=0
	for cs in "${cases[@]}"; do
		n=$((n + 1)) c=$((c + 1))
		IFS=- read -r algo wl tgt <<<"$cs"
		batch=1
		[ "$wl" = batch100 ] && batch=100
		limit=$counter_limit
		[ "$algo" = log ] && limit=$log_limit
		args=(-workers "$workers" -duration "$duration" -keys "$nkeys" -dist uniform
			-algorithm "$algo" -limit "$limit" -window 60s -batch "$batch" -progress=false)
		# Every run gets its own keys (same length as loadgen's default
		# prefix), so that peerlimit starts each run with empty state, as
		# Redis does after its FLUSHALL.
		args+=(-key-prefix "$(printf 'run%02d%02d:' "$rep" "$c")")
		if [ "$tgt" = redis ]; then
			rcli flushall >/dev/null
			args+=(-target redis -redis "127.0.0.1:$redis_port")
		else
			args+=(-target peerlimit -endpoints "$endpoints" -route "$tgt")
		fi
		json="$out/$cs.r$rep.json"
		lglog="$out/$cs.r$rep.log"
		load_before=$(cut -d' ' -f1-3 /proc/loadavg)
		start=$(date +%s)
		timeout --foreground -k 5 $((dur_s + 60)) bin/loadgen "${args[@]}" -json "$json" >"$lglog" 2>&1 || {
			cat "$lglog" >&2
			die "loadgen failed for $cs (repeat $rep)"
		}
		printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$cs" "$start" "$(date +%s)" "$load_before" \
			"$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/runs.tsv"
		# Redis's active expiry would otherwise free this run's keys during
		# the next runs, on their CPU.
		[ "$tgt" != redis ] || rcli flushall >/dev/null
		python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print("%9.0f checks/s  p50 %7.0f us  p99 %7.0f us  errors %d  denied %d" % (
    r["checks_per_s"], r["latency_us"]["p50"], r["latency_us"]["p99"], r["errors"], r["denied"]),
    "(see %s)" % sys.argv[2] if r["errors"] else "")' "$json" "$lglog" |
			while read -r line; do log "[$n/$total] $cs (repeat $rep): $line"; done
	done
done
echo "finished: $(date -u +%FT%TZ); uptime: $(uptime)" >>"$out/env.txt"

# --- Summary -------------------------------------------------------------------

python3 - "$out" <<'PY'
import glob, json, os, re, statistics, sys

out = sys.argv[1]
runs = {}
for path in sorted(glob.glob(os.path.join(out, "*.r*.json"))):
    case = os.path.basename(path).split(".r")[0]
    runs.setdefault(case, []).append(json.load(open(path)))

def med(xs):
    return statistics.median(xs) if xs else float("nan")

def fmt(x, d=0):
    return f"{x:,.{d}f}"

WL = {"single": "single check", "batch100": "batch of 100"}
TGT = {"redis": "Redis + Lua", "owner": "peerlimit, route=owner",
       "random": "peerlimit, route=random"}
stats = {}
for case, rs in runs.items():
    tput = [r["checks_per_s"] for r in rs]
    stats[case] = dict(
        n=len(rs), tput=med(tput), lo=min(tput), hi=max(tput),
        p50=med([r["latency_us"]["p50"] for r in rs]),
        p99=med([r["latency_us"]["p99"] for r in rs]),
        errors=sum(r["errors"] for r in rs), denied=sum(r["denied"] for r in rs))

lines = []
lines.append("| algorithm | workload | target | checks/s (median) | spread | p50 µs | p99 µs (per call) | checks/s ÷ Redis | p99 ÷ Redis | errors | denied |")
lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for algo in ("counter", "log"):
    for wl in ("single", "batch100"):
        base = stats.get(f"{algo}-{wl}-redis")
        for tgt in ("redis", "owner", "random"):
            s = stats.get(f"{algo}-{wl}-{tgt}")
            if not s:
                continue
            spread = (s["hi"] - s["lo"]) / s["tput"] * 100 if s["tput"] else 0
            if tgt == "redis":
                rt = rp = "–"
            elif base:
                rt, rp = f"**{s['tput'] / base['tput']:.2f}**", f"{s['p99'] / base['p99']:.2f}"
            else:
                rt = rp = "?"
            lines.append(f"| {algo} | {WL[wl]} | {TGT[tgt]} | {fmt(s['tput'])} | {spread:.0f}% | "
                         f"{fmt(s['p50'])} | {fmt(s['p99'])} | {rt} | {rp} | {s['errors']} | {s['denied']} |")
table = "\n".join(lines)

# Memory: cmd/redismem against BenchmarkMemoryPerKey.
mem_lines = []
try:
    redis_mem = {r["name"]: r for r in json.load(open(os.path.join(out, "redismem.json")))["results"]}
    pl = {}
    for line in open(os.path.join(out, "peerlimit-mem.txt")):
        m = re.match(r"BenchmarkMemoryPerKey/(\S+?)-\d+\s+\d+\s+\S+ ns/op\s+(.*)", line)
        if m:
            metrics = dict((u, float(v)) for v, u in re.findall(r"([\d.]+) (\S+)", m[2]))
            pl[m[1]] = metrics
    mem_lines.append("| state | Redis B/key | peerlimit B/key | Redis ÷ peerlimit | Redis B/entry | peerlimit B/entry | Redis encoding | keys |")
    mem_lines.append("|---|---:|---:|---:|---:|---:|---|---:|")
    for name in ("counter", "log-limit-5", "log-limit-20", "log-limit-100", "log-limit-1000"):
        r, p = redis_mem.get(name), pl.get(name)
        if not r or not p:
            continue
        ent_r = f"{r['bytes_per_entry']:.1f}" if r.get("bytes_per_entry") else "–"
        ent_p = f"{p['B/entry']:.2f}" if "B/entry" in p else "–"
        mem_lines.append(f"| {name} | {fmt(r['bytes_per_key'])} | {fmt(p['B/key'])} | **{r['bytes_per_key'] / p['B/key']:.2f}** | "
                         f"{ent_r} | {ent_p} | {r['encoding']} | {fmt(r['keys'])} |")
except (OSError, KeyError, ValueError) as e:
    mem_lines.append(f"(memory comparison unavailable: {e})")
mem_table = "\n".join(mem_lines)

# Load: the busiest other processes and how busy the CPUs were, per run.
samples = []
cur = None
for line in open(os.path.join(out, "load.log")) if os.path.exists(os.path.join(out, "load.log")) else []:
    if line.startswith("@@ "):
        f = line.split()
        cur = {"t": int(f[1]), "busy": None, "procs": [], "mine": set(f[3:])}
        samples.append(cur)
    elif cur is None:
        continue
    elif line.startswith("@@mine:"):
        cur["mine"] |= set(line.split()[1:])
    elif line.startswith("%Cpu(s):"):
        m = re.search(r"([\d.]+)\s+id", line)
        if m:
            cur["busy"] = 100 - float(m[1])
    else:
        f = line.split()
        if len(f) >= 12 and f[0].isdigit():
            try:
                cur["procs"].append((float(f[8]), " ".join(f[11:]), f[0]))
            except ValueError:
                pass
def ours(name):
    return {"peerlimit-node": "nodes", "loadgen": "loadgen", "redis-server": "redis"}.get(name)

load_lines = ["| run | case | load before → after | CPU busy | our processes' CPU | other processes ≥ 20% CPU |",
              "|---|---|---|---|---|---|"]
split = {}  # case -> [samples of {nodes, loadgen, redis, idle}]
for row in list(open(os.path.join(out, "runs.tsv")))[1:]:
    rep, case, start, end, lb, la = row.rstrip("\n").split("\t")
    # A sample is top's second iteration: the second after its timestamp.
    ss = [s for s in samples if int(start) <= s["t"] and s["t"] + 1 <= int(end)]
    busy = [s["busy"] for s in ss if s["busy"] is not None]
    hogs = {}
    mine = {"nodes": [], "loadgen": [], "redis": []}
    for s in ss:
        tot = {"nodes": 0.0, "loadgen": 0.0, "redis": 0.0}
        for cpu, name, pid in s["procs"]:
            if pid in s["mine"] and ours(name):
                tot[ours(name)] += cpu
            elif cpu >= 20 and pid not in s["mine"] and name != "top":
                h = hogs.setdefault(name, [0, set()])
                h[0] = max(h[0], cpu)
                h[1].add(pid)
        for k, v in tot.items():
            mine[k].append(v)
        if s["busy"] is not None:
            split.setdefault(case, []).append(dict(tot, idle=200 - 2 * s["busy"]))
    others = [f"{name} ×{len(h[1])} (max {h[0]:.0f}%)" if len(h[1]) > 1 else f"{name} (max {h[0]:.0f}%)"
              for name, h in sorted(hogs.items())]
    busy_s = f"{min(busy):.0f}–{max(busy):.0f}%" if busy else "–"
    mine_s = ", ".join(f"{k} {statistics.mean(v):.0f}%" for k, v in mine.items() if v and statistics.mean(v) >= 1) or "–"
    load_lines.append(f"| {rep} | {case} | {lb} → {la} | {busy_s} | {mine_s} | {', '.join(others) or 'none'} |")

# Where the CPU went, per case, over the samples of every repeat (of 200%:
# two cores).
cpu_lines = ["| case | samples | 3 nodes | loadgen | redis-server | idle |", "|---|---:|---:|---:|---:|---:|"]
ORDER = [f"{a}-{w}-{t}" for a in ("counter", "log") for w in ("single", "batch100") for t in ("redis", "owner", "random")]
for case in sorted(split, key=lambda c: ORDER.index(c) if c in ORDER else len(ORDER)):
    v = split[case]
    m = {k: statistics.mean(x[k] for x in v) for k in ("nodes", "loadgen", "redis", "idle")}
    cpu_lines.append(f"| {case} | {len(v)} | {m['nodes']:.0f}% | {m['loadgen']:.0f}% | {m['redis']:.0f}% | {m['idle']:.0f}% |")
cpu_table = "\n".join(cpu_lines)
load_table = "\n".join(load_lines)

env = open(os.path.join(out, "env.txt")).read().strip()
doc = f"""## Throughput and latency (medians of repeats)

{table}

## Memory per key

{mem_table}

## CPU by process (top, 1-s samples every 5 s; 200% = both cores)

{cpu_table}

## Load during each run

{load_table}

```
{env}
```
"""
open(os.path.join(out, "table.md"), "w").write(doc)
print(doc)

# Chart: checks/s per case, one panel for single checks and one for batches.
COL = {"redis": "#d62728", "owner": "#1f77b4", "random": "#9ecae1"}
W, H, top, bottom, left, gap = 900, 390, 60, 70, 60, 60
panel_w = (W - left - gap - 20) // 2
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W // 2}" y="20" text-anchor="middle" font-size="15">Checks/s (median of repeats; × = ÷ Redis): Redis + Lua vs a 3-node peerlimit cluster, one 2-core machine</text>']
for pi, wl in enumerate(("single", "batch100")):
    x0 = left + pi * (panel_w + gap)
    vals = [stats.get(f"{a}-{wl}-{t}", {}).get("tput", 0) for a in ("counter", "log") for t in ("redis", "owner", "random")]
    vmax = max(vals + [1]) * 1.15
    ph = H - top - bottom
    svg.append(f'<text x="{x0 + panel_w // 2}" y="{top - 10}" text-anchor="middle" font-weight="bold">{WL[wl]}{" (per call: 100 checks)" if wl == "batch100" else ""}</text>')
    for k in range(5):
        v = vmax * k / 4
        y = top + ph - ph * k / 4
        svg.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + panel_w}" y2="{y:.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{x0 - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="10">{v / 1000:,.0f}k</text>')
    gw = panel_w / 2
    for ai, algo in enumerate(("counter", "log")):
        bw = gw / 4.5
        for ti, tgt in enumerate(("redis", "owner", "random")):
            v = stats.get(f"{algo}-{wl}-{tgt}", {}).get("tput", 0)
            bh = ph * v / vmax
            x = x0 + ai * gw + bw * (0.75 + ti)
            svg.append(f'<rect x="{x:.1f}" y="{top + ph - bh:.1f}" width="{bw * 0.9:.1f}" height="{bh:.1f}" fill="{COL[tgt]}"/>')
            svg.append(f'<text x="{x + bw * 0.45:.1f}" y="{top + ph - bh - 4:.1f}" text-anchor="middle" font-size="10">{v / 1000:,.0f}k</text>')
            base = stats.get(f"{algo}-{wl}-redis", {}).get("tput")
            if tgt != "redis" and base:
                svg.append(f'<text x="{x + bw * 0.45:.1f}" y="{top + ph - bh - 16:.1f}" text-anchor="middle" font-size="10" font-weight="bold">{v / base:.2f}×</text>')
        svg.append(f'<text x="{x0 + ai * gw + gw / 2:.1f}" y="{top + ph + 16}" text-anchor="middle">{algo}</text>')
    svg.append(f'<line x1="{x0}" y1="{top + ph}" x2="{x0 + panel_w}" y2="{top + ph}" stroke="black"/>')
for ti, tgt in enumerate(("redis", "owner", "random")):
    x = left + ti * 240
    svg.append(f'<rect x="{x}" y="{H - 30}" width="12" height="12" fill="{COL[tgt]}"/>')
    svg.append(f'<text x="{x + 16}" y="{H - 20}">{TGT[tgt]}</text>')
svg.append("</svg>")
open(os.path.join(out, "benchmarks.svg"), "w").write("\n".join(svg) + "\n")
PY
log "results: $out (table.md, benchmarks.svg, one JSON per run, load.log)"
