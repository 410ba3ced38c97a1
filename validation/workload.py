"""What the reference's workers compute: the data, the model, the minibatches and the
emulated step durations. Plain numpy and torch; nothing here knows about processes,
messages or engines (and nothing here comes from asgdsim).

Every random draw is keyed by (seed, purpose, worker, step) through numpy's SeedSequence,
so worker w's k-th minibatch and k-th duration do not depend on which process ran first
or on how many steps other workers took.
"""

import gzip
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

# Purposes of the keyed random streams (the second entry of every key).
PURPOSE_COMPUTE = 1  # emulated step durations: (seed, 1, worker, step)
PURPOSE_BATCH = 2  # minibatch ids: (seed, 2, worker, step)
PURPOSE_INIT = 3  # initial parameters: (seed, 3)
PURPOSE_DATA = 4  # the synthetic data set: (data_seed, 4)

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
CLASSES = 10


class InputError(ValueError):
    """Bad input (an option, a file): the entry point turns it into exit 2."""


def keyed_rng(*key):
    return np.random.default_rng(np.random.SeedSequence([int(k) for k in key]))


# ---------------------------------------------------------------------------- data


class Dataset:
    """Train and test arrays. x is (samples, features), uint8 (scaled by 1/255 when a
    batch is taken) or float32; y is (samples,) int64 labels in [0, CLASSES)."""

    def __init__(self, name, x_train, y_train, x_test, y_test):
        self.name = name
        self.x_train, self.y_train = x_train, y_train
        self.x_test, self.y_test = x_test, y_test

    @property
    def features(self):
        return self.x_train.shape[1]

    @property
    def train_samples(self):
        return self.x_train.shape[0]

    def batch(self, x, ids, device="cpu"):
        """(features, labels) tensors of the samples ids of x (x_train or x_test)."""
        xb = x[ids]
        t = torch.from_numpy(np.ascontiguousarray(xb))
        t = t.float().div_(255.0) if xb.dtype == np.uint8 else t.float()
        y = self.y_train if x is self.x_train else self.y_test
        return t.to(device), torch.from_numpy(y[ids]).to(device)


def _read_idx(path, expect_dims):
    """An IDX file (the MNIST format: magic 0x0000 08 D, then D big-endian uint32 sizes,
    then uint8 data), gzipped."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08 or raw[3] != expect_dims:
        raise InputError(f"{path}: not an IDX uint8 file with {expect_dims} dimensions")
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(expect_dims)]
    body = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * expect_dims)
    if body.size != math.prod(dims):
        raise InputError(f"{path}: {body.size} bytes of data, the header says {dims}")
    return body.reshape(dims[0], -1) if expect_dims > 1 else body


def load_fashion_mnist(path=FASHION_MNIST_DIR):
    parts = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x = _read_idx(os.path.join(path, f"{prefix}-images-idx3-ubyte.gz"), 3)
        y = _read_idx(os.path.join(path, f"{prefix}-labels-idx1-ubyte.gz"), 1)
        if x.shape[0] != y.shape[0]:
            raise InputError(f"{path}: {split} has {x.shape[0]} images and {y.shape[0]} labels")
        parts[split] = (x, y.astype(np.int64))
    return Dataset("fashion_mnist", *parts["train"], *parts["test"])


def make_synthetic(samples, features, data_seed=0, test_samples=None):
    """A classification set that an MLP can learn: x ~ N(0, I), label = argmax of a fixed
    random two-layer teacher plus noise. Same (samples, features, data_seed), same set."""
    rng = keyed_rng(data_seed, PURPOSE_DATA)
    test_samples = test_samples if test_samples is not None else max(samples // 4, 1)
    n = samples + test_samples
    x = rng.standard_normal((n, features)).astype(np.float32)
    a = rng.standard_normal((features, 32)).astype(np.float32) / math.sqrt(features)
    b = rng.standard_normal((32, CLASSES)).astype(np.float32) / math.sqrt(32)
    logits = np.tanh(x @ a) @ b + 0.1 * rng.standard_normal((n, CLASSES)).astype(np.float32)
    y = logits.argmax(axis=1).astype(np.int64)
    return Dataset("synthetic", x[:samples], y[:samples], x[samples:], y[samples:])


def load_dataset(name, path=FASHION_MNIST_DIR, samples=4096, features=32, data_seed=0):
    if name == "fashion_mnist":
        return load_fashion_mnist(path)
    if name == "synthetic":
        return make_synthetic(samples, features, data_seed)
    raise InputError(f"--data: unknown data set {name!r} (allowed: fashion_mnist, synthetic)")


# ---------------------------------------------------------------------------- model


class MLP:
    """A multilayer perceptron held as ONE flat float32 parameter vector (what every
    message carries): layers (in -> hidden ... -> CLASSES), ReLU between them, softmax
    cross-entropy. hidden = [] is softmax regression. Layer l's weight is the slice
    (out_l, in_l) row-major, then its bias (out_l)."""

    def __init__(self, features, hidden):
        self.sizes = [features] + list(hidden) + [CLASSES]
        self.layers = []  # (weight offset, bias offset, in, out)
        offset = 0
        for fan_in, fan_out in zip(self.sizes[:-1], self.sizes[1:]):
            self.layers.append((offset, offset + fan_in * fan_out, fan_in, fan_out))
            offset += fan_in * fan_out + fan_out
        self.parameters = offset

    def describe(self):
        return "mlp " + "-".join(str(s) for s in self.sizes)

    def init(self, seed):
        """The model both sides train: He-normal weights N(0, 2 / fan_in) below a ReLU,
        LeCun-normal N(0, 1 / fan_in) for the output layer, zero biases (the MLP asgdsim
        defines, kernels/layers/affine.h; drawn here from the reference's own generator, so the
        values differ, the law does not). PyTorch's nn.Linear default, U(+-1/sqrt(fan_in))
        weights and biases, learnt measurably slower per update and made time to target
        compare two models instead of two clocks."""
        rng = keyed_rng(seed, PURPOSE_INIT)
        w = np.zeros(self.parameters, dtype=np.float32)
        for i, (wo, bo, fan_in, fan_out) in enumerate(self.layers):
            gain = 2.0 if i + 1 < len(self.layers) else 1.0
            w[wo:bo] = rng.normal(0.0, math.sqrt(gain / fan_in), bo - wo)
        return torch.from_numpy(w)

    def logits(self, w, x):
        h = x
        for i, (wo, bo, fan_in, fan_out) in enumerate(self.layers):
            h = F.linear(h, w[wo:bo].view(fan_out, fan_in), w[bo:bo + fan_out])
            if i + 1 < len(self.layers):
                h = F.relu(h)
        return h

    def loss(self, w, x, y):
        return F.cross_entropy(self.logits(w, x), y)

    def loss_and_grad(self, w, x, y):
        """w: a leaf tensor with requires_grad. Returns (loss as float, w.grad)."""
        w.grad = None
        loss = self.loss(w, x, y)
        loss.backward()
        return float(loss.detach()), w.grad

    @torch.no_grad()
    def evaluate(self, w, x, y, chunk=4096):
        """(mean cross-entropy, accuracy) of parameters w on (x, y)."""
        total, correct = 0.0, 0
        for i in range(0, x.shape[0], chunk):
            logits = self.logits(w, x[i:i + chunk])
            total += float(F.cross_entropy(logits, y[i:i + chunk], reduction="sum"))
            correct += int((logits.argmax(dim=1) == y[i:i + chunk]).sum())
        return total / x.shape[0], correct / x.shape[0]


# ---------------------------------------------------------------------------- sampling


def minibatch_ids(seed, worker, step, batch, samples):
    """Worker's step-th minibatch: batch distinct ids, uniform over the training set."""
    return keyed_rng(seed, PURPOSE_BATCH, worker, step).choice(samples, batch, replace=False)


# ---------------------------------------------------------------------------- durations

# name -> (parameter names, draw(rng, *params)); every draw is one whole step, in seconds.
DISTRIBUTIONS = {
    "constant": (("value",), lambda rng, v: v),
    "uniform": (("low", "high"), lambda rng, lo, hi: rng.uniform(lo, hi)),
    "exponential": (("mean",), lambda rng, m: rng.exponential(m)),
    "shifted_exponential": (("shift", "mean"), lambda rng, s, m: s + rng.exponential(m)),
    # mean = exp(mu + sigma^2 / 2)
    "lognormal": (("mean", "sigma"), lambda rng, m, s: rng.lognormal(math.log(m) - s * s / 2, s)),
    "weibull": (("scale", "shape"), lambda rng, sc, k: sc * rng.weibull(k)),
    "pareto": (("scale", "alpha"), lambda rng, sc, a: sc * (1.0 + rng.pareto(a))),
}


class ComputeModel:
    """Emulated step durations: worker w's step k lasts speed[w] x draw(seed, w, k) seconds.
    spec is "NAME:P1[,P2]" (e.g. "exponential:0.03", "lognormal:0.03,0.5"); speeds is one
    slowdown factor per worker (2 = twice as slow), or empty for all 1."""

    def __init__(self, spec, speeds, workers, seed):
        name, _, params = spec.partition(":")
        if name not in DISTRIBUTIONS:
            raise InputError(f"--compute {spec!r}: unknown distribution {name!r} "
                             f"(allowed: {', '.join(DISTRIBUTIONS)})")
        names, self._draw = DISTRIBUTIONS[name]
        try:
            values = [float(p) for p in params.split(",")] if params else []
        except ValueError:
            raise InputError(f"--compute {spec!r}: parameters must be numbers") from None
        if len(values) != len(names):
            raise InputError(f"--compute {spec!r}: {name} takes {len(names)} parameter(s): "
                             f"{name}:{','.join(names)}")
        if any(not math.isfinite(v) or v < 0 for v in values):
            raise InputError(f"--compute {spec!r}: parameters must be finite and >= 0")
        params = dict(zip(names, values))
        if params.get("mean", 1.0) <= 0:
            raise InputError(f"--compute {spec!r}: the mean must be > 0")
        if name == "uniform" and values[1] < values[0]:
            raise InputError(f"--compute {spec!r}: high < low")
        if name in ("weibull", "pareto") and min(values) <= 0:
            raise InputError(f"--compute {spec!r}: {name}'s parameters must be > 0")
        self.spec, self.name, self.params = spec, name, params
        if not speeds:
            self.speeds = [1.0] * workers
        else:
            try:
                self.speeds = [float(s) for s in speeds.split(",")]
            except ValueError:
                raise InputError(f"--speeds {speeds!r}: not a list of numbers") from None
            if len(self.speeds) != workers:
                raise InputError(f"--speeds {speeds!r}: {len(self.speeds)} factors for {workers} workers")
            if any(not math.isfinite(s) or s <= 0 for s in self.speeds):
                raise InputError(f"--speeds {speeds!r}: factors must be finite and > 0")
        self.seed = seed

    def seconds(self, worker, step):
        rng = keyed_rng(self.seed, PURPOSE_COMPUTE, worker, step)
        return self.speeds[worker] * float(self._draw(rng, *self.params.values()))
