"""tests/python/test_bad_input.py — what the Python package does with bad input (issue #42's items): what it is
handed beside a config (model=, data=), paths with bytes that are not UTF-8, the run
options' checks, the gradient contract's breaks as ModelError, a torch module's memory,
labels, accuracy, Ctrl-C while labels are read, an edited model file, a forking factory.
Each test fails without its fix (docs/reliability.md lists them). Small runs: a 4-worker
MLP of 12 features, 40 updates.

    ASGDSIM_PYTHONPATH=build/python /usr/bin/python3 -m unittest tests/python/test_bad_input.py -v
"""
import json
import math
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_package import PKG, TorchRuns, metrics, small_net, summary, torch_config  # noqa: E402

import torch  # noqa: E402

import asgdsim  # noqa: E402

NATIVE = {"name": "n", "model": {"type": "quadratic", "dim": 4}, "stop": {"updates": 20},
          "cluster": {"workers": 2}, "engines": [{"type": "async"}]}


class BadInput(TorchRuns, unittest.TestCase):

    def refused(self, error_class=asgdsim.InputError, **kw):
        with self.assertRaises(error_class) as e:
            self.run_torch(**kw)
        self.assertEqual(e.exception.exit_code, 2, e.exception.message)
        return e.exception.message

    def nothing_written(self):
        self.assertEqual(os.listdir(self.tmp), [])

    # ---- High 5: model=/data= and the config's types must agree
    def test_a_model_given_for_a_native_model_type_is_refused(self):
        with self.assertRaises(asgdsim.InputError) as e:
            asgdsim.run(NATIVE, out=self.tmp, quiet=True, model=small_net())
        self.assertIn("model= was given, but no run's model.type is \"torch\" (model.type is \"quadratic\")",
                      e.exception.message)
        self.nothing_written()

    def test_data_given_for_a_native_data_type_is_refused(self):
        cfg = dict(torch_config(), data={"type": "synthetic", "features": 12, "classes": 4})
        message = self.refused(cfg=cfg)
        self.assertIn("data= and test_data= were given, but no run's data.type is \"torch\" (data.type is "
                      "\"synthetic\")", message)
        self.nothing_written()

    def test_a_loss_given_for_a_native_model_is_refused(self):
        with self.assertRaises(asgdsim.InputError) as e:
            asgdsim.run(NATIVE, out=self.tmp, quiet=True, loss=torch.nn.functional.mse_loss)
        self.assertIn("loss= was given", e.exception.message)

    def test_a_torch_type_without_the_object_is_refused_before_anything_is_written(self):
        with self.assertRaises(asgdsim.InputError) as e:
            asgdsim.run(torch_config(), out=self.tmp, quiet=True, model=small_net())
        self.assertIn("data.type \"torch\" but no data", e.exception.message)
        self.nothing_written()

    def test_a_torch_model_without_a_model_or_module_is_refused_before_anything_is_written(self):
        x, y = self.train
        with self.assertRaises(asgdsim.InputError) as e:
            asgdsim.run(torch_config(), out=self.tmp, quiet=True, data=(x, y), test_data=(x[:8], y[:8]))
        self.assertIn("model.type \"torch\" but no model", e.exception.message)
        self.nothing_written()

    # ---- Medium 1: a torch module's memory is estimated once it is built
    def test_a_module_too_large_for_its_workers_is_refused_naming_its_size(self):
        x = torch.randn(64, 3000)
        y = (x[:, 0] > 0).long()
        cfg = torch_config(cluster={"workers": 20000}, stop={"updates": 2})
        message = self.refused(cfg=cfg, model=lambda: torch.nn.Linear(3000, 2000), data=(x, y),
                               test_data=(x[:8], y[:8]))
        self.assertIn("the PyTorch module has 6002000 parameters: this run would need about", message)
        self.assertIn("Lower", message)
        self.assertEqual(summary(os.path.join(self.tmp, "t"), "async-seed1")["status"], "failed")

    # ---- Medium 2: classes from the labels are bounded
    def test_a_label_of_a_billion_is_refused(self):
        x, y = self.train
        y = y.clone()
        y[5] = 10**9
        message = self.refused(data=(x, y))
        self.assertIn("targets make 1000000001 classes", message)
        self.assertIn("more than data.classes may be (1000000)", message)

    # ---- Medium 3: what was not measured is NaN, not 0
    def test_outputs_of_one_column_give_no_accuracy(self):
        x, y = self.train
        yb = (y > 1).long()
        net = lambda: torch.nn.Sequential(torch.nn.Linear(12, 1), torch.nn.Flatten(0))  # noqa: E731
        res = self.run_torch(model=net, data=(x, yb), test_data=(self.test[0], (self.test[1] > 1).long()),
                             loss=lambda out, t: torch.nn.functional.binary_cross_entropy_with_logits(out, t.float()))
        rows = metrics(res.folder, "async-seed1")
        self.assertTrue(all(math.isnan(float(r["test_accuracy"])) for r in rows), rows[-1])
        self.assertTrue(math.isfinite(float(rows[-1]["test_loss"])))
        self.assertIsNone(summary(res.folder, "async-seed1")["final"]["test_accuracy"])

    def test_an_empty_test_set_gives_no_test_loss(self):
        res = self.run_torch(test_data=(self.test[0][:0], self.test[1][:0]))
        final = summary(res.folder, "async-seed1")["final"]
        self.assertIsNone(final["test_loss"])
        self.assertIsNone(final["test_accuracy"])
        self.assertTrue(math.isfinite(final["train_loss"]))

    # ---- Medium 4: Ctrl-C while a Dataset's labels are read one by one
    def test_ctrl_c_while_labels_are_read_item_by_item(self):
        with open(os.path.join(self.tmp, "lazy.py"), "w") as f:
            f.write("import torch\n"
                    "class Lazy(torch.utils.data.Dataset):\n"
                    "    def __len__(self):\n        return 10**9\n"
                    "    def __getitem__(self, i):\n        return torch.zeros(12), int(i % 4)\n"
                    "def data():\n    return Lazy(), Lazy()\n"
                    "def model():\n    return torch.nn.Linear(12, 4)\n")
        path = os.path.join(self.tmp, "c.json")
        with open(path, "w") as f:
            json.dump(torch_config(), f)
        p = subprocess.Popen([sys.executable, "-m", "asgdsim", "run", path, "--model", "lazy.py:model", "--data",
                              "lazy.py:data", "--out", "out", "--quiet"], cwd=self.tmp,
                             env=dict(os.environ, PYTHONPATH=PKG), stderr=subprocess.PIPE, text=True)
        meta = os.path.join(self.tmp, "out", "t", "async-seed1", "meta.json")
        deadline = time.time() + 60
        while not os.path.exists(meta) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # reading labels by now: 10^9 of them take hours
        p.send_signal(signal.SIGINT)
        t0 = time.time()
        _, err = p.communicate(timeout=60)
        self.assertLess(time.time() - t0, 10)
        self.assertEqual(p.returncode, 130, err)
        self.assertEqual(summary(os.path.join(self.tmp, "out", "t"), "async-seed1")["status"], "interrupted")

    def test_a_data_set_of_a_trillion_items_is_refused(self):
        class Huge(torch.utils.data.Dataset):
            def __len__(self):
                return 10**12

            def __getitem__(self, i):
                return torch.zeros(12), 0
        message = self.refused(data=Huge())
        self.assertIn("the training set has 1000000000000 samples: at most 2147483647", message)

    # ---- Medium 6: an empty training set is invalid input
    def test_an_empty_training_set_is_refused(self):
        message = self.refused(data=(self.train[0][:0], self.train[1][:0]))
        self.assertIn("the training set is empty", message)

    # ---- Medium 7: paths with bytes that are not UTF-8
    def test_a_config_path_and_out_with_bytes_that_are_not_utf8(self):
        folder = os.fsdecode(os.path.join(os.fsencode(self.tmp), b"\xff"))
        os.mkdir(folder)
        path = os.path.join(folder, os.fsdecode(b"c\xfe.json"))
        with open(path, "w") as f:
            json.dump(NATIVE, f)
        out = os.path.join(self.tmp, os.fsdecode(b"out\xfd"))
        res = asgdsim.run(path, out=out, quiet=True)
        self.assertEqual(res.exit_code, 0)
        self.assertEqual(res.folder, os.path.join(out, "n"))
        self.assertEqual(summary(res.folder, "async-seed1")["status"], "completed")
        self.assertEqual(asgdsim.validate(path)["runs"][0]["run_id"], "async-seed1")
        with open(os.path.join(res.folder, "async-seed1", "meta.json"), encoding="utf-8") as f:
            self.assertIn("asgdsim.run(", json.load(f)["command_line"])

    def test_a_model_file_whose_name_is_not_utf8_is_named_not_a_type_error(self):
        with open(os.path.join(self.tmp, os.fsdecode(b"m\xff.py")), "w") as f:
            f.write("import torch\ndef make():\n    return torch.nn.Linear(12, 4)\n")
        path = os.path.join(self.tmp, "c.json")
        with open(path, "w") as f:
            json.dump(torch_config(), f)
        p = subprocess.run([sys.executable, "-m", "asgdsim", "run", "c.json", "--model", os.fsdecode(b"m\xff.py:make"),
                            "--out", "out", "--quiet"], cwd=self.tmp, env=dict(os.environ, PYTHONPATH=PKG),
                           capture_output=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(b"not valid UTF-8", p.stderr)
        self.assertNotIn(b"Traceback", p.stderr)
        cfg = dict(torch_config(), model={"type": "torch", "module": os.fsdecode(b"m\xff.py:make")})
        with self.assertRaises(asgdsim.InputError) as e:
            asgdsim.run(cfg, out=self.tmp, quiet=True, data=self.train, test_data=self.test)
        self.assertIn("model.module", e.exception.message)
        self.assertIn("not UTF-8", e.exception.message)

    # ---- Medium 8: the run options are checked as `asgdsim run` checks them
    def test_threads_and_jobs_out_of_range(self):
        for kw, words in (({"threads": -1}, "threads= must be a whole number in 0..1024 (0 = the cores), got '-1'"),
                          ({"threads": 100000}, "got '100000'"),
                          ({"jobs": 5000}, "jobs= must be a whole number in 1..1024, got '5000'"),
                          ({"jobs": 0}, "jobs= must be a whole number in 1..1024, got '0'")):
            with self.assertRaises(asgdsim.InputError) as e:
                asgdsim.run(NATIVE, out=self.tmp, quiet=True, **kw)
            self.assertIn(words, e.exception.message)
        self.nothing_written()
        path = os.path.join(self.tmp, "c.json")
        with open(path, "w") as f:
            json.dump(NATIVE, f)
        p = subprocess.run([sys.executable, "-m", "asgdsim", "run", path, "--threads", "-1", "--out", "out"],
                           env=dict(os.environ, PYTHONPATH=PKG), capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--threads must be a whole number in 0..1024", p.stderr)

    # ---- Low 1: contract breaks are ModelError (an InputError, exit 2; issue #47: they arrived as a
    # plain InputError), not tracebacks (exit 1)
    def test_labels_of_shape_n_by_1(self):
        x, y = self.train
        message = self.refused(asgdsim.ModelError, data=(x, y.view(-1, 1)))
        self.assertIn("targets are integers of shape (256, 1)", message)

    def test_float_class_labels(self):
        x, y = self.train
        cfg = torch_config(data={"type": "torch", "classes": 4})
        message = self.refused(asgdsim.ModelError, cfg=cfg, data=(x, y.float()))
        self.assertIn("data.classes is 4 but the training set's targets are torch.float32", message)

    def test_dataset_targets_that_disagree_with_its_items(self):
        x, y = self.train

        class Liar(torch.utils.data.Dataset):
            targets = (y + 1) % 4

            def __len__(self):
                return len(y)

            def __getitem__(self, i):
                return x[i], y[i]
        message = self.refused(asgdsim.ModelError, data=Liar())
        self.assertIn("`targets` says sample 0 is", message)

    def test_a_complex_loss(self):
        message = self.refused(asgdsim.ModelError,
                               loss=lambda out, t: torch.nn.functional.cross_entropy(out, t) * (1 + 1j))
        self.assertIn("the loss returned a torch.complex64 number", message)

    # ---- Low 2 and 3: the model file is checked and fingerprinted
    def test_validate_refuses_a_missing_model_file(self):
        cfg = dict(torch_config(), model={"type": "torch", "module": "nowhere.py:make"})
        with self.assertRaises(asgdsim.ConfigError) as e:
            asgdsim.validate(cfg)
        self.assertIn("model.module", [path for path, _ in e.exception.issues])
        self.assertIn("nowhere.py cannot be read", e.exception.message)

    def test_an_edited_model_file_is_a_changed_config(self):
        source = os.path.join(self.tmp, "user.py")
        with open(source, "w") as f:
            f.write("import torch\ndef make():\n    return torch.nn.Linear(12, 4)\n")
        cfg = dict(torch_config(), model={"type": "torch", "module": source + ":make"})
        out = os.path.join(self.tmp, "out")
        asgdsim.run(cfg, out=out, quiet=True, data=self.train, test_data=self.test)
        with open(os.path.join(out, "t", "async-seed1", "config.json")) as f:
            self.assertRegex(json.load(f)["run"]["sources"]["model.module"], "^[0-9a-f]{16}$")
        asgdsim.run(cfg, out=out, quiet=True, data=self.train, test_data=self.test)  # the same: skipped
        with open(source, "a") as f:
            f.write("# edited: another model now\n")
        with self.assertRaises(asgdsim.InputError) as e:
            asgdsim.run(cfg, out=out, quiet=True, data=self.train, test_data=self.test)
        self.assertIn("holds a run of a different config (run.sources.model.module", e.exception.message)

    # ---- Low 7: a factory that forks does not leave the experiment's lock held
    def test_a_forking_factory_leaves_no_lock_behind(self):
        children = []

        def make():
            pid = os.fork()
            if pid == 0:  # a daemon the factory starts, outliving the run
                time.sleep(60)
                os._exit(0)
            children.append(pid)
            return small_net()()
        try:
            self.run_torch(model=make)
            res = self.run_torch(model=small_net(), rerun=True)  # takes the lock again at once
            self.assertEqual(res.exit_code, 0)
        finally:
            for pid in children:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        self.assertTrue(children)


if __name__ == "__main__":
    unittest.main()
