#!/usr/bin/env python3
"""A rank's link, 50 ms at a time, through each model-size all-reduce of a
real run (docs/results/planner-accuracy.md, finding 20).

    python3 scripts/link_timeline.py RUN SAMPLES FROM TO

RUN is a run's folder (runs/co2 under a compare's results), SAMPLES what
bench/netns/link_sampler.py wrote for that rank during it. The run's
times start at its own zero, the samples' at the Unix epoch: the offset
is searched between FROM and TO (Unix seconds of the run's zero; bound it
with a checkpoint's file times, e.g. `stat -c %.9Y RUN/checkpoints/step-*/model.safetensors`
against that step's `wall_s` in RUN/metrics.jsonl) as the one that puts
the most of the rank's bytes inside worker 0's all-reduces. Prints, per
all-reduce, its seconds and the tx/rx MB/s of each 50 ms.
"""
import bisect
import sys
from pathlib import Path

from all_reduce_times import spans
from async_exchange import all_spans


def interpolate(times, values, x):
    """values at time x, linear between the samples around it."""
    i = min(max(bisect.bisect_left(times, x), 1), len(times) - 1)
    a, b = times[i - 1], times[i]
    f = (x - a) / (b - a) if b > a else 0.0
    return values[i - 1] + f * (values[i] - values[i - 1])


def main(run, samples, lo, hi):
    rows = [tuple(map(float, l.split())) for l in Path(samples).open()]
    t, tx, rx = ([r[k] for r in rows] for k in range(3))
    ars = spans(all_spans(Path(run)), "all_reduce")

    def inside(off):
        return sum(interpolate(t, v, e + off) - interpolate(t, v, s + off) for s, e in ars for v in (tx, rx))

    steps = int((hi - lo) / 0.002) + 1
    off = max((lo + k * 0.002 for k in range(steps)), key=inside)
    print(f"run zero at {off:.3f} (Unix s)")
    for s, e in ars:
        bins, x = [], s
        while x < e:
            rate = [(interpolate(t, v, x + off + 0.05) - interpolate(t, v, x + off)) / 0.05 / 1e6 for v in (tx, rx)]
            bins.append(f"{rate[0]:.1f}/{rate[1]:.1f}")
            x += 0.05
        print(f"all-reduce {s:.3f}-{e:.3f} s ({e - s:.3f} s), tx/rx MB/s per 50 ms: {' '.join(bins)}")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
