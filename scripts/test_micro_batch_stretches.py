#!/usr/bin/env python3
"""Tests of scripts/micro_batch_stretches.py, by hand:

    python3 -m unittest discover -s scripts -p 'test_*.py'   # scripts/test.sh runs it
"""
import json
import math
import tempfile
import unittest
from pathlib import Path

import micro_batch_stretches as mbs


class Lag1(unittest.TestCase):
    def test_the_zigzag_of_calibrate_correlation_rs(self):
        # calibrate/correlation.rs's hand test: raw 20.25 / 47, corrected (12 r + 1)/9.
        raw, rho = mbs.lag1([[1, 3, 2, 4, 3, 5, 4, 6, 5, 7, 6, 8]])
        self.assertAlmostEqual(raw, 20.25 / 47)
        self.assertAlmostEqual(rho, 0.685579, places=6)

    def test_sum_sd_matches_sim_straggle_rs(self):
        self.assertAlmostEqual(mbs.sum_sd(9, 0), 3.0)
        self.assertAlmostEqual(mbs.sum_sd(3, 0.5), math.sqrt(5.5))
        self.assertAlmostEqual(mbs.sum_sd(2, 0.5), math.sqrt(3.0))


class RunRow(unittest.TestCase):
    def test_rounds_end_at_the_all_reduces(self):
        # Two workers, two rounds of 4 micro-batches, an all-reduce after each.
        # Worker 0: 1, 3, 2, 4 | 3, 5, 4, 6 (x 10 ms); worker 1: 1 each.
        # Round sums 100 vs 40 ms and 180 vs 40 ms: E|S0 - S1| = (60 + 140)/2 = 100 ms.
        w0 = [1, 3, 2, 4, 3, 5, 4, 6]
        rows = []
        for w, times in ((0, w0), (1, [1] * 8)):
            t = 0.0
            for i, x in enumerate(times):
                rows.append({"record": "span", "worker": w, "lane": "compute", "name": "micro-batch",
                             "start_s": t, "end_s": t + x / 100})
                t += x / 100
                if i % 4 == 3:
                    rows.append({"record": "span", "worker": w, "lane": "comm", "name": "all_reduce",
                                 "start_s": t, "end_s": t + 0.5, "bytes": 4 << 20})
                    t += 0.5
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "events.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
            cv, raw, rho, real, independent, correlated = mbs.run_row(Path(d))
        self.assertAlmostEqual(real, 0.100)
        # Worker 1 never varies: only worker 0's series carries the pairs; both sets pool in the cv.
        all_mb = [x / 100 for x in w0] + [0.01] * 8
        mean = sum(all_mb) / 16
        sd = math.sqrt(sum((x - mean) ** 2 for x in all_mb) / 16)
        self.assertAlmostEqual(cv, sd / mean)
        self.assertAlmostEqual(independent, 2 * math.sqrt(4 / math.pi) * sd)
        self.assertAlmostEqual(correlated, 2 * mbs.sum_sd(4, rho) * sd / math.sqrt(math.pi))


if __name__ == "__main__":
    unittest.main()
