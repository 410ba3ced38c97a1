#!/usr/bin/python3
"""Measures, on this machine, the two costs the reference pays that asgdsim's time model
charges as configuration: the transport's per-message cost (alpha latency + bytes / beta)
and the server's per-update cost for the model. Writes them as JSON with the machine,
torch version, commit and date, and the asgdsim config keys they set.

    /usr/bin/python3 validation/calibrate.py --out calibration.json [--features 784 --hidden 64]

Transport: two processes over the reference's own transport (validation/transport.py:
one gloo message per send, received by a thread with a receive always posted). Rank 0
sends a message of B bytes, rank 1 answers with one of the same size; each direction's
one-way time is t_recv - t_send on the shared monotonic clock (the sender's stamp before
serialization to the receiver's stamp with the whole message in memory). For B from 1 KiB to 4 MiB (powers of 2), the median one-way time per size is fit
by least squares to t = alpha + B / beta, weighted by 1/t (every size's relative error
counts alike), per direction and over both; the fit's residuals are reported, and the
unweighted fit beside it. Server: the reference server's optimizer step
(update_rules.ServerOptimizer.step: PyTorch SGD on the flat parameters) on the model's
parameter count, applied to gradients just received from the other process as a
one-worker async server does (median and IQR): what updates.csv calls apply_s. Beside
it, the same work in a hot loop (data in cache): the step, combining one more
contribution, copying the parameters for a reply.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from validation import transport as tp  # noqa: E402
from validation.launcher import launch, machine, write_atomic  # noqa: E402
from validation.update_rules import ServerOptimizer, combine  # noqa: E402
from validation.workload import MLP  # noqa: E402

FORMAT = "asgdsim-validation-calibration/1"


def quantiles(xs):
    q = np.percentile(np.asarray(xs, dtype=np.float64), [25, 50, 75])
    return {"median": float(q[1]), "p25": float(q[0]), "p75": float(q[2]),
            "iqr": float(q[2] - q[0]), "n": len(xs)}


def fit_alpha_beta(sizes, seconds, relative=False):
    """Least squares t = alpha + bytes / beta over (sizes, seconds), with the residuals;
    relative: each point weighted by 1/t (minimizes relative, not absolute, errors)."""
    a = np.stack([np.ones(len(sizes)), np.asarray(sizes, dtype=np.float64)], axis=1)
    t = np.asarray(seconds, dtype=np.float64)
    w = 1.0 / t if relative else np.ones_like(t)
    (alpha, inv_beta), *_ = np.linalg.lstsq(a * w[:, None], t * w, rcond=None)
    fitted = a @ np.array([alpha, inv_beta])
    residuals = t - fitted
    ss_tot = float(((t - t.mean()) ** 2).sum())
    return {"alpha_s": float(alpha), "beta_bytes_per_s": float(1.0 / inv_beta) if inv_beta > 0 else None,
            "r2": 1.0 - float((residuals ** 2).sum()) / ss_tot if ss_tot > 0 else None,
            "max_abs_residual_s": float(np.abs(residuals).max()),
            "points": [{"bytes": int(b), "median_s": float(y), "fit_s": float(f), "residual_s": float(r),
                        "relative_residual": float(r / y) if y else None}
                       for b, y, f, r in zip(sizes, t, fitted, residuals)]}


def ping_pong(rank, sizes, reps, warmup, folder, parameters, update_steps):
    """Rank 0 sends each size warmup + reps times, rank 1 answers each with the same size;
    each rank writes the one-way times of the timed messages it received (seconds, per
    payload size) to folder/oneway<rank>.json. Then rank 0 acts as a one-worker async
    server for update_steps updates of `parameters` floats (send the parameters, receive
    a gradient, step) and writes its optimizer steps' durations to folder/updates.json:
    the update cost on data just received from another process, as in a run."""
    clock = tp.Clock(0)
    biggest = max(max(sizes) // 4, parameters)
    sender = tp.Sender(rank, clock, biggest)
    receiver = tp.Receiver(rank, clock, src=1 - rank, last=lambda m: m.kind == tp.STOP,
                           max_elements=biggest)
    receiver.start()
    payloads = {b: torch.randn(b // 4) for b in sizes}
    tp.agree_on_start(rank, clock)
    times = {b: [] for b in sizes}

    def took(m):
        if m.step >= warmup:
            times[4 * m.payload.numel()].append((m.t_recv - m.t_send) / 1e9)

    if rank == 1:
        gradient = torch.randn(parameters)
        while True:
            m = receiver.get(60)
            if m.kind == tp.STOP:
                break
            if m.kind == tp.PARAMS:
                took(m)
                sender.send(0, tp.PUSH_GRAD, step=m.step, payload=payloads[4 * m.payload.numel()])
            else:  # CANCEL stands for "send a gradient" in the update phase
                sender.send(0, tp.PUSH_GRAD, payload=gradient)
    else:
        for i in range(warmup + reps):  # the sizes interleaved: drifting load hits all alike
            for b in sizes:
                sender.send(1, tp.PARAMS, step=i, payload=payloads[b])
                took(receiver.get(60))
        opt = ServerOptimizer(torch.randn(parameters), 1e-3)
        applies = []
        for i in range(warmup + update_steps):
            sender.send(1, tp.CANCEL)
            g = receiver.get(60).payload
            t0 = time.perf_counter_ns()
            opt.step(combine([(0, 0, g)], mean=True))
            t1 = time.perf_counter_ns()
            if i >= warmup:
                applies.append((t1 - t0) / 1e9)
        sender.send(1, tp.STOP)
        with open(os.path.join(folder, "updates.json"), "w") as f:
            json.dump(applies, f)
    with open(os.path.join(folder, f"oneway{rank}.json"), "w") as f:
        json.dump({str(b): t for b, t in times.items()}, f)


def server_costs(parameters, steps):
    """The reference server's per-update work on `parameters` floats in a hot loop (data
    in cache), in seconds per call: the optimizer step, combining one more contribution,
    and the copy of the parameters a reply carries."""
    torch.set_num_threads(1)
    g = torch.randn(parameters)
    opt = ServerOptimizer(torch.randn(parameters), 1e-3)
    costs = {"apply": [], "combine_per_contribution": [], "params_copy": []}
    for i in range(steps + 20):  # 20 untimed first
        t0 = time.perf_counter_ns()
        opt.step(g)
        t1 = time.perf_counter_ns()
        combine([(0, 0, g), (1, 0, g)], mean=True)
        t2 = time.perf_counter_ns()
        combine([(0, 0, g)], mean=True)
        t3 = time.perf_counter_ns()
        opt.params.clone()
        t4 = time.perf_counter_ns()
        if i >= 20:
            costs["apply"].append((t1 - t0) / 1e9)
            costs["combine_per_contribution"].append(((t2 - t1) - (t3 - t2)) / 1e9)
            costs["params_copy"].append((t4 - t3) / 1e9)
    return {k: quantiles(v) for k, v in costs.items()}


def main(argv=None):
    p = argparse.ArgumentParser(prog="calibrate.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file to write (must not exist)")
    p.add_argument("--features", type=int, default=784, help="the model's input size (784: Fashion-MNIST)")
    p.add_argument("--hidden", default="64", help="hidden widths, as reference.py's --hidden")
    p.add_argument("--reps", type=int, default=40, help="timed messages per size and direction")
    p.add_argument("--warmup", type=int, default=5, help="untimed messages per size first")
    p.add_argument("--update-steps", type=int, default=500, help="timed server updates (each way)")
    p.add_argument("--min-bytes", type=int, default=1024, help="smallest payload (a power of 2)")
    p.add_argument("--max-bytes", type=int, default=4 * 1024 * 1024, help="largest payload")
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args(argv)

    def refuse(message):
        print(f"calibrate.py: error: {message}", file=sys.stderr)
        return 2

    if os.path.exists(args.out):
        return refuse(f"--out {args.out}: exists (nothing is overwritten)")
    try:
        hidden = [int(h) for h in args.hidden.split(",") if h.strip()]
    except ValueError:
        return refuse(f"--hidden {args.hidden!r}: comma-separated integers")
    if args.reps < 3 or args.warmup < 0 or args.update_steps < 10:
        return refuse("--reps >= 3, --warmup >= 0, --update-steps >= 10")
    if not 4 <= args.min_bytes <= args.max_bytes or args.min_bytes & (args.min_bytes - 1):
        return refuse("--min-bytes: a power of 2, >= 4 and <= --max-bytes")
    sizes = []
    b = args.min_bytes
    while b <= args.max_bytes:
        sizes.append(b)
        b *= 2
    model = MLP(args.features, hidden)
    with tempfile.TemporaryDirectory(prefix="asgd-calibrate-") as folder:
        os.makedirs(os.path.join(folder, "logs"))
        status, error, _, wall = launch(
            2, lambda rank: ping_pong(rank, sizes, args.reps, args.warmup, folder, model.parameters,
                                      args.update_steps),
            os.path.join(folder, "logs"), os.path.join(folder, "store"), args.timeout, 600.0)
        if status != "completed":
            print(f"calibrate.py: {status}: {error}", file=sys.stderr)
            return 130 if status == "interrupted" else 1
        oneway = []
        for rank in (0, 1):
            with open(os.path.join(folder, f"oneway{rank}.json")) as f:
                oneway.append({int(k): v for k, v in json.load(f).items()})
        with open(os.path.join(folder, "updates.json")) as f:
            applies = json.load(f)
    directions = {"server_to_worker": oneway[1], "worker_to_server": oneway[0]}
    wire = [b + tp.HEADER_BYTES for b in sizes]  # bytes of the whole message
    transport = {"what": "validation/transport.py: one gloo send per message over loopback, "
                         "a receiver thread per (sender, receiver) pair",
                 "sizes_bytes": wire, "reps": args.reps, "wall_s": round(wall, 3), "directions": {}}
    medians_all = []
    for name, times in directions.items():
        medians = [statistics.median(times[b]) for b in sizes]
        medians_all.append(medians)
        fit = fit_alpha_beta(wire, medians, relative=True)
        for point, b in zip(fit["points"], sizes):
            q = quantiles(times[b])
            point.update(p25_s=q["p25"], p75_s=q["p75"])
        transport["directions"][name] = fit
    # The fit that sets the config weighs every size's relative error alike (weights 1/t):
    # unweighted, the few largest messages decide it, and one slow 4 MiB point on a busy
    # machine can turn alpha negative. Both are reported.
    both = fit_alpha_beta(wire + wire, medians_all[0] + medians_all[1], relative=True)
    plain = fit_alpha_beta(wire + wire, medians_all[0] + medians_all[1])
    transport.update(fit="least squares on the medians, weighted by 1/t (relative errors)",
                     alpha_s=both["alpha_s"], beta_bytes_per_s=both["beta_bytes_per_s"], r2=both["r2"],
                     unweighted_fit={"alpha_s": plain["alpha_s"], "beta_bytes_per_s": plain["beta_bytes_per_s"],
                                     "r2": plain["r2"]})
    hot = server_costs(model.parameters, args.update_steps)
    server = {"model": model.describe(), "parameters": model.parameters,
              "apply": quantiles(applies),
              "apply_note": "the optimizer step (updates.csv's apply_s) on a gradient just received "
                            "from another process, as the server does it",
              "hot_loop": hot}
    message = tp.HEADER_BYTES + 4 * model.parameters
    result = {"format": FORMAT, **machine(), "loadavg": os.getloadavg(),
              "command": "validation/calibrate.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "transport": transport, "server": server,
              "model_message": {"bytes": message,
                                "predicted_s": both["alpha_s"] + message / both["beta_bytes_per_s"]
                                if both["beta_bytes_per_s"] else None},
              "asgdsim_config": {"cluster.network.latency": max(both["alpha_s"], 0.0),
                                 "cluster.network.bandwidth": both["beta_bytes_per_s"] or 0.0,
                                 "cluster.server.update_seconds": server["apply"]["median"]},
              "asgdsim_config_note": "latency is the fit's alpha (0 if the fit gave less); bandwidth 0 "
                                     "(asgdsim: unlimited) if the fit's slope was not positive"}
    write_atomic(args.out, json.dumps(result, indent=1) + "\n")
    beta = both["beta_bytes_per_s"]
    print(f"alpha {both['alpha_s'] * 1e6:.1f} us, beta "
          + (f"{beta / 1e9:.3f} GB/s" if beta else "not positive (no slope)")
          + f" (R^2 {both['r2']:.4f}); server update {server['apply']['median'] * 1e6:.1f} us "
          f"(IQR {server['apply']['iqr'] * 1e6:.1f} us) for {model.parameters} parameters; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
