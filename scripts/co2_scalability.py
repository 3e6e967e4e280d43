#!/usr/bin/env python3
"""Scalability of AdamW (zero1) and CO2 on the 16x8 TCP profile (CO2 paper's Table 3), co2.md experiment 3.

    python3 scripts/co2_scalability.py [--lowcomm target/release/lowcomm] [--out docs/results/co2-scalability] [--nodes 1,2,4,8,16]

configs/clusters/tcp-16x8-80g.toml has 16 nodes; for m nodes the script writes OUT/profiles/tcp-Mx8-80g.toml,
the same file with `nodes = M` (same device, links and [timing]: GPT-Neo-125M, 0.148 s per micro-batch of
24 x 1024 tokens), and runs for each

    lowcomm train --preset nano --method zero1 --steps 24 ...
    lowcomm train --preset nano --method co2 --tau 12 --steps 60 ...
      (both: --runtime sim --cluster OUT/profiles/tcp-Mx8-80g.toml --batch-size 1 --seq-len 16
       --eval-every 0 --quiet --force --out OUT/runs/METHOD-N)

Throughput is steady-state, in costed tokens (24576 per micro-batch and worker) per virtual second, from
worker 0's micro-batch spans in RUN/events.jsonl: N x 24576 x (b - a) / (end_b - end_a), with a, b the
ends of the micro-batches closing round 2 and the last round (zero1: steps 8 and 24; co2: rounds 2 and 5
of 12 steps), so the warm-up and the final blocking synchronisation are left out (the paper averages
iterations 100 to 200). The trained model (nano, 1 x 16 tokens) only does the math; virtual time does not
depend on it. Scalability is throughput(N) / (N x throughput of one worker), one worker computing
24576 / 0.148 tokens/s without communication, and, as in the paper's last column, throughput(128) /
(8 x throughput(16)). Writes OUT/scalability.csv and prints a markdown table.
"""
import argparse
import csv
import json
import os
import re
import subprocess

TOK = 24576
STEP_S = 7.5e8 * TOK / (312e12 * 0.4)
RUNS = {"zero1": (["--method", "zero1"], 24, 1), "co2 (tau=12)": (["--method", "co2", "--tau", "12"], 60, 12)}


def throughput(events, n, tau, steps):
    ends = []
    with open(events) as f:
        for line in f:
            r = json.loads(line)
            if r.get("record") == "span" and r["worker"] == 0 and r["name"] == "micro-batch":
                ends.append(r["end_s"])
    ends.sort()
    assert len(ends) == steps, (events, len(ends))
    a, b = 2 * tau - 1 if tau > 1 else 7, steps - 1
    return n * TOK * (b - a) / (ends[b] - ends[a])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lowcomm", default="target/release/lowcomm")
    ap.add_argument("--out", default="docs/results/co2-scalability")
    ap.add_argument("--nodes", default="1,2,4,8,16")
    ap.add_argument("--no-run", action="store_true", help="only analyse existing runs")
    a = ap.parse_args()
    base = open("configs/clusters/tcp-16x8-80g.toml").read()
    os.makedirs(os.path.join(a.out, "profiles"), exist_ok=True)
    one = TOK / STEP_S
    res = {}
    for m in [int(x) for x in a.nodes.split(",")]:
        n = 8 * m
        prof = os.path.join(a.out, "profiles", f"tcp-{m}x8-80g.toml")
        text = re.sub(r"(?m)^nodes = 16$", f"nodes = {m}", base)
        text = re.sub(r'(?m)^name = ".*"$', f'name = "{m} nodes x 8 A100, NVLink + 80 Gb/s TCP"', text)
        text = f"# Written by scripts/co2_scalability.py: configs/clusters/tcp-16x8-80g.toml with nodes = {m}.\n" + text
        open(prof, "w").write(text)
        for name, (flags, steps, tau) in RUNS.items():
            run = os.path.join(a.out, "runs", f"{flags[1]}-{n}")
            if not a.no_run:
                subprocess.run(
                    ["nice", "-n", "10", a.lowcomm, "train", "--preset", "nano", *flags, "--steps", str(steps),
                     "--runtime", "sim", "--cluster", prof, "--batch-size", "1", "--seq-len", "16",
                     "--eval-every", "0", "--quiet", "--force", "--out", run],
                    check=True, stdout=subprocess.DEVNULL)
            res[(name, n)] = throughput(os.path.join(run, "events.jsonl"), n, tau, steps)
    ns = sorted({n for _, n in res})
    with open(os.path.join(a.out, "scalability.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "workers", "tokens_per_s", "scalability_vs_one"])
        for (name, n), t in sorted(res.items()):
            w.writerow([name, n, f"{t:.1f}", f"{t / (n * one):.4f}"])
    print(f"one worker: {one:.0f} tokens/s (24576 tokens / {STEP_S:.4f} s)\n")
    print("| method | " + " | ".join(f"{n} workers" for n in ns) + " | 16 -> 128 |")
    print("|---|" + "---|" * (len(ns) + 1))
    for name in RUNS:
        cells = [f"{res[(name, n)]:.0f} ({res[(name, n)] / (n * one):.2f})" for n in ns]
        r = (f"{res[(name, 128)] / (8 * res[(name, 16)]):.2f}" if (name, 128) in res and (name, 16) in res else "-")
        print(f"| {name} | " + " | ".join(cells) + f" | {r} |")


if __name__ == "__main__":
    main()
