"""Tests of validation/ (the independent reference): each engine's protocol checked on the
logs of a small real run (2-4 processes of workers, ~10 ms emulated steps, a few dozen
updates), the arithmetic replayed from saved snapshots where the logs allow it, and the
launcher's failure handling. Timing is never asserted (the machine is shared); only who
waited for whom, what each update used, and the numbers.

    /usr/bin/python3 -m unittest discover -s tests/validation
"""

import collections
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import unittest

import runlogs  # noqa: F401 -- puts the repository on sys.path
import torch
from runlogs import run_reference

from validation import reference, workload
from validation.update_rules import ServerOptimizer, combine, elastic_exchange_async, \
    elastic_exchange_sync, easgd_worker_step


class RunTest(unittest.TestCase):
    """Runs ENGINE_ARGS once for the class and checks what every run must satisfy."""
    ENGINE_ARGS = None
    WORKERS, UPDATES, COMPUTE, EXTRA = 3, 16, "exponential:0.01", ()

    @classmethod
    def setUpClass(cls):
        if cls.ENGINE_ARGS is None:
            raise unittest.SkipTest("base class")
        code, cls.logs = run_reference(cls.ENGINE_ARGS, cls.WORKERS, cls.UPDATES, cls.COMPUTE,
                                      extra=cls.EXTRA)
        cls.folder = cls.logs.out if code == 0 else cls.logs
        if code != 0:
            raise AssertionError(f"the reference exited with {code}; see {cls.folder}")

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "folder", None):
            shutil.rmtree(os.path.dirname(cls.folder), ignore_errors=True)

    # ------------------------------------------------------------ common checks

    def test_run_completed_with_its_updates(self):
        meta = self.logs.meta
        self.assertEqual(meta["status"], "completed")
        self.assertEqual(meta["stop_reason"], "updates")
        self.assertEqual([u["update"] for u in self.logs.updates], list(range(1, self.UPDATES + 1)))
        times = [u["t_applied"] for u in self.logs.updates]
        self.assertEqual(times, sorted(times))
        for key in ("engine", "workers", "seed", "model", "batch", "lr", "compute", "host",
                    "torch", "git_commit", "date"):
            self.assertIn(key, meta)

    def test_messages_are_received_after_they_are_sent(self):
        for m in self.logs.messages:
            self.assertGreaterEqual(m["t_send"], 0)
            self.assertLessEqual(m["t_send"], m["t_recv"])
            self.assertLessEqual(m["t_recv"], m["t_handled"])

    def test_every_push_reaches_the_server_once(self):
        pushed = sorted((s["worker"], s["step"]) for s in self.logs.steps if s["outcome"] == "pushed")
        received = sorted((c["worker"], c["step"]) for c in self.logs.contributions)
        self.assertEqual(pushed, received)
        in_messages = sorted((m["src"] - 1, m["step"]) for m in self.logs.messages
                             if m["kind"] in ("push_grad", "push_model"))
        self.assertEqual(pushed, in_messages)

    def test_params_carry_the_version_the_server_held(self):
        """A PARAMS message's version = updates applied before the server sent it."""
        applied = [u["t_applied"] for u in self.logs.updates]
        for m in self.logs.params_messages():
            self.assertEqual(m["version"], sum(t < m["t_send"] for t in applied), m)

    def test_steps_read_their_job_version_and_wait_out_their_duration(self):
        meta = self.logs.meta
        compute = workload.ComputeModel(meta["compute"], ",".join(map(str, meta["speeds"])), self.WORKERS, meta["seed"])
        for s in self.logs.steps:
            self.assertEqual(s["version"], self.logs.params_of(s["worker"], s["job"])["version"], s)
            self.assertEqual(s["emulated_s"], compute.seconds(s["worker"], s["step"]))
            if s["outcome"] in ("pushed", "local"):
                self.assertGreaterEqual(s["actual_s"], s["emulated_s"])
            self.assertLessEqual(s["t_params_received"], s["t_compute_start"])
            self.assertLessEqual(s["t_compute_end"], s["t_end"])

    def test_staleness_counts_the_updates_between_read_and_apply(self):
        for c in self.logs.contributions:
            if c["outcome"] == "applied":
                self.assertEqual(c["staleness"], c["update"] - 1 - c["version_read"])
                self.assertGreaterEqual(c["version_at_arrival"], c["version_read"])

    def test_losses_at_the_eval_points(self):
        every = self.logs.meta["eval_every"]
        expected = sorted({0, self.UPDATES} | set(range(every, self.UPDATES + 1, every)))
        self.assertEqual([r["update"] for r in self.logs.losses], expected)
        for r in self.logs.losses:
            self.assertTrue(0 < r["train_loss"] < 10 and 0 <= r["test_accuracy"] <= 1)

    # ------------------------------------------------------------ helpers

    def per_update(self):
        return {u["update"]: self.logs.applied(u["update"]) for u in self.logs.updates}

    def next_params(self, push):
        return self.logs.params_of(push["worker"], push["job"] + 1)

    def replay_gradient_updates(self, lr, mean=True):
        """Recomputes every update from the snapshot of the version each gradient read:
        w_u = w_{u-1} - lr * combine(g_i(w_{read_i}) on minibatch (worker_i, step_i))."""
        snaps = self.logs.snapshots()
        self.assertEqual(snaps["update"], list(range(self.UPDATES + 1)))
        w = snaps["params"]
        meta = self.logs.meta
        opt = meta["data_options"]
        data = workload.make_synthetic(opt["samples"], opt["features"], opt["data_seed"])
        model = workload.MLP(data.features, meta["hidden"])
        for u, contribs in self.per_update().items():
            grads = []
            for c in contribs:
                x = w[c["version_read"]].clone().requires_grad_(True)
                ids = workload.minibatch_ids(meta["seed"], c["worker"], c["step"], meta["batch"], data.train_samples)
                grads.append(model.loss_and_grad(x, *data.batch(data.x_train, ids))[1])
            total = sum(grads) / (len(grads) if mean else 1)
            torch.testing.assert_close(w[u], w[u - 1] - lr * total, rtol=1e-5, atol=1e-6)


class AsyncTest(RunTest):
    ENGINE_ARGS = ["--engine", "async"]
    WORKERS = 4
    EXTRA = ["--eval-every", "1", "--save-snapshots"]

    def test_each_update_applies_one_gradient_and_the_worker_waits_for_it(self):
        stale = collections.Counter()
        for u, contribs in self.per_update().items():
            self.assertEqual(len(contribs), 1)
            stale[contribs[0]["staleness"]] += 1
            nxt = self.next_params(contribs[0])
            if nxt is not None:
                self.assertEqual(nxt["version"], u)  # it reads w right after its own update
        self.assertEqual(sum(c["outcome"] == "dropped" for c in self.logs.contributions), 0)
        self.assertGreater(len(stale), 1, stale)  # four workers: staleness varies

    def test_replay_from_snapshots(self):
        self.replay_gradient_updates(self.logs.meta["lr"])


class SyncTest(RunTest):
    ENGINE_ARGS = ["--engine", "sync"]
    UPDATES = 10
    EXTRA = ["--eval-every", "1", "--save-snapshots"]

    def test_each_update_has_every_worker_on_the_same_version(self):
        for u, contribs in self.per_update().items():
            self.assertEqual(sorted(c["worker"] for c in contribs), list(range(self.WORKERS)))
            self.assertTrue(all(c["version_read"] == u - 1 for c in contribs))
        for m in self.logs.params_messages():  # everyone starts each iteration on the new w
            self.assertEqual(m["job"], m["version"])

    def test_replay_from_snapshots(self):
        self.replay_gradient_updates(self.logs.meta["lr"])


class SyncBackupDropTest(RunTest):
    ENGINE_ARGS = ["--engine", "sync_backup", "--backups", "1"]

    def test_n_minus_b_fresh_gradients_per_update_and_at_most_b_dropped(self):
        b, n = 1, self.WORKERS
        for u, contribs in self.per_update().items():
            self.assertEqual(len(contribs), n - b)
            self.assertEqual(len({c["worker"] for c in contribs}), n - b)
            self.assertTrue(all(c["version_read"] == u - 1 for c in contribs))
        dropped = [c for c in self.logs.contributions if c["outcome"] == "dropped"]
        self.assertGreater(len(dropped), 0)
        per_iteration = collections.Counter(c["version_read"] for c in dropped)
        self.assertLessEqual(max(per_iteration.values()), b)
        for c in dropped:
            self.assertLess(c["version_read"], c["version_at_arrival"])
            nxt = self.next_params(c)  # the late worker joins the iteration in progress
            if nxt is not None:
                self.assertEqual(nxt["version"], c["version_at_arrival"])
        self.assertFalse(any(m["kind"] == "cancel" for m in self.logs.messages))


class CancelChecks:
    def check_cancelled_steps(self):
        cancelled = [s for s in self.logs.steps if s["outcome"] == "cancelled"]
        self.assertGreater(len(cancelled), 0)
        applied = {(c["worker"], c["step"]) for c in self.logs.contributions if c["outcome"] == "applied"}
        cancels = {(m["dst"] - 1, m["job"]): m for m in self.logs.messages if m["kind"] == "cancel"}
        for s in cancelled:
            self.assertNotIn((s["worker"], s["step"]), applied)
            self.assertIsNone(s["t_send"])  # never pushed
            # the cancel came before the step's emulated duration was out, and ended it
            cancel = cancels[(s["worker"], s["job"])]
            self.assertLess(cancel["t_recv"], s["t_params_received"] + s["emulated_s"] * 1e9)
            self.assertLessEqual(cancel["t_recv"], s["t_end"])
        for c in self.logs.contributions:  # a push on the wire when its cancel was sent
            self.assertEqual(c["outcome"] == "cancelled", (c["worker"], c["job"]) in cancels, c)
        self.assertFalse(any(c["outcome"] == "dropped" for c in self.logs.contributions))
        for u in range(1, self.UPDATES):  # every worker starts the next iteration on the new w
            self.assertEqual({m["dst"] for m in self.logs.params_messages() if m["version"] == u},
                             set(range(1, self.WORKERS + 1)))


class SyncBackupCancelTest(RunTest, CancelChecks):
    ENGINE_ARGS = ["--engine", "sync_backup", "--backups", "1", "--late", "cancel"]

    def test_k_gradients_per_update_and_cancelled_steps_never_applied(self):
        for u, contribs in self.per_update().items():
            self.assertEqual(len({c["worker"] for c in contribs}), self.WORKERS - 1)
            self.assertTrue(all(c["version_read"] == u - 1 for c in contribs))
        self.check_cancelled_steps()


class KBatchSyncCancelTest(RunTest, CancelChecks):
    ENGINE_ARGS = ["--engine", "k_batch_sync", "--k", "3"]
    WORKERS = 2

    def test_first_k_gradients_from_any_workers(self):
        for u, contribs in self.per_update().items():
            self.assertEqual(len(contribs), 3)
            self.assertTrue(all(c["version_read"] == u - 1 for c in contribs))
            # K > N: some worker gave several gradients, each on the same version
            self.assertLess(len({c["worker"] for c in contribs}), 3)
        self.check_cancelled_steps()


class KBatchSyncDropTest(RunTest):
    ENGINE_ARGS = ["--engine", "k_batch_sync", "--k", "2", "--late", "drop"]

    def test_first_k_fresh_gradients_and_late_ones_dropped(self):
        for u, contribs in self.per_update().items():
            self.assertEqual(len(contribs), 2)
            self.assertTrue(all(c["version_read"] == u - 1 for c in contribs))
            for c in contribs[:-1]:  # accepted while the iteration needed more: same version again
                nxt = self.next_params(c)
                self.assertEqual(nxt["version"], u - 1)
        for c in self.logs.contributions:
            if c["outcome"] == "dropped":
                self.assertLess(c["version_read"], c["version_at_arrival"])
        self.assertGreater(sum(c["outcome"] == "dropped" for c in self.logs.contributions), 0)
        self.assertFalse(any(m["kind"] == "cancel" for m in self.logs.messages))


class KAsyncTest(RunTest):
    ENGINE_ARGS = ["--engine", "k_async", "--k", "2"]

    def test_k_distinct_workers_and_buffered_workers_wait_for_the_update(self):
        for u, contribs in self.per_update().items():
            self.assertEqual(len({c["worker"] for c in contribs}), 2)
            for c in contribs:
                nxt = self.next_params(c)
                if nxt is not None:
                    self.assertEqual(nxt["version"], u)


class KBatchAsyncTest(RunTest):
    ENGINE_ARGS = ["--engine", "k_async", "--k", "2", "--batch-async"]

    def test_k_gradients_and_every_worker_pulls_right_after_its_push(self):
        for u, contribs in self.per_update().items():
            self.assertEqual(len(contribs), 2)
            last = max(contribs, key=lambda c: c["t_handled"])
            for c in contribs:
                nxt = self.next_params(c)
                if nxt is not None:  # only the push that completes the buffer sees its update
                    self.assertEqual(nxt["version"], c["version_at_arrival"] + (c is last))


class SSPTest(RunTest):
    ENGINE_ARGS = ["--engine", "ssp", "--bound", "1"]
    EXTRA = ["--speeds", "1,1,3"]
    BOUND = 1

    def test_no_worker_starts_more_than_s_clocks_ahead_of_the_slowest(self):
        handled = [(c["t_handled"], c["worker"]) for c in self.logs.contributions]
        ahead = collections.Counter()
        for m in self.logs.params_messages():
            clocks = [sum(t < m["t_send"] and w == v for t, w in handled) for v in range(self.WORKERS)]
            gap = clocks[m["dst"] - 1] - min(clocks)
            self.assertLessEqual(gap, self.BOUND, m)
            ahead[gap] += 1
        self.assertGreater(ahead[self.BOUND], 0)  # the bound was reached (not sync) ...
        waited = 0
        for c in self.logs.contributions:  # ... and held a worker back (not async)
            nxt = self.next_params(c)
            waited += nxt is not None and any(c["t_handled"] < t < nxt["t_send"] for t, _ in handled)
        self.assertGreater(waited, 0)

    def test_pending_gradients_are_applied_in_full_before_a_read(self):
        for u in self.logs.updates:
            contribs = self.logs.applied(u["update"])
            self.assertEqual(len({c["worker"] for c in contribs}), len(contribs))  # one per worker
        self.assertNotIn("aggregate", self.logs.meta["engine_options"])


class LocalSGDTest(RunTest):
    ENGINE_ARGS = ["--engine", "local_sgd", "--steps", "3"]
    UPDATES = 8

    def test_one_update_per_round_of_h_steps_per_worker(self):
        for u, contribs in self.per_update().items():
            self.assertEqual(sorted(c["worker"] for c in contribs), list(range(self.WORKERS)))
            self.assertTrue(all(c["version_read"] == u - 1 for c in contribs))
        rounds = collections.defaultdict(list)
        for s in self.logs.steps:
            rounds[(s["worker"], s["job"])].append(s["outcome"])
        for (w, job), outcomes in rounds.items():
            if "stopped" not in outcomes:
                self.assertEqual(outcomes, ["local", "local", "pushed"], (w, job))
        self.assertTrue(all(m["kind"] in ("params", "push_model", "stop", "bye") for m in self.logs.messages))


class DiLoCoTest(RunTest):
    ENGINE_ARGS = ["--engine", "diloco", "--steps", "2", "--inner-lr", "0.01"]
    WORKERS, UPDATES = 2, 4
    EXTRA = ["--eval-every", "1", "--save-snapshots"]

    def test_defaults_are_the_papers(self):
        o = self.logs.meta["engine_options"]
        self.assertEqual((o["inner"], o["outer_lr"], o["outer_momentum"], o["outer_nesterov"]),
                         ("adamw", 0.7, 0.9, True))

    def test_replay_inner_adamw_and_outer_nesterov_by_hand(self):
        """Every round from the snapshots: each worker's H AdamW steps (its state kept
        across rounds) on its minibatches, then v <- 0.9 v + Delta,
        w <- w - 0.7 (Delta + 0.9 v), Delta = w - mean_i x_i."""
        snaps, meta = self.logs.snapshots()["params"], self.logs.meta
        opt = meta["data_options"]
        data = workload.make_synthetic(opt["samples"], opt["features"], opt["data_seed"])
        model = workload.MLP(data.features, meta["hidden"])
        xs = [torch.zeros_like(snaps[0]).requires_grad_(True) for _ in range(self.WORKERS)]
        inner = [torch.optim.AdamW([x], lr=0.01, weight_decay=0.0) for x in xs]
        v = torch.zeros_like(snaps[0])
        for u in range(1, self.UPDATES + 1):
            for i, x in enumerate(xs):
                with torch.no_grad():
                    x.copy_(snaps[u - 1])
                for h in range(2):
                    ids = workload.minibatch_ids(meta["seed"], i, 2 * (u - 1) + h, meta["batch"], data.train_samples)
                    model.loss_and_grad(x, *data.batch(data.x_train, ids))
                    inner[i].step()
            delta = snaps[u - 1] - (xs[0].detach() + xs[1].detach()) / 2
            v = 0.9 * v + delta
            torch.testing.assert_close(snaps[u], snaps[u - 1] - 0.7 * (delta + 0.9 * v), rtol=1e-5, atol=1e-6)


class EASGDAsyncTest(RunTest):
    ENGINE_ARGS = ["--engine", "easgd", "--period", "2"]

    def test_one_exchange_per_update_every_period_steps(self):
        for u, contribs in self.per_update().items():
            self.assertEqual(len(contribs), 1)
        by_worker = collections.defaultdict(list)
        for s in self.logs.steps:
            by_worker[s["worker"]].append(s)
        for w, steps in by_worker.items():
            for s in steps:
                if s["outcome"] in ("local", "pushed"):
                    self.assertEqual(s["outcome"] == "pushed", s["step"] % 2 == 1, s)
        for c in self.logs.contributions:  # staleness: exchanges by others since its last
            if c["outcome"] == "applied":
                own = [d["update"] for d in self.logs.contributions
                       if d["worker"] == c["worker"] and d["outcome"] == "applied" and d["update"] < c["update"]]
                self.assertEqual(c["version_read"], max(own, default=0))


class EASGDSyncTest(RunTest):
    ENGINE_ARGS = ["--engine", "easgd", "--period", "2", "--easgd-mode", "sync"]
    UPDATES = 8

    def test_every_worker_in_every_exchange(self):
        for u, contribs in self.per_update().items():
            self.assertEqual(sorted(c["worker"] for c in contribs), list(range(self.WORKERS)))
            self.assertTrue(all(c["staleness"] == 0 for c in contribs))


class ServerMemoryTest(unittest.TestCase):
    """The server holds a push's payload only while an update may still use it: holding
    every gradient ever received grows without bound, and each new receive buffer then
    lands on fresh pages (a run's push cost 0.85 ms more; docs/validation.md)."""

    def test_a_payload_is_released_once_applied_or_dropped(self):
        from types import SimpleNamespace
        from validation import transport as tp
        from validation.server import Server
        cfg = SimpleNamespace(workers=2, engine="sync", lr=0.1, momentum=0.0, nesterov=False,
                              aggregate="mean", eval_every=0, updates=0, time_limit=0, timeout=10)
        server = Server(cfg, tp.Clock(0), torch.zeros(4))
        server.sender.send = lambda *args, **kwargs: 0  # no process group here
        server.engine.start()

        def push(worker, job, version):
            m = SimpleNamespace(kind=tp.PUSH_GRAD, src=worker + 1, dst=0, job=job, step=job, version=version,
                                payload=torch.ones(4), t_send=0, t_recv=0, seq=0, bytes=96)
            server.handle(m)
            return server.pushes[-1]

        first = push(0, 0, 0)
        self.assertEqual(first.outcome, "pending")
        self.assertIsNotNone(first.payload)  # the update to come needs it
        second = push(1, 0, 0)
        self.assertEqual([first.outcome, second.outcome], ["applied", "applied"])
        self.assertEqual([first.payload, second.payload], [None, None])
        self.assertTrue(torch.equal(server.opt.params, torch.full((4,), -0.1)))
        stale = push(0, 1, 0)  # read version 0, the server is at 1: dropped
        self.assertEqual(stale.outcome, "dropped")
        self.assertIsNone(stale.payload)


class UpdateRulesTest(unittest.TestCase):
    """The server's arithmetic against hand computations."""

    def test_diloco_outer_nesterov_by_hand(self):
        opt = ServerOptimizer(torch.tensor([1.0, 2.0]), 0.7, 0.9, nesterov=True)
        opt.outer_step([(1, 0, torch.tensor([0.5, 2.5])), (0, 0, torch.tensor([0.0, 1.0]))])
        # mean [0.25, 1.75], Delta [0.75, 0.25], v = Delta, w -= 0.7 * 1.9 * Delta
        torch.testing.assert_close(opt.params, torch.tensor([0.0025, 1.6675]))
        opt.outer_step([(0, 1, torch.tensor([0.0, 1.0])), (1, 1, torch.tensor([0.0, 1.0]))])
        # Delta [0.0025, 0.6675], v = [0.6775, 0.8925], w -= 0.7 (Delta + 0.9 v)
        torch.testing.assert_close(opt.params, torch.tensor([-0.426075, 0.637975]))

    def test_local_sgd_outer_step_of_one_is_averaging(self):
        opt = ServerOptimizer(torch.tensor([3.0, -1.0]), 1.0)
        opt.outer_step([(0, 0, torch.tensor([1.0, 1.0])), (1, 0, torch.tensor([2.0, 3.0]))])
        torch.testing.assert_close(opt.params, torch.tensor([1.5, 2.0]))

    def test_combine_is_in_worker_order_then_mean(self):
        big, small = torch.tensor([1e8]), torch.tensor([1.0])
        parts = [(2, 0, small), (0, 0, big), (1, 0, -big)]
        # (1e8 + -1e8) + 1 = 1, whereas arrival order (1 + 1e8) - 1e8 = 0 in float32
        torch.testing.assert_close(combine(parts, mean=False), torch.tensor([1.0]))
        torch.testing.assert_close(combine(parts, mean=True), torch.tensor([1.0 / 3]))

    def test_server_momentum_is_heavy_ball(self):
        opt = ServerOptimizer(torch.tensor([0.0]), 0.1, 0.5)
        opt.step(torch.tensor([1.0]))
        opt.step(torch.tensor([1.0]))  # v = 1, then 1.5: w = -0.1 - 0.15
        torch.testing.assert_close(opt.params, torch.tensor([-0.25]))

    def test_easgd_exchanges_by_hand(self):
        c = torch.tensor([1.0])
        read = elastic_exchange_async(c, torch.tensor([3.0]), 0.25)
        torch.testing.assert_close((read, c), (torch.tensor([1.0]), torch.tensor([1.5])))
        x = torch.tensor([3.0])
        easgd_worker_step(x, read, torch.tensor([2.0]), 0.1, 0.25)  # 3 - 0.25 * 2 - 0.1 * 2
        torch.testing.assert_close(x, torch.tensor([2.3]))
        c = torch.tensor([0.0])
        read = elastic_exchange_sync(c, [(0, 0, torch.tensor([1.0])), (1, 0, torch.tensor([3.0]))], 0.5)
        torch.testing.assert_close((read, c), (torch.tensor([0.0]), torch.tensor([1.0])))

    def test_mlp_gradient_is_torch_nn(self):
        model = workload.MLP(5, [4])
        w = model.init(3).requires_grad_(True)
        x, y = torch.randn(7, 5), torch.randint(0, 10, (7,))
        loss, grad = model.loss_and_grad(w, x, y)
        net = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 10))
        torch.nn.utils.vector_to_parameters(w.detach(), net.parameters())
        ref = torch.nn.functional.cross_entropy(net(x), y)
        ref.backward()
        self.assertAlmostEqual(loss, float(ref), places=5)
        torch.testing.assert_close(grad, torch.cat([p.grad.flatten() for p in net.parameters()]))


class LauncherTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="asgd-reference-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_bad_input_exits_2_and_writes_nothing(self):
        out = os.path.join(self.tmp, "bad")
        for argv in (["--engine", "sync_backup", "--workers", "2", "--backups", "2"],
                     ["--engine", "async", "--compute", "gamma:1"],
                     ["--engine", "async", "--late", "drop"],
                     ["--engine", "k_async", "--workers", "2", "--k", "3"]):
            self.assertEqual(reference.run(runlogs.SMALL + argv + ["--out", out]), 2, argv)
            self.assertFalse(os.path.exists(out))
        os.makedirs(out)
        open(os.path.join(out, "keep"), "w").close()
        self.assertEqual(reference.run(runlogs.SMALL + ["--engine", "async", "--out", out]), 2)
        self.assertEqual(os.listdir(out), ["keep"])

    @staticmethod
    def alive(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(") ", 1)[1][0] != "Z"  # a zombie has ended
        except OSError:
            return False

    def assert_all_dead(self, pids):
        deadline = time.monotonic() + 10
        for pid in pids:
            while self.alive(pid):
                self.assertLess(time.monotonic(), deadline, f"process {pid} outlived the run")
                time.sleep(0.05)

    @staticmethod
    def run_json(out):
        with open(os.path.join(out, "run.json")) as f:
            return json.load(f)

    def test_a_failing_worker_fails_the_run_and_no_process_survives(self):
        out = os.path.join(self.tmp, "fail")
        t = time.monotonic()
        code = reference.run(runlogs.SMALL + ["--engine", "sync", "--workers", "2", "--compute", "constant:0.005",
                                              "--updates", "1000", "--out", out, "--inject-failure", "2:3"])
        self.assertEqual(code, 1)
        self.assertLess(time.monotonic() - t, 25)  # found at once, not by a timeout (30 s)
        meta = self.run_json(out)
        self.assertEqual(meta["status"], "failed")
        self.assertIn("worker1 (rank 2", meta["error"])
        self.assertIn("failure injected at step 3", meta["error"])
        self.assert_all_dead(meta["pids"])

    def test_a_relative_out_folder_runs(self):
        # the rendezvous file's URL once read "runs/..." as host "runs" and path "/..."
        cwd = os.getcwd()
        os.chdir(self.tmp)
        self.addCleanup(os.chdir, cwd)
        code = reference.run(runlogs.SMALL + ["--engine", "async", "--workers", "2", "--compute", "constant:0.002",
                                              "--updates", "5", "--out", os.path.join("rel", "out")])
        self.assertEqual(code, 0)
        self.assertEqual(self.run_json(os.path.join(self.tmp, "rel", "out"))["status"], "completed")

    def test_interrupting_the_launcher_ends_every_process(self):
        out = os.path.join(self.tmp, "int")
        timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        self.addCleanup(timer.cancel)
        code = reference.run(runlogs.SMALL + ["--engine", "async", "--workers", "2", "--compute", "constant:0.01",
                                              "--updates", "0", "--time-limit", "300", "--out", out])
        self.assertEqual(code, 130)
        meta = self.run_json(out)
        self.assertEqual(meta["status"], "interrupted")
        self.assert_all_dead(meta["pids"])

if __name__ == "__main__":
    unittest.main()
