"""tests/python/test_flops.py — a PyTorch module's compute time (issue #47, part 4): its FLOPs
counted by asgdsim.flops against hand counts (and against torch's FlopCounterMode where
torch has it), cluster.compute dist "flops" for a torch model with the native models'
meaning and its virtual time in closed form, and the calibration cache of dist "measured"
shared across experiments and keyed by the module's code and shapes.

    ASGDSIM_PYTHONPATH=build/python /usr/bin/python3 -m unittest -v test_flops   (in tests/python)
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.abspath(os.environ.get("ASGDSIM_PYTHONPATH", os.path.join(REPO, "build", "python")))
sys.path.insert(0, PKG)
os.environ.setdefault("ASGDSIM_CACHE_DIR", "off")  # the cache's tests name their own

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import asgdsim  # noqa: E402
from asgdsim import flops  # noqa: E402


def mlp(hidden=128):
    return torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def mlp_flops_per_sample(layers):
    """The closed form (kernels/layers/affine.h): 2 K N per product, forward, weights'
    gradient, and the input's gradient except below the first layer."""
    return sum(2 * k * n * (2 if i == 0 else 3) for i, (k, n) in enumerate(zip(layers, layers[1:])))


class Counter(unittest.TestCase):
    def test_mlp_784_128_10_at_batch_32_is_the_closed_form(self):
        c = flops.count_flops(mlp(), torch.randn(32, 784), torch.randint(0, 10, (32,)), F.cross_entropy)
        self.assertEqual(c.total, 32 * mlp_flops_per_sample([784, 128, 10]))  # 13,090,816
        self.assertEqual(c.forward, 32 * 2 * (784 * 128 + 128 * 10))
        self.assertEqual(c.uncounted, [])

    def test_a_convolution_is_its_output_times_its_window(self):
        """Conv2d(1->6, 5x5) on 28x28 (24x24 out), then Linear(3456 -> 10), batch 4; the
        convolution is the first layer (no input gradient)."""
        net = torch.nn.Sequential(torch.nn.Conv2d(1, 6, 5), torch.nn.ReLU(), torch.nn.BatchNorm2d(6),
                                  torch.nn.Flatten(), torch.nn.Linear(6 * 24 * 24, 10))
        c = flops.count_flops(net, torch.randn(4, 1, 28, 28), torch.randint(0, 10, (4,)), F.cross_entropy,
                              counter="hooks")
        conv = 6 * 24 * 24 * 25  # multiply-adds per sample
        linear = 6 * 24 * 24 * 10
        self.assertEqual(c.total, 4 * (2 * conv * 2 + 2 * linear * 3))
        self.assertEqual(c.uncounted, [])  # BatchNorm: elementwise, 0 by definition

    def test_attention_embedding_and_what_the_hooks_cannot_see(self):
        """MultiheadAttention(16, 4 heads) over (L=5, N=3): four projections and QK^T, AV;
        its input is an Embedding's output (a lookup: 0 FLOPs, but it needs a gradient)."""
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(50, 16)
                self.att = torch.nn.MultiheadAttention(16, 4)

            def forward(self, x):
                h = self.emb(x)
                return self.att(h, h, h)[0]

        c = flops.count_flops(Net(), torch.randint(0, 50, (5, 3)), counter="hooks")
        proj, att = 3 * 5 * 16 * 16, 2 * 3 * 5 * 5 * 16
        self.assertEqual(c.forward, 2 * (4 * proj + att))
        # weights' gradients (the projections) + inputs' gradients (all four, both products twice)
        self.assertEqual(c.backward, 2 * (4 * proj) + 2 * (4 * proj + 2 * att))
        self.assertEqual(c.uncounted, [])

        class Custom(torch.nn.Module):  # a product the hooks cannot see, and an LSTM
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.randn(8, 3))
                self.rnn = torch.nn.LSTM(8, 8)

            def forward(self, x):
                return x @ self.w

        c = flops.count_flops(Custom(), torch.randn(4, 8), counter="hooks")
        self.assertEqual((c.total, c.uncounted), (0, ["Custom", "LSTM"]))

    @unittest.skipIf(flops.FlopCounterMode is None, f"torch {torch.__version__} has no FlopCounterMode")
    def test_hooks_agree_with_flop_counter_mode(self):
        net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(4, 8, 3),
                                  torch.nn.Flatten(), torch.nn.Linear(8 * 26 * 26, 10))
        x, y = torch.randn(2, 1, 28, 28), torch.randint(0, 10, (2,))
        hooks = flops.count_flops(net, x, y, F.cross_entropy, counter="hooks")
        mode = flops.count_flops(net, x, y, F.cross_entropy, counter="mode")
        self.assertEqual((hooks.forward, hooks.backward), (mode.forward, mode.backward))


def torch_config(name, compute, hidden=None, **over):
    cfg = {"name": name, "model": {"type": "torch"}, "data": {"type": "torch"},
           "train": {"batch_size": 8, "lr": 0.05}, "stop": {"updates": 20},
           "eval": {"every": 10, "unit": "updates", "train_samples": 64},
           "cluster": {"workers": 1, "compute": compute}, "engines": [{"type": "async"}]}
    cfg.update(over)
    return cfg


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 784, generator=g), torch.randint(0, 10, (n,), generator=g)


class Runs(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="asgdsim-flops-")
        self.train, self.test = data(64, 1), data(32, 2)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_torch(self, cfg, make, out=None, **kw):
        return asgdsim.run(cfg, out=out or self.tmp, quiet=True, model=make, data=self.train, test_data=self.test,
                           **kw)

    def summary(self, res, run_id="async-seed1"):
        with open(os.path.join(res.folder, run_id, "summary.json")) as f:
            return json.load(f)

    def test_flops_charges_a_torch_mlp_as_the_native_mlp(self):
        """dist "flops" for a torch MLP 784-128-10: the native MLP's FLOPs per sample, and a
        step of batch 8 at 1 GFLOP/s x 0.5 takes 8 x 409,088 / 0.5e9 s: 20 updates of one
        worker (free network) end at 20 x that."""
        compute = {"dist": "flops", "flops": 1e9, "efficiency": 0.5}
        s = self.summary(self.run_torch(torch_config("t", compute), lambda: mlp()))
        self.assertEqual(s["status"], "completed", s.get("note"))
        native = asgdsim.run({**torch_config("n", compute), "model": {"type": "mlp", "hidden": [128]},
                              "data": {"type": "synthetic", "features": 784, "classes": 10, "train_samples": 64,
                                       "test_samples": 32}}, out=self.tmp, quiet=True)
        n = self.summary(native)
        fps = mlp_flops_per_sample([784, 128, 10])
        self.assertEqual(n["compute_model"]["flops_per_sample"], fps)
        self.assertEqual(s["compute_model"]["flops_per_sample"], fps)
        self.assertIn("module hooks" if flops.FlopCounterMode is None else "FlopCounterMode",
                      s["compute_model"]["flops_counter"])
        self.assertAlmostEqual(s["time"], 20 * 8 * fps / 0.5e9, delta=20e-9)  # ns rounding per step
        self.assertAlmostEqual(s["time"], n["time"], delta=1e-12)

    def test_flops_refuses_a_module_that_counts_nothing(self):
        class Hidden(torch.nn.Module):  # its product is a functional call: the hooks see nothing
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.randn(784, 10) * 0.01)

            def forward(self, x):
                return x @ self.w

        if flops.FlopCounterMode is not None:
            self.skipTest("FlopCounterMode sees functional products")
        with self.assertRaises(asgdsim.ModelError) as e:
            self.run_torch(torch_config("h", {"dist": "flops", "flops": 1e9}), Hidden)
        self.assertIn("0 FLOPs", str(e.exception))
        self.assertIn("Hidden", str(e.exception))

    # ---- the calibration cache of dist "measured" ----
    def test_a_second_experiment_replays_the_first_measurement_from_the_cache(self):
        """Experiment folders a and b, one cache: b copies a's trace (the same step times,
        measured on a's date; compute_model.from_cache names the file) and times nothing;
        a module of other shapes, or of other code with the same shapes, is measured anew;
        ASGDSIM_CACHE_DIR=off measures in every folder."""
        source = os.path.join(self.tmp, "net.py")

        def write_net(activation):  # a model file, edited between experiments
            with open(source, "w") as f:
                f.write("import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n"
                        "        super().__init__()\n        self.a, self.b = torch.nn.Linear(784, 128), "
                        "torch.nn.Linear(128, 10)\n\n    def forward(self, x):\n"
                        f"        return self.b(torch.{activation}(self.a(x)))\n")

        compute = {"dist": "measured", "seconds": 0.05, "steps": 5, "min_steps": 3, "warmup": 1}
        cache = os.path.join(self.tmp, "cache")
        old = os.environ.get("ASGDSIM_CACHE_DIR")
        os.environ["ASGDSIM_CACHE_DIR"] = cache
        try:
            def traced(folder, make=None, edit="relu", **kw):
                cfg = torch_config("m", compute)
                if make is None:
                    write_net(edit)
                    cfg["model"]["module"] = source + ":Net"
                res = self.run_torch(cfg, make, out=os.path.join(self.tmp, folder), **kw)
                model = self.summary(res)["compute_model"]
                with open(os.path.join(res.folder, model["trace"])) as f:
                    steps = [l for l in f.read().splitlines() if not l.startswith("#")]
                return model, steps

            a, a_steps = traced("a")
            self.assertNotIn("from_cache", a)
            self.assertEqual(len(os.listdir(os.path.join(cache, "calibration"))), 1)
            b, b_steps = traced("b")
            self.assertEqual(b_steps, a_steps)  # a real clock twice would not give the same nanoseconds
            self.assertEqual((b["date"], b["median_step_seconds"]), (a["date"], a["median_step_seconds"]))
            self.assertTrue(b["from_cache"].startswith(os.path.join(cache, "calibration")), b)
            for folder, make, edit in (("c", lambda: mlp(64), None), ("d", lambda: mlp(128), None),
                                       ("e", None, "tanh")):
                other, _ = traced(folder, make, edit)  # other shapes; other module; edited code
                self.assertNotIn("from_cache", other, folder)
            self.assertEqual(len(os.listdir(os.path.join(cache, "calibration"))), 4)
            # the edited file in a's folder: another trace there (not a's replayed), e's
            again, _ = traced("a", None, "tanh", supersede=True)  # another config: its runs move aside
            self.assertNotEqual(again["trace"], a["trace"])
            self.assertEqual(again["median_step_seconds"], other["median_step_seconds"])
            self.assertIn("from_cache", again)
            os.environ["ASGDSIM_CACHE_DIR"] = "off"
            off, _ = traced("f")
            self.assertNotIn("from_cache", off)
        finally:
            if old is None:
                os.environ.pop("ASGDSIM_CACHE_DIR", None)
            else:
                os.environ["ASGDSIM_CACHE_DIR"] = old


if __name__ == "__main__":
    unittest.main()
