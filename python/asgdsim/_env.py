"""asgdsim._env — what the package needs from its environment, checked once, with an error
that says what to do: the compiled extension (asgdsim._core), torch for a torch run, and
matplotlib/pandas for the analysis scripts run from a source tree (analysis/*.py)."""
import importlib
import importlib.util
import os
import sys

from .errors import RunError

_HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's: the interpreter that sees python3-torch, matplotlib


def extension():
    """asgdsim._core, or an ImportError that names the package folder and how to build or
    install the extension (a source tree's python/asgdsim has none; neither has a build
    folder that built only the `asgdsim` binary)."""
    try:
        return importlib.import_module("asgdsim._core")
    except ImportError as error:
        raise ImportError(
            f"asgdsim's compiled extension (asgdsim._core) is missing from {_HERE} ({error}). "
            "Build it: ./scripts/run.sh or `cmake --build build --target asgdsim_python`, then "
            "PYTHONPATH=$PWD/build/python; or install the package: `/usr/bin/python3 -m pip install "
            "--no-build-isolation .` (docs/python.md, Setup)", name="asgdsim._core") from error


def torch_bridge():
    """asgdsim._torch (which imports torch), or a RunError naming this interpreter and how to
    get torch: Debian's python3-torch, seen by /usr/bin/python3 (a conda or pyenv python3
    first on PATH does not see it)."""
    if importlib.util.find_spec("torch") is None:
        raise RunError(f"a run with model.type or data.type \"torch\" needs PyTorch, and this interpreter "
                       f"({sys.executable}) cannot import torch: install it (Debian: apt-get install "
                       f"python3-torch) and use {SYSTEM_PYTHON}, the interpreter that sees it", 1)
    return importlib.import_module("asgdsim._torch")


def run_script(module, script):
    """The command line of asgdsim.analysis.<module> as the file `script` runs it (analysis/
    plot.py ...): matplotlib and pandas are looked up first; missing, the script runs again
    under /usr/bin/python3, which has them (once: ASGD_PLOT_REEXEC stops a loop)."""
    missing = [name for name in ("matplotlib", "pandas") if importlib.util.find_spec(name) is None]
    if missing:
        if (os.path.exists(SYSTEM_PYTHON) and not os.environ.get("ASGD_PLOT_REEXEC")
                and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON)):
            os.environ["ASGD_PLOT_REEXEC"] = "1"
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(script)] + sys.argv[1:])
        sys.exit(f"{os.path.basename(script)}: error: no module named {' or '.join(missing)}; install "
                 "matplotlib and pandas (Debian: apt-get install python3-matplotlib python3-pandas)")
    sys.exit(importlib.import_module(f"asgdsim.analysis.{module}").cli(sys.argv[1:]))
