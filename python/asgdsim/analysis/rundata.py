"""Reads one experiment folder written by `asgdsim run` into plain Python objects.

What it is: the only module that knows the run-folder files (index.csv, experiment.json,
and per run config.json, meta.json, metrics.csv, summary.json, staleness.csv,
workers.csv, trace.json). data.py turns what it reads into DataFrames. Missing optional files become None; numbers that do not parse (empty, "nan",
"-nan", "inf", null) become float NaN/inf, never an exception.
What it is not: no statistics and no plotting (see groups.py and figures.py).
"""

import json
import math
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

# Columns of index.csv that are not sweep keys; the sweep keys sit between engine and seed.
INDEX_FIXED_COLUMNS = ("run_id", "engine", "seed", "status", "final_train_loss",
                       "final_test_loss", "final_test_accuracy", "time", "updates")

# Status of a run folder that has no summary.json (crashed or still running): summary.json
# is written last, so its absence means the run did not finish.
UNFINISHED = "unfinished"
# Status of a run listed in index.csv whose folder is gone.
MISSING = "missing"
# Statuses of a run that ended with results (its metrics.csv has rows, its finals are numbers).
ENDED_WITH_RESULTS = ("completed", "stalled", "diverged")
# The columns asgdsim writes into metrics.csv (docs/outputs.md): a column that is not one of
# them is a misspelt or foreign header (the figures would silently lack that metric), and
# so is a header without the first three.
METRICS_COLUMNS = ("time", "updates", "gradients", "samples", "epoch", "lr", "train_loss", "test_loss",
                   "test_accuracy", "worker_loss", "mean_staleness", "dropped")
METRICS_KEY_COLUMNS = ("time", "updates", "train_loss")


class NotAnExperiment(Exception):
    """The folder holds neither index.csv nor run folders with metrics.csv."""


@dataclass
class Run:
    run_id: str
    folder: Path            # RUNS/EXPERIMENT/<run_id>; may not exist (status MISSING)
    engine: str             # the engine's label: its config "name", else its type
    sweep: dict             # dotted sweep key -> value as written (JSON value or index text)
    seed: object            # int, or None when no file says
    status: str             # completed | diverged | interrupted | unfinished | missing
    summary: dict = None    # parsed summary.json, None when absent
    index_row: dict = None  # this run's index.csv row (all text), None when absent
    metrics: pd.DataFrame = None    # one row per eval point, numeric columns (NaN if unparsable)
    staleness_hist: pd.DataFrame = None  # columns staleness, count
    workers: pd.DataFrame = None         # worker, gradients, ..., compute_time, comm_time, wait_time, down_time
    trace_path: Path = None              # trace.json, read lazily (it can be large)
    meta: dict = None                    # parsed meta.json (provenance), None when absent
    # What could not be read (a corrupt metrics.csv, a summary.json that is not an object):
    # warned about when read, and listed in the report beside the run.
    problems: list = field(default_factory=list)
    engine_type: str = None  # the engine's type (config.json's engine.type); None: not known

    def summary_part(self, name):
        """summary[name] when it is a JSON object, else {}."""
        value = (self.summary or {}).get(name)
        return value if isinstance(value, dict) else {}

    @property
    def has_summary(self):
        return self.summary is not None

    def final(self, name):
        """Final metric (train_loss, test_loss, test_accuracy) from summary.json, else index.csv."""
        if self.summary is not None:
            return to_float(self.summary_part("final").get(name))
        return to_float((self.index_row or {}).get("final_" + name))

    def total(self, name):
        """A top-level summary number (time, updates, gradients, dropped_gradients)."""
        if self.summary is not None:
            return to_float(self.summary.get(name))
        return to_float((self.index_row or {}).get(name))

    def mean_staleness(self):
        """summary.json staleness.mean, else the mean of staleness.csv's histogram."""
        if self.summary is not None:
            value = to_float(self.summary_part("staleness").get("mean"))
            if not math.isnan(value):
                return value
        hist = self.staleness_hist
        if hist is not None and len(hist) and hist["count"].sum() > 0:
            return float((hist["staleness"] * hist["count"]).sum() / hist["count"].sum())
        return math.nan


@dataclass
class Experiment:
    folder: Path
    name: str
    config: dict              # experiment.json, None when absent
    sweep_keys: list          # dotted sweep keys in index.csv order
    engine_order: list        # engine labels (name, else type) in the config's order
    runs: list = field(default_factory=list)


def to_float(value):
    """Any JSON/CSV value -> float; None, text that is not a number, and lists -> NaN."""
    if isinstance(value, bool) or value is None:
        return math.nan
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        return math.nan


def object_at(parent, key):
    """parent[key] when parent is a dict and that value is a JSON object, else {}."""
    value = parent.get(key) if isinstance(parent, dict) else None
    return value if isinstance(value, dict) else {}


def program_name():
    """The script that runs (plot.py, study_table.py), else the package's name."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name.endswith(".py") and not name.startswith("test_") else "asgdsim.analysis"


def run_command(main, argv, invalid=()):
    """Runs a command line's main(argv) and exits with the code every analysis command
    keeps: main's return value (None: 0); 2 for invalid input (NotAnExperiment and the
    `invalid` exception classes: their message, no traceback); 130 on Ctrl-C; 1 with the
    traceback for anything else (a bug or an I/O failure)."""
    try:
        code = main(argv)
    except (NotAnExperiment, *invalid) as error:
        print(f"{program_name()}: error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        print(f"{program_name()}: error: failed (see the traceback above)", file=sys.stderr)
        sys.exit(1)
    sys.exit(code or 0)


def warn(message):
    print(f"{program_name()}: warning: " + message, file=sys.stderr)


def read_json(path, problems=None):
    """Parsed JSON object, or None when the file is absent or unreadable or not an object
    (warns, and appends what is wrong to `problems` when given)."""
    if not path.is_file():
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)  # accepts NaN / Infinity literals
    except (OSError, ValueError) as error:
        return ignored(path, str(error), problems)
    if not isinstance(value, dict):
        return ignored(path, f"not a JSON object (a {type(value).__name__})", problems)
    return value


def ignored(path, why, problems):
    warn(f"ignoring {path}: {why}")
    if problems is not None:
        problems.append(f"{path.name} ignored: {why}")
    return None


def parse_cell(text):
    """A numeric CSV cell -> float: empty -> NaN; nan, -nan, inf, -inf as spelled; None when
    the text is not a number."""
    text = text.strip()
    if not text:
        return math.nan
    try:
        return float(text)
    except ValueError:
        return None


# Malformed rows listed one by one in a warning; past this many, just how many more.
MAX_ROW_WARNINGS = 5


def _numeric_csv_fast(path):
    """The common case, read at C speed: every line ends with a newline, holds the header's
    number of fields (the commas add up) and only numbers (pandas' C parser: the same
    doubles as float() for the 10 significant digits asgdsim writes). None when anything
    is off: the careful reader below then names what."""
    try:
        with open(path, "rb") as handle:
            header = handle.readline()
            if not header.endswith(b"\n") or not header.strip():
                return None
            fields = header.count(b",") + 1
            lines = commas = 0
            last = b"\n"
            while True:
                chunk = handle.read(1 << 24)
                if not chunk:
                    break
                lines += chunk.count(b"\n")
                commas += chunk.count(b",")
                last = chunk[-1:]
        if last != b"\n" or commas != lines * (fields - 1):
            return None
        frame = pd.read_csv(path, dtype=float, skip_blank_lines=False,
                            na_values=["", "nan", "-nan", "NaN", "-NaN"], keep_default_na=False)
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError):
        return None
    if len(frame) != lines or len(frame.columns) != fields:
        return None
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame


def read_numeric_csv(path, required=(), problems=None, run=None):
    """CSV with every column a float (empty, nan, inf as spelled); None if absent/unusable
    (warns, and appends what is wrong to `problems` when given).

    Every row is checked (issue #31): a row with the wrong number of fields, a cell that
    is not a number, and a last line without its newline (a write cut short: `0.` of
    `0.5` would read as 0) are left out with a warning that names the run and the line;
    the good rows are kept. A file with data rows but none good is ignored."""
    if not path.is_file():
        return None
    frame = _numeric_csv_fast(path)
    if frame is not None:
        missing = [c for c in required if c not in frame.columns]
        return ignored(path, f"no column {', '.join(missing)}", problems) if missing else frame
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as error:
        return ignored(path, str(error), problems)
    lines = text.split("\n")
    truncated = bool(text) and not text.endswith("\n")
    if not truncated:
        lines = lines[:-1]  # the empty string after the last newline
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    if not lines or not lines[0].strip():
        return ignored(path, "empty file (no header)", problems)
    header = [c.strip() for c in lines[0].split(",")]
    missing = [c for c in required if c not in header]
    if missing:
        return ignored(path, f"no column {', '.join(missing)}", problems)
    rows, bad = [], []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        if truncated and number == len(lines):
            bad.append((number, "last line has no newline (the write was cut short)"))
            continue
        cells = line.split(",")
        if len(cells) != len(header):
            bad.append((number, f"{len(cells)} fields, the header has {len(header)}"))
            continue
        values = [parse_cell(c) for c in cells]
        wrong = [f"{header[i]}={cells[i].strip()!r}" for i, v in enumerate(values) if v is None]
        if wrong:
            bad.append((number, "not a number: " + ", ".join(wrong[:3])))
            continue
        rows.append(values)
    if bad:
        who = f"run {run}: " if run else ""
        listed = "; ".join(f"line {n}: {why}" for n, why in bad[:MAX_ROW_WARNINGS])
        more = f"; and {len(bad) - MAX_ROW_WARNINGS} more" if len(bad) > MAX_ROW_WARNINGS else ""
        if not rows:
            return ignored(path, f"{who}no well-formed row ({listed}{more})", problems)
        message = (f"{who}{path.name}: {len(bad)} malformed row(s) left out, "
                   f"{len(rows)} kept ({listed}{more})")
        warn(f"{path}: {message}")
        if problems is not None:
            problems.append(message)
    return pd.DataFrame(rows, columns=header, dtype=float)


def read_index(path):
    """index.csv as a list of row dicts (text values), or None when absent/unreadable."""
    if not path.is_file():
        return None, []
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (OSError, ValueError, pd.errors.ParserError) as error:
        warn(f"ignoring {path}: {error}")
        return None, []
    frame.columns = [str(c).strip() for c in frame.columns]
    if "run_id" not in frame.columns:
        warn(f"ignoring {path}: no run_id column")
        return None, []
    return list(frame.columns), frame.to_dict("records")


def parse_index_value(text):
    """Index cells are text; sweep values are JSON scalars there ("0.1", "true", "uniform")."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def sweep_keys_of(index_columns, config, run_configs):
    """Sweep keys: index.csv's columns between engine and seed, else the config's sweep."""
    if index_columns and "engine" in index_columns and "seed" in index_columns:
        start, stop = index_columns.index("engine") + 1, index_columns.index("seed")
        keys = index_columns[start:stop]
        if keys or not (config or {}).get("sweep"):
            return keys
    if config and isinstance(config.get("sweep"), dict):
        return list(config["sweep"].keys())
    keys = []
    for run_config in run_configs:
        for key in object_at(object_at(run_config, "run"), "sweep"):
            if key not in keys:
                keys.append(key)
    return keys


def run_folders(folder):
    """Sub-folders that look like runs (hold any of the per-run files)."""
    markers = ("metrics.csv", "summary.json", "config.json")
    return sorted(p for p in folder.iterdir()
                  if p.is_dir() and any((p / m).is_file() for m in markers))


def load_run(folder, run_id, index_row, run_config, sweep_keys):
    problems = []
    summary = read_json(folder / "summary.json", problems)
    run_info = object_at(run_config, "run")
    row = index_row or {}

    # The engine's label: its "name" when the config gives one (two sync_backup engines
    # with different backups are two groups), as in run ids, index.csv and summary.json.
    engine_config = object_at(run_config, "engine")
    engine = engine_config.get("name") or engine_config.get("type") \
        or (summary or {}).get("engine") or row.get("engine") or "unknown"
    if isinstance(run_info.get("sweep"), dict):
        sweep = dict(run_info["sweep"])
    else:
        sweep = {k: parse_index_value(row[k]) for k in sweep_keys if k in row}
    seed = run_info.get("seed", (summary or {}).get("seed"))
    if seed is None and row.get("seed", "") != "":
        seed = parse_index_value(row["seed"])

    if summary is not None:
        status = str(summary.get("status") or "unknown")
    elif folder.is_dir():
        status = UNFINISHED
    else:
        status = row.get("status") or MISSING

    if summary is not None and status == "failed" and summary.get("error"):
        problems.append(f"failed: {summary.get('error')}")
    metrics = read_numeric_csv(folder / "metrics.csv", problems=problems, run=run_id)

    def note(problem):  # warned about, and listed in the report beside the run
        problems.append(problem)
        warn(f"run {run_id}: {problem}")

    if metrics is not None and "train_loss" in metrics and len(metrics) and metrics["train_loss"].notna().sum() == 0:
        note("metrics.csv holds no readable train_loss")
    if metrics is not None:
        unknown = [str(c) for c in metrics.columns if c not in METRICS_COLUMNS]
        absent = [c for c in METRICS_KEY_COLUMNS if c not in metrics.columns]
        if unknown or absent:
            note("metrics.csv's header is not asgdsim's (a misspelt or foreign one): "
                 + "; ".join(([f"unknown column {', '.join(unknown)}"] if unknown else [])
                             + ([f"no column {', '.join(absent)}"] if absent else [])))
    if not folder.is_dir():
        note("index.csv lists it, but its folder is gone")
    elif status in ENDED_WITH_RESULTS:
        if not (folder / "metrics.csv").is_file():
            note(f"summary.json says {status}, but metrics.csv is missing")
        elif metrics is not None and len(metrics) == 0:
            note(f"summary.json says {status}, but metrics.csv holds no rows (its header only)")
        if status != "diverged" and math.isnan(to_float(object_at(summary, "final").get("train_loss"))):
            note(f"summary.json says {status}, but its final train_loss is not a number")
    trace = folder / "trace.json"
    engine_type = engine_config.get("type")
    return Run(run_id=run_id, folder=folder, engine=str(engine),
               engine_type=str(engine_type) if engine_type else None, sweep=sweep, seed=seed,
               status=status, summary=summary, index_row=index_row, problems=problems,
               metrics=metrics,
               staleness_hist=read_numeric_csv(folder / "staleness.csv", ("staleness", "count"),
                                               problems, run_id),
               workers=read_numeric_csv(folder / "workers.csv",
                                        ("worker", "compute_time", "wait_time"), problems,
                                        run_id),
               trace_path=trace if trace.is_file() else None,
               meta=read_json(folder / "meta.json"))


def engine_order_of(config, runs):
    order = []
    for engine in (config or {}).get("engines") or []:
        label = isinstance(engine, dict) and (engine.get("name") or engine.get("type"))
        if label and label not in order:
            order.append(str(label))
    for run in runs:
        if run.engine not in order:
            order.append(run.engine)
    return order


def load_experiment(folder):
    """Reads RUNS/EXPERIMENT. Raises NotAnExperiment when it does not look like one."""
    folder = Path(folder)
    expected = ("expected an experiment folder written by `asgdsim run`: "
                "index.csv and/or run folders containing metrics.csv")
    if not folder.is_dir():
        raise NotAnExperiment(f"{folder}: no such folder; {expected}")

    index_columns, index_rows = read_index(folder / "index.csv")
    folders = run_folders(folder)
    if index_columns is None and not any((p / "metrics.csv").is_file() for p in folders):
        raise NotAnExperiment(f"{folder} is not an experiment folder: {expected}")

    config = read_json(folder / "experiment.json")
    rows_by_id = {str(row["run_id"]): row for row in index_rows}
    run_ids = list(rows_by_id) + [p.name for p in folders if p.name not in rows_by_id]
    run_configs = {rid: read_json(folder / rid / "config.json") for rid in run_ids}
    sweep_keys = sweep_keys_of(index_columns, config, run_configs.values())

    runs = [load_run(folder / rid, rid, rows_by_id.get(rid), run_configs[rid], sweep_keys)
            for rid in run_ids]
    name = (config or {}).get("name") or folder.name
    return Experiment(folder=folder, name=str(name), config=config, sweep_keys=sweep_keys,
                      engine_order=engine_order_of(config, runs), runs=runs)


def read_trace(path):
    """trace.json -> (complete events as dicts, {tid: thread name}). Empty on any error."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as error:
        warn(f"ignoring {path}: {error}")
        return [], {}
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(events, list):
        return [], {}
    names, spans = {}, []
    for event in events:
        if not isinstance(event, dict):
            continue
        if event.get("ph") == "M" and event.get("name") == "thread_name":
            names[event.get("tid")] = str((event.get("args") or {}).get("name", ""))
        elif event.get("ph") == "X":
            ts, dur = to_float(event.get("ts")), to_float(event.get("dur"))
            if math.isfinite(ts) and math.isfinite(dur):
                spans.append({"name": str(event.get("name", "")), "tid": event.get("tid", 0),
                              "ts": ts, "dur": max(dur, 0.0)})
    return spans, names
