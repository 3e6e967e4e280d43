#!/usr/bin/env bash
# Regenerates every number of docs/choosing-a-method.md: runs `lowcomm plan --json` for each model x cluster of
# the guide and for the papers' own examples, then fills the page's generated blocks (scripts/choosing_a_method.py).
#
#   bash scripts/choosing_a_method.sh            # LOWCOMM=target/release/lowcomm (cargo build --release first)
#
# Writes docs/choosing-a-method/ (one plan per case: NAME.txt as printed, NAME.json) and rewrites the blocks
# between <!-- BEGIN x --> and <!-- END x --> in docs/choosing-a-method.md. `lowcomm plan` is analytical (no
# training), so the numbers do not depend on the machine that runs it; the page still records machine and commit.
set -euo pipefail
cd "$(dirname "$0")/.."
LOWCOMM=${LOWCOMM:-target/release/lowcomm}
OUT=${OUT:-docs/choosing-a-method}
[ -x "$LOWCOMM" ] || { echo "no $LOWCOMM: run cargo build --release (or set LOWCOMM=path/to/lowcomm)" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT/profiles"

plan() { # NAME ARGS...: one plan, printed and as JSON
  local name=$1
  shift
  "$LOWCOMM" plan "$@" --json "$OUT/$name.json" | sed '/^wrote /d' > "$OUT/$name.txt"
}

# 1. The guide's clusters, for GPT-2 small and a 7B model (Llama-2-7B's shape), every method, Table 1's precision.
# The heterogeneous cluster: node 0 A100 (speed 1), node 1 V100-class (speed 0.4; see its profile).
SLOW_NODE=1,1,1,1,1,1,1,1,0.4,0.4,0.4,0.4,0.4,0.4,0.4,0.4
for model in gpt2 llama-7b; do
  for cluster in nvlink-1x8 a100-4x8-100g tcp-16x8-80g hetero-2x8-mixed-100g; do
    speeds=()
    [ "$cluster" = hetero-2x8-mixed-100g ] && speeds=(--speeds "$SLOW_NODE")
    plan "$model-$cluster" --model "$model" --cluster "configs/clusters/$cluster.toml" --methods all "${speeds[@]}"
  done
done

# 2. ACCO Table 1's example: Psi = 7.5e9, N = 64, K = 12 (AdamW in mixed precision).
plan acco-table1 --model 7.5e9 --cluster configs/clusters/acco-table1-8x8.toml --methods ddp,zero1,slowmo,co2,acco

# 3. CO2 Table 8: overlap vs tau on the paper's measured timing (0.109 s per local step, 1.566 s per all-reduce
#    of 7e9 bf16 parameters; configs/clusters/co2-table8-2x1.toml).
for tau in 1 3 6 12 24 48; do
  plan "co2-table8-tau$tau" --model 7e9 --cluster configs/clusters/co2-table8-2x1.toml --methods co2 --tau "$tau"
done

# 4. CO2 Table 3: scalability on M nodes x 8 A100 over 80 Gb/s TCP (tcp-16x8-80g.toml with nodes = M), 7e9
#    parameters (TransNormer-LLM 7B's size): once with the step costed from FLOPs (24 x 1024 tokens per
#    micro-batch), once with the paper's measured step (0.109 s, co2.txt App. A.3.4) fixed in the profile.
for m in 1 2 4 8 16; do
  flops="$OUT/profiles/tcp-${m}x8-80g.toml"
  paper="$OUT/profiles/tcp-${m}x8-80g-step0.109s.toml"
  sed "s/^nodes = 16$/nodes = $m/" configs/clusters/tcp-16x8-80g.toml > "$flops"
  grep -q "^nodes = $m$" "$flops"
  sed 's/^tokens_per_micro_batch = 24576$/&\n# The CO2 paper'"'"'s measured local step (co2.txt, App. A.3.4).\nseconds_per_micro_batch = 0.109/' "$flops" > "$paper"
  grep -q "^seconds_per_micro_batch = 0.109$" "$paper"
  for variant in flops paper; do
    profile=$flops
    [ "$variant" = paper ] && profile=$paper
    plan "co2-table3-${m}x8-$variant" --model 7e9 --cluster "$profile" --methods zero1,co2 --tau 12
    plan "co2-table3-${m}x8-$variant-tau48" --model 7e9 --cluster "$profile" --methods co2 --tau 48
  done
done

python3 scripts/choosing_a_method.py "$OUT" docs/choosing-a-method.md
