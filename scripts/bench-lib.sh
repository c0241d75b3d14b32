# Shell functions the benchmark scripts share (bench-compare.sh,
# bench-scale.sh, hop-bench.sh, replica-bench.sh): their scratch and results
# directories and exit traps (bench_setup), logging, starting and stopping
# the processes they own, the CPU time of processes, the nodes' forwarding
# counters, what a run was measured on (write_env). Sourced, not run; the
# sourcing script calls bench_setup, or sets `work` (its scratch
# directory) and `out` itself.

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "error: $*" >&2; exit 1; }

started=() # every long-running process started, for stop_started

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Starts "$@" in its own session (so that Ctrl-C reaches only the script,
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

# Stops the given pids: one TERM each (a second signal would cut a node's
# handoff short), then KILL after 15 s.
stop_pids() {
	[ "$#" -gt 0 ] || return 0
	kill -TERM "$@" 2>/dev/null || true
	local deadline=$((SECONDS + 15)) pid
	for pid in "$@"; do
		while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
		if kill -0 "$pid" 2>/dev/null; then
			log "pid $pid still running after 15 s: KILL"
			kill -KILL "$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true
	done
}

# Stops every process the script started, removes its scratch directory
# unless the results are in it or the script failed (then the logs, which
# $2 names, stay for a look), and exits with the script's status $1: the
# scripts' EXIT trap.
finish() {
	local rc=$1 logs=$2
	if [ "${#started[@]}" -gt 0 ]; then
		log "stopping the ${#started[@]} processes this script started..."
		stop_pids "${started[@]}"
	fi
	if [ "$rc" -ne 0 ]; then
		log "failed (exit $rc); $logs are in $work/logs" >&2
	elif [[ $out != "$work"/* ]]; then
		rm -rf "$work"
	fi
	exit "$rc"
}

# CPU time (user + system, every thread) that the given processes have
# used so far, in clock ticks (1/CLK_TCK s): fields 14 and 15 of
# /proc/<pid>/stat, counted after the command name, which may hold spaces.
cpu_ticks() {
	local total=0 pid stat f
	for pid in "$@"; do
		stat=$(cat "/proc/$pid/stat" 2>/dev/null) || die "process $pid exited during the benchmark; see $work/logs"
		read -r -a f <<<"${stat##*) }"
		total=$((total + f[11] + f[12]))
	done
	echo "$total"
}

# The nodes' forwarding counters, summed over the nodes whose HTTP ports
# are given: checks carried by forward calls
# (peerlimit_forward_batch_size_sum), the calls (_count), checks forwarded
# and answered (peerlimit_forwards_total{result="ok"}) and checks received
# from clients (peerlimit_checks_total, every label). "- - - -" if a node
# did not answer.
scrape_forwarding() {
	local p
	for p in "$@"; do
		curl -sf --max-time 5 "http://127.0.0.1:$p/metrics" || echo "scrape_failed 1"
	done | awk '
		$1 == "peerlimit_forward_batch_size_sum" { s += $2 }
		$1 == "peerlimit_forward_batch_size_count" { c += $2 }
		$1 ~ /^peerlimit_forwards_total\{/ && $1 ~ /result="ok"/ { ok += $2 }
		$1 ~ /^peerlimit_checks_total\{/ { n += $2 }
		$1 == "scrape_failed" { bad = 1 }
		END { if (bad) print "- - - -"; else printf "%.0f %.0f %.0f %.0f\n", s, c, ok, n }'
}

# after - before for each of the 4 counters of scrape_forwarding; "-"
# where unknown.
delta4() {
	local -a b a
	read -r -a b <<<"$1"
	read -r -a a <<<"$2"
	local i outs=()
	for i in 0 1 2 3; do
		if [[ ${b[i]} =~ ^[0-9]+$ && ${a[i]} =~ ^[0-9]+$ ]]; then outs+=($((a[i] - b[i]))); else outs+=(-); fi
	done
	echo "${outs[*]}"
}

# How many members the node on HTTP port $1 sees alive and owning
# partitions.
alive_members() {
	curl -sf --max-time 2 "localhost:$1/v1/members" | python3 -c '
import json, sys
m = json.load(sys.stdin)["members"]
print(sum(1 for x in m if x["state"] == "alive" and x["partitions"] > 0))' 2>/dev/null || echo 0
}

# Waits until each of the nodes whose pids are ${node_pids[@]}, serving
# HTTP on 8080, 8081, …, sees all of them alive and owning partitions;
# dies if one exits or $1 seconds pass.
wait_converged() {
	local secs=$1 n=${#node_pids[@]} deadline=$((SECONDS + $1)) ready i pid
	while :; do
		ready=1
		for i in $(seq 0 $((n - 1))); do
			[ "$(alive_members $((8080 + i)))" = "$n" ] || ready=0
		done
		[ "$ready" = 1 ] && return 0
		for pid in "${node_pids[@]}"; do
			kill -0 "$pid" 2>/dev/null || die "node pid $pid exited; see $work/logs"
		done
		[ "$SECONDS" -lt "$deadline" ] || die "$n nodes did not converge in $secs s; see $work/logs"
		sleep 0.5
	done
}

# Seconds in a Go duration ("10s", "500ms", "1m"), rounded up.
duration_seconds() {
	python3 -c 'import sys,re; m=re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", sys.argv[1]); print(int(float(m[1]) * {"ms": 0.001, "s": 1, "m": 60}[m[2]] + 0.999))' "$1"
}

# write_env FILE SETTINGS writes what a run was measured on: the host, Go,
# the commit (and whether the tree had local changes), when it started and
# how busy the machine was, and "settings: SETTINGS"; the summaries print
# it beside their tables. Uses the sourcing script's $go.
write_env() {
	{
		echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
		echo "go: $("$go" version)"
		echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
		echo "started: $(date -u +%FT%TZ); uptime: $(uptime)"
		echo "settings: $2"
	} >"$1"
}

# bench_setup NAME: `work`, a new scratch directory (with logs/), and
# `out`, BENCH_OUT or NAME-results in work, made absolute; and the traps
# that stop every process the script started on any exit (finish) and
# turn Ctrl-C and TERM into an exit. For a script with nothing else to
# clean up.
bench_setup() {
	work=$(mktemp -d -t "$1.XXXXXX")
	out=${BENCH_OUT:-$work/$1-results}
	mkdir -p "$out" "$work/logs"
	out=$(cd "$out" && pwd)
	trap bench_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

bench_cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	finish "$rc" "node logs"
}
