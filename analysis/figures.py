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
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import (FixedLocator, FuncFormatter, MaxNLocator,  # noqa: E402
                               NullLocator, ScalarFormatter)

from groups import (COMPLETED, curve, final_train_loss, mean_curve,  # noqa: E402
                    sample_std, time_to_target)
from rundata import read_trace  # noqa: E402

X_LABELS = {"time": "virtual time (s)", "updates": "updates", "epoch": "epoch"}
METRIC_LABELS = {"train_loss": "train loss", "test_loss": "test loss",
                 "test_accuracy": "test accuracy"}
LOSS_METRICS = ("train_loss", "test_loss")
TRACE_COLOURS = {"compute": "tab:blue", "push": "tab:orange", "pull": "tab:green",
                 "wait": "#c8c8c8", "apply": "tab:red"}
OTHER_TRACE_COLOUR = "tab:purple"
WORKERS_KEY = "cluster.workers"
# Timeline rows beyond this many threads would make an unreadably tall image.
MAX_TIMELINE_THREADS = 48
# A diverged run's loss can reach 1e30 before it turns NaN; the y axis stops at this
# factor above the largest value any completed run shows, so curves stay readable.
DIVERGED_HEADROOM = 10.0


def group_colours(groups):
    """One distinct colour per group: tab10, tab20, then a sampled continuous map."""
    n = len(groups)
    if n <= 10:
        palette = matplotlib.colormaps["tab10"].colors
    elif n <= 20:
        palette = matplotlib.colormaps["tab20"].colors
    else:
        palette = [matplotlib.colormaps["turbo"](i / max(n - 1, 1)) for i in range(n)]
    return {group.key: palette[i] for i, group in enumerate(groups)}


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

def draw_convergence(groups, metrics, x_axes, colours):
    """Grid: rows = metrics, columns = x axes. Mean over seeds with a +-1 std band for the
    completed runs of each group; every other run dashed on its own."""
    metrics = [m for m in metrics if has_values(groups, m)]
    x_axes = [x for x in x_axes if has_values(groups, x)]
    if not metrics or not x_axes:
        return None
    fig = Figure(figsize=(4.0 * len(x_axes), 2.9 * len(metrics)), layout="constrained")
    axes = fig.subplots(len(metrics), len(x_axes), squeeze=False, sharex="col")
    for i, metric in enumerate(metrics):
        for j, x_name in enumerate(x_axes):
            ax = axes[i][j]
            draw_convergence_panel(ax, groups, x_name, metric, colours)
            if i == len(metrics) - 1:
                ax.set_xlabel(X_LABELS.get(x_name, x_name))
            if j == 0:
                ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    fig.suptitle(wrap_title(convergence_title(groups), fig), fontsize="medium")
    add_figure_legend(fig, convergence_legend(groups, colours))
    return fig


def convergence_title(groups):
    """Says how to read the lines, mentioning only what the figure shows."""
    parts = ["Convergence"]
    if any(len(g.completed) > 1 for g in groups):
        parts.append("lines = mean over seeds, band = \u00b11 std")
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
            suffix = f" (mean of {done})" if done > 1 else ""
            handles.append(Line2D([], [], color=colour, lw=1.6, label=group.label + suffix))
        for status in sorted({r.status for r in group.runs if r.status != COMPLETED}):
            handles.append(Line2D([], [], color=colour, lw=1.2, ls="--",
                                  label=f"{group.label} ({status})"))
    return handles


def draw_convergence_panel(ax, groups, x_name, metric, colours):
    bands, completed_values, all_values = [], [], []
    for group in groups:
        colour = colours[group.key]
        done = [curve(run, x_name, metric) for run in group.completed]
        grid, mean, std = mean_curve(done)
        if len(grid):
            ax.plot(grid, mean, color=colour, lw=1.6, marker="." if len(grid) == 1 else None)
            ax.plot(grid[-1:], mean[-1:], color=colour, marker="o", ms=4)  # where it ended
            if len(done) > 1:
                bands.append((grid, mean, std, colour))
        else:  # repeats that do not overlap in x: show each one thinly
            for x, y in done:
                ax.plot(x, y, color=colour, lw=1.0, alpha=0.7)
        completed_values += [y for _, y in done]
        for run in group.runs:
            if run.status == COMPLETED:
                continue
            x, y = curve(run, x_name, metric)
            all_values.append(y)
            ax.plot(x, y, color=colour, lw=1.2, ls="--", marker="." if len(x) == 1 else None)
            if run.status == "diverged" and len(x):
                ax.plot(x[-1:], y[-1:], color=colour, marker="x", ms=7, mew=1.5)
    all_values += completed_values
    floor = set_metric_scale(ax, metric, completed_values, all_values)
    for grid, mean, std, colour in bands:
        low = mean - std if floor is None else np.maximum(mean - std, floor)
        ax.fill_between(grid, low, mean + std, color=colour, alpha=0.18, lw=0)
    ax.grid(True, which="major", alpha=0.3)


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


def draw_staleness(groups, sweep_keys, colours):
    """Left: staleness histogram per group. Right (when staleness is swept or there are
    several groups): each run's final train loss against its mean staleness."""
    hists = [(g, combined_histogram(g)) for g in groups]
    hists = [(g, h) for g, h in hists if h is not None]
    wants_scatter = any(k.startswith("staleness.") for k in sweep_keys) or len(groups) > 1
    points = staleness_points(groups) if wants_scatter else []
    panels = (["hist"] if hists else []) + (["scatter"] if points else [])
    if not panels:
        return None
    fig = Figure(figsize=(5.0 * len(panels), 3.6), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        if panel == "hist":
            draw_staleness_histograms(ax, hists, colours)
        else:
            draw_loss_vs_staleness(ax, points, colours)
    shown = {g.key for g, _ in hists} | {p[0].key for p in points}
    handles = [Patch(color=colours[g.key], label=g.label) for g in groups if g.key in shown]
    add_figure_legend(fig, handles)
    return fig


def draw_staleness_histograms(ax, hists, colours):
    """Grouped bars while they stay readable, else one step line per group. Groups whose
    gradients all have staleness 0 (the sync family, say) would be one point at (0, 1)
    that hides under the others: they are named in the panel instead, unless every
    group is like that."""
    fresh = [g for g, (staleness, _) in hists if (staleness == 0).all()]
    if len(fresh) < len(hists):
        hists = [(g, h) for g, h in hists if g not in fresh]
        if fresh:
            ax.text(0.98, 0.95, "staleness 0 for every gradient:\n" +
                    "\n".join(g.label for g in fresh), transform=ax.transAxes, ha="right",
                    va="top", fontsize="small", color="#444")
    values = sorted({int(s) for _, (staleness, _) in hists for s in staleness})
    if len(hists) * len(values) <= 160:
        width = 0.8 / len(hists)
        for i, (group, (staleness, fraction)) in enumerate(hists):
            offset = (i - (len(hists) - 1) / 2) * width
            ax.bar(staleness + offset, fraction, width=width, color=colours[group.key])
    else:
        for group, (staleness, fraction) in hists:
            ax.plot(staleness, fraction, drawstyle="steps-mid", color=colours[group.key],
                    lw=1.3)
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


# ---------------------------------------------------------------- scaling

def scaling_series(groups, target):
    """{(engine, other sweep values): [(workers, mean time, std time), ...]} over the
    completed runs that reach the target; plus the first group of each series (colour)."""
    series, first = {}, {}
    for group in groups:
        try:
            workers = float(group.sweep[WORKERS_KEY])
        except (KeyError, ValueError):
            continue
        others = tuple((k, v) for k, v in group.sweep.items() if k != WORKERS_KEY)
        key = (group.engine, others)
        first.setdefault(key, group)
        times = [time_to_target(r, "train_loss", target) for r in group.completed]
        times = np.array([t for t in times if math.isfinite(t)])
        if len(times):
            series.setdefault(key, []).append(
                (workers, float(times.mean()), float(sample_std(times))))
    return {k: sorted(v) for k, v in series.items()}, first


def label_worker_axis(ax, worker_counts):
    """Log2 x axis ticked at the swept worker counts, written as plain numbers."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(worker_counts))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("workers")
    ax.grid(True, which="major", alpha=0.3)


def draw_scaling(groups, sweep_keys, target, colours):
    """Time to reach the target train loss against workers, and the speedup over the
    smallest worker count, each with the ideal linear-speedup line."""
    if WORKERS_KEY not in sweep_keys or target is None or not math.isfinite(target):
        return None
    series, first = scaling_series(groups, target)
    if not series:
        return None
    fig = Figure(figsize=(10.0, 3.8), layout="constrained")
    time_ax, speed_ax = fig.subplots(1, 2)
    handles, max_workers, min_workers = [], 1.0, math.inf
    for key, points in series.items():
        colour = colours[first[key].key]
        workers, mean, std = (np.array(column) for column in zip(*points))
        label = ", ".join([key[0]] + [f"{k}={v}" for k, v in key[1]])
        time_ax.errorbar(workers, mean, yerr=std, color=colour, marker="o", ms=4, capsize=3)
        time_ax.plot(workers, mean[0] * workers[0] / workers, color=colour, ls=":", lw=1.2)
        speed_ax.plot(workers, mean[0] / mean, color=colour, marker="o", ms=4)
        handles.append(Line2D([], [], color=colour, marker="o", label=label))
        max_workers, min_workers = max(max_workers, workers.max()), min(min_workers, workers[0])
    ideal = np.geomspace(min_workers, max_workers, 64)  # y = x is curved on a log2 x axis
    speed_ax.plot(ideal, ideal / min_workers, color="black", ls="--", lw=1)
    worker_counts = sorted({w for points in series.values() for w, _, _ in points})
    for ax in (time_ax, speed_ax):
        label_worker_axis(ax, worker_counts)
    time_ax.set_yscale("log")
    low, high = time_ax.get_ylim()
    if high / low < 100:
        plain_log_labels(time_ax.yaxis, low, high)
    else:
        time_ax.yaxis.set_major_formatter(ScalarFormatter())
    time_ax.set_ylabel("virtual time to target (s)")
    time_ax.set_title(f"Time to train loss \u2264 {target:.4g} (dotted: ideal linear speedup)",
                      fontsize="medium")
    speed_ax.set_ylabel("speedup over fewest workers")
    speed_ax.set_title("Speedup (dashed: ideal linear)", fontsize="medium")
    handles.append(Line2D([], [], color="black", ls="--", label="ideal linear speedup"))
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


def shown_threads(spans):
    """Thread ids in order (server first), at most MAX_TIMELINE_THREADS of them."""
    tids = sorted({s["tid"] for s in spans},
                  key=lambda t: (0, t, "") if isinstance(t, int) else (1, 0, str(t)))
    return tids[:MAX_TIMELINE_THREADS], len(tids)


def draw_trace_panel(ax, run, spans, names, window_seconds, max_events):
    begin, end = trace_window(spans, window_seconds, max_events)
    tids, thread_count = shown_threads(spans)
    rows = {tid: i for i, tid in enumerate(tids)}
    bars = {}  # (tid, kind) -> [(start s, duration s)]
    for s in spans:
        if s["tid"] in rows and s["ts"] < end and s["ts"] + s["dur"] >= begin:
            bars.setdefault((s["tid"], s["name"]), []).append((s["ts"] / 1e6, s["dur"] / 1e6))
    for (tid, kind), ranges in bars.items():
        ax.broken_barh(ranges, (rows[tid] - 0.4, 0.8), lw=0,
                       facecolors=TRACE_COLOURS.get(kind, OTHER_TRACE_COLOUR))
    ax.set_yticks(range(len(tids)), [thread_label(t, names) for t in tids],
                  fontsize="small" if len(tids) <= 24 else "xx-small")
    ax.set_ylim(len(tids) - 0.5, -0.5)  # server on top
    ax.set_xlim(begin / 1e6, end / 1e6)
    ax.set_xlabel("virtual time (s)")
    total = (max(s["ts"] + s["dur"] for s in spans) - begin) / 1e6
    shown = "whole run" if end >= begin + total * 1e6 else \
        f"first {(end - begin) / 1e6:.3g} s of {total:.3g} s"
    if thread_count > len(tids):
        shown += f"; first {len(tids)} of {thread_count} threads"
    ax.set_title(f"{run.engine}: run {run.run_id}, seed {run.seed} ({shown})",
                 fontsize="medium")
    return {kind for _, kind in bars}


def draw_timeline(groups, window_seconds=None, max_events=2000):
    """One panel per engine (its first traced run): bars per thread for each event kind."""
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
    heights = [1.2 + 0.28 * len(shown_threads(spans)[0]) for _, spans, _ in traced]
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

def first_run_with_workers_per_engine(groups):
    picks = {}
    for group in groups:
        for run in group.runs:
            usable = run.workers is not None and run.workers["worker"].notna().any()
            if usable and run.engine not in picks:
                picks[run.engine] = run
    return list(picks.values())


def draw_workers(groups):
    """Compute, communication and waiting virtual time per worker, stacked, for each
    engine's first run (workers.csv: compute_time, comm_time, wait_time; down_time when a
    worker failed)."""
    picks = first_run_with_workers_per_engine(groups)
    if not picks:
        return None
    columns = min(len(picks), 3)
    rows = math.ceil(len(picks) / columns)
    fig = Figure(figsize=(4.2 * columns, 3.2 * rows), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False, sharey=True).ravel()  # times compare
    parts = (("compute_time", "compute", TRACE_COLOURS["compute"]),
             ("comm_time", "communication", TRACE_COLOURS["push"]),
             ("wait_time", "waiting", TRACE_COLOURS["wait"]),
             ("down_time", "down", "black"))
    for ax, run in zip(axes, picks):
        table = run.workers.dropna(subset=["worker"]).sort_values("worker")
        worker = table["worker"].to_numpy()
        bottom = np.zeros(len(worker))
        shares = {}
        for column, _, colour in parts:
            if column not in table:
                continue
            value = np.nan_to_num(table[column].to_numpy(), nan=0.0, posinf=0.0)
            ax.bar(worker, value, bottom=bottom, color=colour, width=0.8)
            bottom += value
            shares[column] = value.sum()
        total = bottom.sum()
        used = (f", compute {100 * shares['compute_time'] / total:.0f}%, "
                f"comm {100 * shares.get('comm_time', 0.0) / total:.0f}%") if total > 0 else ""
        sweep = ", ".join(f"{k}={v}" for k, v in run.sweep.items())
        ax.set_title(f"{run.engine}" + (f" ({sweep})" if sweep else "") +
                     f"\nrun {run.run_id}, seed {run.seed}{used}", fontsize="medium")
        ax.set_xlabel("worker")
        ax.set_ylabel("virtual time (s)")
        ax.yaxis.set_tick_params(labelleft=True)
        if len(worker) <= 32:
            ax.set_xticks(worker, [str(int(w)) for w in worker], fontsize="small")
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes[len(picks):]:
        ax.set_visible(False)
    add_figure_legend(fig, [Patch(color=colour, label=label) for _, label, colour in parts])
    return fig
