#!/usr/bin/env python3
"""The model of docs/benchmarks.md, "A model of the hop as the cluster
grows": CPU per check on a random node as N grows, from costs measured in
the two-process frame, checked against bench-scale's measured points.

    hop-model.py [--load CHECKS_PER_S] HOP_DIR_FEW HOP_DIR_MANY [SCALE_DIR]

HOP_DIR_FEW and HOP_DIR_MANY are two runs of scripts/hop-bench.sh with
different BENCH_WORKERS, so with different batch sizes; SCALE_DIR a run of
scripts/bench-scale.sh (its uniform rows are checked).

The model. A node's clients bring it L checks/s; a random node owns 1/N of
them and forwards the rest, f = (N−1)/N, over N−1 links, so each link
carries r = L/N checks/s. A link sends one batch at a time (group commit,
peerrpc's MaxInflight = 1), so a batch carries what arrived while the one
before was out: b = 1 + r·T, T the time a batch is out. A forwarded
message costs both nodes m µs of CPU whatever it carries, and each check
in it k µs more. So

    CPU per check (random) = c + f·(k + m/b)

where c is a check decided where it arrives (the owner route's cost).
The two frames give m and k (two batch sizes, two equations) and T
((b − 1)/r of the frame's own links).
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib  # noqa: E402

hop_summary = importlib.import_module("hop-summary")


def frame(d):
    """c, hop per forwarded check, batch, and T (s) from one hop-bench run."""
    rows = [r for r in hop_summary.load(d) if not r["tag"].endswith(".profiled")]
    runs = {c: [hop_summary.node_run(r) for r in rows if r["case"] == c] for c in ("random", "owner")}
    owner = {x["rep"]: x for x in runs["owner"]}
    hops, ts = [], []
    for x in runs["random"]:
        o = owner.get(x["rep"])
        if not (o and x["share"] and x["batch"]):
            continue
        hops.append((x["cpu"] - o["cpu"]) / x["share"])
        # Two links, one each way, share the forwarded checks.
        r = x["tput"] * x["share"] / 2
        ts.append((x["batch"] - 1) / r if r else None)
    med = statistics.median
    return dict(c=med([x["cpu"] for x in runs["owner"]]), hop=med(hops),
                batch=med([x["batch"] for x in runs["random"]]), T=med([t for t in ts if t is not None]))


def scale_points(d):
    """{N: (c_owner, c_random, forwarded share, batch, checks/s per node)}, uniform keys, medians."""
    import json
    lines = list(open(os.path.join(d, "runs.tsv")))[1:]
    got = {}
    for line in lines:
        f = line.rstrip("\n").split("\t")
        n, rep, route, dist = int(f[0]), f[1], f[2], f[3]
        if dist != "uniform" or n < 2:
            continue
        r = json.load(open(os.path.join(d, f"n{n}-{route}-{dist}.r{rep}.json")))
        cpu = float(f[4]) * 1e6 / r["checks"]
        fc, fn, fok, seen = (int(x) if x.isdigit() else 0 for x in f[5:9])
        got.setdefault((n, route), []).append((cpu, fok / seen if seen else None, fc / fn if fn else None, r["checks_per_s"] / n))
    med = lambda xs: statistics.median([x for x in xs if x is not None])
    pts = {}
    for n in sorted({n for n, _ in got}):
        o, r = got.get((n, "owner")), got.get((n, "random"))
        if o and r:
            pts[n] = (med([x[0] for x in o]), med([x[0] for x in r]), med([x[1] for x in r]), med([x[2] for x in r]), med([x[3] for x in r]))
    return pts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--load", type=float, default=10000, help="checks/s each node's clients bring it, for the prediction")
    ap.add_argument("few")
    ap.add_argument("many")
    ap.add_argument("scale", nargs="?")
    a = ap.parse_args()
    f1, f2 = frame(a.few), frame(a.many)
    if abs(1 / f1["batch"] - 1 / f2["batch"]) < 0.05:
        sys.exit("the two frames' batches are too alike (%.2f, %.2f) to tell m from k" % (f1["batch"], f2["batch"]))
    m = (f1["hop"] - f2["hop"]) / (1 / f1["batch"] - 1 / f2["batch"])
    k = f1["hop"] - m / f1["batch"]
    T = statistics.median([x for x in (f1["T"], f2["T"]) if x])
    c = f1["c"]
    print(f"Frame: batches {f1['batch']:.2f} and {f2['batch']:.2f}, hop per forwarded check {f1['hop']:.1f} and {f2['hop']:.1f} µs.")
    print(f"So m = {m:.1f} µs per forwarded message, k = {k:.1f} µs per forwarded check in it, "
          f"T = {T * 1e6:.0f} µs a batch is out; c = {c:.1f} µs for a check decided where it arrives.")
    print()
    if a.scale:
        print("Checked against bench-scale (uniform keys; its own c, share, batch and load per node):")
        print()
        print("| N | measured CPU µs/check, random | predicted with its batch | batch measured | batch predicted (1 + r·T) |")
        print("|---:|---:|---:|---:|---:|")
        for n, (co, cr, share, b, load) in scale_points(a.scale).items():
            pred = co + share * (k + m / b)
            print(f"| {n} | {cr:.1f} | {pred:.1f} ({(pred / cr - 1) * 100:+.0f} %) | {b:.2f} | {1 + load / n * T:.2f} |")
        print()
    print(f"Predicted at {a.load:,.0f} checks/s per node, c = {c:.1f} µs (a node per machine: c does not grow with N):")
    print()
    print("| N | forwarded | per-link checks/s | batch | CPU µs/check, random | ÷ owner |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in (3, 5, 7, 10, 20, 50, 100):
        f, r = (n - 1) / n, a.load / n
        b = 1 + r * T
        cpu = c + f * (k + m / b)
        print(f"| {n} | {f * 100:.0f} % | {r:,.0f} | {b:.2f} | {cpu:.1f} | {cpu / c:.2f} |")


if __name__ == "__main__":
    main()
