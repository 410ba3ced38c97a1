"""The two shipped examples (python/examples/) at much reduced size: each config, as
shipped, with tiny data, one seed and a short virtual-time budget, through asgdsim.run;
every run must end with finite train and test losses.

    ASGDSIM_PYTHONPATH=build/python /usr/bin/python3 -m unittest discover -s tests/python -p 'test_examples.py'

The package is found in $ASGDSIM_PYTHONPATH, else <repo>/build/python. Skipped when torch
or the data (Debian's dataset-fashion-mnist; fortunes: a small generated text replaces it)
is missing. About 10-20 s on one core.
"""
import json
import math
import os
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.environ.get("ASGDSIM_PYTHONPATH") or os.path.join(REPO, "build", "python"))
EXAMPLES = os.path.join(REPO, "python", "examples")
FASHION = "/usr/share/datasets/fashion-mnist"
FORTUNES = "/usr/share/games/fortunes"

try:
    import torch  # noqa: F401
    import asgdsim
    SKIP = None
except ImportError as e:  # no torch, or the package is not built
    SKIP = f"cannot import torch/asgdsim: {e}"


def example_config(name, file):
    """The shipped config with its module paths made absolute (a dict's base is the cwd)."""
    folder = os.path.join(EXAMPLES, name)
    with open(os.path.join(folder, file)) as f:
        cfg = json.load(f)
    for section, key in (("model", "module"), ("model", "loss"), ("data", "module")):
        if cfg.get(section, {}).get(key):
            cfg[section][key] = os.path.join(folder, cfg[section][key])
    cfg["repeats"] = 1
    return cfg


@unittest.skipIf(SKIP, SKIP or "")
class Examples(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="asgdsim_examples_")

    def tearDown(self):
        self.tmp.cleanup()

    def check(self, res, runs):
        self.assertEqual(res.exit_code, 0)
        s = res.summaries()
        self.assertEqual(len(s), runs, s[["run_id", "status"]])
        for _, r in s.iterrows():
            # "stalled": a run this short may not lower its train loss by 1 %; it still ran
            self.assertIn(r["status"], ("completed", "stalled"), r["run_id"])
            self.assertGreater(r["gradients"], 0, r["run_id"])
            for k in ("final_train_loss", "final_test_loss"):
                self.assertTrue(math.isfinite(r[k]), f"{r['run_id']}: {k} {r[k]}")
        d = res.load()
        self.assertTrue(d["train_loss"].map(math.isfinite).all())
        return s

    @unittest.skipUnless(os.path.isdir(FASHION), f"no Fashion-MNIST in {FASHION} (dataset-fashion-mnist)")
    def test_resnet_fmnist(self):
        cfg = example_config("resnet_fmnist", "resnet_fmnist.json")
        cfg["model"]["bn_samples"] = 64
        cfg["data"].update(train_limit=256, test_limit=64)
        cfg["cluster"]["workers"] = 4
        cfg["train"]["batch_size"] = 8
        cfg["stop"] = {"gradients": 12}
        cfg["eval"].update(every=1e9, unit="updates", train_samples=64)
        s = self.check(asgdsim.run(cfg, out=self.tmp.name, quiet=True), 4)
        self.assertEqual(sorted(s["engine"]), ["async", "backup2", "easgd", "sync"])
        self.assertTrue((s["final_test_accuracy"] >= 0).all())

    def test_char_transformer(self):
        cfg = example_config("char_transformer", "char_transformer.json")
        cfg["data"].update(train_limit=256, test_limit=32)
        cfg["train"]["batch_size"] = 4
        cfg["stop"] = {"gradients": 12}
        cfg["eval"].update(every=1e9, unit="updates", train_samples=32, test_samples=32)
        cfg["sweep"] = {"cluster.workers": [1, 4]}
        old = os.environ.get("CHAR_TEXT")
        if not os.path.isdir(FORTUNES) and old is None:  # no `fortunes` package: a small text
            path = os.path.join(self.tmp.name, "text.txt")
            with open(path, "w") as f:
                f.write("the quick brown fox jumps over the lazy dog.\n" * 400)
            os.environ["CHAR_TEXT"] = path
        try:
            s = self.check(asgdsim.run(cfg, out=os.path.join(self.tmp.name, "runs"), quiet=True), 4)
        finally:
            if old is None:
                os.environ.pop("CHAR_TEXT", None)
        # the LM's loss is per character: it starts near log(VOCAB)
        self.assertTrue((s["final_train_loss"] < math.log(97) + 1).all())

    @unittest.skipUnless(os.path.isdir(FORTUNES), f"no fortunes in {FORTUNES}")
    def test_char_transformer_diloco(self):
        """The DiLoCo study on the transformer, tiny: its four engines run, and DiLoCo and
        local SGD send one push and one pull per worker per round of H steps."""
        cfg = example_config("char_transformer", "diloco.json")
        cfg["data"].update(train_limit=256, test_limit=32)
        cfg["train"]["batch_size"] = 4
        cfg["cluster"]["workers"] = 2
        cfg["engines"][0]["steps"] = cfg["engines"][1]["steps"] = 2
        cfg["stop"] = {"gradients": 8}
        cfg["eval"].update(every=1e9, unit="updates", train_samples=32, test_samples=32)
        s = self.check(asgdsim.run(cfg, out=self.tmp.name, quiet=True), 4)
        self.assertEqual(sorted(s["engine"]), ["async", "diloco", "local_sgd", "sync"])
        for engine in ("diloco", "local_sgd"):  # 8 gradients = 2 rounds of 2 workers x 2 steps
            r = s[s["engine"] == engine].iloc[0]
            self.assertEqual(r["messages_to_server"], 4, engine)


    @unittest.skipUnless(os.path.isdir(FORTUNES), f"no fortunes in {FORTUNES}")
    def test_char_transformer_streaming(self):
        """The Streaming DiLoCo study on the transformer, tiny: its three engines run, and a
        synchronisation of one fragment of four is a quarter of DiLoCo's (the 4-bit one less)."""
        cfg = example_config("char_transformer", "streaming.json")
        cfg["data"].update(train_limit=256, test_limit=32)
        cfg["train"]["batch_size"] = 4
        cfg["cluster"]["workers"] = 2
        for e in cfg["engines"]:
            e["steps"] = 8  # 4 fragments, overlap 1 < 8 / 4
        cfg["stop"] = {"gradients": 32}
        cfg["eval"].update(every=1e9, unit="updates", train_samples=32, test_samples=32)
        s = self.check(asgdsim.run(cfg, out=self.tmp.name, quiet=True), 3)
        self.assertEqual(sorted(s["engine"]), ["diloco_ring", "streaming", "streaming_fp4"])
        peak = {e: json.load(open(os.path.join(self.tmp.name, "char_transformer_streaming", f"{e}-seed1",
                                               "summary.json")))["messages"]["peak_sync_bytes"]
                for e in s["engine"]}
        self.assertLess(peak["streaming"], 0.3 * peak["diloco_ring"])
        self.assertLess(peak["streaming_fp4"], 0.3 * peak["streaming"])

if __name__ == "__main__":
    unittest.main()
