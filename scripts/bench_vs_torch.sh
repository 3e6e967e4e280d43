#!/usr/bin/env bash
# Throughput of one full training step (forward, backward, AdamW), float32,
# 2048 tokens per step: lowcomm vs PyTorch eager and torch.compile
# (shared/bench/torch_reference.py), all measured in this run on this
# machine, alternating, one process per measurement so each peak RSS is its
# own. Prints the host (ISA level, cores, single-core GEMM peak) and a
# Markdown table with the ratios and lowcomm's GFLOP/s against the peak,
# then every round's tok/s, so the noise behind each median shows.
#
#   bash scripts/bench_vs_torch.sh                 # needs a venv with torch: VENV=/path (default .venv-torch)
#   ROUNDS=5 bash scripts/bench_vs_torch.sh        # alternate ROUNDS times, report the medians (default 3)
#   PATHS="native avx2" bash scripts/bench_vs_torch.sh
#       native: the default build, GEMM on the best ISA the CPU has;
#       avx2:   a build without our `avx512` feature, run with LOWCOMM_ISA=avx2,
#               i.e. the AVX2 path forced on an AVX-512 host (src/model/isa.rs).
#       Default: "native", plus "avx2" when the CPU has AVX-512.
#   MODES="eager" bash scripts/bench_vs_torch.sh   # skip torch.compile (default "eager compile")
#   PRESETS=micro STEPS_MICRO=10 STEPS_SMALL=7     # what to run, timed steps per process
#   BUILD=0 bash scripts/bench_vs_torch.sh         # reuse target/release/lowcomm{,-avx2} as built
#
# Setup once:  python3 -m venv .venv-torch && .venv-torch/bin/pip install torch
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-torch}
ROUNDS=${ROUNDS:-3}
MODES=${MODES:-eager compile}
PRESETS=${PRESETS:-micro small}
REF=${TORCH_REFERENCE:-../shared/bench/torch_reference.py}
[ -x "$VENV/bin/python" ] || { echo "no Python venv with torch at $VENV: python3 -m venv $VENV && $VENV/bin/pip install torch" >&2; exit 1; }
[ -f "$REF" ] || { echo "torch reference not found at $REF (set TORCH_REFERENCE)" >&2; exit 1; }
has_avx512=$(grep -qw avx512f /proc/cpuinfo && echo 1 || echo 0)
PATHS=${PATHS:-$([ "$has_avx512" = 1 ] && echo "native avx2" || echo native)}
# Build each variant once; the AVX2 one is kept under its own name.
for p in $PATHS; do
  case $p in
    native) ;;
    avx2)
      if [ "${BUILD:-1}" = 1 ]; then
        cargo build --release --quiet --no-default-features
        cp target/release/lowcomm target/release/lowcomm-avx2
      fi ;;
    *) echo "PATHS: unknown path \`$p\`: use native and/or avx2 (e.g. PATHS=\"native avx2\")" >&2; exit 1 ;;
  esac
done
[ "${BUILD:-1}" = 1 ] && cargo build --release --quiet
bin_of() { [ "$1" = avx2 ] && echo target/release/lowcomm-avx2 || echo target/release/lowcomm; }
env_of() { [ "$1" = avx2 ] && echo LOWCOMM_ISA=avx2 || echo LOWCOMM_ISA=; }
field() { sed -n "s/.*[ ]$1=\([0-9.]*\).*/\1/p" | head -1; }
word() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" | head -1; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
spread() { sort -g | awk '{a[NR]=$1} END {printf "%s-%s", a[1], a[NR]}'; }
declare -A val
for preset in $PRESETS; do
  cfg=$([ "$preset" = micro ] && echo A || echo B)
  steps=$([ "$preset" = micro ] && echo "${STEPS_MICRO:-10}" || echo "${STEPS_SMALL:-7}")
  for r in $(seq "$ROUNDS"); do
    for p in $PATHS; do
      out=$(env "$(env_of "$p")" "$(bin_of "$p")" bench --preset "$preset" --steps "$steps" 2>/dev/null)
      res=$(echo "$out" | grep RESULT); host=$(echo "$out" | grep HOST)
      val[$preset,$p,tok,$r]=$(echo "$res" | field tok_per_s)
      val[$preset,$p,rss,$r]=$(echo "$res" | field peak_rss_mb)
      val[$preset,$p,gf,$r]=$(echo "$host" | field step_gflops)
      val[$preset,$p,peak,$r]=$(echo "$host" | field gemm_peak_1core_gflops)
      val[$preset,$p,isa]=$(echo "$host" | word isa)
    done
    for m in $MODES; do
      out=$("$VENV/bin/python" "$REF" "$cfg" "$m" "$steps" 2>/dev/null | grep RESULT)
      val[$preset,$m,tok,$r]=$(echo "$out" | field tok_per_s)
      val[$preset,$m,rss,$r]=$(echo "$out" | field peak_rss_mb)
    done
  done
done
col() { for r in $(seq "$ROUNDS"); do echo "${val[$1,$2,$3,$r]}"; done; }
# Per-round ratio lowcomm / torch mode: its median and spread over the rounds.
ratios() { for r in $(seq "$ROUNDS"); do awk "BEGIN {printf \"%.2f\n\", ${val[$1,$2,tok,$r]}/${val[$1,$3,tok,$r]}}"; done; }
cores=$(nproc)
echo "Host: $cores cores of $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), CPU ISA $([ "$has_avx512" = 1 ] && echo AVX-512 || (grep -qw avx2 /proc/cpuinfo && echo AVX2 || echo other)), $(date -u +%Y-%m-%d), median of $ROUNDS alternating rounds (ratio spread = min-max of the per-round ratios)."
echo
hdr="| preset | ISA path | lowcomm tok/s | GFLOP/s (of ${cores}-core GEMM peak) |"
sep="|---|---|---|---|"
for m in $MODES; do hdr="$hdr torch $m tok/s | ratio (spread) |"; sep="$sep---|---|"; done
echo "$hdr peak RSS MB lowcomm / $(echo "$MODES" | sed 's/ / \/ /g') |"
echo "$sep---|"
for preset in $PRESETS; do
  for p in $PATHS; do
    lt=$(col "$preset" "$p" tok | median)
    gf=$(col "$preset" "$p" gf | median); pk=$(col "$preset" "$p" peak | median)
    isa=${val[$preset,$p,isa]}
    label=$([ "$p" = avx2 ] && echo "$isa (forced: LOWCOMM_ISA=avx2, --no-default-features)" || echo "$isa")
    line="| $preset | $label | $lt | $gf ($(awk "BEGIN {printf \"%.0f\", 100*$gf/($pk*$cores)}")% of $cores x $pk) |"
    mem="$(col "$preset" "$p" rss | median)"
    for m in $MODES; do
      line="$line $(col "$preset" "$m" tok | median) | $(ratios "$preset" "$p" "$m" | median) ($(ratios "$preset" "$p" "$m" | spread)) |"
      mem="$mem / $(col "$preset" "$m" rss | median)"
    done
    echo "$line $mem |"
  done
done
echo
echo "Per round, tok/s (in the order run):"
echo
rhdr="| preset | round |"; rsep="|---|---|"
for p in $PATHS; do rhdr="$rhdr lowcomm $p |"; rsep="$rsep---|"; done
for m in $MODES; do rhdr="$rhdr torch $m |"; rsep="$rsep---|"; done
echo "$rhdr"; echo "$rsep"
for preset in $PRESETS; do
  for r in $(seq "$ROUNDS"); do
    line="| $preset | $r |"
    for p in $PATHS $MODES; do line="$line ${val[$preset,$p,tok,$r]} |"; done
    echo "$line"
  done
done
echo
echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine: other jobs slow every column alike only on average)."
