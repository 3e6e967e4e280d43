#!/usr/bin/env bash
# planner_accuracy.sh - holds `plan` and `--runtime sim` against real runs over
# a real, shaped TCP network (issue 29): for each link setting, calibrate the
# job first (`lowcomm calibrate --backend mpi` over the same shaped links),
# then run every method for real (one MPI rank per network namespace,
# bench/netns/mpirun_shaped.sh), in the simulator and in `plan`, all three on
# the calibrated profile. scripts/planner_accuracy.py then writes the table
# of docs/results/planner-accuracy.md. Run as root:
#
#   bash bench/netns/planner_accuracy.sh                 # all settings, ~55 min on a 2-core VM
#   SETTINGS="100mbit" bash bench/netns/planner_accuracy.sh   # one of them
#   SIM_ONLY=1 bash bench/netns/planner_accuracy.sh     # sim and plan again on the kept profiles
#                                                       # (a cost-model change; no root), ~10 min
#   SIM_ONLY=straggle bash bench/netns/planner_accuracy.sh   # only the kept profiles with their
#                                                       # micro-batch spread added (sim-straggle/), ~5 min
#   SIM_ONLY=shared bash bench/netns/planner_accuracy.sh     # the kept profiles of a calibrate older than
#                                                       # its boot-id check, with the factor it writes for ranks on one
#                                                       # machine's cores added (sim-shared/, plan-shared.json)
#   SIM_ONLY=mean bash bench/netns/planner_accuracy.sh       # as shared, and the micro-batch's mean in place of
#                                                       # its median (sim-mean/, plan-mean.json)
#   SIM_ONLY=independent bash bench/netns/planner_accuracy.sh  # the kept profiles without their micro-batches'
#                                                       # lag-1 correlation (sim-independent/, plan-independent.json)
#   SIM_ONLY=seeds bash bench/netns/planner_accuracy.sh        # the kept profiles as they are, simulated under
#                                                       # SIM_SEEDS seeds (sim-seeds/; plan-seeds.json is plan.json's twin)
#   SIM_ONLY=sd bash bench/netns/planner_accuracy.sh           # micro_batch_cv from the profile's standard deviation
#                                                       # within each set, its long tail counted (sim-sd/, plan-sd.json)
#   RANKS=4 OUT=... bash bench/netns/planner_accuracy.sh       # four workers (async-diloco on five ranks); the
#                                                       # profile says four nodes, so sim and plan follow
#
# The simulator runs SIM_SEEDS seeds (3 unless set) and the tables take the
# mean over them: each seed draws its own micro-batch times (sim/straggle.rs),
# and one seed's luck is not the model's prediction (finding 27).
#
# Each rank computes on one thread (RAYON_NUM_THREADS=1): two ranks on this
# 2-core machine then stand for two one-core machines, and calibrate measures
# a micro-batch the way training runs it. async-diloco needs a rank for its
# server, so it runs on RANKS + 1 ranks (the workers + the server in its own
# namespace). RANKS (2 unless set) is the number of workers: more than two
# put several ranks on each of this VM's cores, which calibrate measures.
# Needs `lowcomm data prepare --preset nano` and MPICH.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-docs/results/planner-accuracy}
STEPS=${STEPS:-48}
# rate[:jitter] per setting (mpirun_shaped.sh --rate / --jitter)
SETTINGS=${SETTINGS:-"100mbit 20mbit 50mbit:50"}
METHODS=${METHODS:-ddp,zero1,acco,local-sgd,co2,diloco:h=12,demo,flexdemo,streaming-diloco:h=12}
ASYNC=${ASYNC:-async-diloco:h=12}
OVERLAPPED=${OVERLAPPED:-acco,co2,streaming-diloco:h=12}   # the methods whose transfers run beside computation
SIM_SEEDS=${SIM_SEEDS:-3}
RANKS=${RANKS:-2}
cargo build --release --locked --features mpi -q
B=$PWD/target/release/lowcomm
export RAYON_NUM_THREADS=1
# --budget rounds: acco runs STEPS rounds like the rest (it applies to the acco
# family only, and compare refuses it without one: METHODS without acco, e.g. a
# longer run of the local-update methods, runs without it)
budget=()
case ",$METHODS," in *,acco*|*,dpu*) budget=(--budget rounds) ;; esac
common=(--preset nano --steps "$STEPS" --batch-size 16 --eval-every 0)

dir_of() {   # the folder of a setting: RATE or RATE-jitterPCT
    local rate=${1%%:*}
    [[ $1 != *:* ]] && echo "$OUT/$rate" || echo "$OUT/$rate-jitter${1#*:}"
}
# Every real run first, on a quiet machine; the simulator and plan after
# (virtual time: the machine's load does not change them).
[[ ${SIM_ONLY:-0} != 0 ]] || for setting in $SETTINGS; do
    rate=${setting%%:*}
    jitter=0
    [[ $setting != *:* ]] || jitter=${setting#*:}
    dir=$(dir_of "$setting")
    mkdir -p "$dir"
    shaped() {
        local ranks=$1; shift
        bench/netns/mpirun_shaped.sh --ranks "$ranks" --rate "$rate" --jitter "$jitter" --prefix lcpa -- "$@"
    }
    start=$(date +%s)
    echo "== $dir: calibrate over the shaped link" >&2
    shaped "$RANKS" "$B" calibrate --backend mpi --preset nano --batch-size 16 --max-bytes 4194304 \
        --out "$dir/profile.toml" --force --name "netns-$rate-jitter$jitter"
    echo "== $dir: real runs (MPI, $RANKS ranks; $ASYNC on $((RANKS + 1)))" >&2
    shaped "$RANKS" "$B" compare --backend mpi --methods "$METHODS" "${common[@]}" "${budget[@]}" --results "$dir/real" --fresh >/dev/null
    shaped $((RANKS + 1)) "$B" compare --backend mpi --workers "$RANKS" --methods "$ASYNC" "${common[@]}" --results "$dir/real-async" --fresh >/dev/null
    echo "== $dir: $(( $(date +%s) - start )) s" >&2
done
# A variant of the kept profiles, in copies profile-NAME.toml, simulated and
# planned into sim-NAME/ and plan-NAME.json: `variant NAME [FLAG]` runs
# scripts/profile_from_comments.py [FLAG] on each copy.
#   straggle: a profile from a calibrate older than `micro_batch_cv` gets the
#     spread from its comment lines: the stragglers' wait (sim/straggle.rs)
#     against the same profile without it;
#   shared --shared-cores: every rank here runs on this VM's cores, so a
#     profile from a calibrate that did not yet check the ranks' boot ids
#     gets the factor it now writes for that (calibrate/overlap.rs,
#     one_transfer_factor).
variant() {
    local name=$1; shift
    for setting in $SETTINGS; do
        dir=$(dir_of "$setting")
        cp "$dir/profile.toml" "$dir/profile-$name.toml"
        python3 scripts/profile_from_comments.py "$@" "$dir/profile-$name.toml" >/dev/null
    done
    simulate "$name"
}
# sim-NAME/ and plan-NAME.json from each setting's profile-NAME.toml, and their table.
simulate() {
    local name=$1
    for setting in $SETTINGS; do
        dir=$(dir_of "$setting")
        "$B" compare --runtime sim --cluster "$dir/profile-$name.toml" --methods "$METHODS,$ASYNC" "${common[@]}" \
            "${budget[@]}" --seeds "$SIM_SEEDS" --results "$dir/sim-$name" --fresh >/dev/null
        "$B" plan --model nano --cluster "$dir/profile-$name.toml" --batch 16x64 --methods "$METHODS,$ASYNC" \
            --json "$dir/plan-$name.json" > /dev/null
    done
    python3 scripts/planner_accuracy.py "$OUT" "$name"
}
# derive NAME FILTER...: each setting's profile.toml through `FILTER... PROFILE`
# into profile-NAME.toml, then simulate NAME.
derive() {
    local name=$1; shift
    for setting in $SETTINGS; do
        dir=$(dir_of "$setting")
        "$@" "$dir/profile.toml" > "$dir/profile-$name.toml" || { rm -f "$dir/profile-$name.toml"; exit 1; }
    done
    simulate "$name"
}
# PROFILE with micro_batch_cv from its spread as a standard deviation within
# each set (calibrate's comment since e286d0c).
sd_as_cv() {
    local sd
    sd=$(sed -n 's/^# Within each set as a standard deviation over the mean, its long tail counted: \([0-9.]*\)\.$/\1/p' "$1")
    [[ -n $sd ]] || { echo "$1: no standard deviation within sets (calibrate before e286d0c)" >&2; return 1; }
    sed "s/^micro_batch_cv = .*/micro_batch_cv = $sd/" "$1"
}
# independent: the kept profiles without micro_batch_correlation, each
# micro-batch drawn on its own: what the stretches are worth (finding 25).
if [[ ${SIM_ONLY:-0} == independent ]]; then
    derive independent grep -v '^micro_batch_correlation'
    exit
fi
# seeds: the kept profiles unchanged, under SIM_SEEDS seeds (finding 27).
if [[ ${SIM_ONLY:-0} == seeds ]]; then
    derive seeds cat
    exit
fi
# sd: the spread as a standard deviation within each set, in place of the
# median deviation (finding 27).
if [[ ${SIM_ONLY:-0} == sd ]]; then
    derive sd sd_as_cv
    exit
fi
if [[ ${SIM_ONLY:-0} == straggle ]]; then
    variant straggle
    exit
fi
if [[ ${SIM_ONLY:-0} == shared ]]; then
    variant shared --shared-cores
    exit
fi
if [[ ${SIM_ONLY:-0} == mean ]]; then
    variant mean --shared-cores --mean
    exit
fi
for setting in $SETTINGS; do
    dir=$(dir_of "$setting")
    echo "== $dir: simulator and plan on the calibrated profile" >&2
    "$B" compare --runtime sim --cluster "$dir/profile.toml" --methods "$METHODS,$ASYNC" "${common[@]}" "${budget[@]}" \
        --seeds "$SIM_SEEDS" --results "$dir/sim" --fresh >/dev/null
    "$B" plan --model nano --cluster "$dir/profile.toml" --batch 16x64 --methods "$METHODS,$ASYNC" \
        --json "$dir/plan.json" > "$dir/plan.txt"
done
python3 scripts/planner_accuracy.py "$OUT"
# The same profiles without their overlap factors, for the methods they
# change: what the factors are worth (docs/results/planner-accuracy.md).
for setting in $SETTINGS; do
    dir=$(dir_of "$setting")
    grep -v '^overlap_' "$dir/profile.toml" > "$dir/profile-plain.toml"
    "$B" compare --runtime sim --cluster "$dir/profile-plain.toml" --methods "$OVERLAPPED" "${common[@]}" --budget rounds \
        --seeds "$SIM_SEEDS" --results "$dir/sim-plain" --fresh >/dev/null
    "$B" plan --model nano --cluster "$dir/profile-plain.toml" --batch 16x64 --methods "$OVERLAPPED" \
        --json "$dir/plan-plain.json" > /dev/null
done
python3 scripts/planner_accuracy.py "$OUT" plain
variant straggle
