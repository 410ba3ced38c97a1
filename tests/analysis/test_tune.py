"""Tests of analysis/tune.py: each engine's training keys picked from a tuning sweep by
the stated rule, on runs built in memory (no files, no subprocess).

What it is: a grid (train.lr x train.momentum) over two worker counts and three seeds
whose times to target are known by construction; checks that the pick is the rule's
(censored points never win on the seeds that did reach; conditions weigh alike), that
every point is in the report, and that the tuned config sets each engine's train and
refuses the tuning's own seeds.
What it is not: a test of the simulator.
"""

import math
import sys
import unittest
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from asgdsim.analysis import groups  # noqa: E402
from asgdsim.analysis import rundata  # noqa: E402
from asgdsim.analysis import tune  # noqa: E402

TIMES = np.round(np.arange(0.0, 20.01, 0.5), 10)
SEEDS = (101, 102, 103)
TARGET = groups.Target("test_accuracy", 0.8)


def make_run(engine, seed, sweep, reach, status="completed"):
    """Accuracy 0.1 until `reach` (inf: never), then 0.9."""
    accuracy = np.where(TIMES < reach, 0.1, 0.9)
    metrics = pd.DataFrame({"time": TIMES, "updates": np.arange(len(TIMES)) * 10.0,
                            "train_loss": 2.0 - accuracy, "test_accuracy": accuracy})
    summary = {"status": status, "engine": engine, "seed": seed,
               "final": {"train_loss": 2.0 - float(accuracy[-1]), "test_accuracy": float(accuracy[-1])}}
    rid = "-".join([engine] + [f"{k}={v}" for k, v in sweep.items()] + [f"seed{seed}"])
    return rundata.Run(run_id=rid, folder=Path("/nonexistent") / rid, engine=engine, sweep=dict(sweep),
                       seed=seed, status=status, summary=summary, metrics=metrics)


def crossing(reach):
    """Where the step 0.1 -> 0.9 at `reach` crosses 0.8, interpolated (groups.crossing)."""
    first = TIMES[np.argmax(TIMES >= reach)]
    return first - 0.5 + 0.5 * (0.8 - 0.1) / (0.9 - 0.1)


# (lr, momentum) -> {workers: reach times per seed}; None: that seed never reaches
GRID = {
    (0.01, 0.0): {4: (6, 6, 6), 16: (3, 3, 3)},          # slow everywhere
    (0.1, 0.0): {4: (4, 4, 4), 16: (1, 1, 1)},           # the best eligible: geometric mean 2
    (0.1, 0.9): {4: (1, 1, 1), 16: (0.5, None, None)},   # fastest where it reaches, 1 of 3 at 16
    (1.0, 0.0): {4: (2, 2.5, 3), 16: (2.5, 2.5, 2.5)},   # mean 2.5 both: geometric mean 2.5
}


def experiment(grid=GRID, engines=("async",), statuses=None):
    runs = []
    for engine in engines:
        for (lr, mom), by_workers in grid.items():
            for workers, reaches in by_workers.items():
                for seed, reach in zip(SEEDS, reaches):
                    sweep = {"cluster.workers": workers, "engine.train.lr": lr, "engine.train.momentum": mom}
                    status = (statuses or {}).get((engine, lr, mom, workers, seed), "completed")
                    runs.append(make_run(engine, seed, sweep, math.inf if reach is None else reach, status))
    return rundata.Experiment(folder=Path("/nonexistent/tune"), name="tune", config=None,
                              sweep_keys=["cluster.workers", "engine.train.lr", "engine.train.momentum"],
                              engine_order=list(engines), runs=runs)


class TuneTest(unittest.TestCase):
    def setUp(self):
        self.tuning = tune.tune(experiment(), tune.Rule(target=TARGET))

    def test_the_pick_is_the_rules(self):
        self.assertEqual(self.tuning.grid_keys, ["engine.train.lr", "engine.train.momentum"])
        self.assertEqual(self.tuning.condition_keys, ["cluster.workers"])
        pick = self.tuning.chosen["async"]
        self.assertEqual((pick.values["engine.train.lr"], pick.values["engine.train.momentum"]), (0.1, 0.0))
        self.assertAlmostEqual(pick.score, math.sqrt(crossing(4) * crossing(1)), delta=1e-12)
        by_values = {(p.values["engine.train.lr"], p.values["engine.train.momentum"]): p
                     for p in self.tuning.points["async"]}
        # lr 0.1, momentum 0.9 is fastest on the seeds that reached the target, but 2 of 3
        # at 16 workers never did: not eligible, whatever the mean of the one that did
        censored = by_values[(0.1, 0.9)]
        self.assertFalse(censored.eligible)
        self.assertEqual(censored.reached, 4)
        self.assertAlmostEqual(censored.bound, (3 * crossing(1) + crossing(0.5) + 2 * TIMES[-1]) / 6, delta=1e-12)
        self.assertAlmostEqual(by_values[(1.0, 0.0)].score, 2.5 - 0.5 + 0.4375, delta=1e-12)

    def test_the_report_shows_every_point_and_the_rule(self):
        text = tune.markdown(self.tuning)
        self.assertIn("Rule: smallest time to test accuracy \u2265 0.8", text)
        self.assertIn("seeds 101, 102, 103", text)
        rows = [line for line in text.splitlines() if line.startswith("| 0.") or line.startswith("| 1")]
        self.assertEqual(len(rows), len(GRID))
        [picked] = [line for line in rows if "\u25c0 picked" in line]
        self.assertTrue(picked.startswith("| 0.1 | 0 |"), picked)
        self.assertIn("cluster.workers=16: 1 of 3 reached", text)

    def test_a_diverged_run_makes_its_point_ineligible(self):
        statuses = {("async", 0.1, 0.0, 4, 102): "diverged"}
        tuning = tune.tune(experiment(statuses=statuses), tune.Rule(target=TARGET))
        self.assertEqual(tuning.chosen["async"].values["engine.train.lr"], 1.0)

    def test_with_no_eligible_point_the_report_says_so(self):
        grid = {(0.1, 0.0): {4: (1, None, None)}, (0.2, 0.0): {4: (1, 1, None)}}
        tuning = tune.tune(experiment(grid), tune.Rule(target=TARGET))
        self.assertTrue(tuning.fallback["async"])
        self.assertEqual(tuning.chosen["async"].values["engine.train.lr"], 0.2)  # reached most often
        self.assertIn("no grid point is eligible", tune.markdown(tuning))

    def test_final_rule(self):
        tuning = tune.tune(experiment(), tune.Rule(final="test_accuracy"))
        # every point ends at 0.9 except (0.1, 0.9), whose censored seeds end at 0.1
        self.assertEqual(tuning.chosen["async"].values["engine.train.lr"], 0.01)  # ties: the first
        self.assertIn("highest final test accuracy", tune.markdown(tuning))


class TunedConfigTest(unittest.TestCase):
    STUDY = {"name": "study", "seed": 1, "repeats": 3, "model": {"type": "mlp"},
             "engines": [{"type": "async", "train": {"batch_size": 16}}, {"type": "sync", "name": "s"}],
             "sweep": {"cluster.workers": [4, 16]}}

    def setUp(self):
        self.tuning = tune.tune(experiment(engines=("async", "s")), tune.Rule(target=TARGET))

    def test_each_engine_gets_its_pick_as_its_train(self):
        out = tune.tuned_config(self.STUDY, self.tuning)
        self.assertEqual(out["name"], "study_tuned")
        self.assertEqual(out["engines"][0]["train"], {"batch_size": 16, "lr": 0.1, "momentum": 0.0})
        self.assertEqual(out["engines"][1]["train"], {"lr": 0.1, "momentum": 0.0})
        self.assertIn("picked by analysis/tune.py from tune (seeds 101, 102, 103", out["description"])
        self.assertEqual(self.STUDY["engines"][0]["train"], {"batch_size": 16})  # the input is left alone
        self.assertIn('"engines": [\n    {"type": "async"', tune.config_text(out))

    def test_a_tuned_study_tuned_again_is_named_and_described_once(self):
        once = tune.tuned_config(self.STUDY, self.tuning)
        twice = tune.tuned_config(once, self.tuning)
        self.assertEqual(twice, once)
        self.assertEqual(twice["description"].count("picked by analysis/tune.py"), 1)

    def test_the_tunings_seeds_and_grid_keys_are_refused(self):
        with self.assertRaisesRegex(tune.UsageError, r"seeds \[101, 102, 103\] include the tuning runs' seeds"):
            tune.tuned_config(dict(self.STUDY, seed=101), self.tuning)
        with self.assertRaisesRegex(tune.UsageError, "sweeps train.lr, which the tuning picks"):
            tune.tuned_config(dict(self.STUDY, sweep={"train.lr": [0.1]}), self.tuning)
        with self.assertRaisesRegex(tune.UsageError, r"engines\[0\] \('ssp'\) has no tuned point"):
            tune.tuned_config(dict(self.STUDY, engines=[{"type": "ssp"}]), self.tuning)

    def test_no_training_key_swept_is_refused(self):
        exp = experiment()
        exp.sweep_keys = ["cluster.workers"]
        with self.assertRaisesRegex(tune.UsageError, "no training key is swept"):
            tune.tune(exp, tune.Rule(target=TARGET))


if __name__ == "__main__":
    unittest.main()
