"""The engines' fixed colours: one colour per engine, the same in every figure, every
experiment and every notebook (asgdsim.analysis.ENGINE_COLOURS, seaborn's palette=).

What it is not: no matplotlib import (a notebook can take the colours without plot.py's
Agg backend).
"""

import zlib

# One colour per engine, the same in every figure and every experiment: the engines'
# types in a fixed order of the tab10 palette. An engine label not listed (a "name" from
# the config, say backup1) gets a colour from the rest of tab20 chosen by a hash of the
# label, so it too is the same wherever it appears.
ENGINE_COLOURS = {
    "async": "#1f77b4", "sync": "#ff7f0e", "sync_backup": "#2ca02c", "easgd": "#d62728",
    "ssp": "#9467bd", "local_sgd": "#8c564b",
}
EXTRA_COLOURS = ("#e377c2", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
                 "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363")


def engine_colour(engine):
    """The engine's fixed colour (ENGINE_COLOURS; else a stable pick by its name)."""
    engine = str(engine)
    if engine in ENGINE_COLOURS:
        return ENGINE_COLOURS[engine]
    return EXTRA_COLOURS[zlib.crc32(engine.encode("utf-8")) % len(EXTRA_COLOURS)]




def engine_palette(engines):
    """{engine: colour} for seaborn's palette= argument."""
    return {engine: engine_colour(engine) for engine in engines}
