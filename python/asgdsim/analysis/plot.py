#!/usr/bin/env python3
"""plot.py — draws an asgdsim experiment folder's figures and writes its report.

    analysis/plot.py RUNS/EXPERIMENT [--x time|updates|epoch]
        [--metric train_loss|test_loss|test_accuracy ...] [--out DIR] [--format png,svg]
        [--target-loss X] [--target-accuracy X] [--band ci95|minmax|iqr|std|none]
        [--where KEY=VALUE ...] [--col KEY] [--row KEY] [--hue KEY] [--style KEY]
        [--timeline-seconds S] [--check]

The target is the question: --target-accuracy X (or --target-loss X) makes the sweep,
scaling and time-to-target figures and the table's time column "time to test accuracy
>= X"; with neither, an automatic train-loss target. KEY is engine or a sweep key as the
config spells it (train.lr); --where keeps only the runs with that value (repeat it: one
key's values are alternatives, different keys must all hold).

What it is: the command line. It reads the folder (data.read, the loader notebooks
use too), groups repeats and computes the table (groups.py), draws (figures.py), and
writes DIR/figure_<name>.png|svg, DIR/report.html, DIR/report.md and
DIR/summary_table.csv (DIR defaults to the experiment folder; files only, no sub-folder,
so that the experiment's sub-folders stay its runs). The last line on stdout is the
report's path.
What it is not: it never runs the simulator and reads nothing but the run-folder files.
Exit codes: 0 done, 2 invalid input (not an experiment folder, bad option), 1 other failure.
"""

import argparse
import dataclasses
import io
import math
import sys
from pathlib import Path

from . import data, figures, report, rundata, stats
from . import groups as grouping
from .options import UsageError, band_argument, split_list  # noqa: F401 (plot.UsageError: the scripts' own)
from .rundata import warn

X_AXES = ("time", "updates", "epoch")
METRICS = ("train_loss", "test_loss", "test_accuracy")
FORMATS = ("png", "svg", "pdf")
DPI = 110


def parse_where(text):
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--where {text!r}: expected KEY=VALUE (train.lr=0.1, engine=async)")
    return key.strip(), value.strip()


def resolve_key(key, experiment, option):
    """A facet or filter key: engine, a sweep key, or model (the sweep key model or
    model.type); UsageError naming the valid keys otherwise."""
    keys = ["engine"] + list(experiment.sweep_keys)
    if key in keys:
        return key
    if key == "model":
        for candidate in ("model", "model.type"):
            if candidate in experiment.sweep_keys:
                return candidate
    raise UsageError(f"{option} {key}: not engine or a sweep key of this experiment "
                     f"(keys: {', '.join(keys)})")


def run_value(run, key):
    if key == "engine":
        return run.engine
    return grouping.canonical_text(run.sweep.get(key))


def filter_runs(experiment, where):
    """experiment with only the runs every --where key allows (one key's values are
    alternatives). UsageError when a key is unknown or nothing is left."""
    if not where:
        return experiment
    allowed = {}
    for key, value in where:
        key = resolve_key(key, experiment, "--where")
        text = value if key == "engine" else grouping.canonical_text(
            rundata.parse_index_value(value))
        allowed.setdefault(key, set()).add(text)
    runs = [run for run in experiment.runs
            if all(run_value(run, key) in values for key, values in allowed.items())]
    if not runs:
        raise UsageError("--where leaves no run: " + "; ".join(
            f"{k} in {{{', '.join(sorted(v))}}}" for k, v in allowed.items()))
    return dataclasses.replace(experiment, runs=runs)


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
    parser.add_argument("--band", type=band_argument, default=stats.DEFAULT_BAND,
                        help="spread over seeds drawn as bands and error bars and written "
                             "in the tables (from 3 seeds; fewer: the seeds are shown): "
                             "ci95 (or ci) = 95%% confidence interval of the mean "
                             "(Student's t), minmax = smallest to largest seed, iqr = 25th "
                             "to 75th percentile, std = \u00b11 sample std, none "
                             "(default: ci95). Bands are clipped to the metric's range")
    parser.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                        help="keep only the runs whose KEY (engine or a sweep key) is VALUE")
    for role, what in (("col", "panel columns"), ("row", "panel rows"),
                       ("hue", "line colours (default: engine)"),
                       ("style", "line markers and dashes")):
        parser.add_argument(f"--{role}", metavar="KEY",
                            help=f"sweep and convergence figures: {what} by KEY (engine, model or a "
                                 "sweep key; the convergence panels of one metric share their y axis)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing: say whether the report is older than the runs "
                             "(exit 1 when it is, naming them)")
    parser.add_argument("--timeline-seconds", type=float, metavar="S",
                        help="timeline window from the first event, in virtual seconds "
                             "(default: whole run if short, else its first 2000 events)")
    args = parser.parse_args(argv)
    args.where = [parse_where(item) for item in args.where]
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


def chosen_targets(args, groups):
    """[Target]: the question(s) asked, the figures following the first. --target-accuracy
    first, then --target-loss; with neither, the automatic train-loss target."""
    targets = []
    if args.target_accuracy is not None:
        targets.append(grouping.Target("test_accuracy", args.target_accuracy,
                                       "given with --target-accuracy"))
    if args.target_loss is not None or not targets:
        value, how = loss_target(args, groups)
        targets.append(grouping.Target("train_loss", value, how))
    return targets


def facet_options(args, experiment):
    return {role: resolve_key(getattr(args, role), experiment, f"--{role}")
            for role in figures.FACET_ROLES if getattr(args, role)}


def draw_all(experiment, groups, table, args, targets, facets=None):
    """[(name, Figure)] for every figure the experiment has data for."""
    colours = figures.group_colours(groups)
    x_axes = [args.x] if args.x else list(X_AXES)
    keys = experiment.sweep_keys
    drawn = [
        ("convergence", figures.draw_convergence(groups, args.metric, x_axes, colours,
                                                 args.band, facets)),
        ("sweep", figures.draw_sweep(table, keys, targets, args.band, facets)),
        ("staleness", figures.draw_staleness(groups, keys, colours)),
        ("scaling", figures.draw_scaling(table, keys, targets, colours, args.band)),
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
    if "matplotlib.pyplot" in sys.modules:  # seaborn's grids live in pyplot: free them
        sys.modules["matplotlib.pyplot"].close(fig)
    return png


def figure_reference(name, formats):
    """Path of a figure relative to the report, preferring PNG."""
    return figure_file(name, "png" if "png" in formats else formats[0])


def main(argv):
    args = parse_arguments(argv)
    experiment = data.read(args.experiment)
    out = Path(args.out) if args.out else experiment.folder
    if args.check:
        newer = report.runs_newer_than(experiment, out / "report.html")
        if newer is None:
            print(f"{out / 'report.html'}: no report yet")
            return 1
        if newer:
            print(f"{out / 'report.html'} is older than {len(newer)} run(s): "
                  + ", ".join(newer[:5]) + (" ..." if len(newer) > 5 else "")
                  + "; run plot.py again")
            return 1
        print(f"{out / 'report.html'} is up to date with its runs")
        return 0
    experiment = filter_runs(experiment, args.where)
    facets = facet_options(args, experiment)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "plots").is_dir():
        warn(f"{out / 'plots'} is from an older plot.py, which drew into that sub-folder; "
             f"figures are now {out}/{FIGURE_PREFIX}*.png beside the report. Remove plots/ "
             "when you no longer need it (a script that walks the experiment's sub-folders "
             "takes it for a run).")

    groups = grouping.group_runs(experiment)
    chosen = chosen_targets(args, groups)
    targets = [(f"{t.metric.replace('_', ' ')} {t.relation}", t.value, t.how) for t in chosen]
    table = grouping.summary_table(groups, experiment.sweep_keys, targets=chosen)
    counts = grouping.status_counts(experiment.runs)
    provenance = report.provenance_rows(experiment, ["analysis/plot.py"] + list(argv))

    rendered = [(name, save_figure(fig, name, out, args.format), getattr(fig, "asgd_notes", []))
                for name, fig in draw_all(experiment, groups, table, args, chosen, facets)]
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
    return 0


def cli(argv=None):
    """The command line (analysis/plot.py, python3 -m asgdsim.analysis.plot): exits with its code."""
    rundata.run_command(main, sys.argv[1:] if argv is None else argv, invalid=(UsageError,))


if __name__ == "__main__":
    cli()
