# peerlimit — see README.md. Every target works on a fresh machine with Go;
# `make proto` also installs protoc from Debian's packages when missing.
GO        ?= go
PROTO_DIR := proto
PROTOS    := $(shell find $(PROTO_DIR) -name '*.proto')
BIN       := bin/peerlimit-node

.PHONY: all build test bench fuzz proto proto-check fmt-check run tools clean bench-compare bench-scale bench-hop bench-replica chaos sim image compose-test

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/node

# The test command (README, .ci/run): vet, then every test with the race
# detector (the simulation's few seeds among them), then a hundred seeds
# of the simulation without it: 1-70 plain, 71-100 hunting, as make sim's
# (docs/chaos.md, "Simulation"; no longer than a hundred plain seeds).
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run TestSimulation ./sim -sim.seeds 70
	$(GO) test -count=1 -run TestSimulation ./sim -sim.hunt -sim.from 71 -sim.seeds 30

# Go benchmarks: the limiter, the ring, the API conversion, a node and a 3-node cluster over
# loopback, and the client. Compare results within one run only.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./limiter/... ./ring/... ./rpc/... ./node/... ./client/... ./envoyrls/...

# Each fuzz target for FUZZTIME (go test -fuzz takes one target at a time).
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./limiter -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(FUZZTIME)
	$(GO) test ./limiter -run '^$$' -fuzz '^FuzzTrafficMatchesModel$$' -fuzztime $(FUZZTIME)
	$(GO) test ./limiter -run '^$$' -fuzz '^FuzzGCRAMatchesModel$$' -fuzztime $(FUZZTIME)
	$(GO) test ./limiter -run '^$$' -fuzz '^FuzzReservationToken$$' -fuzztime $(FUZZTIME)
	$(GO) test ./httpapi -run '^$$' -fuzz '^FuzzDecodeCheck$$' -fuzztime $(FUZZTIME)
	$(GO) test ./httpapi -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime $(FUZZTIME)
	$(GO) test ./rpc -run '^$$' -fuzz '^FuzzUnmarshalCheckBatch$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/wire -run '^$$' -fuzz '^FuzzCodecMatchesProtobufGo$$' -fuzztime $(FUZZTIME)
	$(GO) test ./policy -run '^$$' -fuzz '^FuzzParsePolicies$$' -fuzztime $(FUZZTIME)
	$(GO) test ./envoyrls -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME)
	$(GO) test ./envoyrls -run '^$$' -fuzz '^FuzzShouldRateLimit$$' -fuzztime $(FUZZTIME)
	$(GO) test ./xdsconfig -run '^$$' -fuzz '^FuzzResource$$' -fuzztime $(FUZZTIME)
	$(GO) test ./persist -run '^$$' -fuzz '^FuzzRestore$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/protoconv -run '^$$' -fuzz '^FuzzDecodeReplicateMatchesVT$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/protoconv -run '^$$' -fuzz '^FuzzDecodeForwardResponseMatchesVT$$' -fuzztime $(FUZZTIME)

# protoc comes from Debian (protobuf-compiler); the Go plugins are pinned as
# tools in go.mod, so regeneration is reproducible.
tools:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)

proto: tools
	protoc -I $(PROTO_DIR) \
		--plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
		--plugin=protoc-gen-go-grpc=$$($(GO) tool -n protoc-gen-go-grpc) \
		--go_out=$(PROTO_DIR) --go_opt=paths=source_relative \
		--go-grpc_out=$(PROTO_DIR) --go-grpc_opt=paths=source_relative \
		--plugin=protoc-gen-go-vtproto=$$($(GO) tool -n protoc-gen-go-vtproto) \
		--go-vtproto_out=$(PROTO_DIR) --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size \
		$(PROTOS)

# Fails when the committed generated code differs from what `make proto` makes.
proto-check: proto
	@git diff --exit-code -- $(PROTO_DIR) || (echo "generated code is stale: run make proto and commit" >&2; exit 1)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# A 3-node cluster on loopback in the foreground; Ctrl-C stops every node.
run: build
	./scripts/run-local.sh $(BIN)

clean:
	rm -rf bin

# A 3-node cluster against Redis + the seeds' Lua scripts on this machine:
# throughput, latency, CPU per check and memory per key (docs/benchmarks.md). About 11 min;
# BENCH_REPEATS, BENCH_DURATION and BENCH_OUT tune it.
bench-compare:
	GO=$(GO) ./scripts/bench-compare.sh

# What a forwarding hop costs as the cluster grows: N = 1, 3, 5, 7 nodes
# (GOMAXPROCS=1 each), unary checks to a random node and to the owner, CPU
# per check of every process, forward batch sizes, the hop per forwarded
# check, a chart (docs/benchmarks.md, "Scaling out"). About 6 min;
# BENCH_SCALE_NODES, BENCH_REPEATS, BENCH_DURATION, BENCH_WORKERS and
# BENCH_OUT tune it.
bench-scale:
	GO=$(GO) ./scripts/bench-scale.sh

# The hop between two processes: two nodes pinned to a core each, the hop
# per forwarded message and per forwarded check beside a raw TCP, a gRPC
# stream and a unary gRPC round trip, and where it goes (profiles);
# docs/benchmarks.md, "The hop between two processes". About 3 min;
# BENCH_WORKERS, BENCH_REPEATS, BENCH_DURATION, BENCH_PIN and BENCH_OUT.
bench-hop:
	GO=$(GO) ./scripts/hop-bench.sh

# What replication costs: 3 nodes with --replication-factor 0 against 1,
# interleaved, owner-routed checks over uniform keys, the nodes' CPU per
# check; BENCH_BINS="base=/path/to/old head=bin/peerlimit-node" compares
# builds (docs/benchmarks.md, "Replicas: what a round costs"). About 2 min
# per build; BENCH_COALESCE, BENCH_REPEATS, BENCH_DURATION, BENCH_OUT.
bench-replica:
	GO=$(GO) ./scripts/replica-bench.sh

# jepsen-lite: every chaos scenario against real node processes on
# 127.0.0.11.., with kills, pauses, iptables partitions (needs root;
# otherwise those are reported as skipped), scaling, full restarts and slow links (the delayer, also root). About 10 min;
# the report, charts, histories and node logs go to CHAOS_OUT.
CHAOS_PROFILE ?= full
CHAOS_OUT     ?= out/chaos
chaos: build
	$(GO) run ./jepsen-lite/cmd/jepsen-lite -bin $(BIN) -profile $(CHAOS_PROFILE) -out $(CHAOS_OUT)

# The simulation: SEEDS seeds from FROM of the whole cluster on simulated
# time (package sim), shared out over the cores; a failing seed says how
# to replay it (make sim SEED=n). About 3 min for 1,000 seeds on an idle
# 2-core machine (500 in 95 s, 2026-11-29; docs/chaos.md, "Simulation").
SEEDS ?= 1000
FROM  ?= 1
SEED  ?= 0
sim:
	$(GO) test -count=1 -timeout 0 -run TestSimulation ./sim -sim.hunt -sim.seeds $(SEEDS) -sim.from $(FROM) -sim.seed $(SEED)

# The container image: the static binary on an empty base (Dockerfile), so
# the build needs no image pull. IMAGE names it.
IMAGE ?= peerlimit:dev
# Each rebuild untags the previous image; only those (dangling, our label) are pruned.
image: build
	docker build -q -t $(IMAGE) --label org.opencontainers.image.revision=$$(git rev-parse HEAD 2>/dev/null || echo unknown) .
	@docker image prune -f --filter label=org.opencontainers.image.title=peerlimit-node >/dev/null

# docker-compose.yml's 3-node cluster: up, converge, smoke test, a real
# Prometheus checking the dashboard's queries and the alert rules, kill a
# node, jepsen-lite's short profile, always torn down (scripts/compose-test.sh). Needs a Docker engine
# and docker compose or docker-compose.
compose-test: image
	IMAGE=$(IMAGE) ./scripts/compose-test.sh
