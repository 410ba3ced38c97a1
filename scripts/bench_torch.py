#!/usr/bin/python3
"""Is the model the cost? The same gradients of a PyTorch model three ways, alternated in
one process (issue #36, item 4):

  bare   a bare PyTorch loop doing a gradient's work as asgdsim's gradient contract does
         it: load a flat parameter vector into the module, take a minibatch, forward,
         backward, read the gradient into a flat vector. No update, no clock.
  sim    the same number of gradients through asgdsim.run: async, 16 workers, exponential
         compute times, stop.gradients = G (the whole call: building the model, the data,
         the run folder, evaluations at the start and the end).
  plain  the simulation a researcher would write in PyTorch: a heap of arrival times, one
         model, each worker's stale parameter copy (a clone of the parameters it pulled);
         the earliest arrival computes its gradient on its copy, the master parameters
         take an SGD step, the worker pulls a fresh copy and draws its next compute time.

Torch runs with one intra-op thread in all three (model.threads 1, asgdsim threads 1).
The machine this was written on has slow and fast memory phases lasting minutes, so
absolute times mean little: each alternation runs the three back to back (the order
rotating) and gives the ratios sim/bare and plain/bare of throughput (gradients per wall
second); the result is their median over the alternations. The same ratios of process
CPU time are printed too (less sensitive to other jobs on the same cores), and, for the
sim, the share of its wall time spent inside its gradient jobs (all of them, and the G it
counts: a run stopped by stop.gradients computes workers - 1 more, the steps in flight):
measured within one run, that share does not depend on the machine's drift.

usage: PYTHONPATH=build/python /usr/bin/python3 scripts/bench_torch.py
           [--model mlp|resnet] [--gradients G] [--alternations K] [--batch B]
           [--workers N] [--json FILE] [--figure FILE.png]
       /usr/bin/python3 scripts/bench_torch.py --plot A.json [B.json ...] --figure FILE.png
"""
import argparse
import datetime
import heapq
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

# One BLAS thread, as one torch thread: OpenBLAS keeps its own pool, which
# torch.set_num_threads does not size; with two, the bare loop's MLP gradients ran on two
# cores (CPU time twice the wall time) while asgdsim's ran on one. Read when torch loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch
import torch.nn.functional as F
from torch import nn

import asgdsim

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def make_mlp():
    """784-512-512-10 ReLU MLP (670k parameters): a few ms a gradient of 32 on one core."""
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def make_resnet():
    sys.path.insert(0, os.path.join(REPO, "python", "examples", "resnet_fmnist"))
    import model  # the ResNet example's model (BatchNorm; about 10-20 ms a gradient of 32)
    return model.make()


MODELS = {"mlp": (make_mlp, (784,)), "resnet": (make_resnet, (1, 28, 28))}


def data(shape, n=4096, classes=10):
    """Random inputs labelled by a random linear teacher (learnable, so runs train)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn((n,) + shape, generator=g)
    teacher = torch.randn(x[0].numel(), classes, generator=g)
    return x, (x.reshape(n, -1) @ teacher).argmax(1)


class Clock:
    """Wall and process CPU time of a block (CPU time: all the process's threads; it shows
    the work when other jobs share the cores, wall time is what a researcher waits)."""

    def __enter__(self):
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.w, time.process_time() - self.c


def load(params, flat):
    with torch.no_grad():
        o = 0
        for p in params:
            k = p.numel()
            p.copy_(flat[o:o + k].view_as(p))
            o += k


def bare(make, X, Y, G, batch):
    """G gradients: load the flat vector, forward, backward, read the flat gradient."""
    torch.manual_seed(1)
    m = make()
    m.train()
    params = list(m.parameters())
    w = nn.utils.parameters_to_vector(params).detach().clone()
    g = torch.zeros_like(w)
    rng = np.random.default_rng(1)
    with Clock() as c:
        for _ in range(G):
            bare_step(m, params, w, g, X, Y, rng, batch)
    return c


def bare_step(m, params, w, g, X, Y, rng, batch):
    """One gradient as asgdsim's job does it (its parameters, its minibatch)."""
    load(params, w)
    ids = torch.from_numpy(rng.integers(0, len(X), batch))
    for p in params:
        p.grad = None
    F.cross_entropy(m(X[ids]), Y[ids]).backward()
    with torch.no_grad():
        o = 0
        for p in params:
            k = p.numel()
            g[o:o + k] = p.grad.reshape(-1)
            o += k


def plain(make, X, Y, G, batch, workers, lr=0.01, mean=0.05):
    """The hand-written async simulation: heap of (arrival, worker), stale copies."""
    torch.manual_seed(1)
    m = make()
    m.train()
    params = list(m.parameters())
    master = [p.detach().clone() for p in params]
    rnd = random.Random(1)
    stale = {}
    heap = []
    for k in range(workers):
        stale[k] = [t.clone() for t in master]
        heapq.heappush(heap, (rnd.expovariate(1 / mean), k))
    with Clock() as c:
        for _ in range(G):
            plain_step(m, params, master, stale, heap, rnd, X, Y, batch, lr, mean)
    return c


def plain_step(m, params, master, stale, heap, rnd, X, Y, batch, lr, mean):
    """The earliest arrival: its gradient on its stale copy, an SGD step, a fresh copy."""
    now, k = heapq.heappop(heap)
    with torch.no_grad():
        for p, s in zip(params, stale[k]):
            p.copy_(s)
    ids = torch.tensor([rnd.randrange(len(X)) for _ in range(batch)])
    for p in params:
        p.grad = None
    F.cross_entropy(m(X[ids]), Y[ids]).backward()
    with torch.no_grad():
        for t, p in zip(master, params):
            t.add_(p.grad, alpha=-lr)
        stale[k] = [t.clone() for t in master]
    heapq.heappush(heap, (now + rnd.expovariate(1 / mean), k))


class GradTimer:
    """Wall time spent inside the package's gradient jobs (asgdsim._torch.Job.grad: the
    user's forward and backward with the parameter load and gradient copy around them), to
    tell the simulator's own time from the model's in one run, whatever the machine's
    speed does meanwhile. A diagnostic on a private name: absent if the package renames it."""

    def __init__(self):
        self.seconds, self.calls = 0.0, 0
        try:
            from asgdsim import _torch
            job = _torch.Job
            inner = job.grad
        except (ImportError, AttributeError):
            self.ok = False
            return
        self.ok = True
        timer = self

        def grad(*args, **kwargs):
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                timer.seconds += time.perf_counter() - t
                timer.calls += 1

        job.grad = grad


GRAD_TIMER = None


def sim(make, X, Y, G, batch, workers, out):
    n_test = 256
    config = {
        "name": "bench_torch", "seed": 1,
        "model": {"type": "torch", "threads": 1, "bn_samples": 256},
        "data": {"type": "torch"},
        "train": {"batch_size": batch, "lr": 0.01},
        "stop": {"gradients": G},
        "eval": {"every": 1e12, "unit": "updates", "train_samples": n_test, "test_samples": n_test},
        "cluster": {"workers": workers, "compute": {"dist": "exponential", "mean": 0.05 / batch}},
        "engines": [{"type": "async"}],
    }
    GRAD_TIMER.seconds, GRAD_TIMER.calls = 0.0, 0
    with Clock() as c:
        res = asgdsim.run(config, out=out, model=make, data=(X, Y), test_data=(X[:n_test], Y[:n_test]),
                          threads=1, rerun=True, supersede=True, quiet=True)
    s = res.summaries().iloc[0]
    # stalled: the train loss did not fall by 1 % (a short run); the gradients were computed
    if s["status"] not in ("completed", "stalled") or int(s["gradients"]) != G:
        raise SystemExit(f"bench_torch: the asgdsim run ended {s['status']} after {s['gradients']} gradients")
    c.in_grad, c.grad_calls = GRAD_TIMER.seconds, GRAD_TIMER.calls
    return c


def commit():
    try:
        c = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
        d = subprocess.run(["git", "-C", REPO, "status", "--porcelain"], capture_output=True, text=True).stdout
        return c.strip() + ("+dirty" if d.strip() else "")
    except OSError:
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="mlp")
    ap.add_argument("--gradients", type=int, default=1000)
    ap.add_argument("--alternations", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--figure", help="draw the ratios per alternation into this PNG")
    ap.add_argument("--plot", nargs="+", metavar="JSON", help="measure nothing: draw --figure from these --json files")
    a = ap.parse_args()
    if a.plot:
        results = []
        for f in a.plot:
            with open(f) as fh:
                results.append(json.load(fh))
        figure(results, a.figure or "bench_torch.png")
        return 0
    torch.set_num_threads(1)
    global GRAD_TIMER
    GRAD_TIMER = GradTimer()
    make, shape = MODELS[a.model]
    X, Y = data(shape)
    out = tempfile.mkdtemp(prefix="bench_torch_")
    ways = {"bare": lambda G: bare(make, X, Y, G, a.batch),
            "sim": lambda G: sim(make, X, Y, G, a.batch, a.workers, out),
            "plain": lambda G: plain(make, X, Y, G, a.batch, a.workers)}
    # Warm-up (allocator, first calls), not measured: a tenth of the gradients each.
    for f in ways.values():
        f(max(a.workers, a.gradients // 10))
    torch.set_num_threads(1)
    order = ["bare", "sim", "plain"]
    rows = []
    G = a.gradients
    for i in range(a.alternations):
        c = {}
        for name in order[i % 3:] + order[: i % 3]:
            c[name] = ways[name](G)
            torch.set_num_threads(1)
        r = {"alternation": i + 1}
        for k in order:
            r[k + "_per_s"] = G / c[k].wall
            r[k + "_per_cpu_s"] = G / c[k].cpu
        if GRAD_TIMER.ok:  # the share of the sim's wall time inside gradient jobs (all calls, and counted ones)
            r["sim_grad_calls"] = c["sim"].grad_calls
            r["sim_in_grad_share"] = c["sim"].in_grad / c["sim"].wall
            r["sim_counted_grad_share"] = r["sim_in_grad_share"] * G / c["sim"].grad_calls
        for k in ("sim", "plain"):
            r[k + "_over_bare"] = r[k + "_per_s"] / r["bare_per_s"]
            r[k + "_over_bare_cpu"] = r[k + "_per_cpu_s"] / r["bare_per_cpu_s"]
        rows.append(r)
        print(f"alternation {i + 1}: gradients per wall s: bare {r['bare_per_s']:.1f}, sim {r['sim_per_s']:.1f}, "
              f"plain {r['plain_per_s']:.1f}; sim/bare {r['sim_over_bare']:.3f}, plain/bare "
              f"{r['plain_over_bare']:.3f} (CPU time: {r['sim_over_bare_cpu']:.3f}, {r['plain_over_bare_cpu']:.3f})"
              + (f"; sim: {r['sim_in_grad_share']:.3f} of its wall time in {r['sim_grad_calls']} gradient jobs, "
                 f"{r['sim_counted_grad_share']:.3f} in the {G} counted" if "sim_in_grad_share" in r else ""),
              flush=True)
    m = sum(p.numel() for p in make().parameters())
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit(),
        "host": os.uname().nodename, "torch": torch.__version__, "model": a.model, "parameters": m,
        "batch": a.batch, "workers": a.workers, "gradients": a.gradients, "alternations": a.alternations,
        "ms_per_gradient_bare_median": 1000 / statistics.median(r["bare_per_s"] for r in rows),
        "cpu_ms_per_gradient_bare_median": 1000 / statistics.median(r["bare_per_cpu_s"] for r in rows),
        "sim_over_bare_median": statistics.median(r["sim_over_bare"] for r in rows),
        "plain_over_bare_median": statistics.median(r["plain_over_bare"] for r in rows),
        "sim_over_bare_cpu_median": statistics.median(r["sim_over_bare_cpu"] for r in rows),
        "plain_over_bare_cpu_median": statistics.median(r["plain_over_bare_cpu"] for r in rows),
        "sim_in_grad_share_median": statistics.median(r["sim_in_grad_share"] for r in rows)
        if "sim_in_grad_share" in rows[0] else None,
        "sim_counted_grad_share_median": statistics.median(r["sim_counted_grad_share"] for r in rows)
        if "sim_counted_grad_share" in rows[0] else None,
        "load_average": os.getloadavg(),
        "rows": rows,
    }
    print(f"{a.model} ({m} parameters, batch {a.batch}, {a.gradients} gradients, {a.workers} workers, "
          f"{result['ms_per_gradient_bare_median']:.2f} wall ms, {result['cpu_ms_per_gradient_bare_median']:.2f} "
          f"CPU ms a bare gradient): median over {a.alternations} "
          f"alternations: sim/bare {result['sim_over_bare_median']:.3f}, "
          f"plain/bare {result['plain_over_bare_median']:.3f} (CPU time: {result['sim_over_bare_cpu_median']:.3f}, "
          f"{result['plain_over_bare_cpu_median']:.3f}); sim wall time in gradient jobs: "
          f"{result['sim_in_grad_share_median']}, in the counted ones: {result['sim_counted_grad_share_median']}"
          f"   [{result['date']}, commit {result['commit']}, "
          f"torch {torch.__version__}]")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    if a.figure:
        figure([result], a.figure)
    return 0


def figure(results, path):
    """One panel per result (model): sim/bare and plain/bare per alternation, wall time
    (solid) and CPU time (dotted), the sim's share of its wall time in its counted
    gradient jobs (green), the 0.9 target dotted grey (points above 2.5 are off the top)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(results), figsize=(4.6 * len(results), 3.8), squeeze=False)
    keys = ("sim_over_bare", "plain_over_bare", "sim_over_bare_cpu", "plain_over_bare_cpu")
    top = min(2.5, max(1.2, max(r[k] for res in results for r in res["rows"] for k in keys) * 1.05))
    for ax, res in zip(axes[0], results):
        rows = res["rows"]
        x = [r["alternation"] for r in rows]
        for key, label, colour in (("sim", f"asgdsim async {res['workers']} workers", "C0"),
                                   ("plain", "plain PyTorch simulation", "C1")):
            ax.plot(x, [r[key + "_over_bare"] for r in rows], "o-", color=colour,
                    label=f"{label} (median {res[key + '_over_bare_median']:.2f})")
            ax.plot(x, [r[key + "_over_bare_cpu"] for r in rows], "x:", color=colour,
                    label=f"  CPU time (median {res[key + '_over_bare_cpu_median']:.2f})")
        if "sim_counted_grad_share" in rows[0]:
            ax.plot(x, [r["sim_counted_grad_share"] for r in rows], "^-", color="C2", ms=4,
                    label=f"asgdsim: share of its wall time in the counted\n  gradient jobs "
                          f"(median {res['sim_counted_grad_share_median']:.3f})")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axhline(0.9, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("alternation")
        ax.set_ylim(0, top)
        ax.set_title(f"{res['model']}: {res['parameters']:,} parameters, {res['gradients']} gradients,\n"
                     f"{res['cpu_ms_per_gradient_bare_median']:.1f} CPU ms a gradient of {res['batch']}", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel("throughput / bare PyTorch loop")
    stamp = "; ".join(sorted({f"{r['date']}, commit {r['commit']}, torch {r['torch']}" for r in results}))
    fig.text(0.01, 0.01, stamp + "; 1 torch thread; solid: wall time, dotted: CPU time", fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
