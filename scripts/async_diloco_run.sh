#!/usr/bin/env bash
# Reruns the experiments of docs/results/async-diloco.md (issue 10, "Reproduce the paper, small"), one at a time.
#
#   bash scripts/async_diloco_run.sh [hetero|homogeneous|workers|real|faults|all]
#   python3 scripts/async_diloco_curves.py docs/results/async-diloco/<exp>/<level>   # tables per update / per second
#
# Each step is a `lowcomm compare` into docs/results/async-diloco/<exp>[/<level>]. Experiments 1-3 and 5 run in
# virtual time (--runtime sim), so their results do not depend on the machine's load; experiment 4 runs threads
# (--runtime real) and its times are this machine's (say which machine when quoting them). Delete the runs/
# directories before committing.
#
# The paper gives its four heterogeneity levels only as a figure (async-local-sgd.txt, Fig. 4 and Fig. 10); the
# speed factors below are our choice, from equal (no) to eightfold (very) between the fastest and the slowest worker.
set -euo pipefail
L=${LOWCOMM:-target/release/lowcomm}
R=docs/results/async-diloco
STEPS=${STEPS:-400}
COMMON="--runtime sim --preset nano --steps $STEPS --batch-size 8 --eval-every 0 --quiet --h 50"
# The five methods of the paper's Fig. 2 / Table 1: sync DiLoCo, async with Nesterov, async with SGD outer,
# async Delayed Nesterov (N = workers), async DN + DyLU. $1 = workers (DN's buffer N).
methods() {
  echo "diloco,async-diloco,async-diloco:outer=sgd,async-diloco:outer=dn:dn_buffer=$1,async-diloco:outer=dn:dn_buffer=$1:dylu=true"
}
declare -A SPEEDS=(
  [no]=1,1,1,1
  [slight]=1,0.9,0.8,0.7
  [moderate]=1,0.7,0.5,0.35
  [very]=1,0.5,0.25,0.125
)
run() { echo "+ $*" >&2; nice -n 10 "$L" "$@"; }
what=${1:-all}
if [[ $what == hetero || $what == all ]]; then
  # 1. Four workers at each heterogeneity level: perplexity per update and per virtual second.
  for level in no slight moderate very; do
    run compare --methods "$(methods 4)" --workers 4 --speeds "${SPEEDS[$level]}" --results $R/hetero/$level $COMMON
  done
fi
if [[ $what == homogeneous || $what == all ]]; then
  # 2. Homogeneous workers: vanilla async vs DN (paper Sec. 6), with and without a grace period covering a round.
  run compare --methods "diloco,async-diloco,async-diloco:outer=dn:dn_buffer=4,async-diloco:outer=dn:dn_buffer=4:grace=1e6" \
    --workers 4 --results $R/homogeneous $COMMON
fi
if [[ $what == workers || $what == all ]]; then
  # 3. 8 and 16 workers, "very" heterogeneous speeds repeated (paper Table 2's direction).
  for k in 8 16; do
    speeds=$(python3 -c "print(','.join(['1','0.5','0.25','0.125'] * ($k // 4)))")
    run compare --methods "$(methods $k)" --workers $k --speeds "$speeds" --results $R/workers-$k $COMMON
  done
fi
if [[ $what == real || $what == all ]]; then
  # 4. Threads, 4 workers at speeds 1, 1, 0.5, 0.25: wall-clock to a target loss (summary.md's "time to").
  run compare --methods "diloco,async-diloco:outer=dn:dn_buffer=4:dylu=true" --workers 4 --speeds 1,1,0.5,0.25 \
    --results $R/real ${COMMON/--runtime sim/--runtime real}
fi
if [[ $what == faults || $what == all ]]; then
  # 5. A crash and a rejoin: worker 2 down from 60 to 150 virtual seconds (async_diloco_curves.py marks both on
  # the loss-vs-time curve from the runs' `fault` records).
  if ! "$L" train --help | grep -q -- '--faults'; then
    echo "skipping faults: this lowcomm has no --faults yet (issue 10, milestone 6)" >&2
  else
    run compare --methods "async-diloco:outer=dn:dn_buffer=4:dylu=true" --workers 4 --speeds "${SPEEDS[moderate]}" \
      --faults 2:crash@60,2:join@150 --results $R/faults $COMMON
  fi
fi
