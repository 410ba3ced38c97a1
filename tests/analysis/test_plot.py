"""Tests of analysis/plot.py on small synthetic experiment folders.

What it is: builds run folders in the format `asgdsim run` writes (2 engines x 2 worker
counts x 2 seeds, one diverged run, one unfinished run without summary.json, one trace),
runs plot.py as a subprocess, and checks exit codes, figures, the report and that the
summary table's numbers equal those computed here from the summary.json files. A few unit
tests call groups.py directly.
What it is not: no test of the simulator; the folders are written by this file.
Run from anywhere: /usr/bin/python3 -m unittest discover -s tests/analysis -v
"""

import base64
import csv
import glob
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

import numpy as np
import pandas as pd

ANALYSIS = Path(__file__).resolve().parents[2] / "analysis"
PYTHON = ANALYSIS.parent / "python"
PLOT = ANALYSIS / "plot.py"
sys.path.insert(0, str(PYTHON))

from asgdsim.analysis import groups  # noqa: E402

ENGINES = ("async", "sync")
WORKERS = (2, 4)
SEEDS = (1, 2)
DIVERGED = ("async", 4, 2)     # (engine, workers, seed)
UNFINISHED = ("sync", 4, 2)
TRACED = ("async", 2, 1)
FIGURES = ("convergence", "sweep", "staleness", "scaling", "timeline", "workers")
# t_{0.975, 1}: with 2 seeds the 95% interval's half-width is this x std / sqrt(2).
T975_DF1 = math.tan(math.pi * 0.475)
METRICS_HEADER = ("time,updates,gradients,samples,epoch,lr,train_loss,test_loss,"
                  "test_accuracy,worker_loss,mean_staleness")


def run_id(engine, workers, seed):
    return f"{engine}-w{workers}-s{seed}"


def python_for_plot():
    """The interpreter that has matplotlib: this one when it does, else /usr/bin/python3."""
    try:
        import matplotlib  # noqa: F401
        return sys.executable
    except ImportError:
        return "/usr/bin/python3"


def run_plot(*args, command=None):
    command = command or [python_for_plot(), str(PLOT)]
    return subprocess.run(command + [str(a) for a in args], capture_output=True, text=True,
                          timeout=120)


# ---------------------------------------------------------------- synthetic experiment

def loss_curve(engine, workers, seed, times):
    """Exponential decay to a floor; async converges faster with more workers."""
    rate = (0.6 if engine == "async" else 0.45) * workers / 2 * (1 + 0.15 * seed)
    floor = 0.02 * (1 + 0.1 * seed) * (1.5 if engine == "async" else 1.0)
    return 2.0 * np.exp(-rate * times) + floor


def eval_times(seed, stop):
    """Seeds use slightly different eval grids so the plot has to interpolate."""
    step = 0.25 if seed == 1 else 0.3
    return np.round(np.arange(0.0, stop + 1e-9, step), 6)


def write_metrics(folder, engine, workers, seed, times, train, diverged=False):
    updates = np.round(times * 40 * workers).astype(int)
    lines = [METRICS_HEADER]
    for i, (t, u, loss) in enumerate(zip(times, updates, train)):
        test = "nan" if diverged and not math.isfinite(loss) else repr(float(loss) * 1.1)
        accuracy = (min(0.99, max(0.1, 0.5 + 0.4 * (1 - loss / train[0])))
                    if math.isfinite(loss) else "nan")
        staleness = (workers - 1) * 0.9 if engine == "async" else 0
        lines.append(f"{t!r},{u},{u * (1 if engine == 'async' else workers)},{u * 32},"
                     f"{u * 32 / 1000!r},0.1,{float(loss)!r},{test},{accuracy},"
                     f"{float(loss) * 1.2!r},{staleness}")
    (folder / "metrics.csv").write_text("\n".join(lines) + "\n")


def staleness_histogram(engine, workers, updates):
    if engine == "sync":
        return {0: updates}
    weights = np.arange(1, workers + 1, dtype=float)
    counts = np.floor(updates * weights / weights.sum()).astype(int)
    return {s: int(c) for s, c in enumerate(counts)}


def write_run(root, engine, workers, seed):
    rid = run_id(engine, workers, seed)
    folder = root / rid
    folder.mkdir()
    key = (engine, workers, seed)
    stop = 6.0 if key != UNFINISHED else 1.5
    times = eval_times(seed, stop)
    train = loss_curve(engine, workers, seed, times)
    if key == DIVERGED:
        train = 0.5 * np.exp(1.5 * times)
        train[-3:] = [math.inf, math.nan, math.nan]
    write_metrics(folder, engine, workers, seed, times, train, diverged=key == DIVERGED)
    config = {"name": "tiny", "engine": {"type": engine}, "cluster": {"workers": workers},
              "run": {"run_id": rid, "sweep": {"cluster.workers": workers},
                      "repeat": SEEDS.index(seed), "seed": seed}}
    (folder / "config.json").write_text(json.dumps(config, indent=1))

    updates = int(times[-1] * 40 * workers)
    hist = staleness_histogram(engine, workers, updates)
    (folder / "staleness.csv").write_text(
        "staleness,count\n" + "".join(f"{s},{c}\n" for s, c in hist.items()))
    busy = [times[-1] * (0.9 - 0.1 * w) for w in range(workers)]
    (folder / "workers.csv").write_text(
        "worker,gradients,applied,dropped,compute_time,comm_time,wait_time\n" + "".join(
            f"{w},{updates // workers},{updates // workers - w},{w},{b!r},0.0,{times[-1] - b!r}\n"
            for w, b in enumerate(busy)))
    if key == TRACED:
        write_trace(folder, workers, times[-1])
    if key != DIVERGED:  # the diverged run has no meta.json: the report counts it
        (folder / "meta.json").write_text(json.dumps({
            "asgdsim_version": "0.1.0", "git_commit": "abc123def456", "git_dirty": False,
            "backend": "OMP", "build_type": "Release",
            "command_line": "build/asgdsim run tiny.json --threads 2", "host": "testhost",
            "threads": 2, "jobs": 1, "start": "2026-01-02T03:04:05Z",
            "end": f"2026-01-02T03:04:0{5 + seed}Z"}))
    if key == UNFINISHED:
        return None  # crashed: no summary.json

    finite = train[np.isfinite(train)]
    summary = {
        "status": "diverged" if key == DIVERGED else "completed",
        "engine": engine, "run_id": rid, "seed": seed,
        "final": {"train_loss": math.nan if key == DIVERGED else float(train[-1]),
                  "test_loss": None if key == DIVERGED else float(train[-1]) * 1.1,
                  "test_accuracy": 0.9 - 0.01 * seed},
        "time": float(times[-1]), "updates": updates,
        "gradients": updates if engine == "async" else updates * workers,
        "dropped_gradients": 3 * workers + seed,
        "staleness": {"mean": sum(s * c for s, c in hist.items()) / sum(hist.values()),
                      "max": max(hist)},
        "iteration_time": {"mean": 0.025 * seed} if engine == "sync" else None,
        "wall_seconds": 0.5,
        "unused_future_field": [1, 2],
    }
    assert len(finite)
    (folder / "summary.json").write_text(json.dumps(summary))  # NaN written as NaN
    return summary


def write_trace(folder, workers, stop):
    """compute/push/pull/wait per worker (tid w+1), apply on the server (tid 0); in us."""
    events = [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "server"}}]
    for w in range(workers):
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": w + 1,
                       "args": {"name": f"worker {w}"}})
        t = 0.0
        while t < stop * 1e6:
            for name, dur in (("pull", 8e3), ("compute", 60e3 + 15e3 * w), ("push", 8e3),
                              ("wait", 10e3 * w)):
                if dur:
                    events.append({"name": name, "ph": "X", "ts": t, "dur": dur, "pid": 0,
                                   "tid": w + 1, "args": {"version": int(t // 1e4)}})
                t += dur
            events.append({"name": "apply", "ph": "X", "ts": t, "dur": 2e3, "pid": 0,
                           "tid": 0, "args": {}})
    (folder / "trace.json").write_text(json.dumps({"traceEvents": events}))


def write_experiment(root):
    """The 2 engines x 2 worker counts x 2 seeds experiment; returns {run_id: summary}."""
    root.mkdir(parents=True)
    summaries, rows = {}, []
    for engine in ENGINES:
        for workers in WORKERS:
            for seed in SEEDS:
                summary = write_run(root, engine, workers, seed)
                summaries[run_id(engine, workers, seed)] = summary
                final = (summary or {}).get("final", {})
                rows.append([run_id(engine, workers, seed), engine, workers, seed,
                             (summary or {}).get("status", "interrupted"),
                             final.get("train_loss", ""), final.get("test_loss", ""),
                             final.get("test_accuracy", ""), (summary or {}).get("time", ""),
                             (summary or {}).get("updates", "")])
    with open(root / "index.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run_id", "engine", "cluster.workers", "seed", "status",
                         "final_train_loss", "final_test_loss", "final_test_accuracy",
                         "time", "updates"])
        writer.writerows(rows)
    experiment = {"name": "tiny_scaling", "seed": 1, "repeats": 2,
                  "model": {"type": "logistic"}, "data": {"type": "synthetic"},
                  "train": {"batch_size": 32, "lr": 0.1}, "stop": {"time": 6.0},
                  "eval": {"every": 0.25, "unit": "time"}, "cluster": {"workers": 2},
                  "staleness": {"mode": "emergent"},
                  "engines": [{"type": e} for e in ENGINES],
                  "sweep": {"cluster.workers": list(WORKERS)}}
    (root / "experiment.json").write_text(json.dumps(experiment, indent=2))
    return summaries


def write_bare_regression_run(root):
    """No index.csv, no experiment.json, no sweep: one run with a regression model."""
    folder = root / "only-run"
    folder.mkdir(parents=True)
    times = np.arange(0.0, 2.01, 0.1)
    lines = [METRICS_HEADER + ",some_future_column"]
    for i, t in enumerate(times):
        loss = "-nan" if i == 3 else repr(float(np.exp(-t)))
        lines.append(f"{t!r},{i * 10},{i * 10},{i * 320},{i * 0.32!r},0.05,{loss},{loss},,"
                     f"{loss},0,7")
    (folder / "metrics.csv").write_text("\n".join(lines) + "\n")
    (folder / "summary.json").write_text(json.dumps({
        "status": "completed", "engine": "async", "run_id": "only-run", "seed": 3,
        "final": {"train_loss": float(np.exp(-2.0)), "test_loss": float(np.exp(-2.0)),
                  "test_accuracy": None},
        "time": 2.0, "updates": 200, "gradients": 200, "dropped_gradients": 0,
        "staleness": {"mean": 0.0, "max": 0}, "wall_seconds": 0.1}))


# ---------------------------------------------------------------- checks

def assert_png_has_content(test, path, min_bytes=5000):
    import matplotlib.image
    test.assertTrue(path.is_file(), f"{path} missing")
    test.assertGreater(path.stat().st_size, min_bytes, f"{path} is suspiciously small")
    pixels = matplotlib.image.imread(str(path))
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    test.assertGreater(len(colours), 10, f"{path} is (nearly) a single colour")


CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
SCREENSHOT_SIZE = (1280, 2400)


def screenshot(test, html_path):
    """A PNG of html_path rendered by headless Chromium (Debian's chromium, installed by
    scripts/deps.sh); the test is skipped, saying so, where no Chromium is installed.
    With ASGD_SCREENSHOT_DIR set, the PNG is also copied there (to look at)."""
    browser = next((shutil.which(n) for n in CHROMIUM_NAMES if shutil.which(n)), None)
    if browser is None:
        test.skipTest("no Chromium (Debian package chromium; scripts/deps.sh installs it): "
                      "report.html not rendered")
    with tempfile.TemporaryDirectory(prefix="asgd_chromium_") as profile:
        shot = Path(profile) / "report.png"
        result = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--no-first-run", f"--user-data-dir={profile}/profile",
             "--hide-scrollbars", f"--window-size={SCREENSHOT_SIZE[0]},{SCREENSHOT_SIZE[1]}",
             f"--screenshot={shot}", html_path.resolve().as_uri()],
            capture_output=True, text=True, timeout=120)
        test.assertTrue(shot.is_file(), f"Chromium wrote no screenshot: {result.stderr[-2000:]}")
        data = shot.read_bytes()
    if os.environ.get("ASGD_SCREENSHOT_DIR"):
        Path(os.environ["ASGD_SCREENSHOT_DIR"], html_path.parent.name + "_report.png"
             ).write_bytes(data)
    return data


def check_screenshot(test, data):
    """The page has content: the size asked for, a fair share of non-white pixels, spread
    over its height (title, table and figures, not one blob), and varied pixels."""
    import io
    import matplotlib.image
    pixels = matplotlib.image.imread(io.BytesIO(data), format="png")[:, :, :3]
    test.assertEqual((pixels.shape[1], pixels.shape[0]), SCREENSHOT_SIZE)
    ink = (pixels < 0.9).any(axis=2)
    test.assertGreater(ink.mean(), 0.03, "the screenshot is (nearly) blank")
    rows = ink.any(axis=1)
    thirds = np.array_split(rows, 3)
    test.assertTrue(all(part.mean() > 0.1 for part in thirds),
                    f"content only in parts of the page: {[part.mean() for part in thirds]}")
    test.assertGreater(float(pixels.std()), 0.05, "the screenshot has (nearly) one colour")


def read_table(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def number(text):
    return math.nan if text in ("", None) else float(text)


class PlotExperimentTest(unittest.TestCase):
    """One plot.py run over the synthetic experiment, shared by the tests below."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="asgd_plot_test_"))
        cls.experiment = cls.tmp / "runs" / "tiny_scaling"
        cls.summaries = write_experiment(cls.experiment)
        cls.result = run_plot(cls.experiment)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_exits_zero_and_prints_report_path_last(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        last = self.result.stdout.strip().splitlines()[-1]
        self.assertEqual(Path(last).resolve(), (self.experiment / "report.html").resolve())

    def test_figures_exist_and_have_content(self):
        for name in FIGURES:
            assert_png_has_content(self, self.experiment / f"figure_{name}.png")
        for name in ("convergence", "sweep", "staleness", "scaling"):
            self.assertTrue((self.experiment / f"figure_{name}.svg").is_file(),
                            f"figure_{name}.svg missing")

    def test_a_naive_walk_over_sub_folders_finds_only_runs(self):
        """plot.py writes files, no sub-folder: glob('*/') + metrics.csv still works."""
        folders = sorted(glob.glob(f"{self.experiment}/*/"))
        self.assertEqual(len(folders), len(self.summaries))
        for folder in folders:
            self.assertGreater(len(pd.read_csv(Path(folder) / "metrics.csv")), 0)

    def test_report_shows_provenance(self):
        text = (self.experiment / "report.html").read_text()
        section = text[text.index("<h2>Provenance</h2>"):]
        for expected in ("0.1.0", "abc123def456", "OMP", "Release", "testhost",
                         "build/asgdsim run tiny.json --threads 2", "2026-01-02 03:04:05"):
            self.assertIn(expected, section)
        # wall time: first start 03:04:05, last end 03:04:07 (seed 2); wall_seconds 0.5 x 7
        self.assertIn("2 s from the first run&#x27;s start to the last run&#x27;s end; the "
                      "runs&#x27; own wall_seconds add up to 3.5 s", section)
        self.assertIn("runs without meta.json</td><td class=\"text\"><code>1 of 8", section)
        self.assertIn("Made by asgdsim 0.1.0 (commit abc123def456), OMP, Release on testhost",
                      text)
        self.assertNotIn("Warning", text)  # one build
        md = (self.experiment / "report.md").read_text()
        self.assertIn("| command line | `build/asgdsim run tiny.json --threads 2` |", md)

    def test_wide_tables_scroll_inside_the_page(self):
        text = (self.experiment / "report.html").read_text()
        tables = text.count("<table")
        self.assertGreaterEqual(tables, 3)
        self.assertEqual(text.count('<div class="scroll"><table'), tables)
        self.assertIn("div.scroll { overflow-x: auto;", text)

    def test_report_screenshot_is_not_blank(self):
        """report.html as headless Chromium renders it: a page with content, not blank."""
        shot = screenshot(self, self.experiment / "report.html")
        check_screenshot(self, shot)

    def test_report_html_embeds_images(self):
        text = (self.experiment / "report.html").read_text()
        self.assertIn("<title>tiny_scaling</title>", text)
        images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
        self.assertEqual(len(images), len(FIGURES))
        for data in images:
            self.assertTrue(base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n"))
        self.assertIn("&quot;cluster.workers&quot;", text)  # the config, escaped in <pre>
        self.assertNotIn('src="figure_', text)  # self-contained

    def test_report_md_references_pngs(self):
        text = (self.experiment / "report.md").read_text()
        for name in FIGURES:
            self.assertIn(f"(figure_{name}.png)", text)

    def test_summary_table_means_equal_summary_json(self):
        table = {(row["engine"], int(float(row["cluster.workers"]))): row
                 for row in read_table(self.experiment / "summary_table.csv")}
        self.assertEqual(set(table), {(e, w) for e in ENGINES for w in WORKERS})
        for (engine, workers), row in table.items():
            done = [s for seed in SEEDS
                    for s in [self.summaries[run_id(engine, workers, seed)]]
                    if s is not None and s["status"] == "completed"]
            expected = {
                "train_loss": [s["final"]["train_loss"] for s in done],
                "test_loss": [s["final"]["test_loss"] for s in done],
                "test_accuracy": [s["final"]["test_accuracy"] for s in done],
                "time": [s["time"] for s in done],
                "updates": [s["updates"] for s in done],
                "dropped_gradients": [s["dropped_gradients"] for s in done],
                "mean_staleness": [s["staleness"]["mean"] for s in done],
            }
            for stem, values in expected.items():
                with self.subTest(group=(engine, workers), quantity=stem):
                    self.assertAlmostEqual(number(row[stem + "_mean"]), float(np.mean(values)),
                                           delta=1e-12 * max(1.0, abs(np.mean(values))))
                    self.assertEqual(int(row[stem + "_n"]), len(values))
                    if len(values) == 1:  # one run says nothing about the spread
                        self.assertTrue(math.isnan(number(row[stem + "_std"])))
                        self.assertTrue(math.isnan(number(row[stem + "_ci95"])))
                        continue
                    self.assertEqual(len(values), 2)
                    std = float(np.std(values, ddof=1))
                    self.assertAlmostEqual(number(row[stem + "_std"]), std, delta=1e-9)
                    self.assertAlmostEqual(number(row[stem + "_ci95"]),
                                           T975_DF1 * std / math.sqrt(2), delta=1e-9)
            self.assertEqual(int(row["completed"]), len(done))

    def test_status_counts(self):
        rows = read_table(self.experiment / "summary_table.csv")
        by_group = {(r["engine"], int(float(r["cluster.workers"]))): r for r in rows}
        self.assertEqual(by_group[DIVERGED[:2]]["diverged"], "1")
        self.assertEqual(by_group[UNFINISHED[:2]]["unfinished"], "1")
        self.assertEqual(sum(int(r["runs"]) for r in rows), 8)

    def test_default_target_and_time_to_target(self):
        rows = read_table(self.experiment / "summary_table.csv")
        # runs that trained: final train loss <= TRAINED_FRACTION x the first row's
        finals = []
        for run_id, s in self.summaries.items():
            if s is None or s["status"] != "completed":
                continue
            with open(self.experiment / run_id / "metrics.csv") as f:
                first = float(list(csv.DictReader(f))[0]["train_loss"])
            if s["final"]["train_loss"] <= groups.TRAINED_FRACTION * first:
                finals.append(s["final"]["train_loss"])
        self.assertTrue(finals)
        target = groups.DEFAULT_TARGET_FACTOR * max(finals)
        for row in rows:
            self.assertAlmostEqual(number(row["target_loss"]), target, delta=1e-12)
        # The sync, 2-worker group: where each seed's loss crosses the target, interpolated
        # between the evaluations around the crossing.
        row = next(r for r in rows if r["engine"] == "sync" and r["cluster.workers"] == "2")
        firsts = []
        for seed in SEEDS:
            times = eval_times(seed, 6.0)
            loss = loss_curve("sync", 2, seed, times)
            i = int(np.argmax(loss <= target))
            firsts.append(times[i - 1] + (target - loss[i - 1]) / (loss[i] - loss[i - 1])
                          * (times[i] - times[i - 1]))
        self.assertAlmostEqual(number(row["time_to_target_loss_mean"]), np.mean(firsts),
                               delta=1e-12)
        self.assertEqual(row["target_loss_reached"], "2")


class PlotEdgeCasesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="asgd_plot_test_"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_not_an_experiment_exits_2_naming_the_folder(self):
        folder = self.tmp / "just_notes"
        (folder / "sub").mkdir(parents=True)
        (folder / "notes.txt").write_text("hello\n")
        for target in (folder, self.tmp / "does_not_exist"):
            result = run_plot(target)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn(str(target), result.stderr)
            self.assertIn("metrics.csv", result.stderr)  # says what was expected
            self.assertNotIn("Traceback", result.stderr)

    def test_bare_run_folder_through_the_shebang(self):
        """No index.csv/experiment.json, no sweep, no accuracy, a -nan loss, an unknown
        column; run as an executable so the interpreter guard is exercised too."""
        write_bare_regression_run(self.tmp / "bare")
        out = self.tmp / "out"
        executable = os.access(PLOT, os.X_OK)
        command = [str(PLOT)] if executable else [python_for_plot(), str(PLOT)]
        result = run_plot(self.tmp / "bare", "--x", "updates", "--format", "png",
                          "--out", out, command=command)
        self.assertEqual(result.returncode, 0, result.stderr)
        assert_png_has_content(self, out / "figure_convergence.png")
        self.assertFalse((out / "figure_convergence.svg").exists())
        self.assertFalse((out / "figure_scaling.png").exists())
        self.assertFalse((out / "figure_sweep.png").exists())  # nothing swept
        self.assertIn("runs without meta.json", (out / "report.md").read_text())
        row = read_table(out / "summary_table.csv")[0]
        self.assertAlmostEqual(number(row["train_loss_mean"]), math.exp(-2.0), delta=1e-12)
        self.assertTrue(math.isnan(number(row["test_accuracy_mean"])))

    def test_an_old_plots_folder_is_named_and_left_alone(self):
        write_bare_regression_run(self.tmp / "bare")
        old = self.tmp / "bare" / "plots"
        old.mkdir()
        (old / "convergence.png").write_bytes(b"old")
        result = run_plot(self.tmp / "bare", "--format", "png")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"{old} is from an older plot.py", result.stderr)
        self.assertEqual((old / "convergence.png").read_bytes(), b"old")
        self.assertTrue((self.tmp / "bare" / "figure_convergence.png").is_file())

    def test_runs_from_different_builds_are_flagged(self):
        """In process (no figures): the report of runs from two commits warns at the top."""
        from asgdsim.analysis import data as asgdsim_data
        from asgdsim.analysis import report
        root = self.tmp / "mixed"
        write_experiment(root)
        meta = root / run_id("sync", 2, 1) / "meta.json"
        changed = json.loads(meta.read_text())
        changed["git_commit"] = "0123456789ab"
        meta.write_text(json.dumps(changed))
        experiment = asgdsim_data.read(root)
        grouped = groups.group_runs(experiment)
        table = groups.summary_table(grouped, experiment.sweep_keys, 0.5)
        provenance = report.provenance_rows(experiment, ["analysis/plot.py", str(root)])
        report.write_html(root / "report.html", experiment, table, [],
                          groups.status_counts(experiment.runs), [], "ci", provenance)
        text = (root / "report.html").read_text()
        self.assertIn('<p class="warning">Warning: the runs come from different builds '
                      "(git commit differ)", text)
        self.assertIn("abc123def456 (6 runs); 0123456789ab (1 run)", text)

    def test_degenerate_folder_does_not_crash(self):
        """A run listed in index.csv without a folder, a corrupt summary.json, an empty
        metrics.csv, losses that are zero or negative, unusable workers/staleness files."""
        root = self.tmp / "odd"
        for name in ("a", "b", "c"):
            (root / name).mkdir(parents=True)
        (root / "index.csv").write_text(
            "run_id,engine,train.lr,seed,status,final_train_loss,final_test_loss,"
            "final_test_accuracy,time,updates\n"
            "a,async,0.1,1,diverged,nan,,,1,10\nb,sync,0.01,1,completed,-1,0,,2,20\n"
            "c,sync,1e-2,2,completed,0,0,,2,20\ngone,sync,0.01,3,completed,0.5,0.5,,2,20\n")
        (root / "a" / "metrics.csv").write_text(METRICS_HEADER + "\n")
        (root / "a" / "summary.json").write_text('{"status": "diverged", "final": ')
        (root / "b" / "metrics.csv").write_text("time,updates,train_loss\n0,0,0\n1,10,-1\n")
        (root / "b" / "summary.json").write_text(json.dumps(
            {"status": "completed", "final": {"train_loss": -1}, "staleness": 3}))
        (root / "b" / "workers.csv").write_text("worker,compute_time,wait_time\nnan,1,1\n")
        (root / "b" / "staleness.csv").write_text("")
        (root / "c" / "metrics.csv").write_text("time,updates,train_loss\n0,0,inf\n1,10,0\n")
        result = run_plot(root, "--format", "png")
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = {r["group"]: r for r in read_table(root / "summary_table.csv")}
        self.assertEqual(set(rows), {"async, train.lr=0.1", "sync, train.lr=0.01"})
        self.assertEqual(rows["sync, train.lr=0.01"]["runs"], "3")  # 0.01 and 1e-2 are one
        self.assertEqual(rows["async, train.lr=0.1"]["unfinished"], "1")  # corrupt summary

    def test_unreadable_files_are_warned_about_and_listed_in_the_report(self):
        """Issue 17: a corrupt metrics.csv and a summary.json that is not an object were
        dropped without a word; each is now a warning and a line under the run in the report."""
        root = self.tmp / "bad"
        for name in ("x", "y"):
            (root / name).mkdir(parents=True)
        (root / "x" / "metrics.csv").write_bytes(b"\x00\x01garbage\xff\n1,2\n")
        (root / "x" / "summary.json").write_text(json.dumps(
            {"status": "completed", "engine": "async", "final": {"train_loss": 0.1}}))
        (root / "y" / "metrics.csv").write_text("time,updates,train_loss\n0,0,1\n1,10,0.5\n")
        (root / "y" / "summary.json").write_text("[1, 2]")
        result = run_plot(root, "--format", "png")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("ignoring", result.stderr)
        self.assertIn("x/metrics.csv", result.stderr)
        self.assertIn("not a JSON object", result.stderr)
        for report in ("report.md", "report.html"):
            text = (root / report).read_text(encoding="utf-8")
            self.assertIn("Runs with problems", text, report)
            self.assertRegex(text, r"x: metrics\.csv ignored", report)
            self.assertRegex(text, r"y: summary\.json ignored: not a JSON object", report)

    def test_bad_option_exits_2(self):
        write_bare_regression_run(self.tmp / "bare")
        result = run_plot(self.tmp / "bare", "--metric", "accuracy")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--metric", result.stderr)
        result = run_plot(self.tmp / "bare", "--band", "sem")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--band", result.stderr)
        self.assertIn("ci95, minmax, iqr, std, none", result.stderr)  # says what is allowed


class GroupsUnitTest(unittest.TestCase):
    def test_mean_curve_interpolates_onto_common_range(self):
        a = (np.array([0.0, 1.0, 2.0]), np.array([0.0, 2.0, 4.0]))
        b = (np.array([0.5, 1.5, 2.5]), np.array([1.0, 3.0, 5.0]))
        grid, mean, std, n = groups.mean_curve([a, b])
        self.assertEqual(n, 2)
        np.testing.assert_allclose(grid, [0.5, 1.0, 1.5, 2.0])
        np.testing.assert_allclose(mean, [1.0, 2.0, 3.0, 4.0])  # both are y = 2x
        np.testing.assert_allclose(std, 0.0, atol=1e-12)

    def test_mean_curve_same_grid_and_single_run(self):
        x = np.array([0.0, 1.0])
        grid, mean, std, n = groups.mean_curve([(x, np.array([1.0, 3.0])),
                                                (x, np.array([3.0, 5.0]))])
        np.testing.assert_allclose(mean, [2.0, 4.0])
        np.testing.assert_allclose(std, [math.sqrt(2.0)] * 2)
        _, mean, std, n = groups.mean_curve([(x, np.array([1.0, 3.0]))])
        self.assertEqual(n, 1)
        np.testing.assert_allclose(mean, [1.0, 3.0])
        self.assertTrue(np.isnan(std).all())  # no spread from one run

    def test_canonical_text_equates_sources(self):
        self.assertEqual(groups.canonical_text(4), groups.canonical_text(4.0))
        self.assertEqual(groups.canonical_text(0.1), "0.1")
        self.assertEqual(groups.canonical_text(True), "true")


class EngineNamesTest(unittest.TestCase):
    """Two engines of one type under different names (sync_backup as backup1 and backup2)
    are two groups, labelled by name, in config order."""

    def test_named_engines_of_one_type_are_separate_groups(self):
        tmp = Path(tempfile.mkdtemp(prefix="asgd_plot_test_"))
        try:
            root = tmp / "named"
            root.mkdir()
            engines = [{"type": "sync_backup", "name": "backup2", "backups": 2},
                       {"type": "sync_backup", "name": "backup1", "backups": 1}]
            for engine, final in zip(engines, (0.3, 0.5)):
                folder = root / f"{engine['name']}-seed1"
                folder.mkdir()
                times = np.arange(0.0, 2.01, 0.5)
                write_metrics(folder, "sync", 2, 1, times, np.linspace(1.0, final, len(times)))
                (folder / "config.json").write_text(json.dumps(
                    {"engine": engine, "run": {"run_id": folder.name, "sweep": {}, "seed": 1}}))
                (folder / "summary.json").write_text(json.dumps(
                    {"status": "completed", "engine": engine["name"], "seed": 1,
                     "final": {"train_loss": final}, "time": 2.0, "updates": 80}))
            (root / "experiment.json").write_text(json.dumps({"name": "named", "engines": engines}))
            result = run_plot(root, "--format", "png")
            self.assertEqual(result.returncode, 0, result.stderr)
            rows = read_table(root / "summary_table.csv")
            self.assertEqual([r["engine"] for r in rows], ["backup2", "backup1"])
            self.assertEqual([float(r["train_loss_mean"]) for r in rows], [0.3, 0.5])
            # their colours: shades of sync_backup's, the type read from config.json
            from asgdsim.analysis import data, figures
            experiment = data.read(root)
            self.assertEqual([r.engine_type for r in experiment.runs], ["sync_backup"] * 2)
            types = data.load(root).attrs["engine_types"]
            self.assertEqual(types, {"backup1": "sync_backup", "backup2": "sync_backup"})
            base = figures.ENGINE_COLOURS["sync_backup"]
            self.assertEqual(figures.engine_palette(["backup2", "backup1"], types),
                             {"backup2": figures.shade(base, 0, 2), "backup1": figures.shade(base, 1, 2)})
            colours = figures.group_colours(groups.group_runs(experiment))
            self.assertEqual(sorted(colours.values()), sorted([figures.shade(base, 0, 2), figures.shade(base, 1, 2)]))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)



class OptionListTest(unittest.TestCase):
    """plot.py's and overlay.py's comma lists (--metric, --format) are one function: each
    name checked, each once in the order given."""

    def test_checked_deduplicated_and_shared(self):
        from asgdsim.analysis import options, overlay, plot
        self.assertIs(plot.split_list, options.split_list)
        self.assertIs(overlay.split_list, options.split_list)
        self.assertIs(overlay.UsageError, plot.UsageError)
        self.assertEqual(options.split_list("png, svg,png", ("png", "svg", "pdf"), "--format"), ["png", "svg"])
        with self.assertRaisesRegex(options.UsageError, "--format: gif is not one of png, svg"):
            options.split_list("png,gif", ("png", "svg"), "--format")
        with self.assertRaisesRegex(options.UsageError, "--metric: empty"):
            options.split_list(" , ", ("train_loss",), "--metric")

if __name__ == "__main__":
    unittest.main()
