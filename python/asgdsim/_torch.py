"""asgdsim._torch — the Python side of model.type / data.type "torch".

The simulator (C++) calls these objects from its worker threads, one call at a time
(python/src/core.cpp holds a lock around each): Bridge.load_data and Bridge.build_model
once per run, then Job.init_params, Job.grad for every gradient and Job.evaluate for every
evaluation chunk (and, before the runs, Job.flops for cluster.compute dist "flops" and
Job.identity for the calibration cache of dist "measured"). The rules they keep are docs/python.md's gradient contract:

- A job is a pure function of (parameters, sample ids, job key): it loads the flat
  parameter vector the engine hands it into the module, resets the module's buffers to
  their initial values, seeds torch's generator from the job key (seed, worker, step), runs
  forward and backward in train mode on the minibatch and writes the flat gradient of the
  mean loss. So staleness, versions, precision and every engine work as for native models,
  and the bits do not depend on which thread ran the job or when.
- BatchNorm running statistics are not carried between jobs (no worker owns the model of
  record); at each evaluation they are recomputed for the parameters of record from the
  first model.bn_samples training samples (PreciseBN, Wu & Johnson 2021), in chunks of 256.
"""
import copy
import ctypes
import hashlib
import importlib.util
import inspect
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from . import _core
from .errors import ModelError
from .flops import count_flops

_CHUNK = 256  # rows per forward pass when evaluating or recomputing BatchNorm statistics
_FLOPS_SAMPLES = 8  # the minibatch Job.flops counts (every counted product is linear in it)
_MAX_SAMPLES = 2**31 - 1  # sample ids are int32 in the simulator
_modules = {}  # absolute file path -> the module loaded from it (each file runs once)
_blas_threads = None  # what the loaded OpenBLAS libraries were last set to


def _openblas_libraries():
    """Every OpenBLAS loaded in this process (torch's own BLAS may be one), as ctypes
    libraries that have openblas_set_num_threads and openblas_get_num_threads."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "blas" in os.path.basename(line.split()[-1]).lower()}
    except OSError:
        return []
    libs = []
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            continue
        if hasattr(lib, "openblas_set_num_threads") and hasattr(lib, "openblas_get_num_threads"):
            libs.append(lib)
    return libs


def _set_blas_threads(n):
    """Sizes the thread pool of every OpenBLAS loaded in this process to n (torch's own BLAS
    ignores torch.set_num_threads), so that a job's matrix products run on the job's
    model.threads threads and not on a pool sized by the machine's cores. A BLAS that is
    not OpenBLAS is left alone."""
    global _blas_threads
    if _blas_threads == n:
        return
    _blas_threads = n
    for lib in _openblas_libraries():
        lib.openblas_set_num_threads(ctypes.c_int(n))


def blas_threads_state():
    """The loaded OpenBLAS libraries' thread counts, for restore_blas_threads."""
    return [(lib, lib.openblas_get_num_threads()) for lib in _openblas_libraries()]


def restore_blas_threads(state):
    """Sets back what blas_threads_state saw (the caller's process as it was before a run)."""
    global _blas_threads
    _blas_threads = None
    for lib, n in state:
        lib.openblas_set_num_threads(ctypes.c_int(n))


def load_spec(spec, base_dir, key):
    """'FILE.py:NAME' -> the object NAME of FILE (relative to base_dir)."""
    if ":" not in spec:
        raise ModelError(f"{key}: '{spec}' is not FILE.py:NAME (e.g. models.py:make_model)")
    path, name = spec.rsplit(":", 1)
    if not os.path.isabs(path):
        path = os.path.join(base_dir or ".", path)
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise ModelError(f"{key}: {path}: no such file")
    if path not in _modules:
        folder = os.path.dirname(path)
        if folder not in sys.path:  # as `python3 FILE.py` does: the file imports its neighbours
            sys.path.insert(0, folder)
        mod_spec = importlib.util.spec_from_file_location(
            "asgdsim_user_" + str(len(_modules)), path)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
        _modules[path] = module
    if not hasattr(_modules[path], name):
        raise ModelError(f"{key}: {path} has no '{name}'")
    return getattr(_modules[path], name)


def job_seed(seed, worker, step):
    """The job key as one 63-bit seed for torch's generator (splitmix64 of the three)."""
    z = (seed * 0x9E3779B97F4A7C15 + worker * 0xBF58476D1CE4E5B9 + step * 0x94D049BB133111EB) & (2**64 - 1)
    for _ in range(2):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
        z ^= z >> 31
    return z & (2**63 - 1)


def _is_pair(obj):
    return isinstance(obj, (tuple, list)) and len(obj) == 2 and all(isinstance(t, torch.Tensor) for t in obj)


class _Data:
    """A map-style dataset, or a pair of tensors (inputs, targets), with a fast path for
    tensors (TensorDataset and pairs index all rows at once)."""

    def __init__(self, obj, name, limit):
        self.name = name
        if _is_pair(obj):
            if len(obj[0]) != len(obj[1]):
                raise ModelError(f"the {name}: inputs have {len(obj[0])} rows but targets {len(obj[1])}")
            self.tensors = (obj[0], obj[1])
        elif isinstance(obj, torch.utils.data.TensorDataset) and len(obj.tensors) == 2:
            self.tensors = tuple(obj.tensors)
        else:
            self.tensors = None
            if not hasattr(obj, "__getitem__") or not hasattr(obj, "__len__"):
                raise ModelError(f"the {name} is a {type(obj).__name__}: a map-style torch Dataset "
                                 "(__getitem__ and __len__) or a pair of tensors (inputs, targets) is needed")
        self.obj = obj
        n = len(self.tensors[0]) if self.tensors else len(obj)
        if n > _MAX_SAMPLES:  # sample ids are 32-bit
            raise ModelError(f"the {name} has {n} samples: at most {_MAX_SAMPLES} (2^31 - 1) can be addressed; "
                             f"use data.{'train' if name == 'training set' else 'test'}_limit")
        if limit and limit > n:
            key = "train_limit" if name == "training set" else "test_limit"
            raise ModelError(f"data.{key} is {limit} but the {name} has {n} samples")
        self.n = limit or n

    def batch(self, ids):
        if self.tensors is not None:
            idx = torch.from_numpy(np.asarray(ids, dtype=np.int64))
            return self.tensors[0][idx], self.tensors[1][idx]
        items = [self.item(i) for i in ids]
        x, y = torch.utils.data.default_collate(items) if hasattr(torch.utils.data, "default_collate") \
            else torch.utils.data._utils.collate.default_collate(items)
        return x, y

    def item(self, i):
        try:
            return self.obj[int(i)]
        except IndexError as e:
            raise ModelError(f"the {self.name} says it has {len(self.obj)} samples (len), but item {int(i)} "
                             f"raised IndexError: {e}") from None

    def targets(self):
        """All targets as one tensor (for labels and the class count). A Dataset's own
        `targets` is used when it agrees with its items (a few are compared); else the
        items are read one by one, polling for Ctrl-C."""
        if self.tensors is not None:
            return self.tensors[1][: self.n]
        t = getattr(self.obj, "targets", None)
        if t is not None and len(t) >= self.n:
            t = torch.as_tensor(t)[: self.n]
            for i in sorted({0, self.n // 3, self.n // 2, self.n - 1} if self.n else ()):
                item = torch.as_tensor(self.item(i)[1])
                if item.shape != t[i].shape or not bool((item == t[i]).all()):
                    raise ModelError(f"the {self.name}'s `targets` says sample {i} is {t[i].tolist()}, but its item "
                                     f"{i} has target {item.tolist()}: `targets` must be the items' targets, in order")
            return t
        out = []
        for i in range(self.n):
            if i % 4096 == 0 and _core.interrupted():
                raise KeyboardInterrupt  # the simulator ends the run as interrupted
            out.append(self.item(i)[1])
        return torch.as_tensor(out)


class Bridge:
    """What asgdsim.run was given: the model (an nn.Module or a factory), the loss, the
    datasets. Loads and builds them for the simulator (python/src/core.cpp)."""

    def __init__(self, model=None, loss=None, data=None, test_data=None):
        self.model, self.loss, self.data, self.test_data = model, loss, data, test_data
        self.train = self.test = None

    def load_data(self, cfg):
        given = self.data
        if cfg["module"]:
            given = load_spec(cfg["module"], cfg["base_dir"], "data.module")()
        elif given is not None and callable(given) and not isinstance(given, torch.utils.data.Dataset):
            given = given()
        if given is None:
            raise ModelError("data.type torch: no data: give data= (and test_data=), or data.module FILE.py:FACTORY")
        test = self.test_data
        if isinstance(given, (tuple, list)) and len(given) == 2 and not _is_pair(given):
            given, test = given  # the factory gave (training set, test set)
        if test is None:
            raise ModelError("data.type torch: no test set: give test_data=, or a factory returning "
                             "(training set, test set)")
        self.train = _Data(given, "training set", cfg["train_limit"])
        self.test = _Data(test, "test set", cfg["test_limit"])
        if self.train.n == 0:
            raise ModelError("the training set is empty: a run needs samples to draw its minibatches from")
        classes = cfg["classes"]
        labels = []
        for d in (self.train, self.test):
            t = d.targets()
            integer = not (t.is_floating_point() or t.is_complex())
            if integer and (t.dim() == 0 or (t.dim() == 2 and t.shape[1] == 1)):
                # (N, 1): one class per sample in a column, which cross_entropy reads as a
                # sequence of length 1 and fails on; (N, T, ...) integers are classes per
                # position (a language model's next tokens) and pass to the loss as they are
                raise ModelError(f"the {d.name}'s targets are integers of shape {tuple(t.shape)}: class numbers "
                                 f"must be one per sample, shape ({d.n},) (e.g. y.view(-1)); for regression, give "
                                 "float targets")
            if classes > 0 and t.dim() == 1 and not integer:
                raise ModelError(f"data.classes is {classes} but the {d.name}'s targets are {t.dtype}: class numbers "
                                 "must be integers (e.g. y.long())")
            if t.dim() != 1 or (classes == 0 and not integer):
                labels.append(None)
                continue
            if classes == 0 and d is self.train:
                classes = int(t.max()) + 1 if len(t) else 0
            labels.append(t)
        if classes > 0:
            for d, t in zip((self.train, self.test), labels):
                if t is None:
                    raise ModelError(f"data.classes is {classes} but the {d.name}'s targets are not one class "
                                     "number per sample")
                if len(t) and (int(t.min()) < 0 or int(t.max()) >= classes):
                    raise ModelError(f"the {d.name} has a target {int(t.max()) if int(t.max()) >= classes else int(t.min())}"
                                     f" outside [0, {classes}) (data.classes {cfg['classes']}: 0 means the largest + 1)")
        out = {"train_n": self.train.n, "test_n": self.test.n, "classes": classes,
               "description": f"a PyTorch data set ({self.train.n} training, {self.test.n} test samples)"}
        for part, t in zip(("train", "test"), labels):
            out[part + "_labels"] = t.to(torch.float32).numpy() if (classes > 0 and t is not None) else None
        return out

    def build_model(self, cfg, inp):
        base = inp["base_dir"]
        if cfg["module"]:
            make = load_spec(cfg["module"], base, "model.module")
        elif self.model is not None:
            make = self.model
        else:
            raise ModelError("model.type torch: no model: give model= (an nn.Module or a factory), or "
                             "model.module FILE.py:FACTORY")
        if isinstance(make, torch.nn.Module):
            instance = make
            make = lambda: copy.deepcopy(instance)  # noqa: E731 (every seed starts from its parameters)
        loss = self.loss
        if cfg["loss"]:
            loss = load_spec(cfg["loss"], base, "model.loss")
        if loss is None:
            loss = F.cross_entropy if inp["classes"] > 0 else F.mse_loss
        return Job(make, loss, cfg["threads"], cfg["bn_samples"], inp, self)


class Job:
    """One run's module: gradients and evaluations on the parameters the engine gives."""

    def __init__(self, make, loss, threads, bn_samples, inp, bridge):
        self.make, self.loss, self.threads, self.bn_samples = make, loss, threads, bn_samples
        self._set_threads()
        torch.manual_seed(0)
        self.module = make()
        if not isinstance(self.module, torch.nn.Module):
            raise ModelError(f"the model factory returned a {type(self.module).__name__}, not a torch.nn.Module")
        self.params = list(self.module.parameters())
        self.num_params = self._count()
        if self.num_params == 0:
            raise ModelError("the module has no parameters")
        self.buffers = list(self.module.buffers())
        self.buffers0 = [b.detach().clone() for b in self.buffers]
        self._checked = False  # the parameter count, checked after the first job
        self.bn = [m for m in self.module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        self.classes = inp["classes"]
        self.shape = tuple(inp["shape"])  # height, width, channels (native data)
        self.native_train = (inp.get("train_x"), inp.get("train_y"))
        self.bridge = bridge
        self._bn_w = None  # the parameters the BatchNorm statistics were last recomputed for
        self._bn_state = None

    def _count(self):
        return sum(p.numel() for p in self.module.parameters())

    def _set_threads(self):
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        _set_blas_threads(self.threads)

    def init_params(self, seed):
        torch.manual_seed(seed)
        m = self.make()
        return torch.nn.utils.parameters_to_vector(m.parameters()).detach().to(torch.float32).numpy().copy()

    def _load(self, w):
        wt = torch.from_numpy(w)
        with torch.no_grad():
            o = 0
            for p in self.params:
                n = p.numel()
                p.copy_(wt[o:o + n].view_as(p))
                o += n
            for b, b0 in zip(self.buffers, self.buffers0):
                b.copy_(b0)

    def _native(self, x, y):
        xt = torch.from_numpy(x)
        h, w, c = self.shape
        if h * w > 1 and c * h * w == xt.shape[1]:  # images, stored channels last: NCHW for torch
            xt = xt.view(-1, h, w, c).permute(0, 3, 1, 2).contiguous()
        yt = torch.from_numpy(y)
        return xt, (yt.long() if self.classes > 0 else yt)

    def _batch(self, set_id, ids, x, y):
        if x is not None:
            return self._native(x, y)
        d = self.bridge.train if set_id == 0 else self.bridge.test
        return d.batch(ids)

    def _check_count(self):
        n = self._count()
        if n != self.num_params or len(list(self.module.parameters())) != len(self.params):
            raise ModelError(f"the module's parameter count changed from {self.num_params} to {n} during a job: "
                             "a module must have all its parameters when the factory returns it (materialize lazy "
                             "layers there)")

    def _mean_loss(self, out, y):
        loss = self.loss(out, y)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise ModelError(f"the loss returned {shape}: it must return one number (the minibatch's mean loss)")
        if not loss.is_floating_point():  # complex, integer, bool: no gradient of a real loss
            raise ModelError(f"the loss returned a {loss.dtype} number: it must return a real floating-point one "
                             "(the minibatch's mean loss)")
        return loss

    def grad(self, w, g, set_id, ids, x, y, seed, worker, step):
        self._set_threads()
        self._load(w)
        xb, yb = self._batch(set_id, ids, x, y)
        torch.manual_seed(job_seed(seed, worker, step))
        if not self.module.training:
            self.module.train()
        for p in self.params:
            p.grad = None
        loss = self._mean_loss(self.module(xb), yb)
        loss.backward()
        if not self._checked:  # a module that grows does so in its first forward (lazy layers)
            self._check_count()
            self._checked = True
        gt = torch.from_numpy(g)
        o = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                if p.grad is None:
                    gt[o:o + n] = 0
                else:
                    gt[o:o + n] = p.grad.reshape(-1)
                o += n
        return float(loss.detach())

    def flops(self):
        """(FLOPs per sample of a gradient job, how they were counted) for dist "flops": the
        forward and backward of the first 8 training samples in train mode, counted by
        asgdsim.flops (the native models' meaning), divided by 8. Every product counted is
        linear in the minibatch, so it is the same per sample at any batch size."""
        self._set_threads()
        n_train = self.native_train[0].shape[0] if self.native_train[0] is not None else self.bridge.train.n
        n = min(_FLOPS_SAMPLES, n_train)
        x, y = self._train_rows(0, n)
        torch.manual_seed(0)
        self.module.train()
        c = count_flops(self.module, x, y, self._mean_loss)
        for p in self.params:
            p.grad = None
        how = (f"torch.utils.flop_counter.FlopCounterMode (torch {torch.__version__})" if c.counter == "FlopCounterMode"
               else f"module hooks on Linear, Conv, ConvTranspose, MultiheadAttention (torch {torch.__version__})")
        how += "; elementwise work and lookups count 0"
        if c.uncounted:
            how += "; not seen (their products are not counted): " + ", ".join(c.uncounted)
        if not c.total > 0:
            raise ModelError(f"cluster.compute dist \"flops\": the module's forward and backward count 0 FLOPs by "
                             f"{how}: give a duration, or dist \"measured\"")
        return c.total / n, how

    def identity(self):
        """What a step's time depends on in the module beyond the run's config, hashed
        (sha256): the source of its classes (torch's own by name: torch's version covers
        them), its structure (repr), its parameters' and buffers' names, shapes and types,
        one training sample's and target's shape and type, the loss and torch's version."""
        h = hashlib.sha256(f"torch {torch.__version__}\n".encode())

        def source(obj):
            try:
                return inspect.getsource(obj)
            except (OSError, TypeError):
                return ""
        for cls in sorted({type(m) for m in self.module.modules()}, key=lambda c: (c.__module__, c.__qualname__)):
            own = not cls.__module__.startswith("torch.")
            h.update(f"{cls.__module__}.{cls.__qualname__}\n{source(cls) if own else ''}".encode())
        h.update(repr(self.module).encode())
        for name, t in list(self.module.named_parameters()) + list(self.module.named_buffers()):
            h.update(f"{name} {tuple(t.shape)} {t.dtype}\n".encode())
        x, y = self._train_rows(0, 1)
        h.update(f"x {tuple(x.shape)} {x.dtype} y {tuple(y.shape)} {y.dtype}\n".encode())
        h.update(f"loss {getattr(self.loss, '__qualname__', repr(self.loss))}\n{source(self.loss)}".encode())
        return h.hexdigest()

    def _train_rows(self, begin, end):
        x, y = self.native_train
        if x is not None:
            return self._native(x[begin:end], y[begin:end])
        return self.bridge.train.batch(range(begin, end))

    def _recompute_bn(self, w):
        """BatchNorm statistics of the parameters w (PreciseBN): the cumulative average over
        the first bn_samples training samples' chunks; reused while w is the same."""
        if self._bn_w is not None and np.array_equal(self._bn_w, w):
            for m, (mean, var, count) in zip(self.bn, self._bn_state):
                m.running_mean.copy_(mean)
                m.running_var.copy_(var)
                m.num_batches_tracked.copy_(count)
            return
        n_train = self.native_train[0].shape[0] if self.native_train[0] is not None else self.bridge.train.n
        n = min(self.bn_samples, n_train)
        momenta = [m.momentum for m in self.bn]
        for m in self.bn:
            m.reset_running_stats()
            m.momentum = None
        self.module.train()
        torch.manual_seed(0)
        with torch.no_grad():
            for b in range(0, n, _CHUNK):
                self.module(self._train_rows(b, min(n, b + _CHUNK))[0])
        for m, mom in zip(self.bn, momenta):
            m.momentum = mom
        self._bn_w = w.copy()
        self._bn_state = [(m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone())
                          for m in self.bn]

    def evaluate(self, w, set_id, begin, end, x, y):
        self._set_threads()
        self._load(w)
        if self.bn and self.bn_samples > 0:
            self._recompute_bn(w)
        self.module.eval()
        loss_sum, correct = 0.0, 0.0
        with torch.no_grad():
            for b in range(begin, end, _CHUNK):
                e = min(end, b + _CHUNK)
                if x is not None:
                    xb, yb = self._native(x[b - begin:e - begin], y[b - begin:e - begin])
                else:
                    xb, yb = self._batch(set_id, range(b, e), None, None)
                out = self.module(xb)
                loss_sum += float(self._mean_loss(out, yb)) * (e - b)
                if self.classes > 0 and out.dim() == 2 and out.shape[1] > 1:  # a score per class: argmax
                    correct += float((out.argmax(1) == yb).sum())
                else:  # no count of right answers can be made: no accuracy (NaN), never a made-up 0
                    correct = float("nan")
        return loss_sum, correct, end - begin
