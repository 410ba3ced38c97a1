"""Draws the experiment's figures with matplotlib (Agg backend, no pyplot global state).

What it is: one draw_* function per figure. Each takes groups (groups.py) and returns a
matplotlib Figure, or None when the experiment holds nothing to show in it.
What it is not: no statistics beyond calling groups.py, no saving (plot.py saves), and no
file reading except trace.json through rundata.read_trace.
"""

import math
import textwrap

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import (FixedFormatter, FixedLocator, FuncFormatter,  # noqa: E402
                               MaxNLocator, NullLocator, ScalarFormatter)
from matplotlib.transforms import ScaledTranslation  # noqa: E402

from . import stats  # noqa: E402
from .groups import (COMPLETED, Target, band_interval, curve,  # noqa: E402
                    final_train_loss, mean_curve, mean_curve_values, value_sort_key)
from .rundata import read_trace  # noqa: E402

X_LABELS = {"time": "virtual time (s)", "updates": "updates", "epoch": "epoch"}
METRIC_LABELS = {"train_loss": "train loss", "test_loss": "test loss",
                 "test_accuracy": "test accuracy"}
LOSS_METRICS = ("train_loss", "test_loss")
TRACE_COLOURS = {"compute": "tab:blue", "push": "tab:orange", "pull": "tab:green",
                 "wait": "#c8c8c8", "apply": "tab:red"}
OTHER_TRACE_COLOUR = "tab:purple"
WORKERS_KEY = "cluster.workers"
# Past this many workers, a bar per worker is unreadable: the timeline aggregates the
# workers into heat-map rows (the share of workers in each state over time) and the
# utilisation figure into a heat map (a column per worker), so no worker is left out.
MAX_WORKER_ROWS = 64
# A diverged run's loss can reach 1e30 before it turns NaN; the y axis stops at this
# factor above the largest value any completed run shows, so curves stay readable.
DIVERGED_HEADROOM = 10.0


from .palette import ENGINE_COLOURS, engine_colour, engine_palette, shade  # noqa: E402,F401


def group_colours(groups):
    """{group key: colour}: the groups of one engine type share its fixed colour
    (engine_colour); a type with several groups (named variants, sweep points) gives each a
    shade of it, dark to light in group order (engine, then sweep values)."""
    by_type = {}
    for group in groups:
        by_type.setdefault(group.engine_type, []).append(group)
    colours = {}
    for engine_type, members in by_type.items():
        for i, group in enumerate(members):
            colours[group.key] = shade(engine_colour(engine_type), i, len(members))
    return colours


def has_values(groups, column):
    """Whether any run's metrics.csv has a finite value in column."""
    for group in groups:
        for run in group.runs:
            metrics = run.metrics
            if metrics is not None and column in metrics and np.isfinite(metrics[column]).any():
                return True
    return False


def legend_columns(count, per_column=18):
    return max(1, math.ceil(count / per_column))


def wrap_title(text, fig):
    """Wraps a figure title to the figure's width so it never runs into the legend."""
    return textwrap.fill(text, width=max(40, int(fig.get_figwidth() * 13)))


def add_figure_legend(fig, handles, title=None):
    """Legend to the right of all axes (never over data); savefig uses bbox_inches=tight."""
    if handles:
        fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                   fontsize="small", title=title, title_fontsize="small",
                   ncol=legend_columns(len(handles)), frameon=False)


# ---------------------------------------------------------------- convergence

def draw_convergence(groups, metrics, x_axes, colours, band=stats.DEFAULT_BAND, facets=None):
    """Grid: rows = metrics, columns = x axes (facets: draw_convergence_facets instead). For each group's completed runs: every seed
    thin to its own end (a tick where it ends), and their mean, thick, over the range
    every seed covers, with the band (stats.py). Every other run dashed on its own.
    Whatever the frame or the mean leaves out is said under the figure (cut_notes)."""
    if facets and any(facets.values()):
        return draw_convergence_facets(groups, metrics, x_axes, band, facets)
    metrics = [m for m in metrics if has_values(groups, m)]
    x_axes = [x for x in x_axes if has_values(groups, x)]
    if not metrics or not x_axes:
        return None
    fig = Figure(figsize=(4.0 * len(x_axes), 2.9 * len(metrics)), layout="constrained")
    axes = fig.subplots(len(metrics), len(x_axes), squeeze=False, sharex="col")
    frame_notes = set()
    for i, metric in enumerate(metrics):
        for j, x_name in enumerate(x_axes):
            ax = axes[i][j]
            frame_notes |= draw_convergence_panel(ax, groups, x_name, metric, colours, band)
            if i == len(metrics) - 1:
                ax.set_xlabel(X_LABELS.get(x_name, x_name))
            if j == 0:
                ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    fig.suptitle(wrap_title(convergence_title(groups, band), fig), fontsize="medium")
    add_figure_legend(fig, convergence_legend(groups, colours))
    notes = sorted(frame_notes) + mean_cut_notes(groups, x_axes, metrics)
    add_figure_notes(fig, notes)
    return fig


def add_figure_notes(fig, notes, limit=8):
    """Notes under the axes (savefig's tight bounding box takes them in), at most `limit`
    of them; all of them in fig.asgd_notes, for the report."""
    fig.asgd_notes = list(notes)
    if not notes:
        return
    shown = notes[:limit]
    if len(notes) > limit:
        shown.append(f"... and {len(notes) - limit} more (see the report)")
    width = max(60, int(fig.get_figwidth() * 15))
    text = "\n".join(textwrap.fill(n, width=width, subsequent_indent="   ") for n in shown)
    fig.text(0.0, -0.01, text, ha="left", va="top", fontsize="small", color="#333")


def convergence_title(groups, band):
    """Says how to read the lines, mentioning only what the figure shows."""
    parts = ["Convergence"]
    if any(len(g.completed) > 1 for g in groups):
        spread = "" if band == "none" else \
            f", band = {stats.band_description(band, short=True)} (from 3 seeds)"
        parts.append("thick = mean over seeds where every seed has data" + spread)
        parts.append("thin = each seed, | = where it ends")
    statuses = {r.status for g in groups for r in g.runs if r.status != COMPLETED}
    if statuses:
        parts.append("dashed = runs that did not complete")
    if "diverged" in statuses:
        parts.append("\u00d7 = a diverged run's last finite value")
    return "; ".join(parts)


def convergence_legend(groups, colours):
    handles = []
    for group in groups:
        colour, done = colours[group.key], len(group.completed)
        if done:
            suffix = f" (mean of {done} seeds)" if done > 1 else ""
            handles.append(Line2D([], [], color=colour, lw=MEAN_LINE_WIDTH,
                                  label=group.label + suffix))
        for status in sorted({r.status for r in group.runs if r.status != COMPLETED}):
            handles.append(Line2D([], [], color=colour, lw=1.2, ls="--",
                                  label=f"{group.label} ({status})"))
    if any(len(g.completed) > 1 for g in groups):
        handles.append(Line2D([], [], color="#555", lw=SEED_LINE_WIDTH, alpha=SEED_ALPHA,
                              marker="|", ms=8, label="one seed; | where it ends"))
    return handles


# A seed's own line under its group's mean: thin and light, so the mean reads first.
SEED_LINE_WIDTH, SEED_ALPHA, MEAN_LINE_WIDTH = 0.8, 0.5, 1.8


def mean_cut_notes(groups, x_axes, metrics):
    """For each group whose seeds end at different x: where its mean stops (the earliest
    seed's end) and where the last seed ends. Empty when nothing is cut."""
    notes = []
    for group in groups:
        parts = []
        for x_name in x_axes:
            ends = []
            for run in group.completed:
                x = np.concatenate([curve(run, x_name, m)[0][-1:] for m in metrics])
                if len(x):
                    ends.append(x.max())
            if len(ends) > 1 and max(ends) - min(ends) > 1e-9 * max(abs(max(ends)), 1.0):
                unit = " s" if x_name == "time" else f" {x_name}"
                parts.append(f"{stats.format_value(min(ends))} of "
                             f"{stats.format_value(max(ends))}{unit}")
        if parts:
            notes.append(f"{group.label}: seeds end at different points; the mean is drawn "
                         f"up to the earliest end ({'; '.join(parts)}), each seed to its own.")
    return notes


# Points a drawn curve keeps at most, about: a panel is a few hundred pixels wide, so a
# curve of a million evaluation points draws as its thinned one does (thinned below).
DRAWN_POINTS = 8192


def thinned(x, *ys):
    """x and the curves ys (same length) cut down for drawing to about DRAWN_POINTS: the
    points are split into DRAWN_POINTS / 4 runs of consecutive points, and each run keeps
    its first and last point and, per curve, its smallest and largest value and its first
    value that is not a number (a gap stays a gap). What a panel shows is unchanged; the
    values (scales, bands, notes, tables) are all computed from the whole curves."""
    x = np.asarray(x)
    n = len(x)
    if n <= DRAWN_POINTS:
        return (x,) + tuple(np.asarray(y) for y in ys)
    runs = DRAWN_POINTS // 4
    size = -(-n // runs)
    keep = [np.arange(0, n, size), np.minimum(np.arange(size - 1, n + size - 1, size), n - 1)]
    padded = runs * size
    for y in ys:
        y = np.asarray(y, dtype=float)
        finite = np.isfinite(y)
        rows = lambda v, fill: np.concatenate([v, np.full(padded - n, fill)]).reshape(runs, size)  # noqa: E731
        offsets = np.arange(runs) * size
        for values in (rows(np.where(finite, y, np.inf), np.inf), rows(np.where(finite, -y, np.inf), np.inf)):
            keep.append(offsets + values.argmin(axis=1))
        gaps = rows(~finite, False)
        has_gap = gaps.any(axis=1)
        keep.append((offsets + gaps.argmax(axis=1))[has_gap])
    idx = np.unique(np.minimum(np.concatenate(keep), n - 1))
    return (x[idx],) + tuple(np.asarray(y)[idx] for y in ys)


def draw_convergence_panel(ax, groups, x_name, metric, colours, band=stats.DEFAULT_BAND):
    """One panel; returns notes on what its frame leaves out."""
    bands, completed_values, all_values = [], [], []
    for group in groups:
        colour = colours[group.key]
        done = [c for c in (curve(run, x_name, metric) for run in group.completed) if len(c[0])]
        if len(done) == 1:
            x, y = done[0]
            ax.plot(*thinned(x, y), color=colour, lw=1.6, marker="." if len(x) == 1 else None)
            ax.plot(x[-1:], y[-1:], color=colour, marker="o", ms=4)  # where it ended
        elif len(done) > 1:
            for x, y in done:
                ax.plot(*thinned(x, y), color=colour, lw=SEED_LINE_WIDTH, alpha=SEED_ALPHA)
                ax.plot(x[-1:], y[-1:], color=colour, marker="|", ms=8, mew=1.3)
            grid, ys = mean_curve_values(done)
            if len(grid):
                mean = ys.mean(axis=0)
                ax.plot(*thinned(grid, mean), color=colour, lw=MEAN_LINE_WIDTH,
                        marker="." if len(grid) == 1 else None)
                low, high = stats.band_bounds(ys, band, metric)  # clipped to the range
                if np.isfinite(low).any():
                    bands.append((grid, low, high, colour))
        completed_values += [y for _, y in done]
        for run in group.runs:
            if run.status == COMPLETED:
                continue
            x, y = curve(run, x_name, metric)
            all_values.append(y)
            ax.plot(*thinned(x, y), color=colour, lw=1.2, ls="--", marker="." if len(x) == 1 else None)
            if run.status == "diverged" and len(x):
                ax.plot(x[-1:], y[-1:], color=colour, marker="x", ms=7, mew=1.5)
    all_values += completed_values
    floor = set_metric_scale(ax, metric, completed_values, all_values)
    for grid, low, high, colour in bands:
        low = low if floor is None else np.maximum(low, floor)
        ax.fill_between(*thinned(grid, low, high), color=colour, alpha=0.18, lw=0)
    ax.grid(True, which="major", alpha=0.3)
    return frame_notes(ax, metric, all_values)


def frame_notes(ax, metric, curves):
    """What lies outside the y range set_metric_scale chose, in words."""
    low, high = ax.get_ylim()
    name = METRIC_LABELS.get(metric, metric)
    notes = set()
    def outside(values):  # NaN is neither above nor below (as in a plain comparison)
        values = np.asarray(values, dtype=float)
        return bool(((values > high) | (values < low)).any())
    if outside([y[0] for y in curves if len(y) > 1]):
        notes.add(f"{name}: the y range fits the values after the first evaluation; "
                  "starting values lie outside the frame.")
    if any(len(y) > 1 and outside(y[1:]) for y in curves):
        cap = (f"{DIVERGED_HEADROOM:g}\u00d7 the completed runs' largest value"
               if ax.get_yscale() == "log" else
               f"{DIVERGED_HEADROOM:g}\u00d7 the completed runs' spread beyond them")
        notes.add(f"{name}: the y axis stops at {cap}, so that a diverging run does not "
                  "flatten the others; its values beyond are not shown.")
    return notes


def after_start(curves):
    """The values of each curve after its first point (the untrained start), or the whole
    curve when it has only one. The y range is fitted to these, so the start's loss (a
    decade above the rest, typically) does not squeeze the part where runs differ; the
    curves still start there, leaving the axes at the top (bottom for accuracy)."""
    return [y[1:] if len(y) > 1 else y for y in curves]


def leading_digit(value):
    return round(value / 10 ** math.floor(math.log10(value) + 1e-9))


def plain_log_labels(axis, low, high):
    """Plain-number labels on a log axis spanning under two decades. Over more than 0.6 of
    a decade the labels would collide, so only 1, 2, 3 and 5 (times a power of ten) are
    labelled, unless that leaves fewer than three in view."""
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    in_view = [d * 10.0 ** k for k in range(math.floor(math.log10(low)), math.ceil(math.log10(high)))
               for d in range(1, 10) if low <= d * 10.0 ** k <= high]
    sparse = (math.log10(high / low) > 0.6 and
              sum(leading_digit(v) in (1, 2, 3, 5) for v in in_view) >= 3)

    def minor(value, _):
        return f"{value:g}" if not sparse or leading_digit(value) in (2, 3, 5) else ""
    axis.set_minor_formatter(FuncFormatter(minor))


def set_metric_scale(ax, metric, completed_values, all_values):
    """Losses: log y when every value drawn is positive, else linear. The range fits the
    values after each curve's first point (after_start). Either way the axis is capped so
    a diverging run cannot flatten the others: DIVERGED_HEADROOM x the completed runs'
    largest value (log), or that many of their ranges beyond them (linear). Accuracy:
    linear, fitted to the values after the first point. Returns the floor a band's lower
    edge is clipped to on a log axis, else None."""
    values = np.concatenate(after_start(all_values)) if all_values else np.empty(0)
    done = np.concatenate(after_start(completed_values)) if completed_values else np.empty(0)
    if not len(values):
        return None
    if metric not in LOSS_METRICS:
        low, high = values.min(), values.max()
        pad = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
        ax.set_ylim(low - pad, high + pad)
        return None
    if (values > 0).all():
        ax.set_yscale("log", nonpositive="clip")
        floor, top = values.min() / 1.25, values.max()
        if len(done):
            top = min(top, DIVERGED_HEADROOM * done.max())
        top = max(top * 1.25, floor * 2)
        ax.set_ylim(floor, top)
        if top / floor < 100:  # under two decades: label ticks as plain numbers
            plain_log_labels(ax.yaxis, floor, top)
        return floor
    if len(done):
        span = (done.max() - done.min()) or abs(done.max()) or 1.0
        top = min(values.max(), done.max() + DIVERGED_HEADROOM * span)
        bottom = max(values.min(), done.min() - DIVERGED_HEADROOM * span)
        pad = 0.05 * (top - bottom) or 0.5
        ax.set_ylim(bottom - pad, top + pad)
    return None


# ---------------------------------------------------------------- staleness

def combined_histogram(group):
    """Staleness histogram summed over the group's runs -> (staleness, fraction) or None."""
    counts = {}
    for run in group.runs:
        hist = run.staleness_hist
        if hist is None:
            continue
        for s, c in zip(hist["staleness"], hist["count"]):
            if math.isfinite(s) and math.isfinite(c) and c > 0:
                counts[int(s)] = counts.get(int(s), 0) + c
    total = sum(counts.values())
    if not total:
        return None
    staleness = np.array(sorted(counts))
    return staleness, np.array([counts[s] for s in staleness]) / total


def staleness_varies(points):
    """Whether the runs' mean staleness differs by at least STALENESS_SPREAD (absolute,
    in updates, or relative to the largest)."""
    values = [s for _, s, _, _ in points]
    return len(values) > 1 and max(values) - min(values) >= max(
        STALENESS_SPREAD[0], STALENESS_SPREAD[1] * max(values))


# The loss-vs-staleness panel is drawn, without a staleness key swept, only when the runs'
# mean staleness spans at least this much: (updates, fraction of the largest).
STALENESS_SPREAD = (0.5, 0.05)


STALENESS_AXIS = {
    "updates": "staleness (updates between read and apply)",
    "exchanges": "staleness (exchanges of the center since the worker's last)",
}


def staleness_unit(group):
    """What the group's staleness counts (summary.json staleness.unit): 'updates' of the
    model of record, or 'exchanges' of EASGD's center."""
    for run in group.runs:
        unit = run.summary_part("staleness").get("unit")
        if unit:
            return str(unit)
    return "updates"


def draw_staleness(groups, sweep_keys, colours):
    """Staleness histograms, one panel per unit (updates; EASGD's exchanges are another
    quantity and get their own axis). Then, per engine whose runs' mean staleness varies
    (a staleness sweep, say), each run's final train loss against its mean staleness:
    one panel per engine, never across unlike algorithms."""
    hists = [(g, combined_histogram(g)) for g in groups]
    hists = [(g, h) for g, h in hists if h is not None]
    units = list(dict.fromkeys(staleness_unit(g) for g, _ in hists))
    by_engine = {}
    for point in staleness_points(groups):
        by_engine.setdefault(point[0].engine, []).append(point)
    swept = any(k.startswith("staleness.") for k in sweep_keys)
    scatters = [(engine, points) for engine, points in by_engine.items()
                if staleness_varies(points) or (swept and len(points) > 1 and
                                                staleness_varies(points))]
    panels = [("hist", unit) for unit in units] + [("scatter", e) for e in scatters]
    if not panels:
        return None
    fig = Figure(figsize=(5.0 * len(panels), 3.6), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (panel, what) in zip(axes, panels):
        if panel == "hist":
            draw_staleness_histograms(ax, [(g, h) for g, h in hists
                                           if staleness_unit(g) == what], colours)
            ax.set_xlabel(STALENESS_AXIS.get(what, f"staleness ({what})"))
        else:
            engine, points = what
            draw_loss_vs_staleness(ax, points, colours)
            unit = staleness_unit(points[0][0])
            ax.set_xlabel(f"mean staleness of the run ({unit})")
            ax.set_title(f"{engine}: final train loss per run (\u00d7 = not completed)",
                         fontsize="medium")
    shown = {g.key for g, _ in hists} | {p[0].key for _, pts in scatters for p in pts}
    handles = [Patch(color=colours[g.key], label=g.label) for g in groups if g.key in shown]
    add_figure_legend(fig, handles)
    return fig


def draw_staleness_histograms(ax, hists, colours):
    """Grouped bars while they stay readable, else one step line per group (each its own
    dash pattern). Groups whose gradients all have staleness 0 (the sync family, say)
    would be one point at (0, 1) that hides under the others, and a group whose
    histogram equals another's would hide under it: both kinds are named in the panel
    instead of drawn (unless every group has staleness 0)."""
    fresh = [g for g, (staleness, _) in hists if (staleness == 0).all()]
    notes = []
    if len(fresh) < len(hists):
        hists = [(g, h) for g, h in hists if g not in fresh]
        if fresh:
            notes.append("staleness 0 for every gradient:\n" + "\n".join(g.label for g in fresh))
    kept, same = [], []
    for group, (staleness, fraction) in hists:
        twin = next((g for g, (s, f) in kept if np.array_equal(s, staleness)
                     and np.allclose(f, fraction, rtol=1e-12, atol=0)), None)
        if twin is None:
            kept.append((group, (staleness, fraction)))
        else:
            same.append(f"{group.label} = {twin.label}")
    if same:
        notes.append("identical histograms (drawn once):\n" + "\n".join(same))
    hists = kept
    values = sorted({int(s) for _, (staleness, _) in hists for s in staleness})
    if len(hists) * len(values) <= 160:
        width = 0.8 / len(hists)
        for i, (group, (staleness, fraction)) in enumerate(hists):
            offset = (i - (len(hists) - 1) / 2) * width
            ax.bar(staleness + offset, fraction, width=width, color=colours[group.key])
    else:
        for i, (group, (staleness, fraction)) in enumerate(hists):
            ax.plot(staleness, fraction, drawstyle="steps-mid", color=colours[group.key],
                    lw=1.3, ls=SERIES_DASHES[i % len(SERIES_DASHES)])
    if notes:
        ax.text(0.98, 0.95, "\n".join(notes), transform=ax.transAxes, ha="right", va="top",
                fontsize="small", color="#444")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("staleness (updates between read and apply)")
    ax.set_ylabel("fraction of applied gradients")
    ax.set_title("Staleness of applied gradients (all seeds)", fontsize="medium")
    ax.grid(True, axis="y", alpha=0.3)


def staleness_points(groups):
    """(group, mean staleness, final train loss, completed?) for runs with both numbers."""
    points = []
    for group in groups:
        for run in group.runs:
            if not run.has_summary:
                continue
            s, loss = run.mean_staleness(), final_train_loss(run)
            if math.isfinite(s) and math.isfinite(loss):
                points.append((group, s, loss, run.status == COMPLETED))
    return points


def draw_loss_vs_staleness(ax, points, colours):
    for group, s, loss, completed in points:
        ax.plot([s], [loss], ls="none", color=colours[group.key],
                marker="o" if completed else "x", ms=6, alpha=0.85)
    losses = [loss for _, _, loss, _ in points]
    if all(loss > 0 for loss in losses):
        ax.set_yscale("log")
        low, high = min(losses), max(losses)
        if high / low < 100:
            ax.set_ylim(low / 1.1, high * 1.1)
            plain_log_labels(ax.yaxis, low / 1.1, high * 1.1)
    ax.set_xlabel("mean staleness of the run")
    ax.set_ylabel("final train loss")
    ax.set_title("Final train loss per run (\u00d7 = not completed)", fontsize="medium")
    ax.grid(True, alpha=0.3)


# ---------------------------------------------------------------- sweep points

def table_series(table, sweep_keys, key):
    """Rows of the summary table grouped into lines along sweep key `key`: one line per
    engine and values of the other sweep keys. {(engine, ((k, v), ...)): [row, ...]} with
    rows in the order of key's values (numbers numerically), in table order of lines."""
    series = {}
    for row in table.to_dict("records"):
        others = tuple((k, row[k]) for k in sweep_keys if k != key)
        series.setdefault((row["engine"], others), []).append(row)
    return {k: sorted(rows, key=lambda r: value_sort_key(r[key])) for k, rows in series.items()}


def series_label(series_key):
    engine, others = series_key
    return ", ".join([engine] + [f"{k}={v}" for k, v in others])


def numeric_values(texts):
    """The sweep values as floats, or None when any is not a number."""
    try:
        values = [float(t) for t in texts]
    except (TypeError, ValueError):
        return None
    return values if all(math.isfinite(v) for v in values) else None


def sweep_axis_scale(values):
    """'log' when the swept values are positive and span at least a decade, 'symlog' when
    they also hold 0 (and their positive ones span a decade), else 'linear'."""
    positive = [v for v in values if v > 0]
    if len(positive) < 2 or min(values) < 0 or max(positive) / min(positive) < 10:
        return "linear"
    return "log" if len(positive) == len(values) else "symlog"


def dodge(ax, index, count, base=None):
    """A transform that draws line `index` of `count` DODGE_POINTS points sideways of the
    next, so that equal points of different lines stay visible whatever the x scale.
    base: the transform to shift (default: data coordinates)."""
    shift = (index - (count - 1) / 2) * DODGE_POINTS / 72.0
    return (base or ax.transData) + ScaledTranslation(shift, 0, ax.figure.dpi_scale_trans)


# Sideways shift between lines that share an x value, in points (1/72 inch).
DODGE_POINTS = 4.0


# Censored time to target: a point where some completed seed never reached the target.
# Its mean over the seeds that did is no estimate of the group's (the others are later
# still): no line, band or speedup is drawn from it. It is drawn hollow at the bound
# (groups.add_crossings' _bound: every seed counted, the censored at their last
# evaluation), a triangle pointing where the truth lies (^ time at least, v speedup at most).
CENSORED = "hollow: k of n seeds reached the target (\u2265 time, \u2264 speedup: the censored seeds counted at their end)"


def target_counts(record, target):
    """(k, n): completed runs of a table row that reached `target`, and completed runs."""
    return (int(record.get(f"target_{target.name}_reached", 0) or 0),
            int(record.get("completed", 0) or 0))


def full_mean(record, stem, target):
    """The row's mean of stem, for a line: for a time to target, only when every completed
    seed reached it (NaN otherwise: censored, see CENSORED)."""
    mean = float(record.get(stem + "_mean", math.nan))
    if target is None:
        return mean
    k, n = target_counts(record, target)
    return mean if n > 0 and k == n else math.nan


def censored_bound(record, stem, target):
    """The row's bound on its time to target when some completed seed never reached it
    (NaN when all did or none completed)."""
    k, n = target_counts(record, target)
    return float(record.get(stem + "_bound", math.nan)) if 0 < n and k < n else math.nan


def censored_text(label, record, target, where):
    """'async: 2 of 3 never reached at cluster.workers=16', what a censored point says."""
    k, n = target_counts(record, target)
    return f"{label}: {n - k} of {n} never reached at {where}"


def censored_handle():
    return Line2D([], [], ls="none", marker="^", mfc="white", mec="#555", mew=1.5, label=CENSORED)


def mark_censored(ax, x, y, colour, transform, marker="^"):
    """Hollow triangles at the censored points' bounds (CENSORED)."""
    ax.plot(x, y, ls="none", marker=marker, ms=7, mfc="white", mec=colour, mew=1.5,
            transform=transform)
    ax.update_datalim(np.column_stack([x, y]))


def censored_title(texts, limit=4):
    """The censored points named for a title: the first `limit`, then how many more."""
    shown = "; ".join(texts[:limit])
    return shown + (f"; and {len(texts) - limit} more (notes below)" if len(texts) > limit else "")


def error_bars(ax, x, mean, half, transform, colour, marker="o", dash="-", ms=5):
    """Line through the means with vertical bars where half is finite, drawn through
    `transform` (errorbar() cannot be shifted sideways). half: one array (+-half) or a
    pair (below, above)."""
    below, above = half if isinstance(half, tuple) else (half, half)
    ax.plot(x, mean, color=colour, marker=marker, ms=ms, ls=dash, lw=1.4, transform=transform)
    # Autoscaling ignores artists drawn through a shifted transform: feed it the points.
    ax.update_datalim(np.column_stack([x, mean]))
    bars = np.isfinite(below) & np.isfinite(above) & np.isfinite(mean)
    if bars.any():
        low, high = mean[bars] - below[bars], mean[bars] + above[bars]
        ax.update_datalim(np.column_stack([np.concatenate([x[bars], x[bars]]),
                                           np.concatenate([low, high])]))
        ax.vlines(x[bars], low, high, color=colour, lw=1.2, transform=transform)
        ax.plot(np.concatenate([x[bars], x[bars]]), np.concatenate([low, high]), ls="none",
                marker="_", ms=7, mew=1.2, color=colour, transform=transform)


def identical_lines(lines):
    """{label: label of an earlier line with exactly the same points} for lines whose
    points equal an earlier line's. lines: [(label, x, y)]."""
    same = {}
    for i, (label, x, y) in enumerate(lines):
        for other, ox, oy in lines[:i]:
            if (len(x) == len(ox) and len(x) and np.array_equal(np.asarray(x), np.asarray(ox))
                    and np.allclose(y, oy, rtol=1e-12, atol=0, equal_nan=True)):
                same[label] = same.get(other, other)
                break
    return same


# ---------------------------------------------------------------- sweep

def targets_of(target):
    """[Target] from what callers pass: a Target, a list of them, a number (a train-loss
    target, as before) or None."""
    if target is None:
        return []
    if isinstance(target, Target):
        return [target]
    if isinstance(target, (list, tuple)):
        return [t for t in target if isinstance(t, Target)]
    return [Target("train_loss", float(target))]


def sweep_quantities(table, target):
    """[(stem, y label, Target or None)] the sweep figure shows: the final metrics, then
    the time to each target (the first target's first)."""
    quantities = []
    for stem, label in (("train_loss", "final train loss"), ("test_accuracy", "final test accuracy")):
        if stem + "_mean" in table and table[stem + "_mean"].notna().any():
            quantities.append((stem, label, None))
    if not any(stem == "test_accuracy" for stem, _, _ in quantities) and \
            "test_loss_mean" in table and table["test_loss_mean"].notna().any():
        quantities.append(("test_loss", "final test loss", None))
    for t in targets_of(target):
        if t.usable and t.stem + "_mean" in table:
            quantities.append((t.stem, f"time to {t.text} (s)", t))
    return quantities


def sweep_frame(table, sweep_keys, target, band=stats.DEFAULT_BAND):
    """The data behind the sweep figure, tidy: one row per group and quantity with
    engine, group, the sweep keys (dotted), quantity (the y label), stem, mean, low, high
    (the band, clipped to the metric's range; NaN under 3 seeds or when they split; for a
    time to target, NaN unless every completed seed reached it), bound (a time to target
    some completed seed never reached: CENSORED's bound, else NaN), n (seeds with a
    value), completed, reached (time to target: completed runs that reached it), bimodal,
    and seeds (each seed's value, in seed order). What the figure draws is exactly this
    frame."""
    rows = []
    for record in table.to_dict("records"):
        for stem, label, t in sweep_quantities(table, target):
            low, high = band_interval(record, stem, band)
            text = record.get(stem + "_values")
            seeds = [rundata_float(v) for v in text.split(";")] if isinstance(text, str) and text else []
            rows.append({"engine": record["engine"], "group": record.get("group"),
                         **{k: record.get(k) for k in sweep_keys},
                         "quantity": label, "stem": stem,
                         "mean": full_mean(record, stem, t),
                         "low": low if t is None or math.isfinite(full_mean(record, stem, t))
                         else math.nan,
                         "high": high if t is None or math.isfinite(full_mean(record, stem, t))
                         else math.nan,
                         "bound": censored_bound(record, stem, t) if t else math.nan,
                         "n": int(record.get(stem + "_n", 0)),
                         "completed": int(record.get("completed", 0)),
                         "reached": int(record.get(f"target_{t.name}_reached", 0)) if t else None,
                         "bimodal": bool(record.get(stem + "_bimodal", False)),
                         "seeds": seeds})
    return pd.DataFrame(rows)


def rundata_float(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def draw_sweep(table, sweep_keys, target, band=stats.DEFAULT_BAND, facets=None):
    """Final metrics and time to each target against each swept key (columns): one line
    per engine (and values of the other swept keys), mean over the completed seeds with
    the band as error bars and a light band, every seed a small point. None when no key
    has two values. facets: {col, row, hue, style: key} (plot.py's options) draws the
    seaborn grid of draw_sweep_facets instead. The figure's asgd_frame is sweep_frame."""
    if facets and any(facets.values()):
        return draw_sweep_facets(table, sweep_keys, target, band, facets)
    keys = [k for k in sweep_keys if k in table and table[k].nunique() > 1]
    quantities = sweep_quantities(table, target)
    if not keys or not quantities:
        return None
    fig = Figure(figsize=(4.3 * len(keys), 2.9 * len(quantities)), layout="constrained")
    axes = fig.subplots(len(quantities), len(keys), squeeze=False)
    notes, handles = [], {}
    for j, key in enumerate(keys):
        series = table_series(table, sweep_keys, key)
        styles = series_styles(series, table.attrs.get("engine_types"))
        for i, (stem, label, t) in enumerate(quantities):
            ax = axes[i][j]
            notes += draw_sweep_panel(ax, key, series, styles, stem, label, t, band,
                                      handles)
            ax.set_ylabel(label)
            if i == len(quantities) - 1:
                ax.set_xlabel(key)
    spread = "" if band == "none" else \
        f"; error bars and band = {stats.band_description(band, short=True)} over seeds"
    asked = [t.text for t in targets_of(target) if t.usable]
    question = f"time to {' and '.join(asked)} and final metrics" if asked else "final metrics"
    censored = list(dict.fromkeys(n.rstrip(".") for n in notes if " never reached at " in n))
    fig.suptitle(wrap_title(f"Sweep: {question} against each swept key, mean over the "
                            "completed seeds (dots: each seed)" + spread
                            + (". Not every seed reached the target (hollow \u2265, no line): "
                               + censored_title(censored) if censored else ""), fig),
                 fontsize="medium")
    legend = list(handles.values())
    if censored:
        legend.append(censored_handle())
    add_figure_legend(fig, legend)
    add_figure_notes(fig, list(dict.fromkeys(notes)))
    fig.asgd_frame = sweep_frame(table, sweep_keys, target, band)
    return fig


def series_styles(series, types=None):
    """{series key: (colour, marker, dash)}: the engine type's fixed colour, shaded when a
    type has several lines (named variants, other sweep values); marker and dash tell the
    lines apart. types: {engine label: type} (the table's attrs["engine_types"])."""
    types = types or {}
    per_engine, per_type = {}, {}
    for skey in series:
        per_engine.setdefault(skey[0], []).append(skey)
        per_type.setdefault(types.get(skey[0], skey[0]), []).append(skey)
    styles = {}
    for i, skey in enumerate(series):
        engine_type = types.get(skey[0], skey[0])
        members = per_type[engine_type]
        colour = shade(engine_colour(engine_type), members.index(skey), len(members))
        styles[skey] = (colour, SERIES_MARKERS[i % len(SERIES_MARKERS)],
                        SERIES_DASHES[per_engine[skey[0]].index(skey) % len(SERIES_DASHES)])
    return styles


SERIES_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*", "<", ">")
SERIES_DASHES = ("-", "--", ":", "-.")


def set_sweep_xlim(ax, scale, positions):
    """x limits with room beside the outermost values (lines are drawn shifted sideways,
    which autoscaling does not see)."""
    low, high = positions[0], positions[-1]
    if scale == "log":
        pad = (high / low) ** 0.08 if high > low else 1.5
        ax.set_xlim(low / pad, high * pad)
    elif scale == "symlog":
        ax.set_xlim(-0.3 * min(p for p in positions if p > 0), high * 1.4)
    else:
        pad = 0.08 * (high - low) if high > low else 0.5
        ax.set_xlim(low - pad, high + pad)


def draw_sweep_panel(ax, key, series, styles, stem, quantity, target, band, handles):
    """One quantity against one key; returns notes. handles collects legend entries."""
    all_texts = sorted({r[key] for rows in series.values() for r in rows}, key=value_sort_key)
    numbers = numeric_values(all_texts)
    scale = sweep_axis_scale(numbers) if numbers else "linear"
    position = ({t: v for t, v in zip(all_texts, numbers)} if numbers
                else {t: float(i) for i, t in enumerate(all_texts)})
    if scale == "symlog":
        ax.set_xscale("symlog", linthresh=min(v for v in numbers if v > 0), linscale=0.5)
    elif scale == "log":
        ax.set_xscale("log")
    lines, notes, values = [], [], []
    for index, (skey, rows) in enumerate(series.items()):
        colour, marker, dash = styles[skey]
        shifted = dodge(ax, index, len(series))
        x = np.array([position[r[key]] for r in rows])
        mean = np.array([full_mean(r, stem, target) for r in rows], dtype=float)
        bounds = np.array([band_interval(r, stem, band) for r in rows], dtype=float).reshape(-1, 2)
        low, high = bounds[:, 0], bounds[:, 1]
        ok = np.isfinite(mean)
        label = series_label(skey)
        lines.append((label, x[ok], mean[ok]))
        error_bars(ax, x[ok], mean[ok], (mean[ok] - low[ok], high[ok] - mean[ok]), shifted,
                   colour, marker, dash)
        both = ok & np.isfinite(low) & np.isfinite(high)
        if both.sum() > 1 and numbers:
            ax.fill_between(x[both], low[both], high[both],
                            color=colour, alpha=0.12, lw=0, transform=shifted)
        seed_x, seed_y = [], []
        for r, xs in zip(rows, x):
            text = r.get(stem + "_values")
            for v in (text.split(";") if isinstance(text, str) and text else []):
                if math.isfinite(rundata_float(v)):
                    seed_x.append(xs)
                    seed_y.append(rundata_float(v))
        if seed_x:  # every seed a point, beside its line's mean
            ax.plot(seed_x, seed_y, ls="none", marker=".", ms=3.5, alpha=0.55, color=colour,
                    transform=shifted)
            values += seed_y
        values += list(mean[ok]) + list(low[both]) + list(high[both])
        handles.setdefault(label, Line2D([], [], color=colour, marker=marker, ls=dash,
                                         label=label))
        if target is None:
            continue
        censored = [(r, xs) for r, xs in zip(rows, x)
                    if math.isfinite(censored_bound(r, stem, target))]
        if censored:
            ys = [censored_bound(r, stem, target) for r, _ in censored]
            mark_censored(ax, [xs for _, xs in censored], ys, colour, shifted)
            values += ys
            for (r, xs), y in zip(censored, ys):
                k, n = target_counts(r, target)
                ax.annotate(f"{k}/{n}", (xs, y), xycoords=shifted, textcoords="offset points",
                            xytext=(5, 4), fontsize="x-small", color=colour)
                notes.append(censored_text(label, r, target, f"{key}={r[key]}") + ".")
    for label, other in identical_lines(lines).items():
        notes.append(f"{quantity} against {key}: {label} has the same values as {other}; "
                     "its points are shifted sideways so that both show.")
    ax.autoscale_view()
    set_value_scale(ax, stem, values)
    set_sweep_xlim(ax, scale, sorted(position.values()))
    ordered = sorted(position.items(), key=lambda item: item[1])
    ax.xaxis.set_major_locator(FixedLocator([v for _, v in ordered]))
    ax.xaxis.set_major_formatter(FixedFormatter([t for t, _ in ordered]))
    ax.xaxis.set_minor_locator(NullLocator())
    if len(all_texts) > 6 or max(len(t) for t in all_texts) > 8:
        ax.tick_params(axis="x", labelrotation=30)
    ax.grid(True, alpha=0.3)
    return notes


def set_value_scale(ax, stem, values):
    """Log y for losses and times when every value is positive and they span more than a
    factor of 3; plain-number labels under two decades."""
    values = [v for v in values if math.isfinite(v)]
    if stem == "test_accuracy" or not values or min(values) <= 0:
        return
    low, high = min(values), max(values)
    if high / low > 3:
        ax.set_yscale("log")
        low, high = low / 1.2, high * 1.2
        ax.set_ylim(low, high)
        if high / low < 100:
            plain_log_labels(ax.yaxis, low, high)


# ---------------------------------------------------------------- scaling

def label_worker_axis(ax, worker_counts):
    """Log2 x axis ticked at the swept worker counts, written as plain numbers."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(worker_counts))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("workers")
    ax.grid(True, which="major", alpha=0.3)


def speedup_with_error(times, halves):
    """Speedups times[0] / times and their half-widths by first-order error propagation
    (relative errors add in quadrature; a missing half-width counts as 0). The first is 1
    by definition: its half-width is NaN (no bar)."""
    times, halves = np.asarray(times, dtype=float), np.asarray(halves, dtype=float)
    speedup = times[0] / times
    rel = np.hypot(np.nan_to_num(halves[0] / times[0]), np.nan_to_num(halves / times))
    rel[0] = math.nan
    return speedup, speedup * rel


def draw_scaling(table, sweep_keys, target, colours, band=stats.DEFAULT_BAND):
    """Time to reach the target train loss against workers, and the speedup over the
    fewest workers that reached it, both on log-log axes (ideal linear speedup is then a
    straight line), with error bars over seeds; points where no run reached the target
    are marked on the frame's edge and named under the figure."""
    usable = [t for t in targets_of(target) if t.usable]
    if WORKERS_KEY not in sweep_keys or not usable:
        return None
    target = usable[0]  # the question the figure follows: the first target
    series = table_series(table, sweep_keys, WORKERS_KEY)
    stem = target.stem
    if stem + "_mean" not in table:
        return None
    reached = f"target_{target.name}_reached"
    if not any(math.isfinite(r[stem + "_mean"]) or math.isfinite(censored_bound(r, stem, target))
               for rows in series.values() for r in rows):
        return None
    fig = Figure(figsize=(10.0, 4.0), layout="constrained")
    time_ax, speed_ax = fig.subplots(1, 2)
    handles, notes, worker_counts, speed_values = [], [], set(), []
    for index, (skey, rows) in enumerate(series.items()):
        colour = series_styles(series, table.attrs.get("engine_types"))[skey][0]
        shift = (index, len(series))
        workers = np.array([float(r[WORKERS_KEY]) for r in rows])
        mean = np.array([full_mean(r, stem, target) for r in rows], dtype=float)
        bound = np.array([censored_bound(r, stem, target) for r in rows], dtype=float)
        bounds = np.array([band_interval(r, stem, band) for r in rows], dtype=float).reshape(-1, 2)
        below_all, above_all = mean - bounds[:, 0], bounds[:, 1] - mean
        half = np.fmax(below_all, above_all)  # speedup error: the wider side
        worker_counts |= set(workers)
        ok = np.isfinite(mean)  # every completed seed reached the target
        label = series_label(skey)
        handles.append(Line2D([], [], color=colour, marker="o", label=label))
        cut = np.isfinite(bound)  # some did not: hollow, at the bound
        if cut.any():
            mark_censored(time_ax, workers[cut], bound[cut], colour, dodge(time_ax, *shift))
            for r, w, y in zip([r for r, c in zip(rows, cut) if c], workers[cut], bound[cut]):
                k, n = target_counts(r, target)
                time_ax.annotate(f"{k}/{n}", (w, y), xycoords=dodge(time_ax, *shift),
                                 textcoords="offset points", xytext=(5, 4), fontsize="x-small",
                                 color=colour)
                notes.append(censored_text(label, r, target, f"{w:g} workers"))
        if not ok.any():
            continue
        w, m, h = workers[ok], mean[ok], half[ok]
        error_bars(time_ax, w, m, (below_all[ok], above_all[ok]), dodge(time_ax, *shift),
                   colour, ms=4)
        time_ax.plot(w, m[0] * w[0] / w, color=colour, ls=":", lw=1.2)
        # the speedup over the fewest workers whose every seed reached the target; a
        # censored point past it is at most base / bound
        speedup, speed_half = speedup_with_error(m, h)
        below = np.minimum(speed_half, 0.95 * speedup)  # a log axis has no room below 0
        error_bars(speed_ax, w, speedup, (below, speed_half), dodge(speed_ax, *shift), colour,
                   ms=4)
        speed_ax.plot(w, w / w[0], color=colour, ls="--", lw=1)
        speed_values += list(speedup - below) + list(speedup + speed_half) + list(w / w[0])
        later = cut & (workers > w[0])
        if later.any():
            most = m[0] / bound[later]
            mark_censored(speed_ax, workers[later], most, colour, dodge(speed_ax, *shift), "v")
            speed_values += list(most)
    counts = sorted(worker_counts)
    for ax in (time_ax, speed_ax):
        label_worker_axis(ax, counts)
    time_ax.set_yscale("log")
    low, high = time_ax.get_ylim()
    if high / low < 100:
        plain_log_labels(time_ax.yaxis, low, high)
    else:
        time_ax.yaxis.set_major_formatter(ScalarFormatter())
    speed_ax.set_yscale("log", base=2)
    positive = [v for v in speed_values if v > 0 and math.isfinite(v)]
    if positive:
        speed_ax.set_ylim(min(positive) / 1.3, max(positive) * 1.3)
    speed_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    bars = "" if band == "none" else f"; bars = {stats.band_description(band, short=True)}"
    time_ax.set_ylabel("virtual time to target (s)")
    time_ax.set_title(f"Time to {target.text}\n"
                      f"(dotted: ideal linear speedup{bars})", fontsize="medium")
    speed_ax.set_ylabel("speedup over the fewest workers\nwhose every seed reached the target")
    speed_ax.set_title("Speedup, log-log axes\n(dashed: ideal linear speedup)",
                       fontsize="medium")
    handles.append(Line2D([], [], color="black", ls="--", label="ideal linear speedup"))
    if notes:
        handles.append(censored_handle())
        fig.suptitle(wrap_title("Not every seed reached the target (hollow, no line or speedup "
                                "drawn from them): " + censored_title(notes), fig),
                     fontsize="medium", color="#a00")
    add_figure_legend(fig, handles)
    add_figure_notes(fig, [n + "." for n in notes])
    return fig


BOXES_KEY = "cluster.topology.boxes"
PER_BOX_KEY = "cluster.topology.per_box"


def topology_throughputs(groups):
    """{(engine, per_box): [(gpus, samples per virtual second), ...] sorted by GPUs} for
    the groups of a sweep over cluster.topology.boxes and per_box: the mean over completed
    runs of summary.json's samples / time (the runs' training speed). per_box 0 is the
    line of one box (boxes 1) with its GPUs as swept."""
    series = {}
    for group in groups:
        if BOXES_KEY not in group.sweep or PER_BOX_KEY not in group.sweep:
            continue
        rates = [run.total("samples") / run.total("time") for run in group.completed
                 if run.total("time") > 0 and math.isfinite(run.total("samples"))]
        if not rates:
            continue
        boxes, per_box = int(float(group.sweep[BOXES_KEY])), int(float(group.sweep[PER_BOX_KEY]))
        point = (boxes * per_box, float(np.mean(rates)))
        series.setdefault((group.engine, per_box), []).append(point)
        if boxes == 1:  # per_box 0: the GPUs of one box
            series.setdefault((group.engine, 0), []).append(point)
    return {k: sorted(v) for k, v in series.items() if k[1] > 0 or len(v) > 1}


def draw_topology_speedup(groups, colours):
    """Speedup against the number of GPUs (boxes x per_box), one line per engine and
    per_box, all over one baseline: the one-GPU point (boxes 1, per_box 1) of the first
    engine that has it. Log-log axes; ideal linear speedup is the straight dashed line.
    None unless the experiment sweeps both topology keys."""
    series = topology_throughputs(groups)
    if not series:
        return None
    engines = list(dict.fromkeys(engine for engine, _ in series))
    baseline = next(((e, rate) for e in engines for gpus, rate in series.get((e, 1), []) if gpus == 1), None)
    if baseline is None:
        return None
    engine_colour = {}
    for group in groups:
        engine_colour.setdefault(group.engine, colours.get(group.key, "tab:blue"))
    styles = ["-", "-", "--", "-.", ":"]
    markers = ["*", "o", "s", "^", "D", "v", "P"]
    per_boxes = sorted({p for _, p in series})
    fig = Figure(figsize=(7.0, 5.0), layout="constrained")
    ax = fig.subplots()
    handles, all_gpus, values = [], set(), []
    for (engine, per_box), points in series.items():
        gpus = np.array([g for g, _ in points], dtype=float)
        speedup = np.array([r for _, r in points]) / baseline[1]
        colour = engine_colour.get(engine, "tab:blue")
        index = per_boxes.index(per_box)
        ax.plot(gpus, speedup, color=colour, ls=styles[index % len(styles)],
                marker=markers[index % len(markers)], ms=4, lw=2.5 if per_box == 0 else 1.2)
        handles.append(Line2D([], [], color=colour, ls=styles[index % len(styles)],
                              marker=markers[index % len(markers)], lw=2.5 if per_box == 0 else 1.2,
                              label=f"{engine}, one box" if per_box == 0 else f"{engine}, boxes of {per_box} GPU(s)"))
        all_gpus |= set(gpus)
        values += list(speedup)
    counts = sorted(all_gpus)
    ax.plot(counts, counts, color="black", ls="--", lw=1)
    values += counts
    handles.append(Line2D([], [], color="black", ls="--", label="ideal linear speedup"))
    label_worker_axis(ax, counts)
    ax.set_xlabel("GPUs (boxes x per_box)")
    ax.set_yscale("log", base=2)
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    ax.set_ylim(min(positive) / 1.3, max(positive) * 1.3)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel(f"speedup in samples per virtual second\nover 1 GPU under {baseline[0]}")
    ax.set_title("Speedup per topology, log-log axes (dashed black: ideal)", fontsize="medium")
    add_figure_legend(fig, handles)
    return fig


# ---------------------------------------------------------------- timeline

def first_traced_run_per_engine(groups):
    picks = {}
    for group in groups:
        for run in group.runs:
            if run.trace_path is not None and run.engine not in picks:
                picks[run.engine] = run
    return list(picks.values())


def trace_window(spans, window_seconds, max_events):
    """(start, end) in microseconds: window_seconds from the first event if given, else the
    whole trace when it holds at most max_events, else up to the max_events-th start."""
    starts = np.sort(np.array([s["ts"] for s in spans]))
    begin = starts[0]
    whole_end = max(s["ts"] + s["dur"] for s in spans)
    if window_seconds is not None:
        return begin, min(whole_end, begin + window_seconds * 1e6)
    if len(starts) <= max_events:
        return begin, whole_end
    return begin, starts[max_events]


def thread_label(tid, names):
    if names.get(tid):
        return names[tid]
    if tid == 0:
        return "server"
    return f"worker {tid - 1}" if isinstance(tid, int) else str(tid)


def is_worker_track(tid):
    """Worker w is track w + 1 (sim/run/recorder.h); 0 and non-integer tracks are not workers."""
    return isinstance(tid, int) and tid > 0


def timeline_rows(spans):
    """The rows of a run's timeline: ("thread", tid) for the server and other tracks, then
    one ("thread", tid) per worker when there are at most MAX_WORKER_ROWS workers, else
    one ("share", kind) heat-map row per state the workers were in, covering every worker."""
    tids = sorted({s["tid"] for s in spans},
                  key=lambda t: (0, t, "") if isinstance(t, int) else (1, 0, str(t)))
    others = [("thread", t) for t in tids if not is_worker_track(t)]
    workers = [t for t in tids if is_worker_track(t)]
    if len(workers) <= MAX_WORKER_ROWS:
        return others + [("thread", t) for t in workers], len(workers)
    kinds = {s["name"] for s in spans if is_worker_track(s["tid"])}
    ordered = [k for k in TRACE_COLOURS if k in kinds] + sorted(kinds - set(TRACE_COLOURS))
    return others + [("share", k) for k in ordered], len(workers)


def busy_share(spans, edges, workers):
    """Per bin [edges[i], edges[i+1]): the time the spans cover in it over workers x the
    bin's width, i.e. the mean share of workers in the spans' state (0..1).
    Coverage up to t = sum over spans of clip(t - start, 0, duration), from sorted starts
    and ends, so a long trace costs O((spans + bins) log spans)."""
    start = np.sort(np.array([s["ts"] for s in spans], dtype=float))
    end = np.sort(np.array([s["ts"] + s["dur"] for s in spans], dtype=float))
    cum_start = np.concatenate([[0.0], np.cumsum(start)])
    cum_end = np.concatenate([[0.0], np.cumsum(end)])
    started = np.searchsorted(start, edges, side="right")
    ended = np.searchsorted(end, edges, side="right")
    covered = (started * edges - cum_start[started]) - (ended * edges - cum_end[ended])
    return np.diff(covered) / (workers * np.diff(edges))


def draw_trace_panel(ax, run, spans, names, window_seconds, max_events, bins=400):
    begin, end = trace_window(spans, window_seconds, max_events)
    rows, worker_count = timeline_rows(spans)
    index = {row: i for i, row in enumerate(rows)}
    bars = {}  # (row, kind) -> [(start s, duration s)]
    for s in spans:
        row = index.get(("thread", s["tid"]))
        if row is not None and s["ts"] < end and s["ts"] + s["dur"] >= begin:
            bars.setdefault((row, s["name"]), []).append((s["ts"] / 1e6, s["dur"] / 1e6))
    for (row, kind), ranges in bars.items():
        ax.broken_barh(ranges, (row - 0.4, 0.8), lw=0,
                       facecolors=TRACE_COLOURS.get(kind, OTHER_TRACE_COLOUR))
    kinds = {kind for _, kind in bars}
    shares = [(i, kind) for (what, kind), i in index.items() if what == "share"]
    ax.asgd_shares = {}  # kind -> (bin edges in s, share of workers per bin), for tests
    if shares and end > begin:
        edges = np.linspace(begin, end, bins + 1)
        for i, kind in shares:
            share = busy_share([s for s in spans if is_worker_track(s["tid"]) and
                                s["name"] == kind], edges, worker_count)
            ax.asgd_shares[kind] = (edges / 1e6, share)
            colour = matplotlib.colors.to_rgb(TRACE_COLOURS.get(kind, OTHER_TRACE_COLOUR))
            image = np.ones((1, len(share), 4))
            image[0, :, :3] = colour
            image[0, :, 3] = np.clip(share, 0.0, 1.0)  # opacity = share of workers in the state
            ax.imshow(image, aspect="auto", interpolation="nearest",
                      extent=(begin / 1e6, end / 1e6, i + 0.4, i - 0.4))
            kinds.add(kind)
    labels = [thread_label(key, names) if what == "thread" else
              f"{kind}: share of {worker_count} workers" for what, key in rows
              for kind in [key]]
    ax.set_yticks(range(len(rows)), labels, fontsize="small" if len(rows) <= 24 else "xx-small")
    ax.set_ylim(len(rows) - 0.5, -0.5)  # server on top
    ax.set_xlim(begin / 1e6, end / 1e6)
    ax.set_xlabel("virtual time (s)")
    total = (max(s["ts"] + s["dur"] for s in spans) - begin) / 1e6
    shown = "whole run" if end >= begin + total * 1e6 else \
        f"first {(end - begin) / 1e6:.3g} s of {total:.3g} s"
    if shares:
        shown += f"; {worker_count} workers as heat-map rows (opacity = share of workers)"
    ax.set_title(f"{run.engine}: run {run.run_id}, seed {run.seed} ({shown})",
                 fontsize="medium")
    return kinds


def draw_timeline(groups, window_seconds=None, max_events=2000):
    """One panel per engine (its first traced run): bars per thread for each event kind;
    past MAX_WORKER_ROWS workers, one heat-map row per worker state instead."""
    traced = []
    for run in first_traced_run_per_engine(groups):
        spans, names = read_trace(run.trace_path)
        if spans:
            traced.append((run, spans, names))
    if not traced:
        return None
    if window_seconds is None:  # the same window for every engine, so they compare
        windows = []
        for _, spans, _ in traced:
            begin, end = trace_window(spans, None, max_events)
            windows.append((end - begin) / 1e6)
        window_seconds = min(windows) if min(windows) > 0 else None
    heights = [1.2 + 0.28 * len(timeline_rows(spans)[0]) for _, spans, _ in traced]
    fig = Figure(figsize=(11.0, sum(heights) + 0.3), layout="constrained")
    axes = fig.subplots(len(traced), 1, squeeze=False, height_ratios=heights)[:, 0]
    kinds = set()
    for ax, (run, spans, names) in zip(axes, traced):
        kinds |= draw_trace_panel(ax, run, spans, names, window_seconds, max_events)
    ordered = [k for k in TRACE_COLOURS if k in kinds] + sorted(kinds - set(TRACE_COLOURS))
    add_figure_legend(fig, [Patch(color=TRACE_COLOURS.get(k, OTHER_TRACE_COLOUR), label=k)
                            for k in ordered], title="event")
    return fig


# ---------------------------------------------------------------- workers

WORKER_PARTS = (("compute_time", "compute", TRACE_COLOURS["compute"]),
                ("comm_time", "communication", TRACE_COLOURS["push"]),
                ("wait_time", "waiting", TRACE_COLOURS["wait"]),
                ("down_time", "down", "black"))


def first_run_with_workers_per_engine(groups):
    picks = {}
    for group in groups:
        for run in group.runs:
            usable = run.workers is not None and run.workers["worker"].notna().any()
            if usable and run.engine not in picks:
                picks[run.engine] = run
    return list(picks.values())


def worker_times(run):
    """(worker indices, {column: seconds per worker}) from workers.csv, every worker, in
    order; a column the file lacks is absent, a value that is not finite counts 0."""
    table = run.workers.dropna(subset=["worker"]).sort_values("worker")
    times = {column: np.nan_to_num(table[column].to_numpy(dtype=float), nan=0.0, posinf=0.0)
             for column, _, _ in WORKER_PARTS if column in table}
    return table["worker"].to_numpy(), times


def utilisation_text(times):
    """'compute 62%, comm 20%, waiting 18%' of all workers' time together (down if any)."""
    total = sum(v.sum() for v in times.values())
    if total <= 0:
        return ""
    words = {"compute_time": "compute", "comm_time": "comm", "wait_time": "waiting",
             "down_time": "down"}
    return ", ".join(f"{words[c]} {100 * v.sum() / total:.0f}%" for c, v in times.items()
                     if c != "down_time" or v.sum() > 0)


def draw_worker_bars(ax, worker, times):
    bottom = np.zeros(len(worker))
    for column, _, colour in WORKER_PARTS:
        if column in times:
            ax.bar(worker, times[column], bottom=bottom, color=colour, width=0.8)
            bottom += times[column]
    ax.set_xlabel("worker")
    ax.set_ylabel("virtual time (s)")
    if len(worker) <= 32:
        ax.set_xticks(worker, [str(int(w)) for w in worker], fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    return bottom.max() if len(bottom) else 0.0


def draw_worker_heatmap(fig, ax, worker, times):
    """Rows: compute, communication, waiting, down; a column per worker; colour: the
    share of the worker's time (its four times add up to the run's time)."""
    present = [(c, label) for c, label, _ in WORKER_PARTS if c in times]
    total = sum(times[c] for c, _ in present)
    share = np.array([np.divide(times[c], total, out=np.zeros(len(worker)), where=total > 0)
                      for c, _ in present])
    image = ax.imshow(share, aspect="auto", interpolation="nearest", cmap="viridis",
                      vmin=0.0, vmax=1.0,
                      extent=(worker[0] - 0.5, worker[-1] + 0.5, len(present) - 0.5, -0.5))
    ax.asgd_share = share  # rows as ax.get_yticklabels(), for tests
    ax.set_yticks(range(len(present)), [label for _, label in present], fontsize="small")
    ax.set_xlabel(f"worker (all {len(worker)})")
    fig.colorbar(image, ax=ax, label="share of the worker's time", shrink=0.8)


def draw_workers(groups):
    """Compute, communication, waiting (and down) virtual time per worker for each
    engine's first run (workers.csv), every worker: stacked bars up to MAX_WORKER_ROWS
    workers, past that a heat map with a column per worker."""
    picks = first_run_with_workers_per_engine(groups)
    if not picks:
        return None
    columns = min(len(picks), 3)
    rows = math.ceil(len(picks) / columns)
    fig = Figure(figsize=(4.6 * columns, 3.2 * rows), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    bar_axes, top = [], 0.0
    for ax, run in zip(axes, picks):
        worker, times = worker_times(run)
        if len(worker) > MAX_WORKER_ROWS:
            draw_worker_heatmap(fig, ax, worker, times)
        else:
            top = max(top, draw_worker_bars(ax, worker, times))
            bar_axes.append(ax)
        used = utilisation_text(times)
        sweep = ", ".join(f"{k}={v}" for k, v in run.sweep.items())
        ax.set_title(f"{run.engine}" + (f" ({sweep})" if sweep else "") +
                     f"\nrun {run.run_id}, seed {run.seed}" + (f"\n{used}" if used else ""),
                     fontsize="medium")
    for ax in bar_axes:  # times compare across engines
        ax.set_ylim(0, top * 1.02 if top > 0 else 1.0)
    for ax in axes[len(picks):]:
        ax.set_visible(False)
    add_figure_legend(fig, [Patch(color=colour, label=label)
                            for _, label, colour in WORKER_PARTS])
    return fig


# ---------------------------------------------------------------- sweep, faceted (seaborn)

FACET_ROLES = ("col", "row", "hue", "style")
QUANTITY = "quantity"


def facet_layout(frame, sweep_keys, facets):
    """Which column of sweep_frame goes where: {x, col, row, hue, style} and the frame
    (with a 'series' column when several swept keys are left for the lines), plus notes.
    Defaults: hue = engine, rows = the quantities (or columns, when --row names a key);
    x = the first swept key with two values that no option took; the swept keys left
    over tell lines apart by style."""
    chosen = {role: facets.get(role) for role in FACET_ROLES if facets.get(role)}
    taken = set(chosen.values())
    free = [k for k in sweep_keys if k in frame and frame[k].nunique() > 1 and k not in taken]
    x = free[0] if free else "engine"
    notes = []
    layout = {"x": x, "hue": chosen.get("hue", "engine"),
              "col": chosen.get("col"), "row": chosen.get("row"), "style": chosen.get("style")}
    if layout["row"] is None:
        layout["row"] = QUANTITY
    elif layout["col"] is None:
        layout["col"] = QUANTITY
    else:  # both facets are keys: one quantity, the question's
        quantities = list(dict.fromkeys(frame[QUANTITY]))
        times = [q for q in quantities if q.startswith("time to")]
        keep = times[0] if times else quantities[0]
        frame = frame[frame[QUANTITY] == keep]
        notes.append(f"--row and --col both name keys: only '{keep}' is drawn.")
    left = [k for k in free[1:] if k not in taken]
    if left and layout["style"] is None:
        frame = frame.copy()
        frame["series"] = [", ".join(f"{k}={row[k]}" for k in left)
                           for row in frame.to_dict("records")]
        layout["style"] = "series"
    return layout, frame, notes


def ordered_values(values):
    return sorted({str(v) for v in values if v is not None and not
                   (isinstance(v, float) and math.isnan(v))}, key=value_sort_key)


def draw_sweep_facets(table, sweep_keys, target, band, facets):
    """The sweep figure on a seaborn FacetGrid: panels by --col/--row (a sweep key, engine,
    or the quantity), colour by --hue (engine by default, in its fixed colour), marker and
    dash by --style. Each panel: per line, the mean over completed seeds, the band
    (clipped; none under 3 seeds or for split seeds) and every seed as a point; a hollow
    triangle where no completed run reached the target. Data: sweep_frame."""
    import seaborn as sns  # only here: the rest of figures.py runs without it

    frame = sweep_frame(table, sweep_keys, target, band)
    if frame.empty:
        return None
    layout, frame, notes = facet_layout(frame, sweep_keys, facets)
    x, hue, style = layout["x"], layout["hue"], layout["style"]
    for role in ("x", "col", "row", "hue", "style"):
        column = layout[role]
        if column is not None:
            frame = frame.assign(**{column: frame[column].map(
                lambda v: v if isinstance(v, str) and column == QUANTITY else
                ("-" if v is None else str(v)))})
    hue_values = ordered_values(frame[hue]) if hue else [None]
    palette = (engine_palette(hue_values, table.attrs.get("engine_types")) if hue == "engine" else
               dict(zip(hue_values, sns.color_palette("viridis", len(hue_values)))))
    style_values = ordered_values(frame[style]) if style else [None]
    markers = {v: SERIES_MARKERS[i % len(SERIES_MARKERS)] for i, v in enumerate(style_values)}
    dashes = {v: SERIES_DASHES[i % len(SERIES_DASHES)] for i, v in enumerate(style_values)}
    x_values = ordered_values(frame[x])
    numbers = numeric_values(x_values)
    scale = sweep_axis_scale(numbers) if numbers else "linear"
    position = (dict(zip(x_values, numbers)) if numbers
                else {t: float(i) for i, t in enumerate(x_values)})
    col_order = ordered_values(frame[layout["col"]]) if layout["col"] not in (None, QUANTITY) \
        else None
    row_order = ordered_values(frame[layout["row"]]) if layout["row"] not in (None, QUANTITY) \
        else None
    grid = sns.FacetGrid(frame, col=layout["col"], row=layout["row"], col_order=col_order,
                         row_order=row_order, sharex=False, sharey=False, height=2.8,
                         aspect=1.35, margin_titles=True, despine=False)
    grid.figure.set_layout_engine("constrained")
    for (i, j, _), data in grid.facet_data():
        ax = grid.facet_axis(i, j)
        if data.empty:
            ax.set_visible(False)
            continue
        values = []
        by = [c for c in dict.fromkeys((hue, style)) if c]
        series = list(data.groupby(by if len(by) > 1 else by[0], sort=False, dropna=False)) \
            if by else [((None,), data)]
        for count, (name, rows) in enumerate(series):
            name = name if isinstance(name, tuple) else (name,)
            named = dict(zip(by, name))
            hue_value = named.get(hue)
            style_value = named.get(style)
            colour = palette.get(hue_value, "tab:blue") if hue else "tab:blue"
            rows = rows.assign(pos=rows[x].map(position)).sort_values("pos")
            shifted = dodge(ax, count, len(series))
            ok = rows["mean"].notna()
            error_bars(ax, rows["pos"][ok].to_numpy(), rows["mean"][ok].to_numpy(),
                       ((rows["mean"] - rows["low"])[ok].to_numpy(),
                        (rows["high"] - rows["mean"])[ok].to_numpy()),
                       shifted, colour, markers.get(style_value, "o"),
                       dashes.get(style_value, "-"))
            band_ok = ok & rows["low"].notna()
            if band_ok.sum() > 1 and numbers:
                ax.fill_between(rows["pos"][band_ok], rows["low"][band_ok],
                                rows["high"][band_ok], color=colour, alpha=0.12, lw=0,
                                transform=shifted)
            seed_x = [p for p, seeds in zip(rows["pos"], rows["seeds"])
                      for v in seeds if math.isfinite(v)]
            seed_y = [v for seeds in rows["seeds"] for v in seeds if math.isfinite(v)]
            if seed_x:
                ax.plot(seed_x, seed_y, ls="none", marker=".", ms=3.5, alpha=0.55,
                        color=colour, transform=shifted)
            values += seed_y + list(rows["mean"][ok]) + list(rows["low"][band_ok]) \
                + list(rows["high"][band_ok])
            cut = rows[rows["bound"].notna()]
            if len(cut):  # k of n seeds reached: hollow at the bound, no line
                mark_censored(ax, cut["pos"].to_numpy(), cut["bound"].to_numpy(), colour, shifted)
                values += list(cut["bound"])
                label = ", ".join(str(v) for v in name if v is not None)
                for _, r in cut.iterrows():
                    ax.annotate(f"{int(r['reached'])}/{r['completed']}", (r["pos"], r["bound"]),
                                xycoords=shifted, textcoords="offset points", xytext=(5, 4),
                                fontsize="x-small", color=colour)
                    notes.append(f"{label}: {r['completed'] - int(r['reached'])} of "
                                 f"{r['completed']} never reached at {x}={r[x]}.")
        if scale == "log":
            ax.set_xscale("log")
        elif scale == "symlog":
            ax.set_xscale("symlog", linthresh=min(v for v in numbers if v > 0), linscale=0.5)
        ax.autoscale_view()
        stems = list(dict.fromkeys(data["stem"]))
        if len(stems) == 1:
            set_value_scale(ax, stems[0], values)
        set_sweep_xlim(ax, scale, sorted(position.values()))
        ordered = sorted(position.items(), key=lambda item: item[1])
        ax.xaxis.set_major_locator(FixedLocator([v for _, v in ordered]))
        ax.xaxis.set_major_formatter(FixedFormatter([t for t, _ in ordered]))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(x)
        quantities = list(dict.fromkeys(data[QUANTITY]))
        ax.set_ylabel(quantities[0] if len(quantities) == 1 else "value")
        ax.grid(True, alpha=0.3)
    grid.set_titles(row_template="{row_name}" if layout["row"] == QUANTITY else
                    "{row_var} = {row_name}",
                    col_template="{col_name}" if layout["col"] == QUANTITY else
                    "{col_var} = {col_name}", size="small")
    handles = [Line2D([], [], color=palette[v], lw=2, label=f"{hue} = {v}" if hue != "engine" else v)
               for v in hue_values if hue]
    handles += [Line2D([], [], color="#555", marker=markers[v], ls=dashes[v],
                       label=f"{style}: {v}" if style != "series" else v)
                for v in style_values if style]
    censored = list(dict.fromkeys(n.rstrip(".") for n in notes if " never reached at " in n))
    if censored:
        handles.append(censored_handle())
    fig = grid.figure
    asked = [t.text for t in targets_of(target) if t.usable]
    spread = "" if band == "none" else \
        f"; band = {stats.band_description(band, short=True)} over seeds (from 3 seeds)"
    fig.suptitle(wrap_title("Sweep: " + (f"time to {' and '.join(asked)} and final metrics"
                                         if asked else "final metrics")
                            + f" against {x}, mean over completed seeds, dots = seeds"
                            + spread
                            + (". Not every seed reached the target (hollow \u2265, no line): "
                               + censored_title(censored) if censored else ""), fig),
                 fontsize="medium")
    add_figure_legend(fig, handles)
    add_figure_notes(fig, list(dict.fromkeys(notes)))
    fig.asgd_frame = frame
    fig.asgd_grid = grid
    return fig


# ---------------------------------------------------------------- convergence, faceted

def convergence_frames(groups, metrics, x_name, band):
    """The data behind the faceted convergence figure, tidy. seeds: one row per run and
    evaluation point (every run, any status: engine, group, sweep keys, seed, status,
    metric, x, value). means: one row per group, metric and grid point over the group's
    completed runs (mean_curve_values: the range every seed covers), with the band's
    low/high (clipped; NaN under 3 seeds)."""
    seeds, means = [], []
    for group in groups:
        base = {"engine": group.engine, "engine_type": group.engine_type, "group": group.label,
                **group.sweep}
        for metric in metrics:
            for run in group.runs:
                x, y = curve(run, x_name, metric)
                seeds += [{**base, "seed": run.seed, "status": run.status, "metric": metric,
                           "x": a, "value": b} for a, b in zip(x, y)]
            done = [c for c in (curve(run, x_name, metric) for run in group.completed)
                    if len(c[0])]
            grid, ys = mean_curve_values(done)
            if not len(grid):
                continue
            low, high = stats.band_bounds(ys, band, metric)
            low = np.broadcast_to(low, grid.shape)
            high = np.broadcast_to(high, grid.shape)
            means += [{**base, "metric": metric, "x": g, "mean": m, "low": lo, "high": hi,
                       "n": len(done)} for g, m, lo, hi in zip(grid, ys.mean(axis=0), low, high)]
    return pd.DataFrame(seeds), pd.DataFrame(means)


def draw_convergence_facets(groups, metrics, x_axes, band, facets):
    """Convergence on a seaborn FacetGrid: panels by --col/--row (a sweep key or engine;
    rows are the metrics unless --row names a key), colour by --hue (engine by default,
    its fixed colour), dash by --style. Every seed a thin line (dashed when the run did not
    complete), each group's mean over its completed seeds thick with the band."""
    import seaborn as sns

    metrics = [m for m in metrics if has_values(groups, m)]
    x_axes = [x for x in x_axes if has_values(groups, x)]
    if not metrics or not x_axes:
        return None
    x_name = x_axes[0]
    seeds, means = convergence_frames(groups, metrics, x_name, band)
    if seeds.empty:
        return None
    hue = facets.get("hue") or "engine"
    style = facets.get("style")
    col, row = facets.get("col"), facets.get("row") or "metric"
    if facets.get("row") and not col and len(metrics) > 1:
        col = "metric"
    notes = []
    if "metric" not in (col, row) and len(metrics) > 1:  # both facets keys: one metric a figure
        notes.append(f"--col and --row both name keys: only {metrics[0]} is drawn (choose it with --metric)")
        metrics = metrics[:1]
        seeds, means = (f[f["metric"] == metrics[0]].reset_index(drop=True) if "metric" in f else f
                        for f in (seeds, means))
    for frame in (seeds, means):
        for column in {hue, style, col, row} - {None, "metric"}:
            if column in frame:
                frame[column] = frame[column].map(str)
    hue_values = ordered_values(seeds[hue])
    palette = (engine_palette(hue_values, {g.engine: g.engine_type for g in groups}) if hue == "engine" else
               dict(zip(hue_values, sns.color_palette("viridis", len(hue_values)))))
    style_values = ordered_values(seeds[style]) if style else [None]
    dashes = {v: SERIES_DASHES[i % len(SERIES_DASHES)] for i, v in enumerate(style_values)}
    order = {c: ordered_values(seeds[c]) for c in (col, row) if c and c != "metric"}
    # y shared where the panels show one metric: along a row of metrics, a column of
    # metrics, or the whole grid (one metric); its scale and range from every panel's runs
    sharey = "row" if row == "metric" else "col" if col == "metric" else True
    grid = sns.FacetGrid(seeds, col=col, row=row, col_order=order.get(col),
                         row_order=order.get(row) if row != "metric" else metrics,
                         sharex=True, sharey=sharey, height=2.8, aspect=1.35,
                         margin_titles=True, despine=False)
    curves = {}  # metric -> ([completed runs' values], [every run's values])
    for (metric, _, _), run in seeds.groupby(["metric", "group", "seed"], sort=False, dropna=False):
        done, every = curves.setdefault(metric, ([], []))
        every.append(run["value"].to_numpy())
        if run["status"].iloc[0] == COMPLETED:
            done.append(run["value"].to_numpy())
    grid.figure.set_layout_engine("constrained")
    for (i, j, _), data in grid.facet_data():
        ax = grid.facet_axis(i, j)
        if data.empty:
            ax.set_visible(False)
            continue
        mask = np.ones(len(means), dtype=bool)
        for column in (col, row):
            if column:
                mask &= (means[column] == data[column].iloc[0]).to_numpy()
        here = means[mask]
        for (grp, seed), run in data.groupby(["group", "seed"], sort=False):
            colour = palette.get(run[hue].iloc[0], "tab:blue")
            completed = run["status"].iloc[0] == COMPLETED
            ax.plot(run["x"], run["value"], color=colour, lw=SEED_LINE_WIDTH if completed else 1.0,
                    alpha=SEED_ALPHA if completed else 0.9, ls="-" if completed else "--")
        for grp, curve_frame in here.groupby("group", sort=False):
            colour = palette.get(curve_frame[hue].iloc[0], "tab:blue")
            dash = dashes.get(curve_frame[style].iloc[0]) if style else "-"
            ax.plot(curve_frame["x"], curve_frame["mean"], color=colour, lw=MEAN_LINE_WIDTH,
                    ls=dash)
            if curve_frame["low"].notna().any():
                ax.fill_between(curve_frame["x"], curve_frame["low"], curve_frame["high"],
                                color=colour, alpha=0.18, lw=0)
        metric = data["metric"].iloc[0]
        set_metric_scale(ax, metric, *curves[metric])
        ax.set_xlabel(X_LABELS.get(x_name, x_name))
        ax.set_ylabel(METRIC_LABELS.get(metric, metric) if data["metric"].nunique() == 1
                      else "value")
        ax.grid(True, alpha=0.3)
    grid.set_titles(row_template="{row_name}" if row == "metric" else "{row_var} = {row_name}",
                    col_template="{col_name}" if col == "metric" else "{col_var} = {col_name}",
                    size="small")
    handles = [Line2D([], [], color=palette[v], lw=MEAN_LINE_WIDTH, label=v if hue == "engine"
                      else f"{hue} = {v}") for v in hue_values]
    handles += [Line2D([], [], color="#555", ls=dashes[v], label=f"{style}: {v}")
                for v in style_values if style]
    handles.append(Line2D([], [], color="#555", lw=SEED_LINE_WIDTH, alpha=SEED_ALPHA,
                          label="one seed (dashed: did not complete)"))
    fig = grid.figure
    spread = "" if band == "none" else \
        f", band = {stats.band_description(band, short=True)} (from 3 seeds)"
    fig.suptitle(wrap_title("Convergence: thick = mean over a group's completed seeds where "
                            "every seed has data" + spread + "; thin = each seed", fig),
                 fontsize="medium")
    add_figure_legend(fig, handles)
    add_figure_notes(fig, notes + mean_cut_notes(groups, [x_name], metrics))
    fig.asgd_frame, fig.asgd_means, fig.asgd_grid = seeds, means, grid
    return fig
