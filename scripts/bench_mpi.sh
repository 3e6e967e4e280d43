#!/usr/bin/env bash
# Bandwidth of the MPI backend next to the in-process backend, measured in
# the same run: all-reduce, reduce-scatter and all-gather of MIB MiB per rank
# on 2 and 4 ranks, ROUNDS alternating rounds, median per cell.
#
#   ROUNDS=3 MIB=64 bash scripts/bench_mpi.sh
#
# GB/s = MiB per rank moved by the collective / seconds per call (10^9 B/s).
# Needs MPICH (apt-get install -y mpich libmpich-dev libclang-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
MIB=${MIB:-64}
ITERS=${ITERS:-5}
cargo build --release --locked --features mpi -q
B=target/release/lowcomm
# Fresh pages fault expensively on these VMs: keep glibc from returning
# MPI's temporaries to the kernel (docs/mpi.md).
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$ROUNDS"); do
    "$B" bench --what comm --backend local --mib "$MIB" --steps "$ITERS" | grep '^RESULT comm' >>"$out"
    for np in 2 4; do
        mpirun -np "$np" "$B" bench --what comm --backend mpi --mib "$MIB" --steps "$ITERS" | grep '^RESULT comm' >>"$out"
    done
    echo "round $r/$ROUNDS done" >&2
done
python3 - "$out" "$MIB" "$ROUNDS" <<'PY'
import re, sys, statistics
rows = {}
for line in open(sys.argv[1]):
    kv = dict(re.findall(r'(\w+)=(\S+)', line))
    rows.setdefault((kv['op'], int(kv['ranks']), kv['backend']), []).append(float(kv['GBps']))
print(f"{sys.argv[2]} MiB per rank, median of {sys.argv[3]} rounds; GB/s = payload per rank / time per call\n")
print("| op | ranks | in-process GB/s | MPI GB/s | MPI / in-process |")
print("|---|---|---|---|---|")
for op in ["all_reduce", "reduce_scatter", "all_gather"]:
    for np in [2, 4]:
        l = statistics.median(rows[(op, np, 'local')]); m = statistics.median(rows[(op, np, 'mpi')])
        print(f"| {op} | {np} | {l:.2f} | {m:.2f} | {m / l:.2f} |")
PY
