"""Tests of asgdsim.analysis.data (python/asgdsim/analysis/data.py), the DataFrame API for
notebooks.

What it is: writes test_plot.py's synthetic experiment (2 engines x 2 worker counts x 2
seeds, one diverged run, one unfinished run, one run without meta.json) and checks that
load() is one tidy row per run and evaluation point holding exactly the metrics.csv
values, that summaries() has a row per run with summary.json's and meta.json's fields,
the sweep key as a plain column, and that the documented PYTHONPATH is all a fresh
interpreter needs (importing the package leaves sys.path as it was).
What it is not: no figures (test_figures.py) and no plot.py (test_plot.py).
"""

import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import pandas as pd

ANALYSIS = Path(__file__).resolve().parents[2] / "analysis"
PYTHON = ANALYSIS.parent / "python"
sys.path.insert(0, str(PYTHON))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from asgdsim.analysis import data as ad  # noqa: E402
from test_plot import (DIVERGED, ENGINES, SEEDS, UNFINISHED, WORKERS,  # noqa: E402
                       python_for_plot, run_id, write_experiment)


class DataFrameApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="asgd_data_test_"))
        cls.folder = cls.tmp / "tiny_scaling"
        cls.summaries_written = write_experiment(cls.folder)
        cls.run_ids = [run_id(e, w, s) for e in ENGINES for w in WORKERS for s in SEEDS]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_load_is_one_row_per_run_and_evaluation_point(self):
        df = ad.load(self.folder)
        self.assertEqual(list(df.columns[:6]),
                         ["run_id", "engine", "seed", "status", "group", "cluster.workers"])
        self.assertEqual(df.attrs["sweep_keys"], {"cluster.workers": "cluster.workers"})
        expected_rows = 0
        for rid in self.run_ids:
            metrics = pd.read_csv(self.folder / rid / "metrics.csv")
            expected_rows += len(metrics)
            mine = df[df.run_id == rid].reset_index(drop=True)
            self.assertEqual(len(mine), len(metrics), rid)
            for column in metrics.columns:  # every metrics column, the same numbers
                pd.testing.assert_series_equal(mine[column].astype(float),
                                               metrics[column].astype(float),
                                               check_names=False, obj=f"{rid}.{column}")
        self.assertEqual(len(df), expected_rows)
        one = df[df.run_id == run_id("sync", 4, 1)].iloc[0]
        self.assertEqual((one.engine, one.seed, one["cluster.workers"], one.status),
                         ("sync", 1, 4, "completed"))
        self.assertEqual(one.group, "sync, cluster.workers=4")
        self.assertTrue(pd.api.types.is_integer_dtype(df["cluster.workers"]))
        statuses = df.groupby("run_id").status.first()
        self.assertEqual(statuses[run_id(*DIVERGED)], "diverged")
        self.assertEqual(statuses[run_id(*UNFINISHED)], "unfinished")

    def test_summaries_is_one_row_per_run(self):
        runs = ad.summaries(self.folder).set_index("run_id")
        self.assertEqual(sorted(runs.index), sorted(self.run_ids))
        for rid in self.run_ids:
            written = self.summaries_written[rid]
            row = runs.loc[rid]
            if written is None:
                self.assertEqual(row.status, "unfinished")
                continue
            self.assertEqual(row.status, written["status"])
            for column, value in (("final_test_accuracy", written["final"]["test_accuracy"]),
                                  ("time", written["time"]), ("updates", written["updates"]),
                                  ("staleness_mean", written["staleness"]["mean"]),
                                  ("dropped_gradients", written["dropped_gradients"])):
                self.assertEqual(row[column], value, f"{rid}.{column}")
            if not math.isnan(written["final"]["train_loss"]):
                self.assertEqual(row.final_train_loss, written["final"]["train_loss"])
        self.assertTrue(math.isnan(runs.loc[run_id(*DIVERGED)].final_train_loss))
        self.assertEqual(runs.loc[run_id("sync", 2, 1)].iteration_time_mean, 0.025)
        self.assertEqual(runs.loc[run_id("async", 2, 1)].meta_host, "testhost")
        self.assertTrue(pd.isna(runs.loc[run_id(*DIVERGED)].meta_host))  # no meta.json
        self.assertEqual(runs.loc[run_id("async", 2, 1)].unused_future_field, "[1,2]")
        self.assertEqual(list(runs["cluster.workers"].drop_duplicates().sort_values()),
                         list(WORKERS))

    def test_staleness_and_workers_tables(self):
        hist = ad.staleness(self.folder)
        mine = hist[hist.run_id == run_id("async", 4, 1)]
        written = pd.read_csv(self.folder / run_id("async", 4, 1) / "staleness.csv")
        self.assertEqual(list(mine["count"]), list(written["count"].astype(float)))
        workers = ad.workers(self.folder)
        self.assertEqual(len(workers[workers.run_id == run_id("sync", 4, 1)]), 4)

    def test_one_read_serves_several_tables(self):
        experiment = ad.read(self.folder)
        self.assertIs(ad.read(experiment), experiment)
        self.assertEqual(len(ad.summaries(experiment)), len(self.run_ids))

    def test_sweep_column_names(self):
        # one naming rule (issue #32): the dotted key, as in index.csv and summary_table.csv
        self.assertEqual(ad.sweep_columns(self.folder), {"cluster.workers": "cluster.workers"})
        self.assertEqual(ad.sweep_columns(self.folder, reserved={"cluster.workers"}),
                         {"sweep.cluster.workers": "cluster.workers"})
        self.assertEqual(ad.plain_value({"type": "mlp", "hidden": [32]}),
                         '{"hidden":[32],"type":"mlp"}')

    def test_not_an_experiment(self):
        with self.assertRaises(ad.NotAnExperiment):
            ad.load(self.tmp / "nothing_here")

    def test_the_documented_pythonpath_is_enough(self):
        """A fresh interpreter, started elsewhere, with only the documented PYTHONPATH (the
        source tree's python/: no extension needed): asgdsim.analysis imports without
        touching sys.path (no flat module names such as stats or groups put in front of
        the user's own)."""
        code = ("import sys; before = list(sys.path)\n"
                "from asgdsim.analysis import data as ad\n"
                "import asgdsim.analysis as aa\n"
                "assert sys.path == before, (before, sys.path)\n"
                "assert 'stats' not in sys.modules and 'groups' not in sys.modules\n"
                f"df = ad.load({str(self.folder)!r})\n"
                f"runs = aa.summaries({str(self.folder)!r})\n"
                "print(len(df), len(runs), list(df.columns[:6]))\n")
        result = subprocess.run([python_for_plot(), "-c", code], capture_output=True, text=True, cwd=self.tmp,
                                timeout=120, env=dict(os.environ, PYTHONPATH=str(PYTHON)))
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = sum(len(pd.read_csv(self.folder / rid / "metrics.csv")) for rid in self.run_ids)
        self.assertEqual(result.stdout.split()[:2], [str(rows), str(len(self.run_ids))])

    def test_documented_in_the_module(self):
        doc = ad.__doc__
        for name in ("load(", "summaries(", "PYTHONPATH", "docs/outputs.md"):
            self.assertIn(name, doc)


if __name__ == "__main__":
    unittest.main()
