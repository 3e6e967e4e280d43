"""Tables and the loss-vs-bytes plot of docs/results/demo.md, from what
`lowcomm compare` wrote into a results directory.

    python3 scripts/demo_results.py docs/results/demo/2x2 [BASELINE]
    python3 scripts/demo_results.py DIR1,DIR2,... [BASELINE]   # one table over several comparisons

Several directories (comma-separated) are read as one comparison: the runs
of each, the plot and the table written into the first.

Reads DIR/curves.csv (method,step,tokens,wall_s,loss), DIR/summary.md (val
loss, compression) and, while the run directories are there, every
DIR/runs/*/events.jsonl (the spans: bytes and seconds per link tier); it
writes DIR/bytes.csv (per method and round: bytes sent between nodes and
inside nodes so far, all workers) and DIR/loss_vs_inter_bytes.svg, and
prints one markdown table. Once runs/ is deleted it reads DIR/bytes.csv
back instead (the exchange-time column then needs the runs).

BASELINE is a method of the comparison (default: the first one). Columns:
- loss: training loss, 10-round moving average of the mean over workers
  (as `lowcomm compare`), at the end; val: validation loss at the end;
- loss @ t: the smoothed loss at the virtual time when the first run ended
  (every curve reaches it);
- s/step: virtual seconds per step (run time / steps);
- exch s/step: seconds per step a worker spends in communication between
  nodes (the replicator's exchange), mean over workers;
- inter MB/step: bytes of the trained model sent between nodes per step,
  all workers together (the compressed exchange; costed as the [timing]
  model's, the time scales them); compression: the exchange's payload over
  an f32 gradient, from summary.md;
- time to base: virtual seconds to reach the baseline's final smoothed
  loss, and that over the baseline's own.
"""
import csv
import glob
import json
import math
import os
import sys
from collections import defaultdict

W = 10


def smooth(xs):
    return [sum(xs[max(0, i - W + 1):i + 1]) / (i - max(0, i - W + 1) + 1) for i in range(len(xs))]


def label(m):
    """A short name: `flexdemo:replicator=random:compression=0.05` -> `random c=0.05`."""
    name, *kvs = m.split(":")
    kv = dict(x.split("=", 1) for x in kvs)
    if name != "flexdemo":
        return m
    rep = kv.pop("replicator", "demo")
    if rep == "full" and kv.get("inner") == "decoupled-adamw" and kv.get("sign") == "false":
        kv.pop("inner"), kv.pop("sign")
        rep = "full (hybrid AdamW)"
    parts = [rep]
    if "compression" in kv:
        parts.append("c=" + kv.pop("compression"))
    if kv.pop("inner", "sgd") == "decoupled-adamw":
        parts.append("Decoupled AdamW")
    if kv.pop("sign", "true") == "false":
        parts.append("no sign")
    if kv.pop("overlap", "false") == "true":
        parts.append("overlap")
    parts += [f"{k}={v}" for k, v in kv.items()]
    return " ".join(parts)


def summary_rows(d):
    """method -> {val, compression} from summary.md's first and last tables."""
    out = defaultdict(dict)
    for line in open(os.path.join(d, "summary.md")):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 14 and cells[1].isdigit():
            out[cells[0]]["val"] = float(cells[4])
        if len(cells) == 6 and cells[0] in out:
            out[cells[0]]["compression"] = cells[5]
    return out


def bytes_per_rounds(dirs, by_dir):
    """bytes_per_round over several directories (`by_dir`: dir -> its methods)."""
    per, exch = {}, {}
    for d in dirs:
        p, e = bytes_per_round(d, by_dir[d])
        per.update(p)
        exch.update(e)
    return per, exch


def bytes_per_round(d, methods):
    """method -> [(step, inter bytes so far, intra bytes so far)], inter exchange seconds per worker-step."""
    path = os.path.join(d, "bytes.csv")
    runs = os.path.join(d, "runs")
    per, exch = {}, {}
    if os.path.isdir(runs):
        rows = ["method,step,inter_bytes,intra_bytes\n"]
        for m in methods:
            ev = os.path.join(runs, m.replace(":", "_").replace("=", "_").replace("/", "_"), "events.jsonl")
            inter, intra, secs, world = defaultdict(int), defaultdict(int), 0.0, 1
            for line in open(ev):
                s = json.loads(line)
                if s["record"] == "summary":
                    world = s["world"]
                if s["record"] != "span" or s["lane"] != "comm":
                    continue
                if s.get("tier") == "inter":
                    inter[s["round"]] += s["bytes"]
                    secs += s["end_s"] - s["start_s"]
                elif s.get("tier") == "intra":
                    intra[s["round"]] += s["bytes"]
            steps = max(r["step"] for r in curves[m])
            ci = ca = 0
            per[m] = []
            for r in range(steps):
                ci, ca = ci + inter[r], ca + intra[r]
                per[m].append((r + 1, ci, ca))
                rows.append(f"{m},{r + 1},{ci},{ca}\n")
            exch[m] = secs / world / steps
        with open(path, "w") as f:
            f.writelines(rows)
    else:
        for row in csv.DictReader(open(path)):
            per.setdefault(row["method"], []).append(
                (int(row["step"]), int(row["inter_bytes"]), int(row["intra_bytes"])))
    return per, exch


COLORS = ["#d62728", "#1f77b4", "#aec7e8", "#2ca02c", "#98df8a", "#ff7f0e", "#ffbb78", "#9467bd", "#c5b0d5",
          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000"]


def svg_plot(path, title, xlabel, series, logx):
    """A line plot of `series` [(name, [(x, y)])], x on a log10 axis if `logx`."""
    W_, H, L, R, T, B = 900, 520, 70, 290, 40, 50
    fx = (lambda x: math.log10(x)) if logx else (lambda x: x)
    pts = [(fx(x), y) for _, p in series for x, y in p if (x > 0 or not logx)]
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)
    sx = lambda x: L + (fx(x) - x0) / (x1 - x0) * (W_ - L - R)
    sy = lambda y: T + (y1 - y) / (y1 - y0) * (H - T - B)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W_}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W_}" height="{H}" fill="white"/>',
         f'<text x="{W_ / 2 - 100}" y="22" font-size="15">{title}</text>',
         f'<rect x="{L}" y="{T}" width="{W_ - L - R}" height="{H - T - B}" fill="none" stroke="#444"/>',
         f'<text x="{L + 200}" y="{H - 12}">{xlabel}</text>',
         f'<text x="14" y="{T + 150}" transform="rotate(-90 14 {T + 150})">training loss (10-round mean)</text>']
    for i in range(6):
        yv = y0 + (y1 - y0) * i / 5
        o.append(f'<text x="{L - 44}" y="{sy(yv) + 4:.1f}">{yv:.2f}</text>')
        xv = x0 + (x1 - x0) * i / 5
        xt = f"{10 ** xv:.3g}" if logx else f"{xv:.3g}"
        o.append(f'<text x="{L + (xv - x0) / (x1 - x0) * (W_ - L - R) - 14:.1f}" y="{H - B + 16}">{xt}</text>')
    for i, (name, p) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        dash = ' stroke-dasharray="6,3"' if "Decoupled" in name or "no sign" in name or "overlap" in name else ""
        d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in p if (x > 0 or not logx))
        o.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5"{dash} points="{d}"/>')
        o.append(f'<line x1="{W_ - R + 10}" x2="{W_ - R + 40}" y1="{T + 10 + 18 * i}" y2="{T + 10 + 18 * i}" '
                 f'stroke="{c}" stroke-width="2"{dash}/>')
        o.append(f'<text x="{W_ - R + 46}" y="{T + 14 + 18 * i}">{name}</text>')
    o.append("</svg>\n")
    with open(path, "w") as f:
        f.write("\n".join(o))


def main():
    global curves
    dirs = sys.argv[1].split(",")
    d = dirs[0]
    curves = defaultdict(list)
    by_dir, summ = defaultdict(list), {}
    for dd in dirs:
        for row in csv.DictReader(open(os.path.join(dd, "curves.csv"))):
            if row["method"] not in by_dir[dd]:
                by_dir[dd].append(row["method"])
            curves[row["method"]].append({"step": int(row["step"]), "tokens": int(row["tokens"]),
                                          "t": float(row["wall_s"]), "loss": float(row["loss"])})
        summ.update(summary_rows(dd))
    methods = list(curves)
    base = sys.argv[2] if len(sys.argv) > 2 else methods[0]
    per, exch = bytes_per_rounds(dirs, by_dir)
    sm = {m: smooth([r["loss"] for r in c]) for m, c in curves.items()}
    target = sm[base][-1]
    t_first = min(c[-1]["t"] for c in curves.values())

    def reach(m):
        return next((r["t"] for r, s in zip(curves[m], sm[m]) if s <= target), None)

    def at_time(m, t):
        return next((s for r, s in zip(curves[m], sm[m]) if r["t"] >= t), sm[m][-1])

    tb = reach(base)
    print(f"baseline: {label(base)} (final smoothed loss {target:.4f}); loss @ t = {t_first:.1f} s, "
          f"when the first run ended\n")
    print("| method | steps | tokens | loss | val | loss @ t | s/step | exch s/step | inter MB/step | compression "
          "| time to base (s) | vs base |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in methods:
        c = curves[m]
        steps = c[-1]["step"]
        r = reach(m)
        inter = per[m][-1][1] / steps / 1e6 if m in per else float("nan")
        ex = f"{exch[m]:.4f}" if m in exch else "-"
        print(f"| {label(m)} | {steps} | {c[-1]['tokens']} | {sm[m][-1]:.4f} | {summ[m].get('val', float('nan')):.4f} "
              f"| {at_time(m, t_first):.4f} | {c[-1]['t'] / steps:.4f} | {ex} | {inter:.3f} "
              f"| {summ[m].get('compression', '-')} | {'-' if r is None else f'{r:.1f}'} "
              f"| {'not reached' if r is None or not tb else f'{r / tb:.2f}x'} |")
    series = []
    for m in methods:
        if m in per:
            pts = [(b, s) for (_, b, _), s in zip(per[m], sm[m])]
            series.append((label(m), pts))
    svg_plot(os.path.join(d, "loss_vs_inter_bytes.svg"), "training loss vs bytes sent between nodes",
             "bytes sent between nodes, all workers (log scale; runs without any exchange yet are left out)",
             series, True)
    print(f"\nwrote {d}/bytes.csv, {d}/loss_vs_inter_bytes.svg")


if __name__ == "__main__":
    main()
