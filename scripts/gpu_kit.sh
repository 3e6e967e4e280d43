#!/usr/bin/env bash
# Builds, here, what a lent GPU machine needs to run the libtorch backend's
# tests and the GPU benchmark (scripts/gpu_check.sh, run there). That machine
# has PyTorch but no Rust toolchain and no network, and at most 64 MiB
# travels with the working tree: so lowcomm is built here against the torch
# version of the GPU machine, stripped, and packed into gpu-kit/kit.tar.xz
# (gpu-kit/ is ignored by git: name it in the device call's `carry`).
#
#   bash scripts/gpu_kit.sh                          # torch 2.13.0 with the tree's tch (0.26), the venv of docs/torch.md (.venv-torch)
#   TORCH_VERSION=2.11.0 bash scripts/gpu_kit.sh     # torch 2.11.0 (the GPU machines') with tch 0.24, in a scratch copy
#   KIT_VENV=path/to/venv TORCH_VERSION=...          # a venv that has that torch
#
# The kit runs only on a machine whose torch is the version it was built
# against (scripts/gpu_check.sh checks), and tch's C++ wrapper compiles only
# against the libtorch its release was made for: tch 0.26 (the tree's) does
# not compile against 2.11, which lacks ops it calls (_philox_*,
# _flash_attention_forward_no_dropout_inplace). So another torch version is
# built with the tch release made for it (tch's changelog; the table below)
# in a scratch copy of the working tree whose Cargo.toml and Cargo.lock name
# that release: torch-sys declares `links = "tch"`, so one dependency graph
# holds one tch, and the tree's own Cargo.toml and Cargo.lock stay as they
# are. lowcomm's code compiles unchanged against tch 0.24 and 0.26.
# docs/torch.md, "On a lent GPU machine".
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
# torch -> the tch release made for it, and the libtorch version that release checks for.
case "$TORCH_VERSION" in
  2.13.*) tch=0.26.0 tch_torch=2.13.0 ;;
  2.11.*) tch=0.24.0 tch_torch=2.11.0 ;;
  *)
    echo "no tch release is known here for torch $TORCH_VERSION (2.13.x: tch 0.26, 2.11.x: tch 0.24): add the one tch's changelog names to scripts/gpu_kit.sh" >&2
    exit 1
    ;;
esac
# The tch version the Cargo.lock of the current directory names.
lock_tch() { sed -n '/^name = "tch"$/{n;s/^version = "\(.*\)"$/\1/p;}' Cargo.lock; }
tree_tch=$(lock_tch)

# The venv: KIT_VENV, else .venv-torch (2.13.0) or .venv-torch-VERSION in the
# checkout, else one beside the checkout (../.venv-torch211 for 2.11.x, where
# this workplace keeps one), else .venv-torch-VERSION made here (pip, ~5 GB,
# once; ignored by git).
torch_of() { "$1/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true; }
default_venv=$([ "$TORCH_VERSION" = 2.13.0 ] && echo .venv-torch || echo ".venv-torch-$TORCH_VERSION")
beside=../.venv-torch$(echo "$TORCH_VERSION" | cut -d. -f1,2 | tr -d .)
if [ -n "${KIT_VENV:-}" ]; then
  VENV=$KIT_VENV
elif [ "$(torch_of "$default_venv")" != "$TORCH_VERSION" ] && [ "$(torch_of "$beside")" = "$TORCH_VERSION" ]; then
  VENV=$beside
else
  VENV=$default_venv
fi
if ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "torch==$TORCH_VERSION"
fi
have=$(torch_of "$VENV")
[ "$have" = "$TORCH_VERSION" ] || { echo "$VENV has torch ${have:-none}, not $TORCH_VERSION: set KIT_VENV to a venv with torch $TORCH_VERSION" >&2; exit 1; }
export PATH="$(realpath "$VENV")/bin:$PATH" LIBTORCH_USE_PYTORCH=1
[ "$TORCH_VERSION" = "$tch_torch" ] || export LIBTORCH_BYPASS_VERSION_CHECK=1

# The working tree's files as they are now (tracked, and untracked ones git
# does not ignore; not those deleted), NUL-separated.
tree_files() {
  git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
    if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
  done
}
stage=$(mktemp -d)
src=""
trap 'rm -rf "$stage" ${src:+"$src"}' EXIT
checkout=$PWD
if [ "${tch%.*}" = "${tree_tch%.*}" ]; then
  # The tree's tch: built in the checkout, so the paths the test binary
  # bakes in (CARGO_MANIFEST_DIR, its target's tmp/ and debug/lowcomm) can be
  # made to point at the same places there (scripts/gpu_check.sh).
  export CARGO_TARGET_DIR="$PWD/target/gpu-kit"
  manifest_dir=$PWD
else
  # Another tch: a scratch copy of the working tree (tracked and untracked
  # files that git does not ignore, as they are now) whose Cargo.toml pins
  # that tch and whose Cargo.lock changes only tch and torch-sys. The copy
  # is removed after the build: scripts/gpu_check.sh maps the path the test
  # binary bakes in (KIT_MANIFEST_DIR) to its own checkout. The target
  # directory stays, for the next build.
  export CARGO_TARGET_DIR="$PWD/target/gpu-kit-$TORCH_VERSION"
  manifest_dir=$CARGO_TARGET_DIR/src
  rm -rf "$manifest_dir" # a copy left by a failed build, or gpu_check.sh's link to the checkout
  mkdir -p "$manifest_dir"
  src=$manifest_dir
  tree_files | tar --null -T - -cf - | tar -C "$manifest_dir" -xf -
  sed -E -i "s/^(tch|torch-sys) = \\{ version = \"[^\"]*\"/\\1 = { version = \"=$tch\"/" "$manifest_dir/Cargo.toml"
  [ "$(grep -cE "^(tch|torch-sys) = \\{ version = \"=$tch\"" "$manifest_dir/Cargo.toml")" = 2 ] ||
    { echo "could not pin tch and torch-sys to $tch in the copy's Cargo.toml (their lines changed?)" >&2; exit 1; }
  cd "$manifest_dir"
  cargo update -q --offline -p tch -p torch-sys 2>/dev/null || cargo update -q -p tch -p torch-sys
fi
cargo build --release --locked --features torch
test_bin=$(cargo test --locked --features torch --test torch_backend --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*torch_backend[^"]*\)".*/\1/p' | tail -1)
[ -x "$test_bin" ] || { echo "the torch_backend test binary was not built" >&2; exit 1; }
kit_tch=$(lock_tch)
cd "$checkout"
cp "$CARGO_TARGET_DIR/release/lowcomm" "$stage/lowcomm"
cp "$test_bin" "$stage/torch_backend"
strip "$stage/lowcomm" "$stage/torch_backend"
cat > "$stage/kit.env" <<EOF
# Written by scripts/gpu_kit.sh; read by scripts/gpu_check.sh.
KIT_TORCH=$TORCH_VERSION
KIT_TCH=$kit_tch
KIT_COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests build.rs Cargo.toml || echo '+changes')
KIT_MANIFEST_DIR=$manifest_dir
KIT_TARGET_DIR=$CARGO_TARGET_DIR
KIT_BUILT="$(date -u '+%Y-%m-%d %H:%M UTC')"
EOF
mkdir -p gpu-kit
tar -C "$stage" -cJf gpu-kit/kit.tar.xz lowcomm torch_backend kit.env
grep -qx '/gpu-kit/' .git/info/exclude 2>/dev/null || echo /gpu-kit/ >> .git/info/exclude
ls -l gpu-kit/kit.tar.xz
# A device call carries the working tree (tracked and untracked files git
# does not ignore) and gpu-kit/: at most 64 MiB together.
tree_b=$(tree_files | du -cb --files0-from=- | tail -1 | cut -f1)
kit_b=$(stat -c %s gpu-kit/kit.tar.xz)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "kit: torch $TORCH_VERSION, tch $kit_tch, $(mib "$kit_b") MiB; with the working tree $(mib $((tree_b + kit_b))) MiB of the 64 MiB a device call carries"
[ $((tree_b + kit_b)) -lt $((64 * 1048576)) ] || { echo "over 64 MiB: a device call would refuse it" >&2; exit 1; }
echo "Next, on a lent GPU machine: run(command=\"bash scripts/gpu_check.sh\", carry=[\"gpu-kit\"], timeout_s=540): the tests and six benchmark rows, ~450 s on an H200; PRESETS=\"gpt2 small\" ~320 s"
