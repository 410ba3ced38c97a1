#!/usr/bin/python3
"""compare.py — asgdsim's virtual clock against a real system it did not write (issue 43).

For each engine, worker count and seed it runs the independent reference
(validation/reference.py: a parameter server and N worker processes on torch.distributed,
gloo over loopback, real gradients, seeded emulated step durations), then asgdsim on the
same model (an MLP 784-64-10), data (Fashion-MNIST), batch, learning rate and stop, with
every worker replaying the steps the reference's worker really took (its steps.csv as a
per-worker trace: cluster.compute dist "trace", docs/architecture.md "Traces") and the
network and server costs calibrated on this machine (validation/calibrate.py). Then it
measures how far the simulated timeline is from the real one:

  interval MAPE   per contribution: the time between a worker's consecutive
                  contributions reaching the server, applied or dropped (its round trip:
                  pull, compute, push, the server, any wait), sim against real for the
                  same (worker, step) whose previous contribution is the same step on both
                  sides; mean |sim - real| / real over every such contribution after each
                  worker's first (a step cancelled on one side only would make the
                  interval span two steps there and one on the other: other_previous
                  counts those left out)
  same round      the share of contributions both sides applied that were applied with
                  the same contributions (the same update's members) on both sides;
                  engines that group arrivals (k_async, sync_backup, k_batch_sync) decide
                  near-ties by arrival order, and once one tie goes the other way the
                  (worker, step) -> round map differs for the rest of the run
  round MAPE      interval MAPE over the intervals whose two ends' rounds both agree (the
                  wait before a step belongs to the previous contribution's round): the
                  clock's error where both sides took the same decisions
  quantile MAPE   interval MAPE between each worker's sorted intervals (the i-th shortest
                  against the i-th shortest): the distributions, whatever the pairing
  same fate       the share of contributions both sides received that both applied or
                  both dropped (drop engines decide near-ties by arrival order)
  update MAPE     the same for the time between consecutive updates of the model of record
                  (update u against update u)
  staleness TV    total variation distance of the staleness histograms of applied
                  contributions
  Kendall tau     of the arrival order at the server of the contributions both applied
  time to target  when the model of record's train loss first reaches the target,
                  interpolated between evaluations: the seeds' mean, sim and real, and
                  whether the sim's lies within the real seeds' range
  final loss      sim minus real, the seeds' mean

    /usr/bin/python3 validation/compare.py --out DIR [--engines async,sync,...]
        [--workers 2,4,8] [--seeds 1,2,3] [--updates 300] [--compute exponential:0.03]
        [--calibration FILE] [--doc docs/validation.md] [--figure FILE] [--check]
        [--device cpu|cuda[:N]]

--device is where the reference's workers compute their gradients. --doc rewrites that
device's table between the markers of that file (dated and commit-stamped; "validation
table" for the CPU, "validation table (cuda)" for a GPU; checked before any run),
--figure draws the real and simulated timelines of the first engine's first run, and
--check exits 1 when any error passes its target (docs/validation.md, "Targets"). The
runs are kept in DIR (real/, sim/); a run already there with the same options is reused
(--rerun runs it again). Exit codes: 0 done (and within the targets with --check), 1 an
error passed its target or a run failed, 2 invalid input.

What it is not: a second implementation of any engine (the reference is), nor a judge of
learning: losses come from different minibatch draws on each side, so they are compared
by the seeds' spread.
"""

import argparse
import bisect
import csv
import datetime
import json
import math
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"

# The cases: the reference's options and asgdsim's engine for each; K and b follow N.
# interval-MAPE targets (issue 43): 2 % for async, k_async and sync, 5 % for the rest.
TIGHT = {"async", "sync", "k_async", "k_async_batch"}


def case(name, workers):
    half = max(1, workers // 2)
    table = {
        "async": (["--engine", "async"], {"type": "async"}),
        "sync": (["--engine", "sync"], {"type": "sync"}),
        "sync_backup": (["--engine", "sync_backup", "--backups", "1", "--late", "drop"],
                        {"type": "sync_backup", "backups": 1, "late": "drop"}),
        "sync_backup_cancel": (["--engine", "sync_backup", "--backups", "1", "--late", "cancel"],
                               {"type": "sync_backup", "backups": 1, "late": "cancel"}),
        "k_batch_sync": (["--engine", "k_batch_sync", "--k", str(workers), "--late", "cancel"],
                         {"type": "k_batch_sync", "k": workers, "late": "cancel"}),
        "k_async": (["--engine", "k_async", "--k", str(half)], {"type": "k_async", "k": half}),
        "k_async_batch": (["--engine", "k_async", "--k", str(half), "--batch-async"],
                          {"type": "k_async", "k": half, "batch": True}),
        "ssp": (["--engine", "ssp", "--bound", "2"], {"type": "ssp", "bound": 2}),
        "local_sgd": (["--engine", "local_sgd", "--steps", "4"], {"type": "local_sgd", "steps": 4}),
        "easgd": (["--engine", "easgd", "--easgd-mode", "async", "--period", "4"],
                  {"type": "easgd", "mode": "async", "period": 4}),
    }
    if name not in table:
        raise InputError(f"--engines: unknown case '{name}' (known: {', '.join(CASES)})")
    return table[name]


CASES = ["async", "sync", "sync_backup", "sync_backup_cancel", "k_batch_sync", "k_async",
         "k_async_batch", "ssp", "local_sgd", "easgd"]
TARGETS = {"interval_mape_tight": 0.02, "interval_mape": 0.05, "staleness_tv": 0.02, "kendall_tau": 0.95}
# What CI asserts on its 2-core testbed (tests/validation/clock_check.py, --check testbed):
# the targets lie below the floor that per-message jitter sets there (a
# simulator charging each message's median cannot follow a long-tailed wake-up event by
# event; docs/validation.md, "Where the clock and the reference disagreed"), so CI bounds
# the error at a margin above that floor, wide of the load it runs under, and checks that a
# wrong cost passes these bounds (a check that cannot fail would say nothing).
TESTBED = {"interval_mape_tight": 0.20, "interval_mape": 0.25, "staleness_tv": 0.40, "kendall_tau": 0.90,
           "duration_error": 0.20}


class InputError(Exception):
    pass


def target_mape(name, limits=TARGETS):
    return limits["interval_mape_tight"] if name in TIGHT else limits["interval_mape"]


# ------------------------------------------------------------------------ files


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_text(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def git_commit():
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ------------------------------------------------------------------------ running


def run_reference(args, name, workers, seed, folder):
    """The reference's run into folder (reused when its run.json says completed with the
    same command)."""
    ref_args, _ = case(name, workers)
    cmd = [PYTHON, os.path.join(HERE, "reference.py"), *ref_args, "--workers", str(workers), "--seed", str(seed),
           "--updates", str(args.updates), "--eval-every", str(args.eval_every), "--compute", args.compute,
           "--batch", str(args.batch), "--lr", str(args.lr), "--hidden", "64"]
    if args.device != "cpu":  # (so a kept CPU run's key stays what it was)
        cmd += ["--device", args.device]
    if args.speeds:
        cmd += ["--speeds", args.speeds]
    key = cmd[2:]
    run_json = os.path.join(folder, "run.json")
    if not args.rerun and os.path.exists(run_json):
        with open(run_json) as f:
            done = json.load(f)
        if done.get("status") == "completed" and done.get("compare_key") == key:
            return
    if os.path.exists(folder):
        shutil.rmtree(folder)
    proc = subprocess.run(cmd + ["--out", folder], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"reference {name} n={workers} seed={seed} failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    with open(run_json) as f:
        done = json.load(f)
    done["compare_key"] = key
    write_text(run_json, json.dumps(done, indent=1))


def per_worker_trace(real, path):
    """The reference's steps as a per-worker trace: a step that ran to its end lasts what
    it really took (actual_s: from having its parameters to sending its result); a step
    cancelled or stopped lasts what it was drawn to (emulated_s), which the simulator cuts
    at the same event."""
    rows = read_csv(os.path.join(real, "steps.csv"))
    rows.sort(key=lambda r: (int(r["worker"]), int(r["step"])))
    lines = ["worker,step,seconds"]
    for r in rows:
        seconds = r["actual_s"] if r["outcome"] in ("pushed", "local") else r["emulated_s"]
        lines.append(f"{r['worker']},{r['step']},{float(seconds):.9f}")
    write_text(path, "\n".join(lines) + "\n")


def run_sim(args, name, workers, seed, real, folder, calibration):
    """asgdsim on the reference's run: the same model, data, batch, rate, stop and
    evaluation points, each worker replaying the reference worker's steps."""
    _, engine = case(name, workers)
    with open(os.path.join(real, "run.json")) as f:
        info = json.load(f)
    os.makedirs(folder, exist_ok=True)
    trace = os.path.join(folder, "steps.csv")
    per_worker_trace(real, trace)
    net = calibration["asgdsim_config"]
    config = {
        "name": "sim",
        "seed": seed,
        "model": {"type": "mlp", "hidden": info["hidden"]},
        "data": {"type": "fashion_mnist"},
        "train": {"batch_size": info["batch"], "lr": info["lr"]},
        "stop": {"updates": info["stop"]["updates"], "epochs": 0},
        "eval": {"every": info["eval_every"], "unit": "updates", "train_samples": args.eval_train_samples,
                 "test_samples": 10000},
        "cluster": {
            "workers": workers,
            "compute": {"dist": "trace", "file": trace, "per": "step"},
            "network": {"latency": net["cluster.network.latency"], "bandwidth": net["cluster.network.bandwidth"]},
            "server": {"update_seconds": net["cluster.server.update_seconds"],
                       "send_seconds": net.get("cluster.server.send_seconds", 0.0)},
        },
        "engines": [engine],
        "trace": True,
    }
    cfg_path = os.path.join(folder, "config.json")
    write_text(cfg_path, json.dumps(config, indent=1))
    out = os.path.join(folder, "out")
    if os.path.exists(out):  # compare.py's own output, remade from the config above (which
        shutil.rmtree(out)   # changes with the calibration: asgdsim refuses to mix runs)
    cmd = [args.asgdsim, "run", cfg_path, "--out", out, "--quiet", "--rerun", "--threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"asgdsim on {name} n={workers} seed={seed} failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    runs = [d for d in os.listdir(os.path.join(out, "sim")) if os.path.isdir(os.path.join(out, "sim", d))]
    if len(runs) != 1:
        raise RuntimeError(f"expected one run folder in {out}/sim, found {runs}")
    return os.path.join(out, "sim", runs[0])


# ------------------------------------------------------------------------ timelines


def real_timeline(folder):
    """The reference's run as {contributions: {(w, step): (arrival s, staleness or None)},
    rounds: {(w, step): update it was applied in}, updates: [t_applied s], losses:
    [(t s, train loss)], spans: [(worker, kind, t0, t1)]}."""
    contrib, rounds = {}, {}
    for r in read_csv(os.path.join(folder, "contributions.csv")):
        if r["outcome"] not in ("applied", "dropped"):
            continue
        staleness = int(r["staleness"]) if r["outcome"] == "applied" and r["staleness"] != "" else None
        contrib[(int(r["worker"]), int(r["step"]))] = (int(r["t_recv"]) * 1e-9, staleness)
        if r["outcome"] == "applied" and r["update"] != "":
            rounds[(int(r["worker"]), int(r["step"]))] = int(r["update"])
    updates = [int(r["t_applied"]) * 1e-9 for r in read_csv(os.path.join(folder, "updates.csv"))]
    losses = [(float(r["t"]) * 1e-9, float(r["train_loss"])) for r in read_csv(os.path.join(folder, "losses.csv"))]
    spans = []
    for r in read_csv(os.path.join(folder, "steps.csv")):
        t0 = int(r["t_params_received"]) * 1e-9
        t1 = int(r["t_end"]) * 1e-9 if r["t_end"] else t0
        spans.append((int(r["worker"]), "compute" if r["outcome"] != "cancelled" else "cancelled", t0, t1))
    return {"contributions": contrib, "rounds": rounds, "updates": updates, "losses": losses, "spans": spans}


def sim_timeline(run):
    """asgdsim's run, from its trace.json and metrics.csv, in the same shape. A
    contribution's round: the first server apply that starts at or after its arrival (the
    one its arrival completes, or the next: one arriving while an apply runs waits)."""
    with open(os.path.join(run, "trace.json")) as f:
        events = json.load(f)["traceEvents"]
    with open(os.path.join(run, "summary.json")) as f:
        end = float(json.load(f)["time"])
    contrib, updates, spans, applies = {}, [], [], []
    for ev in events:
        if ev.get("ph") == "i" and ev.get("name") == "update":
            updates.append(ev["ts"] * 1e-6)
        if ev.get("ph") == "X" and ev.get("tid", 0) == 0 and ev.get("name") == "apply":
            applies.append(ev["ts"])
        if ev.get("ph") != "X" or ev.get("tid", 0) == 0:
            continue
        w, t0, t1 = ev["tid"] - 1, ev["ts"] * 1e-6, (ev["ts"] + ev["dur"]) * 1e-6
        if ev["name"] == "compute":
            spans.append((w, "compute", t0, t1))
        if ev["name"] == "push":
            staleness = ev.get("args", {}).get("staleness")
            if staleness is None and t1 >= end - 1e-9:
                continue  # cut off by the run's end: it never arrived
            contrib[(w, int(ev["args"]["step"]))] = (t1, staleness)
    losses = [(float(r["time"]), float(r["train_loss"])) for r in read_csv(os.path.join(run, "metrics.csv"))]
    updates.sort()
    applies.sort()
    rounds = {}
    for k, (t, staleness) in contrib.items():
        i = bisect.bisect_left(applies, t * 1e6 - 1e-3)  # trace times are us with ns digits
        if staleness is not None and i < len(applies):
            rounds[k] = i + 1
    return {"contributions": contrib, "rounds": rounds, "updates": updates, "losses": losses, "spans": spans}


# ------------------------------------------------------------------------ metrics


def worker_intervals(timeline):
    """{(w, step): (w's previous contributing step, time since that contribution reached
    the server)}, over every contribution that reached it, applied or dropped: what the
    clock decides. Whether a contribution was applied or dropped is a decision on
    near-ties (which of two workers arrived last), compared apart (same_fate): counting
    only applied ones made one interval span two rounds on one side and one on the other
    wherever the two sides decided a near-tie differently. The previous step says the
    same of cancelled steps, which never arrive: compare_run pairs an interval only where
    it runs between the same two steps on both sides."""
    by_worker = {}
    for (w, step), (t, staleness) in timeline["contributions"].items():
        by_worker.setdefault(w, []).append((step, t))
    out = {}
    for w, items in by_worker.items():
        items.sort()
        for (prev, t0), (step, t1) in zip(items, items[1:]):
            out[(w, step)] = (prev, t1 - t0)
    return out


def same_rounds(real, sim, keys):
    """The keys (applied on both sides) whose round has the same members on both sides."""
    def members(rounds):
        by_round = {}
        for k, u in rounds.items():
            by_round.setdefault(u, set()).add(k)
        return {k: frozenset(by_round[u]) for k, u in rounds.items()}
    a, b = members(real.get("rounds", {})), members(sim.get("rounds", {}))
    return [k for k in keys if k in a and k in b and a[k] == b[k]]


def quantile_mape(ri, si):
    """MAPE between each worker's sorted intervals, the longer list read at the shorter's
    quantiles."""
    by_worker = {}
    for side, intervals in ((0, ri), (1, si)):
        for (w, _), (_, dt) in intervals.items():
            by_worker.setdefault(w, ([], []))[side].append(dt)
    pairs = []
    for r, s in by_worker.values():
        r, s, n = sorted(r), sorted(s), min(len(r), len(s))
        pairs += [(s[i * len(s) // n], r[i * len(r) // n]) for i in range(n)]
    return mape(pairs)


def mape(pairs):
    pairs = [(s, r) for s, r in pairs if r > 0]
    return sum(abs(s - r) / r for s, r in pairs) / len(pairs) if pairs else float("nan")


def kendall_tau(a, b):
    """Kendall's tau-a of two rankings of the same items (lists of keys in order)."""
    pos = {k: i for i, k in enumerate(b)}
    seq = [pos[k] for k in a]
    n = len(seq)
    if n < 2:
        return float("nan")
    discordant = merge_count(seq)
    pairs = n * (n - 1) // 2
    return 1.0 - 2.0 * discordant / pairs


def merge_count(seq):
    """Inversions of seq (merge sort), O(n log n)."""
    if len(seq) < 2:
        return 0
    mid = len(seq) // 2
    left, right = seq[:mid], seq[mid:]
    count = merge_count(left) + merge_count(right)
    merged, i, j = [], 0, 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            merged.append(left[i])
            i += 1
        else:
            merged.append(right[j])
            count += len(left) - i
            j += 1
    merged += left[i:] + right[j:]
    seq[:] = merged
    return count


def staleness_tv(real, sim):
    def hist(t):
        counts = {}
        for _, s in t["contributions"].values():
            if s is not None:
                counts[s] = counts.get(s, 0) + 1
        total = sum(counts.values())
        return {k: v / total for k, v in counts.items()} if total else {}
    a, b = hist(real), hist(sim)
    return 0.5 * sum(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b))


def time_to(losses, target, origin=0.0):
    """The first time the loss reaches target, linearly interpolated between evaluations,
    counted from origin (None if never). compare.py counts from the run's start (the first
    parameters a worker had, as the run length): the reference's processes take 30-120 ms
    to get there, which asgdsim does not model."""
    for (t0, l0), (t1, l1) in zip(losses, losses[1:]):
        if l1 <= target:
            if l0 <= target:
                return t0 - origin
            return t0 + (t1 - t0) * (l0 - target) / (l0 - l1) - origin
    return losses[0][0] - origin if losses and losses[0][1] <= target else None


def start(timeline):
    """When the first worker had its parameters (seconds)."""
    return min((t0 for _, _, t0, _ in timeline["spans"]), default=0.0)


def compare_run(real, sim):
    ri, si = worker_intervals(real), worker_intervals(sim)
    both_ends = set(ri) & set(si)
    common = sorted(k for k in both_ends if ri[k][0] == si[k][0])
    agree = set(same_rounds(real, sim, list(real["contributions"])))
    # an interval's wait belongs to the previous contribution's round, its arrival to its own
    rounds_agree = {k for k in common if k in agree and (k[0], ri[k][0]) in agree}
    n = min(len(real["updates"]), len(sim["updates"]))
    ru = [b - a for a, b in zip(real["updates"][:n], real["updates"][1:n])]
    su = [b - a for a, b in zip(sim["updates"][:n], sim["updates"][1:n])]
    applied = [k for k, (_, s) in real["contributions"].items()
               if s is not None and k in sim["contributions"] and sim["contributions"][k][1] is not None]
    real_order = sorted(applied, key=lambda k: real["contributions"][k][0])
    sim_order = sorted(applied, key=lambda k: sim["contributions"][k][0])
    both = set(real["contributions"]) & set(sim["contributions"])
    same = sum((real["contributions"][k][1] is None) == (sim["contributions"][k][1] is None) for k in both)
    applied_common = [k for k in common if k in real.get("rounds", {}) and k in sim.get("rounds", {})]
    return {
        "interval_mape": mape([(si[k][1], ri[k][1]) for k in common]),
        "intervals": len(common),
        "other_previous": len(both_ends) - len(common),
        "same_round": (sum(k in rounds_agree for k in applied_common) / len(applied_common)
                       if applied_common else float("nan")),
        "round_mape": mape([(si[k][1], ri[k][1]) for k in common if k in rounds_agree]),
        "quantile_mape": quantile_mape(ri, si),
        "same_fate": same / len(both) if both else float("nan"),
        "update_mape": mape(list(zip(su, ru))),
        "update_wape": (sum(abs(s - r) for s, r in zip(su, ru)) / sum(ru)) if ru else float("nan"),
        "staleness_tv": staleness_tv(real, sim),
        "kendall_tau": kendall_tau(real_order, sim_order),
        "applied_both": len(applied),
        # run length: from the first parameters a worker had (the real run's start-up before
        # it, 30-120 ms of threads starting and first sends, is a one-off asgdsim does not
        # model; kept as *_startup) to the last update
        "real_startup": start(real),
        "sim_startup": start(sim),
        "real_duration": real["updates"][-1] - start(real) if real["updates"] else float("nan"),
        "sim_duration": sim["updates"][-1] - start(sim) if sim["updates"] else float("nan"),
        "real_final_loss": real["losses"][-1][1] if real["losses"] else float("nan"),
        "sim_final_loss": sim["losses"][-1][1] if sim["losses"] else float("nan"),
    }


# ------------------------------------------------------------------------ report


def mean(xs):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return sum(xs) / len(xs) if xs else float("nan")


def summarize(name, workers, results, target_loss):
    """One table row: the seeds' means, times to target with the real seeds' range."""
    row = {"case": name, "workers": workers, "seeds": len(results)}
    for key in ("interval_mape", "update_mape", "update_wape", "staleness_tv", "kendall_tau", "same_fate",
                "same_round", "round_mape", "quantile_mape"):
        row[key] = mean([r[key] for r in results])
    row["interval_mape_max"] = max(r["interval_mape"] for r in results)
    row["staleness_tv_max"] = max(r["staleness_tv"] for r in results)
    row["kendall_tau_min"] = min(r["kendall_tau"] for r in results)
    real_t = [r["real_ttt"] for r in results]
    sim_t = [r["sim_ttt"] for r in results]
    row["real_ttt"] = [t for t in real_t]
    row["sim_ttt"] = [t for t in sim_t]
    reached = [t for t in real_t if t is not None]
    sim_reached = [t for t in sim_t if t is not None]
    row["ttt_within_spread"] = (bool(reached) and bool(sim_reached) and len(reached) == len(real_t) and
                                len(sim_reached) == len(sim_t) and min(reached) <= mean(sim_reached) <= max(reached))
    row["final_loss_diff"] = mean([r["sim_final_loss"] - r["real_final_loss"] for r in results])
    row["duration_error"] = mean([(r["sim_duration"] - r["real_duration"]) / r["real_duration"] for r in results])
    row["target_loss"] = target_loss
    return row


def failures(row, limits=TARGETS):
    """What passes its limit in this row: the issue's TARGETS, or CI's TESTBED bounds (with
    a bound on the run length's error). The time to target needs 3 seeds or more."""
    out = []
    limit = target_mape(row["case"], limits)
    if not row["interval_mape"] <= limit:
        out.append(f"interval MAPE {row['interval_mape']:.2%} > {limit:.0%}")
    if not row["staleness_tv"] <= limits["staleness_tv"]:
        out.append(f"staleness TV {row['staleness_tv']:.3f} > {limits['staleness_tv']}")
    if not row["kendall_tau"] >= limits["kendall_tau"]:
        out.append(f"Kendall tau {row['kendall_tau']:.3f} < {limits['kendall_tau']}")
    if "duration_error" in limits and not abs(row["duration_error"]) <= limits["duration_error"]:
        out.append(f"run length off by {row['duration_error']:+.1%} (bound {limits['duration_error']:.0%})")
    if row["seeds"] >= 3 and not row["ttt_within_spread"]:
        out.append("time to target outside the real seeds' range")
    return out


def spread(row):
    if row["seeds"] < 3:
        return "(needs 3 seeds)"
    return "yes" if row["ttt_within_spread"] else "no"


def fmt_times(ts):
    return "/".join("-" if t is None else f"{t:.2f}" for t in ts)


def table(rows, meta):
    lines = [
        f"Generated by `validation/compare.py` on {meta['date']} at commit `{meta['commit']}` on "
        f"{meta['host']} ({meta['cpus']} cores, load average {meta['load']:.1f} at the start; the reference runs "
        f"started at load {meta['reference_load'][0]:.1f}-{meta['reference_load'][1]:.1f}, "
        f"{meta['reference_dates'][0][:10]} to {meta['reference_dates'][1][:10]}); "
        f"{meta['updates']} updates a run, compute `{meta['compute']}`, seeds {meta['seeds']}, the workers' "
        f"gradients on {meta.get('device', 'cpu')}; calibration: "
        f"latency {meta['latency'] * 1e6:.0f} us, bandwidth {meta['bandwidth'] / 1e9:.2f} GB/s, server update "
        f"{meta['update'] * 1e6:.0f} us, server send {meta.get('send', 0.0) * 1e6:.0f} us. Run length: from the first parameters a worker received to the last "
        f"update. Times to target (train loss <= {meta['target']}) in seconds from the same start, per seed, "
        "real vs sim.",
        "",
        "| engine | N | interval MAPE (target) | same round | its MAPE | quantile MAPE | update MAPE | staleness TV | Kendall tau | same fate | time to target real | sim | in spread | final loss sim - real | run length sim/real - 1 | within targets |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        bad = failures(r)
        lines.append(
            f"| {r['case']} | {r['workers']} | {r['interval_mape']:.2%} ({target_mape(r['case']):.0%}) | "
            f"{r['same_round']:.0%} | {r['round_mape']:.1%} | {r['quantile_mape']:.1%} | "
            f"{r['update_mape']:.1%} | {r['staleness_tv']:.3f} | {r['kendall_tau']:.3f} | {r['same_fate']:.1%} | "
            f"{fmt_times(r['real_ttt'])} | "
            f"{fmt_times(r['sim_ttt'])} | {spread(r)} | {r['final_loss_diff']:+.3f} | "
            f"{r['duration_error']:+.1%} | {'yes' if not bad else 'no: ' + '; '.join(bad)} |")
    return "\n".join(lines)


def table_markers(device):
    """The doc's markers of the table made with the workers' gradients on `device`: the
    CPU's table and a GPU's are kept apart."""
    name = "validation table" if device == "cpu" else f"validation table ({device.split(':')[0]})"
    return f"<!-- {name}: begin -->", f"<!-- {name}: end -->"


def replace_between_markers(path, text, device="cpu"):
    begin, end = table_markers(device)
    with open(path) as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        raise InputError(f"{path}: the markers '{begin}' and '{end}' are missing")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    write_text(path, head + begin + "\n" + text + "\n" + end + tail)


def draw_timelines(real, sim, title, path):
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11, 4.2), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    # the real run from its first parameters (its start-up, which asgdsim does not model,
    # is left out, as in the run length): both timelines start at 0
    start = min((t0 for *_, t0, _ in real["spans"]), default=0.0)
    real = dict(real, spans=[(w, kind, t0 - start, t1 - start) for w, kind, t0, t1 in real["spans"]],
                updates=[t - start for t in real["updates"]])
    workers = sorted({w for w, *_ in real["spans"]} | {w for w, *_ in sim["spans"]})
    horizon = min(real["updates"][-1] if real["updates"] else 1.0, sim["updates"][-1] if sim["updates"] else 1.0)
    horizon = min(horizon, 0.6)
    colours = {"real": "#1f77b4", "sim": "#ff7f0e"}
    for w in workers:
        for label, tl, dy in (("real", real, 0.18), ("sim", sim, -0.18)):
            bars = [(t0, t1 - t0) for ww, kind, t0, t1 in tl["spans"] if ww == w and t0 < horizon]
            ax.broken_barh(bars, (w + dy - 0.15, 0.3), facecolors=colours[label], alpha=0.75, edgecolor="white",
                           linewidth=0.5)
    for label, tl, y in (("real", real, len(workers) + 0.2), ("sim", sim, len(workers) - 0.2)):
        ts = [t for t in tl["updates"] if t < horizon]
        ax.plot(ts, [y] * len(ts), "|", color=colours[label], markersize=10)
    ax.set_yticks(list(range(len(workers))) + [len(workers)])
    ax.set_yticklabels([f"worker {w}" for w in workers] + ["updates"])
    ax.set_xlim(0, horizon)
    ax.set_xlabel(f"seconds (real: wall clock since its first parameters, {start * 1e3:.0f} ms after its start; "
                  "sim: virtual)")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=colours["real"], label="real (reference)"),
                       Patch(color=colours["sim"], label="asgdsim")], loc="upper right", fontsize=8)
    ax.set_title(title + f" (first {horizon:.2f} s; bars: each step from having its parameters to its result)",
                 fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)


# ------------------------------------------------------------------------ main


def parse_list(text, what, conv=str):
    try:
        items = [conv(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{what}: expected a comma-separated list, got '{text}'")
    if not items:
        raise InputError(f"{what}: empty")
    return items


def main(argv=None):
    p = argparse.ArgumentParser(prog="compare.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the runs (real/, sim/) and results.json")
    p.add_argument("--engines", default=",".join(CASES))
    p.add_argument("--workers", default="2,4,8")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--updates", type=int, default=300)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--eval-train-samples", type=int, default=10000)
    p.add_argument("--compute", default="exponential:0.03", help="the reference's emulated step durations")
    p.add_argument("--speeds", default="", help="per-worker slowdown factors (the reference's --speeds)")
    p.add_argument("--device", default="cpu",
                   help="where the reference's workers compute gradients (its --device: cpu, cuda[:N]); --doc "
                        "then rewrites that device's table (markers 'validation table (cuda)')")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--target-loss", type=float, default=1.2, help="train loss of the time-to-target column")
    p.add_argument("--calibration", help="validation/calibrate.py's JSON (default: measure it into OUT)")
    p.add_argument("--asgdsim", default=os.path.join(ROOT, "build", "asgdsim"))
    p.add_argument("--doc", help="rewrite the table between the markers of this file")
    p.add_argument("--figure", help="draw the first case's first run's timelines here (PNG)")
    p.add_argument("--check", nargs="?", const="targets", choices=["targets", "testbed"],
                   help="exit 1 when an error passes its target (the issue's targets, or 'testbed': the "
                        "bounds CI asserts on a 2-core machine)")
    p.add_argument("--rerun", action="store_true", help="run the reference again even where its run is kept")
    args = p.parse_args(argv)
    # absolute: the configs written for asgdsim name their trace files, which asgdsim reads
    # relative to the config's own folder
    args.out = os.path.abspath(args.out)
    try:
        engines = parse_list(args.engines, "--engines")
        for e in engines:
            case(e, 2)
        workers = parse_list(args.workers, "--workers", int)
        seeds = parse_list(args.seeds, "--seeds", int)
        if any(n < 2 for n in workers):
            raise InputError("--workers: each at least 2")
        if args.device != "cpu" and not re.fullmatch(r"cuda(:[0-9]+)?", args.device):
            raise InputError(f"--device {args.device}: cpu or cuda[:N]")
        if args.doc:  # (checked before the runs: a missing marker would otherwise end them)
            begin, end = table_markers(args.device)
            try:
                with open(args.doc) as f:
                    doc = f.read()
            except OSError as e:
                raise InputError(f"--doc {args.doc}: cannot read it ({e.strerror})") from None
            if begin not in doc or end not in doc:
                raise InputError(f"--doc {args.doc}: the markers '{begin}' and '{end}' are missing")
        if not os.access(args.asgdsim, os.X_OK):
            raise InputError(f"--asgdsim: {args.asgdsim} is not an executable (build it: ./scripts/run.sh or cmake)")
    except InputError as e:
        print(f"compare.py: error: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    load = os.getloadavg()[0]
    cal_path = args.calibration or os.path.join(args.out, "calibration.json")
    if not args.calibration and os.path.exists(cal_path) and not args.rerun:
        with open(cal_path) as f:
            kept = json.load(f).get("cycle", {}).get("compute")
        if kept != args.compute:  # the cycles were timed at another rhythm (or by an older calibrate.py)
            print(f"compare.py: {cal_path} was measured with compute {kept}, not {args.compute}: measuring "
                  "again", file=sys.stderr)
            os.replace(cal_path, cal_path + ".old")
    if not args.calibration and (args.rerun or not os.path.exists(cal_path)):
        if os.path.exists(cal_path):
            os.replace(cal_path, cal_path + ".old")  # calibrate.py never overwrites
        proc = subprocess.run([PYTHON, os.path.join(HERE, "calibrate.py"), "--out", cal_path,
                               "--compute", args.compute],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"compare.py: calibration failed:\n{proc.stdout}{proc.stderr}", file=sys.stderr)
            return 1
    with open(cal_path) as f:
        calibration = json.load(f)
    rows, results_all, reference_loads, reference_dates = [], {}, [], []
    for name in engines:
        for n in workers:
            results = []
            for seed in seeds:
                tag = f"{name}-n{n}-s{seed}"
                real_dir = os.path.join(args.out, "real", tag)
                print(f"compare.py: {tag}", file=sys.stderr, flush=True)
                try:
                    run_reference(args, name, n, seed, real_dir)
                    sim_run = run_sim(args, name, n, seed, real_dir, os.path.join(args.out, "sim", tag), calibration)
                except RuntimeError as e:
                    print(f"compare.py: {e}", file=sys.stderr)
                    return 1
                real, sim = real_timeline(real_dir), sim_timeline(sim_run)
                with open(os.path.join(real_dir, "run.json")) as f:  # a kept run may be older than this call
                    info = json.load(f)
                reference_loads.append(info.get("loadavg_start", [float("nan")])[0])
                reference_dates.append(info.get("date", "?"))
                r = compare_run(real, sim)
                r["real_ttt"] = time_to(real["losses"], args.target_loss, start(real))
                r["sim_ttt"] = time_to(sim["losses"], args.target_loss, start(sim))
                results.append(r)
                results_all[tag] = r
                if args.figure and name == engines[0] and n == workers[0] and seed == seeds[0]:
                    draw_timelines(real, sim, f"{name}, {n} workers, seed {seed}", args.figure)
            rows.append(summarize(name, n, results, args.target_loss))
    meta = {"date": datetime.date.today().isoformat(), "commit": git_commit(), "host": os.uname().nodename,
            "cpus": os.cpu_count(), "load": load, "reference_load": [min(reference_loads), max(reference_loads)],
            "reference_dates": [min(reference_dates), max(reference_dates)], "updates": args.updates, "compute": args.compute,
            "seeds": ",".join(map(str, seeds)), "latency": calibration["asgdsim_config"]["cluster.network.latency"],
            "bandwidth": calibration["asgdsim_config"]["cluster.network.bandwidth"],
            "update": calibration["asgdsim_config"]["cluster.server.update_seconds"],
            "send": calibration["asgdsim_config"].get("cluster.server.send_seconds", 0.0), "target": args.target_loss,
            "device": args.device}
    text = table(rows, meta)
    write_text(os.path.join(args.out, "results.json"),
               json.dumps({"meta": meta, "rows": rows, "runs": {k: v for k, v in results_all.items()}}, indent=1))
    print(text)
    if args.doc:
        try:
            replace_between_markers(args.doc, text, args.device)
        except InputError as e:
            print(f"compare.py: error: {e}", file=sys.stderr)
            return 2
    limits = TESTBED if args.check == "testbed" else TARGETS
    bad = [(r["case"], r["workers"], failures(r, limits)) for r in rows if failures(r, limits)]
    if args.check and bad:
        for name, n, why in bad:
            print(f"compare.py: {name} at {n} workers: {'; '.join(why)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
