"""Tests of analysis/overlay.py on two small synthetic experiment folders.

What it is: writes a simulated folder (as `asgdsim run` does) and a real one (as
`asgdsim cluster` does: "mode": "cluster", wall-clock time) by hand, in the exact file
formats of those commands, with two run ids in both and one run id in each folder only.
Runs overlay.py as a subprocess and checks exit codes, the figures, that overlay.md's
table holds the summary.json numbers and their differences, the unpaired-run warning and
the errors (exit 2, naming the folder).
What it is not: no test of the simulator, nor of how the figures look.
Standard library only, so it imports under any python3; overlay.py runs under
/usr/bin/python3 (matplotlib, pandas), or re-execs itself there.
Run from anywhere: /usr/bin/python3 -m unittest discover -s tests/analysis -v
"""

import json
import math
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

OVERLAY = Path(__file__).resolve().parents[2] / "analysis" / "overlay.py"
SYSTEM_PYTHON = "/usr/bin/python3"
METRICS = ("train_loss", "test_loss", "test_accuracy")
PAIRED = ("async-seed1", "sync-seed1")
ONLY_SIM = "dc-seed1"
ONLY_REAL = "easgd-seed1"
METRICS_HEADER = ("time,updates,gradients,samples,epoch,lr,train_loss,test_loss,"
                  "test_accuracy,worker_loss,mean_staleness,dropped")
INDEX_HEADER = ("run_id,engine,seed,status,final_train_loss,final_test_loss,"
                "final_test_accuracy,time,updates")
WORKERS = 2


def run_overlay(*args, python=SYSTEM_PYTHON):
    return subprocess.run([python, str(OVERLAY)] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------- synthetic folders

def engine_of(run_id):
    return run_id.split("-")[0]


def run_numbers(run_id, real):
    """Deterministic, different numbers per run and side. The simulator's time is virtual
    seconds (slow cost model), the cluster's wall seconds (faster here)."""
    k = sum(map(ord, run_id)) % 7
    evals, per_eval = 6, 40 + 5 * k
    time_step = (0.031 + 0.002 * k) if real else (0.47 + 0.01 * k)
    rate = (0.61 + 0.03 * k) * (1.07 if real else 1.0)
    rows = []
    for i in range(evals + 1):
        updates = i * per_eval
        train = 2.3 * math.exp(-rate * i) + 0.3 + (0.013 if real else 0.0)
        rows.append({"time": (i * time_step + (7.6e-7 if real else 0.0)),
                     "updates": updates, "gradients": updates, "samples": updates * 32,
                     "epoch": updates * 32 / (per_eval * 32 * 2), "lr": 0.05,
                     "train_loss": train, "test_loss": train * 1.04,
                     "test_accuracy": min(0.95, 0.1 + 0.8 * (1 - math.exp(-rate * i))),
                     "worker_loss": train * 1.1 if i else math.nan,
                     "mean_staleness": (0.0 if engine_of(run_id) == "sync" else 0.93 + 0.01 * k)
                     if i else math.nan, "dropped": 0})
    staleness_mean = 0.0 if engine_of(run_id) == "sync" else 0.987654 + 0.0123 * k + \
        (0.0321 if real else 0.0)
    return rows, staleness_mean


def csv_number(value):
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return repr(value) if isinstance(value, float) else str(value)


def write_run(root, run_id, real, experiment):
    folder = root / run_id
    folder.mkdir()
    rows, staleness_mean = run_numbers(run_id, real)
    keys = METRICS_HEADER.split(",")
    (folder / "metrics.csv").write_text(
        METRICS_HEADER + "\n" +
        "".join(",".join(csv_number(row[k]) for k in keys) + "\n" for row in rows))
    last = rows[-1]
    updates = last["updates"]
    # The histogram's mean (about 1) differs from summary.json's staleness.mean on purpose:
    # the table must show the summary's.
    (folder / "staleness.csv").write_text(
        "staleness,count\n" + (f"0,{updates}\n" if engine_of(run_id) == "sync"
                               else f"0,{updates // 4}\n1,{updates // 2}\n"
                                    f"2,{updates - updates // 4 - updates // 2}\n"))
    (folder / "workers.csv").write_text(
        "worker,gradients,applied,dropped,lost,compute_time,comm_time,wait_time,down_time\n" +
        "".join(f"{w},{updates // WORKERS},{updates // WORKERS},0,0,"
                f"{last['time'] * 0.9!r},0,{last['time'] * 0.1!r},0\n" for w in range(WORKERS)))
    engine = engine_of(run_id)
    run_info = {"engine": engine, "experiment": experiment, "repeat": 0, "run_id": run_id,
                "seed": 1, "sweep": {}}
    if real:
        run_info["mode"] = "cluster"
    (folder / "config.json").write_text(json.dumps(
        {"cluster": {"workers": WORKERS}, "engine": {"name": engine, "type": engine},
         "name": experiment, "run": run_info, "seed": 1}, indent=2))
    summary = {"dropped_gradients": 0, "engine": engine,
               "engine_config": {"name": "", "type": engine},
               "epochs": last["epoch"],
               "final": {"test_accuracy": last["test_accuracy"],
                         "test_loss": last["test_loss"], "train_loss": last["train_loss"]},
               "gradients": updates, "iteration_time": None, "lost_gradients": 0,
               "note": "reached stop.epochs", "run_id": run_id, "samples": updates * 32,
               "seed": 1, "staleness": {"max": 2, "mean": staleness_mean},
               "status": "completed", "sweep": {}, "time": last["time"], "updates": updates,
               "wall_seconds": last["time"] if real else 1.234, "worker_failures": 0}
    if real:
        summary["mode"] = "cluster"
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    meta = {"asgdsim_version": "0.1.0", "backend": "OMP", "host": "test"}
    if real:
        meta.update(mode="cluster", ranks=WORKERS + 1)
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    return summary


def write_experiment(folder, run_ids, real):
    """An experiment folder; returns {run_id: summary dict}."""
    folder.mkdir(parents=True)
    name = folder.name
    (folder / "experiment.json").write_text(json.dumps(
        {"name": name, "cluster": {"workers": WORKERS},
         "engines": [{"name": engine_of(r), "type": engine_of(r)} for r in run_ids]},
        indent=2))
    summaries = {r: write_run(folder, r, real, name) for r in run_ids}
    lines = [INDEX_HEADER]
    for run_id, s in summaries.items():
        lines.append(",".join([run_id, s["engine"], "1", s["status"],
                               repr(s["final"]["train_loss"]), repr(s["final"]["test_loss"]),
                               repr(s["final"]["test_accuracy"]), repr(s["time"]),
                               str(s["updates"])]))
    (folder / "index.csv").write_text("\n".join(lines) + "\n")
    return summaries


# ---------------------------------------------------------------- checks

def png_size(test, path, min_bytes=5000):
    """(width, height) of a PNG after checking it exists and is not trivially small."""
    test.assertTrue(path.is_file(), f"{path} missing")
    data = path.read_bytes()
    test.assertGreater(len(data), min_bytes, f"{path} is suspiciously small")
    test.assertTrue(data.startswith(b"\x89PNG\r\n\x1a\n"), f"{path} is not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    test.assertGreater(width, 200)
    test.assertGreater(height, 150)
    return width, height


def overlay_tables(text):
    """{run_id: {quantity: [simulated, real, difference, ratio] cells}} from overlay.md."""
    tables, current = {}, None
    for line in text.splitlines():
        heading = re.match(r"^## (\S+)$", line)
        if heading:
            current = tables.setdefault(heading.group(1), {})
        elif current is not None and line.startswith("| ") and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] != "quantity":
                current[cells[0]] = cells[1:]
    tables.pop("Figures", None)
    return tables


def cell_number(text):
    return math.nan if text == "\u2014" else float(text)


class OverlayTest(unittest.TestCase):
    """One overlay.py run over the two synthetic folders, shared by the tests below."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="asgd_overlay_test_"))
        cls.sim = cls.tmp / "runs" / "tiny"
        cls.real = cls.tmp / "runs" / "tiny-cluster"
        cls.sim_summaries = write_experiment(cls.sim, PAIRED + (ONLY_SIM,), real=False)
        cls.real_summaries = write_experiment(cls.real, (ONLY_REAL,) + PAIRED, real=True)
        cls.result = run_overlay(cls.sim, cls.real)
        cls.md = cls.real / "overlay.md"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_exits_zero_and_prints_overlay_md_last(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        last = self.result.stdout.strip().splitlines()[-1]
        self.assertEqual(Path(last).resolve(), self.md.resolve())

    def test_one_figure_per_metric_with_two_panels(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        for metric in METRICS:
            width, height = png_size(self, self.real / f"overlay_{metric}.png")
            self.assertGreater(width, 1.5 * height, f"{metric}: expected epoch and time panels")
            self.assertTrue((self.real / f"overlay_{metric}.svg").is_file())
        svg = (self.real / "overlay_train_loss.svg").read_text()
        for run_id in PAIRED:
            self.assertIn(f"{run_id} simulated", svg)
            self.assertIn(f"{run_id} real", svg)
        self.assertIn("wall-clock", svg)  # the time axis says which seconds
        self.assertNotIn(ONLY_SIM, svg)
        self.assertNotIn(ONLY_REAL, svg)

    def test_table_equals_summary_json(self):
        tables = overlay_tables(self.md.read_text())
        self.assertEqual(set(tables), set(PAIRED))
        for run_id in PAIRED:
            sim, real = self.sim_summaries[run_id], self.real_summaries[run_id]
            expected = {
                "final train loss": (sim["final"]["train_loss"], real["final"]["train_loss"]),
                "final test accuracy": (sim["final"]["test_accuracy"],
                                        real["final"]["test_accuracy"]),
                "time (s): virtual / wall-clock": (sim["time"], real["time"]),
                "updates": (sim["updates"], real["updates"]),
                "mean staleness": (sim["staleness"]["mean"], real["staleness"]["mean"]),
            }
            self.assertEqual(set(tables[run_id]), set(expected))
            for quantity, (a, b) in expected.items():
                with self.subTest(run=run_id, quantity=quantity):
                    cells = [cell_number(c) for c in tables[run_id][quantity]]
                    for got, want in zip(cells, (a, b, b - a)):
                        self.assertTrue(math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-12),
                                        f"{got} != {want}")
                    if a != 0:
                        self.assertTrue(math.isclose(cells[3], b / a, rel_tol=1e-5))
                    else:
                        self.assertTrue(math.isnan(cells[3]))

    def test_overlay_md_links_the_figures(self):
        text = self.md.read_text()
        for metric in METRICS:
            self.assertIn(f"(overlay_{metric}.png)", text)
        self.assertIn("virtual", text)
        self.assertIn("wall-clock", text)

    def test_unpaired_runs_are_a_warning(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        warnings = [line for line in self.result.stderr.splitlines() if "warning" in line]
        self.assertTrue(any(ONLY_SIM in line and str(self.sim) in line for line in warnings),
                        self.result.stderr)
        self.assertTrue(any(ONLY_REAL in line and str(self.real) in line for line in warnings),
                        self.result.stderr)
        self.assertNotIn("error", self.result.stderr)

    def test_one_x_axis_one_metric_to_another_folder(self):
        out = self.tmp / "elsewhere"
        result = run_overlay(self.sim, self.real, "--x", "time", "--metric", "train_loss",
                             "--out", out, "--format", "png")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(Path(result.stdout.strip().splitlines()[-1]).resolve(),
                         (out / "overlay.md").resolve())
        self.assertEqual(sorted(p.name for p in out.iterdir()),
                         ["overlay.md", "overlay_train_loss.png"])
        width, _ = png_size(self, out / "overlay_train_loss.png")
        two_panels, _ = png_size(self, self.real / "overlay_train_loss.png")
        self.assertLess(width, two_panels * 0.8)


class OverlayErrorTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="asgd_overlay_err_"))
        cls.sim = cls.tmp / "sim"
        cls.real = cls.tmp / "real"
        cls.other = cls.tmp / "other"
        write_experiment(cls.sim, ("async-seed1",), real=False)
        write_experiment(cls.real, ("async-seed1",), real=True)
        write_experiment(cls.other, ("sync-seed9",), real=True)
        cls.empty = cls.tmp / "empty_folder"
        cls.empty.mkdir()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assert_usage_error(self, result, *named):
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertIn("error", result.stderr)
        for text in named:
            self.assertIn(str(text), result.stderr)
        self.assertNotIn("Traceback", result.stderr)

    def test_not_an_experiment_folder(self):
        self.assert_usage_error(run_overlay(self.empty, self.real), self.empty)
        self.assert_usage_error(run_overlay(self.sim, self.tmp / "missing"), self.tmp / "missing")

    def test_no_common_run_names_both_folders(self):
        self.assert_usage_error(run_overlay(self.sim, self.other), self.sim, self.other)

    def test_bad_metric_and_x(self):
        self.assert_usage_error(run_overlay(self.sim, self.real, "--metric", "accuracy"),
                                "--metric", "accuracy")
        self.assert_usage_error(run_overlay(self.sim, self.real, "--x", "wall"), "--x", "wall")

    def test_started_with_the_first_python3_on_path(self):
        """Whichever python3 runs the tests, overlay.py gets to matplotlib (re-exec)."""
        python = shutil.which("python3") or sys.executable
        result = run_overlay(self.sim, self.real, "--metric", "train_loss", "--x", "epoch",
                             "--out", self.tmp / "path_python", python=python)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue((self.tmp / "path_python" / "overlay_train_loss.png").is_file())


if __name__ == "__main__":
    unittest.main()
