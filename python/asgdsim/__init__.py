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
message and exit code (ConfigError: every issue with its JSON path; ModelError: a model
or data set that breaks the gradient contract). `catalog()` is the catalog `asgdsim list`
prints (`list` is its old name, kept). asgdsim.analysis reads the run folders (pandas),
asgdsim.contract has the types a torch model and data set must fit. docs/python.md has the
API, the gradient contract, how BatchNorm buffers are treated, determinism and speed.

The compiled part (asgdsim._core) is imported on first use: asgdsim.analysis works
without it, and a call that needs it says how to build or install it.
"""
from __future__ import annotations

import builtins
import dataclasses
import json
import os
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

from ._env import extension as _extension
from ._env import torch_bridge as _torch_bridge
from .contract import Data, Loss, Model, ModelFactory, SampleSet  # noqa: F401
from .errors import AsgdsimError, ConfigError, InputError, ModelError, RunError

__all__ = ["run", "validate", "catalog", "list", "initial_parameters", "Results", "RunOptions", "AsgdsimError",
           "ConfigError", "InputError", "ModelError", "RunError", "ModelFactory", "Loss", "SampleSet",
           "__version__"]

Config = Union[str, bytes, "os.PathLike[str]", Dict[str, Any]]


def __getattr__(name):
    """__version__: the extension's (the project's version); absent without the extension
    (an AttributeError that says how to build it, so hasattr() and help() still work)."""
    if name == "__version__":
        try:
            return _extension().version
        except ImportError as error:
            raise AttributeError(str(error)) from None
    raise AttributeError(f"module 'asgdsim' has no attribute {name!r}")


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


def _text(config: Config) -> Tuple[str, Union[bytes, str], bytes, str]:
    """(JSON text, source, base folder, default name) of a config path or dict; paths as bytes."""
    core = _extension()
    if isinstance(config, (str, bytes, os.PathLike)):
        path = os.fspath(config)
        try:
            with open(path, "rb") as f:
                f.read(0)
        except OSError as e:
            raise InputError(f"{os.fsdecode(path)}: cannot be read: {e.strerror}", 2) from None
        # read by the C++ reader, as `asgdsim run` reads it (comments; line and column in errors)
        raw = _path_bytes(path)
        return core.read_config(raw), raw, os.path.dirname(raw) or b".", core.name_from_path(raw)
    if isinstance(config, dict):
        _utf8_only(config)
        return json.dumps(config), "the config", _path_bytes(os.getcwd()), core.default_experiment_name
    raise TypeError(f"config must be a dict or a path to a JSON file, not {type(config).__name__}")


def _sets(sets: Sequence[Union[str, bytes]]) -> builtins.list:
    """--set texts as bytes: one with bytes that are not UTF-8 is refused by the C++ side,
    naming it, as `asgdsim run --set` refuses it."""
    return [s if isinstance(s, bytes) else os.fsencode(s) for s in sets]


def validate(config: Config, *, sets: Sequence[str] = ()) -> Dict[str, Any]:
    """Validates like `asgdsim validate`.

    Returns {"resolved": the config with every default filled, "runs": [{run_id, engine,
    sweep, seed}], "text": what `asgdsim validate` prints, "warnings": [...]}; raises
    ConfigError (every issue with its JSON path) or InputError.
    """
    text, source, base, name = _text(config)
    return json.loads(_extension().validate(text, source, base, _sets(sets), name))


def initial_parameters(config: Config, run: int = 0):
    """The flat parameters a native model (model.type mlp, cnn, ...) of run `run` of the
    config starts from, as a NumPy float32 array (layout per model: kernels/model.h; a
    dense layer is W (inputs, outputs) row-major, then b). To start a PyTorch model from
    the same point."""
    text, source, base, _ = _text(config)
    return _extension().initial_parameters(text, source, base, run)


def catalog() -> Dict[str, Any]:
    """The catalog `asgdsim list` prints: {"sections": [...], "families": [...]}, each key
    with its allowed values, default and doc."""
    return json.loads(_extension().catalog())


list = catalog  # noqa: A001 (the old name, as `asgdsim list`; catalog() does not shadow the builtin)


class Results:
    """An experiment folder that asgdsim.run wrote.

    `load()` gives the tidy table of asgdsim.analysis (one row per run x evaluation
    point); `summaries()` one row per run; `exit_code` is what `asgdsim run` would have
    exited with (0: every run ended, completed, stalled or diverged: see the status column).
    """

    def __init__(self, folder: str, exit_code: int):
        self.folder = folder
        self.exit_code = exit_code

    def load(self):
        """pandas DataFrame: one row per run x evaluation point (asgdsim.analysis.load)."""
        from . import analysis
        return analysis.load(self.folder)

    def summaries(self):
        """pandas DataFrame: one row per run (asgdsim.analysis.summaries)."""
        from . import analysis
        return analysis.summaries(self.folder)

    def __repr__(self):
        return f"Results({self.folder!r}, exit_code={self.exit_code})"


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The options of one asgdsim.run, as they cross to the C++ side (by name: each field is
    read by its name there, so an option cannot land in another's place).

    threads, jobs: `asgdsim run`'s --threads (0: one per core) and --jobs, checked by the
    same code (whole numbers, 0..1024 and 1..1024; a text is checked as the command line's
    is). rerun: make again the runs already done. supersede: move run folders of another
    config aside. recalibrate: measure compute traces again. quiet, trace, wait: as the
    command line's. command_line: what the run folders record as the command. option_names:
    how messages name threads and jobs ("threads=", "jobs="; the CLI: "--threads").
    progress: None, or a callable given a dict for each metrics row as the run records it
    (run_id, run, runs, fraction of the stop budget, time, epoch, updates, train_loss,
    test_loss, test_accuracy; status "") and one when the run ends (status: completed,
    stalled, diverged, interrupted). It runs on the simulator's threads, one call at a time
    (as a model's calls), charges no virtual time and changes no file; if it raises, that
    run fails. checkpoint_every: --checkpoint-every, the wall seconds between a run's
    checkpoints (None: the command line's default; 0: none); a run found with a checkpoint
    resumes from it (docs/reliability.md, "Checkpoints"). interrupt_after_updates:
    --interrupt-after-updates, for testing checkpoints (0: never).
    """

    threads: Union[int, str] = 0
    jobs: Union[int, str] = 1
    rerun: bool = False
    supersede: bool = False
    recalibrate: bool = False
    quiet: bool = False
    trace: bool = False
    wait: bool = False
    command_line: str = "asgdsim.run"
    option_names: Tuple[str, str] = ("threads=", "jobs=")
    progress: Optional[Callable[[Dict[str, Any]], None]] = None
    checkpoint_every: Optional[float] = None
    interrupt_after_updates: int = 0


def run(config: Config, *, out: Union[str, "os.PathLike[str]"] = "runs", model: Optional[Model] = None,
        loss: Optional[Loss] = None, data: Optional[Data] = None, test_data: Optional[Data] = None,
        threads: Optional[Union[int, str]] = None, jobs: Optional[Union[int, str]] = None, rerun: bool = False,
        supersede: bool = False, recalibrate: bool = False, quiet: bool = False, trace: bool = False,
        wait: bool = False, sets: Sequence[str] = (), command_line: Optional[str] = None, force: Any = None,
        option_names: Tuple[str, str] = ("threads=", "jobs="),
        progress: Optional[Union[Callable[[Dict[str, Any]], None], str]] = None,
        checkpoint_every: Optional[float] = None, interrupt_after_updates: int = 0) -> Results:
    """Runs an experiment as `asgdsim run` does and returns its Results.

    config: a dict or a JSON file's path. model: a torch.nn.Module or a zero-argument
    factory returning one (model.type "torch"; asgdsim.contract.ModelFactory); loss:
    (outputs, targets) -> scalar tensor (default cross-entropy; mean squared error for data
    without classes); data/test_data: map-style torch Datasets of (input, target) or pairs
    of tensors (data.type "torch"; data may be a factory returning (train, test)).
    threads/jobs/rerun/supersede/recalibrate/quiet/trace/wait: as `asgdsim run`'s options
    (RunOptions; rerun makes again the runs already done, supersede moves another config's
    run folders aside); sets: ["KEY.PATH=VALUE", ...] as --set. Ctrl-C ends the runs under
    way as interrupted and raises KeyboardInterrupt. model=/loss= given while no run's
    model.type is "torch" (or data=/test_data= while no data.type is), or a "torch" type
    with neither the object nor a module file, raise InputError before anything is
    written; a model or data set that breaks the gradient contract raises ModelError.
    option_names: how messages name threads and jobs (the CLI: "--threads"). progress: a
    callable given each run's progress as a dict, as the runs go (RunOptions.progress), or
    "bar": one bar per run (asgdsim.progress.Bar: tqdm's, a widget in a notebook, when
    tqdm is installed; else a line each tenth of a run). checkpoint_every,
    interrupt_after_updates: as RunOptions's (a run interrupted with a checkpoint resumes
    from it when run again, with the files an uninterrupted run writes).
    """
    if force is not None:  # as `asgdsim run --force`: split in two (docs/cli.md)
        raise InputError("force= is gone, split in two: supersede=True moves run folders of another config aside "
                         "(nothing re-runs), rerun=True makes again the runs already done; pass both for what "
                         "force did", 2)
    if isinstance(progress, str):
        if progress != "bar":
            raise InputError(f"progress={progress!r}: a callable, None or \"bar\"", 2)
        from .progress import Bar
        progress = Bar()
    text, source, base, name = _text(config)
    if command_line is None:
        command_line = f"asgdsim.run({os.fsdecode(source) if source != 'the config' else 'dict'})"
    options = RunOptions(threads=0 if threads is None else threads, jobs=1 if jobs is None else jobs,
                         rerun=bool(rerun), supersede=bool(supersede), recalibrate=bool(recalibrate),
                         quiet=bool(quiet), trace=bool(trace), wait=bool(wait), command_line=command_line,
                         option_names=tuple(option_names), progress=progress, checkpoint_every=checkpoint_every,
                         interrupt_after_updates=interrupt_after_updates)
    given = [key for key, value in (("model", model), ("loss", loss), ("data", data), ("test_data", test_data))
             if value is not None]
    torch_state = []

    def make_bridge():  # called by the simulator when a run has model or data type "torch"
        bridge = _torch_bridge()
        import torch
        torch_state.append((torch.random.get_rng_state(), torch.get_num_threads(), bridge.blas_threads_state()))
        return bridge.Bridge(model, loss, data, test_data)

    try:
        code, folder = _extension().run(config_text=text, source=source, base_dir=base, sets=_sets(sets),
                                        default_name=name, out=_path_bytes(out), options=options, given=given,
                                        make_bridge=make_bridge)
    finally:
        if torch_state:  # the caller's generator and thread counts (torch's, OpenBLAS's), as they were
            import torch
            from ._torch import restore_blas_threads
            torch.random.set_rng_state(torch_state[0][0])
            torch.set_num_threads(torch_state[0][1])
            restore_blas_threads(torch_state[0][2])
    return Results(os.fsdecode(folder), code)
