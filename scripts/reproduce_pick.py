"""The setting a `lowcomm tune` chose, for scripts/reproduce.sh.

    python3 scripts/reproduce_pick.py results/reproduce/async/tune-diloco outer_lr   # prints e.g. 0.05

Its winner (tuned.toml) when it has one. When every point is marked, the
point with the lowest validation loss in summary.md, saying so on stderr, so
the page can name the mark. (Before compare's marks discounted the rise
that every run with the same data shows, src/cli/compare/marks.rs, every
warm-started async point was marked "unstable" by the passages of harder
text its training loss rose with; docs/results/reproductions.md.)
"""

import sys
import tomllib
from pathlib import Path


def from_summary(summary: Path, key: str) -> str:
    rows = [line.strip().strip("|").split("|") for line in summary.read_text().splitlines() if line.startswith("|")]
    head = [c.strip() for c in rows[0]]
    k, v = head.index(key), head.index("val loss")
    best = min(rows[2:], key=lambda r: float(r[v].split()[0]))
    print(f"{summary}: no unmarked point; took the lowest val loss, {key} = {best[k].strip()} "
          f"({best[head.index('status')].strip()})", file=sys.stderr)
    return best[k].strip()


def main() -> None:
    tune, key = Path(sys.argv[1]), sys.argv[2]
    tuned = tune / "tuned.toml"
    if tuned.exists():
        section = next(iter(tomllib.loads(tuned.read_text())["methods"].values()))
        print(section[key])
    else:
        print(from_summary(tune / "summary.md", key))


if __name__ == "__main__":
    main()
