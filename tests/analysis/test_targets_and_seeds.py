"""What the figures and tables do with a target and with groups of seeds (issue #32): the target drives them, and the statistics are honest.

What it is: synthetic runs (no simulator) checked through the data behind the figures
(the tidy frame draw_sweep returns as fig.asgd_frame), the summary table and plot.py's
files: a --target-accuracy drives the sweep figure's time axis and title; faceting by a
sweep key gives one panel per value; a stalled run (asgdsim's status) is counted apart,
not averaged; seeds that split (some at chance, some trained) are reported as bimodal;
under 3 seeds the seeds are shown, not an interval; bands stay in the metric's range;
every engine keeps its colour; EASGD's staleness is not on an "updates" axis.
What it is not: a test of the looks (a person does that).
"""

import csv
import json
import math
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ANALYSIS = HERE.parents[1] / "analysis"
PYTHON = ANALYSIS.parent / "python"
sys.path.insert(0, str(PYTHON))

from asgdsim.analysis import figures  # noqa: E402
from asgdsim.analysis import groups  # noqa: E402
from asgdsim.analysis import report  # noqa: E402
from asgdsim.analysis import rundata  # noqa: E402
from asgdsim.analysis import stats  # noqa: E402

TIMES = np.round(np.arange(0.0, 10.01, 0.5), 10)


def accuracy_curve(reach, final=0.9):
    """Accuracy 0.1 until `reach` s, then final (reach inf: never trains)."""
    return np.where(TIMES < reach, 0.1, final)


def make_run(engine, seed, sweep, accuracy, status="completed", unit="updates"):
    accuracy = np.asarray(accuracy, dtype=float)
    loss = 2.3 * (1.0 - accuracy) + 0.1
    metrics = pd.DataFrame({"time": TIMES, "updates": np.arange(len(TIMES)) * 10.0,
                            "epoch": TIMES / 2, "train_loss": loss, "test_loss": loss * 1.1,
                            "test_accuracy": accuracy})
    summary = {"status": status, "engine": engine, "seed": seed,
               "final": {"train_loss": float(loss[-1]), "test_loss": float(loss[-1]) * 1.1,
                         "test_accuracy": float(accuracy[-1])},
               "time": float(TIMES[-1]), "updates": 10 * (len(TIMES) - 1),
               "staleness": {"mean": 1.0 + seed, "max": 3, "unit": unit}}
    rid = "-".join([engine] + [f"{k}={v}" for k, v in sweep.items()] + [f"seed{seed}"])
    return rundata.Run(run_id=rid, folder=Path("/nonexistent") / rid, engine=engine,
                       sweep=dict(sweep), seed=seed, status=status, summary=summary,
                       metrics=metrics,
                       staleness_hist=pd.DataFrame({"staleness": [0.0, 1.0, 2.0],
                                                    "count": [5.0, 3.0, 1.0]}))


def make_groups(runs, sweep_keys, engines):
    experiment = rundata.Experiment(folder=Path("/nonexistent"), name="t", config=None,
                                    sweep_keys=list(sweep_keys), engine_order=list(engines),
                                    runs=runs)
    return groups.group_runs(experiment)


def reach_time(engine, workers, seed):
    return (8.0 if engine == "sync" else 4.0) / workers + 0.5 * seed


class TargetDrivesTheFiguresTest(unittest.TestCase):
    """async and sync x 1, 2, 4 workers x 3 seeds; accuracy jumps to 0.9 at a known time."""
    WORKERS = (1, 2, 4)
    TARGET = groups.Target("test_accuracy", 0.8)

    def setUp(self):
        runs = [make_run(e, s, {"cluster.workers": w}, accuracy_curve(reach_time(e, w, s)))
                for e in ("async", "sync") for w in self.WORKERS for s in (1, 2, 3)]
        self.groups = make_groups(runs, ["cluster.workers"], ["async", "sync"])
        self.table = groups.summary_table(self.groups, ["cluster.workers"],
                                          targets=[self.TARGET])

    def first_time_at_or_above(self, engine, workers, seed):
        """The crossing of 0.8 on the step from 0.1 to 0.9, interpolated between the
        evaluation before (0.5 s earlier) and the first at or after reach."""
        reach = reach_time(engine, workers, seed)
        first = float(TIMES[np.argmax(TIMES >= reach)])
        return first - 0.5 + 0.5 * (0.8 - 0.1) / (0.9 - 0.1)

    def test_sweep_y_values_are_the_time_to_the_requested_target(self):
        fig = figures.draw_sweep(self.table, ["cluster.workers"], [self.TARGET], "ci95")
        frame = fig.asgd_frame
        label = "time to test accuracy \u2265 0.8 (s)"
        self.assertIn(label, set(frame.quantity))
        self.assertNotIn("time to train loss", " ".join(set(frame.quantity)))
        self.assertIn("test accuracy \u2265 0.8", fig._suptitle.get_text())
        times = frame[frame.quantity == label]
        self.assertEqual(len(times), 6)
        for row in times.to_dict("records"):
            w = int(float(row["cluster.workers"]))
            by_hand = [self.first_time_at_or_above(row["engine"], w, s) for s in (1, 2, 3)]
            self.assertAlmostEqual(row["mean"], np.mean(by_hand), delta=1e-12)
            self.assertEqual(sorted(row["seeds"]), sorted(by_hand))
            self.assertGreaterEqual(row["low"], 0.0)  # a time is never negative
        ylabels = {ax.get_ylabel() for ax in fig.axes}
        self.assertIn(label, ylabels)

    def test_scaling_follows_the_target_too(self):
        fig = figures.draw_scaling(self.table, ["cluster.workers"], [self.TARGET],
                                   figures.group_colours(self.groups), "ci95")
        self.assertIn("test accuracy \u2265 0.8", fig.axes[0].get_title())

    def test_faceting_by_a_sweep_key_gives_one_panel_per_value(self):
        fig = figures.draw_sweep(self.table, ["cluster.workers"], [self.TARGET], "ci95",
                                 {"col": "cluster.workers"})
        grid = fig.asgd_grid
        self.assertEqual(grid.axes.shape[1], len(self.WORKERS))
        titles = [ax.get_title() for ax in grid.axes[0]]
        self.assertEqual(titles, [f"cluster.workers = {w}" for w in self.WORKERS])
        # x is then the engine: each panel holds both engines' time to target
        frame = fig.asgd_frame
        self.assertEqual(sorted(set(frame["cluster.workers"])), ["1", "2", "4"])

    def test_convergence_panels_of_one_metric_share_their_y_axis(self):
        """--col: a row per metric, its panels on one y axis (one range from every panel's
        runs), and no axis shared between the rows (accuracy and loss)."""
        fig = figures.draw_convergence(self.groups, ["test_accuracy", "train_loss"], ["time"], {},
                                       "ci95", {"col": "cluster.workers"})
        axes = fig.asgd_grid.axes
        self.assertEqual(axes.shape, (2, len(self.WORKERS)))
        for row in axes:
            self.assertTrue(all(row[0].get_shared_y_axes().joined(row[0], ax) for ax in row[1:]))
            self.assertEqual({ax.get_ylim() for ax in row}, {row[0].get_ylim()})
        self.assertFalse(axes[0][0].get_shared_y_axes().joined(axes[0][0], axes[1][0]))
        self.assertEqual(axes[1][0].get_yscale(), "log")  # losses all positive
        # both facets keys: one metric drawn, and the figure says so
        fig = figures.draw_convergence(self.groups, ["test_accuracy", "train_loss"], ["time"], {},
                                       "ci95", {"col": "cluster.workers", "row": "engine"})
        self.assertEqual(set(fig.asgd_frame["metric"]), {"test_accuracy"})
        self.assertIn("only test_accuracy is drawn", " ".join(t.get_text() for t in fig.texts))

    def test_convergence_faceted_by_a_sweep_key(self):
        fig = figures.draw_convergence(self.groups, ["test_accuracy"], ["time"], {}, "ci95",
                                       {"col": "cluster.workers"})
        grid = fig.asgd_grid
        self.assertEqual(grid.axes.shape, (1, len(self.WORKERS)))
        self.assertEqual([ax.get_title() for ax in grid.axes[0]],
                         [f"cluster.workers = {w}" for w in self.WORKERS])
        seeds = fig.asgd_frame  # every seed's points, all 18 runs
        self.assertEqual(seeds.groupby(["group", "seed"]).ngroups, 18)
        means = fig.asgd_means
        one = means[(means.engine == "sync") & (means["cluster.workers"] == "2")]
        at = one[one.x == 5.0].iloc[0]  # seeds reach at 4.5, 5, 5.5 s: 0.9, 0.9, 0.1
        self.assertAlmostEqual(at["mean"], (0.9 + 0.9 + 0.1) / 3, delta=1e-12)
        self.assertLessEqual(at["high"], 1.0)  # clipped to accuracy's range

    def test_named_variants_share_their_types_hue_in_shades(self):
        """backup1 and backup2 are sync_backup engines with names: they, and the plain
        sync_backup, share sync_backup's hue in three shades (group colours, the sweep's
        lines and engine_palette alike); async keeps its own colour."""
        import colorsys

        def hue(colour):
            return colorsys.rgb_to_hsv(*[int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])[0]

        labels = ("async", "sync_backup", "backup1", "backup2")
        runs = []
        for engine in labels:
            run = make_run(engine, 1, {"cluster.workers": 2}, accuracy_curve(2.0))
            run.engine_type = "async" if engine == "async" else "sync_backup"
            runs.append(run)
        grouped = make_groups(runs, ["cluster.workers"], labels)
        colours = figures.group_colours(grouped)
        by_label = {g.engine: colours[g.key] for g in grouped}
        table = groups.summary_table(grouped, ["cluster.workers"], targets=[self.TARGET])
        styles = figures.series_styles(figures.table_series(table, ["cluster.workers"], "cluster.workers"),
                                       table.attrs["engine_types"])
        palette = figures.engine_palette(labels, {"backup1": "sync_backup", "backup2": "sync_backup"})
        for found in (by_label, {skey[0]: style[0] for skey, style in styles.items()}, palette):
            self.assertEqual(found["async"], figures.ENGINE_COLOURS["async"])
            shades = [found[label] for label in labels[1:]]
            self.assertEqual(len(set(shades)), 3, found)  # a shade each
            for colour in shades:
                self.assertAlmostEqual(hue(colour), hue(figures.ENGINE_COLOURS["sync_backup"]), delta=0.01)
            self.assertEqual(found["sync_backup"], figures.shade(figures.ENGINE_COLOURS["sync_backup"], 0, 3))

    def test_engine_colours_are_fixed(self):
        colours = figures.group_colours(self.groups)
        self.assertEqual(figures.engine_colour("async"), figures.ENGINE_COLOURS["async"])
        self.assertEqual(figures.engine_colour("backup1"), figures.engine_colour("backup1"))
        # one engine alone gets exactly its colour, whatever the other groups are
        alone = make_groups([make_run("sync", 1, {}, accuracy_curve(1.0))], [], ["sync"])
        self.assertEqual(list(figures.group_colours(alone).values()),
                         [figures.ENGINE_COLOURS["sync"]])
        self.assertEqual(len(set(colours.values())), len(colours))  # shades tell points apart


class HonestStatisticsTest(unittest.TestCase):
    def test_a_stalled_run_is_counted_apart_not_averaged(self):
        runs = [make_run("async", s, {}, accuracy_curve(2.0, final=0.8 + 0.01 * s))
                for s in (1, 2, 3)]
        runs.append(make_run("async", 4, {}, accuracy_curve(math.inf, final=0.1),
                             status="stalled"))
        table = groups.summary_table(make_groups(runs, [], ["async"]), [],
                                     targets=[groups.Target("test_accuracy", 0.5)])
        row = table.iloc[0]
        self.assertEqual((row.runs, row.completed, row.stalled), (4, 3, 1))
        self.assertAlmostEqual(row.test_accuracy_mean, 0.82, delta=1e-12)
        self.assertEqual(row.test_accuracy_n, 3)
        self.assertEqual(row.time_to_target_accuracy_n, 3)
        self.assertIn("1 stalled", report.status_text(row.to_dict()))

    def test_a_bimodal_group_is_reported_as_such(self):
        finals = (0.10, 0.86, 0.87, 0.10, 0.85)  # two seeds at chance, three trained
        runs = [make_run("async", s + 1, {}, accuracy_curve(1.0, final=f))
                for s, f in enumerate(finals)]
        table = groups.summary_table(make_groups(runs, [], ["async"]), [], 5.0)
        row = table.iloc[0].to_dict()
        self.assertTrue(row["test_accuracy_bimodal"])
        cell = report.format_cell(row, "test_accuracy", "ci95")
        self.assertTrue(cell.startswith("bimodal: "), cell)
        self.assertIn("0.1, 0.1 vs 0.85, 0.86, 0.87", cell)
        self.assertNotIn("\u00b1", cell)
        # and no band in the figure data
        self.assertTrue(math.isnan(groups.band_interval(row, "test_accuracy", "ci95")[0]))

    def test_one_cluster_is_not_bimodal(self):
        self.assertIsNone(stats.split_seeds([0.85, 0.86, 0.87, 0.88]))
        self.assertIsNone(stats.split_seeds([1.0, 1.0, 1.0000001]))
        self.assertIsNone(stats.split_seeds([3.58, 3.59, 4.06]))  # a usual spread of times
        self.assertIsNotNone(stats.split_seeds([0.1, 0.85, 0.86]))

    def test_under_three_seeds_the_seeds_are_shown(self):
        runs = [make_run("async", s, {}, accuracy_curve(1.0, final=f))
                for s, f in ((1, 0.81), (2, 0.84))]
        row = groups.summary_table(make_groups(runs, [], ["async"]), [], 5.0).iloc[0].to_dict()
        self.assertEqual(report.format_cell(row, "test_accuracy", "ci95"), "0.81, 0.84 (seeds)")
        self.assertTrue(math.isnan(groups.band_interval(row, "test_accuracy", "ci95")[0]))

    def test_bands_are_clipped_to_the_metric_range(self):
        low, high = stats.band_bounds([0.97, 0.99, 1.0], "ci95", "test_accuracy")
        self.assertLessEqual(high, 1.0)
        low, high = stats.band_bounds([0.01, 0.5, 0.02], "ci95", "train_loss")
        self.assertGreaterEqual(low, 0.0)
        low, high = stats.band_bounds([[1, 2], [2, 4], [9, 8]], "minmax")
        np.testing.assert_array_equal(low, [1, 2])
        np.testing.assert_array_equal(high, [9, 8])
        low, high = stats.band_bounds([1, 2, 3, 4, 5], "iqr")
        self.assertEqual((low, high), (2.0, 4.0))

    def test_easgd_staleness_is_not_on_an_updates_axis(self):
        runs = [make_run("async", 1, {}, accuracy_curve(1.0)),
                make_run("easgd", 1, {}, accuracy_curve(1.0), unit="exchanges")]
        grouped = make_groups(runs, [], ["async", "easgd"])
        fig = figures.draw_staleness(grouped, [], figures.group_colours(grouped))
        labels = [ax.get_xlabel() for ax in fig.axes if ax.get_visible()]
        self.assertIn("staleness (updates between read and apply)", labels)
        self.assertIn("staleness (exchanges of the center since the worker's last)", labels)


def write_folder(root, runs):
    """Run folders as asgdsim writes them, from make_run's runs, and index.csv."""
    root.mkdir(parents=True)
    rows = []
    for run in runs:
        folder = root / run.run_id
        folder.mkdir()
        run.metrics.to_csv(folder / "metrics.csv", index=False)
        (folder / "config.json").write_text(json.dumps(
            {"engine": {"type": run.engine},
             "run": {"run_id": run.run_id, "sweep": run.sweep, "seed": run.seed}}))
        (folder / "summary.json").write_text(json.dumps(run.summary))
        rows.append([run.run_id, run.engine] + list(run.sweep.values()) +
                    [run.seed, run.status])
    keys = list(runs[0].sweep)
    with open(root / "index.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run_id", "engine"] + keys + ["seed", "status"])
        writer.writerows(rows)


class PlotCommandTest(unittest.TestCase):
    """plot.py end to end on a folder with a stalled run: --target-accuracy, --col, --where."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = Path(cls.tmp.name) / "study"
        runs = [make_run(e, s, {"train.lr": lr}, accuracy_curve(reach_time(e, 1, s) / lr / 10))
                for e in ("async", "sync") for lr in (0.1, 0.2) for s in (1, 2, 3)]
        runs.append(make_run("async", 4, {"train.lr": 0.1}, accuracy_curve(math.inf),
                             status="stalled"))
        write_folder(cls.root, runs)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def plot(self, *args):
        return subprocess.run(["/usr/bin/python3", str(ANALYSIS / "plot.py"), str(self.root),
                               "--format", "png", "--x", "time"] + [str(a) for a in args],
                              capture_output=True, text=True, timeout=120)

    def test_target_accuracy_faceted_and_filtered(self):
        result = self.plot("--target-accuracy", "0.8", "--col", "train.lr", "--band", "minmax")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(self.root / "summary_table.csv", newline="") as handle:
            rows = {r["group"]: r for r in csv.DictReader(handle)}
        row = rows["async, train.lr=0.1"]
        self.assertEqual((row["runs"], row["completed"], row["stalled"]), ("4", "3", "1"))
        self.assertIn("time_to_target_accuracy_mean", row)
        self.assertNotIn("time_to_target_loss_mean", row)  # the question asked, only
        text = (self.root / "report.md").read_text()
        self.assertIn("time to test accuracy \u2265 0.8 (s)", text)
        self.assertIn("runs as of (UTC)", text)
        self.assertTrue((self.root / "figure_sweep.png").is_file())
        check = self.plot("--check")
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertIn("up to date", check.stdout)

    def test_where_keeps_the_matching_runs(self):
        out = Path(self.tmp.name) / "only_sync"
        result = self.plot("--where", "engine=sync", "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out / "summary_table.csv", newline="") as handle:
            self.assertEqual({r["engine"] for r in csv.DictReader(handle)}, {"sync"})
        lr = self.plot("--where", "train.lr=0.2", "--where", "engine=async", "--out", out)
        self.assertEqual(lr.returncode, 0, lr.stderr)
        with open(out / "summary_table.csv", newline="") as handle:
            self.assertEqual([r["group"] for r in csv.DictReader(handle)],
                             ["async, train.lr=0.2"])
        bad = self.plot("--where", "nothing=1", "--out", out)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("not engine or a sweep key", bad.stderr)


if __name__ == "__main__":
    unittest.main()


class CensoredTimeToTargetTest(unittest.TestCase):
    """Issue #47: seeds that never reach the target are censored, not dropped; the crossing
    is interpolated between evaluations; evaluation quantisation is not 'bimodal'."""

    def test_the_crossing_is_interpolated_between_evaluations(self):
        x, y = np.array([0.0, 1.0, 2.0, 3.0]), np.array([0.1, 0.5, 0.7, 0.9])
        c = groups.crossing_of(x, y, "test_accuracy", 0.8)
        self.assertAlmostEqual(c.time, 2.5, delta=1e-12)
        self.assertEqual((c.resolution, c.reached), (1.0, True))
        self.assertTrue(math.isnan(c.censored_at))
        first = groups.crossing_of(x, y, "test_accuracy", 0.05)  # reached at the first evaluation
        self.assertEqual((first.time, first.resolution), (0.0, 0.0))
        never = groups.crossing_of(x, y, "test_accuracy", 0.95)
        self.assertFalse(never.reached)
        self.assertEqual(never.censored_at, 3.0)  # later than its last evaluation
        loss = groups.crossing_of(x, 1 - y, "train_loss", 0.4)  # losses cross downwards
        self.assertAlmostEqual(loss.time, 1.5, delta=1e-12)

    def test_k_of_n_reached_is_a_bound_never_the_mean_of_the_k(self):
        runs = [make_run("async", 1, {}, accuracy_curve(1.0)),  # reached at 1 s
                make_run("async", 2, {}, accuracy_curve(math.inf, final=0.5)),
                make_run("async", 3, {}, accuracy_curve(math.inf, final=0.5))]
        table = groups.summary_table(make_groups(runs, [], ["async"]), [],
                                     targets=[groups.Target("test_accuracy", 0.8)])
        row = table.iloc[0].to_dict()
        crossing = 0.5 + 0.5 * 0.7 / 0.8  # between the evaluations at 0.5 and 1 s
        self.assertEqual((row["target_accuracy_reached"], row["time_to_target_accuracy_censored"]), (1, 2))
        self.assertEqual(row["time_to_target_accuracy_censored_at"], "10.0;10.0")
        bound = (crossing + TIMES[-1] * 2) / 3
        self.assertAlmostEqual(row["time_to_target_accuracy_bound"], bound, delta=1e-12)
        cell = report.target_text(row, "accuracy", "ci95")
        self.assertEqual(cell, f"\u2265 {report.format_number(bound, 3)} (2 of 3 never reached; "
                               f"{report.format_number(crossing, 3)} the one that did)")
        # the sweep frame draws no mean from the one seed
        frame = figures.sweep_frame(table.assign(**{"x": ["1"]}), [], [groups.Target("test_accuracy", 0.8)])
        times = frame[frame.stem == "time_to_target_accuracy"].iloc[0]
        self.assertTrue(math.isnan(times["mean"]))
        self.assertAlmostEqual(times["bound"], bound, delta=1e-12)

    def test_seeds_within_two_evaluation_intervals_are_not_bimodal(self):
        # evaluations every 0.5 s; the seeds cross at 2.44, 2.44 and 3.44 s: one apart by
        # two intervals, which the old rule called bimodal (a gap over 10x the rest)
        runs = [make_run("async", s, {}, accuracy_curve(r)) for s, r in ((1, 2.5), (2, 2.5), (3, 3.5))]
        row = groups.summary_table(make_groups(runs, [], ["async"]), [],
                                   targets=[groups.Target("test_accuracy", 0.8)]).iloc[0].to_dict()
        times = [float(v) for v in row["time_to_target_accuracy_values"].split(";")]
        self.assertIsNotNone(stats.split_seeds(times))  # what the values alone would say
        self.assertEqual(row["time_to_target_accuracy_resolution"], 0.5)
        self.assertTrue(row["time_to_target_accuracy_within_resolution"])
        self.assertFalse(row["time_to_target_accuracy_bimodal"])
        cell = report.target_text(row, "accuracy", "ci95")
        self.assertNotIn("bimodal", cell)
        self.assertTrue(cell.endswith("(3/3 reached); seeds within 2 evaluation intervals"), cell)
