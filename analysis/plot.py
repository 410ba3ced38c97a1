#!/usr/bin/env python3
"""analysis/plot.py — the command line of asgdsim.analysis.plot (python/asgdsim/analysis/plot.py,
whose docstring has the usage), run from a source tree as `python3 analysis/plot.py ...`:
plot.py — draws an asgdsim experiment folder's figures and writes its report.
Installed, the same is `python3 -m asgdsim.analysis.plot`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from asgdsim._env import run_script  # noqa: E402

run_script("plot", __file__)
