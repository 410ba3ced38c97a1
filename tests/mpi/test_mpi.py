#!/usr/bin/env python3
"""MPI: sweeps over mpirun ranks and --shard, and the real distributed mode (asgdsim cluster).

Run by ctest when asgdsim is built with ASGD_MPI=ON (scripts/test.sh does). Every mpirun
runs on loopback with --oversubscribe; the environment gives ASGDSIM (the binary) and
MPIRUN. Standard library only.
"""
import csv
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

ASGDSIM = os.environ.get("ASGDSIM", "")
MPIRUN = os.environ.get("MPIRUN", "mpirun")
FASHION = "/usr/share/datasets/fashion-mnist"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")

# A sweep of small, quick runs (synthetic data, two engines x two rates x two seeds).
SWEEP = {
    "name": "sweep",
    "seed": 5,
    "repeats": 2,
    "model": {"type": "softmax"},
    "data": {"type": "synthetic", "features": 16, "train_samples": 1024, "test_samples": 256},
    "train": {"lr": 0.1, "batch_size": 16},
    "stop": {"epochs": 2},
    "eval": {"every": 0.5},
    "cluster": {"workers": 4},
    "sweep": {"train.lr": [0.05, 0.2]},
    "engines": [{"type": "async"}, {"type": "sync"}],
}

# The real-mode config: the MLP on a slice of Fashion-MNIST, 4 workers. The rate decays
# (cosine) to 0 at the end, so the final accuracy is a settled figure: at a constant rate
# it swings by several points from one evaluation to the next (0.70-0.83 over seeds 1-6),
# and a real run's update order, which the OS decides, is enough to land on a dip.
REAL = {
    "name": "real",
    "seed": 3,
    "model": {"type": "mlp", "hidden": [64]},
    "data": {"type": "fashion_mnist", "train_limit": 12000, "test_limit": 2000},
    "train": {"lr": 0.1, "batch_size": 32, "lr_schedule": {"type": "cosine", "total_epochs": 3}},
    "stop": {"epochs": 3},
    "eval": {"every": 0.5, "train_samples": 2000},
    "cluster": {"workers": 4},
    "real": {"worker_timeout": 20},
    "engines": [{"type": "async"}],
}

CSV_FILES = ("metrics.csv", "staleness.csv", "workers.csv")


def write_config(folder, cfg):
    path = os.path.join(folder, cfg["name"] + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def run(args, timeout=240, mpi=None):
    cmd = ([MPIRUN, "--oversubscribe"] + mpi if mpi else []) + [ASGDSIM] + args
    t = time.monotonic()
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    p.seconds = time.monotonic() - t
    return p


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def counted(messages):
    """summary.json's messages without mean_bandwidth: bytes over the run's time, which is
    wall-clock time in a cluster run and virtual time in the simulation."""
    return {k: v for k, v in messages.items() if k != "mean_bandwidth"}


def load(path):
    with open(path) as f:
        return json.load(f)


@unittest.skipUnless(ASGDSIM, "ASGDSIM is not set (ctest sets it)")
class Sweeps(unittest.TestCase):
    """mpirun -np 3 asgdsim run and --shard I/K give what one process gives."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="asgd-mpi-sweep-")
        cls.cfg = write_config(cls.tmp, SWEEP)
        cls.plain = run(["run", cls.cfg, "--out", os.path.join(cls.tmp, "plain"), "--quiet"])
        cls.mpi = run(["run", cls.cfg, "--out", os.path.join(cls.tmp, "mpi"), "--quiet"], mpi=["-np", "3"])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def folder(self, which):
        return os.path.join(self.tmp, which, "sweep")

    def assert_same_results(self, which):
        a, b = self.folder("plain"), self.folder(which)
        with open(os.path.join(a, "index.csv")) as f, open(os.path.join(b, "index.csv")) as g:
            self.assertEqual(f.read(), g.read())
        runs = [r["run_id"] for r in read_csv(os.path.join(a, "index.csv"))]
        self.assertEqual(len(runs), 8)
        for rid in runs:
            for name in CSV_FILES + ("config.json",):
                with open(os.path.join(a, rid, name), "rb") as f, open(os.path.join(b, rid, name), "rb") as g:
                    self.assertEqual(f.read(), g.read(), f"{rid}/{name} differs")
            sa, sb = load(os.path.join(a, rid, "summary.json")), load(os.path.join(b, rid, "summary.json"))
            sa.pop("wall_seconds")
            sb.pop("wall_seconds")
            self.assertEqual(sa, sb)
        return runs

    def test_mpirun_gives_the_same_files_as_one_process(self):
        self.assertEqual(self.plain.returncode, 0, self.plain.stderr)
        self.assertEqual(self.mpi.returncode, 0, self.mpi.stderr)
        runs = self.assert_same_results("mpi")
        # run k was made by rank k mod 3
        for k, rid in enumerate(runs):
            meta = load(os.path.join(self.folder("mpi"), rid, "meta.json"))
            self.assertEqual(meta["shard"], f"{k % 3}/3")
            self.assertIn("mpirun -np 3", meta["command_line"])

    def test_shards_one_after_another_give_the_same_files(self):
        out = os.path.join(self.tmp, "shards")
        first = run(["run", self.cfg, "--out", out, "--quiet", "--shard", "0/2"])
        self.assertEqual(first.returncode, 0, first.stderr)
        statuses = [r["status"] for r in read_csv(os.path.join(self.folder("shards"), "index.csv"))]
        self.assertEqual(statuses, ["completed", "pending"] * 4)  # the other shard's runs are not made yet
        second = run(["run", self.cfg, "--out", out, "--quiet", "--shard", "1/2"])
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assert_same_results("shards")

    def test_bad_shard_is_a_usage_error(self):
        for bad in ("2/2", "1", "a/b", "-1/3", "0/0"):
            p = run(["run", self.cfg, "--out", os.path.join(self.tmp, "bad"), "--shard", bad])
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn(f"--shard '{bad}'", p.stderr)


@unittest.skipUnless(ASGDSIM and os.path.isdir(FASHION), "needs ASGDSIM and Fashion-MNIST")
class RealRuns(unittest.TestCase):
    """asgdsim cluster: the engines on 5 real processes (a server and 4 workers)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="asgd-mpi-real-")
        cfg = dict(REAL, engines=[{"type": "async"}, {"type": "sync"}, {"type": "sync_backup", "backups": 1},
                                  {"type": "easgd"}, {"type": "easgd", "mode": "sync", "name": "easgd_sync"}, {"type": "ssp", "bound": 2},
                                  {"type": "local_sgd", "steps": 4}, {"type": "diloco", "steps": 4},
                                  {"type": "k_batch_sync", "k": 6, "late": "drop"},
                                  {"type": "k_async", "k": 3, "batch": True, "staleness_weight": "inverse_sqrt"},
                                  {"type": "ringmaster", "delay_threshold": 3},
                                  {"type": "async_local_sgd", "steps": 4, "nesterov_period": 4,
                                   "dynamic_local_updates": True}])
        cls.cfg = write_config(cls.tmp, cfg)
        cls.out = os.path.join(cls.tmp, "out")
        cls.real = run(["cluster", cls.cfg, "--out", cls.out], mpi=["-np", "5"])
        cls.sim = run(["run", cls.cfg, "--out", cls.out, "--quiet"])
        # the single-replica warm-up (one worker, one step at a time), then sync: no order
        # is left to the OS, so real and simulated agree exactly here too
        warm = dict(REAL, name="warm", engines=[{"type": "sync"}],
                    train=dict(REAL["train"], single_replica_epochs=0.5))
        cls.warm_cfg = write_config(cls.tmp, warm)
        cls.warm_real = run(["cluster", cls.warm_cfg, "--out", cls.out, "--quiet"], mpi=["-np", "5"])
        cls.warm_sim = run(["run", cls.warm_cfg, "--out", cls.out, "--quiet"])
        # async paced by the simulated step times (real.delay_scale 1: a step lasts at least
        # its drawn compute time, about 10 ms, sleeping for the rest), so the workers' steps
        # overlap as in the simulation however loaded the machine is; flat out on 2 busy
        # cores, the OS may run the 4 workers one after another (mean staleness near 1)
        paced = dict(REAL, name="paced", engines=[{"type": "async"}], stop={"epochs": 1},
                     real=dict(REAL["real"], delay_scale=1.0))
        cls.paced_cfg = write_config(cls.tmp, paced)
        cls.paced_real = run(["cluster", cls.paced_cfg, "--out", cls.out, "--quiet"], mpi=["-np", "5"])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def summaries(self, run_id):
        return (load(os.path.join(self.out, "real", run_id, "summary.json")),
                load(os.path.join(self.out, "real-cluster", run_id, "summary.json")))

    def test_every_engine_completes_with_the_files_of_a_simulated_run(self):
        self.assertEqual(self.real.returncode, 0, self.real.stderr)
        self.assertEqual(self.sim.returncode, 0, self.sim.stderr)
        index = read_csv(os.path.join(self.out, "real-cluster", "index.csv"))
        self.assertEqual([r["status"] for r in index], ["completed"] * 12)
        for r in index:
            folder = os.path.join(self.out, "real-cluster", r["run_id"])
            sim_folder = os.path.join(self.out, "real", r["run_id"])
            self.assertEqual(sorted(os.listdir(folder)), sorted(os.listdir(sim_folder)))
            self.assertEqual(load(os.path.join(folder, "summary.json"))["mode"], "cluster")
            with open(os.path.join(folder, "metrics.csv")) as f, open(os.path.join(sim_folder, "metrics.csv")) as g:
                self.assertEqual(f.readline(), g.readline())  # the same columns

    def test_async_trains_to_the_simulated_accuracy_with_staleness_near_n_minus_1(self):
        sim, real = self.summaries("async-seed3")
        self.assertEqual(real["gradients"], sim["gradients"])
        self.assertAlmostEqual(real["final"]["test_accuracy"], sim["final"]["test_accuracy"], delta=0.03)
        self.assertGreater(real["final"]["test_accuracy"], 0.7)
        # every worker always has one gradient in flight, so on average the other 3 land
        # during its step: mean staleness N - 1 = 3, measured for real (on the paced run)
        self.assertEqual(self.paced_real.returncode, 0, self.paced_real.stderr)
        paced = load(os.path.join(self.out, "paced-cluster", "async-seed3", "summary.json"))
        self.assertGreater(paced["staleness"]["mean"], 2.5)
        self.assertLess(paced["staleness"]["mean"], 3.5)

    def assert_same_metrics_but_time(self, name, run_id):
        sim = read_csv(os.path.join(self.out, name, run_id, "metrics.csv"))
        real = read_csv(os.path.join(self.out, name + "-cluster", run_id, "metrics.csv"))
        self.assertEqual(len(sim), len(real))
        self.assertGreater(len(sim), 3)
        for a, b in zip(sim, real):
            a.pop("time")
            b.pop("time")
            self.assertEqual(a, b)

    def test_sync_for_real_computes_what_the_simulator_computes(self):
        # the same engine, the same ids in worker order, the same kernels, the same
        # summation order: every column agrees to the last bit but the wall-clock time
        self.assert_same_metrics_but_time("real", "sync-seed3")

    def test_warm_up_then_sync_for_real_computes_what_the_simulator_computes(self):
        self.assertEqual(self.warm_real.returncode, 0, self.warm_real.stderr)
        self.assertEqual(self.warm_sim.returncode, 0, self.warm_sim.stderr)
        self.assert_same_metrics_but_time("warm", "sync-seed3")
        for name in ("warm", "warm-cluster"):
            s = load(os.path.join(self.out, name, "sync-seed3", "summary.json"))
            self.assertEqual(s["engine_config"]["single_replica_epochs"], 0.5, name)

    def test_the_other_engines_train_to_the_simulated_accuracy(self):
        # their arrival order is the OS's, so they agree within a tolerance
        for rid in ("sync_backup-seed3", "easgd-seed3", "easgd_sync-seed3", "ssp-seed3", "local_sgd-seed3",
                    "diloco-seed3", "k_batch_sync-seed3", "k_async-seed3", "ringmaster-seed3",
                    "async_local_sgd-seed3"):
            sim, real = self.summaries(rid)
            self.assertEqual(real["status"], "completed", rid)
            self.assertAlmostEqual(real["final"]["test_accuracy"], sim["final"]["test_accuracy"], delta=0.04, msg=rid)
        sim, real = self.summaries("easgd_sync-seed3")  # everyone exchanges together
        self.assertEqual(real["staleness"]["mean"], 0)
        sim, real = self.summaries("ssp-seed3")  # no worker runs more than `bound` clocks ahead
        self.assertLessEqual(real["staleness"]["max"], sim["staleness"]["max"] + 4)
        sim, real = self.summaries("ringmaster-seed3")  # a delay of R = 3 or more is never applied
        self.assertLess(real["staleness"]["max"], 3)


@unittest.skipUnless(ASGDSIM and os.path.isdir(FASHION), "needs ASGDSIM and Fashion-MNIST")
class TimingReplay(unittest.TestCase):
    """real.delay_scale = 1: each real step lasts the compute time the simulator draws for it."""

    def test_real_sync_takes_the_simulated_time(self):
        tmp = tempfile.mkdtemp(prefix="asgd-mpi-delay-")
        try:
            cfg = dict(REAL, name="delay", engines=[{"type": "sync"}], real={"delay_scale": 1, "worker_timeout": 20},
                       stop={"epochs": 1})
            path = write_config(tmp, cfg)
            out = os.path.join(tmp, "out")
            real = run(["cluster", path, "--out", out, "--quiet"], mpi=["-np", "5"])
            self.assertEqual(real.returncode, 0, real.stderr)
            sim = run(["run", path, "--out", out, "--quiet"])
            self.assertEqual(sim.returncode, 0, sim.stderr)
            t_sim = load(os.path.join(out, "delay", "sync-seed3", "summary.json"))["time"]
            t_real = load(os.path.join(out, "delay-cluster", "sync-seed3", "summary.json"))["time"]
            # every iteration waits for the slowest of the same 4 draws; real adds only the
            # messages and the arithmetic (measured here: +5%)
            self.assertGreater(t_real, t_sim * 0.99)
            self.assertLess(t_real, t_sim * 1.5)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@unittest.skipUnless(ASGDSIM and os.path.isdir(FASHION), "needs ASGDSIM and Fashion-MNIST")
class KilledWorker(unittest.TestCase):
    """cluster.failures.events kills a worker process for real (SIGKILL) mid-run."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="asgd-mpi-kill-")
        self.out = os.path.join(self.tmp, "out")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def cluster(self, engine):
        cfg = dict(REAL, name="kill", engines=[{"type": engine}],
                   cluster={"workers": 4, "failures": {"events": [{"worker": 1, "at": 0.3}]}},
                   real={"worker_timeout": 2, "delay_scale": 1})
        # --enable-recovery: without it, mpirun ends the whole job when one process dies
        return run(["cluster", write_config(self.tmp, cfg), "--out", self.out], timeout=120,
                   mpi=["--enable-recovery", "-np", "5"])

    def test_async_goes_on_without_it_and_reports_it(self):
        p = self.cluster("async")
        s = load(os.path.join(self.out, "kill-cluster", "async-seed3", "summary.json"))
        self.assertEqual(s["status"], "completed", p.stderr)
        self.assertEqual(s["worker_failures"], 1)
        self.assertIn("worker 1 (rank 2) sent nothing for 2 s", s["note"])
        self.assertIn("worker 1 (rank 2)", p.stderr)
        workers = read_csv(os.path.join(self.out, "kill-cluster", "async-seed3", "workers.csv"))
        self.assertEqual(workers[1]["lost"], "1")
        self.assertGreater(float(workers[1]["down_time"]), 0)
        # the other three carry on: staleness near their N - 1 = 2
        self.assertLess(s["staleness"]["mean"], 2.6)

    def test_sync_goes_on_with_the_live_workers_as_simulated(self):
        p = self.cluster("sync")  # (run() fails the test on its timeout)
        self.assertIn("worker 1 (rank 2) sent nothing for 2 s", p.stderr)
        s = load(os.path.join(self.out, "kill-cluster", "sync-seed3", "summary.json"))
        self.assertEqual(s["status"], "completed", p.stderr)
        self.assertEqual(s["worker_failures"], 1)
        self.assertEqual(s["lost_gradients"], 1)
        self.assertLess(p.seconds, 60)
        # the dying rank's last pull was sent (counted); its push never left (not counted)
        m = s["messages"]
        self.assertEqual(m["to_workers"], m["to_server"] + 1)
        self.assertEqual(m["bytes_to_workers"] / m["to_workers"], m["bytes_to_server"] / m["to_server"])
        self.assertEqual(read_csv(os.path.join(self.out, "kill-cluster", "index.csv"))[0]["status"], "completed")
        # after the death each iteration aggregates the 3 live workers' gradients
        metrics = read_csv(os.path.join(self.out, "kill-cluster", "sync-seed3", "metrics.csv"))
        self.assertGreater(int(metrics[-1]["updates"]), 0)


@unittest.skipUnless(ASGDSIM, "ASGDSIM is not set (ctest sets it)")
class Partitions(unittest.TestCase):
    """data.partition: the MPI server hands each worker rank the ids of its own part, as the simulator does."""

    def test_sync_on_shards_computes_what_the_simulator_computes(self):
        tmp = tempfile.mkdtemp(prefix="asgd-mpi-part-")
        try:
            cfg = dict(SWEEP, name="part", repeats=1, cluster={"workers": 2}, engines=[{"type": "sync"}],
                       data=dict(SWEEP["data"], partition="shards"))
            cfg.pop("sweep")
            path, out = write_config(tmp, cfg), os.path.join(tmp, "o")
            real = run(["cluster", path, "--out", out, "--quiet"], mpi=["-np", "3"])
            self.assertEqual(real.returncode, 0, real.stderr)
            sim = run(["run", path, "--out", out, "--quiet"])
            self.assertEqual(sim.returncode, 0, sim.stderr)
            a, b = os.path.join(out, "part", "sync-seed5"), os.path.join(out, "part-cluster", "sync-seed5")
            with open(os.path.join(a, "partition.csv")) as f, open(os.path.join(b, "partition.csv")) as g:
                self.assertEqual(f.read(), g.read())
            rows_a, rows_b = read_csv(os.path.join(a, "metrics.csv")), read_csv(os.path.join(b, "metrics.csv"))
            self.assertEqual(len(rows_a), len(rows_b))
            for x, y in zip(rows_a, rows_b):
                x.pop("time")
                y.pop("time")
                self.assertEqual(x, y)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@unittest.skipUnless(ASGDSIM, "ASGDSIM is not set (ctest sets it)")
class MessageCounts(unittest.TestCase):
    """summary.json's messages for a real run: the engine's pulls, replies and pushes that
    really left, each at the simulator's size (docs/cluster.md, "Messages"). N workers,
    stop.updates U, a softmax of P = 16 x 10 + 10 parameters: every message P x 4 bytes."""

    N, U, P = 3, 40, 16 * 10 + 10

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="asgd-mpi-msg-")
        cfg = dict(SWEEP, name="msg", repeats=1, stop={"updates": cls.U}, eval={"every": 20},
                   cluster={"workers": cls.N},
                   engines=[{"type": "async"}, {"type": "sync"}, {"type": "local_sgd", "steps": 3},
                            {"type": "easgd", "mode": "sync", "name": "easgd_sync"}])
        cfg.pop("sweep")
        path = write_config(cls.tmp, cfg)
        cls.out = os.path.join(cls.tmp, "o")
        cls.real = run(["cluster", path, "--out", cls.out, "--quiet"], mpi=["-np", str(cls.N + 1)])
        cls.sim = run(["run", path, "--out", cls.out, "--quiet"])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def summaries(self, run_id):
        self.assertEqual(self.real.returncode, 0, self.real.stderr)
        self.assertEqual(self.sim.returncode, 0, self.sim.stderr)
        return (load(os.path.join(self.out, "msg", run_id, "summary.json")),
                load(os.path.join(self.out, "msg-cluster", run_id, "summary.json")))

    def assert_sizes(self, m):
        self.assertEqual(m["bytes_to_server"], m["to_server"] * self.P * 4)
        self.assertEqual(m["bytes_to_workers"], m["to_workers"] * self.P * 4)

    def test_async_counts_the_pulls_served_and_the_pushes_sent(self):
        sim, real = self.summaries("async-seed5")
        m, N, U = real["messages"], self.N, self.U
        self.assertEqual(real["updates"], U)
        # a pull to each worker at the start and one after each applied gradient but the
        # last; every applied gradient was a push, and so is each of the N - 1 steps in
        # flight at the stop: a real worker cannot be cut off, it finishes and sends
        self.assertEqual(m["to_workers"], U + N - 1)
        self.assertEqual(m["to_server"], U + N - 1)
        self.assert_sizes(m)
        # the simulator serves the same pulls; of the pushes in flight it counts only those
        # already on the wire at the stop (a push still computing is never sent there)
        self.assertEqual(sim["messages"]["to_workers"], m["to_workers"])
        self.assertGreaterEqual(sim["messages"]["to_server"], U)
        self.assertLessEqual(sim["messages"]["to_server"], m["to_server"])

    def test_sync_counts_n_pulls_and_n_pushes_an_iteration_as_simulated(self):
        sim, real = self.summaries("sync-seed5")
        m = real["messages"]
        self.assertEqual(real["updates"], self.U)
        self.assertEqual(m["to_workers"], self.N * self.U)
        self.assertEqual(m["to_server"], self.N * self.U)
        self.assert_sizes(m)
        self.assertEqual(counted(m), counted(sim["messages"]))

    def test_local_steps_round_trips_are_not_engine_messages(self):
        # a real local SGD or EASGD worker makes a round trip every step (its parameters
        # live on the server), but only the steps that declare a message count: the
        # simulator's numbers exactly, N of each per round or exchange
        for rid in ("local_sgd-seed5", "easgd_sync-seed5"):
            sim, real = self.summaries(rid)
            m = real["messages"]
            self.assertEqual(real["updates"], self.U, rid)
            self.assertEqual(m["to_workers"], self.N * self.U, rid)
            self.assertEqual(m["to_server"], self.N * self.U, rid)
            self.assertGreater(real["gradients"], m["to_server"], rid)  # the local steps
            self.assertEqual(counted(m), counted(sim["messages"]), rid)


@unittest.skipUnless(ASGDSIM, "ASGDSIM is not set (ctest sets it)")
class ClusterRefusals(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="asgd-mpi-bad-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_what_it_cannot_run_is_named_once_with_its_path(self):
        cfg = dict(SWEEP, name="bad", engines=[{"type": "ssp"}], staleness={"mode": "fixed", "tau": 2})
        cfg.pop("sweep")
        p = run(["cluster", write_config(self.tmp, cfg), "--out", os.path.join(self.tmp, "o")], mpi=["-np", "3"])
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(p.stderr.count("invalid config"), 1, p.stderr)  # rank 0 says it, once
        self.assertNotIn("engine.type", p.stderr)  # every engine runs for real
        self.assertIn("staleness.mode", p.stderr)
        self.assertIn("cluster.workers: 4, but the MPI job has 2 worker rank(s): start it with mpirun -np 5", p.stderr)

    def test_cancellation_is_refused_naming_late(self):
        # a rank computing cannot be interrupted: late "cancel" is simulated only
        for engine in ({"type": "sync_backup", "late": "cancel"}, {"type": "k_batch_sync", "k": 2},
                       {"type": "ringmaster", "late": "cancel"}):
            cfg = dict(SWEEP, name="cancel", engines=[engine], cluster={"workers": 2})
            cfg.pop("sweep")
            p = run(["cluster", write_config(self.tmp, cfg), "--out", os.path.join(self.tmp, "o")], mpi=["-np", "3"])
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("engine.late: \"cancel\"", p.stderr)
        # nor cut one off at a time allowance (MindFlayer)
        cfg = dict(SWEEP, name="allowance", engines=[{"type": "mindflayer", "budget": 0.01}], cluster={"workers": 2})
        cfg.pop("sweep")
        p = run(["cluster", write_config(self.tmp, cfg), "--out", os.path.join(self.tmp, "o")], mpi=["-np", "3"])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("engine.budget: mindflayer cuts an attempt off", p.stderr)

    def test_a_server_that_cannot_start_the_runs_lets_the_workers_go_at_once(self):
        # the experiment folder cannot be made: the workers, waiting for their first run,
        # get the exit code at once instead of waiting out real.worker_timeout
        cfg = dict(SWEEP, name="nofolder", engines=[{"type": "sync"}], cluster={"workers": 2},
                   real={"worker_timeout": 30})
        cfg.pop("sweep")
        blocker = os.path.join(self.tmp, "a-file")
        with open(blocker, "w") as f:
            f.write("not a folder")
        p = run(["cluster", write_config(self.tmp, cfg), "--out", os.path.join(blocker, "o")], mpi=["-np", "3"])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("cannot create folder", p.stderr)
        self.assertNotIn("sent nothing", p.stderr)
        self.assertLess(p.seconds, 20)

    def test_measured_compute_is_refused_up_front(self):
        # issue 42: it failed at the first step (exit 1, a failed run folder); it does not calibrate
        cfg = dict(SWEEP, name="measured", engines=[{"type": "async"}],
                   cluster=dict(SWEEP["cluster"], workers=2, compute={"dist": "measured"}))
        cfg.pop("sweep")
        out = os.path.join(self.tmp, "o")
        p = run(["cluster", write_config(self.tmp, cfg), "--out", out], mpi=["-np", "3"])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("cluster.compute.dist: \"measured\" replays a trace that `asgdsim run` measures", p.stderr)
        self.assertFalse(os.path.exists(out))

    def test_a_population_is_refused_up_front(self):
        # issue 45: a real rank cannot stand for a population's clients; async ran ignoring them
        cfg = dict(SWEEP, name="population", engines=[{"type": "async"}], clients={"count": 10},
                   cluster=dict(SWEEP["cluster"], workers=2))
        cfg.pop("sweep")
        out = os.path.join(self.tmp, "o")
        p = run(["cluster", write_config(self.tmp, cfg), "--out", out], mpi=["-np", "3"])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("clients.count: 10: a population of clients is simulated only", p.stderr)
        self.assertFalse(os.path.exists(out))

    def test_simulated_links_and_collectives_are_refused_with_their_paths(self):
        cfg = dict(SWEEP, name="topo", engines=[{"type": "sync", "comm": "allreduce"}],
                   cluster=dict(SWEEP["cluster"], workers=2,
                                topology={"boxes": 1, "per_box": 2}))
        cfg.pop("sweep")
        p = run(["cluster", write_config(self.tmp, cfg), "--out", os.path.join(self.tmp, "o")], mpi=["-np", "3"])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("cluster.topology.type: \"boxes\": its links are simulated only", p.stderr)
        self.assertIn("engine.comm: \"allreduce\"", p.stderr)
        cfg = dict(SWEEP, name="streaming", engines=[{"type": "streaming_diloco", "steps": 4}], cluster={"workers": 2})
        cfg.pop("sweep")
        p = run(["cluster", write_config(self.tmp, cfg), "--out", os.path.join(self.tmp, "o")], mpi=["-np", "3"])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("engine.type: \"streaming_diloco\" all-reduces fragments", p.stderr)

    def test_runs_of_another_sweep_are_refused_and_supersede_moves_them_aside(self):
        # as for `asgdsim run`: the analysis reads every run folder in the experiment folder,
        # so the runs of an earlier engine list must not stay beside this one's
        cfg = dict(SWEEP, name="twice", engines=[{"type": "sync"}], cluster={"workers": 2}, repeats=1)
        cfg.pop("sweep")
        out = os.path.join(self.tmp, "o")
        exp = os.path.join(out, "twice-cluster")
        first = run(["cluster", write_config(self.tmp, cfg), "--out", out, "--quiet"], mpi=["-np", "3"])
        self.assertEqual(first.returncode, 0, first.stderr)
        old_runs = sorted(d for d in os.listdir(exp) if os.path.isdir(os.path.join(exp, d)))
        self.assertEqual(len(old_runs), 1, old_runs)
        with open(os.path.join(exp, "experiment.json")) as f:
            before = f.read()
        other = write_config(self.tmp, dict(cfg, engines=[{"type": "async"}]))
        p = run(["cluster", other, "--out", out, "--quiet"], mpi=["-np", "3"])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("1 run folder that this config does not make (" + old_runs[0], p.stderr)
        with open(os.path.join(exp, "experiment.json")) as f:
            self.assertEqual(f.read(), before)  # nothing written before the refusal
        p = run(["cluster", other, "--out", out, "--quiet", "--supersede"], mpi=["-np", "3"])
        self.assertEqual(p.returncode, 0, p.stderr)
        aside = [d for d in os.listdir(exp) if d.startswith("superseded-")]
        self.assertEqual(len(aside), 1, os.listdir(exp))
        self.assertTrue(os.path.isfile(os.path.join(exp, aside[0], old_runs[0], "summary.json")))
        with open(os.path.join(exp, aside[0], "experiment.json")) as f:
            self.assertEqual(f.read(), before)
        self.assertFalse(os.path.exists(os.path.join(exp, old_runs[0])))

    def test_a_rerun_skips_finished_runs_and_remakes_one_missing_a_file(self):
        # the resume rule of `asgdsim run`: a finished run is skipped only when its result
        # files are all there
        cfg = dict(SWEEP, name="again", engines=[{"type": "sync"}], cluster={"workers": 2}, repeats=2)
        cfg.pop("sweep")
        path = write_config(self.tmp, cfg)
        out = os.path.join(self.tmp, "o")
        exp = os.path.join(out, "again-cluster")
        first = run(["cluster", path, "--out", out, "--quiet"], mpi=["-np", "3"])
        self.assertEqual(first.returncode, 0, first.stderr)
        runs = sorted(d for d in os.listdir(exp) if os.path.isdir(os.path.join(exp, d)))
        self.assertEqual(len(runs), 2, runs)
        with open(os.path.join(exp, runs[1], "metrics.csv")) as f:
            metrics = f.read()
        os.remove(os.path.join(exp, runs[1], "workers.csv"))
        again = run(["cluster", path, "--out", out], mpi=["-np", "3"])
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn(runs[0] + ": completed earlier, skipped (--rerun re-runs it)", again.stdout)
        self.assertIn(runs[1] + ": completed earlier, but workers.csv is missing: re-running it", again.stdout)
        self.assertTrue(os.path.isfile(os.path.join(exp, runs[1], "workers.csv")))
        with open(os.path.join(exp, runs[1], "metrics.csv")) as f:
            self.assertEqual(len(f.read().splitlines()), len(metrics.splitlines()))  # remade whole, not appended

    def test_without_mpirun_it_says_how_to_start_it(self):
        cfg = dict(SWEEP, name="plain")
        p = run(["cluster", write_config(self.tmp, cfg), "--out", os.path.join(self.tmp, "o")])
        self.assertEqual(p.returncode, 2)  # a usage error (issue 17)
        self.assertIn("mpirun -np N+1", p.stderr)


def mpmd(parts, timeout=120, extra=None):
    """mpirun with one argument list per rank group: [(ranks, args), ...]."""
    cmd = [MPIRUN, "--oversubscribe"] + (extra or [])
    for k, (n, args) in enumerate(parts):
        cmd += ([":"] if k else []) + ["-np", str(n), ASGDSIM] + args
    t = time.monotonic()
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    p.seconds = time.monotonic() - t
    return p


def rank_pid(rank, marker, deadline=60):
    """The pid of the asgdsim process of MPI rank `rank` whose command line holds `marker`."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
                if marker.encode() not in cmdline or b"mpirun" in cmdline.split(b"\0")[0]:
                    continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
                return int(pid)
        time.sleep(0.1)
    raise AssertionError(f"no process of rank {rank}")


@unittest.skipUnless(ASGDSIM, "ASGDSIM is not set (ctest sets it)")
class RanksAgree(unittest.TestCase):
    """Every rank must run the same config: a difference on one rank is exit 2 on all, named."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="asgd-mpi-agree-")
        cfg = dict(SWEEP, name="agree", engines=[{"type": "async"}], cluster={"workers": 2})
        cfg.pop("sweep")
        self.cfg = write_config(self.tmp, cfg)
        self.out = os.path.join(self.tmp, "o")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self, command):
        base = [command, self.cfg, "--out", self.out, "--quiet"]
        p = mpmd([(2, base), (1, base + ["--set", "train.lr=0.5"])])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.count("were not started alike"), 1, p.stderr)  # rank 0 says it, once
        self.assertIn("rank 2: config.train.lr is 0.5 here, 0.1 on rank 0", p.stderr)
        self.assertNotIn("rank 1:", p.stderr)
        self.assertFalse(os.path.exists(self.out))  # nothing was run
        self.assertLess(p.seconds, 60)

    def test_an_extra_set_on_one_rank_is_exit_2_on_every_rank_for_cluster(self):
        self.check("cluster")

    def test_an_extra_set_on_one_rank_is_exit_2_on_every_rank_for_run(self):
        self.check("run")

    def test_a_bad_set_on_one_rank_is_named_with_its_error(self):
        base = ["cluster", self.cfg, "--out", self.out, "--quiet"]
        p = mpmd([(1, base), (2, base + ["--set", "model.dim=500"])])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("rank 1: could not read its config", p.stderr)
        self.assertIn("rank 2: could not read its config", p.stderr)

    def check_usage_error_on_one_rank(self, command, extra, words):
        # Issue 31, item 6: the rank refused its command line before the configs were
        # compared; the others used to wait 60 s for its heartbeat and say only that it
        # stopped answering, and its own error was never shown.
        base = [command, self.cfg, "--out", self.out, "--quiet"]
        p = mpmd([(2, base), (1, base + extra)], timeout=90)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.count("were not started alike"), 1, p.stderr)
        self.assertEqual(p.stderr.count("rank 2: refused its command line: " + words), 1, p.stderr)
        self.assertNotIn("stopped answering", p.stderr)
        self.assertFalse(os.path.exists(self.out))
        self.assertLess(p.seconds, 30)

    def test_a_usage_error_on_one_rank_is_named_once_for_cluster(self):
        self.check_usage_error_on_one_rank("cluster", ["--threads", "4"], "asgdsim cluster runs one process per worker")

    def test_an_unknown_option_on_one_rank_is_named_once_for_run(self):
        self.check_usage_error_on_one_rank("run", ["--no-such-option"], "unrecognised option '--no-such-option'")

    def test_other_data_behind_the_same_config_is_exit_2_naming_the_shapes(self):
        # the same config text in two folders, each beside its own data file: the resolved
        # configs agree, the data do not
        folders = []
        for k, rows in enumerate((40, 60)):
            d = os.path.join(self.tmp, f"host{k}")
            os.makedirs(d)
            with open(os.path.join(d, "train.svm"), "w") as f:
                for i in range(rows):
                    f.write(f"{1 if i % 2 else -1} 1:{i % 7 + 1} 3:{(i * 3) % 5}\n")
            cfg = dict(name="shape", seed=1, model={"type": "sparse_logistic"},
                       data={"type": "svmlight", "path": "train.svm", "features": 4},
                       train={"lr": 0.1, "batch_size": 4}, stop={"epochs": 1}, cluster={"workers": 2},
                       real={"worker_timeout": 20}, engines=[{"type": "async"}])
            folders.append(write_config(d, cfg))
        p = mpmd([(2, ["cluster", folders[0], "--out", self.out, "--quiet"]),
                  (1, ["cluster", folders[1], "--out", self.out, "--quiet"])])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("worker 1 (rank 2): its data or model differ from rank 0's", p.stderr)
        self.assertIn("train 54 x", p.stderr)  # 60 rows, 10 % held out: rank 2's own shape
        s = load(os.path.join(self.out, "shape-cluster", "async-seed1", "summary.json"))
        self.assertEqual(s["status"], "failed")
        self.assertLess(p.seconds, 60)


@unittest.skipUnless(ASGDSIM, "ASGDSIM is not set (ctest sets it)")
class DeadRanks(unittest.TestCase):
    """A rank killed mid-job: the others leave in bounded time with a clear error, and
    what was written stays (loopback, mpirun --enable-recovery, real.worker_timeout 3 s)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="asgd-mpi-dead-")
        self.out = os.path.join(self.tmp, "o")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def kill_rank(self, cfg, command, rank, bound=90):
        """Starts `asgdsim command` on 3 ranks, kills `rank` 3 s in, and returns stderr once
        every rank has left (failing past `bound` seconds). mpirun --enable-recovery exits
        0 whatever the ranks' codes, so the tests read stderr and the files."""
        path = write_config(self.tmp, cfg)
        cmd = [MPIRUN, "--oversubscribe", "--enable-recovery", "-np", "3", ASGDSIM, command, path, "--out", self.out,
               "--quiet"]
        self.proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pid = rank_pid(rank, path)
        time.sleep(3)
        os.kill(pid, 9)
        return self.finish(bound)[1]

    def finish(self, bound):
        t = time.monotonic()
        try:
            out, err = self.proc.communicate(timeout=bound)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            self.fail(f"still running {bound} s after the kill:\n{err}")
        return out, err, time.monotonic() - t

    def test_a_rank_killed_during_run_does_not_leave_the_others_waiting(self):
        # rank 1's runs are long, the others' short: ranks 0 and 2 wait for it in the
        # final reduction when it is killed
        cfg = dict(SWEEP, name="deadrun", repeats=1, real={"worker_timeout": 3}, stop={"epochs": 1},
                   sweep={"stop.epochs": [1, 100000, 2]}, engines=[{"type": "async"}])
        err = self.kill_rank(cfg, "run", 1)
        self.assertIn("rank 1 stopped answering (no heartbeat for 3 s", err)
        index = read_csv(os.path.join(self.out, "deadrun", "index.csv"))
        self.assertEqual([r["status"] for r in index][0::2], ["completed", "completed"])
        self.assertNotEqual(index[1]["status"], "completed")

    def test_workers_leave_when_the_server_is_killed(self):
        cfg = dict(SWEEP, name="deadserver", stop={"epochs": 1000}, cluster={"workers": 2},
                   real={"worker_timeout": 3}, engines=[{"type": "async"}])
        cfg.pop("sweep")
        err = self.kill_rank(cfg, "cluster", 0)
        self.assertIn("the server (rank 0) sent nothing for 3 s (real.worker_timeout)", err)
        self.assertEqual(err.count("sent nothing for 3 s"), 2, err)  # each worker rank says it


if __name__ == "__main__":
    unittest.main()
