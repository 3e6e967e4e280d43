#!/usr/bin/env python3
"""Do slow micro-batches come in stretches? The real runs' lag-1 correlation
against calibrate's, and what it costs two ranks that meet every round
(docs/results/planner-accuracy.md, finding 25).

    python3 scripts/micro_batch_stretches.py docs/results/planner-accuracy/long-{e,f,g,h,i,j}

For every RUN/SETTING/real/runs/METHOD/events.jsonl of the methods that
block on a collective every round (local-sgd and diloco:h=12, 2 workers;
bench/netns/planner_accuracy.sh makes them), per worker: the micro-batch's
cv (sd over mean) and lag-1 correlation (each worker's series on its own
mean, corrected for that mean's bias as calibrate/correlation.rs does);
per round, how far apart the two workers' computations ended, E|S0 - S1|,
measured and as the simulator would draw it from independent micro-batches
(2 sqrt(K / pi) sd, K the micro-batches between two all-reduces) and from correlated ones at the runs' own correlation
(2 sd(K, rho) sd / sqrt(pi), sim/straggle.rs sum_sd). The last column is the
correlation the setting's calibrate measured (profile.toml's
micro_batch_correlation; '-' for a profile older than it).
The runs/ folders are not committed: run bench/netns/planner_accuracy.sh first.
"""
import bisect
import math
import re
import statistics
import sys
from pathlib import Path

from async_exchange import BIG, all_spans, micro_batches

BLOCKING = {"local-sgd": "local-sgd", "diloco_h_12": "diloco:h=12"}
PROFILE_RHO = r"\nmicro_batch_correlation = (?P<rho>[-\d.e+]+)"


def lag1(series):
    """(raw, corrected) pooled lag-1 correlation of lists, each on its own mean
    (calibrate/correlation.rs: corrected (n r + 1)/(n - 3), clamped to [0, 0.95])."""
    num = den = 0.0
    n = 0
    for s in series:
        m = statistics.mean(s)
        d = [x - m for x in s]
        num += sum(a * b for a, b in zip(d, d[1:]))
        den += sum(x * x for x in d)
        n += len(d)
    raw = num / den
    n /= len(series)
    return raw, min(max((n * raw + 1) / (n - 3), 0.0), 0.95)


def sum_sd(k, rho):
    """sd of a sum of k unit-variance AR(1) draws (sim/straggle.rs sum_sd)."""
    if rho == 0:
        return math.sqrt(k)
    return math.sqrt(k * (1 + rho) / (1 - rho) - 2 * rho * (1 - rho ** k) / (1 - rho) ** 2)


def run_row(events_dir):
    """(cv, raw, corrected, measured, independent, correlated) of one run, E|S0 - S1| in seconds."""
    ev = all_spans(events_dir)
    mb = micro_batches(ev)
    times = {w: [e["end_s"] - e["start_s"] for e in mb if e["worker"] == w] for w in (0, 1)}
    # A round: the micro-batches between two of the worker's model-size all-reduces.
    meets = {w: sorted(e["start_s"] for e in ev if e["lane"] == "comm" and e["worker"] == w
                       and e.get("bytes", 0) >= BIG) for w in (0, 1)}
    rounds = {w: {} for w in (0, 1)}
    for e in mb:
        if e["worker"] in rounds:
            r = bisect.bisect(meets[e["worker"]], e["start_s"])
            rounds[e["worker"]].setdefault(r, []).append(e["end_s"] - e["start_s"])
    both = sorted(set(rounds[0]) & set(rounds[1]))
    apart = [abs(sum(rounds[0][r]) - sum(rounds[1][r])) for r in both]
    k = statistics.mean(len(rounds[0][r]) for r in both)
    all_mb = times[0] + times[1]
    sd = statistics.pstdev(all_mb)
    raw, rho = lag1([times[0], times[1]])
    independent = 2 * math.sqrt(k / math.pi) * sd
    correlated = 2 * sum_sd(k, rho) * sd / math.sqrt(math.pi)
    return sd / statistics.mean(all_mb), raw, rho, statistics.mean(apart), independent, correlated


def main(runs):
    print("| run | setting | method | cv | lag-1 raw / corrected | E\\|S0-S1\\| ms: real | independent | correlated | calibrate's |")
    print("|---|---|---|---|---|---|---|---|---|")
    apart = []
    for run in map(Path, runs):
        for setting in sorted(p for p in run.iterdir() if (p / "real" / "runs").is_dir()):
            prof = setting / "profile.toml"
            m = re.search(PROFILE_RHO, prof.read_text()) if prof.exists() else None
            theirs = f"{float(m['rho']):.2f}" if m else "-"
            for folder, name in BLOCKING.items():
                ev = setting / "real" / "runs" / folder
                if not (ev / "events.jsonl").exists():
                    continue
                cv, raw, rho, real, ind, cor = run_row(ev)
                apart.append((real, ind, cor))
                print(f"| {run.name} | {setting.name} | {name} | {cv:.2f} | {raw:.2f} / {rho:.2f} | "
                      f"{real * 1e3:.0f} | {ind * 1e3:.0f} | {cor * 1e3:.0f} | {theirs} |")
    if apart:
        real, ind, cor = (statistics.median(c) * 1e3 for c in zip(*apart))
        print(f"\nMedian E|S0-S1| over the {len(apart)} runs: real {real:.0f} ms, independent draws {ind:.0f} ms, "
              f"correlated draws {cor:.0f} ms.")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
