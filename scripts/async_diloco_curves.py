#!/usr/bin/env python3
"""Loss per server update and per virtual second for one experiment of scripts/async_diloco_run.sh
(docs/results/async-diloco.md).

    python3 scripts/async_diloco_curves.py docs/results/async-diloco/hetero/very

Reads each run of the `lowcomm compare` directory (runs/*/metrics.jsonl and config.toml). The x axes are
the paper's (Fig. 2, 10): an update is one change of the global model, i.e. one outer step. For async
runs these are the server's points (the `server` records (kind "server", the last participant; step = updates
applied, loss = the mean inner loss of the round behind the update, end_s = when it was applied). For
sync diloco one update is one outer round of H inner steps, every worker's pseudo-gradient together:
its run-level rounds (`train` records) taken every H-th. Prints, per run, the loss (moving average of
W = 10 updates) at a few update counts, at the virtual second where the fastest run ends, and the
virtual time to reach the sync run's final loss. A run with a fault plan (experiment 5) also gets its crashes and
joins marked on its loss-vs-time curve: the `fault` records (worker, event, at_s) with the server's loss just
before and after each. Plain standard library: no plotting.
"""
import json
import os
import re
import sys

W = 10


def ma(xs, k=W):
    return [sum(xs[max(0, i - k + 1): i + 1]) / len(xs[max(0, i - k + 1): i + 1]) for i in range(len(xs))]


def read_run(d):
    cfg = open(os.path.join(d, "config.toml")).read()
    method = re.search(r'^method\s*=\s*"([^"]+)"', cfg, re.M).group(1)
    workers = int(re.search(r"^workers\s*=\s*(\d+)", cfg, re.M).group(1))
    h = re.search(r"^h\s*=\s*(\d+)", cfg, re.M)
    h = int(h.group(1)) if h else 50
    recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
    if method == "async-diloco":
        pts = [r for r in recs if r.get("kind") == "server"]
    else:
        pts = [r for r in recs if r.get("kind") == "train" and r["step"] % h == 0]
    # (update number, virtual seconds, loss)
    return [(i + 1, r.get("end_s", r.get("wall_s")), r["loss"]) for i, r in enumerate(pts)]


def read_faults(d):
    """The run's crash and join records (kind "fault"), by time."""
    recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
    return sorted((r for r in recs if r.get("kind") == "fault"), key=lambda r: r["at_s"])


def at_time(curve, t):
    seen = [p for p in curve if p[1] <= t]
    return seen[-1] if seen else None


def main():
    root = sys.argv[1]
    runs, faults = {}, {}
    for name in sorted(os.listdir(os.path.join(root, "runs"))):
        d = os.path.join(root, "runs", name)
        if os.path.exists(os.path.join(d, "metrics.jsonl")):
            c = read_run(d)
            if c:
                runs[name] = [(u, t, l) for (u, t, _), l in zip(c, ma([p[2] for p in c]))]
                faults[name] = read_faults(d)
    if not runs:
        sys.exit(f"no finished runs under {root}/runs")
    t_end = min(c[-1][1] for c in runs.values())
    n_min = min(len(c) for c in runs.values())
    marks = sorted({max(1, n_min // 4), max(1, n_min // 2), n_min})
    sync = next((c for n, c in runs.items() if n.startswith("diloco")), None)
    target = sync[-1][2] if sync else None
    head = " | ".join(f"loss at update {m}" for m in marks)
    print(f"| run | updates | {head} | loss at {t_end:.1f} virtual s | s to sync's final loss |")
    print("|---|---|" + "---|" * len(marks) + "---|---|")
    for name, c in runs.items():
        by_n = " | ".join(f"{c[m - 1][2]:.4f}" for m in marks)
        p = at_time(c, t_end)
        reach = next((t for _, t, l in c if target is not None and l <= target), None)
        print(
            f"| {name} | {len(c)} | {by_n} | {p[2]:.4f} | " + (f"{reach:.1f}" if reach is not None else "not reached") + " |"
        )
    # Crash and join marks on the loss-vs-time curve: loss (moving average) at the last update before and the
    # first after each event.
    for name, fs in faults.items():
        if not fs:
            continue
        print(f"\n{name}: crashes and joins on its loss-vs-time curve")
        print("| worker | event | at s | acted at s | loss before | loss after |")
        print("|---|---|---|---|---|---|")
        c = runs[name]
        for f in fs:
            before = at_time(c, f["at_s"])
            after = next((p for p in c if p[1] > f["at_s"]), None)
            fmt = lambda p: f"{p[2]:.4f} (update {p[0]})" if p else "-"
            print(f"| {f['worker']} | {f['event']} | {f['at_s']:g} | {f['observed_s']:.2f} | {fmt(before)} | {fmt(after)} |")


if __name__ == "__main__":
    main()
