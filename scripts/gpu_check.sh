#!/usr/bin/env bash
# On a lent GPU machine (no Rust, no network), from the repository root, with
# gpu-kit/ carried (built here by scripts/gpu_kit.sh): runs the libtorch
# backend's tests, the CUDA ones included, then the GPU benchmark against
# plain PyTorch (scripts/bench_gpu.sh), and leaves the logs in $OUT.
#
#   device run: command="bash scripts/gpu_check.sh", carry=["gpu-kit"], timeout_s=540
#   (an H200, 2026-11-27: the tests ~60 s, each benchmark row 45-75 s, six rows; with
#   PRESETS="gpt2 small" about 320 s in all; each start of the machine costs ~30 s more)
#   PRESETS=gpt2 PRECISIONS=bf16 bash scripts/gpu_check.sh    # a shorter benchmark
#   SKIP_TESTS=1 bash scripts/gpu_check.sh                    # the benchmark only
#   SKIP_BENCH=1 bash scripts/gpu_check.sh                    # the tests only
#
# Works on a CPU-only machine too (the CUDA tests then say they did not run,
# and the benchmark needs DEVICE=cpu): how the script itself is checked.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
PYTHON=${PYTHON:-python3}
[ -f gpu-kit/kit.tar.xz ] || { echo "no gpu-kit/kit.tar.xz: build it with scripts/gpu_kit.sh and carry gpu-kit" >&2; exit 1; }
kit=$(mktemp -d)
tar -C "$kit" -xJf gpu-kit/kit.tar.xz || exit 1
# shellcheck source=/dev/null
. "$kit/kit.env"
here=$("$PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])') || exit 1
if [ "$here" != "$KIT_TORCH" ]; then
  echo "the kit was built against torch $KIT_TORCH and this machine's is $here: libtorch's C++ library must be the same version; rebuild the kit with TORCH_VERSION=$here bash scripts/gpu_kit.sh (docs/torch.md, \"On a lent GPU machine\")" >&2
  exit 1
fi
torch_lib=$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') || exit 1
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  echo "kit: lowcomm $KIT_COMMIT built $KIT_BUILT against torch $KIT_TORCH with tch ${KIT_TCH:-0.26 (not recorded)}"
  "$PYTHON" -c 'import torch; print("here: torch", torch.__version__, "| CUDA devices:", torch.cuda.device_count(), "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
  # The test of this reads the build machine's libtorch path, absent here.
  if ! command -v readelf >/dev/null; then echo "readelf: none (libtorch_cuda.so not checked)"
  elif readelf -d "$kit/lowcomm" | grep -q '\[libtorch_cuda.so\]'; then echo "lowcomm needs libtorch_cuda.so"
  else echo "lowcomm does not need libtorch_cuda.so: CUDA will be unavailable (build.rs, docs/torch.md)"; fi
} | tee "$OUT/machine.txt"
# The test binary runs the paths it was built with: the checkout (fixtures),
# its target's tmp/ (scratch) and debug/lowcomm (the binary the command-line
# tests start). Make them exist here. A kit built in a scratch copy (another
# tch than the tree's: scripts/gpu_kit.sh) names that copy, which is gone
# after the build: it becomes a link to this checkout, as on another machine.
if [ "$(cd "$KIT_MANIFEST_DIR" 2>/dev/null && pwd -P)" != "$(pwd -P)" ]; then
  # A link (an earlier run's, from another checkout) is pointed here.
  [ -e "$KIT_MANIFEST_DIR" ] && [ ! -L "$KIT_MANIFEST_DIR" ] && { echo "$KIT_MANIFEST_DIR exists and is not this checkout" >&2; exit 1; }
  mkdir -p "$(dirname "$KIT_MANIFEST_DIR")" && ln -sfn "$PWD" "$KIT_MANIFEST_DIR"
fi
mkdir -p "$KIT_TARGET_DIR/tmp" "$KIT_TARGET_DIR/debug"
ln -sf "$kit/lowcomm" "$KIT_TARGET_DIR/debug/lowcomm"
"$kit/lowcomm" --version | tee -a "$OUT/machine.txt" || exit 1
rc=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  "$kit/torch_backend" --test-threads 1 --nocapture 2>&1 | tee "$OUT/tests.log"
  rc=${PIPESTATUS[0]}
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  LOWCOMM="$kit/lowcomm" LOWCOMM_COMMIT="$KIT_COMMIT" PYTHON="$PYTHON" bash scripts/bench_gpu.sh 2>&1 | tee "$OUT/bench.md"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
exit "$rc"
