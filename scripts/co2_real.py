#!/usr/bin/env python3
"""Real runtime, 2 workers, emulated link: CO2's outer round vs SlowMo's (docs/results/co2.md, experiment 5).

    python3 scripts/co2_real.py RESULTS_DIR TAU

reads RESULTS_DIR/runs/{slowmo,co2}/events.jsonl written by (the command on the page)

    lowcomm compare --methods slowmo,co2 --results RESULTS_DIR --preset nano --workers 2 --runtime real \
      --link LINK --tau TAU --batch-size 8 --steps STEPS --eval-every 0

and prints, per method, averaged over workers and over the outer rounds but the first and the last:
round = wall time between the ends of the last micro-batches of consecutive outer rounds;
c = compute-lane time inside that window (tau local steps); m = duration of one all-reduce
(the emulated link holds each collective for its modeled time); and round / max(c, m),
round / (c + m). Wall clock on a shared machine: noisy.
"""
import json
import sys
from statistics import mean

from co2_overlap import covered, merge  # the same interval arithmetic as experiment 2


def inside(union, a, b):
    return covered((a, b), union)


def analyse(path, tau):
    spans = [json.loads(l) for l in open(path)]
    spans = [s for s in spans if s.get("record") == "span"]
    rounds, cs, ms = [], [], []
    for w in sorted({s["worker"] for s in spans}):
        mine = [s for s in spans if s["worker"] == w]
        mb = sorted(s["end_s"] for s in mine if s["name"] == "micro-batch")
        comp = merge([(s["start_s"], s["end_s"]) for s in mine if s["lane"] == "compute"])
        comm = sorted((s["start_s"], s["end_s"]) for s in mine if s["lane"] == "comm")
        ends = [mb[i] for i in range(tau - 1, len(mb), tau)]  # end of each outer round's last micro-batch
        for k in range(1, len(ends) - 1):  # windows (ends[k-1], ends[k]], leaving out the first and last round
            a, b = ends[k - 1], ends[k]
            rounds.append(b - a)
            cs.append(inside(comp, a, b))
        ms += [b - a for a, b in comm[:-1]]  # the asynchronous ones (the last is the final sync)
    return mean(rounds), mean(cs), mean(ms), len(rounds)


def main():
    res, tau = sys.argv[1], int(sys.argv[2])
    print("| method | outer round (s) | c = tau local steps (s) | m = all-reduce (s) | round / max(c, m) | round / (c + m) | rounds averaged |")
    print("|---|---|---|---|---|---|---|")
    for m in ["slowmo", "co2"]:
        r, c, a, n = analyse(f"{res}/runs/{m}/events.jsonl", tau)
        print(f"| {m} | {r:.4f} | {c:.4f} | {a:.4f} | {r / max(c, a):.2f} | {r / (c + a):.2f} | {n} |")


if __name__ == "__main__":
    main()
