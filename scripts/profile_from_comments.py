#!/usr/bin/env python3
"""Adds `[links.TIER_sweep]` (and its `ping_pong`) to a cluster profile written by a
`lowcomm calibrate` older than the measured link model (comm/link_measured.rs), from
the profile's own comment lines: each measured tier's all-reduce sweep (and
ping-pong) is printed there as

    # inter: measured, ...
    # all-reduce (mean, f32) over 2: a = ..., b = ...: ...
    #        4 B:     0.0666 ms measured,     0.0640 ms fitted

The times are the printed ones (0.1 us resolution); a profile calibrate writes now
carries the table itself. Rewrites the file in place (atomically); a profile that
already has the table is left as it is.

    python3 scripts/profile_sweep_from_comments.py docs/results/planner-accuracy/*/profile.toml
"""
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
        head = f"[links.{tier}_sweep]"
        if head not in text:
            continue
        start = text.index(head)
        end = text.find("\n[", start + 1)
        end = len(text) if end < 0 else end
        if "ping_pong" in text[start:end]:
            continue
        rows = "".join(f"  [{b:.0f}, {t:.4e}],\n" for b, t in pts)
        table = text[start:end].rstrip("\n") + (
            "\n# The ping-pong above, from its comment lines (scripts/profile_sweep_from_comments.py).\n"
            f"ping_pong = [\n{rows}]\n"
        )
        text = text[:start] + table + text[end:]
    return text


def write_atomically(path, text):
    tmp = f"{path}.tmp-sweep"
    open(tmp, "w").write(text)
    os.replace(tmp, path)


def main(paths):
    for path in paths:
        text = open(path).read()
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
                f"(scripts/profile_sweep_from_comments.py).\nmembers = {members}\nall_reduce = [\n{rows}]\n"
            )
        # The tables go after [links]' keys: before the next top-level table.
        at = text.index("\n[", text.index("\n[links]") + 1)
        text = add_ping_pong(text[:at] + "\n" + "".join(tables).rstrip("\n") + "\n" + text[at:])
        write_atomically(path, text)
        print(f"{path}: added {', '.join(f'{t} ({len(p)} sizes over {m})' for t, (m, p) in found.items())}")


if __name__ == "__main__":
    main(sys.argv[1:] or sys.exit(__doc__))
