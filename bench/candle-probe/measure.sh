#!/usr/bin/env bash
# Same-conditions comparison: each candle run is followed right away by
# lowcomm's own bench on the same preset; then PyTorch eager if available.
# Run from bench/candle-probe after `nice -n 10 cargo build --release` here
# and `cargo build --release` in the lowcomm root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
probe="$here/target/release/candle-probe"
lowcomm="$root/target/release/lowcomm"
py=/root/venv-torch/bin/python
torch_ref=/work/shared/bench/torch_reference.py
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) nproc=$(nproc)"
run() { echo "## load: $(uptime | sed 's/.*load average: //') :: $*"; "$@" 2>&1 | grep -E '^(RESULT|BREAKDOWN)'; }
tuned="CANDLE_NUM_THREADS=1 MIMALLOC_PURGE_DELAY=-1"
if [ "${1:-all}" = rounds ]; then
  # Interleaved rounds (the VM is shared, so single runs swing by 2x):
  # tuned fused candle, lowcomm and PyTorch eager back to back, N times.
  n=${2:-3}
  for spec in "micro 10 A" "small 5 B"; do
    set -- $spec
    for r in $(seq "$n"); do
      run env $tuned "$probe" "$1" "$2" fused
      run "$lowcomm" bench --preset "$1" --steps "$2"
      if [ -x "$py" ]; then run "$py" "$torch_ref" "$3" eager "$2"; fi
    done
  done
  exit 0
fi
for spec in "micro 10" "small 5"; do
  set -- $spec
  for variant in stock fused; do
    # candle defaults, then the tuned runtime settings: no barrier-pool worker
    # (candle's elementwise ops run on the calling thread; gemm and the fused
    # kernels still use 2 rayon threads) and mimalloc never returning memory.
    for tune in "" "$tuned"; do
      run env $tune "$probe" "$1" "$2" "$variant"
      run "$lowcomm" bench --preset "$1" --steps "$2"
    done
  done
done
if [ -x "$py" ] && [ -f "$torch_ref" ]; then
  run "$py" "$torch_ref" A eager 10
  run "$py" "$torch_ref" B eager 5
fi
