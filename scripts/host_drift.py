#!/usr/bin/env python3
"""How far each calibration's host moved, against how far its compute missed
the real runs that followed (docs/results/planner-accuracy.md, finding 24).

    python3 scripts/host_drift.py docs/results/planner-accuracy/long-{a,b,c,d,e,f,g,h,i,j}

For every RUN/SETTING with a profile.toml and real/summary.md
(bench/netns/planner_accuracy.sh): the micro-batch's mean in [timing], the mean
of the micro-batches the overlap phase timed alone minutes later, their drift
(alone / timing - 1, what `lowcomm calibrate` warns of past 5%:
calibrate/overlap.rs `host_drift`), and the real compute per round of the
methods that block on their transfers (local-sgd and diloco: one micro-batch
and an AdamW step a round; their mean), with the [timing] mean's error
against it.
"""
import re
import statistics
import sys
from pathlib import Path

from planner_accuracy import per_round
from profile_from_comments import MICRO_BATCH

ALONE = r"# and right after each, as long, alone: median [\d.]+ ms, mean (?P<mean>[\d.]+) "
BLOCKING = ("local-sgd", "diloco:h=12")
WARN = 0.05


def drift_row(setting):
    """(timing mean s, alone mean s, real c s) of one setting's folder, or None."""
    text = (setting / "profile.toml").read_text()
    timing, alone = re.search(MICRO_BATCH, text), re.search(ALONE, text)
    real = per_round(setting / "real")
    cs = [real[m][0] for m in BLOCKING if m in real]
    if not (timing and timing["mean"] and alone and cs):
        return None
    return float(timing["mean"]) / 1e3, float(alone["mean"]) / 1e3, statistics.mean(cs)


def main(runs):
    print("| run | setting | [timing] mean ms | alone, later, mean ms | drift | real c ms (local-sgd, diloco) "
          "| [timing] mean's error |")
    print("|---|---|---|---|---|---|---|")
    for run in map(Path, runs):
        for setting in sorted(p.parent for p in run.glob("*/profile.toml")):
            row = drift_row(setting)
            if row:
                t, a, c = row
                drift = a / t - 1
                flag = " **warned**" if abs(drift) > WARN else ""
                print(f"| {run.name} | {setting.name} | {t * 1e3:.1f} | {a * 1e3:.1f} | {100 * drift:+.1f}%{flag} "
                      f"| {c * 1e3:.1f} | {100 * (t / c - 1):+.1f}% |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
