#!/usr/bin/env bash
# Rewrite tests/fixtures/golden/tiny_loss_curve.json from the current code.
# Only after an intended change to the math; say why in the commit.
set -euo pipefail
cd "$(dirname "$0")/.."
LOWCOMM_REGEN_GOLDEN=1 cargo test --locked --test golden_loss
git --no-pager diff --stat tests/fixtures/golden/ || true
