#!/usr/bin/env python3
"""The calibrated micro-batch against the real runs' micro-batches: median and mean.

    python3 scripts/micro_batch_tail.py docs/results/planner-accuracy/sixth docs/results/planner-accuracy/seventh

For every setting folder under each DIR (bench/netns/planner_accuracy.sh's
layout: profile.toml, real/runs/METHOD/events.jsonl), prints the profile's
micro-batch (the median `lowcomm calibrate` keeps, and its mean where the
profile's comment gives one) and, for each method that computes one
micro-batch per step, the median and the mean of both ranks' real
micro-batch spans, and the mean over the median. The simulator draws
micro-batches around the profile's median with its robust spread
(micro_batch_cv), so a real mean above the median is time it does not
charge. docs/results/planner-accuracy.md, finding 17, quotes it.

The runs/ folders are not committed (.gitignore keeps summaries only):
run bench/netns/planner_accuracy.sh first.
"""
import json
import re
import statistics
import sys
from pathlib import Path

from profile_from_comments import MICRO_BATCH

METHODS = ["ddp", "zero1", "demo", "local-sgd"]


def micro_batches(events: Path) -> list:
    """Seconds of every real micro-batch span, both ranks."""
    out = []
    for line in events.open():
        e = json.loads(line)
        if e.get("record") == "span" and e.get("lane") == "compute" and e.get("name") == "micro-batch":
            out.append(e["end_s"] - e["start_s"])
    return out


def main(dirs):
    print("| run | setting | calibrated median / mean (ms) | " + " | ".join(METHODS) + " |")
    print("|---" * (len(METHODS) + 3) + "|")
    ratios = []
    for d in map(Path, dirs):
        for setting in sorted(p for p in d.iterdir() if (p / "profile.toml").exists()):
            m = re.search(MICRO_BATCH, (setting / "profile.toml").read_text())
            cal = f"{m['median']} / {m['mean'] or '-'}" if m else "-"
            cells = []
            for method in METHODS:
                events = setting / "real" / "runs" / method / "events.jsonl"
                xs = micro_batches(events) if events.exists() else []
                if not xs:
                    cells.append("-")
                    continue
                med, mean = statistics.median(xs), statistics.mean(xs)
                ratios.append(mean / med)
                cells.append(f"{1e3 * med:.1f} / {1e3 * mean:.1f} ({mean / med:.3f})")
            print(f"| {d.name} | {setting.name} | {cal} | " + " | ".join(cells) + " |")
    if ratios:
        print(f"\nreal mean / real median over {len(ratios)} runs: median {statistics.median(ratios):.3f}, "
              f"range {min(ratios):.3f} .. {max(ratios):.3f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
