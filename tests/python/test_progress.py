"""tests/python/test_progress.py — following a long run (issue #47 part 6): progress= for a
caller that is not a terminal (a notebook, a script under a scheduler): one event per
metrics row as it is recorded, one when the run ends; the callback observes only (the run
folders are the same bytes without it) and one that raises fails its run, saying so.
metrics.csv holds the rows so far while the run goes on (one test sleeps a wall second).

    ASGDSIM_PYTHONPATH=build/python /usr/bin/python3 -m unittest tests/python/test_progress.py -v
"""
import csv
import json
import os
import sys
import tempfile
import time
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.abspath(os.environ.get("ASGDSIM_PYTHONPATH", os.path.join(REPO, "build", "python"))))

import asgdsim  # noqa: E402
import asgdsim.progress  # noqa: E402

CONFIG = {"name": "p", "model": {"type": "quadratic", "dim": 4}, "stop": {"updates": 40}, "eval": {"every": 10, "unit": "updates"},
          "cluster": {"workers": 2}, "engines": [{"type": "async"}, {"type": "sync"}]}
WALL = ("wall", "seconds_per", "host", "start", "end", "command", "threads", "jobs", "elapsed", "pid", "date")


def rows(folder, run_id):
    with open(os.path.join(folder, run_id, "metrics.csv")) as f:
        return list(csv.DictReader(f))


def summary(folder, run_id):
    with open(os.path.join(folder, run_id, "summary.json")) as f:
        return {k: v for k, v in json.load(f).items() if not any(s in k for s in WALL)}


class Progress(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def test_an_event_per_row_and_one_at_the_end_and_the_files_unchanged(self):
        events = []
        res = asgdsim.run(CONFIG, out=os.path.join(self.tmp.name, "a"), quiet=True, progress=events.append)
        plain = asgdsim.run(CONFIG, out=os.path.join(self.tmp.name, "b"), quiet=True)
        self.assertEqual(res.exit_code, 0)
        run_ids = ["async-seed1", "sync-seed1"]
        self.assertEqual(sorted({e["run_id"] for e in events}), run_ids)
        for k, run_id in enumerate(run_ids):
            with open(os.path.join(res.folder, run_id, "metrics.csv"), "rb") as a, \
                    open(os.path.join(plain.folder, run_id, "metrics.csv"), "rb") as b:
                self.assertEqual(a.read(), b.read(), f"{run_id}: the callback changed metrics.csv")
            self.assertEqual(summary(res.folder, run_id), summary(plain.folder, run_id))
            mine = [e for e in events if e["run_id"] == run_id]
            during, end = mine[:-1], mine[-1]
            written = rows(res.folder, run_id)
            self.assertEqual([e["status"] for e in during], [""] * len(written))
            self.assertEqual([e["updates"] for e in during], [int(r["updates"]) for r in written])
            self.assertEqual([round(e["train_loss"], 6) for e in during],
                             [round(float(r["train_loss"]), 6) for r in written])
            self.assertEqual((end["status"], end["updates"], end["fraction"]), ("completed", 40, 1.0))
            self.assertEqual((end["run"], end["runs"]), (k, 2))
            fractions = [e["fraction"] for e in mine]
            self.assertEqual(fractions, sorted(fractions))

    def test_a_callback_that_raises_fails_its_run(self):
        def broken(event):
            raise ValueError("no bar today")
        with self.assertRaises(asgdsim.RunError) as e:
            asgdsim.run(CONFIG, out=self.tmp.name, quiet=True, progress=broken)
        self.assertIn("the progress callback raised while reporting progress", e.exception.message)
        self.assertIn("ValueError: no bar today", e.exception.message)
        self.assertEqual(summary(os.path.join(self.tmp.name, "p"), "async-seed1")["status"], "failed")

    def test_metrics_csv_holds_the_rows_so_far_while_the_run_goes_on(self):
        out = os.path.join(self.tmp.name, "c")
        path = os.path.join(out, "p", "async-seed1", "metrics.csv")
        seen = []  # data rows in metrics.csv at each row's event

        def follow(event):
            if event["status"]:
                return
            with open(path) as f:  # a whole CSV at every moment (each write is atomic)
                seen.append(len(list(csv.DictReader(f))))
            if len(seen) == 3:
                time.sleep(1.05)  # so the next row comes over a wall second after the last write
        asgdsim.run(dict(CONFIG, engines=[{"type": "async"}]), out=out, quiet=True, progress=follow)
        self.assertEqual(seen[0], 1)  # the first row is written at once
        self.assertEqual(seen[3], 4)  # and after a wall second, every row so far
        self.assertEqual(len(rows(os.path.join(out, "p"), "async-seed1")), len(seen))


class Bars(unittest.TestCase):
    """progress="bar": one bar per run that ends at 100 % with the run's status; text lines
    (a tenth of a run each) without tqdm; any other text is refused."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def run_with(self, bar, name):
        import io
        out = io.StringIO()
        bar._file = out
        asgdsim.run(CONFIG, out=os.path.join(self.tmp.name, name), quiet=True, progress=bar)
        return out.getvalue()

    @unittest.skipUnless(asgdsim.progress.Bar().uses_tqdm, "tqdm is not installed (python3-tqdm)")
    def test_a_tqdm_bar_per_run(self):
        text = self.run_with(asgdsim.progress.Bar(), "bar")
        for k, run_id in enumerate(["async-seed1", "sync-seed1"]):
            mine = [line for line in text.replace("\r", "\n").splitlines() if run_id in line]
            self.assertTrue(mine, text)
            self.assertIn(f"[{k + 1}/2] {run_id}: 100%", mine[-1])
            self.assertIn("completed", mine[-1])

    def test_a_line_each_tenth_without_tqdm(self):
        lines = self.run_with(asgdsim.progress.Bar(plain=True), "plain").splitlines()
        for k, run_id in enumerate(["async-seed1", "sync-seed1"]):
            mine = [line for line in lines if f"[{k + 1}/2] {run_id}:" in line]
            # 40 updates, a row each 10: rows at 0, 25, 50, 75 and 100 %, each a new tenth, then the end
            self.assertEqual([line.split(":")[1].split("%")[0].strip() for line in mine],
                             ["0", "25", "50", "75", "100", "100"])
            self.assertTrue(mine[-1].endswith("completed"), mine[-1])

    def test_another_word_is_refused(self):
        with self.assertRaises(asgdsim.InputError) as e:
            asgdsim.run(CONFIG, out=self.tmp.name, quiet=True, progress="tqdm")
        self.assertIn("progress='tqdm'", e.exception.message)
        self.assertEqual(os.listdir(self.tmp.name), [])


if __name__ == "__main__":
    unittest.main()
