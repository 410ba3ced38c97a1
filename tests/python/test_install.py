"""tests/python/test_install.py — the package as a user gets it (issue #47): installed with
pip into a venv that sees the system's site packages, offline, as a wheel and as an
editable install, each running the README's Python example; the errors a user meets when
the extension or torch is missing; the typed border to the extension.

The installs reuse the build folder ctest built (setup.py builds the `asgdsim_core` target
in $ASGDSIM_BUILD_DIR: here an up-to-date no-op), so each takes a few seconds.

    ASGDSIM_PYTHONPATH=build/python /usr/bin/python3 -m unittest tests/python/test_install.py -v
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.abspath(os.environ.get("ASGDSIM_PYTHONPATH", os.path.join(REPO, "build", "python")))
BUILD = os.path.dirname(PKG)
sys.path.insert(0, PKG)

import torch  # noqa: E402

import asgdsim  # noqa: E402

FMNIST = "/usr/share/datasets/fashion-mnist"


def readme_example():
    """The README's Python example (the block under "From Python") on a tenth of its
    training set and 1000 test images, so that it runs in a second or two (torch's import
    is most of it)."""
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    section = text[text.index("## From Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert '"train_limit": 10000' in code, "the README's example changed: update readme_example()"
    return code.replace('"train_limit": 10000', '"train_limit": 1000, "test_limit": 1000')


def user_env(**extra):
    """The environment of a user's shell: no PYTHONPATH (the package must come from the
    install), offline (PIP_NO_INDEX: pip may not reach an index)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", OMP_NUM_THREADS="1", **extra)
    return env


@unittest.skipUnless(importlib.util.find_spec("venv") and importlib.util.find_spec("pip"),
                     "needs the venv module and pip (Debian: python3-venv, python3-pip)")
@unittest.skipUnless(os.path.isdir(FMNIST), f"the README example reads Fashion-MNIST ({FMNIST})")
class Install(unittest.TestCase):
    """pip install --no-build-isolation [-e] . into a venv with --system-site-packages."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="asgdsim_install_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def install(self, *how):
        venv = os.path.join(self.tmp, "venv")
        # --without-pip: the system's pip (python3-pip) runs in it, as it sees system packages
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], check=True)
        python = os.path.join(venv, "bin", "python")
        p = subprocess.run([python, "-m", "pip", "install", "--no-build-isolation", "--no-cache-dir", *how, "."],
                           cwd=REPO, env=user_env(ASGDSIM_BUILD_DIR=BUILD), capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
        return python

    def run_example(self, python):
        """Runs the example in an empty folder; returns where asgdsim was imported from."""
        code = "import asgdsim\nprint('FROM', asgdsim.__file__)\n" + readme_example()
        work = os.path.join(self.tmp, "work")
        os.makedirs(work)
        p = subprocess.run([python, "-c", code], cwd=work, env=user_env(), capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        accuracy = dict(re.findall(r"^(async|sync)\s+([0-9.]+)$", p.stdout, re.M))
        self.assertEqual(sorted(accuracy), ["async", "sync"], p.stdout)
        for engine, value in accuracy.items():  # trained: well above chance (0.1) on 10 classes
            self.assertGreater(float(value), 0.3, (engine, p.stdout))
        self.assertTrue(os.path.isfile(os.path.join(work, "runs", "mine", "async-seed1", "metrics.csv")))
        return re.search(r"^FROM (.*)$", p.stdout, re.M).group(1)

    def test_a_wheel_in_a_venv_runs_the_readme_example(self):
        python = self.install()
        where = self.run_example(python)
        self.assertTrue(where.startswith(os.path.join(self.tmp, "venv")), where)

    def test_an_editable_install_runs_the_readme_example(self):
        source = os.path.join(REPO, "python", "asgdsim")
        before = {f for f in os.listdir(source) if f.startswith("_core")}
        # the extension is copied into the source tree (build_ext --inplace): removed after
        self.addCleanup(lambda: [os.remove(os.path.join(source, f)) for f in os.listdir(source)
                                 if f.startswith("_core") and f not in before])
        python = self.install("-e")
        where = self.run_example(python)
        self.assertEqual(where, os.path.join(source, "__init__.py"))


class MissingPieces(unittest.TestCase):
    """What a user sees when the extension or torch is missing: what to do, not a raw
    "No module named" or an empty namespace package's "has no attribute 'run'"."""

    def test_without_the_extension_analysis_works_and_run_says_how_to_build_it(self):
        with tempfile.TemporaryDirectory() as tmp:  # the source tree's package: no _core
            shutil.copytree(os.path.join(REPO, "python", "asgdsim"), os.path.join(tmp, "asgdsim"),
                            ignore=shutil.ignore_patterns("_core*", "__pycache__"))
            code = ("import asgdsim.analysis, asgdsim\n"
                    "try:\n    asgdsim.run({})\n"
                    "except ImportError as e:\n    print('ERROR', e.name, e)\n")
            p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=tmp),
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("ERROR asgdsim._core asgdsim's compiled extension (asgdsim._core) is missing from "
                          + os.path.join(tmp, "asgdsim"), p.stdout)
            for how in ("./scripts/run.sh", "PYTHONPATH=$PWD/build/python", "pip install --no-build-isolation ."):
                self.assertIn(how, p.stdout)
            p = subprocess.run([sys.executable, "-m", "asgdsim", "list"], env=dict(os.environ, PYTHONPATH=tmp),
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertTrue(p.stderr.startswith("asgdsim: asgdsim's compiled extension"), p.stderr)
            self.assertNotIn("Traceback", p.stderr)

    def test_a_torch_run_without_torch_names_the_interpreter(self):
        x = torch.randn(32, 12)
        y = torch.randint(0, 4, (32,))
        cfg = {"name": "t", "model": {"type": "torch"}, "data": {"type": "torch"}, "stop": {"updates": 4},
               "cluster": {"workers": 2}, "engines": [{"type": "async"}]}
        with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(sys.modules, {"torch": None}):
            with self.assertRaises(asgdsim.RunError) as e:  # sys.modules["torch"] = None: not importable
                asgdsim.run(cfg, out=tmp, quiet=True, model=lambda: None, data=(x, y), test_data=(x, y))
        message = e.exception.message
        self.assertIn(f"this interpreter ({sys.executable}) cannot import torch", message)
        self.assertIn("apt-get install python3-torch", message)
        self.assertIn("/usr/bin/python3", message)


class Border(unittest.TestCase):
    """The typed border: options cross by name, the catalog's names, help()."""

    def test_importing_the_package_leaves_sys_path_alone(self):
        with tempfile.TemporaryDirectory() as tmp:
            code = ("import sys\nbefore = list(sys.path)\nimport asgdsim, asgdsim.analysis.plot\n"
                    "res = asgdsim.run({'name': 'n', 'model': {'type': 'quadratic', 'dim': 4}, 'stop': {'updates': 20},"
                    " 'cluster': {'workers': 2}, 'engines': [{'type': 'async'}]}, out='out', quiet=True)\n"
                    "rows = len(res.load())\n"
                    "assert sys.path == before, (before, sys.path)\n"
                    "flat = [m for m in ('stats', 'groups', 'palette', 'rundata', 'report', 'figures') if m in sys.modules]\n"
                    "assert not flat, flat\nprint('ROWS', rows)\n")
            p = subprocess.run([sys.executable, "-c", code], cwd=tmp, env=dict(os.environ, PYTHONPATH=PKG),
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertRegex(p.stdout, r"ROWS [1-9]")

    def test_run_options_cross_by_name_with_their_types(self):
        with self.assertRaises(TypeError):  # keyword-only: no value can land in another's place
            asgdsim._core.run("{}", "the config", b".", [], "x", b"out", asgdsim.RunOptions(), [], None)
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(TypeError) as e:
                asgdsim._core.run(config_text="{}", source="the config", base_dir=b".", sets=[], default_name="x",
                                  out=tmp.encode(), options=asgdsim.RunOptions(quiet="yes"), given=[],
                                  make_bridge=None)
            self.assertIn("RunOptions.quiet: 'yes' is not a bool", str(e.exception))
            self.assertEqual(os.listdir(tmp), [])

    def test_catalog_keeps_list_as_its_alias(self):
        self.assertIs(asgdsim.list, asgdsim.catalog)
        self.assertIn("train", [s["name"] for s in asgdsim.catalog()["sections"]])

    def test_help_shows_the_types_and_the_contract(self):
        import pydoc
        text = pydoc.render_doc(asgdsim.run, renderer=pydoc.plaintext)
        self.assertIn("model: 'Optional[Model]' = None", text)
        self.assertIn("-> 'Results'", text)
        contract = pydoc.render_doc(asgdsim.contract, renderer=pydoc.plaintext)
        for name in ("class ModelFactory(typing.Protocol)", "class Loss(typing.Protocol)",
                     "class SampleSet(typing.Protocol)", "gradient contract"):
            self.assertIn(name, contract)
        self.assertIsInstance(torch.utils.data.TensorDataset(torch.zeros(2, 1), torch.zeros(2)), asgdsim.SampleSet)


if __name__ == "__main__":
    unittest.main()
