"""asgdsim.contract — the types asgdsim.run takes for a PyTorch model and data, as
typing.Protocols (structural: any object with these methods fits; nothing to inherit).

The gradient contract (docs/python.md): for each gradient job the package loads the flat
parameter vector the engine hands it into the module (module.parameters() order), resets
the buffers to the factory's values, seeds torch from the job's key (seed, worker, step),
runs forward and backward in train mode on the minibatch and returns the flat gradient of
the mean loss. So the model must be the same module (same parameter count and order) every
time the factory is called, the loss the minibatch's mean as one number, and a data set
exactly as long as len() says. A break raises asgdsim.ModelError (exit code 2).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Tuple, Union, runtime_checkable

if TYPE_CHECKING:  # torch is needed only for torch runs
    import torch


@runtime_checkable
class ModelFactory(Protocol):
    """A zero-argument callable making the torch.nn.Module; called under
    torch.manual_seed(seed) for each run's initial parameters, so it must make the same
    architecture every time."""

    def __call__(self) -> "torch.nn.Module": ...


@runtime_checkable
class Loss(Protocol):
    """loss(outputs, targets): the minibatch's mean loss as a scalar tensor (default:
    cross-entropy with classes, mean squared error without)."""

    def __call__(self, outputs: "torch.Tensor", targets: "torch.Tensor") -> "torch.Tensor": ...


@runtime_checkable
class SampleSet(Protocol):
    """A map-style data set (a torch.utils.data.Dataset fits): len() samples, each an
    (input, target) pair; an optional `targets` attribute must agree with the items."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Tuple[Any, Any]: ...


#: What model= takes: a module (every seed starts from its parameters) or a factory.
Model = Union["torch.nn.Module", ModelFactory]
#: What data=/test_data= take: a data set, a pair of tensors (inputs, targets: one
#: indexing per minibatch), or for data= a factory returning (train, test).
Data = Union[SampleSet, Tuple["torch.Tensor", "torch.Tensor"], Any]
