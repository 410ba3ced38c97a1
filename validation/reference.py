#!/usr/bin/python3
"""An independent reference implementation of asgdsim's training engines on real
processes: one parameter server (rank 0) and N workers (ranks 1..N) on torch.distributed
(gloo over loopback), exchanging real tensors, computing real gradients, and waiting out
seeded emulated step durations. It writes what really happened, with wall-clock times, so
that asgdsim's virtual clock can be compared with a system it did not write.

Written from docs/algorithms.md and the papers it cites; it imports nothing from asgdsim.

    /usr/bin/python3 validation/reference.py --engine async --workers 4 --seed 1 --out DIR

(validation/README.md: the options, the protocol of each engine and the log files.)
Exit codes: 0 done, 2 invalid input, 1 a process failed or timed out, 130 interrupted.
"""

import argparse
import json
import os
import shlex
import shutil
import sys

if __package__ in (None, ""):  # run as a script: make `validation` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from validation import transport as tp  # noqa: E402
from validation import workload  # noqa: E402
from validation.launcher import launch, machine, read_csv, write_atomic, write_csv  # noqa: E402
from validation.server import CONTRIBUTION_COLUMNS, UPDATE_COLUMNS, Server  # noqa: E402
from validation.worker import MESSAGE_COLUMNS, STEP_COLUMNS, Worker  # noqa: E402
from validation.workload import InputError  # noqa: E402

ENGINES = ["async", "sync", "sync_backup", "k_batch_sync", "k_async", "ssp", "local_sgd",
           "diloco", "easgd"]
FORMAT = "asgdsim-validation-reference/1"
TIME_ORIGIN = ("rank 0's time.monotonic_ns() once every rank is connected (broadcast to all); "
               "every t_* column is nanoseconds of the machine's monotonic clock since then")


# ------------------------------------------------------------------------ options


def build_parser():
    p = argparse.ArgumentParser(prog="reference.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--engine", required=True, choices=ENGINES)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True, help="run folder (must not exist, or be empty)")
    g = p.add_argument_group("model and data")
    g.add_argument("--data", default="fashion_mnist", choices=["fashion_mnist", "synthetic"])
    g.add_argument("--data-path", default=workload.FASHION_MNIST_DIR)
    g.add_argument("--synthetic-samples", type=int, default=4096)
    g.add_argument("--synthetic-features", type=int, default=32)
    g.add_argument("--data-seed", type=int, default=0, help="the synthetic set's seed")
    g.add_argument("--hidden", default="64", help="hidden layer widths, comma-separated ('' = softmax regression)")
    g.add_argument("--device", default="cpu", help="where workers compute gradients (cpu, cuda)")
    g = p.add_argument_group("training")
    g.add_argument("--batch", type=int, default=32, help="per-worker minibatch")
    g.add_argument("--lr", type=float, default=0.05)
    g.add_argument("--momentum", type=float, default=0.0, help="the server's SGD momentum (local_sgd/diloco: the inner SGD's)")
    g.add_argument("--nesterov", action="store_true")
    g.add_argument("--aggregate", default="mean", choices=["mean", "sum"])
    g = p.add_argument_group("emulated compute")
    g.add_argument("--compute", default="exponential:0.03",
                   help="per-step duration: " + ", ".join(f"{n}:{','.join(a)}" for n, (a, _) in workload.DISTRIBUTIONS.items()))
    g.add_argument("--speeds", default="", help="per-worker slowdown factors, e.g. 1,1,1,3")
    g = p.add_argument_group("engine options")
    g.add_argument("--backups", type=int, default=1, help="sync_backup: b")
    g.add_argument("--late", choices=["drop", "cancel"], help="sync_backup (default drop), k_batch_sync (default cancel)")
    g.add_argument("--k", type=int, default=1, help="k_batch_sync, k_async: K")
    g.add_argument("--batch-async", action="store_true", help="k_async: K-batch-async (batch true)")
    g.add_argument("--bound", type=int, default=3, help="ssp: s")
    g.add_argument("--steps", type=int, help="local_sgd (default 4), diloco (default 500): H")
    g.add_argument("--inner", choices=["sgd", "adamw"], help="local_sgd (default sgd), diloco (default adamw)")
    g.add_argument("--inner-lr", type=float, help="default --lr")
    g.add_argument("--inner-momentum", type=float, help="inner sgd; default --momentum")
    g.add_argument("--weight-decay", type=float, default=0.0, help="inner adamw")
    g.add_argument("--outer-lr", type=float, help="local_sgd (default 1), diloco (default 0.7)")
    g.add_argument("--outer-momentum", type=float, help="local_sgd (default 0), diloco (default 0.9)")
    g.add_argument("--outer-nesterov", action=argparse.BooleanOptionalAction, default=None,
                   help="local_sgd (default off), diloco (default on)")
    g.add_argument("--easgd-mode", default="async", choices=["async", "sync"])
    g.add_argument("--period", type=int, default=4, help="easgd: local steps per exchange")
    g.add_argument("--alpha", default="auto", help="easgd: moving rate ('auto' = 0.9/N)")
    g = p.add_argument_group("stop, evaluation, limits")
    g.add_argument("--updates", type=int, default=100, help="stop after this many updates (0 = no limit)")
    g.add_argument("--time-limit", type=float, default=0.0, help="stop after this many seconds (0 = no limit)")
    g.add_argument("--eval-every", type=int, default=10, help="snapshot the model of record every so many updates (0 = start and end only)")
    g.add_argument("--save-snapshots", action="store_true", help="also write the snapshots' parameters (snapshots.pt)")
    g.add_argument("--eval-train-samples", type=int, default=10000, help="train loss on the first so many samples (0 = all)")
    g.add_argument("--eval-test-samples", type=int, default=0, help="test metrics on the first so many samples (0 = all)")
    g.add_argument("--timeout", type=float, default=60.0, help="seconds any one blocking wait may last")
    g.add_argument("--max-wall", type=float, default=0.0, help="seconds the whole run may last (0 = 600, or 2 x --time-limit + 120)")
    g.add_argument("--inject-failure", default="", metavar="RANK:STEP", help=argparse.SUPPRESS)
    return p


def resolve(args):
    """Checks the options and fills in the engine-dependent defaults; InputError names
    the option."""
    n = args.workers
    if n < 1:
        raise InputError(f"--workers {n}: at least 1")
    if args.batch < 1 or args.lr <= 0:
        raise InputError("--batch must be >= 1 and --lr > 0")
    if args.momentum < 0 or (args.nesterov and args.momentum <= 0):
        raise InputError("--momentum must be >= 0 (and > 0 with --nesterov)")
    try:
        args.hidden_sizes = [int(h) for h in args.hidden.split(",") if h.strip()]
    except ValueError:
        raise InputError(f"--hidden {args.hidden!r}: comma-separated integers") from None
    if any(h < 1 for h in args.hidden_sizes):
        raise InputError(f"--hidden {args.hidden!r}: widths must be >= 1")
    if args.updates < 0 or args.time_limit < 0 or (args.updates == 0 and args.time_limit == 0):
        raise InputError("--updates or --time-limit must be > 0 (and neither negative)")
    if args.eval_every < 0 or args.timeout <= 0:
        raise InputError("--eval-every must be >= 0 and --timeout > 0")
    e = args.engine
    if args.late is not None and e not in ("sync_backup", "k_batch_sync"):
        raise InputError(f"--late applies to sync_backup and k_batch_sync, not {e}")
    if e == "sync_backup":
        args.late = args.late or "drop"
        if not 0 <= args.backups < n:
            raise InputError(f"--backups {args.backups}: in [0, workers - 1] = [0, {n - 1}]")
    if e == "k_batch_sync":
        args.late = args.late or "cancel"
    if e in ("k_batch_sync", "k_async") and args.k < 1:
        raise InputError(f"--k {args.k}: at least 1")
    if e == "k_async" and not args.batch_async and args.k > n:
        raise InputError(f"--k {args.k}: at most workers ({n}) without --batch-async")
    if e == "ssp" and args.bound < 0:
        raise InputError(f"--bound {args.bound}: at least 0")
    local = e in ("local_sgd", "diloco")
    defaults = {"local_sgd": (4, "sgd", 1.0, 0.0, False), "diloco": (500, "adamw", 0.7, 0.9, True)}
    if local:
        steps, inner, olr, omom, onest = defaults[e]
        args.steps = steps if args.steps is None else args.steps
        args.inner = args.inner or inner
        args.outer_lr = olr if args.outer_lr is None else args.outer_lr
        args.outer_momentum = omom if args.outer_momentum is None else args.outer_momentum
        args.outer_nesterov = onest if args.outer_nesterov is None else args.outer_nesterov
        args.inner_lr = args.lr if args.inner_lr is None else args.inner_lr
        args.inner_momentum = args.momentum if args.inner_momentum is None else args.inner_momentum
        if args.steps < 1 or args.outer_lr <= 0 or args.outer_momentum < 0 or args.inner_lr <= 0:
            raise InputError("--steps must be >= 1, --outer-lr and --inner-lr > 0, --outer-momentum >= 0")
        if args.outer_nesterov and args.outer_momentum <= 0:
            raise InputError("--outer-nesterov needs --outer-momentum > 0")
        if args.inner == "adamw" and args.inner_momentum:
            raise InputError("--inner-momentum applies to --inner sgd (AdamW's momentum is beta1)")
    else:
        for opt in ("steps", "inner", "inner_lr", "inner_momentum", "outer_lr", "outer_momentum", "outer_nesterov"):
            if getattr(args, opt) is not None:
                raise InputError(f"--{opt.replace('_', '-')} applies to local_sgd and diloco, not {e}")
        args.inner = args.inner_lr = args.inner_momentum = None
    if e == "easgd":
        if args.period < 1:
            raise InputError(f"--period {args.period}: at least 1")
        try:
            args.alpha_value = 0.9 / n if args.alpha == "auto" else float(args.alpha)
        except ValueError:
            raise InputError(f"--alpha {args.alpha!r}: 'auto' or a number") from None
        if not 0 <= args.alpha_value <= 1 or (args.easgd_mode == "sync" and n * args.alpha_value > 1 + 1e-12):
            raise InputError(f"--alpha {args.alpha}: in [0, 1], and workers x alpha <= 1 in sync mode")
        if args.momentum or args.nesterov:
            raise InputError("easgd's local steps are plain SGD: no --momentum/--nesterov")
    else:
        args.alpha_value = None
    args.fail_rank, args.fail_step = None, None
    if args.inject_failure:
        try:
            r, s = args.inject_failure.split(":")
            args.fail_rank, args.fail_step = int(r), int(s)
        except ValueError:
            raise InputError(f"--inject-failure {args.inject_failure!r}: RANK:STEP") from None
    if args.device != "cpu" and not args.device.startswith("cuda"):
        raise InputError(f"--device {args.device}: cpu or cuda[:N]")
    # (whether CUDA works is found by the workers: the launcher must not touch CUDA before it forks)
    args.max_wall = args.max_wall or ((2 * args.time_limit + 120) if args.time_limit else 600.0)
    return args


def engine_options(args):
    e = args.engine
    o = {"aggregate": args.aggregate}
    if e == "sync_backup":
        o.update(backups=args.backups, late=args.late)
    elif e == "k_batch_sync":
        o.update(k=args.k, late=args.late)
    elif e == "k_async":
        o.update(k=args.k, batch=args.batch_async)
    elif e == "ssp":
        o.update(bound=args.bound)
        del o["aggregate"]  # ssp applies each gradient in full
    elif e in ("local_sgd", "diloco"):
        o.update(steps=args.steps, inner=args.inner, inner_lr=args.inner_lr,
                 inner_momentum=args.inner_momentum, weight_decay=args.weight_decay,
                 outer_lr=args.outer_lr, outer_momentum=args.outer_momentum,
                 outer_nesterov=args.outer_nesterov)
    elif e == "easgd":
        o = {"mode": args.easgd_mode, "period": args.period, "alpha": args.alpha_value,
             "order": "paper"}
    return o


# ------------------------------------------------------------------------ one process


def process(rank, args, data):
    """Rank 0 serves, the others work; each writes its logs when the run is over."""
    clock = tp.Clock(0)
    model = workload.MLP(data.features, args.hidden_sizes)
    parts = os.path.join(args.out, "parts")
    # Everything a process needs is built and warmed up (torch's first backward and first
    # optimizer step pay one-off costs) before the run's clock starts.
    if rank == 0:
        server = Server(args, clock, model.init(args.seed))
        server.warm_up()
    else:
        compute = workload.ComputeModel(args.compute, args.speeds, args.workers, args.seed)
        worker = Worker(args, rank, clock, model, data, compute)
        worker.warm_up(model.init(args.seed))
    tp.agree_on_start(rank, clock)
    if rank == 0:
        server.run()
        write_csv(os.path.join(args.out, "updates.csv"), UPDATE_COLUMNS, server.updates)
        write_csv(os.path.join(args.out, "contributions.csv"), CONTRIBUTION_COLUMNS,
                  [p.row() for p in server.pushes])
        write_csv(os.path.join(parts, "messages_rank0.csv"), MESSAGE_COLUMNS, server.messages)
        write_atomic(os.path.join(parts, "server.json"), json.dumps(
            {"stop_reason": server.stop_reason, "updates": server.version,
             "duration_s": clock.now() / 1e9}))
        write_csv(os.path.join(args.out, "losses.csv"), LOSS_COLUMNS, evaluate(args, model, data, server.snapshots))
        if args.save_snapshots:
            torch.save({"update": [s[0] for s in server.snapshots], "t": [s[1] for s in server.snapshots],
                        "params": torch.stack([s[2] for s in server.snapshots])},
                       os.path.join(args.out, "snapshots.pt"))
    else:
        worker.run()
        write_csv(os.path.join(parts, f"steps_rank{rank}.csv"), STEP_COLUMNS, worker.steps)
        write_csv(os.path.join(parts, f"messages_rank{rank}.csv"), MESSAGE_COLUMNS, worker.messages)


LOSS_COLUMNS = ["update", "t", "train_loss", "test_loss", "test_accuracy"]


def evaluate(args, model, data, snapshots):
    """After the run: the model of record's train loss (first eval_train_samples training
    samples) and test loss/accuracy at each snapshot."""
    ntr = args.eval_train_samples or data.train_samples
    nte = args.eval_test_samples or data.y_test.shape[0]
    xtr, ytr = data.batch(data.x_train, np.arange(min(ntr, data.train_samples)))
    xte, yte = data.batch(data.x_test, np.arange(min(nte, data.y_test.shape[0])))
    rows = []
    for update, t, w in snapshots:
        train_loss, _ = model.evaluate(w, xtr, ytr)
        test_loss, test_acc = model.evaluate(w, xte, yte)
        rows.append([update, t, repr(train_loss), repr(test_loss), repr(test_acc)])
    return rows


# ------------------------------------------------------------------------ the launcher


def prepare_out(path):
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise InputError(f"--out {path}: exists and is not an empty folder (nothing is overwritten)")
    os.makedirs(os.path.join(path, "parts"), exist_ok=True)
    os.makedirs(os.path.join(path, "logs"), exist_ok=True)


def merge_parts(out, workers):
    parts = os.path.join(out, "parts")
    steps, messages = [], []
    for r in range(workers + 1):
        if r:
            steps += read_csv(os.path.join(parts, f"steps_rank{r}.csv"))
        messages += read_csv(os.path.join(parts, f"messages_rank{r}.csv"))
    steps.sort(key=lambda s: (int(s["worker"]), int(s["step"])))
    messages.sort(key=lambda m: (int(m["t_send"]), int(m["src"]), int(m["seq"])))
    write_csv(os.path.join(out, "steps.csv"), STEP_COLUMNS, [[s[c] for c in STEP_COLUMNS] for s in steps])
    write_csv(os.path.join(out, "messages.csv"), MESSAGE_COLUMNS, [[m[c] for c in MESSAGE_COLUMNS] for m in messages])
    with open(os.path.join(parts, "server.json")) as f:
        return json.load(f)


def run(argv):
    """The entry point; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        resolve(args)
        compute = workload.ComputeModel(args.compute, args.speeds, args.workers, args.seed)
        data = workload.load_dataset(args.data, args.data_path, args.synthetic_samples,
                                     args.synthetic_features, args.data_seed)
        prepare_out(args.out)
    except InputError as e:
        print(f"reference.py: error: {e}", file=sys.stderr)
        return 2
    model = workload.MLP(data.features, args.hidden_sizes)
    header = {"format": FORMAT, "status": "running", "engine": args.engine,
              "engine_options": engine_options(args), "workers": args.workers, "seed": args.seed,
              "model": model.describe(), "parameters": model.parameters,
              "message_bytes": {"params_or_push": tp.HEADER_BYTES + 4 * model.parameters,
                                "control": tp.HEADER_BYTES},
              "data": args.data,
              "data_options": ({"path": args.data_path} if args.data == "fashion_mnist" else
                               {"samples": args.synthetic_samples, "features": args.synthetic_features,
                                "data_seed": args.data_seed}),
              "data_train_samples": data.train_samples, "hidden": args.hidden_sizes, "batch": args.batch, "lr": args.lr,
              "momentum": args.momentum, "nesterov": args.nesterov, "compute": args.compute,
              "speeds": compute.speeds,
              "stop": {"updates": args.updates, "time_limit_s": args.time_limit},
              "eval_every": args.eval_every, "device": args.device, "transport": "gloo over loopback",
              "time_origin": TIME_ORIGIN, "command": "validation/reference.py " + shlex.join(argv),
              "loadavg_start": os.getloadavg()}
    header.update(machine())
    run_json = os.path.join(args.out, "run.json")
    write_atomic(run_json, json.dumps(header, indent=1) + "\n")
    status, error, pids, wall = launch(
        args.workers + 1, lambda rank: process(rank, args, data), os.path.join(args.out, "logs"),
        os.path.join(args.out, "parts", "store"), args.timeout, args.max_wall,
        ["server"] + [f"worker{w}" for w in range(args.workers)])
    header.update(status=status, pids=pids, wall_seconds=round(wall, 3), loadavg_end=os.getloadavg())
    if status == "completed":
        try:
            header.update(merge_parts(args.out, args.workers))
            shutil.rmtree(os.path.join(args.out, "parts"))  # merged into steps.csv, messages.csv
        except (OSError, KeyError, ValueError) as e:
            header["status"], error = "failed", f"merging the logs failed: {e}"
    if error:
        header["error"] = error
    write_atomic(run_json, json.dumps(header, indent=1) + "\n")
    if error:
        print(f"reference.py: {header['status']}: {error}", file=sys.stderr)
        return 130 if status == "interrupted" else 1
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
