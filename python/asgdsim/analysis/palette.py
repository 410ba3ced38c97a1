"""The engines' fixed colours: one hue per engine type, the same in every figure, every
experiment and every notebook (asgdsim.analysis.ENGINE_COLOURS, seaborn's palette=); the
named variants of one type ({"type": "sync_backup", "name": "backup1"}) and the sweep
points of one engine are shades of that hue.

What it is not: no matplotlib import (a notebook can take the colours without plot.py's
Agg backend).
"""

import zlib

# One colour per engine type, the same in every figure and every experiment: the types in a
# fixed order of the tab10 palette. A type not listed gets a colour from the rest of tab20
# chosen by a hash of its name, so it too is the same wherever it appears.
ENGINE_COLOURS = {
    "async": "#1f77b4", "sync": "#ff7f0e", "sync_backup": "#2ca02c", "easgd": "#d62728",
    "ssp": "#9467bd", "local_sgd": "#8c564b",
    # the federated rules (engines/federated.cpp): hues apart from each other and the above
    "fedavg": "#e6550d", "fedbuff": "#393b79", "fedasync": "#17becf",
}
EXTRA_COLOURS = ("#e377c2", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
                 "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363")


def engine_colour(engine):
    """The fixed colour of an engine type (ENGINE_COLOURS; else a stable pick by its name).
    Given a variant's name instead of its type, the name is taken as a type of its own:
    engine_palette and the figures pass the type."""
    engine = str(engine)
    if engine in ENGINE_COLOURS:
        return ENGINE_COLOURS[engine]
    return EXTRA_COLOURS[zlib.crc32(engine.encode("utf-8")) % len(EXTRA_COLOURS)]


def shade(colour, index, count):
    """The index-th of count shades of one "#rrggbb" colour, dark to light (the colour itself
    in the middle; all of one hue: darker is the colour scaled, lighter mixed with white)."""
    rgb = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    if count > 1:
        t = index / (count - 1) * 2.0 - 1.0  # -1 (dark) .. 1 (light)
        rgb = [c * (1 + 0.45 * t) if t < 0 else c + (1 - c) * 0.55 * t for c in rgb]
    return "#" + "".join(format(round(min(max(c, 0.0), 1.0) * 255), "02x") for c in rgb)


def engine_palette(engines, types=None):
    """{engine label: colour} for seaborn's palette=: the labels of one engine type share
    its hue (engine_colour of the type); a type with several labels (named variants) gives
    each a shade of it, dark to light in the order given. types: {label: engine type} (a
    Group's or Run's engine_type, the engine_type column of asgdsim.analysis.load); a label
    it does not map is a type of its own."""
    labels = list(dict.fromkeys(str(e) for e in engines))
    types = {str(k): str(v) for k, v in (types or {}).items()}
    by_type = {}
    for label in labels:
        by_type.setdefault(types.get(label, label), []).append(label)
    colours = {}
    for engine_type, members in by_type.items():
        for i, label in enumerate(members):
            colours[label] = shade(engine_colour(engine_type), i, len(members))
    return {label: colours[label] for label in labels}
