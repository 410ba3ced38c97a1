"""A reference worker (ranks 1..N): receives parameters, computes real gradients of the
model on its own minibatches, waits out the emulated duration of each step (while
watching for a cancel or a stop), and pushes its result.

A step's window runs from the moment the worker has its parameters (the receiver thread
has the whole message; for a local step, the end of the previous step) to the moment it
sends its result. The real forward/backward happens inside the window; the worker then
waits until t_params_received + d[w][k]. If the real work takes longer than d, the step
takes longer (actual_s > emulated_s in the log).
"""

import numpy as np
import torch

from . import transport as tp
from .update_rules import easgd_worker_step, make_inner_optimizer
from .workload import minibatch_ids

STEP_COLUMNS = ["worker", "step", "job", "version", "t_params_received", "t_compute_start",
                "t_compute_end", "t_send", "t_end", "emulated_s", "actual_s", "outcome", "loss"]
MESSAGE_COLUMNS = ["kind", "src", "dst", "job", "step", "version", "bytes", "seq", "t_send",
                   "t_recv", "t_handled"]


class ProtocolError(RuntimeError):
    pass


class InjectedFailure(RuntimeError):
    pass


def message_row(m, t_handled):
    return [tp.KIND_NAMES[m.kind], m.src, m.dst, m.job, m.step, m.version, m.bytes, m.seq,
            m.t_send, m.t_recv, t_handled]


class Worker:
    def __init__(self, cfg, rank, clock, model, data, compute):
        self.cfg, self.rank, self.index, self.clock = cfg, rank, rank - 1, clock
        self.model, self.data, self.compute = model, data, compute
        self.device = torch.device(cfg.device)
        self.x = torch.zeros(model.parameters, device=self.device, requires_grad=True)
        self.sender = tp.Sender(rank, clock, model.parameters)
        self.receiver = tp.Receiver(rank, clock, src=0, last=lambda m: m.kind == tp.STOP,
                                    max_elements=model.parameters)
        self.steps, self.messages = [], []
        self.k = 0  # gradient steps begun (the key of the minibatch and duration draws)
        self.stopped = False
        self.put_back = None  # a message taken from the receiver but not yet handled
        self.fail_at = cfg.fail_step if cfg.fail_rank == rank else None

    def warm_up(self, w0):
        """One untimed gradient (on the first samples, at w0) before the run starts."""
        with torch.no_grad():
            self.x.copy_(w0)
        x, y = self.data.batch(self.data.x_train, np.arange(min(self.cfg.batch, self.data.train_samples)), self.device)
        self.model.loss_and_grad(self.x, x, y)

    # ---------------------------------------------------------------- messages

    def _next(self, wait):
        """The next message: one put back by wait_out first, else from the receiver."""
        if self.put_back is not None:
            m, self.put_back = self.put_back, None
            return m
        return wait()

    def _took(self, m):
        self.messages.append(message_row(m, self.clock.now()))
        if m.kind == tp.STOP:
            self.stopped = True
        return m

    def next_message(self):
        return self._took(self._next(lambda: self.receiver.get(self.cfg.timeout)))

    def expect_params(self, load=True):
        """The next PARAMS message, skipping cancels of jobs already pushed; None on STOP.
        load: its payload becomes this worker's parameters."""
        while True:
            m = self.next_message()
            if m.kind == tp.STOP:
                return None
            if m.kind == tp.PARAMS:
                if load:
                    with torch.no_grad():
                        self.x.copy_(m.payload)
                return m
            if m.kind != tp.CANCEL:
                raise ProtocolError(f"worker {self.index}: unexpected {tp.KIND_NAMES[m.kind]} while idle")

    def wait_out(self, deadline_ns, job):
        """Waits until deadline_ns; returns None, or "cancelled" (a CANCEL of this job came
        first) or "stopped" (a STOP came first). A message that arrived after the deadline
        (the step was over first; this thread only woke late) is put back for later."""
        while True:
            remaining = deadline_ns - self.clock.now()
            if remaining <= 0:
                return None
            m = self._next(lambda: self.receiver.poll(remaining / 1e9))
            if m is None:
                continue
            if m.t_recv >= deadline_ns:
                self.put_back = m
                return None
            self._took(m)
            if m.kind == tp.STOP:
                return "stopped"
            if m.kind == tp.CANCEL and m.job == job:
                return "cancelled"
            raise ProtocolError(f"worker {self.index}: unexpected {tp.KIND_NAMES[m.kind]} "
                                f"(job {m.job}) during job {job}")

    # ---------------------------------------------------------------- one step

    def gradient(self):
        """Loss and gradient at self.x on this worker's k-th minibatch."""
        if self.fail_at is not None and self.k >= self.fail_at:
            raise InjectedFailure(f"worker {self.index}: failure injected at step {self.k} (--inject-failure)")
        ids = self._ids(self.k)
        x, y = self.data.batch(self.data.x_train, ids, self.device)
        return self.model.loss_and_grad(self.x, x, y)

    def _ids(self, step):
        return minibatch_ids(self.cfg.seed, self.index, step, self.cfg.batch, self.data.train_samples)

    def log_step(self, job, version, t_params, t_cs, t_ce, t_send, t_end, loss, outcome):
        d = self.compute.seconds(self.index, self.k)
        self.steps.append([self.index, self.k, job, version, t_params, t_cs, t_ce,
                           "" if t_send is None else t_send, t_end, repr(d),
                           repr((t_end - t_params) / 1e9), outcome, repr(loss)])
        self.k += 1

    def deadline(self, t_params):
        return t_params + round(self.compute.seconds(self.index, self.k) * 1e9)

    def push(self, kind, job, version, tensor):
        payload = tensor.detach()
        payload = payload.cpu() if payload.device.type != "cpu" else payload
        return self.sender.send(0, kind, job=job, step=self.k, version=version,
                                payload=payload.contiguous())

    # ---------------------------------------------------------------- roles

    def run(self):
        self.receiver.start()
        role = {"local_sgd": self.run_local, "diloco": self.run_local, "easgd": self.run_easgd}
        role.get(self.cfg.engine, self.run_gradients)()
        self.sender.send(0, tp.BYE, step=self.k)
        self.receiver.join(self.cfg.timeout)

    def run_gradients(self):
        """async, sync, sync_backup, k_batch_sync, k_async, ssp: one gradient per PARAMS."""
        while True:
            m = self.expect_params()
            if m is None:
                return
            t_cs = self.clock.now()
            loss, grad = self.gradient()
            t_ce = self.clock.now()
            outcome = self.wait_out(self.deadline(m.t_recv), m.job)
            if outcome is None:
                t_send = self.push(tp.PUSH_GRAD, m.job, m.version, grad)
                self.log_step(m.job, m.version, m.t_recv, t_cs, t_ce, t_send, t_send, loss, "pushed")
            else:
                self.log_step(m.job, m.version, m.t_recv, t_cs, t_ce, None, self.clock.now(), loss, outcome)
                if outcome == "stopped":
                    return

    def run_local(self):
        """local_sgd, diloco: per PARAMS, H local steps of the inner optimizer on this
        worker's own copy (its state kept across rounds), then push the model."""
        cfg = self.cfg
        inner = make_inner_optimizer(cfg.inner, self.x, cfg.inner_lr, cfg.inner_momentum, cfg.weight_decay)
        while True:
            m = self.expect_params()
            if m is None:
                return
            t_params = m.t_recv
            for h in range(cfg.steps):
                t_cs = self.clock.now()
                loss, _ = self.gradient()
                inner.step()
                t_ce = self.clock.now()
                outcome = self.wait_out(self.deadline(t_params), None)
                if outcome is not None:
                    self.log_step(m.job, m.version, t_params, t_cs, t_ce, None, self.clock.now(), loss, outcome)
                    return
                if h + 1 == cfg.steps:
                    t_send = self.push(tp.PUSH_MODEL, m.job, m.version, self.x)
                    self.log_step(m.job, m.version, t_params, t_cs, t_ce, t_send, t_send, loss, "pushed")
                else:
                    t_end = self.clock.now()
                    self.log_step(m.job, m.version, t_params, t_cs, t_ce, None, t_end, loss, "local")
                    t_params = t_end

    def run_easgd(self):
        """easgd (Zhang et al. 2015, Algorithm 1 / eq. 5-6, the paper's order): local SGD
        steps; the step that ends a period pushes x; the next step first receives the
        center the exchange read, then computes g at x (as pushed) and makes the combined
        step x <- x - alpha (x - c) - lr g(x)."""
        cfg = self.cfg
        m = self.expect_params()  # the center every worker starts from
        if m is None:
            return
        t_params, job, version, center_read = m.t_recv, m.job, m.version, None
        local = 0
        while True:
            t_cs = self.clock.now()
            loss, grad = self.gradient()
            with torch.no_grad():
                easgd_worker_step(self.x, center_read, grad, cfg.lr, cfg.alpha_value)
            t_ce = self.clock.now()
            outcome = self.wait_out(self.deadline(t_params), None)
            if outcome is not None:
                self.log_step(job, version, t_params, t_cs, t_ce, None, self.clock.now(), loss, outcome)
                return
            local += 1
            if local % cfg.period:
                t_end = self.clock.now()
                self.log_step(job, version, t_params, t_cs, t_ce, None, t_end, loss, "local")
                t_params, center_read = t_end, None
                continue
            t_send = self.push(tp.PUSH_MODEL, job, version, self.x)
            self.log_step(job, version, t_params, t_cs, t_ce, t_send, t_send, loss, "pushed")
            m = self.expect_params(load=False)  # the center the exchange read
            if m is None:
                return
            t_params, job, version = m.t_recv, m.job, m.version
            center_read = m.payload.to(self.device)
