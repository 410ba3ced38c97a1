"""asgdsim.population — a population's devices as asgdsim reads them (sim/data/client_devices.h):
FedScale's published device traces converted to asgdsim's population folder, and a seeded
generator of synthetic populations that writes both formats.

    python3 -m asgdsim.population synthetic --clients 1000 --seed 1 --out DIR [--no-pickles] [...]
    python3 -m asgdsim.population fedscale --capacity FILE [--behaviour FILE] --out DIR
                                           [--clients N] [--join id|order]

The folder: devices.csv (client,compute_ms_per_sample,bandwidth_kbps), availability.csv
(client,active_from,active_to,period; absent: always available) and ids.csv (client,
capacity_id,behaviour_id: which FedScale client each asgdsim client is). FedScale's files are
pickles of a dict client id -> {"computation": ms per sample, "communication": kbit/s}
(client_device_capacity) and client id -> {"active": [s], "inactive": [s], "finish_time": s,
...} (client_behave_trace); they are read with an unpickler that builds only dicts, lists,
tuples, sets, numbers and strings, never plain pickle.load. Clients are numbered 0..n-1 in
ascending FedScale id. docs/population-devices.md has the formats, FedScale's availability
rule and where the conversion departs from it, and the generator's laws. Bad input raises
asgdsim.errors.InputError (the command line: its message and exit code 2).
"""
import argparse
import math
import numbers
import os
import pickle
import sys

import numpy as np

from .errors import InputError

DEVICES_HEADER = "client,compute_ms_per_sample,bandwidth_kbps"
AVAILABILITY_HEADER = "client,active_from,active_to,period"
IDS_HEADER = "client,capacity_id,behaviour_id"
CAPACITY_FILE = "client_device_capacity"  # FedScale's names, in DIR/fedscale/ of a synthetic population
BEHAVIOUR_FILE = "client_behave_trace"


# ---- reading FedScale's pickles ----

def _numpy_scalar(dtype, *args):
    """numpy's scalar reconstructor (what a pickled numpy.float64 calls), for numbers only."""
    if not isinstance(dtype, np.dtype) or dtype.kind not in "biuf":
        raise pickle.UnpicklingError(f"a numpy scalar of dtype {dtype!r}: only numbers are read")
    from numpy.core.multiarray import scalar
    return scalar(dtype, *args)


def _latin1(text, encoding):
    """codecs.encode as a protocol-2 pickle uses it (bytes written as latin-1 text), only so."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"codecs.encode with {encoding!r}: only latin-1 text is read")
    return text.encode("latin-1")


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain containers and numbers only: dict, list, tuple, set, int, float, str (for
    which pickle needs no class), OrderedDict, numpy's numeric scalars (numpy.float64: what
    a trace made with numpy may hold) and latin-1 bytes (how protocol 2 writes a scalar's
    bytes); any other global (os.system, builtins.eval, a user's class, a numpy array) is
    refused before it is looked up."""

    _BUILTINS = {"dict", "list", "tuple", "set", "frozenset", "int", "float", "bool", "str", "bytes"}
    _NUMPY_SCALAR = {("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar")}

    def find_class(self, module, name):
        if module in ("builtins", "__builtin__") and name in self._BUILTINS:
            return {"dict": dict, "list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "int": int,
                    "float": float, "bool": bool, "str": str, "bytes": bytes}[name]
        if (module, name) == ("collections", "OrderedDict"):
            import collections
            return collections.OrderedDict
        if (module, name) in self._NUMPY_SCALAR:
            return _numpy_scalar
        if (module, name) == ("numpy", "dtype"):
            return np.dtype
        if (module, name) == ("_codecs", "encode"):
            return _latin1
        raise pickle.UnpicklingError(f"refused to load '{module}.{name}': a FedScale trace holds only dicts, lists "
                                     "and numbers")


def load_pickle(path, what="trace"):
    """The object pickled in `path`, through the restricted unpickler; InputError naming the
    file when it cannot be read, is not a pickle, or holds anything but plain data."""
    try:
        with open(path, "rb") as f:
            return _PlainUnpickler(f).load()
    except OSError as e:
        raise InputError(f"{what} file {path}: cannot read ({e.strerror or e})", 2) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            RecursionError, MemoryError) as e:
        raise InputError(f"{what} file {path}: not a FedScale pickle of plain data ({type(e).__name__}: {e})",
                         2) from None


# ---- checking and converting ----

def _number(value, where):
    """A finite int or float (numpy's included; not bool), or InputError naming `where`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{where}: {value!r} is not a number", 2)
    value = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not math.isfinite(value):
        raise InputError(f"{where}: {value!r} is not a finite number", 2)
    return value


def _fmt(value):
    """A number as the folder's files hold it: an int as digits, a float as Python's shortest
    text that reads back to the same double."""
    return str(value) if isinstance(value, int) else repr(value)


def _sorted_ids(trace, what):
    """A FedScale dict's client ids in ascending order (ints, or strings of digits)."""
    if not isinstance(trace, dict) or not trace:
        raise InputError(f"{what}: expected a non-empty dict of client id -> entry, got "
                         f"{type(trace).__name__}{' (empty)' if isinstance(trace, dict) else ''}", 2)

    def key(i):
        if isinstance(i, numbers.Integral) and not isinstance(i, bool):
            return int(i)
        if isinstance(i, str) and i.strip().lstrip("-").isdigit():
            return int(i)
        raise InputError(f"{what}: client id {i!r} is not an integer", 2)
    return sorted(trace, key=key)


def _device(entry, cid, what):
    """(compute ms per sample, bandwidth kbit/s) of one capacity entry."""
    if not isinstance(entry, dict):
        raise InputError(f"{what}: client {cid!r}: expected a dict with 'computation' and 'communication'", 2)
    out = []
    for key, unit in (("computation", "ms per sample"), ("communication", "kbit/s")):
        if key not in entry:
            raise InputError(f"{what}: client {cid!r}: no '{key}' ({unit})", 2)
        v = _number(entry[key], f"{what}: client {cid!r}: '{key}'")
        if not v > 0:
            raise InputError(f"{what}: client {cid!r}: '{key}' {v!r}: must be a positive number of {unit}", 2)
        out.append(v)
    return tuple(out)


def _intervals(entry, cid, what, counts):
    """(period, [(from, to), ...]) of one behaviour entry under FedScale's rule read without its
    cursor: available at t iff t mod finish_time lies in some [active[i], inactive[i]]. The
    same set, written canonically: pairs beyond len(active) ignored (FedScale reads only
    those), empty pairs (active > inactive) dropped, each clipped to [0, finish_time] (t mod
    finish_time never leaves it), sorted, and overlapping or touching ones merged. `counts`
    tallies what changed."""
    where = f"{what}: client {cid!r}"
    if not isinstance(entry, dict):
        raise InputError(f"{where}: expected a dict with 'active', 'inactive' and 'finish_time'", 2)
    for key in ("active", "inactive", "finish_time"):
        if key not in entry:
            raise InputError(f"{where}: no '{key}'", 2)
    period = _number(entry["finish_time"], f"{where}: 'finish_time'")
    if not period > 0:
        raise InputError(f"{where}: 'finish_time' {period!r}: must be above 0 s (the trace's period)", 2)
    active, inactive = entry["active"], entry["inactive"]
    for key, v in (("active", active), ("inactive", inactive)):
        if not isinstance(v, (list, tuple)):
            raise InputError(f"{where}: '{key}' is {type(v).__name__}, not a list of seconds", 2)
    if len(inactive) < len(active):
        raise InputError(f"{where}: {len(active)} 'active' times but {len(inactive)} 'inactive': FedScale pairs "
                         "active[i] with inactive[i], so inactive needs as many", 2)
    pairs = []
    for i, (a, b) in enumerate(zip(active, inactive)):
        a = _number(a, f"{where}: active[{i}]")
        b = _number(b, f"{where}: inactive[{i}]")
        if a > b:
            counts["empty_dropped"] += 1
            continue
        lo, hi = max(a, 0), min(b, period)
        if lo >= period or hi < lo:
            counts["outside_dropped"] += 1
            continue
        counts["clipped"] += (lo, hi) != (a, b)
        pairs.append((lo, hi))
    pairs.sort()
    merged = []
    for lo, hi in pairs:
        if merged and lo <= merged[-1][1]:
            counts["merged"] += 1
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return period, merged


def convert(capacity, behaviour, out, clients=None, join="id", what=("capacity", "behaviour")):
    """Writes the population folder `out` from FedScale's dicts (already loaded): the clients
    are the capacity's ids in ascending order (the first `clients` of them that are ever
    available), numbered 0..n-1; `behaviour` (None: always available) joined by id, or with
    join="order" by position (the k-th client takes the behaviour of the (k mod len)-th id in
    ascending order: FedScale's own client -> trace mapping). Returns what was done: clients,
    ids left out as never available, and the intervals dropped, clipped and merged."""
    if join not in ("id", "order"):
        raise InputError(f"join '{join}': expected 'id' or 'order'", 2)
    if clients is not None and (isinstance(clients, bool) or not isinstance(clients, numbers.Integral)
                                or clients < 1):
        raise InputError(f"clients {clients!r}: expected a positive integer", 2)
    cap_ids = _sorted_ids(capacity, what[0])
    beh_ids = None if behaviour is None else _sorted_ids(behaviour, what[1])
    if beh_ids is not None and join == "id":
        known = set(behaviour)
        missing = [i for i in cap_ids if i not in known]
        if missing:
            raise InputError(f"{what[1]}: no entry for client {missing[0]!r} of {what[0]} ({len(missing)} of "
                             f"{len(cap_ids)} clients have none): the two files number clients differently? "
                             "join='order' (--join order) pairs them by position, as FedScale does", 2)
    counts = {"empty_dropped": 0, "outside_dropped": 0, "clipped": 0, "merged": 0}
    devices, availability, ids, never = [], [], [], []
    for k, cid in enumerate(cap_ids):
        if clients is not None and len(devices) == clients:
            break
        compute, bandwidth = _device(capacity[cid], cid, what[0])
        c, bid = len(devices), ""
        if beh_ids is not None:
            bid = cid if join == "id" else beh_ids[k % len(beh_ids)]
            period, merged = _intervals(behaviour[bid], bid, what[1], counts)
            if not merged:
                never.append(cid)
                continue
            availability += [f"{c},{_fmt(lo)},{_fmt(hi)},{_fmt(period)}" for lo, hi in merged]
        devices.append(f"{c},{_fmt(compute)},{_fmt(bandwidth)}")
        ids.append(f"{c},{cid},{bid}")
    if clients is not None and len(devices) < clients:
        raise InputError(f"clients {clients}: {what[0]} has only {len(devices)} clients that are ever available "
                         f"({len(cap_ids)} in all, {len(never)} never available)", 2)
    if not devices:
        raise InputError(f"{what[1]}: no client of {what[0]} is ever available", 2)
    files = {"devices.csv": [DEVICES_HEADER] + devices, "ids.csv": [IDS_HEADER] + ids}
    if beh_ids is not None:
        files["availability.csv"] = [AVAILABILITY_HEADER] + availability
    _write_files(out, {name: "".join(line + "\n" for line in lines) for name, lines in files.items()})
    return {"clients": len(devices), "never_available": never, **counts}


def from_fedscale(capacity, behaviour, out, clients=None, join="id"):
    """Converts FedScale's client_device_capacity and client_behave_trace pickles (paths;
    behaviour None: always available) into the population folder `out` (see convert)."""
    cap = load_pickle(capacity, "capacity")
    beh = None if behaviour is None else load_pickle(behaviour, "behaviour")
    return convert(cap, beh, out, clients, join, what=(f"capacity file {capacity}", f"behaviour file {behaviour}"))


# ---- the synthetic generator ----

SYNTHETIC_DEFAULTS = {
    "compute_median_ms": 100.0,  # compute_ms ~ LogNormal(ln median, sigma)
    "compute_sigma": 0.7,
    "bandwidth_median_kbps": 5000.0,  # bandwidth ~ LogNormal(ln median, sigma)
    "bandwidth_sigma": 1.0,
    "always_on": 0.2,  # the fraction of clients available the whole period
    "mean_on_s": 3600.0,  # the others: alternating exponential on and off times
    "mean_off_s": 10800.0,
    "period_s": 86400,  # FedScale's finish_time: the day repeats
}


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{name} {value!r}: expected a positive number", 2)


def synthetic_traces(clients, seed, **laws):
    """(capacity, behaviour): FedScale's two dicts for `clients` synthetic devices with ids
    1..clients (FedScale's numbering), drawn from numpy's RandomState(seed) (NEP 19 keeps its
    stream fixed: the same dicts on any numpy) by the laws of SYNTHETIC_DEFAULTS, each
    overridable by keyword. Times are whole seconds, as FedScale's are."""
    unknown = sorted(set(laws) - set(SYNTHETIC_DEFAULTS))
    if unknown:
        raise InputError(f"unknown law '{unknown[0]}': expected one of {', '.join(SYNTHETIC_DEFAULTS)}", 2)
    p = {**SYNTHETIC_DEFAULTS, **laws}
    if isinstance(clients, bool) or not isinstance(clients, numbers.Integral) or clients < 1:
        raise InputError(f"clients {clients!r}: expected a positive integer", 2)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2 ** 32:
        raise InputError(f"seed {seed!r}: expected an integer in [0, 2^32)", 2)
    for name in ("compute_median_ms", "compute_sigma", "bandwidth_median_kbps", "bandwidth_sigma", "mean_on_s",
                 "mean_off_s", "period_s"):
        _positive(name, p[name])
    if not 0 <= p["always_on"] <= 1:
        raise InputError(f"always_on {p['always_on']!r}: expected a fraction in [0, 1]", 2)
    period = int(p["period_s"])
    if period != p["period_s"] or period < 2:
        raise InputError(f"period_s {p['period_s']!r}: expected a whole number of seconds, at least 2", 2)
    rng = np.random.RandomState(int(seed))
    compute = rng.lognormal(math.log(p["compute_median_ms"]), p["compute_sigma"], clients)
    bandwidth = rng.lognormal(math.log(p["bandwidth_median_kbps"]), p["bandwidth_sigma"], clients)
    always = set(rng.permutation(clients)[:int(round(p["always_on"] * clients))].tolist())
    on_share = p["mean_on_s"] / (p["mean_on_s"] + p["mean_off_s"])
    capacity, behaviour = {}, {}
    for c in range(clients):
        cid = c + 1
        capacity[cid] = {"computation": float(compute[c]), "communication": float(bandwidth[c])}
        if c in always:
            spans = [(0, period)]
        else:
            spans, t, on = [], 0, bool(rng.random_sample() < on_share)  # the stationary state at 0
            while t < period:
                length = max(1, math.ceil(rng.exponential(p["mean_on_s"] if on else p["mean_off_s"])))
                if on:
                    spans.append((t, min(t + length, period)))
                t += length
                on = not on
            if not spans:  # off the whole period: one on time at a uniform start
                start = int(rng.randint(0, period - 1))
                spans = [(start, min(period, start + max(1, math.ceil(rng.exponential(p["mean_on_s"])))))]
        behaviour[cid] = {"duration": period, "inactive": [b for _, b in spans], "finish_time": period,
                          "active": [a for a, _ in spans], "model": "synthetic"}
    return capacity, behaviour


def synthetic(clients, seed, out, pickles=True, **laws):
    """Writes a synthetic population: the folder format in `out` and, with `pickles`, FedScale's
    two pickles in out/fedscale/ (client_device_capacity, client_behave_trace), which
    from_fedscale turns into the same folder byte for byte. Returns convert's report."""
    capacity, behaviour = synthetic_traces(clients, seed, **laws)
    report = convert(capacity, behaviour, out)
    if pickles:
        _write_files(os.path.join(out, "fedscale"),
                     {CAPACITY_FILE: pickle.dumps(capacity, protocol=4),
                      BEHAVIOUR_FILE: pickle.dumps(behaviour, protocol=4)})
    return report


# ---- writing ----

def _write_files(out, files):
    """Writes {name: text or bytes} into the folder `out`, which must be new or empty (nothing
    already there is overwritten); each file through a temporary name and a rename."""
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise InputError(f"out {out}: exists and is not an empty folder; nothing is overwritten: name a new folder", 2)
    try:
        os.makedirs(out, exist_ok=True)
        for name, content in files.items():
            path = os.path.join(out, name)
            data = content.encode() if isinstance(content, str) else content
            with open(path + ".tmp", "wb") as f:
                f.write(data)
            os.replace(path + ".tmp", path)
    except OSError as e:
        raise InputError(f"out {out}: cannot write ({e.strerror or e})", 2) from None


# ---- the command line ----

def _parser():
    p = argparse.ArgumentParser(prog="python3 -m asgdsim.population", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("synthetic", help="generate a synthetic population (folder and FedScale pickles)")
    s.add_argument("--clients", type=int, required=True)
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--out", required=True, help="a new folder")
    s.add_argument("--no-pickles", action="store_true", help="write the folder format only")
    for name, value in SYNTHETIC_DEFAULTS.items():
        s.add_argument("--" + name.replace("_", "-"), type=type(value), default=value, dest=name,
                       help=f"default {value}")
    f = sub.add_parser("fedscale", help="convert FedScale's client_device_capacity / client_behave_trace")
    f.add_argument("--capacity", required=True, help="FedScale's client_device_capacity (pickle)")
    f.add_argument("--behaviour", help="FedScale's client_behave_trace (pickle); absent: always available")
    f.add_argument("--out", required=True, help="a new folder")
    f.add_argument("--clients", type=int, help="keep the first N clients (ascending id) that are ever available")
    f.add_argument("--join", choices=("id", "order"), default="id",
                   help="pair behaviour with capacity by client id (default) or by position, as FedScale does")
    return p


def main(argv=None):
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "synthetic":
            laws = {name: getattr(args, name) for name in SYNTHETIC_DEFAULTS}
            report = synthetic(args.clients, args.seed, args.out, pickles=not args.no_pickles, **laws)
        else:
            report = from_fedscale(args.capacity, args.behaviour, args.out, args.clients, args.join)
    except InputError as e:
        print(f"asgdsim.population: {e.message}", file=sys.stderr)
        return e.exit_code
    never = report["never_available"]
    print(f"{args.out}: {report['clients']} clients; left out as never available: {len(never)}; intervals "
          f"dropped {report['empty_dropped'] + report['outside_dropped']}, clipped {report['clipped']}, "
          f"merged {report['merged']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
