"""Tests of async_exchange.py's arithmetic (python3 -m unittest discover -s scripts -p 'test_*.py')."""
import unittest

from async_exchange import reverse, share_beside


class ReverseTest(unittest.TestCase):
    def test_the_share_of_each_transfer_the_other_workers_overlap(self):
        # Worker 0's upload 0-2 s: worker 1's download 1-3 s covers its last
        # second, half of it; worker 0's own download (0-0.5) does not count.
        # Worker 1's upload 4-5 s: nothing of worker 0's runs then.
        ups = [(0.0, 2.0, 0), (4.0, 5.0, 1)]
        downs = [(1.0, 3.0, 1), (0.0, 0.5, 0)]
        self.assertEqual(reverse(ups, downs), [0.5, 0.0])

    def test_a_share_is_at_most_all_of_it_and_empty_spans_have_none(self):
        self.assertEqual(reverse([(1.0, 2.0, 0)], [(0.0, 3.0, 1), (1.5, 2.5, 1)]), [1.0])
        self.assertEqual(share_beside(2.0, 2.0, [(0.0, 3.0)]), 0.0)
        self.assertAlmostEqual(share_beside(0.0, 4.0, [(1.0, 2.0), (3.0, 5.0)]), 0.5)


if __name__ == "__main__":
    unittest.main()
