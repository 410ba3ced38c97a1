"""The arithmetic of the reference's server: how contributions are combined and how the
model of record moves. Pure torch on flat float32 vectors, written from
docs/algorithms.md and the papers it cites (no asgdsim code); the server, the
calibration and the tests call exactly these functions.
"""

import torch


def combine(contributions, mean):
    """Sum of the contributions in (worker, step) order, divided by their count when mean.
    contributions: list of (worker, step, tensor (parameters,)). A single contribution is
    returned as it is (no copy): callers never write into the result."""
    ordered = sorted(contributions, key=lambda c: (c[0], c[1]))
    if len(ordered) == 1:
        return ordered[0][2]
    total = ordered[0][2].clone()
    for _, _, tensor in ordered[1:]:
        total.add_(tensor)
    if mean and len(ordered) > 1:
        total.div_(len(ordered))
    return total


class ServerOptimizer:
    """The model of record as one flat parameter and PyTorch's SGD on it:
    w <- w - lr d; with momentum mu: v <- mu v + d, w <- w - lr v; with nesterov:
    w <- w - lr (d + mu v). d is a (combined) gradient for the gradient engines, and the
    pseudo-gradient Delta = w - mean_i x_i for local_sgd/diloco's outer step."""

    def __init__(self, w0, lr, momentum=0.0, nesterov=False):
        self.w = torch.nn.Parameter(w0.clone())
        self.opt = torch.optim.SGD([self.w], lr=lr, momentum=momentum, nesterov=nesterov)

    @property
    def params(self):
        return self.w.detach()

    def step(self, direction):
        self.w.grad = direction
        self.opt.step()

    def outer_step(self, models):
        """local_sgd / diloco: Delta = w - (1/N) sum_i x_i (worker order), then one step."""
        delta = self.params - combine(models, mean=True)
        self.step(delta)


def elastic_exchange_async(center, x, alpha):
    """EASGD Algorithm 1's master side: c <- c + alpha (x - c). Returns the center the
    exchange read (before the move); the worker makes its own move from it."""
    read = center.clone()
    center.add_(x - read, alpha=alpha)
    return read


def elastic_exchange_sync(center, models, beta):
    """EASGD synchronous (eq. 6): c <- c + beta (mean_i x_i - c), mean in worker order.
    Returns the center before the move (what every worker's move uses)."""
    read = center.clone()
    center.add_(combine(models, mean=True) - read, alpha=beta)
    return read


def easgd_worker_step(x, center_read, gradient, lr, alpha):
    """The worker's step, in place. After an exchange (center_read given), the paper's
    combined step at one x: x <- x - alpha (x - c) - lr g(x); otherwise x <- x - lr g(x)."""
    if center_read is not None:
        x.sub_(x - center_read, alpha=alpha)
    x.sub_(gradient, alpha=lr)


def make_inner_optimizer(name, param, lr, momentum, weight_decay):
    """A local_sgd/diloco worker's own optimizer (its state kept across rounds)."""
    if name == "sgd":
        return torch.optim.SGD([param], lr=lr, momentum=momentum)
    if name == "adamw":
        return torch.optim.AdamW([param], lr=lr, weight_decay=weight_decay)
    raise ValueError(f"unknown inner optimizer {name!r}")
