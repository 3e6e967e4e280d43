#!/usr/bin/env bash
# Reruns every experiment of docs/results/demo.md (DeToNATION / FlexDeMo, small), one run at a time.
#
#   bash scripts/demo_run.sh [exp1-2x2|exp1-4x2|sign|sign-extra|scaling|overlap|seed|all]
#   bash scripts/demo_run.sh [issue26-2x2|issue26-4x2|issue26-seeds|issue26-sign|issue26]   # the issue-26 reruns
#   python3 scripts/demo_scaling.py docs/results/demo/scaling/{2,4,8}x2   # after `scaling`
#
# Each step is a `lowcomm compare` into docs/results/demo/<name>, then
# `python3 scripts/demo_results.py DIR BASELINE` (tables, bytes.csv, loss vs
# inter-node bytes plot). Virtual time (--runtime sim), so results do not
# depend on the machine's load. Delete the runs/ directories before committing.
set -euo pipefail
L=${LOWCOMM:-target/release/lowcomm}
R=docs/results/demo
COMMON="--runtime sim --preset nano --steps 300 --batch-size 8 --eval-every 0 --quiet"
FULL=flexdemo:replicator=full:sign=false:inner=decoupled-adamw
reps() {  # every replicator at compression $1
  echo "flexdemo:replicator=demo:compression=$1,flexdemo:replicator=random:compression=$1,flexdemo:replicator=striding:compression=$1,flexdemo:replicator=diloco:compression=$1,flexdemo:replicator=striding-element:compression=$1,flexdemo:replicator=diloco-delta:compression=$1"
}
# Issue 26: striding and diloco follow the DeToNATION code; their earlier
# versions are striding-element and diloco-delta (the same code as the
# striding and diloco of the 74596ee runs). NEW: the rows that changed, and
# two rows whose code did not (random, diloco-delta) to check that the
# earlier runs' numbers still come out bit for bit.
NEW="flexdemo:replicator=striding:compression=0.1,flexdemo:replicator=diloco:compression=0.1,flexdemo:replicator=striding:compression=0.02,flexdemo:replicator=diloco:compression=0.02"
CHECK="flexdemo:replicator=random:compression=0.1,flexdemo:replicator=diloco-delta:compression=0.1"
EXP1="$FULL,$(reps 0.1),$(reps 0.02),flexdemo:replicator=demo:compression=0.1:inner=decoupled-adamw,flexdemo:replicator=random:compression=0.1:inner=decoupled-adamw"
run() { echo "+ $*" >&2; nice -n 10 "$L" "$@"; }
what=${1:-all}
if [[ $what == issue26-2x2 || $what == issue26 ]]; then
  run compare --methods "$NEW,$CHECK" --results $R/issue26/2x2 --cluster configs/clusters/a100-2x2-10g.toml $COMMON
fi
if [[ $what == issue26-4x2 || $what == issue26 ]]; then
  run compare --methods "$NEW" --results $R/issue26/4x2 --cluster configs/clusters/a100-4x2-10g.toml $COMMON
fi
if [[ $what == issue26-seeds || $what == issue26 ]]; then
  # Three seeds (1337, 7, 42) of the c = 0.1 comparison on 2x2, every row at this commit (the
  # earlier runs' rows come out a few 1e-3 apart: the engine changed since 74596ee).
  run compare --methods "$FULL,flexdemo:replicator=demo:compression=0.1" \
    --results $R/issue26/base --cluster configs/clusters/a100-2x2-10g.toml $COMMON
  run compare --methods "$FULL,flexdemo:replicator=demo:compression=0.1,flexdemo:replicator=random:compression=0.1" \
    --seed 7 --results $R/issue26/seed7-base --cluster configs/clusters/a100-2x2-10g.toml $COMMON
  run compare --methods "flexdemo:replicator=striding:compression=0.1,flexdemo:replicator=diloco:compression=0.1" \
    --seed 7 --results $R/issue26/seed7 --cluster configs/clusters/a100-2x2-10g.toml $COMMON
  run compare --methods "$FULL,flexdemo:replicator=demo:compression=0.1,flexdemo:replicator=random:compression=0.1,flexdemo:replicator=striding:compression=0.1,flexdemo:replicator=diloco:compression=0.1" \
    --seed 42 --results $R/issue26/seed42 --cluster configs/clusters/a100-2x2-10g.toml $COMMON
fi
if [[ $what == issue26-sign || $what == issue26 ]]; then
  # Without sign, diloco's step is lr g (the raw gradient, no lr^2): plain SGD, so its own lr sweep;
  # striding (a momentum replicator, lr^2) at the sign-off sweep's lr 1.
  for lr in 0.1 0.3 1; do
    run compare --methods flexdemo:replicator=diloco:compression=0.1:sign=false \
      --lr $lr --results $R/issue26/sign/off-lr-$lr --cluster configs/clusters/a100-2x2-10g.toml $COMMON
  done
  run compare --methods flexdemo:replicator=striding:compression=0.1:sign=false \
    --lr 1 --results $R/issue26/sign/off-lr-1-striding --cluster configs/clusters/a100-2x2-10g.toml $COMMON
fi
if [[ $what == exp1-2x2 || $what == all ]]; then
  run compare --methods "$EXP1" --results $R/2x2 --cluster configs/clusters/a100-2x2-10g.toml $COMMON
  python3 scripts/demo_results.py $R/2x2 $FULL > $R/2x2/table.md
fi
if [[ $what == exp1-4x2 || $what == all ]]; then
  run compare --methods "$EXP1" --results $R/4x2 --cluster configs/clusters/a100-4x2-10g.toml $COMMON
  python3 scripts/demo_results.py $R/4x2 $FULL > $R/4x2/table.md
fi
if [[ $what == sign || $what == all ]]; then
  # Sign on vs off (paper App. B, Fig. 9). Without sign the step scales with lr^2
  # (docs/decisions.md), so sign-off runs get their own lr sweep, and sign-on DeMo one too.
  run compare --methods flexdemo:compression=0.1,flexdemo:compression=0.1:sign=false,flexdemo:replicator=random:compression=0.1,flexdemo:replicator=random:compression=0.1:sign=false \
    --results $R/sign/lr-3e-3 --cluster configs/clusters/a100-2x2-10g.toml $COMMON
  for lr in 1e-3 1e-2; do
    run compare --methods flexdemo:compression=0.1 --lr $lr --results $R/sign/lr-$lr --cluster configs/clusters/a100-2x2-10g.toml $COMMON
  done
  for lr in 0.3 1 3; do
    run compare --methods flexdemo:replicator=demo:compression=0.1:sign=false,flexdemo:replicator=random:compression=0.1:sign=false \
      --lr $lr --results $R/sign/off-lr-$lr --cluster configs/clusters/a100-2x2-10g.toml $COMMON
  done
fi
if [[ $what == scaling || $what == all ]]; then
  # Exchange vs nodes (paper Fig. 6): bytes and time per step only, so 30 steps.
  for n in 2 4 8; do
    run compare --methods "$FULL,flexdemo:replicator=demo:compression=0.1,flexdemo:replicator=random:compression=0.1,demo:compression=0.1" \
      --results $R/scaling/${n}x2 --cluster configs/clusters/a100-${n}x2-10g.toml ${COMMON/--steps 300/--steps 30}
  done
fi
if [[ $what == overlap || $what == all ]]; then
  run compare --methods "flexdemo:replicator=demo:compression=0.1,flexdemo:replicator=demo:compression=0.1:overlap=true,flexdemo:replicator=random:compression=0.1,flexdemo:replicator=random:compression=0.1:overlap=true,$FULL,$FULL:overlap=true" \
    --results $R/overlap --cluster configs/clusters/a100-2x2-10g.toml $COMMON
  python3 scripts/demo_results.py $R/overlap > $R/overlap/table.md
fi
if [[ $what == sign-extra || $what == all ]]; then
  # striding-element and diloco-delta (the striding and diloco of 74596ee) without sign, at the lr
  # the sign-off sweep chose for demo and random (1); their sign-on runs are in the 2x2 comparison.
  run compare --methods flexdemo:replicator=striding-element:compression=0.1:sign=false,flexdemo:replicator=diloco-delta:compression=0.1:sign=false \
    --lr 1 --results $R/sign/off-lr-1-striding-diloco --cluster configs/clusters/a100-2x2-10g.toml $COMMON
fi
if [[ $what == seed || $what == all ]]; then
  # Seed-to-seed spread of sec. 1's main comparison (2x2, seed 7 instead of the default 1337).
  run compare --methods "$FULL,flexdemo:replicator=demo:compression=0.1,flexdemo:replicator=random:compression=0.1" \
    --seed 7 --results $R/seed7 --cluster configs/clusters/a100-2x2-10g.toml $COMMON
fi
