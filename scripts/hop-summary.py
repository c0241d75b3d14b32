#!/usr/bin/env python3
"""The table of scripts/hop-bench.sh: from its runs.tsv and profiles, the
hop per forwarded message and per forwarded check beside the floors (a raw
TCP, a gRPC stream and a gRPC unary round trip between two processes), and
where the hop's CPU goes. Usage: hop-summary.py RESULTS_DIR."""

import os
import re
import statistics
import sys


def load(out):
    rows = []
    with open(os.path.join(out, "runs.tsv")) as f:
        head = f.readline().rstrip("\n").split("\t")
        for line in f:
            rows.append(dict(zip(head, line.rstrip("\n").split("\t"))))
    return rows


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def node_run(r):
    ops = int(r["ops"])
    calls, seen = int(r["fwd_calls"]), int(r["node_checks"])
    return dict(rep=r["tag"].split(".", 1)[1], tput=float(r["ops_per_s"]), p99=float(r["p99_us"]),
                cpu=float(r["cpu_s"]) * 1e6 / ops if ops else None,
                share=int(r["fwd_ok"]) / seen if seen else None,
                batch=int(r["fwd_checks"]) / calls if calls else None, errors=int(r["errors"]))


# A profile's leaf functions, grouped by what they are. The runtime's own
# system calls (futex, epoll, nanosleep) are wake-ups: they are counted
# with the scheduler, not with the reads and writes of the sockets.
GROUPS = [
    ("socket reads and writes (system calls)", re.compile(r"^(syscall\.|internal/runtime/syscall|runtime/internal/syscall|internal/poll\.)")),
    ("wake-ups: scheduler, futex, epoll, timers", re.compile(r"^runtime\.(futex|selectgo|epollwait|netpoll|usleep|nanosleep|osyield|findRunnable|schedule|park_m|ready|wakep|startm|stopm|notesleep|notewakeup|runqgrab|stealWork|checkTimers|mcall|gopark|goready|casgstatus|execute|gogo|lock2|unlock2|resetspinning|runtimer|siftdown|siftup|nanotime|walltime|procyield|exitsyscall|entersyscall|reentersyscall|morestack|systemstack|.*[Ss]ched)"),),
    ("memory and GC", re.compile(r"^runtime\.|^internal/runtime/")),
    ("gRPC and HTTP/2", re.compile(r"^(google\.golang\.org/grpc|golang\.org/x/net/http2)")),
    ("encoding (protobuf)", re.compile(r"^(google\.golang\.org/protobuf|github\.com/planetscale/vtprotobuf|github\.com/peerlimit/peerlimit/proto/)|(Marshal|Unmarshal|Size)VT")),
    ("peerlimit's own code", re.compile(r"^github\.com/peerlimit/")),
    ("other standard library", re.compile(r".")),
]


def profile_groups(path):
    """ms of samples per group in one `go tool pprof -traces`: each sample
    goes to its leaf function's group, except that a system call made by
    the network poller (epoll) is a wake-up, not a socket read or write."""
    got = {name: 0.0 for name, _ in GROUPS}
    unit = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3}
    blocks = open(path).read().split("-----------+-------------------------------------------------------")[1:]
    for block in blocks:
        lines = [l.strip() for l in block.strip().splitlines() if l.strip()]
        m = re.match(r"^([\d.]+)(ns|us|µs|ms|s)\s+(\S+)", lines[0]) if lines else None
        if not m:
            continue
        ms, stack = float(m[1]) * unit[m[2]], [m[3]] + lines[1:]
        leaf = stack[0]
        if GROUPS[0][1].search(leaf) and any("netpoll" in f or "Epoll" in f for f in stack):
            leaf = "runtime.netpoll"
        for name, rx in GROUPS:
            if rx.search(leaf):
                got[name] += ms
                break
    return got


def fmt(x, d=1):
    return "–" if x is None else f"{x:,.{d}f}"


def main(out):
    rows = load(out)
    measured = [r for r in rows if not r["tag"].endswith(".profiled")]
    runs = {c: [node_run(r) for r in measured if r["case"] == c] for c in ("random", "owner")}
    floors = {}
    for c in ("tcp", "grpc-stream", "grpc-unary"):
        xs = [r for r in measured if r["case"] == c]
        floors[c] = dict(rt=med([float(r["cpu_s"]) * 1e6 / int(r["ops"]) for r in xs]),
                         tput=med([float(r["ops_per_s"]) for r in xs]))
    # The hop per repeat, from that repeat's random and owner runs.
    owner = {d["rep"]: d for d in runs["owner"]}
    hops, msgs = [], []
    for d in runs["random"]:
        o = owner.get(d["rep"])
        if o and d["share"] and d["cpu"] is not None and o["cpu"] is not None:
            hops.append((d["cpu"] - o["cpu"]) / d["share"])
            msgs.append(hops[-1] * d["batch"] if d["batch"] else None)
    hop, msg = med(hops), med(msgs)
    batch, share = med([d["batch"] for d in runs["random"]]), med([d["share"] for d in runs["random"]])
    env = open(os.path.join(out, "env.txt")).read()
    print("Settings: " + " ".join(l for l in env.splitlines() if l.startswith(("settings:", "commit:"))))
    print()
    print("| case | per second | p99 µs | CPU µs (both processes) per check or round trip |")
    print("|---|---:|---:|---:|")
    for c in ("random", "owner"):
        print(f"| {c} node, unary checks | {fmt(med([d['tput'] for d in runs[c]]), 0)} | "
              f"{fmt(med([d['p99'] for d in runs[c]]), 0)} | {fmt(med([d['cpu'] for d in runs[c]]))} |")
    for c, f in floors.items():
        print(f"| {c} round trip | {fmt(f['tput'], 0)} | – | {fmt(f['rt'])} |")
    print()
    print(f"Forwarded share {fmt(100 * share if share else None, 0)} %, checks per forward message {fmt(batch, 2)}; "
          f"errors {sum(d['errors'] for c in runs for d in runs[c])}.")
    print()
    tcp, gs = floors["tcp"]["rt"], floors["grpc-stream"]["rt"]
    print("| the hop | µs of CPU | ÷ raw TCP round trip | ÷ gRPC stream round trip |")
    print("|---|---:|---:|---:|")
    for name, v in (("per forwarded message", msg), ("per forwarded check", hop)):
        print(f"| {name} | {fmt(v)} | {fmt(v / tcp if v and tcp else None, 2)} | {fmt(v / gs if v and gs else None, 2)} |")
    print()
    print_profile(out, rows, share, batch)


def print_profile(out, rows, share, batch):
    """Where the hop goes: each group's share of the profiled runs' node
    CPU, in µs per check, random − owner ÷ the share forwarded."""
    per_check = {}
    for route in ("random", "owner"):
        prof = [r for r in rows if r["tag"] == f"{route}.profiled"]
        paths = [os.path.join(out, f"{route}-node{i}.traces") for i in (1, 2)]
        if not prof or not all(os.path.exists(p) for p in paths):
            return
        cpu = float(prof[0]["cpu_s"]) * 1e6 / int(prof[0]["ops"])
        groups = {}
        for p in paths:
            for k, v in profile_groups(p).items():
                groups[k] = groups.get(k, 0) + v
        total = sum(groups.values()) or 1
        per_check[route] = {k: v / total * cpu for k, v in groups.items()}
    if not share:
        return
    print("Where the hop goes (CPU profiles of both nodes, one more run each; a group's share of the profile × that run's CPU per check):")
    print()
    print("| group | random µs/check | owner µs/check | hop µs per forwarded check | per forwarded message |")
    print("|---|---:|---:|---:|---:|")
    for name, _ in GROUPS:
        r, o = per_check["random"][name], per_check["owner"][name]
        h = (r - o) / share
        print(f"| {name} | {r:.1f} | {o:.1f} | {h:.1f} | {fmt(h * batch if batch else None)} |")


if __name__ == "__main__":
    main(sys.argv[1])
