#!/usr/bin/env python3
"""Fills the generated blocks of docs/choosing-a-method.md from the plans scripts/choosing_a_method.sh wrote.

    python3 scripts/choosing_a_method.py docs/choosing-a-method docs/choosing-a-method.md

Every block between `<!-- BEGIN name -->` and `<!-- END name -->` in the page is replaced by the table `name`
built from OUT/*.json (`lowcomm plan --json`); the prose around them is left as it is. The papers' own figures
below are quoted from the papers (file and table named next to each); everything else comes from the plans.
"""
import datetime
import json
import os
import platform
import re
import subprocess
import sys

MODELS = [("gpt2", "GPT-2 small"), ("llama-7b", "7B (Llama-2-7B shape)")]
CLUSTERS = [
    ("nvlink-1x8", "1 node x 8 A100, NVLink"),
    ("a100-4x8-100g", "4 x 8 A100, 100 Gb/s"),
    ("tcp-16x8-80g", "16 x 8 A100, 80 Gb/s TCP"),
    ("hetero-2x8-mixed-100g", "2 x 8, A100 + V100-class (0.4), 100 Gb/s"),
]
# ACCO paper (shared/papers/acco-iclr-submission.txt), Table 1, K = 12, N = 64, Psi = 7.5B: formula, GB as printed.
TABLE1 = {
    "ddp": ("(2+2+K) Psi", 120),
    "zero1": ("(2+2+K/N) Psi", 31),
    "slowmo": ("(2+2+2x2+K) Psi", 150),
    "co2": ("(2+2+4x2+K) Psi", 180),
    "acco": ("(2+2+2+K/N) Psi", 46),
}
# CO2 paper (shared/papers/co2.txt), Table 8: overlap ratio vs tau, TransNormer-LLM 7B, 128 A100, TCP/IP.
TABLE8 = {1: 6.52, 3: 20.39, 6: 41.81, 12: 83.28, 24: 100.0, 48: 100.0}
# CO2 paper, Table 3, TCP/IP rows: words/s at 8, 16, 32, 64, 128 GPUs.
TABLE3 = {
    "AdamW": [18444, 3488, 7077, 12855, 22810],
    "CO2 tau 12": [17995, 18975, 36095, 70839, 129865],
    "CO2 tau 48": [18090, 35969, 71249, 147507, 304736],
}
NODES = [1, 2, 4, 8, 16]


def load(out, name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)


def gb(b):
    return f"{b / 1e9:.1f}" if b < 10e9 else f"{b / 1e9:.0f}"


def hidden(t, digits=0):
    if t["comm_s"] <= 0:
        return "no comm."
    return f"{100 * max(0.0, min(1.0, 1 - t['exposed_s'] / t['comm_s'])):.{digits}f}%"


def fits(m):
    return {True: "yes", False: "**no**", None: "?"}[m["fits"]]


def plan_table(r):
    rows = [
        "| # | method | memory/worker GB | fits | s/step (micro-batches) | comm. hidden | tokens/s | scal. | MB/step between nodes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, m in enumerate(r["methods"], 1):
        t = m["time"]
        est = "" if t["exact"] else "~"
        steps = max(1, t["steps"])
        rows.append(
            f"| {i} | {m['label']} | {gb(m['memory_total'])} | {fits(m)} | {est}{t['round_s'] / steps:.3f} ({t['micro_batches'] / steps:.3g}) | {hidden(t)} | "
            f"{est}{m['tokens_per_s']:,.0f} | {m['scalability']:.2f} | {t['bytes_inter'] / steps / 1e6:,.1f} |"
        )
    head = (
        f"{r['workers']} workers ({r['workers_per_node']} per node), {r['tokens_per_micro_batch']} tokens and "
        f"{r['micro_batch_s']:.3f} s per micro-batch (slowest worker), device memory "
        f"{'unknown' if r['device_memory'] is None else gb(r['device_memory']) + ' GB'}, wire {r['wire']}."
    )
    return head + "\n\n" + "\n".join(rows)


def best(r):
    """The first-ranked method that fits (rank.rs puts those first), or None."""
    ok = [m for m in r["methods"] if m["fits"] is not False]
    return ok[0] if ok else None


def summary(out):
    rows = ["| cluster | model | plan's first choice | why (plan's reason) | runner-up |", "|---|---|---|---|---|"]
    for c, cname in CLUSTERS:
        for mkey, mname in MODELS:
            r = load(out, f"{mkey}-{c}")
            ok = [m for m in r["methods"] if m["fits"] is not False]
            if not ok:
                small = min(r["methods"], key=lambda m: m["memory_total"])
                rows.append(
                    f"| {cname} | {mname} | none fits | the smallest, {small['label']}, needs "
                    f"{small['memory_total'] / 1e9:.1f} GB of {r['device_memory'] / 1e9:.1f} GB | |"
                )
                continue
            first, second = ok[0], (ok[1]["label"] if len(ok) > 1 else "")
            why = first["reason"].split(": ", 1)[1] if ": " in first["reason"] else first["reason"]
            rows.append(f"| {cname} | {mname} | **{first['label']}** | {why} | {second} |")
    return "\n".join(rows)


def table1(out):
    r = load(out, "acco-table1")
    rows = [
        "| method | params | grads | comm. buffers | optimizer | outer state | plan total | Table 1 formula | Table 1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    order = {k: i for i, k in enumerate(TABLE1)}
    for m in sorted(r["methods"], key=lambda m: order[m["method"]]):
        mem = m["memory"]
        formula, paper = TABLE1[m["method"]]
        cells = " | ".join(gb(mem[k]) for k in ["params", "grads", "comm_buffers", "optimizer", "outer"])
        rows.append(f"| {m['label']} | {cells} | {m['memory_total'] / 1e9:.2f} GB | {formula} | {paper} GB |")
    return f"{r['workers']} workers, Psi = {r['model']['params']:.3g}, mixed precision (K = 12).\n\n" + "\n".join(rows)


def table8(out):
    rows = [
        "| tau | s per round | all-reduce s | plan: comm. hidden | min(1, tau x step / all-reduce) | CO2 Table 8 |",
        "|---|---|---|---|---|---|",
    ]
    for tau, paper in TABLE8.items():
        r = load(out, f"co2-table8-tau{tau}")
        t = r["methods"][0]["time"]
        formula = min(1.0, tau * r["micro_batch_s"] / t["comm_s"])
        rows.append(
            f"| {tau} | {t['round_s']:.3f} | {t['comm_s']:.3f} | {hidden(t, 2)} | {100 * formula:.2f}% | {paper:.2f}% |"
        )
    return "\n".join(rows)


def table3(out, variant):
    def tps(nodes, method, tau48=False):
        r = load(out, f"co2-table3-{nodes}x8-{variant}" + ("-tau48" if tau48 else ""))
        return next(m for m in r["methods"] if m["method"] == method)["tokens_per_s"]

    ours = {
        "AdamW (zero1)": [tps(n, "zero1") for n in NODES],
        "co2 tau 12": [tps(n, "co2") for n in NODES],
        "co2 tau 48": [tps(n, "co2", True) for n in NODES],
    }
    r = load(out, f"co2-table3-1x8-{variant}")
    rows = [
        "| method | 8 GPUs | 16 | 32 | 64 | 128 | 16 -> 128 |",
        "|---|---|---|---|---|---|---|",
    ]

    def row(name, v, unit):
        # Per N: throughput / (N/8 x throughput at 8), as the paper's ratio column does from 16 to 128.
        cells = " | ".join(f"{x:,.0f} ({x / (2 ** i * v[0]):.2f})" for i, x in enumerate(v))
        return f"| {name} ({unit}) | {cells} | {v[4] / (8 * v[1]):.2f} |"

    for name, v in ours.items():
        rows.append(row("plan: " + name, v, "tokens/s"))
    for name, v in TABLE3.items():
        rows.append(row("paper: " + name, v, "words/s"))
    ar = load(out, f"co2-table3-16x8-{variant}-tau48")["methods"][0]["time"]["comm_s"]
    head = f"{r['micro_batch_s']:.3f} s per local step; one all-reduce of the 7e9 bf16 parameters on 128 GPUs: {ar:.3f} s."
    return head + "\n\n" + "\n".join(rows)


def meta(out):
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], capture_output=True, text=True).stdout
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"Generated by `bash scripts/choosing_a_method.sh` on {when}, lowcomm commit {commit}"
        f"{' with uncommitted changes under src/' if dirty else ''}, on {platform.machine()} {cpu} "
        f"({os.cpu_count()} cores). `lowcomm plan` is analytical: the numbers do not depend on the machine."
    )


def main():
    out, page = sys.argv[1], sys.argv[2]
    blocks = {"meta": meta(out), "summary": summary(out), "table1": table1(out), "table8": table8(out)}
    blocks["table3"] = table3(out, "flops")
    blocks["table3-paper"] = table3(out, "paper")
    for mkey, _ in MODELS:
        for c, _ in CLUSTERS:
            blocks[f"plan-{mkey}-{c}"] = plan_table(load(out, f"{mkey}-{c}"))
    text = open(page).read()
    for name, body in blocks.items():
        pat = re.compile(rf"(<!-- BEGIN {re.escape(name)} -->\n).*?(<!-- END {re.escape(name)} -->)", re.S)
        if not pat.search(text):
            sys.exit(f"{page}: no block `{name}` (<!-- BEGIN {name} --> ... <!-- END {name} -->)")
        text = pat.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    tmp = page + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, page)
    print(f"wrote {page} ({len(blocks)} blocks from {out})")


if __name__ == "__main__":
    main()
