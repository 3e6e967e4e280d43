#!/usr/bin/env python3
"""Adds what `lowcomm calibrate` writes now to a cluster profile written by an older
one, from the profile's own comment lines:

- `[links.TIER_sweep]` and its `ping_pong` (the measured link model,
  comm/link_measured.rs): each measured tier's all-reduce sweep (and ping-pong)
  is printed there as

      # inter: measured, ...
      # all-reduce (mean, f32) over 2: a = ..., b = ...: ...
      #        4 B:     0.0666 ms measured,     0.0640 ms fitted

  at the printed times (0.1 us resolution);
- `[timing] micro_batch_cv` (the micro-batch's spread, sim/straggle.rs) from

      # A micro-batch (forward + backward): median 56.2251 ms (50.9851 .. 59.7088 over 20 samples, ...

  Calibrate now takes 1.4826 x the samples' median absolute deviation; the
  comment keeps only the median and the extremes, so this takes
  (median - min) / e_n, e_n the expected largest of n standard normals: the
  lower half, which the samples a page fault or another process stretched
  (the long upper tails of those lines) do not reach. An estimate from two
  order statistics, rougher than calibrate's.

- with `--shared-cores` (the caller knows every rank ran on one machine's
  cores, as bench/netns's namespaces do): `[device] shared_cores_compute_factor`,
  1 + (overlap_compute_factor - 1) / M, M the members of the overlap's
  all-reduce in

      # Overlap (sim/spec.rs Interference): the model's gradient all-reduce (2606 KiB over 2),

  as calibrate/overlap.rs's `one_transfer_factor` computes it where calibrate
  sees the ranks' boot ids agree.

- with `--mean`: `[device] peak_flops` scaled so that the rate gives back the
  micro-batch samples' mean instead of their median (from the same comment
  line's `mean`): what a run that averages over a host's slow and fast
  stretches would meet, where the median of a short calibration catches one
  of them (docs/results/planner-accuracy.md, "calibrate's micro-batch on a
  host with two speeds"). The one value this changes rather than adds.

Rewrites the file in place (atomically); what a profile already has is left as
it is, but for `--mean`.

    python3 scripts/profile_from_comments.py docs/results/planner-accuracy/*/profile.toml
    python3 scripts/profile_from_comments.py --shared-cores PROFILE.toml
    python3 scripts/profile_from_comments.py --shared-cores --mean PROFILE.toml
"""
import math
import os
import re
import sys

UNITS = {"B": 1, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}


def sweeps(text, what=r"all-reduce \(mean, f32\) over (\d+):"):
    """tier -> (members, [(bytes, seconds)]) of every measured sweep whose
    heading matches `what` (the all-reduce's by default; its group, if any,
    is the member count)."""
    out, tier, members = {}, None, None
    for line in text.splitlines():
        if m := re.match(r"# (\w+): measured,", line):
            tier = m[1]
        elif tier and (m := re.match("# " + what, line)):
            members = int(m[1]) if m.groups() else 2
            out[tier] = (members, [])
        elif tier in out and members and (m := re.match(r"#\s+([\d.]+) (B|KiB|MiB|GiB):\s+([\d.]+) ms measured", line)):
            out[tier][1].append((float(m[1]) * UNITS[m[2]], float(m[3]) * 1e-3))
        else:  # the sweep's lines are over
            members = None
    return out


PING_PONG = r"ping-pong \(one way"


def add_ping_pong(text):
    """The profile with a `ping_pong` array in each sweep table that lacks one."""
    for tier, (_, pts) in sweeps(text, PING_PONG).items():
        # The table's own header line, not a comment that names it.
        head = re.search(rf"^\[links\.{tier}_sweep\]$", text, re.M)
        if not head:
            continue
        start = head.start()
        end = text.find("\n[", start + 1)
        end = len(text) if end < 0 else end
        if "ping_pong" in text[start:end]:
            continue
        rows = "".join(f"  [{b:.0f}, {t:.4e}],\n" for b, t in pts)
        table = text[start:end].rstrip("\n") + (
            "\n# The ping-pong above, from its comment lines (scripts/profile_from_comments.py).\n"
            f"ping_pong = [\n{rows}]\n"
        )
        text = text[:start] + table + text[end:]
    return text


def expected_max_of_normals(n, h=1e-3):
    """E[max of n standard normals], as sim/straggle.rs computes it."""
    e, cdf, x = 0.0, 0.0, -12.0
    pdf = lambda x: math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    while x < 12.0:
        nxt = cdf + 0.5 * h * (pdf(x) + pdf(x + h))
        e += (x + 0.5 * h) * (nxt**n - cdf**n)
        cdf, x = nxt, x + h
    return e


MICRO_BATCH = (r"# A micro-batch \(forward \+ backward\): median (?P<median>[\d.]+) ms(?:, mean (?P<mean>[\d.]+))? "
               r"\((?P<low>[\d.]+) \.\. [\d.]+ over (?P<n>\d+) samples")


def add_micro_batch_cv(text):
    """The profile with `micro_batch_cv` at the end of [timing] (module docs), or as it is."""
    m = re.search(MICRO_BATCH, text)
    if "micro_batch_cv" in text or not m or "\n[timing]" not in text:
        return text
    median, low, n = float(m["median"]), float(m["low"]), int(m["n"])
    cv = min(0.5, (median - low) / expected_max_of_normals(n) / median)
    start = text.index("\n[timing]") + 1
    end = text.find("\n[", start)
    end = len(text) if end < 0 else end
    return (text[:end].rstrip("\n") + "\n# The micro-batch's spread from the comment above: (median - min) / e_n over the median\n"
            f"# (scripts/profile_from_comments.py).\nmicro_batch_cv = {cv:.4e}\n" + text[end:])


OVERLAP_MEMBERS = r"# Overlap \(sim/spec.rs Interference\): the model's gradient all-reduce \(.* over (\d+)\)"


def add_shared_cores(text):
    """The profile with `shared_cores_compute_factor` after `overlap_comm_factor`
    (module docs), or as it is (already there, or no overlap measured)."""
    factor = re.search(r"^overlap_compute_factor = ([\d.eE+-]+)$", text, re.M)
    members = re.search(OVERLAP_MEMBERS, text)
    comm = re.search(r"^overlap_comm_factor = .*$", text, re.M)
    if "shared_cores_compute_factor" in text or not (factor and members and comm):
        return text
    m = int(members[1])
    b = 1.0 + (float(factor[1]) - 1.0) / m
    line = (f"\n# The ranks shared one machine's cores (given: --shared-cores): one transfer of the {m}\n"
            f"# above, 1 + (overlap_compute_factor - 1) / {m} (scripts/profile_from_comments.py).\n"
            f"shared_cores_compute_factor = {b!r}")
    return text[:comm.end()] + line + text[comm.end():]


def use_mean_micro_batch(text):
    """The profile with `peak_flops` giving back the micro-batch's mean, not
    its median (module docs), or as it is (no mean in the comment, or done)."""
    m = re.search(MICRO_BATCH, text)
    peak = re.search(r"^peak_flops = ([\d.eE+-]+)$", text, re.M)
    if not (m and m["mean"] and peak) or "gives back the samples' mean" in text:
        return text
    scaled = float(peak[1]) * float(m["median"]) / float(m["mean"])
    line = (f"# The micro-batch's mean, not its median: {peak[1]} x {m['median']} / {m['mean']}; the rate gives back the samples' mean\n"
            f"# (--mean, scripts/profile_from_comments.py).\npeak_flops = {scaled!r}")
    return text[:peak.start()] + line + text[peak.end():]


def write_atomically(path, text):
    tmp = f"{path}.tmp-sweep"
    open(tmp, "w").write(text)
    os.replace(tmp, path)


def main(paths):
    shared, mean = "--shared-cores" in paths, "--mean" in paths
    for path in (p for p in paths if p not in ("--shared-cores", "--mean")):
        text = open(path).read()
        steps = [(use_mean_micro_batch, "peak_flops gives back the micro-batch's mean")] if mean else []
        steps += [(add_shared_cores, "added shared_cores_compute_factor")] if shared else []
        for step, said in steps + [(add_micro_batch_cv, "added micro_batch_cv")]:
            changed = step(text)
            if changed != text:
                write_atomically(path, changed)
                print(f"{path}: {said}")
                text = changed
        found = sweeps(text)
        if "_sweep]" in text:
            with_pp = add_ping_pong(text)
            if with_pp != text:
                write_atomically(path, with_pp)
            print(f"{path}: already has its sweep table{'; added its ping_pong' if with_pp != text else ''}")
            continue
        if not found:
            print(f"{path}: no measured sweep in its comments")
            continue
        tables = []
        for tier, (members, pts) in found.items():
            rows = "".join(f"  [{b:.0f}, {t:.4e}],\n" for b, t in pts)
            tables.append(
                f"\n[links.{tier}_sweep]\n# The {tier} all-reduce sweep above, from its comment lines "
                f"(scripts/profile_from_comments.py).\nmembers = {members}\nall_reduce = [\n{rows}]\n"
            )
        # The tables go after [links]' keys: before the next top-level table.
        at = text.index("\n[", text.index("\n[links]") + 1)
        text = add_ping_pong(text[:at] + "\n" + "".join(tables).rstrip("\n") + "\n" + text[at:])
        write_atomically(path, text)
        print(f"{path}: added {', '.join(f'{t} ({len(p)} sizes over {m})' for t, (m, p) in found.items())}")


if __name__ == "__main__":
    main(sys.argv[1:] or sys.exit(__doc__))
