"""The scaling table of docs/results/demo.md (exchange vs nodes, paper Fig. 6),
from the summary.md files that `bash scripts/demo_run.sh scaling` writes:

    python3 scripts/demo_scaling.py docs/results/demo/scaling/{2,4,8}x2

For each method and node count: virtual seconds per round, communication
seconds per round (m, mean over workers), bytes per worker per round between
nodes and in all, the exchange payload and its compression (all from
`lowcomm compare`'s tables; bytes are the trained nano model's, times are
costed as GPT-Neo-125M by the cluster profile's [timing]).
"""
import os
import sys


def tables(path):
    """Rows of every markdown table in summary.md, by first cell, per table index."""
    out, idx, prev = [], -1, False
    for line in open(path):
        is_row = line.startswith("|")
        if is_row and not prev:
            idx += 1
            out.append({})
        if is_row:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            out[idx][cells[0]] = cells
        prev = is_row
    return out


rows = []
for d in sys.argv[1:]:
    nodes = os.path.basename(d.rstrip("/")).split("x")[0]
    t = tables(os.path.join(d, "summary.md"))
    for m, r in t[1].items():
        if m in ("method",) or m.startswith("---"):
            continue
        b = t[2][m]
        rows.append((m, int(nodes), r[1], r[3], b[1], b[3], b[4], b[5]))
print("| method | nodes | round (s) | m (s) | between nodes per worker (kB) | all per worker (kB) | exchange payload (B) | compression |")
print("|---|---|---|---|---|---|---|---|")
for m, n, rnd, comm, allk, inter, pay, comp in sorted(rows, key=lambda r: (r[0], r[1])):
    print(f"| {m} | {n} | {rnd} | {comm} | {inter} | {allk} | {pay} | {comp} |")
