#!/usr/bin/env python3
"""co2's all-reduce against diloco's in the same jobs (bench/netns/co2_all_reduce.sh).

    python3 scripts/all_reduce_times.py docs/results/planner-accuracy/co2-all-reduce/20mbit

For each job folder DIR/tauT-REP (co2:tau=T and diloco:h=T run one after
the other in one MPI job), the seconds of each model-size all-reduce on
worker 0 (the spans of runs/*/events.jsonl), co2's mean over diloco's,
and how much of co2's all-reduce its T micro-batches cover; then per T,
the mean ratio over the repeats. DIR/mpi.txt (plain C MPI, the same
size) is quoted as it is. Writes DIR/all-reduce.md and prints it.
The runs/ folders are not committed (.gitignore); the script makes them.
"""
import statistics
import sys
from pathlib import Path

from async_exchange import BIG, all_spans, share_beside


def spans(ev, name, worker=0):
    """(start, end) of every `name` span of `worker` among a run's spans
    (async_exchange.all_spans); of the all-reduces, the model's (over BIG
    bytes), not a scalar vote."""
    return [(e["start_s"], e["end_s"]) for e in ev
            if e["name"] == name and e["worker"] == worker and (name != "all_reduce" or e.get("bytes", 0) > BIG)]


def covered(all_reduces, micro_batches):
    """The mean share of each all-reduce's time that micro-batches cover."""
    return statistics.mean(share_beside(s, e, micro_batches) for s, e in all_reduces)


def job(folder):
    """method -> (all-reduce seconds, share covered by micro-batches)."""
    out = {}
    for events in sorted(folder.glob("runs/*/events.jsonl")):
        ev = all_spans(events.parent)
        ars = spans(ev, "all_reduce")
        out[events.parent.name.split("_")[0]] = ([e - s for s, e in ars], covered(ars, spans(ev, "micro-batch")))
    return out


def main(root):
    lines = ["| job | co2 all-reduce (s) mean [min, max] | diloco | co2 / diloco | co2's covered by micro-batches |",
             "|---|---|---|---|---|"]
    ratios = {}
    for folder in sorted(root.glob("tau*-*"), key=lambda p: [int(x) for x in p.name[3:].split("-")]):
        m = job(folder)
        if "co2" not in m or "diloco" not in m:
            print(f"warning: {folder}: no co2 and diloco runs", file=sys.stderr)
            continue
        (c, share), (d, _) = m["co2"], m["diloco"]
        r = statistics.mean(c) / statistics.mean(d)
        ratios.setdefault(folder.name.split("-")[0], []).append(r)
        lines.append(f"| {folder.name} | {statistics.mean(c):.3f} [{min(c):.3f}, {max(c):.3f}] | "
                     f"{statistics.mean(d):.3f} [{min(d):.3f}, {max(d):.3f}] | {r:.3f} | {share:.0%} |")
    lines += ["", "| T | co2 / diloco, mean over the jobs | jobs |", "|---|---|---|"]
    for tau, rs in sorted(ratios.items(), key=lambda kv: int(kv[0][3:])):
        lines.append(f"| {tau[3:]} | {statistics.mean(rs):.3f} | {len(rs)} |")
    mpi = root / "mpi.txt"
    if mpi.exists():
        lines += ["", "Plain C MPI (bench/netns/mpi_pingpong.c), the same bytes:", "", "```", *mpi.read_text().splitlines(), "```"]
    text = "\n".join(lines) + "\n"
    (root / "all-reduce.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
