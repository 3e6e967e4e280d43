#!/usr/bin/env python3
"""Tests of scripts/host_drift.py, by hand:

    python3 -m unittest discover -s scripts -p 'test_*.py'   # scripts/test.sh runs it
"""
import tempfile
import unittest
from pathlib import Path

import host_drift

PROFILE = """[device]
# and right after each, as long, alone: median 55.0000 ms, mean 55.0000 (50.0 .. 60.0 over 30 samples, spread 18%)
[timing]
# A micro-batch (forward + backward): median 49.0000 ms, mean 50.0000 (45.0000 .. 55.0000 over 40 samples, spread 20%).
"""
SUMMARY = """Per round, averaged over workers (c = compute, m = communication):

| method | round (s) | c (s) | m (s) | round / max(c, m) | round / (c + m) |
| --- | --- | --- | --- | --- | --- |
| local-sgd | 0.1000 | 0.0480 | 0.0200 | 1.3 | 1.0 |
| co2 | 0.1000 | 0.0900 | 0.0300 | 1.1 | 0.8 |
| diloco:h=12 | 0.1000 | 0.0520 | 0.0200 | 1.3 | 1.0 |
"""


class DriftRow(unittest.TestCase):
    def test_reads_both_means_and_the_blocking_methods_compute(self):
        with tempfile.TemporaryDirectory() as d:
            setting = Path(d) / "100mbit"
            (setting / "real").mkdir(parents=True)
            (setting / "profile.toml").write_text(PROFILE)
            (setting / "real" / "summary.md").write_text(SUMMARY)
            # The means (not the medians) in seconds, and (48 + 52) / 2 ms of
            # local-sgd and diloco; co2's compute runs beside its transfers and is left out.
            t, a, c = host_drift.drift_row(setting)
            self.assertAlmostEqual(t, 0.050)
            self.assertAlmostEqual(a, 0.055)
            self.assertAlmostEqual(c, 0.050)
            # A profile from before the overlap phase has no alone samples: no row.
            (setting / "profile.toml").write_text(PROFILE.split("\n", 2)[2])
            self.assertIsNone(host_drift.drift_row(setting))


if __name__ == "__main__":
    unittest.main()
