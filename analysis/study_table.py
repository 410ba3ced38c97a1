#!/usr/bin/env python3
"""analysis/study_table.py — the command line of asgdsim.analysis.study_table (python/asgdsim/analysis/study_table.py,
whose docstring has the usage), run from a source tree as `python3 analysis/study_table.py ...`:
Writes a study's results table into a README from its runs, so no number is typed by hand.
Installed, the same is `python3 -m asgdsim.analysis.study_table`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from asgdsim._env import run_script  # noqa: E402

run_script("study_table", __file__)
