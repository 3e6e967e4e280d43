#!/usr/bin/env python3
"""Tables of docs/results/planner-accuracy.md from bench/netns/planner_accuracy.sh's runs.

    python3 scripts/planner_accuracy.py docs/results/planner-accuracy
    python3 scripts/planner_accuracy.py docs/results/planner-accuracy plain   # sim-plain/, plan-plain.json
    python3 scripts/planner_accuracy.py docs/results/planner-accuracy line    # sim-line/, plan-line.json

For every link setting (a folder with profile.toml, plan.json, real/, real-async/
and sim/) and every method, three numbers from each of real, sim and plan:

- s/round: seconds per optimizer step (compare's "round"): wall time over
  steps for real and sim, round_s over steps for plan;
- micro-batches per round per worker (differs from 1 only for acco, whose
  rounds last as long as their communication);
- exposed communication: the share of the wall time a worker waits on the
  network (idle over wall for real and sim, exposed_s over round_s for plan).

Errors are (predicted - real) / real for s/round and micro-batches, and
percentage points for the exposed share. Writes OUT/accuracy.md and prints it;
with a variant V, reads sim-V/ and plan-V.json instead (the same profile with
a change, e.g. `plain`: without its overlap factors) and writes accuracy-V.md.
"""
import json
import statistics
import sys
from pathlib import Path


def runs(folder):
    """spec -> result.json of every finished run under folder/runs, or, where
    the runs are gone (runs/ is not kept in git), spec -> (s/round,
    micro-batches/round, idle share) from folder/summary.md's tables."""
    out = {}
    for f in sorted(folder.glob("runs/*/result.json")):
        d = json.loads(f.read_text())
        out[d["spec"]] = d
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


def from_summary(path):
    """compare's summary.md: s/round from the per-round table, micro-batches
    per round and the idle share from the main one."""
    lines = path.read_text().splitlines()
    main = {r["method"]: r for r in table_rows(lines, "| method | status |")}
    out = {}
    for r in table_rows(lines, "| method | round (s) |"):
        m = main[r["method"]]
        out[r["method"]] = (float(r["round (s)"]), float(m["micro-batches/round"]), float(m["idle"].rstrip("%")) / 100)
    return dict(sorted(out.items()))


def measured(result):
    """(s/round, micro-batches/round, exposed share) of a real or sim run."""
    if isinstance(result, tuple):  # read from a summary.md
        return result
    s = result["summary"]
    ws = [w for w in s["workers"] if w["micro_batches"]]  # not async-diloco's server
    rounds = ws[0]["micro_batches"]["rounds"]
    mb = statistics.mean(w["micro_batches"]["mean"] for w in ws)
    idle = statistics.mean(w["idle_s"] for w in ws)
    return s["wall_s"] / rounds, mb, idle / s["wall_s"]


def planned(entry):
    t = entry["time"]
    # plan's round is an outer round of `steps` optimizer steps (1 for the
    # synchronous methods and acco), its micro-batches those of the round
    return t["round_s"] / t["steps"], t["micro_batches"] / t["steps"], t["exposed_s"] / t["round_s"]


def rel(pred, real):
    return (pred - real) / real


def setting_rows(folder, variant):
    """One row per method: (spec, real, sim, plan) triples of measured()."""
    real = runs(folder / "real") | runs(folder / "real-async")
    sim = runs(folder / ("sim" + variant))
    plan = {m["method"]: m for m in json.loads((folder / f"plan{variant}.json").read_text())["methods"]}
    rows = []
    for spec, r in real.items():
        name = spec.split(":")[0]
        if spec not in sim or name not in plan:
            print(f"warning: {folder.name}: {spec} has no sim run or plan entry", file=sys.stderr)
            continue
        rows.append((spec, measured(r), measured(sim[spec]), planned(plan[name])))
    return rows


def pct(x):
    return f"{100 * x:+.1f}%"


def main(out, variant=""):
    out = Path(out)
    variant = f"-{variant}" if variant else ""
    settings = sorted(p for p in out.iterdir() if (p / f"plan{variant}.json").exists())
    if not settings:
        sys.exit(f"no setting folders with plan.json under {out}: run bench/netns/planner_accuracy.sh first")
    lines = []
    errors = {}  # spec -> {"sim": [...], "plan": [...]} of |s/round error|
    for folder in settings:
        lines += [
            f"### {folder.name}",
            "",
            "| method | real s/round | sim | plan | sim err | plan err | real mb/round | sim | plan "
            "| real exposed | sim | plan |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for spec, r, s, p in setting_rows(folder, variant):
            e = errors.setdefault(spec, {"sim": [], "plan": [], "mb_sim": [], "mb_plan": []})
            e["sim"].append(abs(rel(s[0], r[0])))
            e["plan"].append(abs(rel(p[0], r[0])))
            e["mb_sim"].append(abs(rel(s[1], r[1])))
            e["mb_plan"].append(abs(rel(p[1], r[1])))
            lines.append(
                f"| {spec} | {r[0]:.4f} | {s[0]:.4f} | {p[0]:.4f} | {pct(rel(s[0], r[0]))} | {pct(rel(p[0], r[0]))} "
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
    text = "\n".join(lines) + "\n"
    (out / f"accuracy{variant}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main(*(sys.argv[1:] or ["docs/results/planner-accuracy"]))
