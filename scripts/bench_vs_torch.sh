#!/usr/bin/env bash
# Throughput of one full training step (forward, backward, AdamW), float32,
# 2048 tokens per step: lowcomm vs PyTorch eager (shared/bench/torch_reference.py),
# both measured in this run on this machine, one process per measurement so
# each peak RSS is its own. Prints a Markdown table with the ratios.
#
#   bash scripts/bench_vs_torch.sh            # needs a venv with torch: VENV=/path (default .venv-torch)
#   ROUNDS=3 bash scripts/bench_vs_torch.sh   # alternate the two ROUNDS times, report the medians
#
# Setup once:  python3 -m venv .venv-torch && .venv-torch/bin/pip install torch
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-torch}
ROUNDS=${ROUNDS:-3}
REF=${TORCH_REFERENCE:-../shared/bench/torch_reference.py}
[ -x "$VENV/bin/python" ] || { echo "no Python venv with torch at $VENV: python3 -m venv $VENV && $VENV/bin/pip install torch" >&2; exit 1; }
[ -f "$REF" ] || { echo "torch reference not found at $REF (set TORCH_REFERENCE)" >&2; exit 1; }
cargo build --release --quiet
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| preset | lowcomm tok/s | PyTorch eager tok/s | ratio | lowcomm peak RSS MB | PyTorch peak RSS MB |"
echo "|---|---|---|---|---|---|"
for preset in micro small; do
  cfg=$([ $preset = micro ] && echo A || echo B)
  steps=$([ $preset = micro ] && echo 10 || echo 7)
  lc_t=(); lc_m=(); pt_t=(); pt_m=()
  for _ in $(seq "$ROUNDS"); do
    out=$(./target/release/lowcomm bench --preset $preset --steps $steps 2>/dev/null | grep RESULT)
    lc_t+=("$(echo "$out" | field tok_per_s)"); lc_m+=("$(echo "$out" | field peak_rss_mb)")
    out=$("$VENV/bin/python" "$REF" $cfg eager $steps 2>/dev/null | grep RESULT)
    pt_t+=("$(echo "$out" | field tok_per_s)"); pt_m+=("$(echo "$out" | field peak_rss_mb)")
  done
  lt=$(printf '%s\n' "${lc_t[@]}" | median); pt=$(printf '%s\n' "${pt_t[@]}" | median)
  lm=$(printf '%s\n' "${lc_m[@]}" | median); pm=$(printf '%s\n' "${pt_m[@]}" | median)
  echo "| $preset | $lt | $pt | $(awk "BEGIN {printf \"%.2f\", $lt/$pt}") | $lm | $pm |"
done
echo
echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores of $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), median of $ROUNDS alternating rounds."
