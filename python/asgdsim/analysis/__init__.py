"""asgdsim.analysis — the analysis side of asgdsim as one importable package.

    import asgdsim.analysis as aa

    df = aa.load("runs/lr_sweep")          # one row per run x evaluation point
    runs = aa.summaries("runs/lr_sweep")   # one row per run (summary.json, meta.json)
    t = aa.time_to_target(df, "test_accuracy", 0.8)   # one row per run: time, reached
    aa.ci(runs[runs.status == "completed"].final_test_accuracy)  # mean, low, high, n

Columns follow one rule (asgdsim.analysis.data): a sweep key is its dotted config key
(df["train.lr"]); other columns are the files' own names. Statistics are stats.py's:
Student-t intervals (SciPy's quantile when installed), no interval under 3 seeds,
bands clipped to the metric's range, split (bimodal) seeds detected by split_seeds.
Runs whose status is not "completed" (diverged, stalled, ...) are never averaged in by
these helpers unless you pass them in yourself: filter on `status`.

What it is not: a second implementation. It re-exports data (loading), stats
(intervals) and groups (the time to target plot.py uses), so a notebook and the report
compute the same numbers.
"""

import math

import numpy as np
import pandas as pd

from . import groups as _groups
from .data import (NotAnExperiment, load, read, staleness, summaries,  # noqa: F401
                          sweep_columns, workers)
from .groups import Target  # noqa: F401
from .palette import ENGINE_COLOURS, engine_colour, engine_palette  # noqa: F401
from .stats import band_bounds, metric_range, split_seeds  # noqa: F401

__all__ = ["load", "summaries", "staleness", "workers", "read", "sweep_columns",
           "time_to_target", "ci", "band_bounds", "split_seeds", "metric_range", "Target",
           "NotAnExperiment", "ENGINE_COLOURS", "engine_colour", "engine_palette"]

def time_to_target(data, metric, threshold, x="time"):
    """When each run first reaches `threshold` of `metric` (<= for losses, >= for
    accuracy): one row per run with run_id, engine, seed, status, the sweep columns,
    `x` of the crossing, linearly interpolated between the two evaluations around it (NaN
    when the run never reaches it), reached, resolution (the x distance between those two
    evaluations) and censored_at (a run that never reached it: its last evaluation's x;
    its time to target is later). data: load()'s frame, or an experiment folder. The rule
    of plot.py's table (groups.crossing_of), applied to every run whatever its status:
    filter on status == "completed" before averaging, as the report does, and do not
    drop the censored runs silently (the report counts them: "k of n reached")."""
    frame = load(data) if not isinstance(data, pd.DataFrame) else data
    if metric not in frame:
        raise KeyError(f"no column {metric!r} in the metrics (have: {', '.join(frame.columns)})")
    keys = list(frame.attrs.get("sweep_keys", {}))
    identity = [c for c in ("run_id", "engine", "seed", "status", "group") if c in frame] + keys
    rows = []
    for _, run in frame.groupby("run_id", sort=False):
        ordered = run[np.isfinite(run[x]) & np.isfinite(run[metric])].sort_values(x, kind="stable")
        c = _groups.crossing_of(ordered[x].to_numpy(dtype=float),
                                ordered[metric].to_numpy(dtype=float), metric, threshold)
        rows.append({**{c_: run[c_].iloc[0] for c_ in identity}, x: c.time,
                     "reached": c.reached, "resolution": c.resolution,
                     "censored_at": c.censored_at})
    out = pd.DataFrame(rows)
    out.attrs["sweep_keys"] = frame.attrs.get("sweep_keys", {})
    return out


def ci(values, band="ci95", metric=None):
    """pandas Series (mean, low, high, n, bimodal) of the finite values (one per seed):
    band ci95 (Student-t, 95 %), minmax, iqr or std, clipped to metric_range(metric) when
    metric is given. low/high are NaN under 3 values or when the values split (bimodal):
    show the seeds then. Works with groupby: df.groupby(keys).final_test_accuracy.apply(ci)
    ... .unstack()."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    mean = float(np.mean(finite)) if finite else math.nan
    bimodal = split_seeds(finite) is not None
    low, high = (math.nan, math.nan) if bimodal else \
        band_bounds(np.array(finite, dtype=float), band, metric)
    return pd.Series({"mean": mean, "low": low, "high": high, "n": len(finite),
                      "bimodal": bimodal})
