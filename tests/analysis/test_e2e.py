"""End to end: the asgdsim binary runs a 3-seed sweep, analysis/plot.py draws its report.

What it is: 2 engines (async, and sync_backup under the name "backup1", so the report must
group by engine name) x a sweep of 3 learning rates spanning a decade x 3 seeds on
synthetic softmax data, with --trace, run by the real simulator; then plot.py on the
folder. Checks that every figure exists and is a non-trivial PNG; that the summary table's
means, standard deviations and 95% confidence intervals equal a hand computation from the
runs' summary.json files (t quantile from its closed form for 2 degrees of freedom), and
that the report's cells show them to 2 significant digits of the interval; that the sweep
figure plot.py draws holds those numbers (log x, one line per engine, error bars of the
hand-computed half-width, time to target from metrics.csv by hand, a marker where no run
reached it); that the convergence figure reaches the slowest seed's end; and that the
DataFrame API returns the files' rows.
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

ANALYSIS = Path(__file__).resolve().parents[2] / "analysis"
PYTHON = ANALYSIS.parent / "python"
PLOT = ANALYSIS / "plot.py"
ASGDSIM = os.environ.get("ASGDSIM")

ENGINES = ("async", "backup1")
RATES = (0.02, 0.05, 0.2)
SEEDS = (1, 2, 3)
# t_{0.975, 2} = (2p - 1) / sqrt(2 p (1 - p)) at p = 0.975: the closed form for 2 degrees
# of freedom, so the hand computation does not use the code under test.
T975_DF2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)
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
FIGURES = ("convergence", "sweep", "staleness", "timeline", "workers")  # workers not swept


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


def by_hand(values):
    """Mean, sample std (ddof=1) and 95% CI half-width of 3 values."""
    assert len(values) == 3
    mean = sum(values) / 3
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / 2)
    return mean, std, T975_DF2 * std / math.sqrt(3)


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


NUMBER = r"[-+]?\d+(?:\.\d*)?"


def check_cell(test, text, mean, half):
    """A report cell 'm ± h': h to 2 significant digits (integer digits kept), m to the
    same decimal place, each within half a unit of that place of the hand value."""
    match = re.fullmatch(rf"({NUMBER}) \u00b1 ({NUMBER})", text)
    test.assertIsNotNone(match, f"{text!r} is not 'mean \u00b1 half-width'")
    shown_mean, shown_half = match.groups()
    decimals = len(shown_half.split(".")[1]) if "." in shown_half else 0
    test.assertEqual(decimals, len(shown_mean.split(".")[1]) if "." in shown_mean else 0, text)
    significant = shown_half.replace(".", "").lstrip("0")
    test.assertTrue(len(significant) == 2 or (decimals == 0 and half >= 10), text)
    unit = 10.0 ** -decimals
    test.assertLessEqual(abs(float(shown_mean) - mean), 0.5 * unit + 1e-12, text)
    test.assertLessEqual(abs(float(shown_half) - half), 0.5 * unit + 1e-12, text)


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
            "gradients_per_second": [s["gradients"] / s["time"] for s in runs],
        }

    def table(self):
        with open(self.folder / "summary_table.csv", newline="") as handle:
            return list(csv.DictReader(handle))

    def time_to_target(self, engine, rate, seed, target):
        """When train_loss first reaches target (<=), read from metrics.csv: interpolated
        linearly between the last evaluation above it and the first at or below it (the
        first evaluation's time when that one already is); NaN when never."""
        before = None
        with open(self.folder / run_id(engine, rate, seed) / "metrics.csv", newline="") as f:
            for row in csv.DictReader(f):
                t, y = float(row["time"]), float(row["train_loss"])
                if not math.isfinite(y):
                    continue
                if y <= target:
                    if before is None:
                        return t
                    t0, y0 = before
                    return t0 + (y0 - target) / (y0 - y) * (t - t0)
                before = (t, y)
        return math.nan

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
        for name in FIGURES:
            with self.subTest(figure=name):
                png_is_non_trivial(self, self.folder / f"figure_{name}.png")
                self.assertGreater((self.folder / f"figure_{name}.svg").stat().st_size, 5000)
        self.assertFalse((self.folder / "figure_scaling.png").exists())
        html = (self.folder / "report.html").read_text()
        self.assertEqual(html.count('src="data:image/png;base64,'), len(FIGURES))
        for expected in ("backend", "asgdsim version", f"{ASGDSIM} run "):
            self.assertIn(expected, html[html.index("<h2>Provenance</h2>"):])

    def test_summary_table_mean_std_ci_by_hand(self):
        rows = self.table()
        self.assertEqual(len(rows), len(ENGINES) * len(RATES))
        for row in rows:
            engine, rate = row["engine"], float(row["train.lr"])
            self.assertEqual(int(row["runs"]), len(SEEDS))
            self.assertEqual(int(row["completed"]), len(SEEDS))
            for stem, values in self.group_values(engine, rate).items():
                with self.subTest(group=(engine, rate), quantity=stem):
                    mean, std, half = by_hand(values)
                    scale = max(1.0, abs(mean))
                    self.assertAlmostEqual(float(row[stem + "_mean"]), mean, delta=1e-12 * scale)
                    self.assertAlmostEqual(float(row[stem + "_std"]), std, delta=1e-9 * scale)
                    self.assertAlmostEqual(float(row[stem + "_ci95"]), half, delta=1e-9 * scale)
                    self.assertEqual(int(row[stem + "_n"]), 3)

    def test_report_md_cells_show_the_interval(self):
        """The table a reader sees: mean ± the 95% CI half-width, to 2 significant digits."""
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
                   "time": "virtual time (s)", "mean_staleness": "mean staleness",
                   "gradients_per_second": "gradients per virtual s"}
        for (engine, rate), row in shown.items():
            values = self.group_values(engine, rate)
            for stem, heading in columns.items():
                mean, std, half = by_hand(values[stem])
                with self.subTest(group=(engine, rate), quantity=stem, cell=row[heading]):
                    if std == 0:
                        self.assertRegex(row[heading], r" \u00b1 0$")
                    else:
                        check_cell(self, row[heading], mean, half)
        self.assertIn("95% confidence interval", text)

    def test_sweep_figure_holds_the_hand_computed_numbers(self):
        sys.path.insert(0, str(PYTHON))
        from asgdsim.analysis import data as asgdsim_data
        from asgdsim.analysis import figures
        from asgdsim.analysis import groups
        experiment = asgdsim_data.read(self.folder)
        target = float(self.table()[0]["target_loss"])
        table = groups.summary_table(groups.group_runs(experiment), experiment.sweep_keys,
                                     target)
        fig = figures.draw_sweep(table, experiment.sweep_keys, target, "ci")
        axes = {ax.get_ylabel().split(" \u2264")[0]: ax for ax in fig.axes}
        self.assertEqual(set(axes), {"final train loss", "final test accuracy",
                                     "time to train loss"})
        markers = {"async": "o", "backup1": "s"}  # one line per engine, in config order
        for label, stem in (("final train loss", "train_loss"),
                            ("final test accuracy", "test_accuracy")):
            ax = axes[label]
            self.assertEqual(ax.get_xscale(), "log")  # 0.02 .. 0.2: a decade
            bars = [(s[0][0], abs(s[1][1] - s[0][1])) for c in ax.collections
                    for s in getattr(c, "get_segments", lambda: [])() if len(s) == 2]
            for engine, marker in markers.items():
                [line] = [l for l in ax.lines if l.get_marker() == marker]
                self.assertEqual(list(line.get_xdata()), list(RATES))
                for rate, y in zip(RATES, line.get_ydata()):
                    mean, _, half = by_hand(self.group_values(engine, rate)[stem])
                    self.assertAlmostEqual(y, mean, delta=1e-12)
                    self.assertTrue(any(x == rate and abs(length - 2 * half) < 1e-9
                                        for x, length in bars),
                                    f"{label}, {engine}, lr={rate}: no bar of half-width {half}")
        ax = axes["time to train loss"]
        for engine, marker in markers.items():
            reached, never = {}, {}
            for rate in RATES:
                times = [self.time_to_target(engine, rate, s, target) for s in SEEDS]
                never[rate] = sum(not math.isfinite(t) for t in times)
                if never[rate] == 0:  # a mean only when every seed reached it
                    reached[rate] = sum(times) / len(times)
            lines = [l for l in ax.lines if l.get_marker() == marker]
            if reached:
                self.assertEqual(list(lines[0].get_xdata()), list(reached))
                for y, mean in zip(lines[0].get_ydata(), reached.values()):
                    self.assertAlmostEqual(y, mean, delta=1e-12)
            missing = [r for r in RATES if r not in reached]
            for rate in missing:  # censored, and said so (seeds that never reached it)
                self.assertIn(f"{engine}: {never[rate]} of {len(SEEDS)} never reached at train.lr={rate:g}",
                              "\n".join(fig.asgd_notes))

    def test_convergence_reaches_the_slowest_seed(self):
        sys.path.insert(0, str(PYTHON))
        from asgdsim.analysis import data as asgdsim_data
        from asgdsim.analysis import figures
        from asgdsim.analysis import groups
        experiment = asgdsim_data.read(self.folder)
        grouped = groups.group_runs(experiment)
        fig = figures.draw_convergence(grouped, ["train_loss"], ["time"],
                                       figures.group_colours(grouped), "ci")
        ax = fig.axes[0]
        ends = [s["time"] for s in self.summaries.values()]
        drawn = max(l.get_xdata().max() for l in ax.lines if len(l.get_xdata()))
        self.assertAlmostEqual(drawn, max(ends), delta=1e-9)
        self.assertGreaterEqual(ax.get_xlim()[1], max(ends))
        ticks = sorted(float(l.get_xdata()[0]) for l in ax.lines if l.get_marker() == "|")
        self.assertEqual(len(ticks), len(self.summaries))  # every seed's end is marked
        for got, want in zip(ticks, sorted(ends)):
            self.assertAlmostEqual(got, want, delta=1e-9)

    def test_data_api_returns_the_files(self):
        sys.path.insert(0, str(PYTHON))
        from asgdsim.analysis import data as asgdsim_data
        df = asgdsim_data.load(self.folder)
        rows = 0
        for key in self.summaries:
            with open(self.folder / run_id(*key) / "metrics.csv") as handle:
                rows += sum(1 for _ in handle) - 1
        self.assertEqual(len(df), rows)
        self.assertEqual(sorted(df["train.lr"].unique()), list(RATES))
        runs = asgdsim_data.summaries(self.folder).set_index("run_id")
        for key, summary in self.summaries.items():
            self.assertEqual(runs.loc[run_id(*key)].final_train_loss,
                             summary["final"]["train_loss"])
            meta = json.loads((self.folder / run_id(*key) / "meta.json").read_text())
            self.assertEqual(runs.loc[run_id(*key)].meta_backend, meta["backend"])

    def test_docs_outputs_md_names_every_column_and_field(self):
        """docs/outputs.md documents every column and field the binary wrote here."""
        doc = (ANALYSIS.parent / "docs" / "outputs.md").read_text()
        folder = self.folder / run_id("async", RATES[0], SEEDS[0])
        names = set()
        for path in (folder / "metrics.csv", folder / "workers.csv", folder / "staleness.csv",
                     self.folder / "index.csv", self.folder / "summary_table.csv"):
            with open(path, newline="") as handle:
                names |= set(next(csv.reader(handle)))
        names -= {"train.lr"}  # a sweep key
        names = {re.sub(r"_(mean|std|ci95|n|min|max|q25|q75|values|bimodal|censored|censored_at|bound|resolution|within_resolution)$", "", n) if n.startswith(
            ("train_loss_", "test_loss_", "test_accuracy_", "time_", "updates_",
             "dropped_gradients_", "mean_staleness_", "gradients_per_second_")) else n for n in names}
        for name in ("summary.json", "meta.json"):
            names |= set(json.loads((folder / name).read_text()))
        undocumented = sorted(n for n in names if f"`{n}`" not in doc)
        self.assertEqual(undocumented, [], "not in docs/outputs.md")

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
