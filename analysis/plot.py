#!/usr/bin/env python3
"""plot.py — draws an asgdsim experiment folder's figures and writes its report.

    analysis/plot.py RUNS/EXPERIMENT [--x time|updates|epoch]
        [--metric train_loss|test_loss|test_accuracy ...] [--out DIR] [--format png,svg]
        [--target-loss X] [--target-accuracy X] [--band ci|std|none] [--timeline-seconds S]

What it is: the command line. It reads the folder (asgdsim_data.read, the loader notebooks
use too), groups repeats and computes the table (groups.py), draws (figures.py), and
writes DIR/figure_<name>.png|svg, DIR/report.html, DIR/report.md and
DIR/summary_table.csv (DIR defaults to the experiment folder; files only, no sub-folder,
so that the experiment's sub-folders stay its runs). The last line on stdout is the
report's path.
What it is not: it never runs the simulator and reads nothing but the run-folder files.
Exit codes: 0 done, 2 invalid input (not an experiment folder, bad option), 1 other failure.
"""

import os
import sys


def reexec_with_matplotlib():
    """The first python3 on PATH may lack matplotlib/pandas; Debian's /usr/bin/python3 has
    them. Re-run this script under it once (ASGD_PLOT_REEXEC stops any loop)."""
    try:
        import matplotlib  # noqa: F401
        import pandas  # noqa: F401
        return
    except ImportError as error:
        missing = error
    system_python = "/usr/bin/python3"
    if (os.path.exists(system_python) and not os.environ.get("ASGD_PLOT_REEXEC")
            and os.path.realpath(sys.executable) != os.path.realpath(system_python)):
        os.environ["ASGD_PLOT_REEXEC"] = "1"
        os.execv(system_python, [system_python, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit(f"plot.py: error: {missing}; install matplotlib and pandas "
             "(Debian: apt-get install python3-matplotlib python3-pandas)")


reexec_with_matplotlib()

import argparse  # noqa: E402
import io  # noqa: E402
import math  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figures  # noqa: E402
import groups as grouping  # noqa: E402
import report  # noqa: E402
import stats  # noqa: E402
import asgdsim_data  # noqa: E402
from rundata import NotAnExperiment, warn  # noqa: E402

X_AXES = ("time", "updates", "epoch")
METRICS = ("train_loss", "test_loss", "test_accuracy")
FORMATS = ("png", "svg", "pdf")
DPI = 110


class UsageError(Exception):
    """A bad option value; exit code 2."""


def split_list(text, allowed, option):
    """'a,b' or 'a' -> ['a', 'b'], each checked against allowed."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    bad = [item for item in items if item not in allowed]
    if bad or not items:
        raise UsageError(f"{option}: {', '.join(bad) or 'empty'} is not one of "
                         f"{', '.join(allowed)}")
    return items


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog="plot.py", description="Draw an asgdsim experiment's figures and report.")
    parser.add_argument("experiment", help="experiment folder RUNS/EXPERIMENT")
    parser.add_argument("--x", choices=X_AXES,
                        help="x axis of the convergence curves (default: all three)")
    parser.add_argument("--metric", nargs="+", action="extend", metavar="METRIC",
                        help="metrics to draw, among " + ", ".join(METRICS) +
                             " (space or comma separated; default: all with data)")
    parser.add_argument("--out", help="output folder (default: the experiment folder)")
    parser.add_argument("--format", default="png,svg",
                        help="figure file formats, comma separated, among "
                             + ", ".join(FORMATS) + " (default: png,svg)")
    parser.add_argument("--target-loss", type=float, metavar="X",
                        help="train-loss target for time-to-target and scaling (default: "
                             f"{grouping.DEFAULT_TARGET_FACTOR} x the worst final train "
                             "loss among completed runs that trained, i.e. ended at most "
                             f"{grouping.TRAINED_FRACTION} x their first loss)")
    parser.add_argument("--target-accuracy", type=float, metavar="X",
                        help="test-accuracy target for time-to-target (default: none)")
    parser.add_argument("--band", choices=stats.BANDS, default=stats.DEFAULT_BAND,
                        help="spread over seeds drawn as bands and error bars and written "
                             "as \u00b1 in the tables: ci = 95%% confidence interval of the "
                             "mean (Student's t), std = \u00b11 sample std, none "
                             "(default: ci)")
    parser.add_argument("--timeline-seconds", type=float, metavar="S",
                        help="timeline window from the first event, in virtual seconds "
                             "(default: whole run if short, else its first 2000 events)")
    args = parser.parse_args(argv)
    args.metric = split_list(",".join(args.metric), METRICS, "--metric") \
        if args.metric else list(METRICS)
    args.format = split_list(args.format, FORMATS, "--format")
    return args


def loss_target(args, groups):
    """(value, how it was chosen) of the train-loss target."""
    if args.target_loss is not None:
        return args.target_loss, "given with --target-loss"
    value = grouping.default_target_loss(groups)
    if math.isnan(value):
        return value, "no completed run that trained to derive it from"
    return value, (f"{grouping.DEFAULT_TARGET_FACTOR} x the worst final train loss among "
                   f"completed runs that trained (final <= {grouping.TRAINED_FRACTION} x first)")


def draw_all(experiment, groups, table, args, target):
    """[(name, Figure)] for every figure the experiment has data for."""
    colours = figures.group_colours(groups)
    x_axes = [args.x] if args.x else list(X_AXES)
    keys = experiment.sweep_keys
    drawn = [
        ("convergence", figures.draw_convergence(groups, args.metric, x_axes, colours,
                                                 args.band)),
        ("sweep", figures.draw_sweep(table, keys, target, args.band)),
        ("staleness", figures.draw_staleness(groups, keys, colours)),
        ("scaling", figures.draw_scaling(table, keys, target, colours, args.band)),
        ("topology", figures.draw_topology_speedup(groups, colours)),
        ("timeline", figures.draw_timeline(groups, args.timeline_seconds)),
        ("workers", figures.draw_workers(groups)),
    ]
    if drawn[0][1] is None:
        warn("no convergence figure: no run has finite values for "
             f"{', '.join(args.metric)} against {', '.join(x_axes)}")
    return [(name, fig) for name, fig in drawn if fig is not None]


# Figures are files beside the report, not a sub-folder: a sub-folder of the experiment
# folder would look like one more run to a script that walks glob("*/").
FIGURE_PREFIX = "figure_"


def figure_file(name, fmt):
    return f"{FIGURE_PREFIX}{name}.{fmt}"


def save_figure(fig, name, out, formats):
    """Writes out/figure_<name>.<format> for each format; returns the PNG bytes (for the
    HTML)."""
    options = dict(dpi=DPI, bbox_inches="tight", pad_inches=0.15, facecolor="white")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", **options)
    png = buffer.getvalue()
    for fmt in formats:
        path = out / figure_file(name, fmt)
        if fmt == "png":
            path.write_bytes(png)
        else:
            fig.savefig(path, format=fmt, **options)
    return png


def figure_reference(name, formats):
    """Path of a figure relative to the report, preferring PNG."""
    return figure_file(name, "png" if "png" in formats else formats[0])


def main(argv):
    args = parse_arguments(argv)
    experiment = asgdsim_data.read(args.experiment)
    out = Path(args.out) if args.out else experiment.folder
    out.mkdir(parents=True, exist_ok=True)
    if (out / "plots").is_dir():
        warn(f"{out / 'plots'} is from an older plot.py, which drew into that sub-folder; "
             f"figures are now {out}/{FIGURE_PREFIX}*.png beside the report. Remove plots/ "
             "when you no longer need it (a script that walks the experiment's sub-folders "
             "takes it for a run).")

    groups = grouping.group_runs(experiment)
    target, how = loss_target(args, groups)
    targets = [("train loss \u2264", target, how)]
    if args.target_accuracy is not None:
        targets.append(("test accuracy \u2265", args.target_accuracy,
                        "given with --target-accuracy"))
    table = grouping.summary_table(groups, experiment.sweep_keys, target, args.target_accuracy)
    counts = grouping.status_counts(experiment.runs)
    provenance = report.provenance_rows(experiment, ["analysis/plot.py"] + list(argv))

    rendered = [(name, save_figure(fig, name, out, args.format), getattr(fig, "asgd_notes", []))
                for name, fig in draw_all(experiment, groups, table, args, target)]
    report.write_summary_csv(table, out / "summary_table.csv")
    report.write_markdown(out / "report.md", experiment, table,
                          [(n, figure_reference(n, args.format), notes)
                           for n, _, notes in rendered],
                          counts, targets, args.band, provenance)
    report_path = out / "report.html"
    report.write_html(report_path, experiment, table, rendered, counts, targets, args.band,
                      provenance)
    print(f"figures: {out}/{FIGURE_PREFIX}*.{args.format[0]}")
    print(report_path)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (NotAnExperiment, UsageError) as error:
        print(f"plot.py: error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:  # noqa: BLE001 — anything else is a bug or an I/O failure: exit 1
        traceback.print_exc()
        print("plot.py: error: failed (see the traceback above)", file=sys.stderr)
        sys.exit(1)
