"""Tests of all_reduce_times.py's arithmetic (run by scripts/test.sh)."""
import json
import tempfile
import unittest
from pathlib import Path

from all_reduce_times import covered, spans
from async_exchange import all_spans
from link_timeline import interpolate


class CoveredTest(unittest.TestCase):
    def test_the_share_of_each_all_reduce_under_micro_batches_averaged(self):
        # All-reduce 0-1 s: micro-batches 0-0.25 and 0.5-0.75 cover half of it;
        # all-reduce 1-3 s: 0.9-1.5 covers its first 0.5 s, a quarter (and
        # 0.1 s of the first). The mean of 0.6 and 0.25.
        share = covered([(0.0, 1.0), (1.0, 3.0)], [(0.0, 0.25), (0.5, 0.75), (0.9, 1.5)])
        self.assertAlmostEqual(share, 0.425)

    def test_nothing_beside_it_covers_none(self):
        self.assertEqual(covered([(2.0, 3.0)], [(0.0, 1.0), (3.0, 4.0)]), 0.0)


class SpansTest(unittest.TestCase):
    def test_only_the_model_size_all_reduces_of_worker_0(self):
        events = [
            {"name": "all_reduce", "worker": 0, "bytes": 2 << 20, "start_s": 1.0, "end_s": 2.5},
            {"name": "all_reduce", "worker": 0, "bytes": 4, "start_s": 2.5, "end_s": 2.6},  # a scalar vote
            {"name": "all_reduce", "worker": 1, "bytes": 2 << 20, "start_s": 1.0, "end_s": 2.4},
            {"name": "micro-batch", "worker": 0, "start_s": 0.0, "end_s": 0.05},
        ]
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "events.jsonl"
            path.write_text("".join(json.dumps({"record": "span", **e}) + "\n" for e in events))
            ev = all_spans(Path(d))
            self.assertEqual(spans(ev, "all_reduce"), [(1.0, 2.5)])
            self.assertEqual(spans(ev, "micro-batch"), [(0.0, 0.05)])


class InterpolateTest(unittest.TestCase):
    def test_a_counter_between_two_samples_lies_on_the_line(self):
        times, counts = [0.0, 0.01, 0.02], [0, 100, 300]
        self.assertAlmostEqual(interpolate(times, counts, 0.015), 200.0)
        self.assertEqual(interpolate(times, counts, 0.01), 100)
        # Past the last sample: the last segment's slope goes on.
        self.assertAlmostEqual(interpolate(times, counts, 0.03), 500.0)


if __name__ == "__main__":
    unittest.main()
