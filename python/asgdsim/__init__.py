"""asgdsim — the asynchronous-SGD simulator from Python, with your own PyTorch model.

    import asgdsim
    res = asgdsim.run("experiments/configs/first_study.json", out="runs")
    res.load()          # one row per run x evaluation point (pandas)

    res = asgdsim.run({"model": {"type": "torch"}, "data": {"type": "torch"},
                       "engines": [{"type": "async"}, {"type": "sync"}]},
                      model=make_model, data=train_set, test_data=test_set)

`run` and `validate` read a config exactly as `asgdsim run` / `asgdsim validate` do (the
same C++: the same checks, defaults, error texts, run folders, resume, lock and exit
semantics); errors are raised as asgdsim.errors exceptions carrying the command line's
message and exit code (ConfigError: every issue with its JSON path). `list()` is the
catalog `asgdsim list` prints. docs/python.md has the API, the gradient contract, how
BatchNorm buffers are treated, determinism and speed.
"""
import builtins
import json
import os
import sys

from . import _core
from .errors import AsgdsimError, ConfigError, InputError, ModelError, RunError

__all__ = ["run", "validate", "list", "initial_parameters", "Results", "AsgdsimError", "ConfigError", "InputError", "ModelError",
           "RunError", "__version__"]
__version__ = _core.version


def _analysis():
    """The analysis package of this source tree (analysis/asgdsim_analysis): one loader."""
    from . import _build
    path = os.path.join(_build.SOURCE_DIR, "analysis")
    if path not in sys.path:
        sys.path.insert(0, path)
    import asgdsim_analysis
    return asgdsim_analysis


def _path_bytes(path):
    """A path as the C++ side takes it: bytes, as the file system holds them (a str with
    bytes that are not UTF-8, os.fsdecode's surrogates, goes back to those bytes)."""
    return os.fsencode(path)


def _utf8_only(value, where="config"):
    """Refuses a string of a config dict that cannot be JSON (os.fsdecode's surrogates: a
    path holding bytes that are not UTF-8), naming where it is."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{where}: {value!r} holds bytes that are not UTF-8 (a file name's?): a config is JSON, "
                             "which holds only UTF-8; rename the file or folder", 2) from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _utf8_only(k, where)
            _utf8_only(v, f"{where}.{k}" if where != "config" else str(k))
    elif isinstance(value, (builtins.list, tuple)):
        for i, v in enumerate(value):
            _utf8_only(v, f"{where}[{i}]")


def _text(config):
    """(JSON text, source, base folder, default name) of a config path or dict; paths as bytes."""
    if isinstance(config, (str, bytes, os.PathLike)):
        path = os.fspath(config)
        try:
            with open(path, "rb") as f:
                f.read(0)
        except OSError as e:
            raise InputError(f"{os.fsdecode(path)}: cannot be read: {e.strerror}", 2) from None
        # read by the C++ reader, as `asgdsim run` reads it (comments; line and column in errors)
        raw = _path_bytes(path)
        return _core.read_config(raw), raw, os.path.dirname(raw) or b".", _core.name_from_path(raw)
    if isinstance(config, dict):
        _utf8_only(config)
        return json.dumps(config), "the config", _path_bytes(os.getcwd()), "experiment"
    raise TypeError(f"config must be a dict or a path to a JSON file, not {type(config).__name__}")


def _sets(sets):
    """--set texts as bytes: one with bytes that are not UTF-8 is refused by the C++ side,
    naming it, as `asgdsim run --set` refuses it."""
    return [s if isinstance(s, bytes) else os.fsencode(s) for s in sets]


def validate(config, *, sets=()):
    """Validates like `asgdsim validate`: returns {"resolved": the config with every
    default filled, "runs": [{run_id, engine, sweep, seed}], "text": what `asgdsim validate`
    prints, "warnings": [...]}; raises ConfigError."""
    text, source, base, name = _text(config)
    return json.loads(_core.validate(text, source, base, _sets(sets), name))


def initial_parameters(config, run=0):
    """The flat parameters a native model (model.type mlp, cnn, ...) of run `run` of the
    config starts from, as a NumPy array (layout per model: kernels/model.h; a dense layer
    is W (inputs, outputs) row-major, then b). To start a PyTorch model from the same point."""
    text, source, base, _ = _text(config)
    return _core.initial_parameters(text, source, base, run)


def list():  # noqa: A001 (asgdsim.list, as `asgdsim list`)
    """The catalog `asgdsim list` prints: {"sections": [...], "families": [...]}, each
    key with its allowed values, default and doc."""
    return json.loads(_core.catalog())


class Results:
    """An experiment folder that asgdsim.run wrote. `load()` gives the tidy table of
    analysis/asgdsim_data.py (one row per run x evaluation point); `summaries()` one row
    per run; `exit_code` is what `asgdsim run` would have exited with (0: every run ended,
    completed, stalled or diverged: see the status column)."""

    def __init__(self, folder, exit_code):
        self.folder = folder
        self.exit_code = exit_code

    def load(self):
        return _analysis().load(self.folder)

    def summaries(self):
        return _analysis().summaries(self.folder)

    def __repr__(self):
        return f"Results({self.folder!r}, exit_code={self.exit_code})"


def run(config, *, out="runs", model=None, loss=None, data=None, test_data=None, threads=None, jobs=None,
        rerun=False, supersede=False, recalibrate=False, quiet=False, trace=False, wait=False, sets=(),
        command_line=None, force=None, option_names=("threads=", "jobs=")):
    """Runs an experiment as `asgdsim run` does and returns its Results.

    config: a dict or a JSON file's path. model: a torch.nn.Module or a zero-argument
    factory returning one (model.type "torch"); loss: (outputs, targets) -> scalar tensor
    (default cross-entropy; mean squared error for data without classes); data/test_data:
    map-style torch Datasets of (input, target) or pairs of tensors (data.type "torch"; data
    may be a factory returning (train, test)). threads/jobs/rerun/supersede/
    recalibrate/quiet/trace/wait: as `asgdsim run`'s options (rerun makes again the runs
    already done, supersede moves another config's run folders aside); sets:
    ["KEY.PATH=VALUE", ...] as --set. Ctrl-C ends the runs
    under way as interrupted and raises KeyboardInterrupt. model=/loss= given while no
    run's model.type is "torch" (or data=/test_data= while no data.type is), or a "torch"
    type with neither the object nor a module file, raise InputError before anything is
    written. option_names: how messages name threads and jobs (the CLI: "--threads").
    """
    if force is not None:  # as `asgdsim run --force`: split in two (docs/cli.md)
        raise InputError("force= is gone, split in two: supersede=True moves run folders of another config aside "
                         "(nothing re-runs), rerun=True makes again the runs already done; pass both for what "
                         "force did", 2)
    text, source, base, name = _text(config)
    torch_state = []

    def make_bridge():  # called by the simulator when a run has model or data type "torch"
        import torch
        from ._torch import Bridge, blas_threads_state
        torch_state.append((torch.random.get_rng_state(), torch.get_num_threads(), blas_threads_state()))
        return Bridge(model, loss, data, test_data)

    if command_line is None:
        command_line = f"asgdsim.run({os.fsdecode(source) if source != 'the config' else 'dict'})"
    # the run options are checked as `asgdsim run` checks --threads and --jobs (counts: the
    # values as text, and the names this caller knows them by)
    counts = [str(0 if threads is None else threads), str(1 if jobs is None else jobs)] + builtins.list(option_names)
    given = [model is not None, loss is not None, data is not None, test_data is not None]
    try:
        code, folder = _core.run(text, source, base, _sets(sets), name, _path_bytes(out), counts, bool(rerun),
                                 bool(supersede), bool(recalibrate), bool(quiet), bool(trace), bool(wait),
                                 os.fsencode(command_line), given, make_bridge)
    finally:
        if torch_state:  # the caller's generator and thread counts (torch's, OpenBLAS's), as they were
            import torch
            from ._torch import restore_blas_threads
            torch.random.set_rng_state(torch_state[0][0])
            torch.set_num_threads(torch_state[0][1])
            restore_blas_threads(torch_state[0][2])
    return Results(os.fsdecode(folder), code)
