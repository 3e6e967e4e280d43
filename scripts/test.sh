#!/usr/bin/env bash
# The test suite: everything that needs no MPI, then the MPI backend under
# real mpirun processes when MPICH is installed.
#
#   bash scripts/test.sh                         # what CI runs (.ci/run)
#   LOWCOMM_REQUIRE_MPI=1 bash scripts/test.sh   # fail instead of skipping the MPI part
#   LOWCOMM_REQUIRE_TORCH=1 bash scripts/test.sh # fail instead of skipping the libtorch part
#
# MPI needs: apt-get install -y mpich libmpich-dev libclang-dev
# libtorch (the `torch` feature, docs/torch.md) needs a venv with torch 2.13.0
# at $TORCH_VENV (default .venv-torch):
#   python3 -m venv .venv-torch && .venv-torch/bin/pip install torch==2.13.0
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked
# The planner-accuracy scripts' arithmetic (floor, steady state, pooled curve, all-reduce cover).
python3 -m unittest discover -s scripts -p 'test_*.py'
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
TORCH_VENV=${TORCH_VENV:-.venv-torch}
if [ -x "$TORCH_VENV/bin/python" ] && "$TORCH_VENV/bin/python" -c 'import torch' 2>/dev/null; then
    # The libtorch backend against the native kernels (tests/torch_backend.rs),
    # built against that venv's torch.
    PATH="$PWD/$TORCH_VENV/bin:$PATH" LIBTORCH_USE_PYTORCH=1 cargo test --locked --features torch --test torch_backend
elif [ "${LOWCOMM_REQUIRE_TORCH:-0}" = 1 ]; then
    echo "LOWCOMM_REQUIRE_TORCH=1 but $TORCH_VENV has no torch: python3 -m venv $TORCH_VENV && $TORCH_VENV/bin/pip install torch==2.13.0" >&2
    exit 1
else
    echo "skipped the libtorch tests: no torch in $TORCH_VENV (python3 -m venv $TORCH_VENV && $TORCH_VENV/bin/pip install torch==2.13.0)" >&2
fi
