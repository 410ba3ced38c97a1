"""Reads a reference run folder (validation/README.md, "Logs") into typed rows, and runs the
reference in-process for the tests (the test process imports torch once; the reference
forks its server and workers from it)."""

import csv
import json
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import torch  # noqa: E402

from validation import reference  # noqa: E402

torch.set_num_threads(1)

# Small runs: a tiny MLP on the synthetic set, emulated steps of ~10 ms.
SMALL = ["--data", "synthetic", "--synthetic-samples", "1024", "--synthetic-features", "16",
         "--hidden", "8", "--batch", "16", "--eval-train-samples", "256", "--timeout", "30"]

INT_COLUMNS = {"worker", "step", "job", "version", "t_params_received", "t_compute_start",
               "t_compute_end", "t_send", "t_end", "src", "dst", "bytes", "seq", "t_recv",
               "t_handled", "update", "t_start", "t_applied", "contributions", "version_read",
               "version_at_arrival", "staleness", "t"}
FLOAT_COLUMNS = {"emulated_s", "actual_s", "loss", "combine_s", "apply_s", "train_loss",
                 "test_loss", "test_accuracy"}


def _typed(row):
    out = {}
    for k, v in row.items():
        if v == "":
            out[k] = None
        elif k in INT_COLUMNS:
            out[k] = int(v)
        elif k in FLOAT_COLUMNS:
            out[k] = float(v)
        else:
            out[k] = v
    return out


def read_rows(path):
    with open(path, newline="") as f:
        return [_typed(r) for r in csv.DictReader(f)]


class Run:
    def __init__(self, out):
        self.out = out
        with open(os.path.join(out, "run.json")) as f:
            self.meta = json.load(f)
        self.steps = read_rows(os.path.join(out, "steps.csv"))
        self.messages = read_rows(os.path.join(out, "messages.csv"))
        self.updates = read_rows(os.path.join(out, "updates.csv"))
        self.contributions = read_rows(os.path.join(out, "contributions.csv"))
        self.losses = read_rows(os.path.join(out, "losses.csv"))
        self.workers = self.meta["workers"]

    def params_messages(self):
        return [m for m in self.messages if m["kind"] == "params"]

    def params_of(self, worker, job):
        """The PARAMS message that started worker's job (None if never sent)."""
        for m in self.messages:
            if m["kind"] == "params" and m["dst"] == worker + 1 and m["job"] == job:
                return m
        return None

    def applied(self, update):
        return [c for c in self.contributions if c["update"] == update]

    def snapshots(self):
        return torch.load(os.path.join(self.out, "snapshots.pt"))


def run_reference(engine_args, workers=3, updates=16, compute="exponential:0.01", seed=1, extra=()):
    """Runs the reference into a fresh temporary folder; returns (exit code, Run or folder)."""
    out = os.path.join(tempfile.mkdtemp(prefix="asgd-reference-"), "run")
    argv = SMALL + ["--workers", str(workers), "--updates", str(updates), "--compute", compute,
                    "--seed", str(seed), "--out", out] + list(engine_args) + list(extra)
    code = reference.run(argv)
    return code, (Run(out) if code == 0 else out)
