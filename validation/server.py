"""The reference's parameter server (rank 0): holds the model of record, serves parameters,
receives every push, and applies each engine's rule as docs/algorithms.md states it.

The server is one main loop over the pushes the receiver thread hands it, in arrival
order. Each engine below is only its protocol: on_push says what a push does (buffer,
apply, drop, cancel the steps under way) and which workers are then sent parameters. The
bookkeeping they share is Server's: jobs (one per PARAMS sent to a worker), who is busy,
the cancelled jobs, the updates and their logs.

Nothing is evaluated here while the run goes on: at every eval point the parameters are
copied (a snapshot), and the snapshots are evaluated after the workers have finished.
"""

import queue

import torch

from . import transport as tp
from .update_rules import (ServerOptimizer, combine, elastic_exchange_async,
                           elastic_exchange_sync)
from .worker import ProtocolError, message_row

UPDATE_COLUMNS = ["update", "t_start", "t_applied", "combine_s", "apply_s", "contributions",
                  "kind"]
CONTRIBUTION_COLUMNS = ["worker", "job", "step", "version_read", "version_at_arrival",
                        "t_send", "t_recv", "t_handled", "outcome", "update", "staleness"]


class Push:
    """A push as the server sees it (one row of contributions.csv)."""

    def __init__(self, m, t_handled, version_now):
        self.worker, self.job, self.step, self.version = m.src - 1, m.job, m.step, m.version
        self.t_send, self.t_recv, self.t_handled = m.t_send, m.t_recv, t_handled
        self.version_at_arrival = version_now
        self.payload = m.payload
        self.outcome, self.update = None, None

    def row(self):
        staleness = self.update - 1 - self.version if self.update is not None else ""
        return [self.worker, self.job, self.step, self.version, self.version_at_arrival,
                self.t_send, self.t_recv, self.t_handled, self.outcome,
                "" if self.update is None else self.update, staleness]


class Server:
    def __init__(self, cfg, clock, w0):
        self.cfg, self.clock, self.n = cfg, clock, cfg.workers
        if cfg.engine in ("local_sgd", "diloco"):
            self.opt = ServerOptimizer(w0, cfg.outer_lr, cfg.outer_momentum, cfg.outer_nesterov)
        else:  # easgd moves the center by hand (update_rules); the others step SGD
            self.opt = ServerOptimizer(w0, cfg.lr, cfg.momentum, cfg.nesterov)
        self.version = 0
        self.next_job = [0] * self.n
        self.busy = [False] * self.n
        self.cancelled = set()  # (worker, job)
        self.stopping, self.stop_reason = False, None
        self.sender = tp.Sender(0, clock, w0.numel())
        self.byes = 0
        inbox = queue.Queue()  # one receiver per worker, all handing messages to the main loop
        self.receivers = [tp.Receiver(0, clock, src=w + 1, last=lambda m: m.kind == tp.BYE,
                                      max_elements=w0.numel(), inbox=inbox) for w in range(self.n)]
        self.receiver = self.receivers[0]  # get() and poll() read the shared inbox
        self.updates, self.pushes, self.messages = [], [], []
        self.snapshots = [(0, 0, self.opt.params.clone())]  # (update, t, parameters)
        self._payload = (-1, None)
        self.engine = make_engine(cfg, self)

    def warm_up(self):
        """One untimed combine and optimizer step on a throwaway copy, before the run."""
        w = self.opt.params
        scratch = ServerOptimizer(w, 0.0)
        scratch.step(combine([(0, 0, w), (1, 0, w)], mean=True))
        scratch.outer_step([(0, 0, w)])

    # ---------------------------------------------------------------- sending

    def params_payload(self):
        """A copy of the current parameters, made once per version (what a real server
        serializes); every PARAMS of that version carries it."""
        if self._payload[0] != self.version:
            self._payload = (self.version, self.opt.params.clone())
        return self._payload[1]

    def send_params(self, worker, payload=None):
        """Starts worker's next job on the current version (payload: the parameters
        unless given). Nothing is sent once the run is stopping."""
        if self.stopping:
            return
        if self.busy[worker]:
            raise ProtocolError(f"server: worker {worker} is busy with job {self.next_job[worker] - 1}")
        job = self.next_job[worker]
        self.next_job[worker] += 1
        self.busy[worker] = True
        self.sender.send(worker + 1, tp.PARAMS, job=job, version=self.version,
                         payload=payload if payload is not None else self.params_payload())

    def send_to_idle(self, payload=None):
        for w in range(self.n):
            if not self.busy[w]:
                self.send_params(w, payload)

    def cancel(self, worker):
        """Cancels the job worker is computing: its push, if already on the wire, is
        discarded on arrival (outcome "cancelled": neither applied nor dropped)."""
        job = self.next_job[worker] - 1
        self.cancelled.add((worker, job))
        self.busy[worker] = False
        self.sender.send(worker + 1, tp.CANCEL, job=job, version=self.version)

    # ---------------------------------------------------------------- updating

    def apply(self, pushes, kind, rule):
        """One update of the model of record. rule() does the arithmetic and returns the
        time its combining part ended (the rest is the optimizer's apply)."""
        t_start = self.clock.now()
        t_combined = rule()
        t_applied = self.clock.now()
        self.version += 1
        for p in pushes:
            p.outcome, p.update = "applied", self.version
            p.payload = None  # used; holding it would keep every message ever received
        self.updates.append([self.version, t_start, t_applied, repr((t_combined - t_start) / 1e9),
                             repr((t_applied - t_combined) / 1e9), len(pushes), kind])
        every = self.cfg.eval_every
        if every and self.version % every == 0:
            self.snapshots.append((self.version, t_applied, self.opt.params.clone()))
        if self.cfg.updates and self.version >= self.cfg.updates:
            self.stop("updates")

    def apply_gradients(self, pushes, mean):
        """w <- w - lr * combine(g) (sum in (worker, step) order, / count when mean)."""
        def rule():
            direction = combine([(p.worker, p.step, p.payload) for p in pushes], mean)
            t = self.clock.now()
            self.opt.step(direction)
            return t
        self.apply(pushes, "gradients", rule)

    def apply_outer(self, pushes):
        def rule():
            models = [(p.worker, p.step, p.payload) for p in pushes]
            t = self.clock.now()
            self.opt.outer_step(models)
            return t
        self.apply(pushes, "outer", rule)

    def apply_elastic(self, pushes, alpha=None, beta=None):
        """Returns the center the exchange read."""
        read = []

        def rule():
            t = self.clock.now()
            with torch.no_grad():
                if beta is None:
                    read.append(elastic_exchange_async(self.opt.params, pushes[0].payload, alpha))
                else:
                    read.append(elastic_exchange_sync(
                        self.opt.params, [(p.worker, p.step, p.payload) for p in pushes], beta))
            return t
        self.apply(pushes, "elastic", rule)
        return read[0]

    def drop(self, push):
        push.outcome = "dropped"

    def stop(self, reason):
        if not self.stopping:
            self.stopping, self.stop_reason = True, reason

    # ---------------------------------------------------------------- the loop

    def handle(self, m):
        t_handled = self.clock.now()
        self.messages.append(message_row(m, t_handled))
        if m.kind == tp.BYE:
            self.byes += 1
            return
        if m.kind not in (tp.PUSH_GRAD, tp.PUSH_MODEL):
            raise ProtocolError(f"server: unexpected {tp.KIND_NAMES.get(m.kind, m.kind)} from rank {m.src}")
        push = Push(m, t_handled, self.version)
        self.pushes.append(push)
        w = push.worker
        if (w, push.job) in self.cancelled:
            push.outcome, push.payload = "cancelled", None
            return
        if push.job != self.next_job[w] - 1 or not self.busy[w]:
            raise ProtocolError(f"server: push of job {push.job} from worker {w}, which is on job "
                                f"{self.next_job[w] - 1} (busy {self.busy[w]})")
        self.busy[w] = False
        if self.stopping:
            push.outcome, push.payload = "unused", None
            return
        self.engine.on_push(push)
        if push.outcome is None:
            push.outcome = "pending"  # buffered; set to applied when an update takes it
        else:
            push.payload = None  # dropped (applied ones were released by apply)

    def run(self):
        cfg = self.cfg
        for r in self.receivers:
            r.start()
        self.engine.start()
        idle_since = self.clock.now()
        while not self.stopping:
            if cfg.time_limit and self.clock.now() >= cfg.time_limit * 1e9:
                self.stop("time")
                break
            m = self.receiver.poll(0.05)
            if m is None:
                if self.clock.now() - idle_since > cfg.timeout * 1e9:
                    raise ProtocolError(f"server: no push for {cfg.timeout:g} s (--timeout)")
                continue
            idle_since = self.clock.now()
            self.handle(m)
        for w in range(self.n):
            self.sender.send(w + 1, tp.STOP, version=self.version)
        while self.byes < self.n:  # a worker's BYE is the last message it sends
            self.handle(self.receiver.get(cfg.timeout))
        for r in self.receivers:
            r.join(cfg.timeout)
        for p in self.pushes:
            if p.outcome == "pending":
                p.outcome = "unused"  # still buffered when the run stopped
        if self.snapshots[-1][0] != self.version:
            self.snapshots.append((self.version, self.updates[-1][2] if self.updates else 0,
                                   self.opt.params.clone()))


# -------------------------------------------------------------------- the engines


class Engine:
    def __init__(self, cfg, server):
        self.cfg, self.s, self.n = cfg, server, cfg.workers
        self.pending = []

    def start(self):
        self.s.send_to_idle()


class Async(Engine):
    """On arrival: w <- w - lr g(w_read); the worker then reads w again."""

    def on_push(self, p):
        self.s.apply_gradients([p], mean=True)
        self.s.send_params(p.worker)


class FirstK(Engine):
    """The synchronous family: the first `needed` gradients read at the current version
    make the iteration's update (mean, (worker, step) order), then the idle workers read
    the new w.
    - sync: needed = N. sync_backup (K-sync): needed = N - b, each worker gives at most
      one gradient per iteration (it waits after its push).
    - k_batch_sync (K-batch-sync, `again`): needed = K from any workers; a worker whose
      gradient is accepted while more are needed reads w again (same version) and
      computes another.
    late "drop": a gradient read at an older version is dropped on arrival and its worker
    reads the current w (joining the iteration in progress); the others of an update keep
    computing. late "cancel": at the last needed gradient every step under way is
    cancelled, and every worker starts the next iteration."""

    def __init__(self, cfg, server, needed, again, late):
        super().__init__(cfg, server)
        self.needed, self.again, self.late = needed, again, late

    def on_push(self, p):
        s = self.s
        if p.version < s.version:
            if self.late == "cancel":
                raise ProtocolError(f"server: a stale gradient (version {p.version} < {s.version}) under late=cancel")
            s.drop(p)
            s.send_params(p.worker)
            return
        self.pending.append(p)
        if len(self.pending) < self.needed:
            if self.again:
                s.send_params(p.worker)
            return
        if self.late == "cancel":
            for w in range(self.n):
                if s.busy[w]:
                    s.cancel(w)
        s.apply_gradients(self.pending, mean=self.cfg.aggregate == "mean")
        self.pending = []
        s.send_to_idle()


class KAsync(Engine):
    """One update per K gradients, each computed on the version its worker read (stale
    allowed, nothing cancelled), mean in (worker, step) order. batch false (K-async): a
    worker whose gradient is buffered waits for the update and pulls it (so the K are K
    distinct workers); batch true (K-batch-async): any K gradients, each worker pulls the
    current w right after its push (after the update that push completes, if any)."""

    def __init__(self, cfg, server, k, batch):
        super().__init__(cfg, server)
        self.k, self.batch = k, batch

    def on_push(self, p):
        s = self.s
        self.pending.append(p)
        full = len(self.pending) == self.k
        if full:
            s.apply_gradients(self.pending, mean=self.cfg.aggregate == "mean")
            self.pending = []
        if self.batch:
            s.send_params(p.worker)
        elif full:
            s.send_to_idle()


class SSP(Engine):
    """Stale synchronous parallel (Ho et al. 2013): worker i's clock = gradients it pushed;
    it may start its next gradient only while the slowest clock is >= its own - bound,
    else it waits. Gradients are applied in full (sum); the pending ones are applied as
    one update just before workers read, so every read sees every arrived gradient."""

    def __init__(self, cfg, server, bound):
        super().__init__(cfg, server)
        self.bound = bound
        self.clocks = [0] * cfg.workers
        self.waiting = set()

    def on_push(self, p):
        s = self.s
        self.pending.append(p)
        self.clocks[p.worker] += 1
        self.waiting.add(p.worker)
        slowest = min(self.clocks)
        ready = sorted(w for w in self.waiting if self.clocks[w] - slowest <= self.bound)
        if not ready:
            return
        s.apply_gradients(self.pending, mean=False)
        self.pending = []
        for w in ready:
            s.send_params(w)
        self.waiting.difference_update(ready)


class LocalSGD(Engine):
    """local_sgd and diloco: a round ends when every worker has pushed its model after H
    local steps; the outer step takes Delta = w - mean_i x_i; every worker then starts
    the next round from w."""

    def on_push(self, p):
        self.pending.append(p)
        if len(self.pending) == self.n:
            self.s.apply_outer(self.pending)
            self.pending = []
            self.s.send_to_idle()


class EASGD(Engine):
    """Elastic averaging SGD (Zhang, Choromanska & LeCun 2015). async: each exchange is
    one update c <- c + alpha (x_i - c), answered with the center it read. sync: once
    every worker has pushed, c <- c + beta (mean_i x_i - c), beta = N alpha, and every
    worker is answered with the center before the move."""

    def on_push(self, p):
        s = self.s
        if self.cfg.easgd_mode == "async":
            read = s.apply_elastic([p], alpha=self.cfg.alpha_value)
            s.send_params(p.worker, payload=read)
            return
        self.pending.append(p)
        if len(self.pending) == self.n:
            read = s.apply_elastic(self.pending, beta=self.n * self.cfg.alpha_value)
            self.pending = []
            s.send_to_idle(payload=read)


def make_engine(cfg, server):
    e = cfg.engine
    if e == "async":
        return Async(cfg, server)
    if e == "sync":
        return FirstK(cfg, server, cfg.workers, False, "drop")
    if e == "sync_backup":
        return FirstK(cfg, server, cfg.workers - cfg.backups, False, cfg.late)
    if e == "k_batch_sync":
        return FirstK(cfg, server, cfg.k, True, cfg.late)
    if e == "k_async":
        return KAsync(cfg, server, cfg.k, cfg.batch_async)
    if e == "ssp":
        return SSP(cfg, server, cfg.bound)
    if e in ("local_sgd", "diloco"):
        return LocalSGD(cfg, server)
    if e == "easgd":
        return EASGD(cfg, server)
    raise ValueError(f"unknown engine {e!r}")
