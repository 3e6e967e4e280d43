#!/usr/bin/env python3
"""Tables of docs/results/planner-accuracy.md from bench/netns/planner_accuracy.sh's runs.

    python3 scripts/planner_accuracy.py docs/results/planner-accuracy
    python3 scripts/planner_accuracy.py docs/results/planner-accuracy plain   # sim-plain/, plan-plain.json
    python3 scripts/planner_accuracy.py docs/results/planner-accuracy line    # sim-line/, plan-line.json
    python3 scripts/planner_accuracy.py --pooled docs/results/planner-accuracy A B --variant straggle   # pooled, sim-straggle/

For every link setting (a folder with profile.toml, plan.json, real/, real-async/
and sim/) and every method, three numbers from each of real, sim and plan:

- s/round: seconds per optimizer step (compare's "round"): wall time over
  steps for real and sim, round_s over steps for plan;
- steady s/round, for the methods whose transfers run beside computation
  across a round's end (acco, co2, streaming DiLoCo) and for async DiLoCo:
  the same between the ends of the second and the last round of worker 0
  (its curves.csv; async DiLoCo's pooled curve), where plan::tests_sim
  measures the simulator's steady state. plan predicts the steady state,
  so its error is taken against this: a run of four outer rounds (co2,
  streaming DiLoCo at H = 12 over 48 steps) spends part of its time filling
  the pipeline and waiting for the last transfer, which a steady state does
  not have, and async DiLoCo's server hands the first models out one after
  the other (worker 1 starts a model's transfer later) and takes in the
  last updates. Every other method's run has no such transient (the
  simulator's whole run equals plan there), and its whole run measures the
  steady state over more rounds;
- micro-batches per round per worker (differs from 1 only for acco, whose
  rounds last as long as their communication);
- exposed communication: the share of the wall time a worker waits on the
  network (idle over wall for real and sim, exposed_s over round_s for plan).

After the tables, where each setting's sim error comes from: compute per
round (c) and communication per round (m), averaged over workers, sim against
real (compare's per-round table in each summary.md). For a method that
blocks on its transfers the round is c + m, so the two errors are the
compute calibration's (the micro-batch time) and the link model's.

Errors are (predicted - real) / real for s/round and micro-batches, and
percentage points for the exposed share. Writes OUT/accuracy.md and prints it;
with a variant V, reads sim-V/ and plan-V.json instead (the same profile with
a change, e.g. `plain`: without its overlap factors) and writes accuracy-V.md.
"""
import csv
import json
import statistics
import sys
from pathlib import Path


def runs(folder):
    """spec -> the result.json of each seed's finished run under folder/runs
    (a list: `compare --seeds N` runs METHOD, METHOD-seed-S, ...), or, where
    the runs are gone (runs/ is not kept in git), spec -> (s/round,
    micro-batches/round, idle share) from folder/summary.md's tables."""
    out = {}
    for f in sorted(folder.glob("runs/*/result.json")):
        d = json.loads(f.read_text())
        out.setdefault(d["spec"], []).append(d)
    if not out and (folder / "summary.md").exists():
        out = from_summary(folder / "summary.md")
    return out


def table_rows(lines, first_header):
    """The rows of the markdown table whose header starts with first_header, as dicts."""
    start = next(i for i, l in enumerate(lines) if l.startswith(first_header))
    head = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for l in lines[start + 2:]:
        if not l.startswith("|"):
            break
        rows.append(dict(zip(head, (c.strip() for c in l.strip("|").split("|")))))
    return rows


# The header of compare's per-round table (round, compute c, communication m) in summary.md.
ROUND_TABLE = "| method | round (s) |"


def from_summary(path):
    """compare's summary.md: s/round from the per-round table, micro-batches
    per round and the idle share from the main one."""
    lines = path.read_text().splitlines()
    main = {r["method"]: r for r in table_rows(lines, "| method | status |")}
    out = {}
    for r in table_rows(lines, ROUND_TABLE):
        m = main[r["method"]]
        out[r["method"]] = (float(r["round (s)"]), float(m["micro-batches/round"]), float(m["idle"].rstrip("%")) / 100)
    return dict(sorted(out.items()))


def measured(result):
    """(s/round, micro-batches/round, exposed share) of a real or sim run; of
    several seeds' runs (SIM_SEEDS), the mean of each over them."""
    if isinstance(result, tuple):  # read from a summary.md
        return result
    if isinstance(result, list):
        return tuple(statistics.mean(x) for x in zip(*map(measured, result)))
    s = result["summary"]
    ws = [w for w in s["workers"] if w["micro_batches"]]  # not async-diloco's server
    rounds = ws[0]["micro_batches"]["rounds"]
    mb = statistics.mean(w["micro_batches"]["mean"] for w in ws)
    idle = statistics.mean(w["idle_s"] for w in ws)
    return s["wall_s"] / rounds, mb, idle / s["wall_s"]


# The methods whose run has a fill and a drain (see steady s/round above).
PIPELINED = ("acco", "co2", "streaming-diloco", "async-diloco")


def walls(folder):
    """spec -> wall_s after each step of the run's first worker (folder/curves.csv,
    first seed); a pooled curve (async DiLoCo) rebuilt from its run's worker
    rounds where the run is kept (pooled_walls)."""
    out, seeds = {}, {}
    path = folder / "curves.csv"
    if path.exists():
        for r in csv.DictReader(path.open()):
            if seeds.setdefault(r["method"], r["seed"]) == r["seed"]:
                out.setdefault(r["method"], []).append(float(r["wall_s"]))
    for f in sorted(folder.glob("runs/async-diloco*/result.json")):
        if (f.parent / "metrics.jsonl").exists():
            out[json.loads(f.read_text())["spec"]] = pooled_walls(f.parent / "metrics.jsonl")
    for spec, wall in list(out.items()):
        if any(b < a for a, b in zip(wall, wall[1:])):
            # A curve written a rank at a time (pooled_walls): no steady state from it.
            print(f"warning: {folder}: {spec}'s curve goes back in time; its whole run stands in", file=sys.stderr)
            del out[spec]
    return out


def pooled_walls(metrics):
    """The pooled curve's wall_s (train/parallel/log.rs: round k is the k-th
    group of `workers` worker rounds in the order they ended, at the latest
    end among them) from a run's `worker` lines. Real MPI runs before the
    commit that feeds rank 0's log in time order wrote curves.csv a rank at a
    time (worker 0's rounds paired, then worker 1's), so their curves.csv
    cannot give it."""
    lines = [json.loads(l) for l in metrics.open()]
    # The server is participant `workers`, after the workers.
    workers = max(l["worker"] for l in lines if l.get("kind") == "server")
    ends = sorted(l["end_s"] for l in lines if l.get("kind") == "worker" and l["worker"] < workers)
    return [max(ends[i:i + workers]) for i in range(0, len(ends) - workers + 1, workers)]


def steady(wall, per):
    """s/step between the ends of round 2 and of the last whole round (rounds of `per` steps)."""
    rounds = len(wall) // per
    if rounds < 3:
        return None
    return (wall[rounds * per - 1] - wall[2 * per - 1]) / ((rounds - 2) * per)


def planned(entry):
    t = entry["time"]
    # plan's round is an outer round of `steps` optimizer steps (1 for the
    # synchronous methods and acco), its micro-batches those of the round
    return t["round_s"] / t["steps"], t["micro_batches"] / t["steps"], t["exposed_s"] / t["round_s"]


def rel(pred, real):
    return (pred - real) / real


def setting_rows(folder, variant):
    """One row per method: (spec, real, sim, plan, real steady s/round); real, sim, plan are measured()'s."""
    real = runs(folder / "real") | runs(folder / "real-async")
    real_walls = walls(folder / "real") | walls(folder / "real-async")
    sim = runs(folder / ("sim" + variant))
    plan = {m["method"]: m for m in json.loads((folder / f"plan{variant}.json").read_text())["methods"]}
    rows = []
    for spec, r in real.items():
        name = spec.split(":")[0]
        if spec not in sim or name not in plan:
            print(f"warning: {folder.name}: {spec} has no sim run or plan entry", file=sys.stderr)
            continue
        r = measured(r)
        per = plan[name]["time"]["steps"]
        at_steady = steady(real_walls[spec], per) if spec in real_walls and name in PIPELINED else None
        rows.append((spec, r, measured(sim[spec]), planned(plan[name]), at_steady or r[0]))
    return rows


def per_round(folder):
    """method -> (c, m) seconds per round from folder/summary.md's per-round table."""
    path = folder / "summary.md"
    if not path.exists():
        return {}
    rows = table_rows(path.read_text().splitlines(), ROUND_TABLE)
    return {r["method"]: (float(r["c (s)"]), float(r["m (s)"])) for r in rows}


def split_lines(settings, out, variant):
    """The compute / communication split of the sim error, one table per setting."""
    lines = ["### Where the sim error comes from: compute (c) and communication (m) per round", ""]
    errs = {}  # spec -> ([|c err|], [|m err|])
    for folder in settings:
        real = per_round(folder / "real") | per_round(folder / "real-async")
        sim = per_round(folder / ("sim" + variant))
        name = folder.relative_to(out) if folder.is_relative_to(out) else folder
        lines += [f"{name}:", "", "| method | real c (s) | sim c | c err | real m (s) | sim m | m err |",
                  "|---|---|---|---|---|---|---|"]
        for spec, (rc, rm) in real.items():
            if spec in sim:
                sc, sm = sim[spec]
                e = errs.setdefault(spec, ([], []))
                e[0].append(abs(rel(sc, rc)))
                if rm > 0:
                    e[1].append(abs(rel(sm, rm)))
                lines.append(f"| {spec} | {rc:.4f} | {sc:.4f} | {pct(rel(sc, rc))} | {rm:.4f} | {sm:.4f} "
                             f"| {pct(rel(sm, rm)) if rm > 0 else '-'} |")
        lines.append("")
    lines += ["Median absolute error per method over the settings:", "",
              "| method | compute c | communication m |", "|---|---|---|"]
    med = lambda v: f"{100 * statistics.median(v):.1f}%" if v else "-"
    lines += [f"| {spec} | {med(c)} | {med(m)} |" for spec, (c, m) in errs.items()]
    return lines + [""]


def floor(xs):
    """The least worst-case error any single prediction p can have against
    real values xs: max_i |p - x_i| / x_i is smallest at p = 2 ab / (a + b)
    (a, b the largest and smallest), where it is (a - b) / (a + b)."""
    return (max(xs) - min(xs)) / (max(xs) + min(xs))


def spread_lines(settings, out):
    """For a setting run more than once (pooled folders): each run's real
    s/round per method, their spread, (max - min) / median, and the floor
    their spread puts under any prediction's worst error (`floor`)."""
    by_name = {}
    for folder in settings:
        by_name.setdefault(folder.name, []).append(folder)
    lines = []
    floors = {}  # spec -> [(floor, setting)]
    for name, folders in by_name.items():
        if len(folders) < 2:
            continue
        reals = [{spec: measured(r)[0] for spec, r in (runs(f / "real") | runs(f / "real-async")).items()} for f in folders]
        # A run's folder as a path from OUT, or its own name where it is not under OUT.
        heads = [("first" if f.parent == out else str(f.parent.relative_to(out)) if f.parent.is_relative_to(out)
                  else f.parent.name) for f in folders]
        lines += [f"Real s/round of {name}, run by run:", "",
                  "| method | " + " | ".join(heads) + " | spread | floor |", "|---" * (len(folders) + 3) + "|"]
        for spec in reals[0]:
            xs = [r[spec] for r in reals if spec in r]
            least = floor(xs)
            floors.setdefault(spec, []).append((least, name))
            lines.append(f"| {spec} | " + " | ".join(f"{x:.4f}" for x in xs)
                         + f" | {100 * (max(xs) - min(xs)) / statistics.median(xs):.0f}% | {100 * least:.1f}% |")
        lines.append("")
    if not lines:
        return []
    lines += ["The floor, per method: the worst error no prediction can avoid against these repeated real runs,",
              "in the setting where it is largest (a prediction within 10% of every run needs every floor under 10%).", "",
              "| method | largest floor | setting |", "|---|---|---|"]
    for spec, fs in floors.items():
        f, name = max(fs)
        lines.append(f"| {spec} | {100 * f:.1f}% | {name} |")
    return ["### The same setting run again", ""] + lines + [""]


def pct(x):
    return f"{100 * x:+.1f}%"


def seed_lines(settings, variant):
    """Where the simulator ran several seeds (SIM_SEEDS), each seed's s/round,
    their spread and the real run's place against them: one seed's draws are
    one run's luck, the mean over seeds the model's prediction (finding 27)."""
    rows = []
    for folder in settings:
        real = runs(folder / "real") | runs(folder / "real-async")
        for spec, seeds in runs(folder / ("sim" + variant)).items():
            if isinstance(seeds, list) and len(seeds) > 1 and spec in real:
                per = [measured(x)[0] for x in seeds]
                r = measured(real[spec])[0]
                mean = statistics.mean(per)
                place = "inside" if min(per) <= r <= max(per) else f"{pct(rel(r, min(per) if r < min(per) else max(per)))} outside"
                rows.append(
                    f"| {folder.name} | {spec} | {' '.join(f'{x:.4f}' for x in per)} "
                    f"| {100 * (max(per) - min(per)) / mean:.1f}% | {r:.4f} | {place} |"
                )
    if not rows:
        return []
    return [
        "### The simulator's seeds: s/round of each, their spread, and the real run against them",
        "",
        "| setting | method | sim s/round per seed | spread (max - min over mean) | real | real against the seeds |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def main(out, variant="", pooled=()):
    out = Path(out)
    variant = f"-{variant}" if variant else ""
    settings = [p for d in (out, *map(Path, pooled)) for p in sorted(d.iterdir()) if (p / f"plan{variant}.json").exists()]
    if not settings:
        sys.exit(f"no setting folders with plan.json under {out}: run bench/netns/planner_accuracy.sh first")
    lines = []
    errors = {}  # spec -> {"sim": [...], "plan": [...]} of |s/round error|
    for folder in settings:
        lines += [
            f"### {folder.relative_to(out) if folder.is_relative_to(out) else folder}",
            "",
            "| method | real s/round | sim | sim err | real steady | plan | plan err | real mb/round | sim | plan "
            "| real exposed | sim | plan |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for spec, r, s, p, r_steady in setting_rows(folder, variant):
            e = errors.setdefault(spec, {"sim": [], "plan": [], "mb_sim": [], "mb_plan": []})
            e["sim"].append(abs(rel(s[0], r[0])))
            e["plan"].append(abs(rel(p[0], r_steady)))
            e["mb_sim"].append(abs(rel(s[1], r[1])))
            e["mb_plan"].append(abs(rel(p[1], r[1])))
            lines.append(
                f"| {spec} | {r[0]:.4f} | {s[0]:.4f} | {pct(rel(s[0], r[0]))} | {r_steady:.4f} | {p[0]:.4f} "
                f"| {pct(rel(p[0], r_steady))} "
                f"| {r[1]:.2f} | {s[1]:.2f} | {p[1]:.2f} | {100 * r[2]:.0f}% | {100 * s[2]:.0f}% | {100 * p[2]:.0f}% |"
            )
        lines.append("")
    lines += [
        "### Median absolute error of s/round over the settings",
        "",
        "| method | sim (median) | sim (worst) | plan (median) | plan (worst) | micro-batches/round, sim / plan (median) |",
        "|---|---|---|---|---|---|",
    ]
    for spec, e in errors.items():
        lines.append(
            f"| {spec} | {100 * statistics.median(e['sim']):.1f}% | {100 * max(e['sim']):.1f}% "
            f"| {100 * statistics.median(e['plan']):.1f}% | {100 * max(e['plan']):.1f}% "
            f"| {100 * statistics.median(e['mb_sim']):.1f}% / {100 * statistics.median(e['mb_plan']):.1f}% |"
        )
    lines.append("")
    # async-diloco's server is a third process on the workers' two cores
    # here (docs/results/planner-accuracy.md): the totals say it with and without.
    for label, keep in [("All runs", lambda spec: True),
                        ("Without async-diloco", lambda spec: not spec.startswith("async-diloco"))]:
        every_sim = [x for spec, e in errors.items() if keep(spec) for x in e["sim"]]
        every_plan = [x for spec, e in errors.items() if keep(spec) for x in e["plan"]]
        if every_sim:
            lines.append(
                f"{label}: sim median {100 * statistics.median(every_sim):.1f}%, worst {100 * max(every_sim):.1f}%; "
                f"plan median {100 * statistics.median(every_plan):.1f}%, worst {100 * max(every_plan):.1f}%.  "
            )
    lines += [""] + seed_lines(settings, variant) + spread_lines(settings, out) + split_lines(settings, out, variant)
    text = "\n".join(lines) + "\n"
    (out / f"accuracy{variant}{f'-pooled-{1 + len(pooled)}' if pooled else ''}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    args = sys.argv[1:] or ["docs/results/planner-accuracy"]
    variant = ""
    if "--variant" in args:
        at = args.index("--variant")
        variant = args[at + 1]
        del args[at:at + 2]
    if args[0] == "--pooled":
        # Every setting of OUT and of the further folders (repeated runs) in one
        # table, medians over all of them: OUT/accuracy[-V]-pooled-N.md for N folders.
        main(args[1], variant, args[2:])
    else:
        main(*args)
