#!/usr/bin/env python3
"""One table over several seeds of the same `lowcomm compare` (docs/results/co2.md, experiments 1 and 4).

    python3 scripts/co2_seeds.py docs/results/co2-8w-slow-link docs/results/co2-8w-slow-link/seed1 \
      docs/results/co2-8w-slow-link/seed2
    python3 scripts/co2_seeds.py docs/results/co2-ablation docs/results/co2-8w-slow-link/seed1 \
      docs/results/co2-8w-slow-link/seed2

Reads each directory's summary.md (the table compare printed) and prints, per method found in every
directory, the final training loss and the validation loss of each seed, their mean and their spread
(max - min). Two methods whose ranges overlap are a tie at this number of seeds.
"""
import sys


def table(path):
    rows = {}
    head = None
    for line in open(f"{path}/summary.md"):
        if not line.startswith("|"):
            if head:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if head is None:
            head = cells
        elif not set(cells[0]) <= set("- "):
            r = dict(zip(head, cells))
            rows[r["method"]] = (float(r["final train loss"]), float(r["val loss"]))
    return rows


def main():
    dirs = sys.argv[1:]
    tables = [table(d) for d in dirs]
    methods = [m for m in tables[0] if all(m in t for t in tables)]
    print(f"seeds: {len(dirs)} ({', '.join(dirs)})\n")
    print("| method | final train loss per seed | mean (spread) | val loss per seed | mean (spread) |")
    print("|---|---|---|---|---|")
    for m in methods:
        cols = []
        for k in (0, 1):
            xs = [t[m][k] for t in tables]
            cols.append(" / ".join(f"{x:.4f}" for x in xs))
            cols.append(f"{sum(xs) / len(xs):.4f} ({max(xs) - min(xs):.4f})")
        print(f"| {m} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
