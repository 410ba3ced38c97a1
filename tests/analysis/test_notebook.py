"""analysis/examples/first_study.ipynb executes, cell by cell, on a small run folder.

What it is: the notebook's code cells run in order in one namespace (exec, as Jupyter
would; jupyter/nbconvert are not needed) in a fresh /usr/bin/python3 with the Agg
backend, pointed by ASGD_STUDY at a synthetic experiment (2 engines x 2 worker counts x
3 seeds and one stalled run, written like asgdsim's); checks that it ends with the
per-group table of time to target and saves the figure, and that the README's command
(analysis/examples/run_notebook.py, which runs it the same way) prints that table and
saves the figure. It is also plain nbformat JSON
(nbformat 4, code cells without outputs), so that a diff shows only what was written.
Set ASGD_NOTEBOOK_STUDY to run it on a real folder instead (the README's first study).
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ANALYSIS = HERE.parents[1] / "analysis"
NOTEBOOK = ANALYSIS / "examples" / "first_study.ipynb"
sys.path.insert(0, str(HERE))

from test_targets_and_seeds import accuracy_curve, make_run, reach_time, write_folder  # noqa: E402

EXAMPLES = ANALYSIS / "examples"
RUNNER = f"""
import json, sys
sys.path.insert(0, {str(EXAMPLES)!r})
from run_notebook import run_cells
summary = run_cells(sys.argv[1])["summary"]
print("GROUPS", len(summary))
print("MEANS", json.dumps([None if m != m else m for m in summary["mean"]]))
"""


def synthetic_study(folder):
    """2 engines x 2 worker counts x 3 seeds and one stalled run, written like asgdsim's."""
    runs = [make_run(e, s, {"cluster.workers": w}, accuracy_curve(reach_time(e, w, s)))
            for e in ("async", "sync") for w in (4, 16) for s in (1, 2, 3)]
    runs.append(make_run("async", 4, {"cluster.workers": 16}, accuracy_curve(math.inf), status="stalled"))
    write_folder(folder, runs)


class NotebookTest(unittest.TestCase):
    def test_the_notebook_executes(self):
        with tempfile.TemporaryDirectory() as tmp:
            study = os.environ.get("ASGD_NOTEBOOK_STUDY")
            study = Path(study).resolve() if study else None
            if not study:
                study = Path(tmp) / "first_study"
                synthetic_study(study)
            figure = Path(tmp) / "figure.png"
            env = dict(os.environ, ASGD_STUDY=str(study), ASGD_FIGURE=str(figure),
                       ASGD_REPO=str(ANALYSIS.parent), MPLBACKEND="Agg")
            result = subprocess.run(["/usr/bin/python3", "-c", RUNNER, str(NOTEBOOK)],
                                    capture_output=True, text=True, cwd=tmp, env=env,
                                    timeout=120)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            self.assertIn("GROUPS 4", result.stdout)
            self.assertTrue(figure.is_file() and figure.stat().st_size > 5000)
            if not os.environ.get("ASGD_NOTEBOOK_STUDY"):
                means = json.loads(result.stdout.split("MEANS", 1)[1].strip().splitlines()[0])
                # async with 4 workers: accuracy 0.1 up to the evaluation before 1 + 0.5 seed,
                # 0.9 from it (evaluations 0.5 s apart); target 0.8 is crossed 7/8 of the way
                crossing = [r - 0.5 + 0.5 * (0.8 - 0.1) / (0.9 - 0.1) for r in (1.5, 2.0, 2.5)]
                self.assertAlmostEqual(means[0], sum(crossing) / 3, delta=1e-12)

    def test_the_readme_command_prints_the_summary_and_saves_the_figure(self):
        """run_notebook.py STUDY (the README's command): the per-group table on stdout, the
        figure at STUDY/figure_notebook.png, its path on the last line; a missing folder
        is exit 2 naming it."""
        with tempfile.TemporaryDirectory() as tmp:
            study = Path(tmp) / "first_study"
            synthetic_study(study)
            result = subprocess.run(["/usr/bin/python3", str(EXAMPLES / "run_notebook.py"), str(study)],
                                    capture_output=True, text=True, cwd=tmp, timeout=120,
                                    env=dict(os.environ, MPLBACKEND="Agg"))
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            lines = result.stdout.strip().splitlines()
            self.assertIn("time to test accuracy >= 0.8 (s), per group:", lines)
            table = "\n".join(lines)
            for engine in ("async", "sync"):
                self.assertRegex(table, rf"(?m)^{engine}\s+4\s")  # a row per group
            figure = study / "figure_notebook.png"
            self.assertEqual(lines[-1], f"figure: {figure}")
            self.assertTrue(figure.is_file() and figure.stat().st_size > 5000)
            missing = subprocess.run(["/usr/bin/python3", str(EXAMPLES / "run_notebook.py"), str(Path(tmp) / "nope")],
                                     capture_output=True, text=True, timeout=60)
            self.assertEqual(missing.returncode, 2)
            self.assertIn("nope: no such experiment folder", missing.stderr)

    def test_plain_nbformat_without_outputs(self):
        notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
        self.assertEqual(notebook["nbformat"], 4)
        code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
        self.assertTrue(code)
        for cell in code:
            self.assertEqual(cell["outputs"], [])
            self.assertIsNone(cell["execution_count"])


if __name__ == "__main__":
    unittest.main()
