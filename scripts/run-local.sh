#!/usr/bin/env bash
# Runs a 3-node peerlimit cluster on loopback in the foreground.
# Ctrl-C stops the nodes gracefully, one after another: each leaves and
# hands its keys to the ones still running, and the last has no one left
# to hand them to (the cluster is gone).
set -euo pipefail
bin=${1:-bin/peerlimit-node}
[ -x "$bin" ] || { echo "build first: make build" >&2; exit 1; }

# The nodes run in their own session, so Ctrl-C reaches only this script,
# which then signals each node exactly once: a node treats a second signal
# as "stop now", which would cut its handoff short.
# Signalled all at once, every node would try to hand its keys to the
# others while they leave too, and log an ERROR that it could not: stop
# them in turn, as a rolling shutdown does.
pids=()
stop() {
	trap - INT TERM EXIT
	echo; echo "stopping the cluster, one node at a time (each leaves and hands its keys to the others)..."
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
		while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	done
	exit 0
}
trap stop INT TERM EXIT

# The example policies (docs/policies.md), so that the docs' `--policy
# login` examples work as written; POLICIES=other.yaml gives another file.
policies=${POLICIES:-examples/policies.yaml}
for i in 1 2 3; do
	args=(--id "node$i" --http-addr "127.0.0.1:808$((i-1))" --grpc-addr "127.0.0.1:909$((i-1))"
		--gossip-addr "127.0.0.1:794$((i+5))" --gossip-profile local --policies "$policies")
	[ "$i" -gt 1 ] && args+=(--join 127.0.0.1:7946)
	# Process substitution, not a pipe: $! must be the node, not sed.
	setsid "$bin" "${args[@]}" > >(sed -u "s/^/[node$i] /") 2>&1 &
	pids+=($!)
	# Node 1 serves before the others join through it: started together,
	# they would find no one listening yet and warn that no seed is
	# reachable (they retry, and join, a moment later). Its HTTP API
	# answers once its gossip listens. Bounded: 10 s, then go on anyway.
	if [ "$i" -eq 1 ]; then
		for _ in $(seq 100); do
			"$bin" healthcheck --addr 127.0.0.1:8080 --timeout 200ms >/dev/null 2>&1 && break
			kill -0 "${pids[0]}" 2>/dev/null || exit 1
			sleep 0.1
		done
	fi
done

cat <<'TXT'

peerlimit: 3 nodes on loopback (HTTP 8080-8082, gRPC 9090-9092, gossip 7946-7948)

  curl -s localhost:8080/v1/check -d '{"key":"user:42","limit":5,"window_ms":60000}'
  curl -s localhost:8081/v1/members
  bin/peerlimit-node check --policy login user:42     (policies: examples/policies.yaml)

Any node answers for any key; "owner" says which node decided. Ctrl-C stops all.

TXT
# Wake up for signals: a plain `wait` also waits for the log filters.
while :; do sleep 1; done
