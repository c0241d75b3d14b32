#!/usr/bin/env python3
"""The forwarded share of checks on Zipf traffic, on paper
(docs/benchmarks.md, "How low leases can take the forwarded share").

A node receives R checks/s (every node alike) over K keys drawn Zipf(s):
key k has p_k = k^-s / H, so this node sees it at r_k = R p_k, as a
Poisson stream. 1/N of the keys are the node's own; a check of any other
key is forwarded unless a lease covers it. A forward that asks for a
lease covers the key for d seconds, so a key forwards 1/(d + 1/r) times a
second: its share forwarded is 1 / (1 + r d).

- peerlimit's policy (lease.Config): a key is leased once r >= MinHits /
  MaxDuration (and r >= MinRate), for d = clamp(MinHits / r, Duration,
  MaxDuration); below that every check is forwarded.
- the floor of any lease that a node must ask for per key: every forward
  brings a lease of d = D seconds, whatever the rate and however many hits
  (no budget held back, no threshold). No per-key lease does better.

Usage: zipf-floor.py [R [N [K [s]]]]   (defaults 6000 3 1000000 1.1)
"""
import sys

R = float(sys.argv[1]) if len(sys.argv) > 1 else 6000.0
N = int(sys.argv[2]) if len(sys.argv) > 2 else 3
K = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
S = float(sys.argv[4]) if len(sys.argv) > 4 else 1.1

weights = [k ** -S for k in range(1, K + 1)]
H = sum(weights)
rates = [R * w / H for w in weights]
remote = (N - 1) / N


def share(forwarded_fraction):
    """The share of this node's checks forwarded, given each key's."""
    return remote * sum(r * forwarded_fraction(r) for r in rates) / R


def policy(min_hits=8, duration=0.25, max_duration=5.0, min_rate=1.0):
    def f(r):
        if r < max(min_hits / max_duration, min_rate):
            return 1.0
        d = min(max(min_hits / r, duration), max_duration)
        return 1 / (1 + r * d)
    return f


def below(threshold):
    return sum(r for r in rates if r < threshold) / R


print(f"R = {R:,.0f} checks/s per node, N = {N}, Zipf s = {S} over {K:,} keys")
print(f"checks of keys this node sees below 1.6/s: {below(1.6):.1%}; below 0.2/s: {below(0.2):.1%}; below 1/min: {below(1/60):.1%}")
print()
print("| lease rule | forwarded share |")
print("|---|---:|")
print(f"| none | {remote:.1%} |")
print(f"| peerlimit's defaults (8 hits, 250 ms to 5 s, from 1.6/s) | {share(policy()):.1%} |")
for mx in (30.0,):
    print(f"| the same, --lease-max-duration {mx:.0f}s (from {8/mx:.2f}/s) | {share(policy(max_duration=mx)):.1%} |")
for D in (5, 30, 60, 300):
    print(f"| floor: every forward brings a lease of {D} s, any hits | {share(lambda r, D=D: 1 / (1 + r * D)):.1%} |")
