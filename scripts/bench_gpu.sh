#!/usr/bin/env bash
# lowcomm's training step on libtorch (`lowcomm bench --device D`) against
# the same model in plain PyTorch on the same device
# (bench/torch/gpt_reference.py), in one run, alternated A B B A, one process
# per measurement, the faster of each side's runs kept. Prints a Markdown
# table: tokens/s of both, the ratio, each step split into the forward +
# backward and the optimizer (PyTorch's AdamW on the device; lowcomm's on
# the device too, its steps one device round as a local-update method's
# inner steps are, whose transfers of the model up before and back after
# are the "round sync" column, once for all the steps; with
# LOWCOMM_TORCH_HOST_OPTIMIZER=1 the host AdamW after the gradient's
# download, the parameters' upload then inside forward + backward), the
# model FLOPs utilisation of both when the card's peak is known, and the
# peak memory.
#
#   bash scripts/bench_gpu.sh                              # cuda; micro, small, gpt2; f32 and bf16
#   DEVICE=cpu PRESETS=nano bash scripts/bench_gpu.sh      # the same comparison on libtorch's CPU
#   PRECISIONS=bf16 PRESETS=gpt2 BATCH=16 bash scripts/bench_gpu.sh
#   LOWCOMM=path/to/lowcomm PYTHON=python3 bash scripts/bench_gpu.sh   # a binary built elsewhere
#   LOWCOMM_COMMIT=...                                    # the commit it was built from, for the table's last line
#   LOWCOMM_TORCH_HOST_OPTIMIZER=1 bash scripts/bench_gpu.sh   # lowcomm's AdamW on the host, as before device rounds
#
# Needs a lowcomm built with `--features torch` (docs/torch.md) and a Python
# with torch. On CUDA each step moves 8192 tokens by default (micro 64 x 128,
# small 32 x 256, gpt2 8 x 1024: a GPU idles at lowcomm's 2048); on the CPU
# the presets' own 2048.
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
PRESETS=${PRESETS:-micro small gpt2}
PRECISIONS=${PRECISIONS:-f32 bf16}
ROUNDS=${ROUNDS:-1}
STEPS=${STEPS:-10}
LOWCOMM=${LOWCOMM:-target/release/lowcomm}
PYTHON=${PYTHON:-.venv-torch/bin/python}
REF=bench/torch/gpt_reference.py
[ -x "$LOWCOMM" ] || { echo "no lowcomm binary at $LOWCOMM: cargo build --release --features torch (docs/torch.md), or set LOWCOMM" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null || { echo "$PYTHON has no torch: set PYTHON to one that has" >&2; exit 1; }

batch_of() {
  if [ -n "${BATCH:-}" ]; then echo "$BATCH"; return; fi
  case "$DEVICE:$1" in
    cuda*:micro) echo 64 ;; cuda*:small) echo 32 ;; cuda*:gpt2) echo 8 ;; cuda*:nano) echo 128 ;;
    *) echo "" ;;
  esac
}
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" | head -1; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (b == "" || a + 0 > b + 0) ? a : b }'; }

echo "| preset | precision | batch | lowcomm tok/s | PyTorch tok/s | lowcomm / PyTorch | fwd+bwd ms lowcomm / PyTorch | fwd+bwd PyTorch / lowcomm | lowcomm download ms | AdamW ms lowcomm / PyTorch | lowcomm AdamW on | lowcomm round sync ms | MFU lowcomm | MFU PyTorch | peak memory MB lowcomm RSS / PyTorch |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
card=""
for preset in $PRESETS; do
  for prec in $PRECISIONS; do
    b=$(batch_of "$preset")
    lflags=(bench --preset "$preset" --device "$DEVICE" --precision "$prec" --steps "$STEPS")
    pflags=(--preset "$preset" --device "$DEVICE" --precision "$prec" --steps "$STEPS")
    [ -n "$b" ] && lflags+=(--batch "$b") && pflags+=(--batch "$b")
    lt="" pt="" lres="" pres=""
    for r in $(seq "$ROUNDS"); do
      for side in lowcomm torch torch lowcomm; do
        if [ "$side" = lowcomm ]; then
          out=$("$LOWCOMM" "${lflags[@]}" 2>/dev/null | grep '^RESULT') || { echo "lowcomm bench failed: $LOWCOMM ${lflags[*]}" >&2; exit 1; }
          t=$(echo "$out" | field tok_per_s); [ "$(best "$t" "$lt")" = "$t" ] && lt=$t && lres=$out
        else
          out=$("$PYTHON" "$REF" "${pflags[@]}" 2>/dev/null | grep '^RESULT') || { echo "reference failed: $PYTHON $REF ${pflags[*]}" >&2; exit 1; }
          t=$(echo "$out" | field tok_per_s); [ "$(best "$t" "$pt")" = "$t" ] && pt=$t && pres=$out
        fi
      done
    done
    card=$(echo "$pres" | field card)
    pmfu=$(echo "$pres" | field mfu)
    awk -v p="$preset" -v q="$prec" -v bt="$(echo "$lres" | field batch)" -v lt="$lt" -v pt="$pt" \
        -v lfb="$(echo "$lres" | field fwd_bwd_s)" -v lh="$(echo "$lres" | field host_s)" -v ld="$(echo "$lres" | field download_s)" \
        -v ps="$(echo "$pres" | field median_step_s)" -v pfb="$(echo "$pres" | field fwd_bwd_s)" -v pm="$pmfu" \
        -v lo="$(echo "$lres" | field optimizer)" -v lr="$(echo "$lres" | field round_sync_s)" \
        -v lm="$(echo "$lres" | field peak_rss_mb)" -v tm="$(echo "$pres" | field peak_mem_mb)" 'BEGIN {
      lmfu = (pm == "nan") ? "n/a" : sprintf("%.3f", pm * lt / pt)
      tmfu = (pm == "nan") ? "n/a" : sprintf("%.3f", pm)
      printf "| %s | %s | %s | %.0f | %.0f | %.2f | %.1f / %.1f | %.2f | %.1f | %.1f / %.1f | %s | %.1f | %s | %s | %s / %s |\n", p, q, bt, lt, pt, lt / pt, lfb * 1e3, pfb * 1e3, pfb / lfb, ld * 1e3, (lh - ld) * 1e3, (ps - pfb) * 1e3, lo, lr * 1e3, lmfu, tmfu, lm, tm
    }'
  done
done
echo
echo "Device: $DEVICE${card:+ ($card)}; $("$PYTHON" -c 'import torch; print("torch", torch.__version__)'); lowcomm ${LOWCOMM_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo '(no git)')}; $(date -u '+%Y-%m-%d %H:%M UTC')"
