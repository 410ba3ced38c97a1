"""tests/python/test_package.py — the asgdsim Python package (issue #36): a PyTorch model in
the simulator's virtual time. Runs with Debian's python3 and torch; finds the package in
$ASGDSIM_PYTHONPATH (ctest sets it to BUILD/python), else <repo>/build/python.

    ASGDSIM_PYTHONPATH=build/python /usr/bin/python3 -m unittest discover -s tests/python -v
"""
import csv
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.abspath(os.environ.get("ASGDSIM_PYTHONPATH", os.path.join(REPO, "build", "python")))
sys.path.insert(0, PKG)
# runs measure in their own folders: no trace from the calibration cache unless a test names one
os.environ.setdefault("ASGDSIM_CACHE_DIR", "off")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import asgdsim  # noqa: E402

FMNIST = "/usr/share/datasets/fashion-mnist"
WALL = ("wall", "seconds_per", "host", "start", "end", "command", "threads", "jobs", "elapsed", "pid", "date")


def strip_wall(obj):
    """summary.json without its wall-clock and host fields."""
    if isinstance(obj, dict):
        return {k: strip_wall(v) for k, v in obj.items() if not any(s in k for s in WALL)}
    if isinstance(obj, list):
        return [strip_wall(v) for v in obj]
    return obj


def metrics(folder, run_id):
    with open(os.path.join(folder, run_id, "metrics.csv")) as f:
        return list(csv.DictReader(f))


def summary(folder, run_id):
    with open(os.path.join(folder, run_id, "summary.json")) as f:
        return json.load(f)


def synthetic(n, features=12, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    teacher = torch.randn(features, classes, generator=g)
    return x, (x @ teacher).argmax(1)


def small_net(features=12, classes=4, dropout=0.0):
    def make():
        layers = [torch.nn.Linear(features, 16), torch.nn.ReLU()]
        if dropout:
            layers.append(torch.nn.Dropout(dropout))
        layers.append(torch.nn.Linear(16, classes))
        return torch.nn.Sequential(*layers)
    return make


def torch_config(**over):
    cfg = {"name": "t", "model": {"type": "torch"}, "data": {"type": "torch"},
           "train": {"batch_size": 16, "lr": 0.1}, "stop": {"updates": 40},
           "eval": {"every": 10, "unit": "updates", "train_samples": 256},
           "cluster": {"workers": 4}, "engines": [{"type": "async"}]}
    for k, v in over.items():
        cfg[k] = v
    return cfg


class Package(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="asgdsim-py-")
        self.train = synthetic(512, seed=1)
        self.test = synthetic(128, seed=2)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_torch(self, cfg, **kw):
        kw.setdefault("model", small_net())
        kw.setdefault("data", self.train)
        kw.setdefault("test_data", self.test)
        return asgdsim.run(cfg, out=self.tmp, quiet=True, **kw)

    # ---- the native MLP and the same MLP in PyTorch ----
    def test_torch_mlp_follows_the_native_mlp(self):
        """A torch MLP 784-128-10 started from the native MLP's initial parameters follows
        the native train loss within 1e-4 relative over 100 sync iterations."""
        native = {"name": "native", "model": {"type": "mlp", "hidden": [128]},
                  "data": {"type": "fashion_mnist", "path": FMNIST, "train_limit": 4000, "test_limit": 500},
                  "train": {"batch_size": 16, "lr": 0.05}, "stop": {"updates": 100},
                  "eval": {"every": 10, "unit": "updates", "train_samples": 1000},
                  "cluster": {"workers": 4}, "engines": [{"type": "sync"}]}
        w0 = asgdsim.initial_parameters(native)
        self.assertEqual(w0.size, 784 * 128 + 128 + 128 * 10 + 10)

        def make():  # native layout: W (in, out) row-major, then b, per layer; torch's Linear holds W^T
            net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                      torch.nn.Linear(128, 10))
            w = torch.from_numpy(w0.copy())
            o = 0
            with torch.no_grad():
                for lin, (i, j) in ((net[1], (784, 128)), (net[3], (128, 10))):
                    lin.weight.copy_(w[o:o + i * j].view(i, j).t())
                    o += i * j
                    lin.bias.copy_(w[o:o + j])
                    o += j
            return net

        asgdsim.run(native, out=self.tmp, quiet=True)
        t = dict(native, name="torch", model={"type": "torch"})
        asgdsim.run(t, out=self.tmp, quiet=True, model=make)
        a = metrics(os.path.join(self.tmp, "native"), "sync-seed1")
        b = metrics(os.path.join(self.tmp, "torch"), "sync-seed1")
        self.assertEqual([r["updates"] for r in a], [r["updates"] for r in b])
        self.assertEqual(a[-1]["updates"], "100")
        for ra, rb in zip(a, b):
            la, lb = float(ra["train_loss"]), float(rb["train_loss"])
            self.assertLess(abs(la - lb) / la, 1e-4, f"update {ra['updates']}: native {la}, torch {lb}")
        self.assertLess(float(a[-1]["train_loss"]), 0.8 * float(a[0]["train_loss"]))  # it trained

    # ---- determinism ----
    def test_byte_identical_across_threads_and_jobs_with_dropout(self):
        cfg = torch_config(engines=[{"type": "async"}, {"type": "sync"}], repeats=2)
        outs = []
        for threads, jobs in ((1, 1), (2, 1), (2, 2)):
            out = os.path.join(self.tmp, f"{threads}-{jobs}")
            asgdsim.run(cfg, out=out, quiet=True, threads=threads, jobs=jobs, model=small_net(dropout=0.3),
                        data=self.train, test_data=self.test)
            folder = os.path.join(out, "t")
            files = {}
            for run in sorted(os.listdir(folder)):
                if not os.path.isdir(os.path.join(folder, run)):
                    continue
                with open(os.path.join(folder, run, "metrics.csv")) as f:
                    files[run + "/metrics.csv"] = f.read()
                files[run + "/summary.json"] = strip_wall(summary(folder, run))
            outs.append(files)
        self.assertEqual(len(outs[0]), 8)
        self.assertEqual(outs[0], outs[1])
        self.assertEqual(outs[0], outs[2])
        # dropout is on: the two seeds differ, and so do runs with another dropout key
        m = outs[0]
        self.assertNotEqual(m["async-seed1/metrics.csv"], m["async-seed2/metrics.csv"])

    def test_dropout_is_keyed_by_the_job(self):
        """The same config twice gives the same bits; turning dropout off changes them (so
        dropout is drawn, and drawn the same way)."""
        cfg = torch_config()
        a = self.run_torch(cfg, model=small_net(dropout=0.5))
        first = metrics(a.folder, "async-seed1")
        b = self.run_torch(cfg, model=small_net(dropout=0.5), rerun=True)
        self.assertEqual(first, metrics(b.folder, "async-seed1"))
        c = self.run_torch(cfg, model=small_net(dropout=0.0), rerun=True)
        self.assertNotEqual(first, metrics(c.folder, "async-seed1"))

    # ---- engine equivalences with a torch model ----
    def test_sync_4x8_equals_1x32(self):
        base = torch_config(stop={"updates": 30}, eval={"every": 5, "unit": "updates", "train_samples": 256})
        four = dict(base, name="four", train={"batch_size": 8, "lr": 0.1}, cluster={"workers": 4},
                    engines=[{"type": "sync"}])
        one = dict(base, name="one", train={"batch_size": 32, "lr": 0.1}, cluster={"workers": 1},
                   engines=[{"type": "sync"}])
        self.run_torch(four)
        self.run_torch(one)
        a = metrics(os.path.join(self.tmp, "four"), "sync-seed1")
        b = metrics(os.path.join(self.tmp, "one"), "sync-seed1")
        self.assertEqual(len(a), len(b))
        for ra, rb in zip(a, b):
            self.assertEqual(ra["samples"], rb["samples"])
            la, lb = float(ra["train_loss"]), float(rb["train_loss"])
            self.assertLess(abs(la - lb), 1e-5 * max(1.0, la), f"updates {ra['updates']}: {la} vs {lb}")

    def test_async_mean_staleness_is_workers_minus_one(self):
        n = 8
        cfg = torch_config(cluster={"workers": n, "compute": {"dist": "constant", "value": 0.001}},
                           stop={"updates": 400}, eval={"every": 100, "unit": "updates", "train_samples": 128})
        res = self.run_torch(cfg)
        s = summary(res.folder, "async-seed1")
        mean = s["staleness"]["mean"]
        # constant compute: every update after the first n is n - 1 updates stale
        expected = (n - 1) * (400 - n) / 400 + sum(range(n)) / 400
        self.assertAlmostEqual(mean, expected, places=6)

    # ---- compute measured on this machine ----
    def test_measured_times_the_module_and_follows_its_size(self):
        """cluster.compute "measured" times the module's own jobs: a module with ~4000x the
        multiply-adds replays longer steps; model.threads > 1 is timed by wall time. (With
        ~1000x, the small module's Python overhead left the ratio near 3 under load.)"""
        def big():
            return torch.nn.Sequential(torch.nn.Linear(12, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                                       torch.nn.ReLU(), torch.nn.Linear(2048, 4))
        medians = {}
        for name, make, threads in (("small", small_net(), 1), ("big", big, 1), ("big2", big, 2)):
            cfg = torch_config(name=name, model={"type": "torch", "threads": threads},
                               cluster={"workers": 2, "compute": {"dist": "measured", "seconds": 0.3, "steps": 40,
                                                                  "warmup": 2}},
                               stop={"updates": 40})
            res = self.run_torch(cfg, model=make)
            self.assertEqual(res.exit_code, 0)
            s = summary(res.folder, "async-seed1")
            self.assertEqual(s["status"], "completed", s.get("note"))
            model = s["compute_model"]
            self.assertEqual(model["dist"], "measured")
            trace = os.path.join(res.folder, model["trace"])
            with open(trace) as f:
                text = f.read()
            header = {l[2:].split(": ", 1)[0]: json.loads(l[2:].split(": ", 1)[1])
                      for l in text.splitlines() if l.startswith("# ") and ": " in l}
            self.assertEqual(header["model"]["type"], "torch")
            self.assertEqual(header["threads"], threads)
            self.assertEqual(header["clock"], "the timing thread's CPU time" if threads == 1 else "wall time")
            medians[name] = model["median_step_seconds"]
        self.assertGreater(medians["big"], 3 * medians["small"], medians)

    def test_model_threads_size_openblas(self):
        """A job's matrix products run on model.threads threads: every OpenBLAS loaded in
        the process (torch's own among them) is sized to it."""
        import ctypes
        from asgdsim import _torch
        torch.nn.Linear(4, 4)(torch.randn(2, 4))  # torch's BLAS is loaded
        with open("/proc/self/maps") as f:
            paths = {l.split()[-1] for l in f if "blas" in os.path.basename(l.split()[-1]).lower()}
        libs = [ctypes.CDLL(p, mode=os.RTLD_NOLOAD | os.RTLD_NOW) for p in sorted(paths)]
        libs = [l for l in libs if hasattr(l, "openblas_get_num_threads")]
        if not libs:
            self.skipTest("no OpenBLAS in this process")
        for n in (1, 2, 1):
            _torch._set_blas_threads(n)
            self.assertEqual([l.openblas_get_num_threads() for l in libs], [n] * len(libs))
        # a run sets model.threads for its jobs and gives the caller's counts back
        for l in libs:
            l.openblas_set_num_threads(3)
        self.run_torch(torch_config(model={"type": "torch", "threads": 2}))
        self.assertEqual([l.openblas_get_num_threads() for l in libs], [3] * len(libs))

    def test_an_epoch_budget_over_torch_data_is_not_called_too_short_for_a_round(self):
        """A PyTorch Dataset's size is known only once loaded: validation must not count it
        as one sample and warn that a DiLoCo round cannot finish (it did: "more than the about
        5 the stop budget allows (stop.epochs 1)"), while the run makes its rounds."""
        cfg = torch_config(engines=[{"type": "diloco", "steps": 4}], stop={"epochs": 1})
        self.assertEqual([w for w in asgdsim.validate(cfg)["warnings"] if "stop budget allows" in w], [])
        res = self.run_torch(cfg)
        s = summary(res.folder, "diloco-seed1")
        self.assertEqual(s["status"], "completed", s.get("note"))
        self.assertGreaterEqual(s["updates"], 2)

    def test_a_population_of_clients_trains_a_torch_model_on_its_own_split(self):
        """Issue #45 from Python: the user's torch model and Dataset, split over 40 clients by
        Hsu et al.'s Dirichlet mix, 4 slots, FedBuff's client jobs of 3 local steps; the run
        trains, says its clients, lists their parts, and is the same at 1 and 2 threads."""
        cfg = torch_config(
            data={"type": "torch", "partition": "dirichlet_mix", "partition_alpha": 0.5},
            clients={"count": 40, "sampling": "size"},
            engines=[{"type": "fedbuff", "k": 2, "local_steps": 3}], stop={"updates": 30})
        res = self.run_torch(cfg, threads=1)
        s = summary(res.folder, "fedbuff-seed1")
        self.assertEqual(s["status"], "completed", s.get("note"))
        self.assertEqual(s["clients"]["count"], 40)
        self.assertGreater(s["clients"]["distinct"], 10)
        self.assertEqual(s["clients"]["partition"]["samples"]["min"], 512 // 40)
        rows = metrics(res.folder, "fedbuff-seed1")
        self.assertLess(float(rows[-1]["train_loss"]), float(rows[0]["train_loss"]))
        with open(os.path.join(res.folder, "fedbuff-seed1", "partition.csv")) as f:
            self.assertEqual(len(list(csv.DictReader(f))), 40)
        first = strip_wall(s)
        shutil.rmtree(res.folder)
        again = self.run_torch(cfg, threads=2)
        self.assertEqual(strip_wall(summary(again.folder, "fedbuff-seed1")), first)

    # ---- results and the command line ----
    def test_results_load_the_tidy_table(self):
        res = self.run_torch(torch_config(engines=[{"type": "async"}, {"type": "sync"}]))
        self.assertEqual(res.exit_code, 0)
        df = res.load()
        self.assertEqual(sorted(df.run_id.unique()), ["async-seed1", "sync-seed1"])
        self.assertTrue({"time", "train_loss", "test_accuracy", "status"} <= set(df.columns))
        self.assertEqual(set(res.summaries().status), {"completed"})

    def test_config_error_carries_every_issue(self):
        bad = torch_config(model={"type": "torch", "threads": 0}, engines=[{"type": "asynk"}])
        with self.assertRaises(asgdsim.ConfigError) as e:
            asgdsim.validate(bad)
        paths = [p for p, _ in e.exception.issues]
        self.assertEqual(paths, ["model.threads", "engines[0].type"])
        self.assertEqual(e.exception.exit_code, 2)
        self.assertIn("did you mean 'async'", e.exception.message)
        with self.assertRaises(asgdsim.ConfigError):
            asgdsim.run(bad, out=self.tmp)
        self.assertEqual(os.listdir(self.tmp), [])  # nothing written

    def test_list_is_the_catalog(self):
        cat = asgdsim.catalog()
        models = next(f for f in cat["families"] if f["key"] == "model.type")
        torch_model = next(m for m in models["members"] if m["name"] == "torch")
        self.assertEqual([k["key"] for k in torch_model["keys"]], ["module", "loss", "threads", "bn_samples"])

    def test_the_native_command_line_refuses_a_torch_config(self):
        path = os.path.join(self.tmp, "c.json")
        with open(path, "w") as f:
            json.dump(torch_config(), f)
        asgdsim_bin = os.path.join(os.path.dirname(PKG), "asgdsim")
        if not os.path.exists(asgdsim_bin):
            self.skipTest("no asgdsim binary beside the package")
        p = subprocess.run([asgdsim_bin, "run", path, "--out", os.path.join(self.tmp, "out")],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("python3 -m asgdsim run", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out")))

    def test_python_m_asgdsim_runs_a_config_with_a_model_file(self):
        with open(os.path.join(self.tmp, "user.py"), "w") as f:
            f.write("import torch\n"
                    "def model():\n    return torch.nn.Sequential(torch.nn.Linear(12, 4))\n"
                    "def data():\n"
                    "    g = torch.Generator().manual_seed(0)\n"
                    "    x = torch.randn(300, 12, generator=g); y = (x[:, 0] > 0).long()\n"
                    "    return (x[:200], y[:200]), (x[200:], y[200:])\n")
        path = os.path.join(self.tmp, "c.json")
        with open(path, "w") as f:
            json.dump(torch_config(), f)
        env = dict(os.environ, PYTHONPATH=PKG)
        p = subprocess.run([sys.executable, "-m", "asgdsim", "run", path, "--model", "user.py:model", "--data",
                            "user.py:data", "--out", "out", "--quiet"], cwd=self.tmp, env=env,
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.tmp, "out", "t", "async-seed1", "config.json")) as f:
            recorded = json.load(f)
        self.assertEqual(recorded["model"]["module"], os.path.join(self.tmp, "user.py") + ":model")
        self.assertEqual(summary(os.path.join(self.tmp, "out", "t"), "async-seed1")["status"], "completed")
        p = subprocess.run([sys.executable, "-m", "asgdsim", "run", path, "--model", "user.py:nothing",
                            "--data", "user.py:data", "--out", "out2", "--quiet"], cwd=self.tmp, env=env,
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("has no 'nothing'", p.stderr)
        # validate imports the files and finds the names, as a run would
        for spec, says in (("user.py:nope", "has no 'nope'"), ("missing.py:model", "no such file")):
            p = subprocess.run([sys.executable, "-m", "asgdsim", "validate", path, "--model", spec, "--data",
                                "user.py:data"], cwd=self.tmp, env=env, capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn(says, p.stderr)
        p = subprocess.run([sys.executable, "-m", "asgdsim", "validate", path, "--model", "user.py:model", "--data",
                            "user.py:data"], cwd=self.tmp, env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_ctrl_c_ends_the_runs_as_interrupted(self):
        script = ("import sys, torch; sys.path.insert(0, %r); import asgdsim\n"
                  "x = torch.randn(4000, 64); y = (x[:, 0] > 0).long()\n"
                  "net = lambda: torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 2))\n"
                  "cfg = {'name': 'long', 'model': {'type': 'torch'}, 'data': {'type': 'torch'},\n"
                  "       'stop': {'updates': 10000000}, 'eval': {'every': 1000, 'unit': 'updates'},\n"
                  "       'engines': [{'type': 'async'}]}\n"
                  "print('start', flush=True)\n"
                  "try:\n"
                  "    asgdsim.run(cfg, out=%r, model=net, data=(x, y), test_data=(x[:100], y[:100]), quiet=True)\n"
                  "except KeyboardInterrupt:\n"
                  "    print('interrupted', flush=True); sys.exit(130)\n") % (PKG, self.tmp)
        p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        self.assertEqual(p.stdout.readline().strip(), "start")
        summary_path = os.path.join(self.tmp, "long", "async-seed1", "metrics.csv")
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(self.tmp, "long", "async-seed1", "meta.json")) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130)
        self.assertIn("interrupted", out)
        self.assertEqual(summary(os.path.join(self.tmp, "long"), "async-seed1")["status"], "interrupted")
        del summary_path


class ReadmeExample(unittest.TestCase):
    def test_the_readme_python_example_runs_as_written(self):
        """README.md's "From Python, with your own model" block, run literally (in a
        temporary folder): it trains, and async is ahead of sync after one epoch."""
        with open(os.path.join(REPO, "README.md")) as f:
            text = f.read()
        section = text[text.index("## From Python, with your own model"):]
        code = section[section.index("```python") + len("```python"):section.index("```", section.index("```python") + 9)]
        tmp = tempfile.mkdtemp(prefix="asgdsim-readme-")
        try:
            p = subprocess.run([sys.executable, "-c", code], cwd=tmp, env=dict(os.environ, PYTHONPATH=PKG),
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            acc = {line.split()[0]: float(line.split()[1]) for line in p.stdout.splitlines()
                   if line.startswith(("async ", "sync "))}
            self.assertGreater(acc["async"], 0.5)
            self.assertGreater(acc["async"], acc["sync"])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class TorchRuns:
    """A test case's torch runs: a temporary output folder, small synthetic sets and
    run_torch (asgdsim.run with the small net and those sets unless given)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="asgdsim-torch-")
        self.train = synthetic(256, seed=1)
        self.test = synthetic(64, seed=2)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_torch(self, cfg=None, **kw):
        kw.setdefault("model", small_net())
        kw.setdefault("data", self.train)
        kw.setdefault("test_data", self.test)
        return asgdsim.run(cfg or torch_config(), out=self.tmp, quiet=True, **kw)


class BadModelsAndData(TorchRuns, unittest.TestCase):
    """Each mistake gets a clear error: exit 2 / asgdsim.ModelError (an InputError) for a
    broken contract, a failed run with the Python traceback for an exception in forward,
    and divergence for non-finite outputs."""

    def test_a_factory_that_makes_another_size_for_another_seed(self):
        sizes = iter([16, 17])  # the job's module, then seed 1's: 17 hidden units

        def make():
            return torch.nn.Sequential(torch.nn.Linear(12, next(sizes, 16)), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        with self.assertRaises(asgdsim.ModelError) as e:  # kept across the C++ runner (issue #47)
            self.run_torch(model=make)
        self.assertIn("the factory must make the same module every time", str(e.exception))
        self.assertEqual(e.exception.exit_code, 2)

    def test_non_finite_outputs_are_divergence(self):
        class Blows(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(12, 4)

            def forward(self, x):
                return self.lin(x) * float("inf")
        res = self.run_torch(model=Blows)
        self.assertEqual(res.exit_code, 0)
        self.assertEqual(summary(res.folder, "async-seed1")["status"], "diverged")

    def test_a_dataset_shorter_than_the_config_says(self):
        cfg = torch_config(data={"type": "torch", "train_limit": 1000})
        with self.assertRaises(asgdsim.InputError) as e:
            self.run_torch(cfg)
        self.assertIn("data.train_limit is 1000 but the training set has 256 samples", str(e.exception))

    def test_a_dataset_shorter_than_its_len_says(self):
        x, y = self.train

        class Liar(torch.utils.data.Dataset):
            def __len__(self):
                return 256

            def __getitem__(self, i):
                if i >= 200:
                    raise IndexError(i)
                return x[i], y[i]
        with self.assertRaises(asgdsim.InputError) as e:
            self.run_torch(data=Liar())
        self.assertIn("says it has 256 samples (len), but item", str(e.exception))

    def test_a_model_whose_parameter_count_changes(self):
        class Grows(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(12, 4)

            def forward(self, x):
                if not hasattr(self, "extra"):
                    self.extra = torch.nn.Parameter(torch.zeros(4))
                return self.lin(x) + self.extra
        with self.assertRaises(asgdsim.InputError) as e:
            self.run_torch(model=Grows)
        self.assertIn("parameter count changed from 52 to 56", str(e.exception))

    def test_an_exception_in_forward_fails_that_run_with_the_traceback(self):
        class Picky(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(12, 4)

            def forward(self, x):
                if x.shape[0] == 8:
                    raise ValueError("no batches of 8 here")
                return self.lin(x)
        cfg = torch_config(sweep={"train.batch_size": [16, 8]})
        with self.assertRaises(asgdsim.RunError) as e:
            self.run_torch(cfg, model=Picky)
        self.assertEqual(e.exception.exit_code, 1)
        runs = sorted(d for d in os.listdir(os.path.join(self.tmp, "t")) if os.path.isdir(os.path.join(self.tmp, "t", d)))
        done = [r for r in runs if summary(os.path.join(self.tmp, "t"), r)["status"] == "completed"]
        failed = [r for r in runs if summary(os.path.join(self.tmp, "t"), r)["status"] == "failed"]
        self.assertEqual(len(done), 1)  # the batch-16 run is kept
        self.assertEqual(len(failed), 1)
        error = summary(os.path.join(self.tmp, "t"), failed[0])["error"]
        self.assertIn("Traceback", error)
        self.assertIn("ValueError: no batches of 8 here", error)
        self.assertIn("in forward", error)

    def test_a_loss_that_is_not_one_number(self):
        with self.assertRaises(asgdsim.InputError) as e:
            self.run_torch(loss=lambda out, y: torch.nn.functional.cross_entropy(out, y, reduction="none"))
        self.assertIn("the loss returned (256,): it must return one number", str(e.exception))

    def test_targets_outside_the_classes(self):
        cfg = torch_config(data={"type": "torch", "classes": 3})
        with self.assertRaises(asgdsim.InputError) as e:
            self.run_torch(cfg)  # the targets are 0..3
        self.assertIn("the training set has a target 3 outside [0, 3)", str(e.exception))

    def test_no_model_given(self):
        with self.assertRaises(asgdsim.InputError) as e:
            asgdsim.run(torch_config(), out=self.tmp, quiet=True, data=self.train, test_data=self.test)
        self.assertIn("no model", str(e.exception))


if __name__ == "__main__":
    unittest.main()
