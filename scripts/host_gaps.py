#!/usr/bin/env python3
"""Where a real run's step time goes that no span covers: mean span lengths and the gaps between spans.

    python3 scripts/host_gaps.py docs/results/planner-accuracy/ninth/20mbit/real/runs/demo/events.jsonl
    python3 scripts/host_gaps.py --worker 1 FILE...

For each events.jsonl (a run's trace: `lowcomm compare --results R`
writes R/runs/METHOD/events.jsonl), takes one worker's spans in start
order and prints the mean length of each kind of span and the mean gap
from each kind to the next one (negative where spans overlap: a
transfer behind computation). A gap between two compute spans is host
work nothing times, which the simulator does not charge.
docs/results/planner-accuracy.md, finding 18, quotes it.

The runs/ folders are not committed: run bench/netns/planner_accuracy.sh first.
"""
import argparse
import json
import statistics


def spans(path: str, worker: int) -> list:
    """The worker's spans, in start order."""
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    mine = [r for r in rows if r.get("record") == "span" and r.get("worker") == worker]
    return sorted(mine, key=lambda r: r["start_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("events", nargs="+", help="events.jsonl files")
    ap.add_argument("--worker", type=int, default=0, help="whose spans (default 0)")
    a = ap.parse_args()
    for path in a.events:
        sp = spans(path, a.worker)
        lengths, gaps = {}, {}
        for s in sp:
            lengths.setdefault(s["name"], []).append(s["end_s"] - s["start_s"])
        for x, y in zip(sp, sp[1:]):
            gaps.setdefault(f"{x['name']} -> {y['name']}", []).append(y["start_s"] - x["end_s"])
        print(f"{path} (worker {a.worker})")
        for name, v in lengths.items():
            print(f"  span {name}: {1e3 * statistics.mean(v):.2f} ms x {len(v)}")
        for name, v in gaps.items():
            print(f"  gap  {name}: {1e3 * statistics.mean(v):.2f} ms x {len(v)}")


if __name__ == "__main__":
    main()
