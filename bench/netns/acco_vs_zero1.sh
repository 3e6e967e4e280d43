#!/usr/bin/env bash
# zero1 vs acco over a real, shaped 100 Mbit/s TCP network (one MPI rank per
# network namespace, bench/netns/mpirun_shaped.sh), next to the in-process
# backend with the same link model, for the nano and micro presets; then
# acco on nano under each MPI polling policy. Run as root:
#
#   bash bench/netns/acco_vs_zero1.sh            # -> docs/results/mpi-shaped/
#
# Needs `lowcomm data prepare --preset nano` and `--preset micro` first, and
# MPICH. Takes ~6 minutes on a 2-core VM. Each run's summary.md has the
# per-round table (round, compute c, communication m, round / max(c, m)).
set -euo pipefail
cd "$(dirname "$0")/../.."
RANKS=${RANKS:-2}
RATE=${RATE:-100mbit}
LINK=${LINK:-100mbit,100us}   # the in-process emulation of the same link
OUT=${OUT:-docs/results/mpi-shaped}
cargo build --release --locked --features mpi -q
B=target/release/lowcomm
shaped() { bench/netns/mpirun_shaped.sh --ranks "$RANKS" --rate "$RATE" --prefix lcbench -- "$@"; }
# preset, steps, batch size
for spec in "nano 30 8" "micro 8 16"; do
    set -- $spec
    common=(--preset "$1" --steps "$2" --batch-size "$3" --eval-every 0)
    echo "== $1: MPI over shaped $RATE, $RANKS ranks" >&2
    shaped "$B" compare --backend mpi --methods zero1,acco "${common[@]}" --results "$OUT/$1-mpi-$RANKS" >/dev/null
    echo "== $1: in-process, link model $LINK, $RANKS workers" >&2
    RAYON_NUM_THREADS=$(( $(nproc) / RANKS > 0 ? $(nproc) / RANKS : 1 )) \
        "$B" compare --methods zero1,acco --workers "$RANKS" --link "$LINK" "${common[@]}" --results "$OUT/$1-local-$RANKS" >/dev/null
done
for poll in spin yield sleep auto; do
    echo "== nano acco, LOWCOMM_MPI_POLL=$poll" >&2
    LOWCOMM_MPI_POLL=$poll shaped "$B" compare --backend mpi --methods acco --preset nano --steps 30 --batch-size 8 --eval-every 0 --results "$OUT/poll-$poll" >/dev/null
done
for f in "$OUT"/*/summary.md; do
    echo "### $f"
    sed -n '/Per round/,$p' "$f" | tail -n +3
done
