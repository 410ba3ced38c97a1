"""Writes the experiment report: report.html (self-contained), report.md, summary_table.csv.

What it is: formatting only. It takes the summary table built by groups.summary_table, the
rendered figures (PNG bytes) and the experiment's config, and writes three files.
What it is not: no statistics and no drawing; the CSV holds exactly the numbers the HTML
table shows (at full precision), so the two can never disagree.
"""

import base64
import html
import json
import math

# (column stem in the summary table, heading in the report)
TABLE_QUANTITIES = (
    ("train_loss", "final train loss"),
    ("test_loss", "final test loss"),
    ("test_accuracy", "final test accuracy"),
    ("time", "virtual time (s)"),
    ("updates", "updates"),
    ("dropped_gradients", "dropped gradients"),
    ("mean_staleness", "mean staleness"),
)
STATUS_COLUMNS = ("completed", "diverged", "interrupted", "unfinished")

FIGURE_TITLES = {"convergence": "Convergence", "staleness": "Staleness",
                 "scaling": "Scaling with workers", "timeline": "Timeline",
                 "workers": "Worker utilisation"}
FIGURE_CAPTIONS = {
    "convergence": "Convergence curves: mean over seeds (completed runs) with a \u00b11 std "
                   "band, a dot where each ends; runs that did not complete are dashed. "
                   "The y range fits the points after the first evaluation, so the "
                   "starting loss lies above the frame.",
    "staleness": "Staleness of applied gradients per group (groups whose gradients are "
                 "all fresh are named, not drawn), and final train loss against each "
                 "run's mean staleness.",
    "scaling": "Virtual time to reach the target train loss against the number of workers, "
               "with ideal linear speedup from the fewest workers.",
    "timeline": "Event timeline of each engine's first traced run (server and workers), "
                "the same window of virtual time for every engine.",
    "workers": "Compute, communication and waiting virtual time per worker (and time down), "
               "each engine's first run, on one time scale.",
}

CSS = """
body { font-family: sans-serif; margin: 2em; max-width: 1400px; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th { background: #f0f0f0; } td.text { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; }
figure { margin: 1.5em 0; } figcaption { color: #555; font-size: 0.9em; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 0.85em; }
"""


def format_number(value, digits=4):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "\u2014"
    return f"{value:.{digits}g}"


def format_mean_std(row, stem):
    """'mean \u00b1 std' (std left out when it rests on a single run)."""
    mean, std = row.get(stem + "_mean"), row.get(stem + "_std")
    digits = 7 if stem in ("updates", "dropped_gradients") else 4
    if mean is None or math.isnan(mean):
        return "\u2014"
    if row.get("completed", 0) > 1 and std is not None and not math.isnan(std):
        return f"{format_number(mean, digits)} \u00b1 {format_number(std, 2)}"
    return format_number(mean, digits)


def status_text(row):
    parts = [f"{row[s]} {s}" for s in STATUS_COLUMNS if row.get(s, 0)]
    other = row["runs"] - sum(row.get(s, 0) for s in STATUS_COLUMNS)
    if other:
        parts.append(f"{other} other")
    return ", ".join(parts) or "0"


def target_text(row, name):
    reached = row.get(f"target_{name}_reached", 0)
    time = format_mean_std({"completed": reached,
                            "x_mean": row.get(f"time_to_target_{name}_mean", math.nan),
                            "x_std": row.get(f"time_to_target_{name}_std", math.nan)}, "x")
    return f"{time} ({reached}/{row.get('completed', 0)} reached)"


def display_rows(table, sweep_keys):
    """The report table as (headings, rows of text); all-empty quantities are left out."""
    quantities = [(stem, head) for stem, head in TABLE_QUANTITIES
                  if stem + "_mean" in table and table[stem + "_mean"].notna().any()]
    targets = [name for name in ("loss", "accuracy") if f"target_{name}" in table]
    headings = ["engine"] + list(sweep_keys) + ["runs"] + [h for _, h in quantities]
    headings += [f"time to target {name} (s)" for name in targets]
    rows = []
    for record in table.to_dict("records"):
        cells = [record["engine"]] + [str(record[k]) for k in sweep_keys]
        cells.append(status_text(record))
        cells += [format_mean_std(record, stem) for stem, _ in quantities]
        cells += [target_text(record, name) for name in targets]
        rows.append(cells)
    return headings, rows


def text_columns(sweep_keys):
    return 2 + len(sweep_keys)  # engine, sweep values, runs are left-aligned


def html_table(headings, rows, left_columns):
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="text">{html.escape(c)}</td>' if i < left_columns
            else f"<td>{html.escape(c)}</td>" for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>\n" + "\n".join(body) + "</table>"


def markdown_table(headings, rows):
    def line(cells):
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
    return "\n".join([line(headings), line(["---"] * len(headings))] + [line(r) for r in rows])


def targets_sentence(targets):
    """targets: list of (description, value, how it was chosen)."""
    return "; ".join(f"{d} {format_number(v)} ({how})" for d, v, how in targets) or "none"


def write_summary_csv(table, path):
    table.to_csv(path, index=False)  # floats as shortest round-trip text


def write_html(path, experiment, table, figures, status_counts, targets):
    """figures: list of (name, png bytes)."""
    headings, rows = display_rows(table, experiment.sweep_keys)
    parts = [f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
             f"<title>{html.escape(experiment.name)}</title><style>{CSS}</style></head><body>",
             f"<h1>{html.escape(experiment.name)}</h1>",
             f"<p>Experiment folder: <code>{html.escape(str(experiment.folder))}</code>. "
             f"{len(experiment.runs)} runs; "
             + html.escape(", ".join(f"{n} {s}" for s, n in status_counts.items()))
             + ".</p>",
             f"<p>Targets: {html.escape(targets_sentence(targets))}.</p>",
             "<h2>Final metrics per group</h2>",
             "<p>Mean \u00b1 sample std over the group's completed runs (other runs are "
             "counted, not averaged). Time to target: first evaluation point at which the "
             "target is reached.</p>",
             html_table(headings, rows, text_columns(experiment.sweep_keys)),
             "<h2>Status counts</h2>",
             html_table(["status", "runs"], [[s, str(n)] for s, n in status_counts.items()], 1)]
    for name, png in figures:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<h2>{html.escape(FIGURE_TITLES.get(name, name))}</h2><figure>"
                     f"<img alt=\"{html.escape(name)}\" src=\"data:image/png;base64,{data}\">"
                     f"<figcaption>{html.escape(FIGURE_CAPTIONS.get(name, ''))}</figcaption>"
                     "</figure>")
    parts.append("<h2>Experiment config (resolved)</h2>")
    parts.append(f"<pre>{html.escape(config_text(experiment.config))}</pre></body></html>")
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")


def write_markdown(path, experiment, table, figure_files, status_counts, targets):
    """figure_files: list of (name, path of the image relative to the report)."""
    headings, rows = display_rows(table, experiment.sweep_keys)
    lines = [f"# {experiment.name}", "",
             f"Experiment folder: `{experiment.folder}`. {len(experiment.runs)} runs; "
             + ", ".join(f"{n} {s}" for s, n in status_counts.items()) + ".", "",
             f"Targets: {targets_sentence(targets)}.", "",
             "## Final metrics per group", "",
             "Mean \u00b1 sample std over the group's completed runs.", "",
             markdown_table(headings, rows), ""]
    for name, relative in figure_files:
        lines += [f"## {FIGURE_TITLES.get(name, name)}", "", f"![{name}]({relative})", "",
                  FIGURE_CAPTIONS.get(name, ""), ""]
    lines += ["## Experiment config (resolved)", "", "```json",
              config_text(experiment.config), "```", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def config_text(config):
    if config is None:
        return "(experiment.json not found)"
    return json.dumps(config, indent=2, sort_keys=False)
