#!/usr/bin/env python3
"""Tests of scripts/profile_from_comments.py's additions, by hand:

    python3 -m unittest discover -s scripts -p 'test_*.py'   # scripts/test.sh runs it
"""
import re
import unittest

import profile_from_comments as pfc

DEVICE = """[device]
# Overlap (sim/spec.rs Interference): the model's gradient all-reduce (2606 KiB over 2),
overlap_compute_factor = 1.25
overlap_comm_factor = 1.0
memory = 2.5e10

[links]
"""


class SharedCores(unittest.TestCase):
    def test_is_one_transfer_of_the_overlaps_members(self):
        text = pfc.add_shared_cores(DEVICE)
        # 1 + (1.25 - 1) / 2, right after overlap_comm_factor, inside [device].
        self.assertEqual(float(re.search(r"^shared_cores_compute_factor = (.*)$", text, re.M)[1]), 1.125)
        self.assertLess(text.index("shared_cores"), text.index("memory ="))
        four = DEVICE.replace("over 2)", "over 4)")
        self.assertIn("shared_cores_compute_factor = 1.0625", pfc.add_shared_cores(four))

    def test_leaves_a_profile_without_the_overlap_or_with_the_factor_as_it_is(self):
        done = pfc.add_shared_cores(DEVICE)
        self.assertEqual(pfc.add_shared_cores(done), done)
        plain = "\n".join(l for l in DEVICE.splitlines() if not l.startswith("overlap_")) + "\n"
        self.assertEqual(pfc.add_shared_cores(plain), plain)


MEAN = """[device]
peak_flops = 1.0e10
utilization = 1.0

[timing]
# A micro-batch (forward + backward): median 80.0 ms, mean 64.0 (59.0 .. 88.0 over 40 samples, spread 36%).
"""


class MeanMicroBatch(unittest.TestCase):
    def test_scales_the_rate_by_median_over_mean(self):
        text = pfc.use_mean_micro_batch(MEAN)
        # 1e10 x 80 / 64: the micro-batch (flops / rate) comes out 64/80 of the median's.
        self.assertEqual(float(re.search(r"^peak_flops = (.*)$", text, re.M)[1]), 1.25e10)
        self.assertIn("utilization = 1.0", text)

    def test_is_done_once_and_needs_the_mean(self):
        once = pfc.use_mean_micro_batch(MEAN)
        self.assertEqual(pfc.use_mean_micro_batch(once), once)
        no_mean = MEAN.replace(", mean 64.0", "")
        self.assertEqual(pfc.use_mean_micro_batch(no_mean), no_mean)


if __name__ == "__main__":
    unittest.main()
