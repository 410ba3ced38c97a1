"""Tests of validation/calibrate.py: the alpha-beta fit against known lines, and a tiny
calibration end to end (its JSON names the asgdsim keys it sets)."""

import json
import os
import shutil
import tempfile
import unittest

import runlogs  # noqa: F401 -- puts the repository on sys.path

from validation import calibrate


class FitTest(unittest.TestCase):
    def test_fit_recovers_a_line_and_reports_residuals(self):
        sizes = [1024 * 2 ** i for i in range(8)]
        alpha, beta = 50e-6, 2e9
        fit = calibrate.fit_alpha_beta(sizes, [alpha + b / beta for b in sizes])
        self.assertAlmostEqual(fit["alpha_s"], alpha, delta=1e-9)
        self.assertAlmostEqual(fit["beta_bytes_per_s"] / beta, 1.0, places=6)
        self.assertAlmostEqual(fit["r2"], 1.0, places=9)
        self.assertLess(fit["max_abs_residual_s"], 1e-12)
        noisy = [alpha + b / beta + (1e-5 if i == 0 else 0.0) for i, b in enumerate(sizes)]
        fit = calibrate.fit_alpha_beta(sizes, noisy)
        self.assertGreater(fit["points"][0]["residual_s"], 0)  # the outlier shows
        rel = calibrate.fit_alpha_beta(sizes, noisy, relative=True)
        self.assertEqual(len(rel["points"]), len(sizes))


class CalibrateRunTest(unittest.TestCase):
    def test_tiny_calibration_writes_the_config_keys(self):
        tmp = tempfile.mkdtemp(prefix="asgd-calibrate-test-")
        self.addCleanup(shutil.rmtree, tmp, True)
        out = os.path.join(tmp, "cal.json")
        argv = ["--out", out, "--features", "16", "--hidden", "8", "--reps", "3", "--warmup", "1",
                "--update-steps", "20", "--max-bytes", "8192", "--compute", "exponential:0.002"]
        self.assertEqual(calibrate.main(argv), 0)
        with open(out) as f:
            r = json.load(f)
        self.assertEqual(set(r["asgdsim_config"]), {"cluster.network.latency", "cluster.network.bandwidth",
                                                    "cluster.server.update_seconds", "cluster.server.send_seconds"})
        self.assertEqual(r["transport"]["sizes_bytes"], [1024 + 64, 2048 + 64, 4096 + 64, 8192 + 64])
        for direction in r["transport"]["directions"].values():
            self.assertTrue(all(p["median_s"] > 0 for p in direction["points"]))
        self.assertEqual(r["server"]["parameters"], 16 * 8 + 8 + 8 * 10 + 10)
        self.assertGreater(r["server"]["apply"]["median"], 0)
        self.assertEqual(r["server"]["apply"]["n"], 20)
        self.assertEqual(r["asgdsim_config"]["cluster.server.update_seconds"], r["server"]["apply"]["median"])
        # the cycles: every part timed once per cycle; a cycle's two messages cost what the
        # cycle cost but its apply, and the latency is half of that less the bytes' time
        cycle = r["cycle"]
        for part in ("push", "handoff", "apply", "reply", "overhead", "messages"):
            self.assertEqual(cycle[part]["n"], 20, part)
            self.assertGreater(cycle[part]["median"], 0, part)
        self.assertEqual(cycle["apply"], r["server"]["apply"])
        self.assertLess(cycle["messages"]["median"], cycle["overhead"]["median"])
        # the bursts: 1 timed burst of 8 sends a kind (7 gaps each); o is the header-only median,
        # which the cycle's reply also pays
        send = r["send"]
        for kind in ("header", "params"):
            self.assertEqual(send[kind]["n"], 3 * 7, kind)
            self.assertEqual(len(send[kind]["median_by_position_s"]), 7, kind)
        o = r["asgdsim_config"]["cluster.server.send_seconds"]
        self.assertEqual(o, send["header"]["median"])
        self.assertGreater(o, 0)
        beta = r["asgdsim_config"]["cluster.network.bandwidth"]
        expected = (cycle["messages"]["median"] - o) / 2 - (r["model_message"]["bytes"] / beta if beta else 0.0)
        self.assertAlmostEqual(r["asgdsim_config"]["cluster.network.latency"], max(expected, 0.0), delta=1e-12)
        for key in ("host", "torch", "git_commit", "date"):
            self.assertIn(key, r)
        self.assertEqual(calibrate.main(argv), 2)  # never overwrites
        other = os.path.join(tmp, "other.json")
        self.assertEqual(calibrate.main(["--out", other, "--compute", "often:1"]), 2)  # an unknown law
        self.assertFalse(os.path.exists(other))


if __name__ == "__main__":
    unittest.main()
