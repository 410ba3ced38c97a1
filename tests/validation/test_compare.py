"""Tests of validation/compare.py's matching of the two timelines (no runs: timelines by
hand). An interval is compared only between the same two steps on both sides; a round
agrees when its members do."""

import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from validation import compare  # noqa: E402


def timeline(arrivals, rounds):
    """arrivals: {(worker, step): t}; rounds: {(worker, step): update} (applied ones)."""
    return {"contributions": {k: (t, 0 if k in rounds else None) for k, t in arrivals.items()},
            "rounds": dict(rounds), "updates": sorted(set(rounds.values())), "losses": [],
            "spans": [(w, "compute", 0.0, 0.0) for w, _ in arrivals]}


class MatchingTest(unittest.TestCase):
    def test_an_interval_is_compared_only_between_the_same_two_steps(self):
        # worker 0's step 1 is cancelled on the real side only: its step 2's interval runs
        # from step 0 there and from step 1 in the sim, so it is not compared
        real = timeline({(0, 0): 1.0, (0, 2): 3.0, (0, 3): 4.0}, {})
        sim = timeline({(0, 0): 1.0, (0, 1): 2.0, (0, 2): 3.0, (0, 3): 4.5}, {})
        r = compare.compare_run(real, sim)
        self.assertEqual(r["intervals"], 1)  # (0, 3): from step 2 on both sides
        self.assertEqual(r["other_previous"], 1)
        self.assertAlmostEqual(r["interval_mape"], 0.5)

    def test_same_round_needs_both_ends_of_the_interval_in_the_same_round(self):
        # the sim applies the first two gradients one by one, then groups as the real side
        # does: the intervals (w, 1) wait on rounds that differ, the intervals (w, 2) do not
        real = timeline({(0, 0): 1.0, (1, 0): 1.0, (0, 1): 2.0, (1, 1): 2.0, (0, 2): 3.0, (1, 2): 3.0},
                        {(0, 0): 1, (1, 0): 1, (0, 1): 2, (1, 1): 2, (0, 2): 3, (1, 2): 3})
        sim = timeline({(0, 0): 1.0, (1, 0): 1.5, (0, 1): 2.5, (1, 1): 2.5, (0, 2): 3.5, (1, 2): 3.5},
                       {(0, 0): 1, (1, 0): 2, (0, 1): 3, (1, 1): 3, (0, 2): 4, (1, 2): 4})
        r = compare.compare_run(real, sim)
        self.assertEqual(r["intervals"], 4)
        self.assertAlmostEqual(r["same_round"], 0.5)
        self.assertAlmostEqual(r["round_mape"], 0.0)
        self.assertAlmostEqual(r["interval_mape"], 0.125)  # (0, 1): 1.5 s against 1 s

    def test_quantile_mape_compares_sorted_intervals(self):
        ri = {(0, 1): (0, 1.0), (0, 2): (1, 2.0)}
        si = {(0, 1): (0, 2.0), (0, 2): (1, 1.0)}  # the same two intervals, swapped
        self.assertAlmostEqual(compare.quantile_mape(ri, si), 0.0)
        self.assertAlmostEqual(compare.mape([(si[k][1], ri[k][1]) for k in ri]), 0.75)


class TimeToTargetTest(unittest.TestCase):
    def test_interpolated_and_counted_from_the_runs_start(self):
        losses = [(0.1, 2.0), (0.3, 1.5), (0.5, 1.0)]
        self.assertAlmostEqual(compare.time_to(losses, 1.25), 0.4)
        # the same losses from a start 0.1 s in (the reference's processes starting up)
        self.assertAlmostEqual(compare.time_to(losses, 1.25, origin=0.1), 0.3)
        self.assertAlmostEqual(compare.time_to(losses, 2.5, origin=0.1), 0.0)  # reached at the first evaluation
        self.assertIsNone(compare.time_to(losses, 0.5))
        tl = timeline({(0, 0): 1.0}, {})
        tl["spans"] = [(0, "compute", 0.08, 0.2), (1, "compute", 0.05, 0.3)]
        self.assertAlmostEqual(compare.start(tl), 0.05)


class DeviceTableTest(unittest.TestCase):
    """--device: the reference's workers compute there, and --doc rewrites that device's
    table, leaving the CPU's; both refused before any run when they cannot be used."""

    def test_each_device_rewrites_its_own_table(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            doc = os.path.join(d, "v.md")
            cpu_b, cpu_e = compare.table_markers("cpu")
            gpu_b, gpu_e = compare.table_markers("cuda:1")
            self.assertEqual(gpu_b, "<!-- validation table (cuda): begin -->")
            with open(doc, "w") as f:
                f.write(f"a\n{cpu_b}\nold cpu\n{cpu_e}\nb\n{gpu_b}\nold gpu\n{gpu_e}\nc\n")
            compare.replace_between_markers(doc, "new gpu", "cuda")
            with open(doc) as f:
                text = f.read()
            self.assertIn("old cpu", text)
            self.assertIn(f"{gpu_b}\nnew gpu\n{gpu_e}", text)
            self.assertNotIn("old gpu", text)
            # a doc without the device's markers, or a device that is neither, is refused
            # (exit 2) before anything runs
            with open(doc, "w") as f:
                f.write(f"{cpu_b}\n{cpu_e}\n")
            out = os.path.join(d, "out")
            self.assertEqual(compare.main(["--out", out, "--device", "cuda", "--doc", doc]), 2)
            self.assertEqual(compare.main(["--out", out, "--device", "gpu"]), 2)
            self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
