#!/usr/bin/env bash
# kernel_pool.sh - what running a process's lone worker inside a rayon pool
# (src/runtime/kernel_pool.rs; an MPI rank's worker) is worth against handing
# every parallel loop to the process-wide pool (LOWCOMM_KERNEL_POOL=global,
# the way the real runtime computed before): the same compare with one
# worker, both ways, alternated REPEATS times in one run. Prints each
# method's median run time both ways and the ratio (own / global; below 1:
# faster). Losses must agree: the kernels' bits do not depend on the pool.
# Under MPI beside a third process, measure with bench/netns (finding 23 of
# docs/results/planner-accuracy.md has the commands).
#
#   bash bench/kernel_pool.sh                      # ~2 min on a 2-core VM
#   REPEATS=5 RAYON_NUM_THREADS=1 bash bench/kernel_pool.sh
#
# Needs `lowcomm data prepare --preset nano`.
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${REPEATS:-3}
METHODS=${METHODS:-ddp,diloco:h=12}
WORKERS=${WORKERS:-1}
STEPS=${STEPS:-48}
cargo build --release --locked -q
B=$PWD/target/release/lowcomm
out=$(mktemp -d /tmp/kernel-pool.XXXXXX)
trap 'rm -rf "$out"' EXIT
for r in $(seq "$REPEATS"); do
    for pool in global own; do
        echo "== repeat $r/$REPEATS, kernels on the $pool pool" >&2
        LOWCOMM_KERNEL_POOL=$pool "$B" compare --methods "$METHODS" --workers "$WORKERS" \
            --preset nano --steps "$STEPS" --batch-size 16 --eval-every 0 --results "$out/$pool-$r" --fresh >"$out/$pool-$r.log" 2>&1
    done
done
python3 - "$out" <<'EOF'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
runs = {}   # (method, pool) -> [(run_s, val_loss)]
for d in sorted(p for p in out.iterdir() if p.is_dir()):
    pool = d.name.split("-")[0]
    for r in sorted((d / "runs").glob("*/result.json")):
        j = json.loads(r.read_text())
        runs.setdefault((j["label"], pool), []).append((j["run_s"], j["val_loss"]))
print("| method | run time, global pool (s) | run time, own pool (s) | own / global | val loss, global / own |")
print("|---|---|---|---|---|")
for m in dict.fromkeys(k[0] for k in runs):
    g, o = runs[(m, "global")], runs[(m, "own")]
    mg, mo = statistics.median(t for t, _ in g), statistics.median(t for t, _ in o)
    losses = lambda rs: "/".join(sorted({f"{l:.4f}" for _, l in rs}))
    print(f"| {m} | {mg:.2f} | {mo:.2f} | {mo / mg:.2f} | {losses(g)} / {losses(o)} |")
EOF
