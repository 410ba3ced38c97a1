#!/usr/bin/python3
"""Measures, on this machine, the costs the reference pays that asgdsim's time model
charges as configuration: the transport's per-message cost (alpha latency + bytes / beta),
what a parameter server's round trip costs beyond that, and the server's per-update cost
for the model. Writes them as JSON with the machine, torch version, commit and date, and
the asgdsim config keys they set.

    /usr/bin/python3 validation/calibrate.py --out calibration.json [--features 784 --hidden 64]
        [--compute exponential:0.03]

Transport: two processes over the reference's own transport (validation/transport.py:
one gloo message per send, received by a thread with a receive always posted). Rank 0
sends a message of B bytes, rank 1 answers with one of the same size; each direction's
one-way time is t_recv - t_send on the shared monotonic clock (the sender's stamp before
serialization to the receiver's stamp with the whole message in memory). For B from 1 KiB
to 4 MiB (powers of 2), the median one-way time per size is fit by least squares to
t = alpha + B / beta, weighted by 1/t (every size's relative error counts alike), per
direction and over both; the fit's residuals are reported, and the unweighted fit beside
it. beta sets cluster.network.bandwidth.

Cycle: a ping-pong keeps both processes hot, which a run does not: there a worker's push
reaches a server that has been idle for about a step, and goes through the server's
receiver thread and main loop before the update and the reply. So the two processes then
run a one-worker async parameter server in a run's rhythm (cycle(): the worker waits out
steps drawn from --compute, which should be the run's), timing per cycle the push, the
hand-off to the server's loop, the apply (ServerOptimizer.step, what updates.csv calls
apply_s: it sets cluster.server.update_seconds) and the reply. asgdsim charges a cycle
two messages (a pull and a push), one update and one server send, so
cluster.network.latency is half the median cost of the cycle's two messages less the
send and their bytes / beta. Beside it, the server's work in a hot loop (data in cache):
the step, combining one more contribution, copying the parameters for a reply.

Bursts: before the cycles, after idle pauses, the server sends bursts of messages back to
back, alternately to two listening processes (a third rank takes part in this only), as
it sends cancel notices or a sync iteration's parameters to its workers (bursts()); a send
returns once the message is handed over and the server does nothing else meanwhile, so a
header-only burst's gap is its cost per message beyond the wire (LogP's o): it sets
cluster.server.send_seconds.
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
from validation.workload import MLP, ComputeModel, InputError  # noqa: E402

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


def ping_pong(rank, sizes, reps, warmup, folder, parameters, update_steps, compute):
    """Rank 0 sends each size warmup + reps times, rank 1 answers each with the same size;
    each rank writes the one-way times of the timed messages it received (seconds, per
    payload size) to folder/oneway<rank>.json. Then the two run update_steps cycles of a
    one-worker async parameter server of `parameters` floats the way a run does (cycle()),
    written to folder/cycles<rank>.json."""
    clock = tp.Clock(0)
    biggest = max(max(sizes) // 4, parameters)
    sender = tp.Sender(rank, clock, biggest)
    receiver = tp.Receiver(rank, clock, src=0 if rank else 1, last=lambda m: m.kind == tp.STOP,
                           max_elements=biggest)
    receiver.start()
    payloads = {b: torch.randn(b // 4) for b in sizes}
    tp.agree_on_start(rank, clock)
    if rank == 0:  # as the reference's server: a receive posted from every worker, rank 2's too
        from_2 = tp.Receiver(0, clock, src=2, last=lambda m: m.kind == tp.STOP, max_elements=0)
        from_2.start()
    if rank == 2:  # a second listener for the bursts only
        bursts(rank, clock, sender, receiver, parameters, warmup, reps, compute)
        if receiver.get(60).kind != tp.STOP:
            raise RuntimeError("rank 2: expected STOP after the bursts")
        sender.send(0, tp.STOP)
        return
    times = {b: [] for b in sizes}

    def took(m):
        if m.step >= warmup:
            times[4 * m.payload.numel()].append((m.t_recv - m.t_send) / 1e9)

    if rank == 1:
        while True:
            m = receiver.get(60)
            if m.kind == tp.CANCEL:  # CANCEL stands for "the cycles begin"
                break
            took(m)
            sender.send(0, tp.PUSH_GRAD, step=m.step, payload=payloads[4 * m.payload.numel()])
    else:
        for i in range(warmup + reps):  # the sizes interleaved: drifting load hits all alike
            for b in sizes:
                sender.send(1, tp.PARAMS, step=i, payload=payloads[b])
                took(receiver.get(60))
        sender.send(1, tp.CANCEL)
    gaps = bursts(rank, clock, sender, receiver, parameters, warmup, reps, compute)
    if rank == 0:
        sender.send(2, tp.STOP)
        if from_2.get(60).kind != tp.STOP:
            raise RuntimeError("rank 0: expected STOP from rank 2 after the bursts")
    rows = cycle(rank, clock, sender, receiver, parameters, warmup + update_steps + 1, compute)
    with open(os.path.join(folder, f"cycles{rank}.json"), "w") as f:
        json.dump(rows, f)
    if rank == 0:
        with open(os.path.join(folder, "bursts.json"), "w") as f:
            json.dump(gaps, f)
    with open(os.path.join(folder, f"oneway{rank}.json"), "w") as f:
        json.dump({str(b): t for b, t in times.items()}, f)


BURST = 8  # messages a burst sends back to back, alternately to the two listening ranks


def bursts(rank, clock, sender, receiver, parameters, warmup, reps, compute):
    """The server's cost per message it sends, beyond the wire: after an idle pause drawn
    from `compute`, rank 0 sends BURST messages back to back, alternately to ranks 1 and 2,
    whose receiver threads have receives posted, as a server sends cancel notices or a
    sync iteration's parameters to its workers. A send returns once gloo has handed the
    message over and the server can do nothing else meanwhile, so the gap between two
    sends' starts is what one send keeps it busy. Header-only bursts (cancel notices) and
    parameter-sized ones alternate. Rank 0 returns the gaps in seconds:
    {"header": [...], "params": [...]}; ranks 1 and 2 return None once they have theirs."""
    kinds = ("header", "params")
    if rank != 0:
        for _ in range((warmup + reps) * len(kinds) * BURST // 2):
            receiver.get(60)
        return None
    payload = torch.randn(parameters)
    gaps = {k: [] for k in kinds}
    for i in range(warmup + reps):
        for kind in kinds:
            deadline = clock.now() + round(compute.seconds(0, i) * 1e9)
            while clock.now() < deadline:
                time.sleep(max(0.0, (deadline - clock.now()) / 1e9))
            starts = [sender.send(1 + k % 2, tp.CANCEL, job=i, payload=payload if kind == "params" else None)
                      for k in range(BURST)]
            if i >= warmup:
                gaps[kind] += [(b - a) / 1e9 for a, b in zip(starts, starts[1:])]
    return gaps


def cycle(rank, clock, sender, receiver, parameters, steps, compute):
    """`steps` rounds of async SGD between a server (rank 0) and one worker (rank 1),
    each side written as the reference's (validation/server.py, worker.py): the worker
    loads the parameters it receives, waits out a step drawn from `compute` (a
    workload.ComputeModel: between messages the server is idle as in a run, and an idle
    receiver pays to wake up) and pushes a gradient; the server's main loop takes the push
    from its receiver thread's queue, applies it (ServerOptimizer.step), copies the
    parameters for the reply and sends them. Rank 0's rows: [t_send of the push, t_recv,
    t_handled, t_applied, t_send of the reply]; rank 1's: [t_recv of the reply]."""
    rows = []
    if rank == 0:
        opt = ServerOptimizer(torch.randn(parameters), 1e-3)
        sender.send(1, tp.PARAMS, step=0, payload=opt.params.clone())
        while len(rows) < steps:
            m = receiver.poll(0.05)  # as Server.run waits for a push
            if m is None:
                continue
            t_handled = clock.now()
            opt.step(combine([(0, m.step, m.payload)], mean=True))
            t_applied = clock.now()
            last = len(rows) + 1 == steps
            t_reply = sender.send(1, tp.STOP if last else tp.PARAMS, step=m.step + 1,
                                  payload=None if last else opt.params.clone())
            rows.append([m.t_send, m.t_recv, t_handled, t_applied, t_reply])
    else:
        x = torch.zeros(parameters)
        gradient = torch.randn(parameters)
        while True:
            m = receiver.get(60)
            rows.append([m.t_recv])
            if m.kind == tp.STOP:
                break
            x.copy_(m.payload)
            deadline = m.t_recv + round(compute.seconds(0, m.step) * 1e9)
            while clock.now() < deadline:  # as Worker.wait_out waits
                receiver.poll((deadline - clock.now()) / 1e9)
            sender.send(0, tp.PUSH_GRAD, step=m.step, payload=gradient)
    return rows


def cycle_costs(server_rows, worker_rows, warmup):
    """The per-message costs of the cycles, in seconds (quantiles): push (worker's send to
    the server's receiver thread having it), handoff (to the server's main loop), apply,
    reply (the parameters' copy and the send to the worker's receiver having them), and
    overhead: everything of a cycle but the worker's step, from the push's send to the
    next parameters' arrival."""
    parts = {"push": [], "handoff": [], "apply": [], "reply": [], "overhead": [], "messages": []}
    # (the last cycle's reply is the STOP, no parameters: left out)
    for (t_send, t_recv, t_handled, t_applied, t_reply), (t_back,) in list(
            zip(server_rows, worker_rows[1:]))[warmup:-1]:
        parts["push"].append((t_recv - t_send) / 1e9)
        parts["handoff"].append((t_handled - t_recv) / 1e9)
        parts["apply"].append((t_applied - t_handled) / 1e9)
        parts["reply"].append((t_back - t_applied) / 1e9)
        parts["overhead"].append((t_back - t_send) / 1e9)
        parts["messages"].append((t_back - t_send - (t_applied - t_handled)) / 1e9)
    return {k: quantiles(v) for k, v in parts.items()}


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
    p.add_argument("--update-steps", type=int, default=200, help="timed cycles of the one-worker async server")
    p.add_argument("--compute", default="exponential:0.03",
                   help="the worker's step durations in the cycles, as reference.py's --compute (use the run's)")
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
    try:
        compute = ComputeModel(args.compute, "", 1, 1)
    except InputError as e:
        return refuse(str(e))
    model = MLP(args.features, hidden)
    with tempfile.TemporaryDirectory(prefix="asgd-calibrate-") as folder:
        os.makedirs(os.path.join(folder, "logs"))
        status, error, _, wall = launch(
            3, lambda rank: ping_pong(rank, sizes, args.reps, args.warmup, folder, model.parameters,
                                      args.update_steps, compute),
            os.path.join(folder, "logs"), os.path.join(folder, "store"), args.timeout, 600.0)
        if status != "completed":
            print(f"calibrate.py: {status}: {error}", file=sys.stderr)
            return 130 if status == "interrupted" else 1
        oneway, cycles = [], []
        for rank in (0, 1):
            with open(os.path.join(folder, f"oneway{rank}.json")) as f:
                oneway.append({int(k): v for k, v in json.load(f).items()})
            with open(os.path.join(folder, f"cycles{rank}.json")) as f:
                cycles.append(json.load(f))
        with open(os.path.join(folder, "bursts.json")) as f:
            burst_gaps = json.load(f)
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
    costs = cycle_costs(cycles[0], cycles[1], args.warmup)
    server = {"model": model.describe(), "parameters": model.parameters,
              "apply": costs["apply"],
              "apply_note": "the optimizer step (updates.csv's apply_s) on a gradient just received "
                            "from another process, in a run's rhythm (cycle)",
              "hot_loop": hot}
    message = tp.HEADER_BYTES + 4 * model.parameters
    # asgdsim charges a cycle 2 x (latency + message / bandwidth) + update_seconds (a pull
    # and a push): latency is what the two messages of a cycle cost beyond their bytes,
    # split evenly between them (the sum is what a round trip, and so every interval,
    # pays; the split between pull and push moves no interval).
    beta = both["beta_bytes_per_s"]
    # The server's per-message cost beyond the wire (LogP's o, cluster.server.send_seconds):
    # a header-only burst's gap. A parameter-sized burst's gap less message / beta (what
    # asgdsim's server link already charges each of them) is reported beside it.
    send = {"what": f"bursts of {BURST} sends back to back, alternately to two listening ranks, after an idle "
                    "pause (calibrate.bursts): the gap between two sends' starts",
            "header": quantiles(burst_gaps["header"]), "params": quantiles(burst_gaps["params"])}
    send["params_beyond_wire_median_s"] = send["params"]["median"] - (message / beta if beta else 0.0)
    for kind in ("header", "params"):  # the k-th gap of every burst: does a send wake something up?
        send[kind]["median_by_position_s"] = [statistics.median(burst_gaps[kind][k::BURST - 1])
                                              for k in range(BURST - 1)]
    o = send["header"]["median"]
    # the cycle's reply pays o on top of its latency and bytes
    latency = (costs["messages"]["median"] - o) / 2 - (message / beta if beta else 0.0)
    cycles_out = {"what": "a one-worker async parameter server in a run's rhythm: the worker waits out "
                          f"steps drawn from {args.compute}, the server's receiver thread hands each push to "
                          "its main loop, which applies it and sends the parameters back (calibrate.cycle)",
                  "compute": args.compute, "cycles": costs["overhead"]["n"], **costs}
    result = {"format": FORMAT, **machine(), "loadavg": os.getloadavg(),
              "command": "validation/calibrate.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "transport": transport, "cycle": cycles_out, "server": server, "send": send,
              "model_message": {"bytes": message,
                                "predicted_s": both["alpha_s"] + message / both["beta_bytes_per_s"]
                                if both["beta_bytes_per_s"] else None},
              "asgdsim_config": {"cluster.network.latency": max(latency, 0.0),
                                 "cluster.network.bandwidth": beta or 0.0,
                                 "cluster.server.update_seconds": server["apply"]["median"],
                                 "cluster.server.send_seconds": o},
              "asgdsim_config_note": "bandwidth: the ping-pong fit's beta (0, asgdsim's unlimited, if its slope "
                                     "was not positive); latency: half the median cost of a cycle's two messages "
                                     "(cycle.messages: push, hand-off, reply) less the reply's send_seconds and "
                                     "message bytes / bandwidth, 0 if less; update_seconds: the cycle's median apply; "
                                     "send_seconds: the median gap of a header-only burst (send.header)"}
    write_atomic(args.out, json.dumps(result, indent=1) + "\n")
    print(f"alpha {both['alpha_s'] * 1e6:.1f} us, beta "
          + (f"{beta / 1e9:.3f} GB/s" if beta else "not positive (no slope)")
          + f" (R^2 {both['r2']:.4f}); server update {server['apply']['median'] * 1e6:.1f} us "
          f"(IQR {server['apply']['iqr'] * 1e6:.1f} us) for {model.parameters} parameters; a cycle's two "
          f"messages {costs['messages']['median'] * 1e6:.0f} us: latency {max(latency, 0.0) * 1e6:.1f} us; "
          f"server send {o * 1e6:.1f} us a message (a parameter burst's beyond the wire "
          f"{send['params_beyond_wire_median_s'] * 1e6:.1f} us); "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
