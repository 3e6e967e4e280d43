#!/usr/bin/env python3
"""CO2's outer step (alpha, beta) on 2, 4 and 8 workers, several seeds (docs/results/co2.md, experiment 0).

    python3 scripts/co2_tune.py > docs/results/co2-tune/table.md   # runs what is missing, then prints the table
    python3 scripts/co2_tune.py --workers 16,32 --seeds 1 \
      --methods local-sgd,co2:outer_lr=1.0:outer_momentum=0.5,co2:outer_lr=0.5:outer_momentum=0.0,co2:outer_lr=0.5:outer_momentum=0.2
    LOWCOMM=target/release/lowcomm python3 scripts/co2_tune.py --out /tmp/tune --methods local-sgd,co2

One `lowcomm compare` per (workers, seed), all variants in it:

    lowcomm compare --methods METHODS --results OUT/wW-sS --preset nano --runtime sim --workers W \
      --seed S --steps 240 --batch-size 4 --eval-every 0

(compare reuses a run it finds done, so an interrupted sweep picks up where it stopped; each run's trace.json
and checkpoints are deleted once it is read: 2-32 simulated workers write about 100 MB per run). Then, from each
run's result.json, per method and world size over the seeds:

- val: the validation loss of the run's model (mean, and min..max over the seeds);
- round loss: the training loss averaged over an outer round's tau steps (each step's loss is the mean
  over the workers); "climb" = the largest round loss minus the lowest of an earlier round: how far
  the loss went back up (0 when it never rose);
- above round 1: in how many seeds some later round's loss was above the first round's.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

DEFAULT_METHODS = ",".join([
    "local-sgd",
    "co2:outer_lr=1.0:outer_momentum=0.5",
    "co2:outer_lr=1.0:outer_momentum=0.2",
    "co2:outer_lr=1.0:outer_momentum=0.0",
    "co2:outer_lr=0.7:outer_momentum=0.2",
    "co2:outer_lr=0.7:outer_momentum=0.0",
    "co2:outer_lr=0.5:outer_momentum=0.5",
    "co2:outer_lr=0.5:outer_momentum=0.2",
    "co2:outer_lr=0.5:outer_momentum=0.0",
    "co2:outer_lr=0.4:outer_momentum=0.2",
    "co2:outer_lr=0.4:outer_momentum=0.0",
    "co2:outer_lr=0.3:outer_momentum=0.0",
])


def run_dir(spec):
    return spec.replace(":", "_").replace("=", "_").replace("/", "_")


def round_losses(rounds, tau):
    """The training loss averaged over each outer round's tau steps (a last, shorter round too)."""
    out = {}
    for r in rounds:
        out.setdefault((r["step"] - 1) // tau, []).append(r["loss"])
    return [sum(v) / len(v) for _, v in sorted(out.items())]


def climb(xs):
    best, worst = xs[0], 0.0
    for x in xs[1:]:
        worst = max(worst, x - best)
        best = min(best, x)
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/results/co2-tune")
    ap.add_argument("--workers", default="2,4,8")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--tau", type=int, default=12)
    ap.add_argument("--methods", default=DEFAULT_METHODS)
    ap.add_argument("--report-only", action="store_true", help="read what is there, run nothing")
    a = ap.parse_args()
    lc = os.environ.get("LOWCOMM", "target/release/lowcomm")
    worlds = [int(w) for w in a.workers.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    methods = a.methods.split(",")
    for s in seeds:
        for w in worlds:
            d = f"{a.out}/w{w}-s{s}"
            if a.report_only:
                continue
            cmd = [lc, "compare", "--methods", a.methods, "--results", d, "--preset", "nano", "--runtime", "sim",
                   "--workers", str(w), "--seed", str(s), "--steps", str(a.steps), "--batch-size", str(a.batch_size),
                   "--tau", str(a.tau), "--eval-every", "0"]
            print("+", " ".join(cmd), file=sys.stderr, flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            for root, dirs, files in os.walk(d):
                if "trace.json" in files:
                    os.remove(os.path.join(root, "trace.json"))
                if "checkpoints" in dirs:
                    shutil.rmtree(os.path.join(root, "checkpoints"))
                    dirs.remove("checkpoints")
    print(f"nano, sim, {a.steps} steps of batch {a.batch_size} x 64 tokens per worker, tau {a.tau}, seeds {a.seeds}\n")
    print("| method | workers | val loss mean (min..max) | climb of round losses, max over seeds | seeds with a round above round 1 |")
    print("|---|---|---|---|---|")
    for m in methods:
        for w in worlds:
            vals, climbs, above = [], [], 0
            for s in seeds:
                p = f"{a.out}/w{w}-s{s}/runs/{run_dir(m)}/result.json"
                if not os.path.exists(p):
                    continue
                r = json.load(open(p))
                st = round_losses(r["rounds"], a.tau)
                vals.append(r["val_loss"])
                climbs.append(climb(st))
                above += any(x > st[0] for x in st[1:])
            if not vals:
                continue
            mean = sum(vals) / len(vals)
            print(f"| {m} | {w} | {mean:.4f} ({min(vals):.4f}..{max(vals):.4f}) | {max(climbs):.3f} | {above} of {len(vals)} |")


if __name__ == "__main__":
    main()
