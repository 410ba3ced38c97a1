#!/usr/bin/env python3
"""analysis/overlay.py — the command line of asgdsim.analysis.overlay (python/asgdsim/analysis/overlay.py,
whose docstring has the usage), run from a source tree as `python3 analysis/overlay.py ...`:
overlay.py — overlays simulated runs and real (MPI cluster) runs of the same config.
Installed, the same is `python3 -m asgdsim.analysis.overlay`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from asgdsim._env import run_script  # noqa: E402

run_script("overlay", __file__)
