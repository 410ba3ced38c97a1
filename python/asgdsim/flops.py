"""asgdsim.flops — the floating-point operations of one minibatch's forward and backward pass
through a torch module, counted with the meaning the simulator's own models give theirs
(Model::flops_per_sample, kernels/model.h), so that cluster.compute dist "flops" charges a
PyTorch module as it charges a native one:

- a multiply-add is 2 FLOPs; counted are the matrix products and convolutions of the
  forward pass, of the weights' gradients, and of the inputs' gradients where the input
  needs one (not below the first layer: the data needs no gradient);
- elementwise work counts 0: activations, normalisations (BatchNorm, LayerNorm, ...), bias
  additions, softmax, dropout, the loss; and so do lookups: an Embedding's forward is a row
  gather and its gradient a scatter of rows, with no multiply-add.

Two counters. Where torch has torch.utils.flop_counter.FlopCounterMode (torch >= 2.1) it
is used: it sees every aten matrix product, convolution and attention kernel, functional
calls included. Elsewhere (Debian's torch 1.13) forward hooks on the module types below
count them from the shapes each call sees: Linear, Conv1d/2d/3d, ConvTranspose1d/2d/3d,
MultiheadAttention. A product the hooks cannot see (a functional call such as F.linear or
x @ self.weight in a custom forward, an RNN) is not counted: FlopCount.uncounted names
the modules that hold parameters of other types, so a count that misses them says so.

Not here: how FLOPs become virtual time (dist "flops": sim/timing/distribution.h).
"""
from dataclasses import dataclass, field
from math import prod
from typing import Callable, List, Optional

import torch
from torch import nn

try:  # torch >= 2.1
    from torch.utils.flop_counter import FlopCounterMode
except ImportError:  # torch 1.13 (Debian's)
    FlopCounterMode = None

__all__ = ["FlopCount", "count_flops", "COUNTED_MODULES"]

#: the module types the hook counter counts (their subclasses too)
COUNTED_MODULES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                   nn.ConvTranspose3d, nn.MultiheadAttention)
# module types with parameters whose work is elementwise or a lookup: 0 FLOPs, by definition
_ZERO = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.Embedding, nn.EmbeddingBag, nn.PReLU)


@dataclass
class FlopCount:
    """FLOPs of one minibatch (forward + backward = total), the counter that counted them
    ("FlopCounterMode" or "module hooks") and the type names of the modules with
    parameters it could not see (hooks only; empty: nothing the model computes with its
    parameters was missed)."""
    forward: float
    backward: float
    counter: str
    uncounted: List[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return self.forward + self.backward


def _needs_grad(t) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad


def _weights_need_grad(m: nn.Module) -> bool:
    return any(p.requires_grad for p in m.parameters())


def _linear(m, inputs, out):
    x = inputs[0]
    macs = x.numel() // m.in_features * m.in_features * m.out_features
    return macs, macs, macs if _needs_grad(x) else 0


def _conv(m, inputs, out):
    # each output element is a dot product over (in_channels / groups) x kernel
    macs = out.numel() * (m.in_channels // m.groups) * prod(m.kernel_size)
    return macs, macs, macs if _needs_grad(inputs[0]) else 0


def _conv_transposed(m, inputs, out):
    # each input element is scattered through (out_channels / groups) x kernel weights
    x = inputs[0]
    macs = x.numel() * (m.out_channels // m.groups) * prod(m.kernel_size)
    return macs, macs, macs if _needs_grad(x) else 0


def _attention(m, inputs, out):
    """MultiheadAttention(query, key, value): the four projections (weights) and the two
    products QK^T and AV (no weights: their backward computes both operands' gradients)."""
    # given by keyword (torch 1.13's hooks see positional inputs only): the output's shape
    # stands for the query and key = value = query (self-attention)
    q = inputs[0] if inputs else out[0]
    k = inputs[1] if len(inputs) > 1 else q
    v = inputs[2] if len(inputs) > 2 else k
    seq = 1 if m.batch_first else 0
    if q.dim() == 2:  # unbatched (L, E)
        seq = 0
    target, source = q.shape[seq], k.shape[seq]
    batch = q.numel() // (target * m.embed_dim)
    e = m.embed_dim
    proj_q = batch * target * e * e
    proj_k = batch * source * m.kdim * e
    proj_v = batch * source * m.vdim * e
    proj_out = batch * target * e * e
    attention = 2 * batch * target * source * e  # QK^T and AV over all heads
    forward = proj_q + proj_k + proj_v + proj_out + attention
    # input gradients of the projections where q, k, v need one (the out projection's
    # input and both products' operands come from weights: always)
    inputs_grad = proj_out + 2 * attention + sum(p for p, t in ((proj_q, q), (proj_k, k), (proj_v, v))
                                                 if _needs_grad(t))
    return forward, proj_q + proj_k + proj_v + proj_out, inputs_grad


def _hook_macs(m, inputs, out):
    """Multiply-adds of one call of a counted module: (forward, the weights' gradients,
    the inputs' gradients)."""
    if isinstance(m, nn.MultiheadAttention):
        return _attention(m, inputs, out)
    if isinstance(m, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        return _conv_transposed(m, inputs, out)
    if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        return _conv(m, inputs, out)
    return _linear(m, inputs, out)


def _uncounted(module: nn.Module) -> List[str]:
    """Type names of the modules holding parameters of their own that neither the hooks
    count nor are 0 by definition, outside the counted modules."""
    names, inside = set(), set()
    for m in module.modules():
        if isinstance(m, COUNTED_MODULES):
            inside.update(id(s) for s in m.modules())
    for m in module.modules():
        if id(m) in inside or isinstance(m, _ZERO):
            continue
        if any(True for _ in m.parameters(recurse=False)):
            names.add(type(m).__name__)
    return sorted(names)


def _count_by_hooks(module, run):
    forward = backward = 0

    def hook(m, inputs, out):
        nonlocal forward, backward
        macs, weights_grad, inputs_grad = _hook_macs(m, inputs, out)
        forward += 2 * macs
        backward += 2 * ((weights_grad if _weights_need_grad(m) else 0) + inputs_grad)

    handles = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, COUNTED_MODULES)]
    try:
        run(backward=False)
    finally:
        for h in handles:
            h.remove()
    return FlopCount(float(forward), float(backward), "module hooks", _uncounted(module))


def _count_by_mode(module, run):
    mode = FlopCounterMode(display=False)
    with mode:
        run(backward=False)
    forward = mode.get_total_flops()
    mode = FlopCounterMode(display=False)
    with mode:
        run(backward=True)
    return FlopCount(float(forward), float(mode.get_total_flops() - forward), "FlopCounterMode")


def count_flops(module: nn.Module, x, y=None, loss: Optional[Callable] = None, counter: str = "auto") -> FlopCount:
    """FLOPs of module(x)'s forward and of loss(module(x), y).backward() (loss None: the
    output's sum), as asgdsim counts them (this module's docstring). The module's
    parameters' .grad are left as the backward made them; its mode (train/eval) is the
    caller's. counter: "auto" (FlopCounterMode where torch has it, else hooks), "hooks",
    or "mode" (ValueError where torch lacks it)."""
    if counter not in ("auto", "hooks", "mode"):
        raise ValueError(f"counter must be auto, hooks or mode, not {counter!r}")
    if counter == "mode" and FlopCounterMode is None:
        raise ValueError(f"torch {torch.__version__} has no torch.utils.flop_counter.FlopCounterMode")

    def run(backward):
        for p in module.parameters():
            p.grad = None
        out = module(x)  # with autograd on: the hooks read requires_grad as a job's forward has it
        if not backward:
            return
        value = loss(out, y) if loss is not None else out.sum()
        value.backward()

    use_mode = counter == "mode" or (counter == "auto" and FlopCounterMode is not None)
    return _count_by_mode(module, run) if use_mode else _count_by_hooks(module, run)
