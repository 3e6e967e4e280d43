#!/usr/bin/env python3
"""Whether a compare's order holds over the run: each method's training loss at 50%, 75% and
100% of its tokens, mean over seeds (docs/results/reproductions.md, async at 500 steps).

    python3 scripts/order_over_run.py results/reproduce-500/async/compare/curves.csv

Reads the curves.csv `lowcomm compare --seeds N` writes (method,step,tokens,wall_s,loss,...,seed);
each seed's loss is the mean of its last 10 points at or before the fraction of its final token
count (summary.md's smoothing), then the mean and the spread (max - min) over seeds. Prints the
methods best first at each fraction.
"""
import csv
import statistics
import sys
from collections import defaultdict

W = 10


def main(path):
    curves = defaultdict(lambda: defaultdict(list))
    for r in csv.DictReader(open(path)):
        curves[r["method"]][r.get("seed", "")].append((int(r["tokens"]), float(r["loss"])))
    for frac in (0.5, 0.75, 1.0):
        rows = []
        for method, seeds in curves.items():
            per_seed = []
            for pts in seeds.values():
                upto = [loss for t, loss in pts if t <= frac * pts[-1][0]]
                per_seed.append(statistics.mean(upto[-W:]))
            rows.append((statistics.mean(per_seed), max(per_seed) - min(per_seed), method))
        print(f"{frac:.0%} of the tokens: " + "; ".join(f"{m} {v:.3f} (spread {s:.3f})" for v, s, m in sorted(rows)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else sys.exit(__doc__))
