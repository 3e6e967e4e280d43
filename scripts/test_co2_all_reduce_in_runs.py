"""Tests of co2_all_reduce_in_runs.py (run by scripts/test.sh)."""
import json
import tempfile
import unittest
from pathlib import Path

from co2_all_reduce_in_runs import calibrated, chained, transfers


class TransfersTest(unittest.TestCase):
    def test_each_all_reduce_is_the_later_ranks_span(self):
        # Rank 0 starts the first all-reduce at 1.0 and waits for rank 1
        # (1.2): the transfer is rank 1's 1.2-2.5 = 1.3 s. The second, rank
        # 0 starts last: 3.0-4.1 = 1.1 s. A scalar vote (4 bytes) is not one.
        big = 2 << 20
        events = [
            {"record": "span", "name": "all_reduce", "worker": 0, "bytes": big, "start_s": 3.0, "end_s": 4.1},
            {"record": "span", "name": "all_reduce", "worker": 0, "bytes": big, "start_s": 1.0, "end_s": 2.5},
            {"record": "span", "name": "all_reduce", "worker": 1, "bytes": big, "start_s": 1.2, "end_s": 2.5},
            {"record": "span", "name": "all_reduce", "worker": 1, "bytes": big, "start_s": 2.8, "end_s": 4.1},
            {"record": "span", "name": "all_reduce", "worker": 1, "bytes": 4, "start_s": 4.1, "end_s": 4.2},
        ]
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
            got = transfers(Path(d))
        self.assertEqual(len(got), 2)
        self.assertAlmostEqual(got[0], 1.3)
        self.assertAlmostEqual(got[1], 1.1)


class CalibratedTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def profile(self, text):
        """A profile.toml holding `text`."""
        p = Path(self.dir.name) / "profile.toml"
        p.write_text(text)
        return p

    def test_reads_the_overlap_phases_two_lines(self):
        p = self.profile(
            "# alone:                median 1280.0403 ms, mean 1303.3246 (1208.1 .. 1466.9 over 10 samples, spread 20%)\n"
            "# while the rank computes: median 1343.6684 ms, mean 1350.4769 (1207.9 .. 1529.0 over 10 samples, spread 24%)\n")
        self.assertEqual(calibrated(p), (1280.0403, 1303.3246, 1343.6684, 1350.4769))
        self.assertIsNone(calibrated(Path(self.dir.name) / "missing.toml"))
        # A profile from before the chained all-reduce has none.
        self.assertIsNone(chained(p))

    def test_reads_the_chained_all_reduce_two_lines_down(self):
        p = self.profile(
            "# launched as the last returned, micro-batches started through its first 40% (co2's pattern):\n"
            "#   median 1354.3302 ms, mean 1355.3236 (1161.2 .. 1603.4 over 20 samples, spread 33%), covered 42%\n")
        self.assertEqual(chained(p), (1354.3302, 1355.3236))

if __name__ == "__main__":
    unittest.main()
