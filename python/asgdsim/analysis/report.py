"""Writes the experiment report: report.html (self-contained), report.md, summary_table.csv.

What it is: formatting only. It takes the summary table built by groups.summary_table, the
rendered figures (PNG bytes) and the experiment's config, and writes three files.
What it is not: no statistics and no drawing; the CSV holds exactly the numbers the HTML
table shows (at full precision), so the two can never disagree.
"""

import base64
import datetime
import html
import json
import math
import shlex

from . import groups as grouping
from . import rundata
from . import stats

# (column stem in the summary table, heading in the report)
TABLE_QUANTITIES = (
    ("train_loss", "final train loss"),
    ("test_loss", "final test loss"),
    ("test_accuracy", "final test accuracy"),
    ("time", "virtual time (s)"),
    ("updates", "updates"),
    ("dropped_gradients", "dropped gradients"),
    ("mean_staleness", "mean staleness"),
    ("gradients_per_second", "gradients per virtual s"),
)
STATUS_COLUMNS = grouping.TABLE_STATUSES

FIGURE_TITLES = {"convergence": "Convergence", "sweep": "Sweep",
                 "staleness": "Staleness", "scaling": "Scaling with workers",
                 "timeline": "Timeline", "workers": "Worker utilisation"}
FIGURE_CAPTIONS = {
    "convergence": "Convergence curves. Each seed of a group thin, to its own end (| marks "
                   "where it ends); their mean thick, with the band, over the range every "
                   "seed covers (a mean needs all of them, so it stops where the earliest "
                   "seed ends); runs that did not complete dashed. The y range fits the "
                   "points after the first evaluation, so the starting loss may lie above "
                   "the frame. Notes under the figure say what a frame or a mean leaves out.",
    "sweep": "Final metrics and the time to each target asked for (named on its axis) "
             "against each swept key: one line per engine, in the engine's own colour (and "
             "values of the other swept keys), mean over the completed seeds with error "
             "bars and a light band, each seed a dot; no band under 3 seeds or for seeds "
             "that split (bimodal). With --col/--row/--hue/--style, a grid of panels "
             "instead. A log x axis when the "
             "values span a decade or more; lines with equal points are shifted sideways "
             "so that all show. A time to target where k of n completed seeds reached it "
             "is a hollow triangle at a lower bound (the seeds that never did counted at "
             "their end), marked k/n and named in the title: no line or band through it.",
    "staleness": "Staleness of applied gradients per group, one panel per unit (updates of "
                 "the model of record; EASGD's exchanges of the center apart) (groups whose "
                 "gradients are all fresh, and groups whose histogram equals another's, are "
                 "named, not drawn), and, per engine whose runs' mean staleness varies, "
                 "final train loss against each run's mean staleness (never across unlike "
                 "algorithms).",
    "scaling": "Virtual time to reach the first target asked for (named in the panel's "
               "title) against the number of workers, "
               "and the speedup over the fewest workers whose every seed reached it, on "
               "log-log axes (ideal linear speedup is a straight line), with error bars over "
               "seeds (the speedup's by first-order error propagation). Where k of n seeds "
               "reached it (named in the title): a hollow triangle, time at least (^) and "
               "speedup at most (v) the bound that counts the others at their end; no line "
               "or speedup drawn from the k alone.",
    "timeline": "Event timeline of each engine's first traced run (server and every "
                "worker), the same window of virtual time for every engine. Past 64 workers "
                "the workers are heat-map rows, one per state, whose opacity is the share of "
                "all workers in that state.",
    "workers": "Compute, communication and waiting virtual time per worker (and time down; "
               "the four add up to the run's time), each engine's first run, every worker: "
               "stacked bars on one time scale, past 64 workers a heat map of the shares.",
}

CSS = """
body { font-family: sans-serif; margin: 2em; max-width: 1400px; color: #222; }
div.scroll { overflow-x: auto; max-width: 100%; margin: 1em 0; }
div.scroll > table { margin: 0; }
table.provenance td { text-align: left; } table.provenance code { white-space: pre-wrap;
  word-break: break-all; }
p.warning { color: #a00; font-weight: bold; }
ul.notes { color: #444; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.9em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th { background: #f0f0f0; } td.text { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; }
figure { margin: 1.5em 0; } figcaption { color: #555; font-size: 0.9em; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 0.85em; }
"""


# Significant digits of a value shown without a band: counts keep every digit up to 10^7.
COUNT_STEMS = ("updates", "dropped_gradients")


def format_number(value, digits=4):
    return stats.format_value(value, digits)


def seeds_of(row, stem):
    """The finite per-seed values the table row holds for stem (its _values column)."""
    text = row.get(stem + "_values")
    if not isinstance(text, str) or not text:
        return []
    values = [rundata.to_float(v) for v in text.split(";")]
    return [v for v in values if math.isfinite(v)]


# Past this many seeds, a split group is written per side (count and range), not per seed.
MAX_SEEDS_LISTED = 6


def seeds_text(values, digits=3):
    return ", ".join(format_number(v, digits) for v in sorted(values))


def side_text(values, digits=3):
    if len(values) <= MAX_SEEDS_LISTED // 2 or len(values) == 1:
        return seeds_text(values, digits)
    return (f"{len(values)} seeds at {format_number(min(values), digits)}\u2013"
            f"{format_number(max(values), digits)}")


def format_cell(row, stem, band):
    """A table cell: 'mean ± half-width' of the band (stats.format_estimate), or
    'mean [low, high]' for minmax and iqr; just the mean when the band is none. Fewer than
    stats.MIN_SEEDS_FOR_CI seeds: the seeds themselves ('0.85, 0.86 (seeds)'). Seeds that
    split (stats.split_seeds): 'bimodal: 0.1 vs 0.85, 0.86', never a mean."""
    mean = row.get(stem + grouping.MEAN)
    if mean is None or math.isnan(mean):
        return "\u2014"
    digits = 7 if stem in COUNT_STEMS else 4
    seeds = seeds_of(row, stem)
    if row.get(stem + "_bimodal"):
        lower, upper = stats.split_seeds(seeds) or (seeds, [])
        return f"bimodal: {side_text(lower)} vs {side_text(upper)}"
    n = int(row.get(stem + grouping.COUNT, 0))
    if 1 < n < stats.MIN_SEEDS_FOR_CI and band != "none" and len(seeds) == n:
        if max(seeds) == min(seeds):
            return f"{format_number(seeds[0], digits)} (all {n} seeds)"
        return f"{seeds_text(seeds, digits)} (seeds)"
    band = stats.normalize_band(band)
    if band in ("minmax", "iqr"):
        low, high = grouping.band_interval(row, stem, band)
        if math.isnan(low):
            return format_number(mean, digits)
        return (f"{format_number(mean, digits)} [{format_number(low, digits)}, "
                f"{format_number(high, digits)}]")
    half = grouping.band_half_width(row, stem, band)
    if math.isnan(half):
        return format_number(mean, digits)
    return stats.format_estimate(mean, half, n)


def status_text(row):
    parts = [f"{row[s]} {s}" for s in STATUS_COLUMNS if row.get(s, 0)]
    other = row["runs"] - sum(row.get(s, 0) for s in STATUS_COLUMNS)
    if other:
        parts.append(f"{other} other")
    return ", ".join(parts) or "0"


def target_text(row, name, band):
    """The time to a target as the table writes it. Every completed seed reached it:
    'mean ± half (3/3 reached)', with '; seeds within 2 evaluation intervals' where the
    seeds' values would split (bimodal) by no more than the evaluations' own resolution. Some never did (censored): '≥ bound
    (2 of 3 never reached; 1.18 the one that did)', the bound counting them at their last
    evaluation, never a mean of the seeds that reached it alone."""
    stem = f"time_to_target_{name}"
    reached = int(row.get(f"target_{name}_reached", 0) or 0)
    completed = int(row.get("completed", 0) or 0)
    if completed == 0:
        return "\u2014"
    if reached == completed:
        text = f"{format_cell(row, stem, band)} ({reached}/{completed} reached)"
        # where the values alone would be split (bimodal), but by no more than the
        # evaluations can tell apart
        if reached > 1 and row.get(stem + "_within_resolution") and \
                stats.split_seeds(seeds_of(row, stem)) is not None:
            text += f"; seeds within {grouping.RESOLUTION_INTERVALS} evaluation intervals"
        return text
    did = seeds_of(row, stem)
    which = ("" if not did else
             f"; {seeds_text(did)} {'the one' if len(did) == 1 else 'the ' + str(len(did))} that did")
    return (f"\u2265 {format_number(row.get(stem + '_bound'), 3)} ({completed - reached} of "
            f"{completed} never reached{which})")


def display_rows(table, sweep_keys, band):
    """The report table as (headings, rows of text); all-empty quantities are left out."""
    quantities = [(stem, head) for stem, head in TABLE_QUANTITIES
                  if stem + "_mean" in table and table[stem + "_mean"].notna().any()]
    targets = [t for t in table.attrs.get("targets") or
               [grouping.Target(m, math.nan) for m in ("test_accuracy", "train_loss")]
               if f"target_{t.name}" in table]
    headings = ["engine"] + list(sweep_keys) + ["runs"] + [h for _, h in quantities]
    headings += [f"time to {t.text if t.usable else 'target ' + t.name} (s)" for t in targets]
    rows = []
    for record in table.to_dict("records"):
        cells = [record["engine"]] + [str(record[k]) for k in sweep_keys]
        cells.append(status_text(record))
        cells += [format_cell(record, stem, band) for stem, _ in quantities]
        cells += [target_text(record, t.name, band) for t in targets]
        rows.append(cells)
    return headings, rows


def table_explanation(band):
    """What the table's numbers are, in one sentence."""
    band = stats.normalize_band(band)
    what = {"ci95": f"\u00b1 = {stats.band_description('ci95')}",
            "std": f"\u00b1 = {stats.band_description('std')}",
            "minmax": f"[low, high] = {stats.band_description('minmax')}",
            "iqr": f"[low, high] = {stats.band_description('iqr')}",
            "none": "no spread shown (--band none)"}[band]
    return (f"Mean over the group's completed runs (seeds); {what}. With fewer than "
            f"{stats.MIN_SEEDS_FOR_CI} seeds the seeds' own values are shown, not a band; "
            "'bimodal' marks seeds that split into two clusters (a gap between sorted "
            f"values over {stats.GAP_FACTOR:g}\u00d7 the clusters' own spread and over "
            f"{stats.RELATIVE_GAP:.0%} of the largest value), shown per cluster and never "
            "averaged. Diverged, stalled and other runs are counted, not "
            "averaged. Time to target: where the metric crosses the target, interpolated "
            "linearly between the two evaluations around the crossing (its resolution is "
            "their distance, _resolution in summary_table.csv); a mean only when every "
            "completed seed reached it; when k of n did, '\u2265 bound': the mean with the "
            "seeds that never reached it counted at their last evaluation, a lower bound "
            "(no mean of the k alone). Seeds within "
            f"{grouping.RESOLUTION_INTERVALS} evaluation intervals of each other are not "
            "called bimodal. summary_table.csv has every "
            "number at full precision (_std, _ci95, _n, _min, _max, _q25, _q75, _values, "
            "_bimodal, _bound, _censored, _censored_at, _resolution columns).")


def text_columns(sweep_keys):
    return 2 + len(sweep_keys)  # engine, sweep values, runs are left-aligned


def html_table(headings, rows, left_columns, css_class=None, code_columns=()):
    """A table inside a div that scrolls sideways, so a wide table never widens the page.
    Cells of code_columns are set as code."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings) if headings else ""
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text = html.escape(cell)
            if i in code_columns:
                text = f"<code>{text}</code>"
            cells.append(f'<td class="text">{text}</td>' if i < left_columns
                         else f"<td>{text}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    opening = f'<table class="{css_class}">' if css_class else "<table>"
    header = f"<tr>{head}</tr>\n" if head else ""
    return (f'<div class="scroll">{opening}{header}' + "\n".join(body) + "</table></div>")


def markdown_table(headings, rows):
    def line(cells):
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
    return "\n".join([line(headings), line(["---"] * len(headings))] + [line(r) for r in rows])


def targets_sentence(targets):
    """targets: list of (description, value, how it was chosen)."""
    return "; ".join(f"{d} {format_number(v)} ({how})" for d, v, how in targets) or "none"


def resolution_sentence(table):
    """How finely the table's times to target are known: for each target, the widest
    evaluation interval a crossing was interpolated in ('' when none was reached)."""
    parts = []
    for t in table.attrs.get("targets") or []:
        column = t.stem + "_resolution"
        if column in table and table[column].notna().any():
            parts.append(f"{t.text}: crossings interpolated between evaluations at most "
                         f"{format_number(float(table[column].max()), 3)} s apart")
    return ("Time to target resolution: " + "; ".join(parts) + ".") if parts else ""


# meta.json keys (asgdsim's run_meta and the runner/cluster additions), as the report
# names them; keys not listed here are shown too, under their own names, after these.
PROVENANCE_FIELDS = (
    ("asgdsim_version", "asgdsim version"), ("git_commit", "git commit"),
    ("git_dirty", "uncommitted changes in that build"), ("backend", "backend"),
    ("build_type", "build type"), ("command_line", "command line"), ("host", "host"),
    ("threads", "threads"), ("jobs", "runs at once (--jobs)"), ("shard", "shard"),
    ("mode", "mode"), ("ranks", "MPI ranks"))
# Keys whose values must agree for runs to be comparable bit for bit (DESIGN.md:
# determinism holds on the same backend and build).
BUILD_FIELDS = ("asgdsim_version", "git_commit", "git_dirty", "backend", "build_type")
TIME_FIELDS = ("start", "end")


def meta_text(value):
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def distinct_text(values):
    """The one value, or each distinct value with its number of runs, most common first."""
    counts = {}
    for value in values:
        text = meta_text(value)
        counts[text] = counts.get(text, 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    ordered = sorted(counts.items(), key=lambda item: -item[1])
    return "; ".join(f"{text} ({n} run{'s' if n > 1 else ''})" for text, n in ordered)


def parse_time(text):
    """meta.json's ISO-8601 UTC time ('2026-11-23T00:51:56Z') -> datetime, or None."""
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def duration_text(seconds):
    if seconds < 60:
        return f"{stats.format_value(seconds, 2 if seconds < 10 else 3)} s"
    minutes, seconds = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    return f"{minutes // 60} h {minutes % 60} min"


def provenance_rows(experiment, command):
    """[(what, value)] from the runs' meta.json files: build, command lines, hosts,
    when, wall time; first a warning row when runs come from different builds; last
    the command that wrote this report. command: plot.py's argv (a list)."""
    metas = [run.meta for run in experiment.runs if isinstance(run.meta, dict)]
    rows = []
    differing = [label for key, label in PROVENANCE_FIELDS
                 if key in BUILD_FIELDS and len({meta_text(m.get(key)) for m in metas}) > 1]
    if differing:
        rows.append(("warning", "the runs come from different builds (" + ", ".join(differing)
                     + " differ): their numbers need not agree bit for bit"))
    known = [key for key, _ in PROVENANCE_FIELDS]
    others = sorted({k for m in metas for k in m} - set(known) - set(TIME_FIELDS))
    labels = dict(PROVENANCE_FIELDS)
    for key in known + others:
        values = [m[key] for m in metas if key in m]
        if values:
            rows.append((labels.get(key, key), distinct_text(values)))
    starts = [t for t in (parse_time(m.get("start")) for m in metas) if t]
    ends = [t for t in (parse_time(m.get("end")) for m in metas) if t]
    wall = [rundata.to_float((run.summary or {}).get("wall_seconds")) for run in experiment.runs]
    wall = [w for w in wall if math.isfinite(w)]
    if starts and ends:
        first, last = min(starts), max(ends)
        rows.append(("ran (UTC)", f"{first:%Y-%m-%d %H:%M:%S} to {last:%Y-%m-%d %H:%M:%S}"))
        span = (last - first).total_seconds()  # meta.json's times are whole seconds
        rows.append(("wall time", (duration_text(span) if span >= 1 else "under 1 s")
                     + " from the first run's start to the last run's end" +
                     (f"; the runs' own wall_seconds add up to {duration_text(sum(wall))}"
                      if wall else "")))
    elif wall:
        rows.append(("wall time", f"the runs' own wall_seconds add up to "
                     f"{duration_text(sum(wall))}"))
    missing = len(experiment.runs) - len(metas)
    if missing:
        rows.append(("runs without meta.json", f"{missing} of {len(experiment.runs)}"))
    now = datetime.datetime.now(datetime.timezone.utc)
    as_of = runs_as_of(experiment)
    if as_of:
        rows.append(("runs as of (UTC)", f"{as_of}: the newest run file this report read; "
                     "if a run folder is newer than the report, the report is stale "
                     "(analysis/plot.py --check says so)"))
    rows.append(("report command", shlex.join(command)))
    rows.append(("report written (UTC)", f"{now:%Y-%m-%d %H:%M:%S}"))
    return rows


def newest_file_time(folder):
    """The latest modification time (epoch s) of the files directly in a run folder."""
    try:
        return max((p.stat().st_mtime for p in folder.iterdir() if p.is_file()), default=None)
    except OSError:
        return None


def runs_newer_than(experiment, report_path):
    """Run ids with a file written after report_path was (the report is older than them);
    None when there is no report there."""
    try:
        written = report_path.stat().st_mtime
    except OSError:
        return None
    newer = []
    for run in experiment.runs:
        when = newest_file_time(run.folder) if run.folder.is_dir() else None
        if when is not None and when > written:
            newer.append(run.run_id)
    return newer


def runs_as_of(experiment):
    """'YYYY-MM-DD HH:MM:SS' (UTC) of the newest run file read, or None."""
    times = [t for t in (newest_file_time(run.folder) for run in experiment.runs
                         if run.folder.is_dir()) if t is not None]
    if not times:
        return None
    return f"{datetime.datetime.fromtimestamp(max(times), datetime.timezone.utc):%Y-%m-%d %H:%M:%S}"


def provenance_line(rows):
    """The provenance in one sentence, for the top of the report."""
    found = dict(rows)
    build = ", ".join(found[label] for key, label in PROVENANCE_FIELDS
                      if key in ("backend", "build_type") and label in found)
    parts = []
    if "asgdsim version" in found:
        parts.append(f"asgdsim {found['asgdsim version']}"
                     + (f" (commit {found['git commit']})" if "git commit" in found else "")
                     + (f", {build}" if build else ""))
    if "host" in found:
        parts.append(f"on {found['host']}")
    if "wall time" in found:
        parts.append(found["wall time"].split(" from")[0].split(";")[0] + " of wall time")
    return ("Made by " + " ".join(parts[:2]) + ("; " + parts[2] if len(parts) > 2 else "")
            + ". Details under Provenance.") if parts else "No run has a meta.json."


def figure_notes_html(notes):
    if not notes:
        return ""
    return '<ul class="notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>"


def write_summary_csv(table, path):
    table.to_csv(path, index=False)  # floats as shortest round-trip text


def write_html(path, experiment, table, figures, status_counts, targets, band, provenance):
    """figures: list of (name, png bytes, notes); provenance: provenance_rows()."""
    headings, rows = display_rows(table, experiment.sweep_keys, band)
    warnings = [text for what, text in provenance if what == "warning"]
    parts = [f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
             f"<title>{html.escape(experiment.name)}</title><style>{CSS}</style></head><body>",
             f"<h1>{html.escape(experiment.name)}</h1>",
             f"<p>Experiment folder: <code>{html.escape(str(experiment.folder))}</code>. "
             f"{len(experiment.runs)} runs; "
             + html.escape(", ".join(f"{n} {s}" for s, n in status_counts.items()))
             + f". {html.escape(provenance_line(provenance))}</p>"]
    parts += [f'<p class="warning">Warning: {html.escape(w)}.</p>' for w in warnings]
    parts += [f"<p>Targets: {html.escape(targets_sentence(targets))}. "
              f"{html.escape(resolution_sentence(table))}</p>"]
    problems = problem_lines(experiment)
    if problems:
        parts += ["<h2>Runs with problems</h2>", f"<p>{html.escape(PROBLEMS_NOTE)}</p><ul>"]
        parts += [f"<li>{html.escape(line)}</li>" for line in problems] + ["</ul>"]
    parts += ["<h2>Final metrics per group</h2>",
              f"<p>{html.escape(table_explanation(band))}</p>",
              html_table(headings, rows, text_columns(experiment.sweep_keys)),
              "<h2>Status counts</h2>",
              html_table(["status", "runs"], [[s, str(n)] for s, n in status_counts.items()],
                         1)]
    for name, png, notes in figures:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<h2>{html.escape(FIGURE_TITLES.get(name, name))}</h2><figure>"
                     f"<img alt=\"{html.escape(name)}\" src=\"data:image/png;base64,{data}\">"
                     f"<figcaption>{html.escape(FIGURE_CAPTIONS.get(name, ''))}"
                     f"{figure_notes_html(notes)}</figcaption></figure>")
    parts.append("<h2>Provenance</h2>")
    parts.append("<p>From the runs' meta.json files (a value that differs between runs is "
                 "listed with its number of runs).</p>")
    parts.append(html_table(None, [[what, text] for what, text in provenance], 2,
                            "provenance", code_columns=(1,)))
    parts.append("<h2>Experiment config (resolved)</h2>")
    parts.append(f"<pre>{html.escape(config_text(experiment.config))}</pre></body></html>")
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")


def write_markdown(path, experiment, table, figure_files, status_counts, targets, band,
                   provenance):
    """figure_files: list of (name, path of the image relative to the report, notes)."""
    headings, rows = display_rows(table, experiment.sweep_keys, band)
    lines = [f"# {experiment.name}", "",
             f"Experiment folder: `{experiment.folder}`. {len(experiment.runs)} runs; "
             + ", ".join(f"{n} {s}" for s, n in status_counts.items()) + ". "
             + provenance_line(provenance), ""]
    lines += [f"**Warning: {text}.**\n" for what, text in provenance if what == "warning"]
    lines += [f"Targets: {targets_sentence(targets)}. {resolution_sentence(table)}".rstrip(), ""]
    problems = problem_lines(experiment)
    if problems:
        lines += ["## Runs with problems", "", PROBLEMS_NOTE, ""] + [f"- {p}" for p in problems] + [""]
    lines += ["## Final metrics per group", "",
              table_explanation(band), "",
              markdown_table(headings, rows), ""]
    for name, relative, notes in figure_files:
        lines += [f"## {FIGURE_TITLES.get(name, name)}", "", f"![{name}]({relative})", "",
                  FIGURE_CAPTIONS.get(name, ""), ""]
        lines += [f"- {note}" for note in notes] + ([""] if notes else [])
    lines += ["## Provenance", "", markdown_table(["", ""], [[w, f"`{t}`" if w in (
        "command line", "report command") else t] for w, t in provenance]), ""]
    lines += ["## Experiment config (resolved)", "", "```json",
              config_text(experiment.config), "```", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def problem_lines(experiment):
    """'run_id: what could not be read' for every run with a problem (rundata.Run.problems)."""
    lines = []
    for run in experiment.runs:
        for problem in run.problems:
            lines.append(f"{run.run_id}: {problem}")
    return lines


PROBLEMS_NOTE = ("These runs are counted by their status but their unreadable files are left "
                 "out: a run without readable metrics has no curve and no time to target.")


def config_text(config):
    if config is None:
        return "(experiment.json not found)"
    return json.dumps(config, indent=2, sort_keys=False)
