#!/usr/bin/env python3
"""co2's all-reduce against diloco's in the 144-step runs of bench/netns/planner_accuracy.sh
(planner-accuracy findings 20 and 27), beside what calibrate timed for it.

    python3 scripts/co2_all_reduce_in_runs.py docs/results/planner-accuracy/long-{e,f,g,h,i,j,k}

For each setting folder (RUN/SETTING with real/runs/co2 and real/runs/diloco_h_12)
the mean seconds of the model's all-reduces in each method's real run, and
their ratio. An all-reduce's time is the shorter of its two ranks' spans:
the rank that started it last waited for nobody, so its span is the
transfer alone (the other's adds the wait for it). co2's first and last
all-reduces are left out (the first starts beside no computation, the last
blocks). Beside them, calibrate's overlap phase: the same all-reduce alone
and while the rank computes, and (profiles from 80182dd on) chained as
co2 runs it (median / mean, ms, from profile.toml's comments; finding
28). The runs/ folders are not committed: the numbers need the
machine that ran them.
"""
import re
import statistics
import sys
from pathlib import Path

from all_reduce_times import spans
from async_exchange import all_spans

SETTINGS = ("100mbit", "20mbit", "50mbit-jitter50")
CALIBRATED = re.compile(r"# alone: +median ([\d.]+) ms, mean ([\d.]+).*\n"
                        r"# while the rank computes: median ([\d.]+) ms, mean ([\d.]+)")
CHAINED = re.compile(r"# launched as the last returned.*\n#   median ([\d.]+) ms, mean ([\d.]+)")


def transfers(run):
    """Seconds of each model all-reduce: the shorter of the two ranks' spans, in order."""
    ev = all_spans(run)
    pairs = zip(sorted(spans(ev, "all_reduce", 0)), sorted(spans(ev, "all_reduce", 1)))
    return [min(e0 - s0, e1 - s1) for (s0, e0), (s1, e1) in pairs]


def numbers(pattern, profile):
    """The numbers `pattern` captures in the profile's text, or None (no file, no match)."""
    m = pattern.search(profile.read_text()) if profile.exists() else None
    return tuple(float(x) for x in m.groups()) if m else None


def calibrated(profile):
    """(alone median, alone mean, computing median, computing mean) in ms, or None."""
    return numbers(CALIBRATED, profile)


def chained(profile):
    """(median, mean) in ms of the all-reduce chained as co2 runs it, or None (older profiles)."""
    return numbers(CHAINED, profile)


def main(runs):
    lines = ["| run | setting | co2 all-reduce (ms) | diloco's | co2 / diloco | calibrate: alone, computing (median / mean, ms) | chained (median / mean, ms) |",
             "|---|---|---|---|---|---|---|"]
    ratios = {}
    for run in runs:
        for setting in SETTINGS:
            folder = run / setting
            co2, diloco = folder / "real/runs/co2", folder / "real/runs/diloco_h_12"
            if not (co2 / "events.jsonl").exists() or not (diloco / "events.jsonl").exists():
                print(f"warning: {folder}: no co2 and diloco runs with events", file=sys.stderr)
                continue
            c, d = statistics.mean(transfers(co2)[1:-1]), statistics.mean(transfers(diloco))
            ratios.setdefault(setting, []).append(c / d)
            cal = calibrated(folder / "profile.toml")
            cal_text = f"{cal[0]:.0f} / {cal[1]:.0f}, {cal[2]:.0f} / {cal[3]:.0f}" if cal else "-"
            ch = chained(folder / "profile.toml")
            ch_text = f"{ch[0]:.0f} / {ch[1]:.0f}" if ch else "-"
            lines.append(f"| {run.name} | {setting} | {1000 * c:.0f} | {1000 * d:.0f} | {c / d:.3f} | {cal_text} | {ch_text} |")
    lines += ["", "| setting | co2 / diloco: median [min, max] | runs |", "|---|---|---|"]
    for setting in SETTINGS:
        rs = ratios.get(setting)
        if rs:
            lines.append(f"| {setting} | {statistics.median(rs):.3f} [{min(rs):.3f}, {max(rs):.3f}] | {len(rs)} |")
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main([Path(a) for a in sys.argv[1:]])
