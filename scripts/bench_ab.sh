#!/usr/bin/env bash
# A/B of two lowcomm builds on one preset, in the same session: rounds alternate
# old, new (so the shared machine's load hits both alike), each one process of
# `lowcomm bench --breakdown`. Prints every round, then medians of tok/s and of
# the chosen kernels' ms/step, with the per-round new/old ratio's median and
# range (the spread tells how noisy the host was).
#
#   bash scripts/bench_ab.sh OLD_BIN NEW_BIN [PRESET=micro] [ROUNDS=5] [STEPS=3] [KERNELS=attention]
#
# Make OLD_BIN by copying target/release/lowcomm aside before the change.
set -euo pipefail
old=${1:?usage: bench_ab.sh OLD_BIN NEW_BIN [preset] [rounds] [steps] [kernel-prefix]}
new=${2:?usage: bench_ab.sh OLD_BIN NEW_BIN [preset] [rounds] [steps] [kernel-prefix]}
preset=${3:-micro}
rounds=${4:-5}
steps=${5:-3}
kern=${6:-attention}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "preset=$preset rounds=$rounds steps=$steps kernels=$kern*"
for r in $(seq 1 "$rounds"); do
    for side in old new; do
        bin=$old
        [ "$side" = new ] && bin=$new
        out="$tmp/$side.$r"
        "$bin" bench --preset "$preset" --steps "$steps" --warmup 1 --breakdown >"$out" 2>/dev/null
        tok=$(sed -n 's/^RESULT .*tok_per_s=\([0-9.]*\).*/\1/p' "$out")
        ms=$(awk -F'|' -v k="$kern" 'index($2, " " k) == 1 { s += $3 } END { printf "%.2f", s }' "$out")
        echo "$r $side $tok $ms" >>"$tmp/rows"
        echo "round $r $side: tok/s $tok, $kern ms/step $ms"
    done
done
python3 - "$tmp/rows" "$kern" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
get = lambda side, col: [float(r[col]) for r in rows if r[1] == side]
for col, name in ((2, "tok/s"), (3, sys.argv[2] + " ms/step")):
    o, n = get("old", col), get("new", col)
    ratio = sorted(b / a for a, b in zip(o, n) if a > 0)
    print(f"{name}: old median {st.median(o):.2f}, new median {st.median(n):.2f}, "
          f"new/old per round median {st.median(ratio):.3f} (range {ratio[0]:.3f}..{ratio[-1]:.3f})")
PY
