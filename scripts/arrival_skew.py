#!/usr/bin/env python3
"""Where a blocking collective's real time goes: the link, or waiting for the other rank.

    python3 scripts/arrival_skew.py docs/results/planner-accuracy/interleaved docs/results/planner-accuracy/twice

For every setting folder under each DIR (one with real/ and sim/, as
bench/netns/planner_accuracy.sh writes them) and every method whose steps
end in one blocking collective (ddp, demo, flexdemo), reads the
spans of the real run's events.jsonl (two ranks) and of the simulator's:

- late rank: the median time of a collective on the rank that called it
  last, which finds the other already waiting: the link's own time;
- early rank: the same on the rank that called first, which also waits
  until the other arrives;
- skew: the mean gap between the two ranks' calls (compute jitter between
  the ranks: each step's computation takes a slightly different time on
  each);
- sim: the median time of the same collective in the simulator, whose
  ranks compute in lockstep and never wait for each other;
- host gap: worker 0's wall time covered by no span (compute or comm), per
  step: host work that nothing times (batch preparation, packing a payload,
  logging), which the simulator does not charge;
- sim skew: the skew in the simulator run with the profile's micro-batch
  spread (sim-straggle/, planner_accuracy.sh's straggle variant; finding 13),
  where it exists.

docs/results/planner-accuracy.md, finding 11, quotes the table this prints.
The runs/ folders it reads are not committed (.gitignore keeps summaries
only): bench/netns/planner_accuracy.sh and async_server_wait.sh make them.
"""
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

METHODS = ["ddp", "demo", "flexdemo"]


def spans(run: Path) -> list:
    with open(run / "events.jsonl") as f:
        return [e for e in map(json.loads, f) if e.get("record") == "span"]


def collectives(ev: list) -> dict:
    """(round, name, k-th of that name in the round) -> the ranks' spans."""
    by = defaultdict(list)
    seen = defaultdict(int)
    for e in sorted((e for e in ev if e["lane"] == "comm"), key=lambda e: e["start_s"]):
        key = (e["round"], e["name"], e["worker"])
        by[(e["round"], e["name"], seen[key])].append(e)
        seen[key] += 1
    return {k: v for k, v in by.items() if len(v) == 2}


def host_gap_per_step(ev: list) -> float:
    """Worker 0's wall time covered by no span, per round (seconds)."""
    own = sorted((e for e in ev if e["worker"] == 0), key=lambda e: e["start_s"])
    t, gap = own[0]["start_s"], 0.0
    for e in own:
        gap += max(0.0, e["start_s"] - t)
        t = max(t, e["end_s"])
    return gap / len({e["round"] for e in own})


def real_row(run: Path):
    ev = spans(run)
    pairs = collectives(ev).values()
    early, late, skew = [], [], []
    for a, b in (sorted(p, key=lambda e: e["start_s"]) for p in pairs):
        early.append(a["end_s"] - a["start_s"])
        late.append(b["end_s"] - b["start_s"])
        skew.append(b["start_s"] - a["start_s"])
    return statistics.median(late), statistics.median(early), statistics.mean(skew), host_gap_per_step(ev)


def sim_time(run: Path) -> float:
    ev = [e for e in spans(run) if e["lane"] == "comm" and e["worker"] == 0]
    return statistics.median(e["end_s"] - e["start_s"] for e in ev)


def main() -> None:
    print("| setting | method | late rank (ms) | early rank (ms) | skew, mean (ms) | sim (ms) | late vs sim | host gap per step (ms) | sim skew (ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for top in map(Path, sys.argv[1:]):
        for setting in sorted(p for p in top.iterdir() if (p / "real").is_dir() and (p / "sim").is_dir()):
            for m in METHODS:
                real, sim = setting / "real" / "runs" / m, setting / "sim" / "runs" / m
                if not (real / "events.jsonl").exists() or not (sim / "events.jsonl").exists():
                    continue
                late, early, skew, gap = real_row(real)
                s = sim_time(sim)
                straggle = setting / "sim-straggle" / "runs" / m
                sim_skew = f"{1e3 * real_row(straggle)[2]:.2f}" if (straggle / "events.jsonl").exists() else "-"
                print(
                    f"| {top.name}/{setting.name} | {m} | {1e3 * late:.2f} | {1e3 * early:.2f} | {1e3 * skew:.2f} "
                    f"| {1e3 * s:.2f} | {100 * (late - s) / s:+.0f}% | {1e3 * gap:.2f} | {sim_skew} |"
                )


if __name__ == "__main__":
    main()
