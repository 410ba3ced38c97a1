"""Issue #31: corrupt input is said, never silently read wrong.

What it is: a metrics.csv with a row of the wrong field count, a cell that is not a
number, and a last line cut mid-number without its newline (`0.` of `0.5`): each is left
out with a warning naming the run and the line, and the good rows are kept. study_table.py
on bad input (a README that is not text) says so in one line and exits 2, no traceback.
"""

import contextlib
import io
import json
import math
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ANALYSIS = HERE.parents[1] / "analysis"
PYTHON = ANALYSIS.parent / "python"
sys.path.insert(0, str(PYTHON))

from asgdsim.analysis import rundata  # noqa: E402

HEADER = "time,updates,train_loss,test_accuracy\n"


def write_run(root, name, metrics_text, status="completed"):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text(metrics_text)
    (folder / "summary.json").write_text(json.dumps(
        {"status": status, "engine": "async", "seed": 1, "final": {"train_loss": 0.5},
         "time": 2.0, "updates": 20}))
    return folder


class CorruptRowsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name) / "exp"

    def tearDown(self):
        self.tmp.cleanup()

    def read(self):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            experiment = rundata.load_experiment(self.root)
        return {run.run_id: run for run in experiment.runs}, stderr.getvalue()

    def test_malformed_rows_are_warned_about_by_run_and_line_and_good_rows_kept(self):
        write_run(self.root, "async-seed1",
                  HEADER + "0,0,2.0,0.1\n1,10,1.0\n2,20,oops,0.5\n3,30,0.7,0.6\n")
        runs, stderr = self.read()
        metrics = runs["async-seed1"].metrics
        self.assertEqual(list(metrics["time"]), [0.0, 3.0])  # the two good rows
        self.assertIn("run async-seed1", stderr)
        self.assertIn("line 3: 3 fields, the header has 4", stderr)
        self.assertIn("line 4: not a number: train_loss='oops'", stderr)
        self.assertTrue(any("line 3" in p for p in runs["async-seed1"].problems))

    def test_a_last_line_cut_mid_number_is_not_read_as_zero(self):
        write_run(self.root, "sync-seed2", HEADER + "0,0,2.0,0.1\n1,10,1.0,0.5\n2,20,0.")
        runs, stderr = self.read()
        metrics = runs["sync-seed2"].metrics
        self.assertEqual(list(metrics["train_loss"]), [2.0, 1.0])  # no 0.0 from "0."
        self.assertIn("run sync-seed2", stderr)
        self.assertIn("line 4: last line has no newline", stderr)

    def test_nan_inf_and_empty_cells_are_numbers_not_corruption(self):
        write_run(self.root, "async-seed3", HEADER + "0,0,-nan,\n1,10,inf,nan\n")
        runs, stderr = self.read()
        self.assertEqual(stderr, "")
        train = list(runs["async-seed3"].metrics["train_loss"])
        self.assertTrue(math.isnan(train[0]) and math.isinf(train[1]))

    def test_a_file_with_no_good_row_is_ignored_with_its_reason(self):
        write_run(self.root, "async-seed4", HEADER + "1,2\n3,4\n")
        runs, stderr = self.read()
        self.assertIsNone(runs["async-seed4"].metrics)
        self.assertIn("no well-formed row", stderr)
        self.assertIn("line 2", stderr)


class PlotWarnings(unittest.TestCase):
    """What plot.py read silently (issue 42, Medium 10): each is warned about and listed
    among the run's problems (the report's "Runs with problems")."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name) / "exp"

    def tearDown(self):
        self.tmp.cleanup()

    def problems(self):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            experiment = rundata.load_experiment(self.root)
        return {run.run_id: run.problems for run in experiment.runs}, stderr.getvalue()

    def test_a_misspelt_metrics_header(self):
        write_run(self.root, "async-seed1", "time,updates,train_los,test_accuracy\n0,0,2.0,0.1\n1,10,1.0,0.5\n")
        problems, stderr = self.problems()
        self.assertIn("unknown column train_los; no column train_loss", stderr)
        self.assertTrue(any("misspelt" in p for p in problems["async-seed1"]))

    def test_a_completed_run_without_rows(self):
        write_run(self.root, "async-seed1", HEADER)
        folder = write_run(self.root, "sync-seed1", HEADER + "0,0,2.0,0.1\n")
        (folder / "metrics.csv").unlink()
        problems, stderr = self.problems()
        self.assertIn("summary.json says completed, but metrics.csv holds no rows", stderr)
        self.assertIn("summary.json says completed, but metrics.csv is missing", stderr)
        self.assertTrue(problems["async-seed1"] and problems["sync-seed1"])

    def test_nan_finals_in_a_completed_summary(self):
        folder = write_run(self.root, "async-seed1", HEADER + "0,0,2.0,0.1\n")
        (folder / "summary.json").write_text(json.dumps({"status": "completed", "final": {"train_loss": None}}))
        problems, stderr = self.problems()
        self.assertIn("its final train_loss is not a number", stderr)
        self.assertTrue(problems["async-seed1"])

    def test_an_index_row_whose_folder_is_gone(self):
        write_run(self.root, "async-seed1", HEADER + "0,0,2.0,0.1\n")
        (self.root / "index.csv").write_text(
            "run_id,engine,seed,status,final_train_loss,final_test_loss,final_test_accuracy,time,updates\n"
            "async-seed1,async,1,completed,0.5,nan,nan,2,20\nsync-seed1,sync,1,completed,0.5,nan,nan,2,20\n")
        problems, stderr = self.problems()
        self.assertIn("run sync-seed1: index.csv lists it, but its folder is gone", stderr)
        self.assertTrue(problems["sync-seed1"])
        self.assertEqual(problems["async-seed1"], [])

    def test_a_well_formed_run_says_nothing(self):
        write_run(self.root, "async-seed1", HEADER + "0,0,2.0,0.1\n1,10,1.0,0.5\n")
        problems, stderr = self.problems()
        self.assertEqual(stderr, "")
        self.assertEqual(problems["async-seed1"], [])


class StudyTableBadInputTest(unittest.TestCase):
    def test_bad_readme_is_one_line_and_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "exp"
            write_run(root, "async-seed1", HEADER + "0,0,2.0,0.1\n1,10,1.0,0.5\n")
            readme = Path(tmp) / "README.md"
            readme.write_bytes(b"\xf0\x28\x8c\x28 not text")
            result = subprocess.run(["/usr/bin/python3", str(ANALYSIS / "study_table.py"),
                                     str(root), "--readme", str(readme)],
                                    capture_output=True, text=True, timeout=60)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertNotIn("Traceback", result.stderr)
            self.assertIn("study_table.py: error:", result.stderr)
            self.assertIn("not UTF-8", result.stderr)


if __name__ == "__main__":
    unittest.main()
