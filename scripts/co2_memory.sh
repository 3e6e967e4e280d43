#!/usr/bin/env bash
# Memory by category per worker (docs/results/co2.md, experiment 6), next to the ACCO paper's Table 1.
#
#   bash scripts/co2_memory.sh [LOWCOMM] > docs/results/co2-memory/memory.txt
#
# Runs each method for 24 steps (2 outer rounds of tau = 12) on 8 simulated workers
# (configs/clusters/tcp-8x1-10g.toml, bf16 wire) and prints the train report's memory line
# ("memory per worker (f32): params, grads, comm buffers, optimizer, outer state; Table 1 formula").
# The numbers do not depend on the steps; nano has 667,136 parameters (Psi).
set -euo pipefail
LOWCOMM=${1:-target/release/lowcomm}
tmp=$(mktemp -d)
printf '[methods.co2]\nmode = "reference"\n' > "$tmp/reference.toml"   # co2's mode has no flag
for m in zero1 "local-sgd --tau 12" "overlap-local-sgd --tau 12" "slowmo --tau 12" "co2 --tau 12" \
         "co2 --tau 12 --penalty off" "co2 --tau 12 --shard-outer" "co2 --tau 12 --config $tmp/reference.toml"; do
  out=$(nice -n 10 $LOWCOMM train --preset nano --method $m --runtime sim \
    --cluster configs/clusters/tcp-8x1-10g.toml --batch-size 8 --steps 24 --eval-every 0 \
    --out "$tmp/run" --force 2>&1)
  echo "${m/--config $tmp\/reference.toml/(mode = reference)}: $(grep 'memory per worker' <<<"$out")"
done
rm -rf "$tmp"
