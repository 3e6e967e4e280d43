#!/usr/bin/env bash
# The MPI tests (tests/mpi.rs, under real mpirun) N times in a row under
# load: two busy loops keep both cores of a 2-core machine busy the whole
# time, so that races between ranks (issue 27, item 8: a conformance check
# once misjudged which of two tasks finished first) get their chance.
# Prints one line per run and a final count; exits non-zero if any failed.
#
#   bash scripts/mpi_loop.sh        # 20 runs (what docs/decisions.md records)
#   N=5 bash scripts/mpi_loop.sh
#
# Needs MPICH (apt-get install -y mpich libmpich-dev libclang-dev).
set -u
cd "$(dirname "$0")/.."
N=${N:-20}
( while :; do :; done ) & L1=$!
( while :; do :; done ) & L2=$!
trap 'kill $L1 $L2 2>/dev/null' EXIT
pass=0; fail=0
for i in $(seq "$N"); do
  log=$(mktemp)
  if cargo test --locked --features mpi --test mpi -q > "$log" 2>&1; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "run $i FAILED:"; grep -E "^test .*FAILED|panicked" "$log" | head -5
  fi
  rm -f "$log"
  echo "run $i done: $pass passed, $fail failed $(date -u +%T)"
done
echo "RESULT: $pass of $N passed, $fail failed"
[ "$fail" = 0 ]
