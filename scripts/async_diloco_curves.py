#!/usr/bin/env python3
"""Loss per local update, per virtual second and final perplexity for one experiment of
scripts/async_diloco_run.sh (docs/results/async-diloco.md).

    python3 scripts/async_diloco_curves.py docs/results/async-diloco/hetero/very [--csv OUT.csv] [--target-loss 6.9]
    python3 scripts/async_diloco_curves.py --final docs/results/async-diloco/hetero/{no,slight,moderate,very}
    python3 scripts/async_diloco_curves.py --final --mean docs/results/async-diloco/weight/seed-{1337,1,2}

Reads each run of the `lowcomm compare` directory (runs/*/metrics.jsonl and config.toml). The paper's x axes
(async-local-sgd.txt, Fig. 2 and Sec. 1: "perplexity versus the total number of local updates", and wall clock)
are the local (inner) steps of all workers together and the (here virtual) time. Algorithm 2 stops every run at
the same t_max = steps x workers local steps, so the runs are compared at equal local steps and at equal time.

A point of the curve is one change of the global model:
- async runs: one applied pseudo-gradient (the server's records, kind "server": end_s = when it was applied,
  loss = the sender's mean inner loss over its round). Its loss here is the mean of the last `workers` such
  updates, so that a point averages as many rounds as a sync round does. Its local-step count is the inner
  steps all workers had finished by then (worker records with end_s <= the update's time): the compute spent,
  in-flight rounds included, at most one round per other worker more than the paper's applied t_local.
- sync diloco: one outer round of H inner steps on every worker; loss = the mean inner loss of all workers over
  the round (the same definition), time = the end of the round's last inner step, local steps = round x H x k.
The paper reports perplexity on held-out data of the server model; lowcomm evaluates the run's model once, at
the end (the `eval` record): that is the "val ppl" column (e^val loss), the analogue of Tables 1 and 2. The
training curve is the only loss known before the end. Target: the sync run's final curve value (no sync run:
--target-loss). Plain standard library; --csv writes every run's curve (run, updates, local_steps, s, loss);
--final prints the val perplexity (val loss) of every run of several directories side by side (Tables 1, 2).
A run with a fault plan (experiment 5) also gets a table of its crashes and joins (the `fault` records) with the
curve's loss just before and after each.
"""
import csv
import json
import math
import os
import re
import sys


def read_run(d):
    """The run's config facts, its curve [(update, local steps, seconds, loss)] and its final val loss."""
    cfg = open(os.path.join(d, "config.toml")).read()
    method = re.search(r'^method\s*=\s*"([^"]+)"', cfg, re.M).group(1)
    k = int(re.search(r"^workers\s*=\s*(\d+)", cfg, re.M).group(1))
    h = re.search(r"^h\s*=\s*(\d+)", cfg, re.M)
    h = int(h.group(1)) if h else 50
    steps = int(re.search(r"^steps\s*=\s*(\d+)", cfg, re.M).group(1))
    clock = "virtual" if re.search(r'^runtime\s*=\s*"sim"', cfg, re.M) else "wall"
    recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
    inner = [r for r in recs if r.get("kind") == "worker"]
    evals = [r for r in recs if r.get("kind") == "eval"]
    val = evals[-1]["val_loss"] if evals else float("nan")
    curve = []
    if method == "async-diloco":
        ends = sorted(r["end_s"] for r in inner)
        server = [r for r in recs if r.get("kind") == "server"]
        done = 0
        for i, r in enumerate(server):
            while done < len(ends) and ends[done] <= r["end_s"] + 1e-9:
                done += 1
            last = server[max(0, i - k + 1): i + 1]
            curve.append((i + 1, done, r["end_s"], sum(p["loss"] for p in last) / len(last)))
    else:
        rounds = {}
        for r in inner:
            rounds.setdefault((r["step"] - 1) // h, []).append(r)
        for n in sorted(rounds):
            pts = rounds[n]
            if len(pts) < k * h and n != max(rounds):
                continue  # a partial round can only be the last (steps not a multiple of H)
            curve.append((n + 1, len(pts) + sum(len(rounds[m]) for m in rounds if m < n),
                          max(p["end_s"] for p in pts), sum(p["loss"] for p in pts) / len(pts)))
    faults = sorted((r for r in recs if r.get("kind") == "fault"), key=lambda r: r["at_s"])
    return {"method": method, "clock": clock, "k": k, "t_max": steps * k, "curve": curve, "val": val,
            "faults": faults}


def at(curve, i, x):
    """The last point whose coordinate i is <= x (None before the first)."""
    seen = [p for p in curve if p[i] <= x + 1e-9]
    return seen[-1] if seen else None


def ppl(loss):
    """e^loss, short: a diverged run's perplexity is astronomically large."""
    return f"{math.exp(loss):.1f}" if loss < 20 else f"e^{loss:.1f}"


def fmt(p):
    return f"{p[3]:.4f}" if p else "-"


def load(root):
    """Every finished run of one `lowcomm compare` directory, by run name."""
    runs = {}
    for name in sorted(os.listdir(os.path.join(root, "runs"))):
        d = os.path.join(root, "runs", name)
        if os.path.exists(os.path.join(d, "result.json")):
            r = read_run(d)
            if r["curve"]:
                runs[name] = r
    if not runs:
        sys.exit(f"no finished runs (runs/*/result.json) under {root}/runs")
    return runs


def final(roots, mean=False):
    """The paper's Tables 1 and 2: final val perplexity (val loss), one column per result directory; with
    --mean (directories of one setup, seeds apart) a last column: mean val loss and its spread (min-max)."""
    # DN's buffer is N = workers: one row for it across directories of different worker counts.
    cols = [{re.sub(r"dn_buffer_\d+", "dn_buffer_N", n): r for n, r in load(root).items()} for root in roots]
    names = sorted({n for c in cols for n in c})
    heads = [os.path.basename(r.rstrip("/")) for r in roots] + (["mean val loss (min-max)"] if mean else [])
    print("| run | " + " | ".join(heads) + " |")
    print("|---|" + "---|" * len(heads))
    for n in names:
        cells = [f"{ppl(c[n]['val'])} ({c[n]['val']:.4f})" if n in c else "-" for c in cols]
        vals = [c[n]["val"] for c in cols if n in c]
        if mean:
            cells.append(f"{sum(vals) / len(vals):.4f} ({min(vals):.4f}-{max(vals):.4f}, {len(vals)} runs)")
        print(f"| {n} | " + " | ".join(cells) + " |")


def main():
    args = sys.argv[1:]
    if args[:1] == ["--final"]:
        rest = [a for a in args[1:] if a != "--mean"]
        return final(rest, mean="--mean" in args)
    out_csv = None
    target = None
    if "--csv" in args:
        i = args.index("--csv")
        out_csv = args[i + 1]
        del args[i: i + 2]
    if "--target-loss" in args:
        i = args.index("--target-loss")
        target = float(args[i + 1])
        del args[i: i + 2]
    if len(args) != 1:
        sys.exit("usage: async_diloco_curves.py RESULT_DIR [--csv OUT.csv] [--target-loss 5.5]"
                 " (e.g. docs/results/async-diloco/hetero/very)")
    runs = load(args[0])
    t_max = min(r["t_max"] for r in runs.values())
    marks = [t_max // 4, t_max // 2, t_max]
    t_end = min(r["curve"][-1][2] for r in runs.values())
    sync = next((r for n, r in runs.items() if r["method"] == "diloco"), None)
    if target is None and sync:
        target = sync["curve"][-1][3]
    say_target = f"{target:.4f}" if target is not None else "none"
    clock = next(iter(runs.values()))["clock"]
    head = " | ".join(f"loss at {m} local steps" for m in marks)
    print(f"| run | server updates | {head} | loss at {t_end:.1f} {clock} s | {clock} s | "
          f"{clock} s to {say_target} | local steps to {say_target} | lowest | val loss | val ppl |")
    print("|---|---|" + "---|" * len(marks) + "---|---|---|---|---|---|---|")
    for name, r in runs.items():
        c = r["curve"]
        by_n = " | ".join(fmt(at(c, 1, m)) for m in marks)
        reach = next((p for p in c if target is not None and p[3] <= target + 1e-12), None)
        print(f"| {name} | {len(c)} | {by_n} | {fmt(at(c, 2, t_end))} | {c[-1][2]:.1f} | "
              + (f"{reach[2]:.1f} | {reach[1]}" if reach else "not reached | not reached")
              + f" | {min(p[3] for p in c):.4f} | {r['val']:.4f} | {ppl(r['val'])} |")
    # A run with a fault plan (experiment 5): its crashes and joins marked on the loss-vs-time curve, with the
    # curve's loss at the last point before and the first after each event.
    for name, r in runs.items():
        if not r["faults"]:
            continue
        print(f"\n{name}: crashes and joins on its loss-vs-time curve")
        print(f"| worker | event | at {clock} s | acted at s | loss before | loss after |")
        print("|---|---|---|---|---|---|")
        for f in r["faults"]:
            before = at(r["curve"], 2, f["at_s"])
            after = next((p for p in r["curve"] if p[2] > f["at_s"]), None)
            print(f"| {f['worker']} | {f['event']} | {f['at_s']:g} | {f['observed_s']:.2f} | {fmt(before)} | {fmt(after)} |")
    if out_csv:
        tmp = out_csv + ".tmp-curves"
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["run", "update", "local_steps", "s", "loss"])
            for name, r in runs.items():
                for u, n, s, l in r["curve"]:
                    w.writerow([name, u, n, f"{s:.4f}", f"{l:.5f}"])
        os.replace(tmp, out_csv)


if __name__ == "__main__":
    main()
