"""tests/python/test_checkpoint.py — checkpoints with a PyTorch model (docs/reliability.md,
"Checkpoints"): asgdsim.run interrupted at a random update (interrupt_after_updates takes
the path SIGINT takes: the run ends as interrupted and KeyboardInterrupt is raised), then
run again, resumes from the run's checkpoint and writes the files an uninterrupted run
writes, byte for byte (summary.json but wall_seconds), for async, sync and diloco. The
model has dropout, so each gradient's randomness (keyed by the job) is carried too.

    ASGDSIM_PYTHONPATH=build/python /usr/bin/python3 -m unittest tests/python/test_checkpoint.py -v
"""
import json
import os
import random
import shutil
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.abspath(os.environ.get("ASGDSIM_PYTHONPATH", os.path.join(REPO, "build", "python")))
sys.path.insert(0, PKG)
os.environ.setdefault("ASGDSIM_CACHE_DIR", "off")

import torch  # noqa: E402

import asgdsim  # noqa: E402

SEED = int(os.environ.get("ASGD_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
print(f"test_checkpoint.py: interruption points drawn with ASGD_TEST_SEED={SEED}", file=sys.stderr)
DRAW = random.Random(SEED)


def synthetic(n, features=12, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    teacher = torch.randn(features, classes, generator=g)
    return x, (x @ teacher).argmax(1)


def net():
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                               torch.nn.Linear(16, 4))


def files(run_dir):
    out = {}
    for name in ("metrics.csv", "staleness.csv", "workers.csv"):
        with open(os.path.join(run_dir, name)) as f:
            out[name] = f.read()
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    s.pop("wall_seconds")
    out["summary.json"] = s
    return out


class Checkpoint(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="asgdsim-ck-")
        self.train = synthetic(512, seed=1)
        self.test = synthetic(128, seed=2)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_in(self, out, cfg, **kw):
        return asgdsim.run(cfg, out=os.path.join(self.tmp, out), quiet=True, model=net, data=self.train,
                           test_data=self.test, **kw)

    def check(self, engine, updates, train=None):
        cfg = {"name": "t", "seed": 3, "model": {"type": "torch"}, "data": {"type": "torch"},
               "train": train or {"batch_size": 16, "lr": 0.1, "momentum": 0.9}, "stop": {"updates": updates},
               "eval": {"every": 5, "unit": "updates", "train_samples": 256},
               "cluster": {"workers": 4, "compute": {"dist": "exponential", "mean": 0.001},
                           "network": {"latency": 0.0002, "bandwidth": 5e5}},
               "engines": [engine]}
        at = DRAW.randrange(1, updates)
        with self.subTest(engine=engine["type"], interrupted_after=at):
            self.run_in("ref", cfg)
            with self.assertRaises(KeyboardInterrupt):
                self.run_in("ck", cfg, interrupt_after_updates=at)
            run = os.path.join(self.tmp, "ck", "t", engine["type"] + "-seed3")
            self.assertTrue(os.path.exists(os.path.join(run, "checkpoint.bin")))
            with open(os.path.join(run, "summary.json")) as f:
                self.assertEqual(json.load(f)["status"], "interrupted")
            res = self.run_in("ck", cfg)
            self.assertEqual(res.exit_code, 0)
            self.assertFalse(os.path.exists(os.path.join(run, "checkpoint.bin")))
            with open(os.path.join(run, "meta.json")) as f:
                self.assertGreaterEqual(json.load(f)["resumed"]["updates"], at)
            self.assertEqual(files(os.path.join(self.tmp, "ref", "t", engine["type"] + "-seed3")), files(run))

    def test_async(self):
        self.check({"type": "async"}, 40)

    def test_sync(self):
        self.check({"type": "sync"}, 30)

    def test_diloco(self):
        self.check({"type": "diloco", "steps": 3}, 12, train={"batch_size": 16, "lr": 0.003, "optimizer": "adamw"})

    def test_bad_option_is_refused(self):
        with self.assertRaises(asgdsim.InputError) as e:
            self.run_in("bad", {"name": "t", "model": {"type": "torch"}, "data": {"type": "torch"}},
                        checkpoint_every=-1)
        self.assertIn("checkpoint_every=-1: give the wall seconds between a run's checkpoints", str(e.exception))


if __name__ == "__main__":
    unittest.main()
