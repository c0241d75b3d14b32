#!/usr/bin/env bash
# Compares a 3-node peerlimit cluster with Redis running the seeds' Lua
# scripts, on this machine, over loopback (docs/benchmarks.md):
#
#   - throughput and per-call latency of cmd/loadgen, for
#     {counter, log} x {single checks, batches of 100} x
#     {redis, peerlimit route=owner, peerlimit route=random}, over
#     BENCH_KEYS uniform keys; the counter's single checks again over Zipf
#     keys (s = BENCH_ZIPF_S, 1.1, over BENCH_ZIPF_KEYS, 1,000,000: close
#     to real traffic, where budget leases take warm keys off the hop) to
#     every target; plus, for
#     single checks to a random node, HTTP/JSON (POST /v1/check) and
#     Envoy's rate limit service (ShouldRateLimit), plus one idle case
#     (counter, 1 worker, single checks, gRPC to a random node), each case
#     BENCH_REPEATS times, interleaved;
#   - the CPU each process spent per check over each run: the 3 nodes and
#     redis-server from /proc/<pid>/stat before and after the loadgen
#     process, loadgen from its own JSON (cpu_seconds, its load phase);
#   - the nodes' forwarding over each run, from their /metrics before and
#     after: checks per Forward call, and the share of checks forwarded;
#   - memory per key: cmd/redismem against limiter's BenchmarkMemoryPerKey.
#
# It installs redis-server with apt-get when missing, builds bin/peerlimit-node,
# bin/loadgen and bin/redismem, starts the cluster as scripts/run-local.sh
# does (plus --envoy-rls-config, a file it writes into its work directory)
# and a scratch redis-server on 127.0.0.1:BENCH_REDIS_PORT, and stops
# every process it started when it exits, also on failure or Ctrl-C.
# Results (one JSON per run, memory JSON, load samples, runs.tsv with each
# run's CPU and forwarding counts, table.md and benchmarks.svg) go to
# BENCH_OUT, by default a new temporary directory. About 11 minutes with
# the defaults.
#
# Environment: BENCH_REPEATS (3), BENCH_DURATION (10s), BENCH_WORKERS (64),
# BENCH_KEYS (10000), BENCH_ZIPF_S (1.1), BENCH_ZIPF_KEYS (1000000),
# BENCH_REDIS_PORT (6399), BENCH_OUT, GO (go), BENCH_CASES (an extended
# regular expression: only the cases whose whole names match, e.g.
# 'counter-single-(owner|random)'), and
# BENCH_NODE_ARGS (extra flags for every node, e.g. "--replication-factor 0"),
# BENCH_PERSIST (1: each node keeps its counts in a data directory of its
# own under the work directory, --data-dir; docs/benchmarks.md, "Persistence"),
# BENCH_NODE_GOMAXPROCS (unset: Go's default, every core), the nodes'
# GOMAXPROCS: with 3 nodes on 2 cores, 1 simulates a node per machine
# better (docs/benchmarks.md, "Three nodes on two cores").
#
# BENCH_RATELIMIT_BIN, if set, is a binary of envoyproxy/ratelimit's
# ./src/service_cmd, the rate limit service Envoy users would otherwise
# run (this repository neither vendors nor builds it; docs/benchmarks.md
# says how it was built). Three instances of it are started on the same
# Redis, ports 18081-18083 (gRPC), 18091-18093 and 18071-18073, with a
# domain like the nodes' (a fixed window of a minute, upstream's only
# kind), and the case counter-single-upstream asks them as
# counter-single-envoy asks the nodes: ShouldRateLimit to a random
# instance. Its server CPU is the 3 instances' plus Redis's.
set -euo pipefail
cd "$(dirname "$0")/.."

repeats=${BENCH_REPEATS:-3}
duration=${BENCH_DURATION:-10s}
workers=${BENCH_WORKERS:-64}
nkeys=${BENCH_KEYS:-10000}
zipf_s=${BENCH_ZIPF_S:-1.1}
zipf_keys=${BENCH_ZIPF_KEYS:-1000000}
redis_port=${BENCH_REDIS_PORT:-6399}
node_gomaxprocs=${BENCH_NODE_GOMAXPROCS:-}
ratelimit_bin=${BENCH_RATELIMIT_BIN:-}
read -r -a node_extra_args <<<"${BENCH_NODE_ARGS:-}" # extra node flags, e.g. "--replication-factor 0"
persist=${BENCH_PERSIST:-0}
go=${GO:-go}
endpoints=127.0.0.1:9090,127.0.0.1:9091,127.0.0.1:9092
# Limits that are never reached, so that every check takes the path of an
# allowed request. The log's is the node's --max-log-limit default.
counter_limit=1000000000000
log_limit=10000
clk_tck=$(getconf CLK_TCK)

work=$(mktemp -d -t bench-compare.XXXXXX)
out=${BENCH_OUT:-$work/bench-results}
mkdir -p "$out" "$work/logs" "$work/redis"
out=$(cd "$out" && pwd)

# log, die, start_detached (which fills `started`, what the cleanup stops),
# port_in_use, cpu_ticks, scrape_forwarding, delta4, alive_members,
# duration_seconds.
. scripts/bench-lib.sh

node_pids=()
redis_pid=
sampler_pid=

# Stops the load sampler, then everything else this script started
# (finish). Runs on every exit.
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	if [ -n "$sampler_pid" ]; then
		kill -TERM "$sampler_pid" 2>/dev/null || true
		wait "$sampler_pid" 2>/dev/null || true
	fi
	finish "$rc" "node, redis and ratelimit logs"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


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
command -v curl >/dev/null || die "curl is needed to see when the cluster is ready and to read its metrics"
ports=(8080 8081 8082 9090 9091 9092 7946 7947 7948 "$redis_port")
if [ -n "$ratelimit_bin" ]; then
	[ -x "$ratelimit_bin" ] || die "BENCH_RATELIMIT_BIN=$ratelimit_bin is not an executable"
	ratelimit_bin=$(cd "$(dirname "$ratelimit_bin")" && pwd)/$(basename "$ratelimit_bin")
	ports+=(18081 18082 18083 18091 18092 18093 18071 18072 18073)
fi
for p in "${ports[@]}"; do
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
	echo "settings: repeats=$repeats duration=$duration workers=$workers keys=$nkeys zipf_s=$zipf_s zipf_keys=$zipf_keys node_gomaxprocs=${node_gomaxprocs:-default}"
	[ -z "$ratelimit_bin" ] || echo "envoyproxy/ratelimit: $ratelimit_bin ($("$go" version -m "$ratelimit_bin" | awk '$1 == "mod" { print $2, $3 } $1 == "build" && $2 ~ /^vcs.revision=/ { print $2 }' | tr '\n' ' '))"
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

# Envoy's rate limit service: a domain per algorithm, whose one descriptor
# key ("key", the value being loadgen's key) has the same window as the
# other cases (60 s) and a limit no run reaches: for the counter the
# largest requests_per_unit (2^32 - 1) allows, for the log the nodes'
# --max-log-limit, 10,000 (a key gets about checks/s x duration / 10,000
# keys, well under 100 per run, and every run has keys of its own).
rls_config=$work/envoy-rls.yaml
cat >"$rls_config" <<'YAML'
# Written by scripts/bench-compare.sh (docs/benchmarks.md).
domain: bench-counter
descriptors:
  - key: key
    algorithm: SLIDING_WINDOW_COUNTER
    rate_limit: {unit: minute, requests_per_unit: 4294967295}
---
domain: bench-log
descriptors:
  - key: key
    algorithm: SLIDING_WINDOW_LOG
    rate_limit: {unit: minute, requests_per_unit: 10000}
YAML
cp "$rls_config" "$out/envoy-rls.yaml"

for i in 1 2 3; do
	args=(--id "node$i" --http-addr "127.0.0.1:808$((i - 1))" --grpc-addr "127.0.0.1:909$((i - 1))"
		--gossip-addr "127.0.0.1:794$((i + 5))" --gossip-profile local --envoy-rls-config "$rls_config")
	[ "$i" -gt 1 ] && args+=(--join 127.0.0.1:7946)
	args+=("${node_extra_args[@]}")
	if [ "$persist" = 1 ]; then
		mkdir -p "$work/data/node$i"
		args+=(--data-dir "$work/data/node$i" --cluster-name bench)
	fi
	node_env=()
	[ -n "$node_gomaxprocs" ] && node_env=(env "GOMAXPROCS=$node_gomaxprocs")
	start_detached peerlimit-node "$work/logs/node$i.log" "${node_env[@]}" bin/peerlimit-node "${args[@]}"
	node_pids+=("$started_pid")
done

wait_converged 60
log "cluster ready: 3 alive members on every node (pids ${node_pids[*]})"

# --- envoyproxy/ratelimit (optional) ---------------------------------------

upstream_pids=()
if [ -n "$ratelimit_bin" ]; then
	# Its runtime layout: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml.
	mkdir -p "$work/ratelimit/bench/config"
	cat >"$work/ratelimit/bench/config/bench.yaml" <<'YAML'
# Written by scripts/bench-compare.sh (docs/benchmarks.md).
domain: bench-counter
descriptors:
  - key: key
    rate_limit: {unit: minute, requests_per_unit: 4294967295}
YAML
	for i in 1 2 3; do
		start_detached "$(basename "$ratelimit_bin")" "$work/logs/ratelimit$i.log" env USE_STATSD=false LOG_LEVEL=warn \
			REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" RUNTIME_ROOT="$work/ratelimit" RUNTIME_SUBDIRECTORY=bench \
			RUNTIME_WATCH_ROOT=false HOST=127.0.0.1 PORT="1809$i" GRPC_HOST=127.0.0.1 GRPC_PORT="1808$i" \
			DEBUG_HOST=127.0.0.1 DEBUG_PORT="1807$i" "$ratelimit_bin"
		upstream_pids+=("$started_pid")
	done
	for i in 1 2 3; do
		for _ in $(seq 50); do
			port_in_use "1808$i" && break
			sleep 0.2
		done
		port_in_use "1808$i" || die "envoyproxy/ratelimit $i did not listen on 127.0.0.1:1808$i; see $work/logs/ratelimit$i.log"
	done
	log "envoyproxy/ratelimit ready: 3 instances on 127.0.0.1:18081-18083 (pids ${upstream_pids[*]})"
fi

# --- Throughput --------------------------------------------------------------


# What the idle nodes burn (gossip, timers): it is inside every run's
# nodes CPU, so it is measured once, over 5 s, and reported beside it.
idle_before=$(cpu_ticks "${node_pids[@]}")
sleep 5
idle_after=$(cpu_ticks "${node_pids[@]}")
idle_ms=$(awk -v t=$((idle_after - idle_before)) -v h="$clk_tck" 'BEGIN { printf "%.0f", t / h / 5 * 1000 }')
echo "idle nodes: $idle_ms ms of CPU per second, the 3 together (over 5 s before the runs)" | tee -a "$out/env.txt"

# Cases are <algorithm>-<workload>-<target>. Targets: redis; owner (the Go
# client, route=owner), random (raw gRPC to a random node), http
# (POST /v1/check to a random node), envoy (ShouldRateLimit to a random
# node). Workloads: single, batch100, idle (1 worker, single checks).
cases=()
for algo in counter log; do
	for tgt in redis owner random http envoy; do
		cases+=("$algo-single-$tgt")
	done
	if [ "$algo" = counter ] && [ -n "$ratelimit_bin" ]; then
		cases+=(counter-single-upstream)
	fi
	for tgt in redis owner random; do
		cases+=("$algo-batch100-$tgt")
	done
done
for tgt in redis owner random http envoy; do
	cases+=("counter-zipf-$tgt")
done
[ -z "$ratelimit_bin" ] || cases+=(counter-zipf-upstream)
cases+=(counter-idle-random)
if [ -n "${BENCH_CASES:-}" ]; then
	# Only the cases whose names match: a before/after of one path costs
	# minutes, not the whole table's eleven.
	mapfile -t cases < <(printf '%s\n' "${cases[@]}" | grep -E -x -- "$BENCH_CASES" || true)
	[ "${#cases[@]}" -gt 0 ] || die "BENCH_CASES='$BENCH_CASES' matches no case"
fi
dur_s=$(duration_seconds "$duration")
total=$((${#cases[@]} * repeats))
# Each run costs about 2 s beyond its duration: loadgen's setup and
# warm-up, the metrics and /proc samples, Redis's FLUSHALLs.
log "throughput: ${#cases[@]} cases x $repeats repeats x $duration (about $((total * (dur_s + 2) / 60 + 1)) min)"
printf 'run\tcase\tstart\tend\tload_before\tload_after\tnodes_cpu_s\tredis_cpu_s\tfwd_checks\tfwd_calls\tfwd_ok\tnode_checks\n' >"$out/runs.tsv"

n=0
for rep in $(seq "$repeats"); do
	c=0
	for cs in "${cases[@]}"; do
		n=$((n + 1)) c=$((c + 1))
		IFS=- read -r algo wl tgt <<<"$cs"
		batch=1 nworkers=$workers
		[ "$wl" = batch100 ] && batch=100
		[ "$wl" = idle ] && nworkers=1
		limit=$counter_limit
		[ "$algo" = log ] && limit=$log_limit
		keys=(-keys "$nkeys" -dist uniform)
		[ "$wl" = zipf ] && keys=(-keys "$zipf_keys" -dist zipf -zipf-s "$zipf_s")
		args=(-workers "$nworkers" -duration "$duration" "${keys[@]}" -batch "$batch" -progress=false)
		# Envoy's limits come from the domain's rule (envoy-rls.yaml).
		[ "$tgt" = envoy ] || [ "$tgt" = upstream ] || args+=(-algorithm "$algo" -limit "$limit" -window 60s)
		# Every run gets its own keys (same length as loadgen's default
		# prefix), so that peerlimit starts each run with empty state, as
		# Redis does after its FLUSHALL.
		args+=(-key-prefix "$(printf 'run%02d%02d:' "$rep" "$c")")
		case $tgt in
		redis)
			rcli flushall >/dev/null
			args+=(-target redis -redis "127.0.0.1:$redis_port")
			;;
		owner | random) args+=(-target peerlimit -api grpc -endpoints "$endpoints" -route "$tgt") ;;
		http) args+=(-target peerlimit -api http -http-endpoints 127.0.0.1:8080,127.0.0.1:8081,127.0.0.1:8082 -route random) ;;
		envoy) args+=(-target peerlimit -api envoy -endpoints "$endpoints" -route random -rls-domain "bench-$algo") ;;
		upstream)
			rcli flushall >/dev/null
			args+=(-target peerlimit -api envoy -endpoints 127.0.0.1:18081,127.0.0.1:18082,127.0.0.1:18083 -route random -rls-domain bench-counter)
			;;
		*) die "unknown target $tgt" ;;
		esac
		json="$out/$cs.r$rep.json"
		lglog="$out/$cs.r$rep.log"
		load_before=$(cut -d' ' -f1-3 /proc/loadavg)
		# Counters and CPU times are read around the loadgen process:
		# the metrics first, so that serving them is not in the CPU
		# window. loadgen's setup and teardown fall inside it, while the
		# nodes and Redis are idle (docs/benchmarks.md).
		metrics_before=$(scrape_forwarding 8080 8081 8082)
		servers=("${node_pids[@]}")
		[ "$tgt" != upstream ] || servers=("${upstream_pids[@]}")
		nodes_before=$(cpu_ticks "${servers[@]}")
		redis_before=$(cpu_ticks "$redis_pid")
		start=$(date +%s)
		timeout --foreground -k 5 $((dur_s + 60)) bin/loadgen "${args[@]}" -json "$json" >"$lglog" 2>&1 || {
			cat "$lglog" >&2
			die "loadgen failed for $cs (repeat $rep)"
		}
		nodes_after=$(cpu_ticks "${servers[@]}")
		redis_after=$(cpu_ticks "$redis_pid")
		end=$(date +%s)
		metrics_after=$(scrape_forwarding 8080 8081 8082)
		nodes_cpu=$(awk -v t=$((nodes_after - nodes_before)) -v h="$clk_tck" 'BEGIN { printf "%.3f", t / h }')
		redis_cpu=$(awk -v t=$((redis_after - redis_before)) -v h="$clk_tck" 'BEGIN { printf "%.3f", t / h }')
		fwd=$(delta4 "$metrics_before" "$metrics_after")
		read -r fwd_checks fwd_calls fwd_ok node_checks <<<"$fwd"
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$cs" "$start" "$end" "$load_before" \
			"$(cut -d' ' -f1-3 /proc/loadavg)" "$nodes_cpu" "$redis_cpu" "$fwd_checks" "$fwd_calls" "$fwd_ok" "$node_checks" >>"$out/runs.tsv"
		# Redis's active expiry would otherwise free this run's keys during
		# the next runs, on their CPU.
		[ "$tgt" != redis ] && [ "$tgt" != upstream ] || rcli flushall >/dev/null
		python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
nodes, redis, tgt = float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
fc, fn, fok, seen = sys.argv[6:10]
per = lambda s: s * 1e6 / r["checks"] if r["checks"] else float("nan")
line = "%9.0f checks/s  p50 %7.0f us  p99 %7.0f us  errors %d  denied %d  CPU us/check: loadgen %.1f" % (
    r["checks_per_s"], r["latency_us"]["p50"], r["latency_us"]["p99"], r["errors"], r["denied"], per(r["cpu_seconds"]))
line += {"redis": "  redis %.1f" % per(redis), "upstream": "  ratelimit %.1f + redis %.1f" % (per(nodes), per(redis))}.get(tgt, "  nodes %.1f" % per(nodes))
if tgt not in ("redis", "upstream") and fn.isdigit() and seen.isdigit() and int(seen):
    line += "  forwarded %.0f%%" % (100 * int(fok) / int(seen))
    if int(fn):
        line += " in calls of %.1f" % (int(fc) / int(fn))
print(line, "(see %s)" % sys.argv[2] if r["errors"] else "")' "$json" "$lglog" "$nodes_cpu" "$redis_cpu" "$tgt" \
			"$fwd_checks" "$fwd_calls" "$fwd_ok" "$node_checks" |
			while read -r line; do log "[$n/$total] $cs (repeat $rep): $line"; done
	done
done
echo "finished: $(date -u +%FT%TZ); uptime: $(uptime)" >>"$out/env.txt"

# --- Summary -------------------------------------------------------------------

RATELIMIT_NAME=$(basename "${ratelimit_bin:-ratelimit}") python3 - "$out" <<'PY'
import glob, json, os, re, statistics, sys

out = sys.argv[1]
runs = {}   # case -> [(repeat, loadgen JSON)]
for path in sorted(glob.glob(os.path.join(out, "*.r*.json"))):
    m = re.fullmatch(r"(.+)\.r(\d+)\.json", os.path.basename(path))
    if m:
        runs.setdefault(m[1], []).append((m[2], json.load(open(path))))

# Each run's CPU times and forwarding counters, measured by the script.
def num(x):
    try:
        return float(x)
    except ValueError:
        return None
tsv = [row.rstrip("\n").split("\t") for row in list(open(os.path.join(out, "runs.tsv")))[1:]]
costs = {(f[1], f[0]): dict(nodes=num(f[6]), redis=num(f[7]), fwd_checks=num(f[8]), fwd_calls=num(f[9]),
                            fwd_ok=num(f[10]), node_checks=num(f[11])) for f in tsv if len(f) >= 12}

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def fmt(x, d=0):
    return "–" if x is None else f"{x:,.{d}f}"

WL = {"single": "single check", "batch100": "batch of 100", "idle": "single check, 1 worker (idle)",
      "zipf": "single check, Zipf keys"}
TGT = {"redis": "Redis + Lua", "owner": "peerlimit, route=owner", "random": "peerlimit, route=random",
       "http": "peerlimit, HTTP/JSON, random node", "envoy": "peerlimit, Envoy RLS, random node",
       "upstream": "envoyproxy/ratelimit + Redis, Envoy RLS, random instance"}
ROWS = [r for a in ("counter", "log") for r in
        [(a, "single", t) for t in ("redis", "owner", "random", "http", "envoy", "upstream")] +
        [(a, "batch100", t) for t in ("redis", "owner", "random")]]
ROWS += [("counter", "zipf", t) for t in ("redis", "owner", "random", "http", "envoy", "upstream")]
ROWS += [(a, "idle", "random") for a in ("counter", "log")]

stats = {}
for case, rs in runs.items():
    tgt = case.rsplit("-", 1)[1]
    tput = [r["checks_per_s"] for _, r in rs]
    per = {k: [] for k in ("nodes", "loadgen", "redis", "total", "batch", "fwd")}
    for rep, r in rs:
        c = costs.get((case, rep), {})
        n = r["checks"]
        if not n:
            continue
        us = lambda s: None if s is None else s * 1e6 / n
        lg = us(r.get("cpu_seconds") or None)
        nodes, redis = us(c.get("nodes")), us(c.get("redis"))
        per["loadgen"].append(lg)
        per["nodes"].append(nodes)
        server = {"redis": redis, "upstream": None if nodes is None or redis is None else nodes + redis}.get(tgt, nodes)
        if tgt in ("redis", "upstream"):
            per["redis"].append(redis)
        per["total"].append(None if lg is None or server is None else lg + server)
        if tgt not in ("redis", "upstream"):
            calls, seen = c.get("fwd_calls"), c.get("node_checks")
            if calls:
                per["batch"].append(c["fwd_checks"] / calls)
            if seen:
                per["fwd"].append(100 * c["fwd_ok"] / seen)
            elif seen == 0:
                per["fwd"].append(0.0)
    stats[case] = dict(
        n=len(rs), tput=med(tput), lo=min(tput), hi=max(tput),
        p50=med([r["latency_us"]["p50"] for _, r in rs]),
        p99=med([r["latency_us"]["p99"] for _, r in rs]),
        p999=med([r["latency_us"]["p999"] for _, r in rs]),
        errors=sum(r["errors"] for _, r in rs), denied=sum(r["denied"] for _, r in rs),
        **{k: med(v) for k, v in per.items()})

lines = []
lines.append("| algorithm | workload | target | checks/s (median) | spread | p50 µs | p99 µs (per call) | checks/s ÷ Redis | p99 ÷ Redis "
             "| nodes CPU µs/check | loadgen CPU µs/check | Redis CPU µs/check | total CPU µs/check | avg forward batch | forwarded | errors | denied |")
lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for algo, wl, tgt in ROWS:
    s = stats.get(f"{algo}-{wl}-{tgt}")
    if not s:
        continue
    # HTTP and Envoy single checks compare with Redis's single checks; the
    # idle case (one worker) has no Redis counterpart.
    base = stats.get(f"{algo}-{wl}-redis")
    spread = (s["hi"] - s["lo"]) / s["tput"] * 100 if s["tput"] else 0
    if tgt == "redis" or wl == "idle":
        rt = rp = "–"
    elif base:
        rt, rp = f"**{s['tput'] / base['tput']:.2f}**", f"{s['p99'] / base['p99']:.2f}"
    else:
        rt = rp = "?"
    if tgt in ("redis", "upstream"):
        batch = fwd = "–"
    else:
        batch = fmt(s["batch"], 1) if s["batch"] is not None else "– (none)"
        fwd = "?" if s["fwd"] is None else f"{s['fwd']:.1f}%"
    lines.append(f"| {algo} | {WL[wl]} | {TGT[tgt]} | {fmt(s['tput'])} | {spread:.0f}% | "
                 f"{fmt(s['p50'])} | {fmt(s['p99'])} | {rt} | {rp} | {fmt(s['nodes'], 1)} | {fmt(s['loadgen'], 1)} | "
                 f"{fmt(s['redis'], 1) if tgt in ('redis', 'upstream') else '–'} | {fmt(s['total'], 1)} | {batch} | {fwd} | "
                 f"{s['errors']} | {s['denied']} |")
table = "\n".join(lines)

idle_lines = []
for algo in ("counter", "log"):
    s = stats.get(f"{algo}-idle-random")
    if s and s["p99"] is not None:
        verdict = "**met**" if s["p99"] < 1000 else "**not met**"
        idle_lines.append(f"- {algo}, 1 worker, gRPC to a random node ({s['fwd']:.0f}% forwarded): p50 {fmt(s['p50'])} µs, "
                          f"p99 {fmt(s['p99'])} µs, p99.9 {fmt(s['p999'])} µs ({'medians of %d runs' % s['n'] if s['n'] > 1 else '1 run'}). "
                          f"Target \"an idle cluster answers one forwarded check in under 1 ms at p99\": {verdict} "
                          f"(the forwarded calls' own p99 lies between the p99 and the p99.9 of all calls).")
idle = "\n".join(idle_lines) or "(no idle case ran)"

# Envoy's API, both sides 3 instances: peerlimit against envoyproxy/ratelimit + Redis,
# over uniform keys and over Zipf keys.
def server(s, tgt):
    return {"upstream": None if s["nodes"] is None or s["redis"] is None else s["nodes"] + s["redis"]}.get(tgt, s["nodes"])
vs = []
for wl, keys in (("single", "uniform keys"), ("zipf", "Zipf keys")):
    up, pe = stats.get(f"counter-{wl}-upstream"), stats.get(f"counter-{wl}-envoy")
    if not (up and pe and up["tput"]):
        continue
    su, sp = server(up, "upstream"), server(pe, "envoy")
    cpu = f"{su / sp:.2f}× less server CPU per check ({fmt(sp, 1)} µs against {fmt(su, 1)} µs: ratelimit {fmt(up['nodes'], 1)} + Redis {fmt(up['redis'], 1)})" if su and sp else "CPU unknown"
    rounds = "; ".join(f"{r['checks_per_s'] / u['checks_per_s']:.2f}" for (_, r), (_, u) in
                       zip(sorted(runs[f"counter-{wl}-envoy"]), sorted(runs[f"counter-{wl}-upstream"])) if u["checks_per_s"])
    vs.append(f"Envoy's ShouldRateLimit, counter, {keys}, 3 instances each, a random instance per call: peerlimit answers "
              f"**{pe['tput'] / up['tput']:.2f}×** envoyproxy/ratelimit's checks/s (medians; per repeat: {rounds}) at {cpu}; "
              f"p99 {fmt(pe['p99'])} µs against {fmt(up['p99'])} µs; {fmt(pe['fwd'], 1)}% of peerlimit's checks forwarded.")
vs_upstream = "\n".join("- " + v for v in vs) or "(not run: set BENCH_RATELIMIT_BIN to a build of envoyproxy/ratelimit's ./src/service_cmd)"

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
    if name[:15] == os.environ.get("RATELIMIT_NAME", "ratelimit")[:15]:
        return "ratelimit"
    return {"peerlimit-node": "nodes", "loadgen": "loadgen", "redis-server": "redis"}.get(name)

load_lines = ["| run | case | load before → after | CPU busy | our processes' CPU | other processes ≥ 20% CPU |",
              "|---|---|---|---|---|---|"]
for row in tsv:
    rep, case, start, end, lb, la = row[:6]
    # A sample is top's second iteration: the second after its timestamp.
    ss = [s for s in samples if int(start) <= s["t"] and s["t"] + 1 <= int(end)]
    busy = [s["busy"] for s in ss if s["busy"] is not None]
    hogs = {}
    mine = {"nodes": [], "loadgen": [], "redis": [], "ratelimit": []}
    for s in ss:
        tot = {"nodes": 0.0, "loadgen": 0.0, "redis": 0.0, "ratelimit": 0.0}
        for cpu, name, pid in s["procs"]:
            if pid in s["mine"] and ours(name):
                tot[ours(name)] += cpu
            elif cpu >= 20 and pid not in s["mine"] and name != "top":
                h = hogs.setdefault(name, [0, set()])
                h[0] = max(h[0], cpu)
                h[1].add(pid)
        for k, v in tot.items():
            mine[k].append(v)
    others = [f"{name} ×{len(h[1])} (max {h[0]:.0f}%)" if len(h[1]) > 1 else f"{name} (max {h[0]:.0f}%)"
              for name, h in sorted(hogs.items())]
    busy_s = f"{min(busy):.0f}–{max(busy):.0f}%" if busy else "–"
    mine_s = ", ".join(f"{k} {statistics.mean(v):.0f}%" for k, v in mine.items() if v and statistics.mean(v) >= 1) or "–"
    load_lines.append(f"| {rep} | {case} | {lb} → {la} | {busy_s} | {mine_s} | {', '.join(others) or 'none'} |")
load_table = "\n".join(load_lines)

env = open(os.path.join(out, "env.txt")).read().strip()
doc = f"""## Throughput, latency and CPU per check (medians of repeats)

{table}

CPU per check is each process's own CPU time (user + system) over the run
divided by the checks decided: the nodes' and Redis's from /proc/<pid>/stat
read before and after the loadgen process, loadgen's from its own
`cpu_seconds` (its load phase). Total is loadgen plus the server side
(Redis for Redis rows, envoyproxy/ratelimit's 3 instances plus Redis for
its row, in the nodes and Redis columns, the 3 nodes otherwise). The nodes' figure includes
what they burn idle (see "idle nodes" below) over the loadgen process's
life, a second or so longer than its load phase. Avg forward batch is checks
per Forward call between nodes, forwarded is the share of the checks the
nodes received that they forwarded to the key's owner (both from the
nodes' /metrics before and after the run).

## Idle latency

{idle}

## Envoy's API against envoyproxy/ratelimit

{vs_upstream}

## Memory per key

{mem_table}

## Load during each run

{load_table}

```
{env}
```
"""
open(os.path.join(out, "table.md"), "w").write(doc)
print(doc)

# Chart: checks/s per case, one panel for single checks and one for batches.
COL = {"redis": "#d62728", "owner": "#1f77b4", "random": "#9ecae1", "http": "#2ca02c", "envoy": "#9467bd", "upstream": "#8c564b"}
SHORT = {"redis": "Redis + Lua", "owner": "route=owner (Go client)", "random": "route=random (gRPC)",
         "http": "HTTP/JSON, random node", "envoy": "Envoy RLS, random node", "upstream": "envoyproxy/ratelimit"}
PANELS = [("single", ("redis", "owner", "random", "http", "envoy") + (("upstream",) if "counter-single-upstream" in stats else ())),
          ("batch100", ("redis", "owner", "random"))]
W, H, top, bottom, left, gap = 1000, 400, 60, 80, 60, 60
panel_w = (W - left - gap - 20) // 2
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W // 2}" y="20" text-anchor="middle" font-size="15">Checks/s (median of repeats; × = ÷ Redis): Redis + Lua vs a 3-node peerlimit cluster, one 2-core machine</text>']
for pi, (wl, tgts) in enumerate(PANELS):
    x0 = left + pi * (panel_w + gap)
    vals = [stats.get(f"{a}-{wl}-{t}", {}).get("tput") or 0 for a in ("counter", "log") for t in tgts]
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
        bw = gw / (len(tgts) + 1.5)
        for ti, tgt in enumerate(tgts):
            v = stats.get(f"{algo}-{wl}-{tgt}", {}).get("tput") or 0
            bh = ph * v / vmax
            x = x0 + ai * gw + bw * (0.75 + ti)
            svg.append(f'<rect x="{x:.1f}" y="{top + ph - bh:.1f}" width="{bw * 0.9:.1f}" height="{bh:.1f}" fill="{COL[tgt]}"/>')
            svg.append(f'<text x="{x + bw * 0.45:.1f}" y="{top + ph - bh - 4:.1f}" text-anchor="middle" font-size="10">{v / 1000:,.0f}k</text>')
            base = stats.get(f"{algo}-{wl}-redis", {}).get("tput")
            if tgt != "redis" and base:
                svg.append(f'<text x="{x + bw * 0.45:.1f}" y="{top + ph - bh - 16:.1f}" text-anchor="middle" font-size="10" font-weight="bold">{v / base:.2f}×</text>')
        svg.append(f'<text x="{x0 + ai * gw + gw / 2:.1f}" y="{top + ph + 16}" text-anchor="middle">{algo}</text>')
    svg.append(f'<line x1="{x0}" y1="{top + ph}" x2="{x0 + panel_w}" y2="{top + ph}" stroke="black"/>')
for ti, tgt in enumerate(t for t in COL if t != "upstream" or "counter-single-upstream" in stats):
    x = left + ti * 160
    svg.append(f'<rect x="{x}" y="{H - 30}" width="12" height="12" fill="{COL[tgt]}"/>')
    svg.append(f'<text x="{x + 16}" y="{H - 20}">{SHORT[tgt]}</text>')
svg.append("</svg>")
open(os.path.join(out, "benchmarks.svg"), "w").write("\n".join(svg) + "\n")
PY
log "results: $out (table.md, benchmarks.svg, one JSON per run, load.log)"
