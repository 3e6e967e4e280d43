#!/usr/bin/env bash
# Builds, here, what a lent GPU machine needs to run the libtorch backend's
# tests and the GPU benchmark (scripts/gpu_check.sh, run there). That machine
# has PyTorch but no Rust toolchain and no network, and at most 64 MiB
# travels with the working tree: so lowcomm is built here against the torch
# version of the GPU machine, stripped, and packed into gpu-kit/kit.tar.xz
# (gpu-kit/ is ignored by git: name it in the device call's `carry`).
#
#   bash scripts/gpu_kit.sh                                   # torch 2.13.0, the venv of docs/torch.md (.venv-torch)
#   TORCH_VERSION=2.11.0 bash scripts/gpu_kit.sh              # another version, in .venv-torch-2.11.0 (pip, ~5 GB, once; ignored by git)
#
# The kit runs only on a machine whose torch is the version it was built
# against (scripts/gpu_check.sh checks). tch 0.26 is written for libtorch
# 2.13: against another version its version check is bypassed
# (LIBTORCH_BYPASS_VERSION_CHECK), but its C++ wrapper must still compile,
# and against 2.11 (the GPU machines' torch when last read) it does not:
# 2.11 lacks ops the wrapper calls (_philox_*,
# _flash_attention_forward_no_dropout_inplace). docs/torch.md, "On a lent
# GPU machine".
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
default_venv=$([ "$TORCH_VERSION" = 2.13.0 ] && echo .venv-torch || echo ".venv-torch-$TORCH_VERSION")
VENV=${KIT_VENV:-$default_venv}
if ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "torch==$TORCH_VERSION"
fi
export PATH="$(realpath "$VENV")/bin:$PATH" LIBTORCH_USE_PYTORCH=1
# Inside the checkout, so the paths the test binary bakes in
# (CARGO_MANIFEST_DIR, its target's tmp/ and debug/lowcomm) can be made to
# point at the same places there (scripts/gpu_check.sh).
export CARGO_TARGET_DIR="$PWD/target/gpu-kit"
[ "$TORCH_VERSION" = 2.13.0 ] || export LIBTORCH_BYPASS_VERSION_CHECK=1
cargo build --release --locked --features torch
test_bin=$(cargo test --locked --features torch --test torch_backend --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*torch_backend[^"]*\)".*/\1/p' | tail -1)
[ -x "$test_bin" ] || { echo "the torch_backend test binary was not built" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$CARGO_TARGET_DIR/release/lowcomm" "$stage/lowcomm"
cp "$test_bin" "$stage/torch_backend"
strip "$stage/lowcomm" "$stage/torch_backend"
cat > "$stage/kit.env" <<EOF
# Written by scripts/gpu_kit.sh; read by scripts/gpu_check.sh.
KIT_TORCH=$TORCH_VERSION
KIT_COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests build.rs Cargo.toml || echo '+changes')
KIT_MANIFEST_DIR=$PWD
KIT_TARGET_DIR=$CARGO_TARGET_DIR
KIT_BUILT="$(date -u '+%Y-%m-%d %H:%M UTC')"
EOF
mkdir -p gpu-kit
tar -C "$stage" -cJf gpu-kit/kit.tar.xz lowcomm torch_backend kit.env
grep -qx '/gpu-kit/' .git/info/exclude 2>/dev/null || echo /gpu-kit/ >> .git/info/exclude
ls -l gpu-kit/kit.tar.xz
echo "Next, on a lent GPU machine: run(command=\"bash scripts/gpu_check.sh\", carry=[\"gpu-kit\"], timeout_s=480)"
