#!/usr/bin/env bash
# The test suite: everything that needs no MPI, then the MPI backend under
# real mpirun processes when MPICH is installed.
#
#   bash scripts/test.sh                         # what CI runs (.ci/run)
#   LOWCOMM_REQUIRE_MPI=1 bash scripts/test.sh   # fail instead of skipping the MPI part
#
# MPI needs: apt-get install -y mpich libmpich-dev libclang-dev
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked
# Issue 27's probes (bad input, races, Ctrl-C, a full disk...) against the binary
# the tests just built: ok/FAILED per probe.
LOWCOMM=target/debug/lowcomm bash scripts/probe.sh
if command -v mpirun >/dev/null && command -v mpicc >/dev/null; then
    # The mpirun tests (tests/mpi.rs), with the backend compiled in.
    cargo test --locked --features mpi --test mpi
elif [ "${LOWCOMM_REQUIRE_MPI:-0}" = 1 ]; then
    echo "LOWCOMM_REQUIRE_MPI=1 but mpirun/mpicc are missing: apt-get install -y mpich libmpich-dev libclang-dev" >&2
    exit 1
else
    echo "skipped the MPI tests: mpirun/mpicc not found (apt-get install -y mpich libmpich-dev libclang-dev)" >&2
fi
