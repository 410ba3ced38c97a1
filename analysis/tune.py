#!/usr/bin/env python3
"""analysis/tune.py — the command line of asgdsim.analysis.tune (python/asgdsim/analysis/tune.py,
whose docstring has the usage), run from a source tree as `python3 analysis/tune.py ...`:
tune.py — picks each engine's training keys from a tuning sweep, by a stated rule.
Installed, the same is `python3 -m asgdsim.analysis.tune`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from asgdsim._env import run_script  # noqa: E402

run_script("tune", __file__)
