"""Runs a function in `world` forked processes joined in one gloo process group, and makes
sure none of them outlives the launch: a child that fails ends the others at once, ^C or
SIGTERM ends them all, and each child is SIGKILLed by the kernel if the launcher itself
dies (PR_SET_PDEATHSIG). Also the small file and provenance helpers that reference.py and
calibrate.py share.

Children are forked from the launcher after it has imported torch (and loaded the data),
so they pay neither again; the launcher must not have started any torch thread pool or
process group before it forks.
"""

import csv
import ctypes
import datetime
import multiprocessing
import multiprocessing.connection
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import traceback

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------ files


def write_atomic(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_csv(path, columns, rows):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
    os.replace(tmp, path)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def machine():
    """Where and with what a measurement was made."""
    try:
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or "unknown"
        dirty = bool(subprocess.run(["git", "-C", REPO, "status", "--porcelain"], capture_output=True,
                                    text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "unknown", None
    return {"host": socket.gethostname(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "numpy": np.__version__,
            "gloo": torch.distributed.is_available() and torch.distributed.is_gloo_available(),
            "git_commit": commit, "git_dirty": dirty,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


# ------------------------------------------------------------------------ one child


def _die_with_parent(parent_pid):
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl
        os._exit(1)


def _child(rank, world, target, log_dir, store, timeout_s, parent_pid):
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles ^C and ends us
    log = os.open(os.path.join(log_dir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    try:
        import torch.distributed as dist
        torch.set_num_threads(1)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
        target(rank)
    except BaseException:  # noqa: BLE001 -- every failure ends this process non-zero
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)


def log_tail(log_dir, rank, lines=15):
    try:
        with open(os.path.join(log_dir, f"rank{rank}.log")) as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


# ------------------------------------------------------------------------ the launch


class Interrupted(Exception):
    pass


def _raise_interrupted(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


def launch(world, target, log_dir, store, timeout_s, max_wall_s, names=None):
    """Runs target(rank) for rank 0..world-1, each in its own process with the process
    group initialized (gloo over loopback, rendezvous through the file `store`, which must
    not exist) and its stdout/stderr in log_dir/rank<R>.log. Returns (status, error,
    pids, wall seconds): status "completed" when every child exited 0; "failed" (error
    names the child and ends with its log's tail) as soon as one exits non-zero or after
    max_wall_s; "interrupted" on SIGINT/SIGTERM. Every child has ended when it returns."""
    names = names or [f"rank{r}" for r in range(world)]
    ctx = multiprocessing.get_context("fork")
    # absolute: "file://" + a relative path would read its first folder as a host name
    store = os.path.abspath(store)
    procs = [ctx.Process(target=_child, args=(r, world, target, log_dir, store, timeout_s, os.getpid()),
                         name=names[r], daemon=True) for r in range(world)]
    old = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    t_start = time.monotonic()
    status, error = "failed", None
    try:
        for p in procs:
            p.start()
        live = {p.sentinel: p for p in procs}
        while live and not error:
            remaining = max_wall_s - (time.monotonic() - t_start)
            if remaining <= 0:
                error = f"the run took more than {max_wall_s:g} s (--max-wall): stopped"
                break
            for s in multiprocessing.connection.wait(list(live), timeout=min(remaining, 1.0)):
                p = live.pop(s)
                p.join()
                if p.exitcode != 0 and not error:
                    rank = procs.index(p)
                    error = (f"{p.name} (rank {rank}, pid {p.pid}) exited with code {p.exitcode}; its log "
                             f"({os.path.join(log_dir, f'rank{rank}.log')}) ends:\n" + log_tail(log_dir, rank))
        if not error:
            status = "completed"
    except Interrupted as e:
        status, error = "interrupted", f"interrupted by {e}"
    finally:
        for p in procs:  # every child ends here, whatever happened
            if p.pid is not None and p.exitcode is None:
                p.terminate()
        for p in procs:
            if p.pid is not None:
                p.join(3)
                if p.exitcode is None:
                    p.kill()
                    p.join()
        for s, h in old.items():
            signal.signal(s, h)
        if os.path.exists(store):
            os.unlink(store)
    return status, error, [p.pid for p in procs], time.monotonic() - t_start
