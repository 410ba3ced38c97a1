#!/usr/bin/env python3
"""run_notebook.py — runs first_study.ipynb's code cells headless, in order, in one namespace
(as Jupyter would), then prints its summary table and where it saved its figure:

    /usr/bin/python3 analysis/examples/run_notebook.py [STUDY] [--target X] [--figure FILE]

STUDY is the experiment folder (default runs/first_study, relative to the repository when
not found here), X the test-accuracy target (default 0.8), FILE the figure (default
STUDY/figure_notebook.png, beside plot.py's figures). The notebook reads them from
ASGD_STUDY, ASGD_TARGET and ASGD_FIGURE, which this sets.

What it is not: Jupyter (no kernel, no outputs stored: the notebook file is not changed).
Exit codes: 0 done, 2 no such study folder or notebook, 1 a cell raised.
"""

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOTEBOOK = HERE / "first_study.ipynb"


def run_cells(notebook):
    """Executes the notebook's code cells in order in one fresh namespace; returns it."""
    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    namespace = {"__name__": "__main__"}
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{notebook} cell {index}", "exec"), namespace)
    return namespace


def main(argv=None):
    parser = argparse.ArgumentParser(prog="run_notebook.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("study", nargs="?", default="runs/first_study", help="the experiment folder")
    parser.add_argument("--target", type=float, default=0.8, help="test-accuracy target (default 0.8)")
    parser.add_argument("--figure", help="the figure's file (default STUDY/figure_notebook.png)")
    parser.add_argument("--notebook", default=str(NOTEBOOK), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    study = Path(args.study)
    if not study.is_dir() and not study.is_absolute() and (HERE.parents[1] / study).is_dir():
        study = HERE.parents[1] / study
    if not study.is_dir():
        print(f"run_notebook.py: {args.study}: no such experiment folder (run "
              "build/asgdsim run experiments/configs/first_study.json first)", file=sys.stderr)
        return 2
    if not Path(args.notebook).is_file():
        print(f"run_notebook.py: {args.notebook}: no such notebook", file=sys.stderr)
        return 2
    figure = Path(args.figure) if args.figure else study / "figure_notebook.png"
    os.environ.update(ASGD_STUDY=str(study.resolve()), ASGD_TARGET=repr(args.target),
                      ASGD_FIGURE=str(figure), ASGD_REPO=str(HERE.parents[1]))
    os.environ.setdefault("MPLBACKEND", "Agg")  # headless: no window
    namespace = run_cells(args.notebook)
    print(f"time to test accuracy >= {args.target:g} (s), per group:")
    print(namespace["summary"].to_string())
    print(f"figure: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
