"""python3 -m asgdsim — `asgdsim run/validate/list` with a PyTorch model and data.

    python3 -m asgdsim run CONFIG.json --model models.py:make_model [--data data.py:make_data]
                           [--test-data F.py:NAME] [--loss F.py:NAME] [--set KEY.PATH=VALUE]...
                           [--out DIR] [--threads N] [--jobs N] [--rerun] [--supersede] [--recalibrate]
                           [--wait] [--quiet] [--trace]
    python3 -m asgdsim validate CONFIG.json [--model ...] [--data ...] [--set ...]
    python3 -m asgdsim list

--model/--data/--loss name FILE.py:NAME (relative to the current folder) and are written
into the config as model.module, data.module and model.loss (as absolute paths), so the
run folder's config.json says which code made the run. Exit codes as `asgdsim`: 0 done,
2 invalid input, 1 other failure, 130 interrupted.
"""
import argparse
import os
import sys

from . import catalog, run, validate
from ._env import torch_bridge
from .errors import AsgdsimError


def _spec_set(key, spec):
    """--model F.py:NAME -> the --set that puts its absolute path into the config."""
    if ":" not in spec:
        raise AsgdsimError(f"{key.split('.')[0]} spec '{spec}': expected FILE.py:NAME", 2)
    path, name = spec.rsplit(":", 1)
    return f"{key}={os.path.abspath(path)}:{name}"


def _resolve_specs(resolved, base):
    """Imports the files the config names as FILE.py:NAME (model.module, data.module,
    model.loss: what --model/--data/--loss set) and finds each NAME in them, as a run
    would, so that validate refuses a spec a run would fail on (asgdsim.ModelError)."""
    specs = [(f"{section}.{key}", (resolved.get(section) or {}).get(key))
             for section, key in (("model", "module"), ("data", "module"), ("model", "loss"))]
    specs = [(key, spec) for key, spec in specs if spec]
    if not specs:
        return
    load_spec = torch_bridge().load_spec
    for key, spec in specs:
        load_spec(spec, base, key)


def _parser():
    p = argparse.ArgumentParser(prog="python3 -m asgdsim", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("run", "validate"):
        s = sub.add_parser(name)
        s.add_argument("config", help="experiment config (JSON)")
        s.add_argument("--model", help="FILE.py:FACTORY returning the torch.nn.Module (model.module)")
        s.add_argument("--data", help="FILE.py:FACTORY returning the training set or (train, test) (data.module)")
        s.add_argument("--test-data", help="FILE.py:FACTORY returning the test set")
        s.add_argument("--loss", help="FILE.py:FUNCTION loss(outputs, targets) (model.loss)")
        s.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
        if name == "run":
            s.add_argument("--out", default="runs")
            s.add_argument("--threads", default="0")  # checked as `asgdsim run` checks them
            s.add_argument("--jobs", default="1")
            s.add_argument("--rerun", action="store_true", help="make again the runs already done")
            s.add_argument("--supersede", action="store_true", help="move run folders of another config aside")
            s.add_argument("--recalibrate", action="store_true", help="measure the compute traces again")
            s.add_argument("--wait", action="store_true")
            s.add_argument("--quiet", action="store_true")
            s.add_argument("--trace", action="store_true")
            s.add_argument("--checkpoint-every", type=float, default=None, metavar="SECONDS",
                           help="wall seconds between a run's checkpoints (0: none)")
            s.add_argument("--interrupt-after-updates", type=int, default=0, metavar="N",
                           help="testing checkpoints: each run stops as on Ctrl-C after N updates")
    sub.add_parser("list")
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            import json
            print(json.dumps(catalog(), indent=1))
            return 0
        sets = list(args.set)
        if args.model:
            sets.append(_spec_set("model.module", args.model))
        if args.data:
            sets.append(_spec_set("data.module", args.data))
        if args.loss:
            sets.append(_spec_set("model.loss", args.loss))
        test_data = None
        if args.test_data:
            load_spec = torch_bridge().load_spec
            path, name = args.test_data.rsplit(":", 1) if ":" in args.test_data else (args.test_data, "")
            make_test = load_spec(f"{os.path.abspath(path)}:{name}", ".", "--test-data")
            test_data = make_test() if args.command == "run" else None
        if args.command == "validate":
            v = validate(args.config, sets=sets)
            _resolve_specs(v["resolved"], os.path.dirname(args.config) or ".")
            print(v["text"], end="")
            for w in v["warnings"]:
                print(f"asgdsim: warning: {w}", file=sys.stderr)
            return 0
        res = run(args.config, out=args.out, threads=args.threads, jobs=args.jobs, rerun=args.rerun,
                  supersede=args.supersede, recalibrate=args.recalibrate,
                  quiet=args.quiet, trace=args.trace, wait=args.wait, sets=sets, test_data=test_data,
                  command_line="python3 -m asgdsim " + " ".join(argv), option_names=("--threads", "--jobs"),
                  checkpoint_every=args.checkpoint_every, interrupt_after_updates=args.interrupt_after_updates)
        return res.exit_code
    except AsgdsimError as e:
        print(f"asgdsim: {e.message}", file=sys.stderr)
        return e.exit_code
    except ImportError as e:
        if e.name != "asgdsim._core":
            raise
        print(f"asgdsim: {e}", file=sys.stderr)  # what to build or install (asgdsim._env.extension)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
