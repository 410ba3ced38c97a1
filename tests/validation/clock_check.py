#!/usr/bin/python3
"""clock_check.py — CI's check of asgdsim's clock against the independent reference
(issue 43): validation/compare.py on 3 engines at 4 workers (one seed), failing when any
error passes the bounds CI asserts on its 2-core testbed (compare.TESTBED: the issue's
targets lie below the floor that per-message jitter sets on such a machine;
docs/validation.md). ctest runs it alone (validation_clock, RUN_SERIAL): the reference is
real processes on a real clock, and other tests' load would be measured as the
simulator's error. ASGDSIM names the binary.

It also checks that the comparison can fail: the same runs compared with the server's
update cost set 20x too high must pass those bounds (a check that cannot fail would say
nothing)."""

import json
import os
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from validation import compare  # noqa: E402

ASGDSIM = os.environ.get("ASGDSIM", os.path.join(ROOT, "build", "asgdsim"))
ENGINES = "async,sync,k_async_batch"


@unittest.skipUnless(os.access(ASGDSIM, os.X_OK) and os.path.isdir("/usr/share/datasets/fashion-mnist"),
                     "needs ASGDSIM (ctest sets it) and Fashion-MNIST")
class ClockAgainstTheReference(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix="asgd-clock-")
        cls.started = time.time()
        cls.args = ["--out", cls.out, "--engines", ENGINES, "--workers", "4", "--seeds", "1", "--updates", "40",
                    "--eval-every", "20", "--compute", "exponential:0.04", "--asgdsim", ASGDSIM]
        cls.rc = compare.main(cls.args)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def rows(self):
        with open(os.path.join(self.out, "results.json")) as f:
            return json.load(f)["rows"]

    def test_every_error_is_within_its_target(self):
        rows = self.rows()
        self.assertEqual([r["case"] for r in rows], ENGINES.split(","))
        for r in rows:
            print(f"{r['case']}: interval MAPE {r['interval_mape']:.2%}, update MAPE {r['update_mape']:.1%}, "
                  f"staleness TV {r['staleness_tv']:.3f}, Kendall tau {r['kendall_tau']:.3f}, "
                  f"run length {r['duration_error']:+.1%}", file=sys.stderr)
            self.assertEqual(compare.failures(r, compare.TESTBED), [], r["case"])
        self.assertEqual(self.rc, 0)
        print(f"clock_check: {time.time() - self.started:.0f} s", file=sys.stderr)

    def test_a_wrong_server_cost_fails_the_check(self):
        with open(os.path.join(self.out, "calibration.json")) as f:
            cal = json.load(f)
        # 20x the measured cost, and at least 20 ms: half the mean compute time (exponential
        # 0.04 s), so that 4 workers asking for an update every 10 ms saturate the server and
        # the simulated intervals double. 20x alone was too little when the calibration
        # measured a fast server (176 us x 20 = 3.5 ms passed the bounds: async 9.35% < 12%).
        cost = cal["asgdsim_config"]["cluster.server.update_seconds"]
        cal["asgdsim_config"]["cluster.server.update_seconds"] = max(20 * cost, 0.02)
        wrong = os.path.join(self.out, "wrong_calibration.json")
        with open(wrong, "w") as f:
            json.dump(cal, f)
        out = os.path.join(self.out, "wrong")
        shutil.copytree(os.path.join(self.out, "real"), os.path.join(out, "real"))
        args = ["--out", out, "--engines", "async", "--workers", "4", "--seeds", "1", "--updates", "40",
                "--eval-every", "20", "--compute", "exponential:0.04", "--asgdsim", ASGDSIM,
                "--calibration", wrong, "--check", "testbed"]
        self.assertEqual(compare.main(args), 1)


if __name__ == "__main__":
    unittest.main()
