#!/usr/bin/env bash
# Reruns the experiments of docs/results/async-diloco.md (issue 10, "Reproduce the paper, small"), one at a time.
#
#   bash scripts/async_diloco_run.sh [hetero|homogeneous|workers|real|faults|weight|seeds|all]
#   python3 scripts/async_diloco_curves.py docs/results/async-diloco/<exp>[/<level>]   # the page's tables
#
# Each step is a `lowcomm compare` into $RESULTS/<exp>[/<level>]. Experiments 1-3 and 5 run in virtual time
# (--runtime sim), so their results do not depend on the machine's load; experiment 4 runs threads
# (--runtime real) and its times are this machine's (say which machine when quoting them). `compare` reuses a
# method's result.json when its configuration is unchanged: after changing the code, pass FRESH=1 (--fresh).
# Delete the runs/ directories before committing (.gitignore already skips them); the page commits only each
# directory's summary.md, local_steps.csv and loss_vs_time.svg (compare's other files are made again by a rerun).
#
# Environment: LOWCOMM (binary, default target/release/lowcomm), RESULTS (default docs/results/async-diloco),
# STEPS (each worker's inner steps, the paper's t_max = STEPS x workers local steps in all; default 160),
# H (inner steps per round; default 10), LEVELS (experiment 1's levels; default "no slight moderate very"), FAULTS (experiment 5's plan), SEEDS (experiments 6-7; default
# "1337 1 2", 1337 being lowcomm's default seed, the one experiments 1-5 run), FRESH=1.
#
# The paper gives its four heterogeneity levels only as a figure (async-local-sgd.txt, Fig. 4 and Fig. 10); the
# speed factors below are our choice, from equal (no) to eightfold (very) between the fastest and the slowest worker.
set -euo pipefail
L=${LOWCOMM:-target/release/lowcomm}
R=${RESULTS:-docs/results/async-diloco}
STEPS=${STEPS:-160}
H=${H:-10}
COMMON="--runtime sim --preset nano --steps $STEPS --batch-size 8 --eval-every 0 --quiet --h $H"
if [[ ${FRESH:-0} == 1 ]]; then COMMON="$COMMON --fresh"; fi
# The methods of the paper's Fig. 2 / Table 1 with lowcomm's defaults (issue 26): sync DiLoCo, async with
# Nesterov (weight 1/k, outer lr 0.2), async Delayed Nesterov (N = workers, lr 0.7), async DN + DyLU (grace
# "auto": one inner step of the slowest worker). $1 = the level: at "no" DyLU gives every worker H and the groups
# are the same, so DN + DyLU is DN and is left out; at "moderate" and "very" DN + DyLU also runs with grace 0
# (lowcomm's behaviour before issue 26), and at "very" async with SGD outer (weight 1/k, lr 0.7).
methods() {
  local m="diloco,async-diloco,async-diloco:outer=dn"
  if [[ $1 != no ]]; then m="$m,async-diloco:outer=dn:dylu=true"; fi
  if [[ $1 == moderate || $1 == very ]]; then m="$m,async-diloco:outer=dn:dylu=true:grace=0"; fi
  if [[ $1 == very || $1 == workers ]]; then m="$m,async-diloco:outer=sgd"; fi
  echo "$m"
}
# Experiment 2's extra run: DN with a grace period covering a whole round and worker i on shard i (no eq. 2
# draw); with equal speeds every group is then a synchronous round and DN with N = workers applies Nesterov to
# its mean: sync DiLoCo again, up to the order of floating-point sums. The other async runs draw shards (eq. 2).
GRACE="async-diloco:outer=dn:grace=1e6:fixed_shards=true"
declare -A SPEEDS=(
  [no]=1,1,1,1
  [slight]=1,0.9,0.8,0.7
  [moderate]=1,0.7,0.5,0.35
  [very]=1,0.5,0.25,0.125
)
run() { echo "+ $*" >&2; nice -n 10 "$L" "$@"; }
# One heterogeneity level, 4 workers; "no" (equal speeds) is experiment 2 too, so it adds the grace run.
level() {
  local m; m=$(methods "$1")
  if [[ $1 == no ]]; then m="$m,$GRACE"; fi
  run compare --methods "$m" --workers 4 --speeds "${SPEEDS[$1]}" --results "$R/hetero/$1" $COMMON
}
what=${1:-all}
case $what in hetero | homogeneous | workers | real | faults | weight | seeds | all) ;; *)
  echo "unknown experiment '$what': one of hetero, homogeneous, workers, real, faults, weight, seeds, all (e.g. hetero)" >&2
  exit 2
  ;;
esac
if [[ $what == hetero || $what == all ]]; then
  # 1. Four workers at each heterogeneity level: loss per update and per virtual second, final perplexity.
  for l in ${LEVELS:-no slight moderate very}; do level $l; done
fi
if [[ $what == homogeneous ]]; then
  # 2. Homogeneous workers: vanilla async vs DN (paper Sec. 4, "Is staleness the cause?"): the "no" level of 1.
  level no
fi
if [[ $what == workers || $what == all ]]; then
  # 3. 8 and 16 workers, "very" heterogeneous speeds repeated (paper Table 2's direction).
  for k in 8 16; do
    speeds=$(python3 -c "print(','.join(['1','0.5','0.25','0.125'] * ($k // 4)))")
    run compare --methods "$(methods workers)" --workers $k --speeds "$speeds" --results "$R/workers-$k" $COMMON
  done
fi
if [[ $what == real || $what == all ]]; then
  # 4. Threads, 4 workers at speeds 1, 1, 0.5, 0.25: wall clock to a target loss, and the workers' idle share.
  run compare --methods "diloco,async-diloco:outer=dn:dylu=true" --workers 4 --speeds 1,1,0.5,0.25 \
    --results "$R/real" ${COMMON/--runtime sim/--runtime real}
fi
if [[ $what == faults || $what == all ]]; then
  # 5. A crash and a rejoin (async_diloco_curves.py marks both on the loss-vs-time curve). Worker 2 (speed 0.5)
  # is down from 8 to 16 virtual seconds: about a third to two thirds of the run at STEPS 160, H 10 (the DN + DyLU
  # run of the moderate level takes about 25 virtual s there: 640 local steps at 25.5 steps per virtual s).
  if ! "$L" train --help | grep -q -- '--faults'; then
    echo "skipping faults: this lowcomm has no --faults yet (issue 10, milestone 6)" >&2
  else
    run compare --methods "async-diloco:outer=dn:dylu=true" --workers 4 --speeds "${SPEEDS[moderate]}" \
      --faults ${FAULTS:-2:crash@8,2:join@16} --results "$R/faults" $COMMON
  fi
fi
SEEDS=${SEEDS:-1337 1 2}
if [[ $what == weight ]]; then
  # 6. The size of async Nesterov's outer step (issue 26), "very" speeds, 4 workers, several seeds: weight 1/k
  # (the default) at outer lr 0.7 (DiLoCo's: 0.175 per arrival), 0.4, 0.2, 0.1 and 0.05 (0.1 ... 0.0125 per arrival;
  # 0.1 per arrival is weight 1 at the paper's bold lr 0.1), beside sync DiLoCo.
  for s in $SEEDS; do
    run compare --methods "diloco,async-diloco:outer_lr=0.7,async-diloco:outer_lr=0.4,async-diloco:outer_lr=0.2,async-diloco:outer_lr=0.1,async-diloco:outer_lr=0.05" --workers 4 \
      --speeds "${SPEEDS[very]}" --seed "$s" --results "$R/weight/seed-$s" $COMMON
  done
fi
if [[ $what == seeds ]]; then
  # 7. DN + DyLU against sync DiLoCo on more seeds (experiment 1 runs seed 1337), with DN alone and DN + DyLU at
  # grace 0 beside it: "no" (experiment 2's runs) and "moderate" into seeds/, "very" into experiment 6's
  # directories (their diloco and async-diloco:outer_lr=0.2, the default, are reused).
  for s in $SEEDS; do
    if [[ $s == 1337 ]]; then continue; fi
    run compare --methods "$(methods no),$GRACE" --workers 4 --speeds "${SPEEDS[no]}" --seed "$s" \
      --results "$R/seeds/no-seed-$s" $COMMON
    run compare --methods "diloco,async-diloco,async-diloco:outer=dn,async-diloco:outer=dn:dylu=true,async-diloco:outer=dn:dylu=true:grace=0" --workers 4 \
      --speeds "${SPEEDS[moderate]}" --seed "$s" --results "$R/seeds/moderate-seed-$s" $COMMON
    run compare --methods "diloco,async-diloco:outer_lr=0.2,async-diloco:outer=dn,async-diloco:outer=dn:dylu=true,async-diloco:outer=dn:dylu=true:grace=0" --workers 4 \
      --speeds "${SPEEDS[very]}" --seed "$s" --results "$R/weight/seed-$s" $COMMON
  done
fi

