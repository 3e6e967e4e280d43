#!/usr/bin/env bash
# Rewrite the golden loss curves in tests/fixtures/golden/ (the tiny model, the
# same at ctx 96: three attention query blocks, and the same shape in llama
# blocks) from the current code; then
# `git status` shows whether an intended-neutral change moved any bits.
# Only after an intended change to the math; say why in the commit.
set -euo pipefail
cd "$(dirname "$0")/.."
LOWCOMM_REGEN_GOLDEN=1 cargo test --locked --test golden_loss
git --no-pager diff --stat tests/fixtures/golden/ || true
