"""Tests of asgdsim.analysis.figures (python/asgdsim/analysis/figures.py) read from the figures' own data, not by eye.

What it is: builds Run objects in memory (no files, no subprocess), draws the
convergence, sweep, scaling and staleness figures, and checks what the artists hold:
where lines end, where the mean stops and what the figure says about it, band and
error-bar half-widths against a hand computation with the t quantile, axis scales,
markers for groups that never reach the target, and that equal groups stay visible.
What it is not: no check of looks (a person looks at the PNGs) and no file reading
(test_plot.py runs plot.py on folders).
"""

import json
import math
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from asgdsim.analysis import figures  # noqa: E402
from asgdsim.analysis import groups  # noqa: E402
from asgdsim.analysis import report  # noqa: E402
from asgdsim.analysis import rundata  # noqa: E402
from asgdsim.analysis import stats  # noqa: E402

T975 = {2: 4.302652729749464, 3: 3.182446305284263}  # t_{0.975, df}


def make_run(engine, seed, sweep, times, train, status="completed"):
    times, train = np.asarray(times, dtype=float), np.asarray(train, dtype=float)
    metrics = pd.DataFrame({"time": times, "updates": np.arange(len(times)) * 10.0,
                            "epoch": times / 2, "train_loss": train, "test_loss": train * 1.1})
    summary = {"status": status, "engine": engine, "seed": seed,
               "final": {"train_loss": float(train[-1]), "test_loss": float(train[-1]) * 1.1},
               "time": float(times[-1]), "updates": 10 * (len(times) - 1),
               "staleness": {"mean": 1.0, "max": 3}}
    rid = "-".join([engine] + [f"{k}={v}" for k, v in sweep.items()] + [f"seed{seed}"])
    return rundata.Run(run_id=rid, folder=Path("/nonexistent") / rid, engine=engine,
                       sweep=dict(sweep), seed=seed, status=status, summary=summary,
                       metrics=metrics)


def crossed(reach, before, after, target, step):
    """Where a curve stepping from `before` (at reach - step) to `after` (at reach) crosses
    `target`, interpolated linearly: the rule of groups.crossing, written out."""
    return reach - step + step * (target - before) / (after - before)


def make_groups(runs, sweep_keys, engines):
    experiment = rundata.Experiment(folder=Path("/nonexistent"), name="t", config=None,
                                    sweep_keys=list(sweep_keys), engine_order=list(engines),
                                    runs=runs)
    return groups.group_runs(experiment)


def lines_with(ax, **style):
    """ax's Line2D objects whose getters return the given values (linewidth=..., marker=...)."""
    return [line for line in ax.lines
            if all(getattr(line, "get_" + k)() == v for k, v in style.items())]


def notes_of(fig):
    """The notes under the figure (unwrapped); checks they are drawn, too."""
    drawn = " ".join(" ".join(t.get_text().split()) for t in fig.texts)
    for note in fig.asgd_notes[:8]:
        assert " ".join(note.split()) in drawn, f"note not drawn: {note}"
    return "\n".join(fig.asgd_notes)


def vline_segments(ax):
    """(x, low, high) of every vertical segment in ax's line collections (error bars)."""
    out = []
    for collection in ax.collections:
        for segment in getattr(collection, "get_segments", lambda: [])():
            if len(segment) == 2 and segment[0][0] == segment[1][0]:
                out.append((segment[0][0], min(segment[0][1], segment[1][1]),
                            max(segment[0][1], segment[1][1])))
    return out


class ConvergenceMeanTest(unittest.TestCase):
    """The issue's straggler case: sync's seeds end at 7.43, 7.62 and 13.33 s."""
    ENDS = (7.43, 7.62, 13.33)
    RATES = (0.30, 0.35, 0.45)

    def setUp(self):
        self.runs = []
        for seed, (end, rate) in enumerate(zip(self.ENDS, self.RATES), start=1):
            times = np.append(np.arange(0.0, end, 0.25), end)
            self.runs.append(make_run("sync", seed, {}, times, 2 * np.exp(-rate * times) + 0.05))
        self.groups = make_groups(self.runs, [], ["sync"])
        self.colours = figures.group_colours(self.groups)

    def draw(self, band):
        fig = figures.draw_convergence(self.groups, ["train_loss"], ["time"], self.colours, band)
        return fig, fig.axes[0]

    def test_every_seed_is_drawn_to_its_end_and_marked(self):
        fig, ax = self.draw("ci")
        seeds = lines_with(ax, linewidth=figures.SEED_LINE_WIDTH)
        self.assertEqual(len(seeds), 3)
        self.assertAlmostEqual(max(line.get_xdata().max() for line in seeds), max(self.ENDS))
        self.assertGreaterEqual(ax.get_xlim()[1], max(self.ENDS))  # the axis reaches the slowest
        ticks = sorted(float(line.get_xdata()[0]) for line in lines_with(ax, marker="|"))
        np.testing.assert_allclose(ticks, self.ENDS)

    def test_mean_stops_at_the_fastest_seed_and_says_so(self):
        fig, ax = self.draw("ci")
        [mean_line] = lines_with(ax, linewidth=figures.MEAN_LINE_WIDTH)
        x, y = mean_line.get_xdata(), mean_line.get_ydata()
        self.assertEqual((x[0], x[-1]), (0.0, min(self.ENDS)))
        at_two = [2 * math.exp(-r * 2.0) + 0.05 for r in self.RATES]
        self.assertAlmostEqual(y[np.flatnonzero(x == 2.0)[0]], np.mean(at_two), delta=1e-12)
        text = notes_of(fig)
        self.assertIn("sync", text)
        self.assertIn("7.43 of 13.33 s", text)

    def test_band_is_the_t_interval_by_hand(self):
        at_two = [2 * math.exp(-r * 2.0) + 0.05 for r in self.RATES]
        mean = sum(at_two) / 3
        std = math.sqrt(sum((v - mean) ** 2 for v in at_two) / 2)
        for band, half in (("ci", T975[2] * std / math.sqrt(3)), ("std", std)):
            with self.subTest(band=band):
                fig, ax = self.draw(band)
                [poly] = ax.collections
                vertices = poly.get_paths()[0].vertices
                edge = vertices[np.isclose(vertices[:, 0], 2.0)][:, 1]
                self.assertAlmostEqual(edge.max(), mean + half, delta=1e-12)
                self.assertAlmostEqual(edge.min(), max(mean - half, ax.get_ylim()[0]),
                                       delta=1e-12)
        fig, ax = self.draw("none")
        self.assertEqual(len(ax.collections), 0)
        self.assertNotIn("band", fig._suptitle.get_text())

    def test_same_end_has_no_cut_note(self):
        runs = [make_run("async", s, {}, np.arange(0, 5.01, 0.5), np.exp(-s * np.arange(0, 5.01, 0.5)))
                for s in (1, 2)]
        grouped = make_groups(runs, [], ["async"])
        fig = figures.draw_convergence(grouped, ["train_loss"], ["time"],
                                       figures.group_colours(grouped), "ci")
        self.assertNotIn("earliest end", notes_of(fig))


def sweep_runs():
    """async and sync over train.lr 0.01, 0.1, 1 x 3 seeds. Both reach loss 0.1 at
    t = 1/lr + seed/10 (0.1 s grid), except async at lr=1, which never trains; sync's
    curves are async's (so their final losses are identical where both train)."""
    runs, times = [], np.round(np.arange(0.0, 120.01, 0.1), 10)
    for engine in ("async", "sync"):
        for lr in (0.01, 0.1, 1.0):
            for seed in (1, 2, 3):
                reach = round(1 / lr + seed / 10, 10) if lr < 1 or engine == "sync" else math.inf
                final = 0.1 - 0.01 * seed * lr
                train = np.where(times < reach, 1.0, final)
                runs.append(make_run(engine, seed, {"train.lr": lr}, times, train))
    return runs


class SweepFigureTest(unittest.TestCase):
    TARGET = 0.1

    def setUp(self):
        self.groups = make_groups(sweep_runs(), ["train.lr"], ["async", "sync"])
        self.table = groups.summary_table(self.groups, ["train.lr"], self.TARGET)
        self.fig = figures.draw_sweep(self.table, ["train.lr"], self.TARGET, "ci")
        self.axes = {ax.get_ylabel(): ax for ax in self.fig.axes}

    def test_panels_and_log_x(self):
        self.assertEqual(set(self.axes), {"final train loss", "final test loss",
                                          "time to train loss \u2264 0.1 (s)"})
        for ax in self.axes.values():
            self.assertEqual(ax.get_xscale(), "log")  # 0.01 .. 1 spans two decades
            self.assertEqual([t.get_text() for t in ax.get_xticklabels()], ["0.01", "0.1", "1"])

    def test_means_and_ci_by_hand(self):
        ax = self.axes["final train loss"]
        [line] = lines_with(ax, marker="s")  # sync: the second line
        np.testing.assert_allclose(line.get_xdata(), [0.01, 0.1, 1.0])
        for lr, y in zip((0.01, 0.1, 1.0), line.get_ydata()):
            finals = [0.1 - 0.01 * seed * lr for seed in (1, 2, 3)]
            mean = sum(finals) / 3
            self.assertAlmostEqual(y, mean, delta=1e-15)
            std = math.sqrt(sum((v - mean) ** 2 for v in finals) / 2)
            half = T975[2] * std / math.sqrt(3)
            bars = [(lo, hi) for x, lo, hi in vline_segments(ax) if x == lr]
            self.assertTrue(any(abs(hi - lo - 2 * half) < 1e-12 for lo, hi in bars),
                            f"lr={lr}: no error bar of half-width {half}")

    def test_identical_groups_both_show(self):
        ax = self.axes["final train loss"]
        [async_line], [sync_line] = lines_with(ax, marker="o"), lines_with(ax, marker="s")
        # equal where both trained (lr 0.01 and 0.1); drawn side by side, not on top
        np.testing.assert_array_equal(async_line.get_ydata()[:2], sync_line.get_ydata()[:2])
        point = (0.01, async_line.get_ydata()[0])
        shift = (sync_line.get_transform().transform(point)[0]
                 - async_line.get_transform().transform(point)[0])
        self.assertAlmostEqual(shift, figures.DODGE_POINTS * self.fig.dpi / 72.0, delta=1e-6)
        self.assertGreaterEqual(shift, 3 * self.fig.dpi / 72.0)  # at least 3 points apart
        # identical in the time panel? no: async never reaches at lr=1; test loss is x1.1
        time_ax = self.axes["time to train loss \u2264 0.1 (s)"]
        [async_time] = lines_with(time_ax, marker="o")
        np.testing.assert_allclose(async_time.get_xdata(), [0.01, 0.1])  # lr=1: not reached

    def test_not_reached_is_marked_and_named(self):
        time_ax = self.axes["time to train loss \u2264 0.1 (s)"]
        [marker] = lines_with(time_ax, marker="^")
        np.testing.assert_allclose(marker.get_xdata(), [1.0])
        self.assertEqual(marker.get_markerfacecolor(), "white")
        np.testing.assert_allclose(marker.get_ydata(), [120.0])  # at least the runs' end
        self.assertIn("async: 3 of 3 never reached at train.lr=1", notes_of(self.fig))
        self.assertIn("async: 3 of 3 never reached at train.lr=1", self.fig._suptitle.get_text())
        [sync_time] = lines_with(time_ax, marker="s")
        np.testing.assert_allclose(
            sync_time.get_ydata(),
            [np.mean([crossed(round(1 / lr + s / 10, 10), 1.0, 0.1 - 0.01 * s * lr, 0.1, 0.1)
                      for s in (1, 2, 3)]) for lr in (0.01, 0.1, 1.0)], rtol=1e-12)

    def test_no_figure_without_a_swept_key(self):
        runs = [make_run("async", s, {}, [0, 1], [1, 0.5]) for s in (1, 2)]
        table = groups.summary_table(make_groups(runs, [], ["async"]), [], 0.6)
        self.assertIsNone(figures.draw_sweep(table, [], 0.6))

    def test_categorical_and_zero_values(self):
        self.assertEqual(figures.sweep_axis_scale([0, 4, 16, 64]), "symlog")
        self.assertEqual(figures.sweep_axis_scale([4, 16, 64]), "log")
        self.assertEqual(figures.sweep_axis_scale([1, 2, 4]), "linear")
        runs = [make_run("async", s, {"staleness.mode": mode}, [0, 1], [1, 0.1 * s])
                for mode in ("fixed", "uniform") for s in (1, 2)]
        table = groups.summary_table(make_groups(runs, ["staleness.mode"], ["async"]),
                                     ["staleness.mode"], 0.5)
        fig = figures.draw_sweep(table, ["staleness.mode"], 0.5, "ci")
        ax = fig.axes[0]
        self.assertEqual([t.get_text() for t in ax.get_xticklabels()], ["fixed", "uniform"])


class ScalingFigureTest(unittest.TestCase):
    """Time to target 8/w x (1 + seed/20) for w = 1, 2, 4; never reached with 8 workers."""
    WORKERS = (1, 2, 4, 8)

    @staticmethod
    def reach(w, seed):
        return round(8 / w * (1 + seed / 20), 1)

    @classmethod
    def time(cls, w, seed):  # the crossing between the grid points around reach
        return crossed(cls.reach(w, seed), 1.0, 0.05, 0.5, 0.1)

    def setUp(self):
        times = np.round(np.arange(0.0, 12.01, 0.1), 10)
        runs = []
        for w in self.WORKERS:
            for seed in (1, 2, 3):
                reach = self.reach(w, seed) if w < 8 else math.inf
                runs.append(make_run("async", seed, {"cluster.workers": w}, times,
                                     np.where(times < reach, 1.0, 0.05)))
        grouped = make_groups(runs, ["cluster.workers"], ["async"])
        self.table = groups.summary_table(grouped, ["cluster.workers"], 0.5)
        self.fig = figures.draw_scaling(self.table, ["cluster.workers"], 0.5,
                                        figures.group_colours(grouped), "ci")
        self.time_ax, self.speed_ax = self.fig.axes[:2]

    def test_log_log_so_ideal_is_straight(self):
        for ax in (self.time_ax, self.speed_ax):
            self.assertEqual((ax.get_xscale(), ax.get_yscale()), ("log", "log"))
        [ideal] = lines_with(self.speed_ax, linestyle="--")
        np.testing.assert_allclose(ideal.get_xdata(), [1, 2, 4])
        np.testing.assert_allclose(ideal.get_ydata(), [1, 2, 4])

    def test_speedup_and_error_bars_by_hand(self):
        means, halves = [], []
        for w in (1, 2, 4):
            values = [self.time(w, s) for s in (1, 2, 3)]
            mean = sum(values) / 3
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / 2)
            means.append(mean)
            halves.append(T975[2] * std / math.sqrt(3))
        [line] = lines_with(self.speed_ax, marker="o")
        np.testing.assert_allclose(line.get_ydata(), [means[0] / m for m in means], rtol=1e-12)
        bars = {x: hi - lo for x, lo, hi in vline_segments(self.speed_ax)}
        self.assertNotIn(1.0, bars)  # speedup 1 by definition at the baseline
        for i, w in enumerate((2, 4), start=1):
            speedup = means[0] / means[i]
            half = speedup * math.hypot(halves[0] / means[0], halves[i] / means[i])
            self.assertAlmostEqual(bars[w], 2 * half, delta=1e-9)
        time_bars = {x: hi - lo for x, lo, hi in vline_segments(self.time_ax)}
        for i, w in enumerate((1, 2, 4)):
            self.assertAlmostEqual(time_bars[w], 2 * halves[i], delta=1e-9)

    def test_never_reached_is_shown(self):
        [top] = lines_with(self.time_ax, marker="^")
        [bottom] = lines_with(self.speed_ax, marker="v")
        np.testing.assert_allclose(top.get_xdata(), [8])
        np.testing.assert_allclose(top.get_ydata(), [12])  # at least the runs' end
        np.testing.assert_allclose(bottom.get_xdata(), [8])
        base = np.mean([self.time(1, s) for s in (1, 2, 3)])
        np.testing.assert_allclose(bottom.get_ydata(), [base / 12])  # at most
        self.assertIn("async: 3 of 3 never reached at 8 workers", notes_of(self.fig))

    def test_k_of_n_reached_draws_no_speedup_line_without_its_mark(self):
        """The first study's case: 1 of 3 seeds at 8 workers reaches the target early. The
        mean of that one seed is no group mean: no line or speedup through it, a hollow
        bound instead, and the figure's title says 2 of 3 never reached."""
        times = np.round(np.arange(0.0, 12.01, 0.1), 10)
        runs = []
        for w in self.WORKERS:
            for seed in (1, 2, 3):
                reach = self.reach(w, seed) if w < 8 or seed == 1 else math.inf
                runs.append(make_run("async", seed, {"cluster.workers": w}, times,
                                     np.where(times < reach, 1.0, 0.05)))
        grouped = make_groups(runs, ["cluster.workers"], ["async"])
        table = groups.summary_table(grouped, ["cluster.workers"], 0.5)
        fig = figures.draw_scaling(table, ["cluster.workers"], 0.5,
                                   figures.group_colours(grouped), "ci")
        time_ax, speed_ax = fig.axes[:2]
        for ax in (time_ax, speed_ax):  # the lines end at 4 workers
            [line] = lines_with(ax, marker="o")
            np.testing.assert_allclose(line.get_xdata(), [1, 2, 4])
        [mark] = lines_with(speed_ax, marker="v")
        self.assertEqual(mark.get_markerfacecolor(), "white")
        np.testing.assert_allclose(mark.get_xdata(), [8])
        bound = (self.time(8, 1) + 12 + 12) / 3  # the censored seeds at their end
        base = np.mean([self.time(1, s) for s in (1, 2, 3)])
        np.testing.assert_allclose(mark.get_ydata(), [base / bound])
        self.assertIn("async: 2 of 3 never reached at 8 workers", fig._suptitle.get_text())
        row = table[table["cluster.workers"] == "8"].iloc[0]
        self.assertEqual((row["target_loss_reached"], row["time_to_target_loss_censored"]), (1, 2))
        self.assertAlmostEqual(row["time_to_target_loss_bound"], bound, delta=1e-12)


class StalenessFigureTest(unittest.TestCase):
    def test_identical_histograms_are_named_not_hidden(self):
        runs = []
        for engine in ("async", "dcasgd"):
            run = make_run(engine, 1, {}, [0, 1], [1, 0.5])
            run.staleness_hist = pd.DataFrame({"staleness": [0.0, 1.0, 2.0],
                                               "count": [5.0, 3.0, 2.0]})
            runs.append(run)
        grouped = make_groups(runs, [], ["async", "dcasgd"])
        fig = figures.draw_staleness(grouped, [], figures.group_colours(grouped))
        ax = fig.axes[0]
        self.assertEqual(len(ax.patches), 3)  # one histogram's bars
        text = "\n".join(t.get_text() for t in ax.texts)
        self.assertIn("dcasgd = async", text)


def write_trace(folder, events):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def span(name, tid, start_s, end_s):
    return {"name": name, "ph": "X", "pid": 0, "tid": tid, "ts": start_s * 1e6,
            "dur": (end_s - start_s) * 1e6}


class TimelineTest(unittest.TestCase):
    """Every worker is on the timeline: a row each up to 64, heat-map rows past that whose
    values are the share of workers in each state, by hand."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def draw(self, workers, spans):
        run = make_run("async", 1, {}, [0, 1], [1, 0.5])
        run.trace_path = write_trace(self.tmp / f"w{workers}", spans)
        return figures.draw_timeline(make_groups([run], [], ["async"])).axes[0]

    def test_up_to_64_workers_each_has_a_row(self):
        workers = 60  # the timeline used to stop at 48 threads
        spans = [span("apply", 0, 0.0, 0.1)] + [span("compute", w + 1, 0.0, 1.0)
                                               for w in range(workers)]
        ax = self.draw(workers, spans)
        labels = [t.get_text() for t in ax.get_yticklabels()]
        self.assertEqual(labels, ["server"] + [f"worker {w}" for w in range(workers)])

    def test_past_64_workers_the_shares_are_heat_map_rows(self):
        workers = 100
        # Workers 0..29 compute over [0, 0.5) and wait over [0.5, 1); the rest compute
        # over [0, 1). Compute share: 1 before 0.5 s, 0.7 after; waiting: 0 then 0.3.
        spans = [span("apply", 0, 0.0, 0.01)]
        for w in range(workers):
            if w < 30:
                spans += [span("compute", w + 1, 0.0, 0.5), span("wait", w + 1, 0.5, 1.0)]
            else:
                spans.append(span("compute", w + 1, 0.0, 1.0))
        ax = self.draw(workers, spans)
        labels = [t.get_text() for t in ax.get_yticklabels()]
        self.assertEqual(labels, ["server", "compute: share of 100 workers",
                                  "wait: share of 100 workers"])
        self.assertIn("100 workers as heat-map rows", ax.get_title())
        edges, compute = ax.asgd_shares["compute"]
        _, wait = ax.asgd_shares["wait"]
        mid = (edges[:-1] + edges[1:]) / 2
        np.testing.assert_allclose(compute, np.where(mid < 0.5, 1.0, 0.7), atol=1e-9)
        np.testing.assert_allclose(wait, np.where(mid < 0.5, 0.0, 0.3), atol=1e-9)
        # Every worker's time is in the rows: the mean shares add up to one.
        np.testing.assert_allclose(compute + wait, 1.0, atol=1e-9)

    def test_busy_share_of_a_partly_covered_bin(self):
        spans = [span("compute", 1, 0.25, 0.75), span("compute", 2, 0.0, 0.1)]
        share = figures.busy_share([{**s, "ts": s["ts"] / 1e6, "dur": s["dur"] / 1e6}
                                    for s in spans], np.array([0.0, 0.5, 1.0]), 2)
        np.testing.assert_allclose(share, [(0.25 + 0.1) / 1.0, 0.25 / 1.0])


def workers_table(compute, comm, wait, down=None):
    table = {"worker": np.arange(len(compute), dtype=float), "compute_time": compute,
             "comm_time": comm, "wait_time": wait}
    if down is not None:
        table["down_time"] = down
    return pd.DataFrame(table)


class WorkersFigureTest(unittest.TestCase):
    """The utilisation figure is workers.csv's time split, for every worker."""

    def test_stacked_bars_are_the_split(self):
        w = 8
        compute = np.linspace(0.2, 0.9, w)
        comm = np.full(w, 0.05)
        wait = 1.0 - compute - comm
        run = make_run("async", 1, {}, [0, 1], [1, 0.5])
        run.workers = workers_table(compute, comm, wait)
        fig = figures.draw_workers(make_groups([run], [], ["async"]))
        ax = fig.axes[0]
        bars = ax.patches
        self.assertEqual(len(bars), 3 * w)  # compute, comm, wait for every worker
        heights = np.array([b.get_height() for b in bars]).reshape(3, w)
        bottoms = np.array([b.get_y() for b in bars]).reshape(3, w)
        np.testing.assert_allclose(heights, [compute, comm, wait])
        np.testing.assert_allclose(bottoms[2], compute + comm)
        share = compute.sum() / w
        self.assertIn(f"compute {100 * share:.0f}%", ax.get_title())
        self.assertIn(f"comm {100 * 0.05:.0f}%", ax.get_title())

    def test_past_64_workers_a_heat_map_of_every_worker(self):
        w = 100
        compute = np.linspace(0.1, 0.8, w)
        comm = np.full(w, 0.1)
        down = np.where(np.arange(w) == 7, 0.5, 0.0)
        wait = 2.0 - compute - comm - down  # the run lasted 2 s
        run = make_run("async", 1, {}, [0, 2], [1, 0.5])
        run.workers = workers_table(compute, comm, wait, down)
        ax = figures.draw_workers(make_groups([run], [], ["async"])).axes[0]
        self.assertEqual([t.get_text() for t in ax.get_yticklabels()],
                         ["compute", "communication", "waiting", "down"])
        np.testing.assert_allclose(ax.asgd_share, np.array([compute, comm, wait, down]) / 2.0)
        self.assertIn("all 100", ax.get_xlabel())
        self.assertIn("down", ax.get_title())


class ReportCellsTest(unittest.TestCase):
    """The table's ± follows --band, to 2 significant digits; one run shows no ±."""

    def test_cells(self):
        finals = {1: 0.61, 2: 0.55, 3: 0.70}
        runs = [make_run("async", s, {}, [0, 1], [1.0, v]) for s, v in finals.items()]
        runs.append(make_run("sync", 1, {}, [0, 1], [1.0, 0.4321]))
        table = groups.summary_table(make_groups(runs, [], ["async", "sync"]), [], 0.9)
        mean = sum(finals.values()) / 3
        std = math.sqrt(sum((v - mean) ** 2 for v in finals.values()) / 2)
        expected = {"ci": stats.format_estimate(mean, T975[2] * std / math.sqrt(3)),
                    "std": stats.format_estimate(mean, std), "none": "0.62"}
        self.assertEqual(expected["ci"], "0.62 \u00b1 0.19")
        self.assertEqual(expected["std"], "0.620 \u00b1 0.075")
        for band, text in expected.items():
            headings, rows = report.display_rows(table, [], band)
            column = headings.index("final train loss")
            self.assertEqual(rows[0][column], text)
            self.assertEqual(rows[1][column], "0.4321")  # one run: no ±
            self.assertIn({"ci": "95% confidence interval", "std": "standard deviation",
                           "none": "no spread"}[band], report.table_explanation(band))


class TopologySpeedupTest(unittest.TestCase):
    """figure_topology: speedup in samples per virtual second against boxes x per_box."""

    def runs(self):
        runs = []
        # samples / time: one box scales linearly (8 samples/s per GPU); boxes of 1 at half
        for boxes, per_box, rate in [(1, 1, 8.0), (1, 2, 16.0), (2, 1, 8.0), (4, 1, 16.0)]:
            run = make_run("ps", 1, {figures.BOXES_KEY: str(boxes), figures.PER_BOX_KEY: str(per_box)},
                           [0, 1, 2], [1.0, 0.8, 0.6])
            run.summary["samples"] = rate * 2.0
            runs.append(run)
        return runs

    def test_throughputs_per_box_and_one_box(self):
        gs = make_groups(self.runs(), [figures.BOXES_KEY, figures.PER_BOX_KEY], ["ps"])
        series = figures.topology_throughputs(gs)
        self.assertEqual(series[("ps", 1)], [(1, 8.0), (2, 8.0), (4, 16.0)])
        self.assertEqual(series[("ps", 0)], [(1, 8.0), (2, 16.0)])  # one box: 1 and 2 GPUs
        self.assertEqual(series[("ps", 2)], [(2, 16.0)])

    def test_figure_draws_speedups_over_one_gpu_and_the_ideal_line(self):
        gs = make_groups(self.runs(), [figures.BOXES_KEY, figures.PER_BOX_KEY], ["ps"])
        fig = figures.draw_topology_speedup(gs, figures.group_colours(gs))
        ax = fig.axes[0]
        ys = sorted(tuple(line.get_ydata()) for line in ax.lines)
        self.assertIn((1.0, 1.0, 2.0), ys)   # boxes of 1: 1, 2, 4 GPUs
        self.assertIn((1.0, 2.0), ys)        # one box
        ideal = [line for line in ax.lines if line.get_linestyle() == "--" and line.get_color() == "black"]
        self.assertEqual(len(ideal), 1)
        self.assertEqual(list(ideal[0].get_xdata()), list(ideal[0].get_ydata()))

    def test_no_figure_without_a_topology_sweep(self):
        gs = make_groups([make_run("ps", 1, {"train.lr": "0.1"}, [0, 1], [1.0, 0.5])], ["train.lr"], ["ps"])
        self.assertIsNone(figures.draw_topology_speedup(gs, figures.group_colours(gs)))


if __name__ == "__main__":
    unittest.main()
