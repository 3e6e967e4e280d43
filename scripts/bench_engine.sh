#!/usr/bin/env bash
# The engine before and after a change, measured in one run on this machine:
# in-process collective bandwidth (`lowcomm bench --what comm`) and the
# simulator's overhead over the raw math (`lowcomm bench --what sim`), each
# binary run ROUNDS times, alternating, so both see the same noise; prints
# the median of each and the ratio after / before.
#
#   bash scripts/bench_engine.sh                 # BASE=880cea9 (before the engine rework), ROUNDS=3
#   BASE=<commit> ROUNDS=5 bash scripts/bench_engine.sh
#
# The baseline is built from its commit in a temporary git worktree with its
# own target directory (a release build: a few minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-880cea9}
ROUNDS=${ROUNDS:-3}
WT=$(mktemp -d /tmp/lowcomm-base-XXXXXX)
trap 'git worktree remove --force "$WT" >/dev/null 2>&1 || rm -rf "$WT"' EXIT
git worktree add -q --detach "$WT" "$BASE"
echo "building $BASE (before) and the working tree (after) ..." >&2
(cd "$WT" && CARGO_TARGET_DIR=/tmp/lowcomm-base-target cargo build --release --locked -q)
cargo build --release --locked -q
BEFORE=/tmp/lowcomm-base-target/release/lowcomm
AFTER=./target/release/lowcomm
OUT=$(mktemp)
for r in $(seq "$ROUNDS"); do
  for side in before after; do
    bin=$BEFORE; [ "$side" = after ] && bin=$AFTER
    "$bin" bench --what comm 2>/dev/null | sed -n "s/^RESULT comm /$side /p" >>"$OUT"
    "$bin" bench --what sim --preset micro --steps 10 2>/dev/null | sed -n "s/^RESULT sim_overhead /$side sim /p" >>"$OUT"
  done
done
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F); base $BASE; medians of $ROUNDS alternating rounds"
python3 - "$OUT" <<'EOF'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    side, rest = line.split(' ', 1)
    kv = dict(re.findall(r'(\w+)=([^\s]+)', rest))
    if rest.startswith('sim'):
        key = 'sim overhead, micro, 1 worker (%)'
        rows.setdefault(key, {}).setdefault(side, []).append(float(kv['overhead'].rstrip('%')))
    else:
        key = f"{kv['op']} {kv['MiB']} MiB, {kv['ranks']} workers (GB/s)"
        rows.setdefault(key, {}).setdefault(side, []).append(float(kv['GBps']))
print('| measurement | before | after | after / before |')
print('|---|---|---|---|')
for key, v in rows.items():
    b, a = statistics.median(v['before']), statistics.median(v['after'])
    print(f'| {key} | {b:.2f} | {a:.2f} | {a / b:.2f} |')
EOF
rm -f "$OUT"
