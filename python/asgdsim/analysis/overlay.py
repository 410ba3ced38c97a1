#!/usr/bin/env python3
"""overlay.py — overlays simulated runs and real (MPI cluster) runs of the same config.

    analysis/overlay.py SIM_FOLDER REAL_FOLDER [--x time|epoch|updates]
        [--metric train_loss|test_loss|test_accuracy ...] [--out DIR] [--format png,svg]

SIM_FOLDER is what `asgdsim run CONFIG` wrote (RUNS/<name>), REAL_FOLDER what
`mpirun -np N+1 asgdsim cluster CONFIG` wrote (RUNS/<name>-cluster). Runs are paired by
run id. Per metric, DIR/overlay_<metric>.<format>: one panel per x axis (epoch and time,
or just --x), one colour per run id, simulated solid, real dashed with markers. Then
DIR/overlay.md: per run id, the simulated and real final train loss, final test accuracy,
time, updates and mean staleness (summary.json) and their difference, and the figures.
DIR defaults to REAL_FOLDER. The last line on stdout is overlay.md's path.

Time is not the same quantity on both sides: the simulator's time column is virtual
seconds (the config's cost model), the cluster's wall-clock seconds. Both are drawn on
one axis: the horizontal gap shows how the cost model compares with the real processes.

What it is not: it runs nothing; for one folder's own figures and report use plot.py.
Exit codes: 0 done, 2 invalid input (not an experiment folder, no run id in both folders,
bad option), 1 other failure. Runs in only one folder are named in a warning on stderr.
"""

import argparse
import math
import sys
from pathlib import Path

from .options import UsageError, split_list

X_AXES = ("epoch", "time", "updates")
DEFAULT_X_AXES = ("epoch", "time")
METRICS = ("train_loss", "test_loss", "test_accuracy")
FORMATS = ("png", "svg", "pdf")
DPI = 110
X_LABELS = {"epoch": "epoch", "updates": "updates",
            "time": "time (s): simulated = virtual seconds, real = wall-clock seconds"}
METRIC_LABELS = {"train_loss": "train loss", "test_loss": "test loss",
                 "test_accuracy": "test accuracy"}
COMPLETED = "completed"  # a run's status when it finished normally (rundata.Run.status)
# (label in overlay.md, how to read it from a run)
TABLE_ROWS = (
    ("final train loss", lambda run: run.final("train_loss")),
    ("final test accuracy", lambda run: run.final("test_accuracy")),
    ("time (s): virtual / wall-clock", lambda run: run.total("time")),
    ("updates", lambda run: run.total("updates")),
    ("mean staleness", lambda run: run.mean_staleness()),
)


def warn(message):
    print("overlay.py: warning: " + message, file=sys.stderr)


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog="overlay.py",
        description="Overlay simulated runs (asgdsim run) and real runs (asgdsim cluster) "
                    "of the same config, paired by run id.")
    parser.add_argument("sim", metavar="SIM_FOLDER", help="experiment folder of `asgdsim run`")
    parser.add_argument("real", metavar="REAL_FOLDER",
                        help="experiment folder of `asgdsim cluster` (RUNS/<name>-cluster)")
    parser.add_argument("--x", choices=X_AXES,
                        help="the one x axis to draw (default: epoch and time)")
    parser.add_argument("--metric", nargs="+", action="extend", metavar="METRIC",
                        help="metrics to draw, among " + ", ".join(METRICS) +
                             " (space or comma separated; default: all with data)")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: REAL_FOLDER)")
    parser.add_argument("--format", default="png,svg",
                        help="figure file formats, comma separated, among "
                             + ", ".join(FORMATS) + " (default: png,svg)")
    args = parser.parse_args(argv)
    args.metric = split_list(",".join(args.metric), METRICS, "--metric") \
        if args.metric else list(METRICS)
    args.format = split_list(args.format, FORMATS, "--format")
    args.x_axes = [args.x] if args.x else list(DEFAULT_X_AXES)
    return args


# ---------------------------------------------------------------- pairing

def pair_runs(sim, real):
    """[(run_id, simulated Run, real Run)] in the simulated folder's order; warns about run
    ids found in one folder only; UsageError when no run id is in both."""
    real_by_id = {run.run_id: run for run in real.runs}
    sim_ids = {run.run_id for run in sim.runs}
    pairs = [(run.run_id, run, real_by_id[run.run_id])
             for run in sim.runs if run.run_id in real_by_id]
    only_sim = [run.run_id for run in sim.runs if run.run_id not in real_by_id]
    only_real = [run.run_id for run in real.runs if run.run_id not in sim_ids]
    if not pairs:
        raise UsageError(f"no run id is in both {sim.folder} (simulated: "
                         f"{', '.join(sorted(sim_ids)) or 'no runs'}) and {real.folder} "
                         f"(real: {', '.join(sorted(real_by_id)) or 'no runs'})")
    if only_sim:
        warn(f"only in the simulated folder {sim.folder}, not drawn: {', '.join(only_sim)}")
    if only_real:
        warn(f"only in the real folder {real.folder}, not drawn: {', '.join(only_real)}")
    return pairs


def check_modes(sim, real):
    """Warns when the folders look swapped or mixed up: summary.json of an `asgdsim
    cluster` run says "mode": "cluster", a simulated one has no mode."""
    def cluster_runs(experiment):
        with_summary = [r for r in experiment.runs if r.summary is not None]
        return with_summary, [r for r in with_summary if r.summary.get("mode") == "cluster"]
    if Path(sim.folder).resolve() == Path(real.folder).resolve():
        warn(f"SIM_FOLDER and REAL_FOLDER are the same folder {sim.folder}")
        return
    sim_known, sim_cluster = cluster_runs(sim)
    real_known, real_cluster = cluster_runs(real)
    if sim_cluster:
        warn(f"SIM_FOLDER {sim.folder} holds runs written by `asgdsim cluster` "
             f"(\"mode\": \"cluster\", e.g. {sim_cluster[0].run_id}); are the folders swapped?")
    if real_known and not real_cluster:
        warn(f"REAL_FOLDER {real.folder} holds no run written by `asgdsim cluster` "
             "(no \"mode\": \"cluster\" in its summary.json files); its time is virtual, "
             "not wall-clock")


# ---------------------------------------------------------------- figures

def run_colours(count):
    """One colour per run id: tab10, tab20, then a sampled continuous map."""
    import matplotlib
    if count <= 10:
        return list(matplotlib.colormaps["tab10"].colors[:count])
    if count <= 20:
        return list(matplotlib.colormaps["tab20"].colors[:count])
    return [matplotlib.colormaps["turbo"](i / max(count - 1, 1)) for i in range(count)]


def has_values(pairs, x_name, metric):
    from .groups import curve
    return any(len(curve(run, x_name, metric)[0]) for _, sim, real in pairs for run in (sim, real))


def draw_overlay(pairs, metric, x_axes, colours, title):
    """One metric: a panel per x axis, simulated solid, real dashed with markers. None when
    no run of either folder has a finite value of metric against any of x_axes."""
    from matplotlib.figure import Figure
    from .figures import add_figure_legend, set_metric_scale, wrap_title  # sets Agg
    from .groups import curve
    x_axes = [x for x in x_axes if has_values(pairs, x, metric)]
    if not x_axes:
        return None
    fig = Figure(figsize=(4.8 * len(x_axes), 3.6), layout="constrained")
    axes = fig.subplots(1, len(x_axes), squeeze=False)[0]
    handles = {}
    for ax, x_name in zip(axes, x_axes):
        completed, everything = [], []
        for (run_id, sim, real), colour in zip(pairs, colours):
            for run, side, style in ((sim, "simulated", dict(ls="-", lw=1.6)),
                                     (real, "real", dict(ls="--", lw=1.3, marker="o", ms=3.5))):
                x, y = curve(run, x_name, metric)
                if not len(x):
                    continue
                if side == "simulated" and len(x) == 1:
                    style = dict(style, marker=".")
                label = f"{run_id} {side}" + ("" if run.status == COMPLETED
                                               else f" ({run.status})")
                line, = ax.plot(x, y, color=colour, label=label, **style)
                handles.setdefault((run_id, side), line)
                everything.append(y)
                if run.status == COMPLETED:
                    completed.append(y)
        set_metric_scale(ax, metric, completed, everything)
        ax.set_xlabel(X_LABELS.get(x_name, x_name))
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(wrap_title(title, fig), fontsize="medium")
    order = [(run_id, side) for run_id, _, _ in pairs for side in ("simulated", "real")]
    add_figure_legend(fig, [handles[key] for key in order if key in handles])
    return fig


def save_figure(fig, stem, out, formats):
    """Writes out/stem.<format> for each format; returns the paths."""
    options = dict(dpi=DPI, bbox_inches="tight", pad_inches=0.15, facecolor="white")
    paths = []
    for fmt in formats:
        path = out / f"{stem}.{fmt}"
        fig.savefig(path, format=fmt, **options)
        paths.append(path)
    return paths


# ---------------------------------------------------------------- overlay.md

def format_number(value, signed=False):
    """Integers in full, other numbers to 6 significant digits, non-finite as a dash."""
    if value is None or not math.isfinite(value):
        return "\u2014"
    if value == 0:
        return "0"
    sign = "+" if signed else ""
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):{sign}d}"
    return f"{value:{sign}.6g}"


def md_escape(text):
    return str(text).replace("|", "\\|")


def run_section(run_id, sim, real):
    lines = [f"## {md_escape(run_id)}", ""]
    notes = [f"engine {md_escape(sim.engine)}"]
    for run, side in ((sim, "simulated"), (real, "real")):
        if run.status != COMPLETED:
            notes.append(f"{side} run {run.status}")
        if run.summary is None:
            notes.append(f"{side} run has no summary.json (numbers from index.csv, if any)")
    lines += ["; ".join(notes) + ".", "",
              "| quantity | simulated | real | real \u2212 simulated | real / simulated |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for label, read in TABLE_ROWS:
        a, b = read(sim), read(real)
        ratio = b / a if a != 0 else math.nan
        lines.append(f"| {label} | {format_number(a)} | {format_number(b)} | "
                     f"{format_number(b - a, signed=True)} | {format_number(ratio)} |")
    return lines + [""]


def write_markdown(path, sim, real, pairs, figure_links, args):
    lines = [f"# Simulated vs real: {md_escape(sim.name)} / {md_escape(real.name)}", "",
             f"- simulated (`asgdsim run`): `{sim.folder}`",
             f"- real (`asgdsim cluster`): `{real.folder}`",
             f"- {len(pairs)} run id(s) in both folders, paired by run id.",
             "- Time: simulated runs report **virtual** seconds (the simulator's cost "
             "model), real runs **wall-clock** seconds.",
             "- Figures: one colour per run id; simulated = solid line, real = dashed line "
             "with markers.", ""]
    only_sim = sorted({r.run_id for r in sim.runs} - {p[0] for p in pairs})
    only_real = sorted({r.run_id for r in real.runs} - {p[0] for p in pairs})
    if only_sim or only_real:
        lines.append("Not paired (in one folder only): "
                     + "; ".join(part for part in (
                         only_sim and "simulated only: " + ", ".join(only_sim),
                         only_real and "real only: " + ", ".join(only_real)) if part) + ".")
        lines.append("")
    lines += ["Final values and totals from each run's summary.json.", ""]
    for run_id, sim_run, real_run in pairs:
        lines += run_section(run_id, sim_run, real_run)
    if figure_links:
        lines += ["## Figures", ""]
        for metric, link in figure_links:
            name = METRIC_LABELS.get(metric, metric)
            lines += [f"### {name}", "", f"![{name}: simulated vs real]({link})", ""]
    else:
        lines += ["No figures: no run has finite values for "
                  f"{', '.join(args.metric)} against {', '.join(args.x_axes)}.", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


# ---------------------------------------------------------------- main

def main(argv):
    args = parse_arguments(argv)
    from . import rundata
    rundata.warn = warn  # its warnings (unreadable files) should name this command
    try:
        sim = rundata.load_experiment(args.sim)
        real = rundata.load_experiment(args.real)
    except rundata.NotAnExperiment as error:
        raise UsageError(str(error)) from None
    pairs = pair_runs(sim, real)
    check_modes(sim, real)
    out = Path(args.out) if args.out else real.folder
    out.mkdir(parents=True, exist_ok=True)

    colours = run_colours(len(pairs))
    figure_links = []
    for metric in args.metric:
        title = (f"{METRIC_LABELS.get(metric, metric)}: simulated ({sim.name}, solid) vs "
                 f"real ({real.name}, dashed with markers)")
        fig = draw_overlay(pairs, metric, args.x_axes, colours, title)
        if fig is None:
            warn(f"no overlay_{metric}: no paired run has finite {metric} against "
                 f"{', '.join(args.x_axes)}")
            continue
        for path in save_figure(fig, f"overlay_{metric}", out, args.format):
            print(path)
        fmt = "png" if "png" in args.format else args.format[0]
        figure_links.append((metric, f"overlay_{metric}.{fmt}"))

    md_path = out / "overlay.md"
    write_markdown(md_path, sim, real, pairs, figure_links, args)
    print(md_path)


def cli(argv=None):
    """The command line (analysis/overlay.py, python3 -m asgdsim.analysis.overlay): exits with its code."""
    from . import rundata
    rundata.run_command(main, sys.argv[1:] if argv is None else argv, invalid=(UsageError,))


if __name__ == "__main__":
    cli()
