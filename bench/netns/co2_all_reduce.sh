#!/usr/bin/env bash
# co2_all_reduce.sh - co2's asynchronous all-reduce against a blocking one
# over the same shaped link (docs/results/planner-accuracy.md, finding 20):
# co2:tau=T and diloco:h=T in one MPI job, for T = 6, 12 and 24 inner steps
# (12 outer rounds each: the all-reduce runs beside T micro-batches of
# computation in co2, alone in diloco), REPS times; then the same model-size
# all-reduce in plain C MPI (mpi_pingpong.c), back to back and 0.6 s apart.
# scripts/all_reduce_times.py writes OUT/all-reduce.md from the runs. As root:
#
#   bash bench/netns/co2_all_reduce.sh                  # 20 Mbit/s, 3 reps, ~10 min
#   RATE=100mbit REPS=2 OUT=/tmp/x bash bench/netns/co2_all_reduce.sh
#   LATENCY=50ms TAUS=12 OUT=/tmp/y bash bench/netns/co2_all_reduce.sh   # a shorter tbf queue
#
# Needs `lowcomm data prepare --preset nano`, MPICH and mpicc.
set -euo pipefail
cd "$(dirname "$0")/../.."
RATE=${RATE:-20mbit}
REPS=${REPS:-3}
TAUS=${TAUS:-"6 12 24"}
LATENCY=${LATENCY:-400ms}   # tbf's queue, as mpirun_shaped.sh's default
OUT=${OUT:-docs/results/planner-accuracy/co2-all-reduce/$RATE}
cargo build --release --locked --features mpi -q
B=$PWD/target/release/lowcomm
probe=$(mktemp -d)/mpi_pingpong
mpicc -O2 -o "$probe" bench/netns/mpi_pingpong.c
export RAYON_NUM_THREADS=1   # one core a rank, as planner_accuracy.sh
mkdir -p "$OUT"
shaped() { bench/netns/mpirun_shaped.sh --ranks 2 --rate "$RATE" --latency "$LATENCY" --prefix lcco -- "$@"; }
: > "$OUT/mpi.txt"
for rep in $(seq "$REPS"); do
    for tau in $TAUS; do
        echo "== rep $rep: co2:tau=$tau, diloco:h=$tau" >&2
        shaped "$B" compare --backend mpi --methods "co2:tau=$tau,diloco:h=$tau" --preset nano \
            --steps $(( 12 * tau )) --batch-size 16 --eval-every 0 --results "$OUT/tau$tau-$rep" --fresh \
            2>&1 >/dev/null | grep -E '^\[mpirun_shaped.sh\] rank' >&2 || true
    done
    # co2's all-reduce as its run measured it (the model's f32 parameters), in MiB.
    mib=$(python3 -c 'import json, sys; print("%.6f" % (json.load(open(sys.argv[1]))["largest_transfer"] / 2**20))' \
        "$(ls "$OUT"/tau*-"$rep"/runs/co2*/result.json | head -1)")
    for gap in 0 0.6; do
        echo "== rep $rep: plain MPI all-reduce of $mib MiB, $gap s apart" >&2
        shaped "$probe" "$mib" 12 "$gap" 2>&1 | grep -E '^allreduce' | tee -a "$OUT/mpi.txt"
    done
done
python3 scripts/all_reduce_times.py "$OUT"
