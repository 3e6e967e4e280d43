#!/usr/bin/env python3
"""Tests of scripts/planner_accuracy.py's arithmetic, on numbers small enough
to check by hand:

    python3 -m unittest discover -s scripts -p 'test_*.py'   # scripts/test.sh runs it
"""
import json
import tempfile
import unittest
from pathlib import Path

import planner_accuracy as pa


class Floor(unittest.TestCase):
    def test_is_the_least_worst_error_of_any_single_prediction(self):
        xs = [0.06, 0.09, 0.075]
        # (0.09 - 0.06) / (0.09 + 0.06) = 0.2, reached at p = 2 * 0.09 * 0.06 / 0.15 = 0.072.
        self.assertAlmostEqual(pa.floor(xs), 0.2)
        worst = lambda p: max(abs(p - x) / x for x in xs)
        self.assertAlmostEqual(worst(0.072), 0.2)
        # No prediction on a fine grid does better.
        grid = [0.05 + i * 1e-5 for i in range(5000)]
        self.assertGreaterEqual(min(worst(p) for p in grid), 0.2 - 1e-9)

    def test_of_equal_runs_is_zero(self):
        self.assertEqual(pa.floor([0.1, 0.1]), 0.0)


class Steady(unittest.TestCase):
    def test_leaves_out_the_first_two_rounds(self):
        # Rounds of 2 steps; a slow fill (1 s) then 0.1 s a step.
        wall = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7]
        # Between the ends of round 2 (step 4, 1.3 s) and round 4 (step 8, 1.7 s): 0.4 s over 4 steps.
        self.assertAlmostEqual(pa.steady(wall, 2), 0.1)

    def test_needs_three_rounds(self):
        self.assertIsNone(pa.steady([1.0, 2.0, 3.0, 4.0], 2))


def scratch(test):
    """A temporary folder removed after `test`."""
    d = tempfile.TemporaryDirectory()
    test.addCleanup(d.cleanup)
    return Path(d.name)


class Seeds(unittest.TestCase):
    def test_a_methods_seeds_are_averaged(self):
        # Two seeds' runs of one spec (runs/co2, runs/co2-seed-1338): 10 s and
        # 12 s over 100 rounds, 1 micro-batch a round, idle 1 s and 3 s.
        root = scratch(self)
        for name, wall, idle in [("co2", 10.0, 1.0), ("co2-seed-1338", 12.0, 3.0)]:
            (root / "runs" / name).mkdir(parents=True)
            worker = {"micro_batches": {"rounds": 100, "mean": 1.0}, "idle_s": idle}
            result = {"spec": "co2", "summary": {"wall_s": wall, "workers": [worker]}}
            (root / "runs" / name / "result.json").write_text(json.dumps(result))
        got = pa.measured(pa.runs(root)["co2"])
        # s/round (0.10 + 0.12) / 2; exposed (0.1 + 0.25) / 2.
        for g, want in zip(got, (0.11, 1.0, 0.175)):
            self.assertAlmostEqual(g, want)

    def test_the_seed_table_places_the_real_run_against_the_seeds(self):
        # Sim seeds at 0.10 and 0.12 s/round (spread 0.02 / 0.11 = 18.2%);
        # a real run at 0.126 s/round is 5.0% above the slowest seed.
        setting = scratch(self) / "20mbit"
        for folder, name, wall in [("sim", "co2", 10.0), ("sim", "co2-seed-1338", 12.0), ("real", "co2", 12.6)]:
            (setting / folder / "runs" / name).mkdir(parents=True)
            worker = {"micro_batches": {"rounds": 100, "mean": 1.0}, "idle_s": 0.0}
            result = {"spec": "co2", "summary": {"wall_s": wall, "workers": [worker]}}
            (setting / folder / "runs" / name / "result.json").write_text(json.dumps(result))
        rows = [l for l in pa.seed_lines([setting], "") if l.startswith("| 20mbit")]
        self.assertEqual(rows, ["| 20mbit | co2 | 0.1000 0.1200 | 18.2% | 0.1260 | +5.0% outside |"])


class PooledWalls(unittest.TestCase):
    def test_groups_worker_rounds_in_the_order_they_ended(self):
        # Two workers and the server (participant 2), logged a rank at a time.
        w = lambda p, step, end: {"kind": "worker", "worker": p, "step": step, "end_s": end}
        lines = [w(0, 1, 1.0), w(0, 2, 3.0), w(0, 3, 5.0), w(1, 1, 2.0), w(1, 2, 4.0),
                 {"kind": "server", "worker": 2, "step": 1, "end_s": 2.5},
                 {"kind": "train", "step": 1, "wall_s": 3.0}]
        # Ends in order 1, 2 | 3, 4 | 5: two whole groups, at their latest ends.
        path = scratch(self) / "metrics.jsonl"
        path.write_text("".join(json.dumps(l) + "\n" for l in lines))
        self.assertEqual(pa.pooled_walls(path), [2.0, 4.0])


class Walls(unittest.TestCase):
    def test_drops_a_curve_that_goes_back_in_time(self):
        d = scratch(self)
        rows = ["method,step,tokens,wall_s,loss,bytes_per_worker,seed",
                "a,1,10,1.0,5,0,1", "a,2,20,2.0,5,0,1",
                "b,1,10,2.0,5,0,1", "b,2,20,1.0,5,0,1"]
        (d / "curves.csv").write_text("\n".join(rows) + "\n")
        self.assertEqual(pa.walls(d), {"a": [1.0, 2.0]})


if __name__ == "__main__":
    unittest.main()
