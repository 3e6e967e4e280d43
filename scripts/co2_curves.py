#!/usr/bin/env python3
"""Loss per token and per virtual second from a `lowcomm compare` curves.csv (docs/results/co2.md, experiment 1).

    python3 scripts/co2_curves.py docs/results/co2-8w-slow-link/curves.csv

Prints, per method, the training loss (10-step moving average of curves.csv's loss, as summary.md's) at
a few token counts, and at the virtual time where the fastest method ends (every method has run until
then or longer, so all are compared at the same virtual second).
"""
import csv
import sys


def ma(xs, k=10):
    return [sum(xs[max(0, i - k + 1): i + 1]) / len(xs[max(0, i - k + 1): i + 1]) for i in range(len(xs))]


def main():
    rows = {}
    for r in csv.DictReader(open(sys.argv[1])):
        rows.setdefault(r["method"], []).append((int(r["tokens"]), float(r["wall_s"]), float(r["loss"])))
    for m in rows:
        rows[m].sort()
    t_end = min(v[-1][1] for v in rows.values())
    marks = [v for v in (rows[next(iter(rows))][i][0] for i in (99, 199, 299)) ]
    print(f"| method | loss at {marks[0]} tokens | at {marks[1]} | at {marks[2]} | virtual time to the end (s) | loss at {t_end:.2f} virtual s |")
    print("|---|---|---|---|---|---|")
    for m, v in rows.items():
        loss = ma([x[2] for x in v])
        at_tok = [loss[[x[0] for x in v].index(t)] for t in marks]
        i = max(j for j, x in enumerate(v) if x[1] <= t_end + 1e-9)
        print(f"| {m} | " + " | ".join(f"{x:.4f}" for x in at_tok) + f" | {v[-1][1]:.2f} | {loss[i]:.4f} (step {i + 1}) |")


if __name__ == "__main__":
    main()
