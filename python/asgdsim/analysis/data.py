"""asgdsim.analysis.data — an asgdsim experiment folder as tidy pandas DataFrames.

For notebooks and scripts (the package installed, or PYTHONPATH=build/python; the analysis
alone needs no build: PYTHONPATH=python, this source tree's python/ folder):

    from asgdsim.analysis import data as ad

    df = ad.load("runs/lr_sweep")          # one row per run x evaluation point
    runs = ad.summaries("runs/lr_sweep")   # one row per run
    df[df.status == "completed"].groupby(["engine", "train.lr", "epoch"]).train_loss.mean()

(or `import asgdsim.analysis as aa` with the same functions, plus time_to_target and ci.)

Every function takes the experiment folder (RUNS/<name>, what `asgdsim run` wrote), or
what read() returned, so a folder is read once for several tables.

- load(folder): run_id, engine, seed, status, group, one column per sweep key, then every
  column of metrics.csv (time, updates, gradients, samples, epoch, lr, train_loss, ...);
  attrs["engine_types"] maps each engine label to its type (for engine_palette).
- summaries(folder): run_id, engine, seed, status, group, the sweep columns, then every
  field of summary.json flattened with "_" (final_train_loss, staleness_mean,
  iteration_time_mean, engine_config_backups, ...) and of meta.json prefixed "meta_"
  (meta_git_commit, meta_host, ...). Runs without summary.json (status "unfinished")
  have a row too.
- staleness(folder): the identity and sweep columns, then staleness, count (staleness.csv).
- workers(folder): the identity and sweep columns, then workers.csv's columns.
- sweep_columns(folder): {column name: dotted sweep key}.

One naming rule for columns, everywhere (index.csv, summary_table.csv, these DataFrames,
plot.py's --where/--col/--row/--hue/--style): a sweep key is its dotted config key
(train.lr, cluster.workers: df["train.lr"]), prefixed "sweep." only in the unlikely case
that it equals another column's name; every other column is the file's own field name,
nested summary.json and meta.json fields joined with "_" (final_train_loss, as index.csv
spells it; staleness_mean; meta_host). Values keep
their JSON type (numbers, text, booleans); an object value becomes its compact JSON text.
`group` is the label the report uses for a run's group: engine and sweep values.
Units and meanings of every column: docs/outputs.md.

What it is not: no statistics and no plotting (plot.py, groups.py, figures.py); it never
runs the simulator. The files are read by rundata.py, the same reader plot.py uses.
Warnings about unreadable files go to stderr.
"""

import json
import math

import pandas as pd

from . import rundata
from .groups import canonical_text, group_label

IDENTITY_COLUMNS = ("run_id", "engine", "seed", "status", "group")
__all__ = ["read", "load", "summaries", "staleness", "workers", "sweep_columns",
           "NotAnExperiment"]
NotAnExperiment = rundata.NotAnExperiment


def read(folder):
    """The experiment folder, read (rundata.Experiment). Raises NotAnExperiment when the
    folder holds neither index.csv nor run folders with metrics.csv."""
    if isinstance(folder, rundata.Experiment):
        return folder
    return rundata.load_experiment(folder)


def sweep_columns(folder, reserved=()):
    """{column name: dotted sweep key}, in the experiment's sweep order: the key itself
    (see the naming rule above)."""
    experiment = read(folder)
    taken = set(IDENTITY_COLUMNS) | set(reserved)
    names = {}
    for key in experiment.sweep_keys:
        name = key
        if name in taken or name in names:
            name = "sweep." + name
        names[name] = key
    return names


def plain_value(value):
    """A sweep value as a DataFrame cell: JSON scalars as they are, objects as JSON text."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return value


def identity(run, experiment, columns):
    """The identity and sweep cells of one run."""
    cells = {"run_id": run.run_id, "engine": run.engine, "seed": run.seed,
             "status": run.status,
             "group": group_label(run.engine, {k: canonical_text(run.sweep.get(k))
                                               for k in experiment.sweep_keys})}
    for name, key in columns.items():
        cells[name] = plain_value(run.sweep.get(key))
    return cells


def per_run_table(experiment, frame_of, reserved=()):
    """Concatenation over runs of frame_of(run) (a DataFrame or None), each prefixed
    with the run's identity and sweep columns."""
    columns = sweep_columns(experiment, reserved)
    parts = []
    for run in experiment.runs:
        frame = frame_of(run)
        if frame is None or frame.empty:
            continue
        head = pd.DataFrame([identity(run, experiment, columns)] * len(frame))
        parts.append(pd.concat([head, frame.reset_index(drop=True)], axis=1))
    if not parts:
        return pd.DataFrame(columns=list(IDENTITY_COLUMNS) + list(columns))
    table = pd.concat(parts, ignore_index=True)
    table.attrs["sweep_keys"] = columns
    # {engine label: engine type}, for engine_palette (a type's named variants share its hue)
    table.attrs["engine_types"] = {run.engine: run.engine_type or run.engine for run in experiment.runs}
    return table


def load(folder):
    """One tidy long DataFrame: a row per run and evaluation point (metrics.csv rows)."""
    experiment = read(folder)
    reserved = {c for run in experiment.runs if run.metrics is not None for c in run.metrics}
    return per_run_table(experiment, lambda run: run.metrics, reserved)


def staleness(folder):
    """A row per run and staleness value: staleness, count (applied gradients)."""
    experiment = read(folder)
    return per_run_table(experiment, lambda run: run.staleness_hist, ("staleness", "count"))


def workers(folder):
    """A row per run and worker: workers.csv's columns."""
    experiment = read(folder)
    reserved = {c for run in experiment.runs if run.workers is not None for c in run.workers}
    return per_run_table(experiment, lambda run: run.workers, reserved)


def flatten(value, prefix=""):
    """{"a": {"b": 1}, "c": [1, 2]} -> {"a_b": 1, "c": "[1,2]"}; None -> NaN."""
    out = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, dict):
            out.update(flatten(item, name + "_"))
        elif isinstance(item, list):
            out[name] = json.dumps(item, separators=(",", ":"))
        else:
            out[name] = math.nan if item is None else item
    return out


# summary.json fields already in the identity and sweep columns.
SUMMARY_REPEATS = ("run_id", "engine", "seed", "status", "sweep")


def summary_cells(run):
    """summary.json flattened; for a run without one, what index.csv says."""
    if run.summary is not None:
        cells = flatten({k: v for k, v in run.summary.items() if k not in SUMMARY_REPEATS})
    else:
        cells = {f"final_{name}": run.final(name)
                 for name in ("train_loss", "test_loss", "test_accuracy")}
        cells.update({name: run.total(name) for name in ("time", "updates")})
    if run.meta is not None:
        cells.update(flatten(run.meta, "meta_"))
    return cells


def summaries(folder):
    """One row per run: identity, sweep columns, summary.json and meta.json fields."""
    experiment = read(folder)
    rows = [summary_cells(run) for run in experiment.runs]
    reserved = {c for row in rows for c in row}
    columns = sweep_columns(experiment, reserved)
    table = pd.DataFrame([{**identity(run, experiment, columns), **row}
                          for run, row in zip(experiment.runs, rows)],
                         columns=None if rows else list(IDENTITY_COLUMNS) + list(columns))
    table.attrs["sweep_keys"] = columns
    return table
