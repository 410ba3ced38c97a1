"""Groups runs into repeats and computes the numbers the figures and the report show.

What it is: a group is one engine at one sweep point; the runs in it differ only by seed
(repeats). Here live the mean/std over repeats (curves put on a common x grid first), the
time to reach a target, the default target, and the per-group summary table.
What it is not: no file reading (rundata.py) and no drawing (figures.py).

Conventions, stated once:
- std and the confidence interval over repeats are those of stats.py (ddof=1; NaN for a
  single run: one run says nothing about the spread).
- Final metrics, totals and time-to-target are averaged over the group's *completed* runs
  only: a diverged run's final loss is inf/NaN, a stalled run (asgdsim's own status: it
  stopped making progress) is a different outcome, and an unfinished run has no final at
  all. The table's status columns say how many runs were left out and why; the status
  comes from summary.json, never from a rule of ours.
- A target (Target) is a metric and a threshold: train loss <= x, test loss <= x or test
  accuracy >= x. The first target is the one the sweep, scaling and time-to-target
  figures follow (plot.py: --target-accuracy, else --target-loss, else the automatic
  train-loss target).
"""

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import stats

COMPLETED = "completed"
STATUS_ORDER = ("completed", "diverged", "stalled", "interrupted", "failed", "unfinished",
                "missing")
# Status columns of the summary table (counts per group); other statuses count as "other".
TABLE_STATUSES = ("completed", "diverged", "stalled", "interrupted", "failed", "unfinished")

# (column stem in the table, how to read it from a Run)
FINAL_QUANTITIES = (
    ("train_loss", lambda run: run.final("train_loss")),
    ("test_loss", lambda run: run.final("test_loss")),
    ("test_accuracy", lambda run: run.final("test_accuracy")),
    ("time", lambda run: run.total("time")),
    ("updates", lambda run: run.total("updates")),
    ("dropped_gradients", lambda run: run.total("dropped_gradients")),
    ("mean_staleness", lambda run: run.mean_staleness()),
    ("gradients_per_second", lambda run: per_virtual_second(run, "gradients")),
)


def per_virtual_second(run, name):
    """A summary count over the run's virtual time: nan where there is no time to divide by."""
    time = run.total("time")
    return run.total(name) / time if time > 0 else math.nan


# Default loss target = this factor x the worst final train loss among the completed runs
# that trained (final train loss at most TRAINED_FRACTION of their first), so every such
# run reaches it and the fastest ones reach it early. Runs that never trained (collapsed
# by staleness, say) would otherwise push the target above the starting loss.
DEFAULT_TARGET_FACTOR = 1.1
TRAINED_FRACTION = 0.5


@dataclass
class Target:
    """A question: when does `metric` reach `value`? name is the summary table's stem
    (time_to_target_<name>, target_<name>): loss (train loss), test_loss, accuracy."""
    metric: str     # train_loss | test_loss | test_accuracy
    value: float
    how: str = ""   # how it was chosen, in words

    @property
    def name(self):
        return {"train_loss": "loss", "test_accuracy": "accuracy"}.get(self.metric, self.metric)

    @property
    def stem(self):
        return f"time_to_target_{self.name}"

    @property
    def relation(self):
        return "\u2265" if self.metric == "test_accuracy" else "\u2264"

    @property
    def text(self):
        """'test accuracy ≥ 0.8': what figures are titled with."""
        return f"{self.metric.replace('_', ' ')} {self.relation} {stats.format_value(self.value)}"

    @property
    def usable(self):
        return self.value is not None and math.isfinite(self.value)


def as_targets(target_loss=None, target_accuracy=None):
    """[Target] from the old (loss, accuracy) arguments: accuracy first when given (the
    figures follow the first), then loss; a NaN or None value is left out."""
    targets = []
    if target_accuracy is not None and math.isfinite(target_accuracy):
        targets.append(Target("test_accuracy", float(target_accuracy)))
    if target_loss is not None and math.isfinite(target_loss):
        targets.append(Target("train_loss", float(target_loss)))
    return targets


@dataclass
class Group:
    engine: str
    sweep: dict     # sweep key -> canonical text of the value ("0.1", "4", "uniform")
    runs: list      # Run objects, sorted by seed

    @property
    def key(self):
        return (self.engine, tuple(self.sweep.items()))

    @property
    def label(self):
        return group_label(self.engine, self.sweep)

    @property
    def engine_type(self):
        """The engine's type (async, sync_backup, ...): its label unless a run says."""
        return next((run.engine_type for run in self.runs if getattr(run, "engine_type", None)), self.engine)

    @property
    def completed(self):
        return [run for run in self.runs if run.status == COMPLETED]

    @property
    def first_run(self):
        return self.runs[0]


def group_label(engine, sweep):
    """'engine, key=value, ...' for sweep {key: canonical text}: how figures, tables and
    data.py name a group."""
    return ", ".join([engine] + [f"{k}={v}" for k, v in sweep.items()])


def canonical_text(value):
    """Sweep value -> text that is equal for equal values whatever file it came from
    (config.json's 4 and 4.0, index.csv's "4" all give "4")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return format(float(value), ".12g")
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def value_sort_key(text):
    """Numbers sort numerically and before text."""
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)


def seed_sort_key(run):
    seed = run.seed
    return (0, float(seed), run.run_id) if isinstance(seed, (int, float)) else (1, 0.0, run.run_id)


def group_runs(experiment):
    """Runs -> groups, ordered by engine (config order) then sweep values."""
    by_key = {}
    for run in experiment.runs:
        sweep = {k: canonical_text(run.sweep.get(k)) for k in experiment.sweep_keys}
        group = Group(engine=run.engine, sweep=sweep, runs=[])
        by_key.setdefault(group.key, group).runs.append(run)
    order = {engine: i for i, engine in enumerate(experiment.engine_order)}
    groups = sorted(by_key.values(), key=lambda g: (
        order.get(g.engine, len(order)), g.engine, [value_sort_key(v) for v in g.sweep.values()]))
    for group in groups:
        group.runs.sort(key=seed_sort_key)
    return groups


def curve(run, x_name, y_name):
    """(x, y) arrays of one run's metrics, rows with a non-finite x or y dropped, sorted by x."""
    metrics = run.metrics
    if metrics is None or x_name not in metrics or y_name not in metrics:
        return np.empty(0), np.empty(0)
    x = metrics[x_name].to_numpy(dtype=float)
    y = metrics[y_name].to_numpy(dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    order = np.argsort(x[keep], kind="stable")
    return x[keep][order], y[keep][order]


def mean_curve_values(curves):
    """(grid, seeds x grid array) of the repeats' curves on the common grid mean_curve
    uses; empty when they do not overlap."""
    curves = [(x, y) for x, y in curves if len(x) > 0]
    empty = np.empty(0)
    if not curves:
        return empty, np.empty((0, 0))
    first_x = curves[0][0]
    if all(len(x) == len(first_x) and np.allclose(x, first_x) for x, _ in curves):
        return first_x, np.array([y for _, y in curves])
    low, high = common_range(curves)
    if low > high:
        return empty, np.empty((0, 0))
    grid = np.unique(np.concatenate([x[(x >= low) & (x <= high)] for x, _ in curves]))
    return grid, np.array([np.interp(grid, x, y) for x, y in curves])


def mean_curve(curves):
    """Mean and std of repeats' curves where every repeat has data.
    curves: list of (x, y) -> (grid, mean, std, n); std is NaN for a single repeat.

    Repeats that share their x values are averaged point by point. Otherwise each is
    linearly interpolated onto the union of the x values inside the range every repeat
    covers (no extrapolation), so the mean never mixes in invented tails: it ends where
    the earliest-ending repeat ends (figures.py draws every repeat in full beside it).
    """
    curves = [(x, y) for x, y in curves if len(x) > 0]
    empty = np.empty(0)
    if not curves:
        return empty, empty, empty, 0
    first_x = curves[0][0]
    if all(len(x) == len(first_x) and np.allclose(x, first_x) for x, _ in curves):
        grid, ys = first_x, np.array([y for _, y in curves])
    else:
        low, high = common_range(curves)
        if low > high:  # repeats do not overlap: no honest mean
            return empty, empty, empty, len(curves)
        grid = np.unique(np.concatenate([x[(x >= low) & (x <= high)] for x, _ in curves]))
        ys = np.array([np.interp(grid, x, y) for x, y in curves])
    return grid, ys.mean(axis=0), np.asarray(stats.sample_std(ys)), len(curves)


def common_range(curves):
    """(low, high): the x range every one of the non-empty curves covers."""
    return max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)


@dataclass
class Crossing:
    """When one run first reaches a target. time: the crossing, linearly interpolated
    between the last evaluation that had not reached it and the first that had (the first
    evaluation's x when that one already had); NaN when never reached. resolution: the x
    distance between those two evaluations (0 at the first evaluation): the crossing lies
    somewhere in it. censored_at: for a run that never reached the target, its last
    evaluation's x: its time to target is later than that (right-censored)."""
    time: float
    resolution: float
    censored_at: float

    @property
    def reached(self):
        return math.isfinite(self.time)


def reaches(metric, values, target):
    """Whether each value reaches target: >= for accuracy, <= for losses."""
    values = np.asarray(values, dtype=float)
    return values >= target if metric == "test_accuracy" else values <= target


def crossing(run, metric, target, x_name="time"):
    """The run's Crossing of `target` by `metric` (docstring of Crossing)."""
    x, y = curve(run, x_name, metric)
    return crossing_of(x, y, metric, target)


def crossing_of(x, y, metric, target):
    """The Crossing of one run's evaluations (x, y: finite, sorted by x). A NaN target
    crosses nowhere and censors nothing."""
    if target is None or not math.isfinite(target):
        return Crossing(math.nan, math.nan, math.nan)
    hit = reaches(metric, y, target)
    if not hit.any():
        return Crossing(math.nan, math.nan, float(x[-1]) if len(x) else math.nan)
    i = int(np.argmax(hit))
    if i == 0:
        return Crossing(float(x[0]), 0.0, math.nan)
    x0, x1, y0, y1 = float(x[i - 1]), float(x[i]), float(y[i - 1]), float(y[i])
    # y0 has not reached the target and y1 has: they differ, and the target lies between
    return Crossing(x0 + (target - y0) / (y1 - y0) * (x1 - x0), x1 - x0, math.nan)


def time_to_target(run, metric, target, x_name="time"):
    """x at which metric first reaches target (<= for losses, >= for accuracy), linearly
    interpolated between evaluations (crossing). NaN when the run never reaches it or
    target is NaN."""
    return crossing(run, metric, target, x_name).time


# Seeds whose times to target differ by at most this many evaluation intervals are not
# told apart by the evaluations: no "bimodal" split is claimed of them.
RESOLUTION_INTERVALS = 2


def final_train_loss(run):
    """summary's final train loss, else the last finite train_loss in metrics.csv."""
    value = run.final("train_loss")
    if math.isfinite(value):
        return value
    _, y = curve(run, "time", "train_loss")
    return float(y[-1]) if len(y) else math.nan


def trained(run):
    """Whether the run's final train loss is at most TRAINED_FRACTION of its first."""
    final = final_train_loss(run)
    _, losses = curve(run, "updates", "train_loss")
    return math.isfinite(final) and len(losses) > 0 and final <= TRAINED_FRACTION * losses[0]


def default_target_loss(groups):
    """DEFAULT_TARGET_FACTOR x the worst final train loss among completed runs that trained
    (NaN if none)."""
    finals = [final_train_loss(run) for g in groups for run in g.completed if trained(run)]
    return DEFAULT_TARGET_FACTOR * max(finals) if finals else math.nan


def status_counts(runs):
    counts = {}
    for run in runs:
        counts[run.status] = counts.get(run.status, 0) + 1
    known = [s for s in STATUS_ORDER if s in counts]
    return {s: counts[s] for s in known + sorted(set(counts) - set(known))}


# Suffixes of a quantity's columns in the summary table (stem + suffix).
MEAN, STD, CI, COUNT = "_mean", "_std", f"_ci{round(stats.CI_LEVEL * 100)}", "_n"


def band_half_width(row, stem, band):
    """The half-width a table row holds for stem under band (ci95 -> _ci95, std -> _std;
    NaN for none, minmax and iqr, which are not symmetric: band_interval) and NaN where it
    rests on fewer than stats.MIN_SEEDS_FOR_CI values or the seeds are split."""
    band = stats.normalize_band(band)
    column = {"ci95": CI, "std": STD}.get(band)
    if column is None or row.get(stem + COUNT, 0) < stats.MIN_SEEDS_FOR_CI \
            or row.get(stem + "_bimodal"):
        return math.nan
    value = row.get(stem + column)
    return math.nan if value is None else float(value)


def band_interval(row, stem, band):
    """(low, high) of the band a table row holds for stem, clipped to the metric's range
    (stats.metric_range); NaN where the band rests on too few seeds or they are split."""
    band = stats.normalize_band(band)
    if band == "none" or row.get(stem + COUNT, 0) < stats.MIN_SEEDS_FOR_CI \
            or row.get(stem + "_bimodal"):
        return math.nan, math.nan
    if band in ("minmax", "iqr"):
        low, high = ((row.get(stem + "_min"), row.get(stem + "_max")) if band == "minmax"
                     else (row.get(stem + "_q25"), row.get(stem + "_q75")))
        low = math.nan if low is None else float(low)
        high = math.nan if high is None else float(high)
    else:
        mean, half = float(row.get(stem + MEAN, math.nan)), band_half_width(row, stem, band)
        low, high = mean - half, mean + half
    low, high = stats.clip_band(low, high, stem)
    return float(low), float(high)


def seed_values(values):
    """The per-seed values as table text: '0.1;0.85;nan' (in seed order)."""
    return ";".join(repr(float(v)) if v is not None else "nan" for v in values)


def add_estimate(row, stem, values):
    """row[stem_mean/_std/_ci95/_n] over the finite values (stats.estimate), and
    _min/_max/_q25/_q75 (the other bands), _values (every seed, in seed order, for the
    tables that show seeds) and _bimodal (stats.split_seeds)."""
    mean, std, half, n = stats.estimate(values, "ci95")
    row[stem + MEAN], row[stem + STD], row[stem + CI], row[stem + COUNT] = mean, std, half, n
    finite = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(finite):
        row[stem + "_min"], row[stem + "_max"] = float(finite.min()), float(finite.max())
        row[stem + "_q25"], row[stem + "_q75"] = (float(np.percentile(finite, 25)),
                                                  float(np.percentile(finite, 75)))
    else:
        for suffix in ("_min", "_max", "_q25", "_q75"):
            row[stem + suffix] = math.nan
    row[stem + "_values"] = seed_values(values)
    row[stem + "_bimodal"] = stats.split_seeds(values) is not None


def add_crossings(row, target, crossings):
    """row's columns for the time to one target over a group's completed runs: the
    estimate over the runs that reached it (add_estimate; time_to_target_<name>_mean ...),
    target_<name> and target_<name>_reached (k of the completed n), and for honesty about
    the others: _censored (n - k), _censored_at (each censored run's last evaluation, in
    seed order), _bound (the mean over all n with a censored run counted at its last
    evaluation: a lower bound of the n runs' mean time, equal to the mean when k = n),
    _resolution (the widest evaluation interval a crossing was interpolated in) and
    _within_resolution (the reached runs differ by at most RESOLUTION_INTERVALS such
    intervals: then no bimodal split is claimed)."""
    stem, times = target.stem, [c.time for c in crossings]
    row[f"target_{target.name}"] = target.value
    add_estimate(row, stem, times)
    reached = [c for c in crossings if c.reached]
    censored = [c for c in crossings if not c.reached]
    row[f"target_{target.name}_reached"] = len(reached)
    row[stem + "_censored"] = len(censored)
    row[stem + "_censored_at"] = seed_values([c.censored_at for c in censored])
    floors = [c.time if c.reached else c.censored_at for c in crossings]
    row[stem + "_bound"] = float(np.mean(floors)) if floors and all(map(math.isfinite, floors)) \
        else math.nan
    row[stem + "_resolution"] = max((c.resolution for c in reached), default=math.nan)
    spread = max(times_of(reached)) - min(times_of(reached)) if reached else math.nan
    within = bool(reached) and spread <= RESOLUTION_INTERVALS * row[stem + "_resolution"]
    row[stem + "_within_resolution"] = within
    if within:
        row[stem + "_bimodal"] = False


def times_of(crossings):
    return [c.time for c in crossings]


def summary_table(groups, sweep_keys, target_loss=None, target_accuracy=None, targets=None):
    """One row per group: status counts; for each final quantity over the completed runs
    and each time to target over the completed runs that reach it, the mean, sample std,
    95% CI half-width and the number of values (columns stem_mean, _std, _ci95, _n), the
    other bands' bounds (_min, _max, _q25, _q75), the seeds' values (_values) and whether
    they split (_bimodal). targets: [Target] (default: from target_loss, target_accuracy;
    a time to target column per target)."""
    if targets is None:
        targets = as_targets(target_loss, target_accuracy)
        # the train-loss target stays in the table even when NaN (no run trained)
        if target_loss is not None and not any(t.metric == "train_loss" for t in targets):
            targets.append(Target("train_loss", float(target_loss)))
    rows = []
    for group in groups:
        row = {"group": group.label, "engine": group.engine}
        row.update({key: group.sweep[key] for key in sweep_keys})
        counts = status_counts(group.runs)
        row["runs"] = len(group.runs)
        for status in TABLE_STATUSES:
            row[status] = counts.get(status, 0)
        done = group.completed
        for stem, read in FINAL_QUANTITIES:
            add_estimate(row, stem, [read(r) for r in done])
        for target in targets:
            add_crossings(row, target, [crossing(run, target.metric, target.value) for run in done])
        rows.append(row)
    table = pd.DataFrame(rows)
    table.attrs["targets"] = list(targets)
    table.attrs["engine_types"] = {group.engine: group.engine_type for group in groups}  # for the colours
    return table
