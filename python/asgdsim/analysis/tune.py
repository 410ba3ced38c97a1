#!/usr/bin/env python3
"""tune.py — picks each engine's training keys from a tuning sweep, by a stated rule.

    analysis/tune.py RUNS/TUNING (--target-accuracy X | --target-loss X | --final METRIC)
        [--where KEY=VALUE ...] [--config STUDY.json --out TUNED.json] [--report FILE.md]

A fair comparison runs each engine at its own best learning rate (momentum, optimizer):
one tuning experiment sweeps the training keys (train.<key> or engine.train.<key>, the
grid) for every engine, on seeds of its own; this command picks each engine's best grid
point by the rule below and writes the study config with those values as each engine's
`train` (engines[i].train), refusing a study whose seeds are the tuning's (a choice made
on the reported seeds would flatter it). Every grid point is shown, so nothing is hidden:
the report lists, per engine, each point's runs, the value behind its score and which
point was picked.

The rule (one, stated in the report):
- with a target (--target-accuracy X: test accuracy >= X; --target-loss X: train loss
  <= X): a point is eligible when every one of its tuning runs completed and reached the
  target; its score is the geometric mean over the other swept keys' values (e.g. worker
  counts) of the mean time to target over the seeds (groups.crossing: interpolated
  between evaluations), so each condition weighs alike whatever its scale; the smallest
  score wins. When no point is eligible, the one whose runs reached the target most often
  wins, then the smallest bound (censored runs at their end), and the report says so.
- --final METRIC (test_accuracy, higher is better; train_loss or test_loss, lower is
  better): eligible when every run completed; the score is the mean final metric over
  all its runs.
Ties go to the first point in the sweep's order. The other swept keys (a worker count)
are conditions the score runs over, not choices: one value per engine is picked.

What it is not: it runs nothing (asgdsim run makes the tuning and the study).
Exit codes: 0 done, 2 invalid input (not an experiment, no training key swept, bad
option, seeds shared with the study), 1 other failure.
"""

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import data
from . import groups as grouping
from . import stats
from . import rundata

FINAL_METRICS = {"test_accuracy": max, "train_loss": min, "test_loss": min}
COMPLETED = grouping.COMPLETED


class UsageError(Exception):
    """Bad input; exit code 2."""


def train_key(sweep_key):
    """'train.lr' or 'engine.train.lr' -> 'lr' (a key of an engine's train); None for
    any other sweep key."""
    for prefix in ("engine.train.", "train."):
        if sweep_key.startswith(prefix):
            return sweep_key[len(prefix):]
    return None


@dataclass
class Rule:
    """What 'best' means: a Target (time to reach it) or a final metric."""
    target: grouping.Target = None
    final: str = None

    @property
    def text(self):
        if self.target is not None:
            return (f"smallest time to {self.target.text}: among the points whose every tuning "
                    "run completed and reached it, the smallest geometric mean over the other "
                    "swept keys' values of the mean time over seeds (crossings interpolated "
                    "between evaluations)")
        better = "highest" if FINAL_METRICS[self.final] is max else "lowest"
        return (f"{better} final {self.final.replace('_', ' ')}: among the points whose every "
                "tuning run completed, the mean over all their runs")


@dataclass
class Point:
    """One engine at one grid point, over every condition and seed."""
    values: dict                 # grid key -> value as the runs hold it
    runs: list                   # rundata.Run
    conditions: dict = field(default_factory=dict)  # condition text -> [Run]
    eligible: bool = False
    score: float = math.nan
    reached: int = 0             # target rule: runs that completed and reached it
    bound: float = math.nan      # target rule: mean time with censored runs at their end
    detail: str = ""             # what the score rests on, per condition


@dataclass
class Tuning:
    experiment: object           # rundata.Experiment of the tuning runs
    rule: Rule
    grid_keys: list              # sweep keys that are training keys
    condition_keys: list         # the other sweep keys
    points: dict                 # engine -> [Point] in sweep order
    chosen: dict                 # engine -> Point
    fallback: dict               # engine -> True when no point was eligible
    seeds: list                  # the tuning runs' seeds


def grid_of(experiment):
    grid = [k for k in experiment.sweep_keys if train_key(k) is not None]
    if not grid:
        raise UsageError(f"{experiment.folder}: no training key is swept (sweep train.<key> or "
                         f"engine.train.<key>; swept: {', '.join(experiment.sweep_keys) or 'nothing'})")
    return grid, [k for k in experiment.sweep_keys if k not in grid]


def text_of(value):
    return grouping.canonical_text(value)


def score_target(point, rule):
    target = rule.target
    crossings, per_condition, lines = [], [], []
    all_done = all(r.status == COMPLETED for r in point.runs)
    for condition, runs in point.conditions.items():
        done = [r for r in runs if r.status == COMPLETED]
        cs = [grouping.crossing(r, target.metric, target.value) for r in done]
        crossings += cs
        times = [c.time for c in cs if c.reached]
        where = f"{condition}: " if condition else ""
        if done and len(times) == len(runs):
            per_condition.append(float(sum(times) / len(times)))
            lines.append(f"{where}{stats.format_value(per_condition[-1], 3)}")
        else:
            lines.append(f"{where}{len(times)} of {len(runs)} reached")
    point.reached = sum(c.reached for c in crossings)
    floors = [c.time if c.reached else c.censored_at for c in crossings]
    point.bound = float(sum(floors) / len(floors)) if floors and all(map(math.isfinite, floors)) \
        else math.nan
    point.eligible = all_done and point.reached == len(point.runs) and len(per_condition) == len(point.conditions)
    if point.eligible:
        point.score = math.exp(sum(math.log(max(t, 1e-300)) for t in per_condition) / len(per_condition))
    point.detail = "; ".join(lines)


def score_final(point, rule):
    values = [r.final(rule.final) for r in point.runs]
    point.eligible = all(r.status == COMPLETED for r in point.runs) and all(map(math.isfinite, values))
    if point.eligible:
        point.score = float(sum(values) / len(values))
    statuses = grouping.status_counts(point.runs)
    point.detail = ", ".join(f"{n} {s}" for s, n in statuses.items())


def tune(experiment, rule):
    """The Tuning of an experiment read by data.read (runs filtered as wanted)."""
    grid, conditions = grid_of(experiment)
    points, chosen, fallback = {}, {}, {}
    for engine in experiment.engine_order:
        runs = [r for r in experiment.runs if r.engine == engine]
        by_point = {}
        for run in runs:
            key = tuple(text_of(run.sweep.get(k)) for k in grid)
            point = by_point.setdefault(key, Point(values={k: run.sweep.get(k) for k in grid}, runs=[]))
            point.runs.append(run)
            condition = ", ".join(f"{k}={text_of(run.sweep.get(k))}" for k in conditions)
            point.conditions.setdefault(condition, []).append(run)
        if not by_point:
            continue
        for point in by_point.values():
            (score_target if rule.target is not None else score_final)(point, rule)
        ordered = list(by_point.values())  # the runs' order: the sweep's
        points[engine] = ordered
        eligible = [p for p in ordered if p.eligible]
        if eligible:
            pick = max if rule.final and FINAL_METRICS[rule.final] is max else min
            chosen[engine] = pick(eligible, key=lambda p: p.score)
            fallback[engine] = False
        elif rule.target is not None:
            chosen[engine] = min(ordered, key=lambda p: (-p.reached, p.bound if math.isfinite(p.bound) else math.inf))
            fallback[engine] = True
        else:
            chosen[engine] = None
            fallback[engine] = True
    seeds = sorted({r.seed for r in experiment.runs if r.seed is not None})
    return Tuning(experiment, rule, grid, conditions, points, chosen, fallback, seeds)


def engine_train(point, grid):
    """The chosen point as an engine's `train` object: {"lr": 0.03, "momentum": 0.9}
    (a dotted key nests: lr_schedule.warmup_epochs)."""
    out = {}
    for k in grid:
        node, parts = out, train_key(k).split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = point.values[k]
    return out


def study_seeds(config):
    seed, repeats = config.get("seed", 1), config.get("repeats", 1)
    return list(range(int(seed), int(seed) + int(repeats)))


PICKED_SENTENCE = "Each engine's train keys picked by "


def tuned_config(study, tuning, source="the study", name=None):
    """study (a config dict) with each engine's chosen training keys as its `train`
    (merged over what the entry already sets), named `name` (default: the study's name +
    "_tuned") and its description saying where the keys come from. UsageError when an
    engine of the study was not tuned, when a grid key is swept by the study too, or when
    the study's seeds are tuning seeds."""
    shared = sorted(set(study_seeds(study)) & set(tuning.seeds))
    if shared:
        raise UsageError(f"{source}'s seeds {study_seeds(study)} include the tuning runs' seeds "
                         f"{shared}: pick the training keys on seeds apart from the reported "
                         "ones (make the tuning with another seed, e.g. --set seed=101)")
    swept = [k for k in (study.get("sweep") or {}) if k in tuning.grid_keys or
             train_key(k) in [train_key(g) for g in tuning.grid_keys]]
    if swept:
        raise UsageError(f"{source} sweeps {', '.join(swept)}, which the tuning picks per engine")
    out = json.loads(json.dumps(study))
    base = study.get("name", "experiment")
    out["name"] = name or (base if base.endswith("_tuned") else f"{base}_tuned")
    picked = "; ".join(f"{engine}: " + ", ".join(f"{train_key(k)} {text_of(p.values[k])}" for k in tuning.grid_keys)
                       for engine, p in tuning.chosen.items() if p is not None)
    # a study tuned again says where its keys come from once: the last tuning's sentence
    described = study.get("description", "").split(PICKED_SENTENCE)[0].rstrip()
    out["description"] = (described + " " + PICKED_SENTENCE +
                          f"analysis/tune.py from {tuning.experiment.name} (seeds "
                          f"{', '.join(str(s) for s in tuning.seeds)}; {tuning.rule.text}): {picked}.").strip()
    for i, entry in enumerate(out.get("engines") or []):
        label = entry.get("name") or entry.get("type")
        point = tuning.chosen.get(label)
        if point is None:
            raise UsageError(f"{source}: engines[{i}] ('{label}') has no tuned point in "
                             f"{tuning.experiment.folder} (tuned: {', '.join(tuning.chosen) or 'none'})")
        train = dict(entry.get("train") or {})
        train.update(engine_train(point, tuning.grid_keys))
        entry["train"] = train
    return out


def config_text(config):
    """A config as the shipped ones are written: a top-level key a line, an engine a line."""
    lines = []
    for key, value in config.items():
        if key == "engines" and isinstance(value, list):
            inner = ",\n".join("    " + json.dumps(e, ensure_ascii=False) for e in value)
            lines.append(f'  "engines": [\n{inner}\n  ]')
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def value_cells(point, grid):
    return [text_of(point.values[k]) for k in grid]


def markdown(tuning):
    """The report: the rule, the seeds, and per engine every grid point with its score."""
    rule, grid = tuning.rule, tuning.grid_keys
    exp = tuning.experiment
    lines = [f"Tuning: `{exp.folder}` ({len(exp.runs)} runs; seeds "
             f"{', '.join(str(s) for s in tuning.seeds)}). Grid: "
             + ", ".join(f"{k} in {{{', '.join(sorted({text_of(r.sweep.get(k)) for r in exp.runs}, key=grouping.value_sort_key))}}}"
                         for k in grid)
             + (f"; conditions (scored over, not chosen): {', '.join(tuning.condition_keys)}"
                if tuning.condition_keys else "") + ".",
             f"Rule: {rule.text}. Ties: the first point in the sweep's order.", ""]
    score_head = "score (s)" if rule.target is not None else f"score (mean final {rule.final})"
    detail_head = "mean time to target per condition" if rule.target is not None else "runs"
    for engine, points in tuning.points.items():
        pick = tuning.chosen.get(engine)
        if tuning.fallback.get(engine):
            lines.append(f"**{engine}**: no grid point is eligible (every run completed"
                         + (" and reached the target" if rule.target is not None else "")
                         + ")" + (f"; picked the one reaching it in most runs, then the smallest bound"
                                  if pick is not None else "; nothing picked") + ".")
        else:
            lines.append(f"**{engine}**: picked " + ", ".join(
                f"{k}={text_of(pick.values[k])}" for k in grid) + ".")
        lines.append("")
        heads = list(grid) + ["runs", "reached" if rule.target is not None else "completed",
                              detail_head, score_head, ""]
        lines.append("| " + " | ".join(heads) + " |")
        lines.append("| " + " | ".join("---" for _ in heads) + " |")
        for p in points:
            done = sum(r.status == COMPLETED for r in p.runs)
            count = f"{p.reached}/{len(p.runs)}" if rule.target is not None else f"{done}/{len(p.runs)}"
            score = stats.format_value(p.score, 4) if p.eligible else (
                f"\u2265 {stats.format_value(p.bound, 3)} (bound)" if rule.target is not None and
                math.isfinite(p.bound) else "not eligible")
            lines.append("| " + " | ".join(value_cells(p, grid) + [str(len(p.runs)), count, p.detail, score,
                                                                   "\u25c0 picked" if p is pick else ""]) + " |")
        lines.append("")
    return "\n".join(lines)


def parse_where(items):
    out = []
    for text in items:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--where {text!r}: expected KEY=VALUE")
        out.append((key.strip(), value.strip()))
    return out


def filter_runs(experiment, where):
    """Only the runs whose KEY (engine or a sweep key) is VALUE (one key's values are
    alternatives), as plot.py's --where."""
    if not where:
        return experiment
    import dataclasses
    allowed = {}
    for key, value in where:
        if key != "engine" and key not in experiment.sweep_keys:
            raise UsageError(f"--where {key}: not engine or a sweep key ({', '.join(experiment.sweep_keys)})")
        allowed.setdefault(key, set()).add(value if key == "engine" else text_of(rundata.parse_index_value(value)))
    runs = [r for r in experiment.runs if all(
        (r.engine if k == "engine" else text_of(r.sweep.get(k))) in v for k, v in allowed.items())]
    if not runs:
        raise UsageError("--where leaves no run")
    return dataclasses.replace(experiment, runs=runs)


def parse_arguments(argv):
    p = argparse.ArgumentParser(prog="tune.py", description=__doc__.split("\n\n")[0])
    p.add_argument("tuning", help="the tuning experiment's folder (RUNS/NAME)")
    rule = p.add_mutually_exclusive_group(required=True)
    rule.add_argument("--target-accuracy", type=float, metavar="X")
    rule.add_argument("--target-loss", type=float, metavar="X")
    rule.add_argument("--final", choices=sorted(FINAL_METRICS))
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="tune on these runs only (engine or a sweep key)")
    p.add_argument("--config", help="the study config (JSON) to write with each engine's picked keys")
    p.add_argument("--out", help="where the tuned study config goes (with --config)")
    p.add_argument("--name", help="the tuned study's name (default: the study's + _tuned)")
    p.add_argument("--report", help="write the report (Markdown) here too")
    args = p.parse_args(argv)
    if bool(args.config) != bool(args.out):
        raise UsageError("--config and --out go together")
    return args


def rule_of(args):
    if args.target_accuracy is not None:
        return Rule(target=grouping.Target("test_accuracy", args.target_accuracy, "given with --target-accuracy"))
    if args.target_loss is not None:
        return Rule(target=grouping.Target("train_loss", args.target_loss, "given with --target-loss"))
    return Rule(final=args.final)


def main(argv):
    args = parse_arguments(argv)
    experiment = filter_runs(data.read(args.tuning), parse_where(args.where))
    tuning = tune(experiment, rule_of(args))
    text = markdown(tuning)
    print(text)
    if args.report:
        Path(args.report).write_text(text + "\n", encoding="utf-8")
    if args.config:
        try:
            study = json.loads(Path(args.config).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise UsageError(f"{args.config}: {error}") from None
        out = tuned_config(study, tuning, args.config, args.name)
        Path(args.out).write_text(config_text(out), encoding="utf-8")
        print(f"{args.out}: the study with each engine's picked train keys")
    return 0


def cli(argv=None):
    """The command line (analysis/tune.py, python3 -m asgdsim.analysis.tune): exits with its code."""
    rundata.run_command(main, sys.argv[1:] if argv is None else argv, invalid=(UsageError,))


if __name__ == "__main__":
    cli()
