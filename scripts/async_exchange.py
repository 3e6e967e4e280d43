#!/usr/bin/env python3
"""Async DiLoCo's exchange, piece by piece, in a real run and in the simulator.

    python3 scripts/async_exchange.py docs/results/planner-accuracy/interleaved docs/results/planner-accuracy/repeat \
        docs/results/planner-accuracy/twice docs/results/planner-accuracy/whole

For every setting folder under each DIR (real-async/ and, where it has
one, sim/, as bench/netns/planner_accuracy.sh and async_server_wait.sh
write them), follows each update of the
async-diloco run from the worker's send to the model it gets back, from
the spans of events.jsonl (workers 0 and 1, the server is participant 2):

- upload: the worker's send starts -> the server's receive of it ends
  (the transfer, and the wait behind another worker's on the server's link);
- hold: the server's receive ends -> the server starts sending that worker
  its next model (the outer step, and whatever the server waits for first);
- download: the server's send starts -> the worker's receive ends;
- exchange: the worker's send starts -> its receive ends (the three above);
- together: how often the server sends two models within 10 ms of each
  other, which then share its link;
- first model: when workers 0 and 1 had their first model (the end of
  their first receive): the hand-out before any update;
- beside the other way: the share of an upload that the server's sending
  the other worker a model overlaps, and of a download that the other
  worker's upload does (the server's link carrying data both ways,
  finding 22; sim-duplex/ where bench/netns/planner_accuracy.sh's
  SIM_ONLY=duplex made one).

Medians over the run's updates (the first round's hand-out, before any
update, is left out). docs/results/planner-accuracy.md, finding 12,
quotes the table this prints.

A second table, for the real runs: the workers' micro-batch (median ms)
while the server is sending a model, while it is not, and while neither
it nor the other worker (its upload) sends anything, beside the same
setting's synchronous DiLoCo (real/runs/diloco*, two ranks and no server):
what the server's share of the two cores costs the workers' computation
(docs/results/planner-accuracy.md, finding 19).
The runs/ folders it reads are not committed (.gitignore keeps summaries
only): bench/netns/planner_accuracy.sh and async_server_wait.sh make them.
"""
import json
import statistics
import sys
from pathlib import Path

SERVER = 2
BIG = 1 << 20  # a model or an update, not a hello or a stop


def all_spans(run: Path) -> list:
    """Every span of a run's events.jsonl."""
    with open(run / "events.jsonl") as f:
        return [e for e in map(json.loads, f) if e.get("record") == "span"]


def spans(run: Path, ev: list | None = None) -> list:
    """The communication spans (of `ev` where given, else read from `run`), in start order."""
    return sorted((e for e in (all_spans(run) if ev is None else ev) if e["lane"] == "comm"), key=lambda e: e["start_s"])


def model_sends(ev: list) -> list:
    """The server's sends of a model (not a hello or a stop) among `ev`."""
    return [e for e in ev if e["worker"] == SERVER and e["name"] == "send" and e["bytes"] >= BIG]


def updates(ev: list) -> list:
    """Every update of workers 0 and 1 among the communication spans `ev`, as
    (worker, upload (start, end), download (start, end)): the worker's send
    starts -> the server's receive of it ends, and the server's model send
    answering it starts -> the worker's receive ends (module docs). A
    worker's send span ends when MPI has taken the bytes, long before they
    land (1 ms against 1.1 s at 20 Mbit/s), so the server's receive dates
    the upload's end."""
    server_recvs = [e for e in ev if e["worker"] == SERVER and e["name"] == "recv"]
    server_sends = model_sends(ev)
    found = []
    for w in (0, 1):
        mine = [e for e in ev if e["worker"] == w]
        for i, s in enumerate(mine):
            if s["name"] != "send" or s["bytes"] < BIG:
                continue
            reply = next((e for e in mine[i + 1:] if e["name"] == "recv"), None)
            # The server's first receive to end after the send starts: this update's arrival.
            arrived = next((r for r in server_recvs if r["end_s"] >= s["start_s"] + 1e-4), None)
            if reply is None or arrived is None:
                continue
            # The server's model send answering it: of those starting between the arrival
            # and the worker's receive ending, the first after the arrival.
            sends = [x for x in server_sends if arrived["end_s"] - 1e-6 <= x["start_s"] <= reply["end_s"]]
            if not sends:
                continue
            out = min(sends, key=lambda x: abs(x["start_s"] - arrived["end_s"]))
            found.append((w, (s["start_s"], arrived["end_s"]), (out["start_s"], reply["end_s"])))
    return found


def exchanges(ev: list) -> dict:
    """Medians of upload, hold, download, exchange (seconds) and how many models were sent together."""
    server_sends = model_sends(ev)
    each = updates(ev)
    up = [b - a for _, (a, b), _ in each]
    hold = [c - b for _, (_, b), (c, _) in each]
    down = [d - c for _, _, (c, d) in each]
    whole = [d - a for _, (a, _), (_, d) in each]
    ups = [(a, b, w) for w, (a, b), _ in each]  # for `reverse`
    downs = [(c, d, w) for w, _, (c, d) in each]
    first = [next((e["end_s"] for e in ev if e["worker"] == w and e["name"] == "recv"), float("nan")) for w in (0, 1)]
    starts = [e["start_s"] for e in server_sends]
    together = sum(1 for a, b in zip(starts, starts[1:]) if b - a < 0.01)
    med = statistics.median
    return {
        "reverse": f"{100 * med(reverse(ups, downs)):.0f}% / {100 * med(reverse(downs, ups)):.0f}%",
        "n": len(whole),
        "upload": med(up),
        "hold": med(hold),
        "download": med(down),
        "exchange": med(whole),
        "together": f"{together} of {max(len(starts) - 1, 0)}",
        "first": " / ".join(f"{t:.2f}" for t in first),
    }


def reverse(mine: list, theirs: list) -> list:
    """Per transfer of `mine` ((start, end, worker)), the share of it that the
    other worker's transfers of `theirs` overlap: uploads beside the server
    sending the other worker its model, or downloads beside the other
    worker's upload: the server's link carrying data both ways (finding 22)."""
    return [min(1.0, share_beside(a, b, [(c, d) for c, d, v in theirs if v != w])) for a, b, w in mine]


def share_beside(start: float, end: float, others: list) -> float:
    """The share of start..end that the intervals `others` ((start, end),
    not overlapping each other) cover."""
    if end <= start:
        return 0.0
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in others) / (end - start)


def micro_batches(ev: list) -> list:
    """The micro-batch spans among `ev`."""
    return [e for e in ev if e["name"] == "micro-batch"]


def beside_server(setting: Path) -> str | None:
    """The row of the second table (module docs) for one setting folder, or None without its runs."""
    runs = sorted((setting / "real-async" / "runs").glob("async-diloco*"))
    sync = sorted((setting / "real" / "runs").glob("diloco*"))
    if not runs or not sync or not (runs[0] / "events.jsonl").exists() or not (sync[0] / "events.jsonl").exists():
        return None
    ev = all_spans(runs[0])
    comm = spans(runs[0], ev)
    sends = [(e["start_s"], e["end_s"]) for e in model_sends(comm)]
    uploads = {w: [] for w in (0, 1)}
    for w, upload, _ in updates(comm):
        uploads[w].append(upload)
    during, apart, quiet = [], [], []
    for m in micro_batches(ev):
        t = m["end_s"] - m["start_s"]
        sending = share_beside(m["start_s"], m["end_s"], sends) > 0
        (during if sending else apart).append(t)
        if not sending and share_beside(m["start_s"], m["end_s"], uploads.get(1 - m["worker"], [])) == 0:
            quiet.append(t)
    ms = lambda xs: f"{1000 * statistics.median(xs):.1f} ({len(xs)})" if xs else "-"
    sync_ms = [m["end_s"] - m["start_s"] for m in micro_batches(all_spans(sync[0]))]
    return f"| {ms(during)} | {ms(apart)} | {ms(quiet)} | {ms(sync_ms)} |"


# The runs of a setting folder, and what the table calls them.
KINDS = {"real-async": "real", "real-async-concurrent": "real, models sent at once", "sim": "sim",
         "sim-duplex": "sim, duplex (finding 22)"}


def main() -> None:
    print("| setting | run | updates | upload (s) | hold (s) | download (s) | exchange (s) | server's model sends back to back | first model, worker 0 / 1 (s) | upload / download beside the other way |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for top in map(Path, sys.argv[1:]):
        for setting in sorted(p for p in top.iterdir() if (p / "real-async").is_dir()):
            for kind, label in KINDS.items():
                runs = sorted((setting / kind / "runs").glob("async-diloco*"))
                if not runs or not (runs[0] / "events.jsonl").exists():
                    continue
                x = exchanges(spans(runs[0]))
                print(
                    f"| {top.name}/{setting.name} | {label} | {x['n']} | {x['upload']:.3f} | {x['hold']:.3f} "
                    f"| {x['download']:.3f} | {x['exchange']:.3f} | {x['together']} | {x['first']} | {x['reverse']} |"
                )
    print()
    print("| setting | async DiLoCo's micro-batch while the server sends a model, ms (count) | while it does not | beside no transfer at all | sync DiLoCo's, same setting |")
    print("|---|---|---|---|---|")
    for top in map(Path, sys.argv[1:]):
        for setting in sorted(p for p in top.iterdir() if (p / "real-async").is_dir()):
            row = beside_server(setting)
            if row:
                print(f"| {top.name}/{setting.name} {row}")


if __name__ == "__main__":
    main()
