"""Tests of asgdsim.analysis.stats (python/asgdsim/analysis/stats.py): the t quantile, bands over seeds, and how numbers are written.

What it is: the t quantile against closed forms (1 and 2 degrees of freedom), published
values and, where SciPy is installed, scipy.stats.t; the confidence-interval half-width
against a hand computation; the significant-digit rules on the issue's examples.
What it is not: no figures or files (test_figures.py, test_plot.py).
"""

import math
import sys
import unittest
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from asgdsim.analysis import stats  # noqa: E402


class TQuantileTest(unittest.TestCase):
    def test_closed_forms(self):
        for p in (0.6, 0.9, 0.975, 0.995, 0.9995):
            with self.subTest(p=p):
                # df = 1 is the Cauchy distribution; df = 2 has F^-1(p) = (2p-1)/sqrt(2p(1-p)).
                self.assertAlmostEqual(stats.t_quantile(p, 1), math.tan(math.pi * (p - 0.5)),
                                       delta=1e-9 * math.tan(math.pi * (p - 0.5)))
                exact = (2 * p - 1) / math.sqrt(2 * p * (1 - p))
                self.assertAlmostEqual(stats.t_quantile(p, 2), exact, delta=1e-9 * exact)

    def test_published_values(self):
        # t_{0.975, df} to 9 significant digits (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2).
        table = {3: 3.18244631, 4: 2.77644511, 9: 2.26215716, 29: 2.04522964,
                 100: 1.98397152}
        for df, value in table.items():
            with self.subTest(df=df):
                self.assertAlmostEqual(stats.t_quantile(0.975, df), value, delta=2e-8)
        self.assertAlmostEqual(stats.t_quantile(0.975, 1e7), 1.959963985, delta=1e-6)  # normal
        self.assertAlmostEqual(stats.t_quantile(0.025, 4), -2.77644511, delta=2e-8)
        self.assertEqual(stats.t_quantile(0.5, 3), 0.0)

    def test_agrees_with_scipy_where_installed(self):
        try:
            from scipy.stats import t
        except ImportError:
            self.skipTest("SciPy is not installed (the closed forms and the table still test it)")
        for df in (1, 2, 3, 5, 8, 13, 30, 200):
            for p in (0.55, 0.8, 0.95, 0.975, 0.999):
                self.assertAlmostEqual(stats.t_quantile(p, df), t.ppf(p, df),
                                       delta=1e-8 * t.ppf(p, df))

    def test_rejects_bad_arguments(self):
        for p, df in ((0.0, 3), (1.0, 3), (0.9, 0)):
            with self.assertRaises(ValueError):
                stats.t_quantile(p, df)


class BandTest(unittest.TestCase):
    def test_ci_half_width_by_hand(self):
        values = [0.61, 0.55, 0.70]
        mean = sum(values) / 3
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / 2)
        got_mean, got_std, half, n = stats.estimate(values, "ci")
        self.assertEqual(n, 3)
        self.assertAlmostEqual(got_mean, mean, delta=1e-15)
        self.assertAlmostEqual(got_std, std, delta=1e-15)
        self.assertAlmostEqual(half, 4.302652729749464 * std / math.sqrt(3), delta=1e-12)
        self.assertAlmostEqual(stats.estimate(values, "std")[2], std, delta=1e-15)
        self.assertTrue(math.isnan(stats.estimate(values, "none")[2]))

    def test_single_value_has_no_spread(self):
        mean, std, half, n = stats.estimate([0.5, math.nan, None], "ci")
        self.assertEqual((mean, n), (0.5, 1))
        self.assertTrue(math.isnan(std) and math.isnan(half))
        self.assertEqual(stats.estimate([], "ci")[3], 0)

    def test_half_width_of_curves(self):
        std = np.array([1.0, 2.0])
        np.testing.assert_allclose(stats.half_width(std, 5, "ci"),
                                   std * 2.7764451051977987 / math.sqrt(5), rtol=1e-12)
        self.assertTrue(np.isnan(stats.half_width(std, 1, "ci")).all())
        with self.assertRaises(ValueError):
            stats.half_width(std, 3, "sem")


class FormatTest(unittest.TestCase):
    def test_issue_examples(self):
        self.assertEqual(stats.format_estimate(64.33333, 1.5), "64.3 \u00b1 1.5")
        self.assertEqual(stats.format_estimate(76, 104), "76 \u00b1 104")  # not 1e+02

    def test_two_significant_digits_of_the_half_width(self):
        cases = {(0.123456, 0.0123): "0.123 \u00b1 0.012",
                 (0.12345, 0.0996): "0.12 \u00b1 0.10",       # rounds up a decade
                 (12345.5, 10.2): "12346 \u00b1 10",
                 (0.8123, 0.00012): "0.81230 \u00b1 0.00012",
                 (-0.001, 0.5): "0.00 \u00b1 0.50",          # no "-0.00"
                 (3.2e-5, 1.1e-6): "(3.20 \u00b1 0.11)\u00d710\u207b\u2075",
                 (1.234e7, 5.6e4): "(1.2340 \u00b1 0.0056)\u00d710\u2077",
                 (0.5, 0.0): "0.5 \u00b1 0",
                 (56.32000000000001, 9.9e-15): "56.32 \u00b1 0"}  # rounding noise, no spread
        for (mean, half), text in cases.items():
            with self.subTest(mean=mean, half=half):
                self.assertEqual(stats.format_estimate(mean, half), text)

    def test_single_run_shows_no_plus_minus(self):
        self.assertEqual(stats.format_estimate(0.25, math.nan), "0.25")
        self.assertEqual(stats.format_estimate(0.25, 0.1, n=1), "0.25")

    def test_values(self):
        cases = {64.33333: "64.33", 0.1: "0.1", 1e-5: "1\u00d710\u207b\u2075",
                 2.5e-4: "2.5\u00d710\u207b\u2074", 123456789.0: "123456789",
                 1234567.5: "1.235\u00d710\u2076", math.nan: "\u2014", None: "\u2014",
                 math.inf: "\u221e", 0.0: "0"}
        for value, text in cases.items():
            with self.subTest(value=value):
                self.assertEqual(stats.format_value(value), text)
        self.assertEqual(stats.format_value(1234567.5, 7), "1234568")  # counts keep digits


if __name__ == "__main__":
    unittest.main()
