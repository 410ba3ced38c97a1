"""End to end: the asgdsim binary runs a tiny experiment, analysis/plot.py draws its report.

What it is: 2 engines (async, and sync_backup under the name "backup1", so the report must
group by engine name) x a sweep of 2 learning rates x 2 repeats on synthetic softmax data, with --trace, run by the real simulator; then plot.py on the folder. Checks
that every figure exists and is a non-trivial PNG, and that the report's numbers (the
summary table, its Markdown rendering and index.csv) equal those in the runs'
summary.json files.
What it is not: a test of the plots' looks (a person does that) or of the simulator's
numbers (the GoogleTest suites do).

Needs the binary: ASGDSIM=/path/to/asgdsim (ctest sets it); skipped without it.
    ASGDSIM=build/asgdsim /usr/bin/python3 tests/analysis/test_e2e.py -v
"""

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

PLOT = Path(__file__).resolve().parents[2] / "analysis" / "plot.py"
ASGDSIM = os.environ.get("ASGDSIM")

ENGINES = ("async", "backup1")
RATES = (0.05, 0.2)
SEEDS = (1, 2)
CONFIG = {
    "name": "e2e",
    "seed": SEEDS[0],
    "repeats": len(SEEDS),
    "model": {"type": "softmax"},
    "data": {"type": "synthetic", "classes": 4, "features": 16, "train_samples": 512,
             "test_samples": 256},
    "train": {"batch_size": 16, "lr": 0.1},
    "stop": {"epochs": 3},
    "eval": {"every": 0.25, "unit": "epochs"},
    "cluster": {"workers": 4, "compute": {"dist": "exponential", "mean": 0.01}},
    "engines": [{"type": "async"}, {"type": "sync_backup", "name": "backup1", "backups": 1}],
    "sweep": {"train.lr": list(RATES)},
}
FIGURES = ("convergence", "staleness", "timeline", "workers")  # no scaling: workers not swept


def python_for_plot():
    """The interpreter that has matplotlib: this one when it does, else /usr/bin/python3."""
    try:
        import matplotlib  # noqa: F401
        import pandas  # noqa: F401
        return sys.executable
    except ImportError:
        return "/usr/bin/python3"


def run_id(engine, rate, seed):
    return f"{engine}-lr={rate:g}-seed{seed}"


def mean_std(values):
    """Mean and sample std (ddof=1; 0 for one value), as the report defines them."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def png_is_non_trivial(test, path):
    test.assertTrue(path.is_file(), f"{path} missing")
    data = path.read_bytes()
    test.assertTrue(data.startswith(b"\x89PNG\r\n\x1a\n"), f"{path} is not a PNG")
    test.assertGreater(len(data), 5000, f"{path} is suspiciously small")
    import matplotlib.image
    import numpy as np
    pixels = matplotlib.image.imread(str(path))
    test.assertGreater(min(pixels.shape[:2]), 200, f"{path} is tiny")
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    test.assertGreater(len(colours), 10, f"{path} is (nearly) a single colour")


def cell_numbers(text):
    """'0.1234 \u00b1 0.002' -> [0.1234, 0.002]; '\u2014' -> []."""
    return [float(v) for v in re.findall(r"[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?", text)]


@unittest.skipUnless(ASGDSIM, "set ASGDSIM to the asgdsim binary to run the end-to-end test")
class EndToEndTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="asgd_e2e_"))
        config = cls.tmp / "e2e.json"
        config.write_text(json.dumps(CONFIG, indent=2))
        cls.run_result = subprocess.run(
            [ASGDSIM, "run", str(config), "--out", str(cls.tmp / "runs"), "--trace", "--quiet",
             "--threads", "2"], capture_output=True, text=True, timeout=300)
        cls.folder = cls.tmp / "runs" / "e2e"
        cls.plot_result = subprocess.run(
            [python_for_plot(), str(PLOT), str(cls.folder)], capture_output=True, text=True,
            timeout=300)
        cls.summaries = {}
        for engine in ENGINES:
            for rate in RATES:
                for seed in SEEDS:
                    path = cls.folder / run_id(engine, rate, seed) / "summary.json"
                    if path.is_file():
                        cls.summaries[(engine, rate, seed)] = json.loads(path.read_text())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertEqual(self.run_result.returncode, 0, self.run_result.stderr)
        self.assertEqual(self.plot_result.returncode, 0, self.plot_result.stderr)

    def group_values(self, engine, rate):
        """{quantity stem: [value per seed]} from the group's summary.json files."""
        runs = [self.summaries[(engine, rate, seed)] for seed in SEEDS]
        return {
            "train_loss": [s["final"]["train_loss"] for s in runs],
            "test_loss": [s["final"]["test_loss"] for s in runs],
            "test_accuracy": [s["final"]["test_accuracy"] for s in runs],
            "time": [s["time"] for s in runs],
            "updates": [s["updates"] for s in runs],
            "dropped_gradients": [s["dropped_gradients"] for s in runs],
            "mean_staleness": [s["staleness"]["mean"] for s in runs],
        }

    def test_every_run_completed_with_its_files(self):
        self.assertEqual(len(self.summaries), len(ENGINES) * len(RATES) * len(SEEDS))
        for key, summary in self.summaries.items():
            self.assertEqual(summary["status"], "completed", key)
            folder = self.folder / run_id(*key)
            for name in ("config.json", "meta.json", "metrics.csv", "staleness.csv",
                         "workers.csv", "trace.json"):
                self.assertTrue((folder / name).is_file(), f"{key}: {name} missing")
        # The engines differ where they should: the sync family never has stale gradients
        # and drops its late ones; async has stale gradients and drops none.
        for rate in RATES:
            for seed in SEEDS:
                async_, backup = (self.summaries[(e, rate, seed)] for e in ENGINES)
                self.assertEqual(backup["staleness"]["mean"], 0)
                self.assertGreater(backup["dropped_gradients"], 0)
                self.assertGreater(async_["staleness"]["mean"], 0)
                self.assertEqual(async_["dropped_gradients"], 0)

    def test_report_path_is_the_last_line(self):
        last = self.plot_result.stdout.strip().splitlines()[-1]
        self.assertEqual(Path(last).resolve(), (self.folder / "report.html").resolve())

    def test_figures_exist_and_are_non_trivial_pngs(self):
        plots = self.folder / "plots"
        for name in FIGURES:
            with self.subTest(figure=name):
                png_is_non_trivial(self, plots / f"{name}.png")
                self.assertGreater((plots / f"{name}.svg").stat().st_size, 5000)
        self.assertFalse((plots / "scaling.png").exists())
        html = (self.folder / "report.html").read_text()
        self.assertEqual(html.count('src="data:image/png;base64,'), len(FIGURES))

    def test_summary_table_equals_summary_json(self):
        with open(self.folder / "summary_table.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        self.assertEqual(len(rows), len(ENGINES) * len(RATES))
        for row in rows:
            engine, rate = row["engine"], float(row["train.lr"])
            self.assertEqual(int(row["runs"]), len(SEEDS))
            self.assertEqual(int(row["completed"]), len(SEEDS))
            for stem, values in self.group_values(engine, rate).items():
                with self.subTest(group=(engine, rate), quantity=stem):
                    mean, std = mean_std(values)
                    self.assertAlmostEqual(float(row[stem + "_mean"]), mean,
                                           delta=1e-12 * max(1.0, abs(mean)))
                    self.assertAlmostEqual(float(row[stem + "_std"]), std,
                                           delta=1e-9 * max(1.0, abs(mean)))

    def test_report_md_table_shows_the_same_numbers(self):
        """The table a reader sees: 4 significant digits of the mean, 2 of the std."""
        text = (self.folder / "report.md").read_text()
        lines = [line for line in text.splitlines() if line.startswith("| ")]
        headings = [h.strip() for h in lines[0].strip("|").split("|")]
        shown = {}
        for line in lines[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) == len(headings) and cells[0] in ENGINES:
                shown[(cells[0], float(cells[1]))] = dict(zip(headings, cells))
        self.assertEqual(set(shown), {(e, r) for e in ENGINES for r in RATES})
        columns = {"train_loss": "final train loss", "test_accuracy": "final test accuracy",
                   "time": "virtual time (s)", "updates": "updates"}
        for (engine, rate), row in shown.items():
            values = self.group_values(engine, rate)
            for stem, heading in columns.items():
                with self.subTest(group=(engine, rate), quantity=stem):
                    mean, std = mean_std(values[stem])
                    numbers = cell_numbers(row[heading])
                    self.assertAlmostEqual(numbers[0], mean, delta=5e-4 * abs(mean) + 1e-12)
                    if std > 0:
                        self.assertAlmostEqual(numbers[1], std, delta=5e-2 * std)

    def test_index_csv_equals_summary_json(self):
        with open(self.folder / "index.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        self.assertEqual(len(rows), len(self.summaries))
        for row in rows:
            key = (row["engine"], float(row["train.lr"]), int(row["seed"]))
            self.assertEqual(row["run_id"], run_id(*key))
            summary = self.summaries[key]
            self.assertEqual(row["status"], summary["status"])
            self.assertAlmostEqual(float(row["final_train_loss"]), summary["final"]["train_loss"],
                                   delta=1e-9 * abs(summary["final"]["train_loss"]))
            self.assertEqual(int(row["updates"]), summary["updates"])


if __name__ == "__main__":
    unittest.main()
