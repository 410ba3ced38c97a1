"""The command-line options the analysis scripts share: a bad value is a UsageError (exit 2)."""

import argparse


class UsageError(Exception):
    """Bad input (an option's value, a folder that is not an experiment); exit code 2."""


def split_list(text, allowed, option):
    """'a,b' or 'a' -> ['a', 'b'], each checked against allowed, each once in the order given."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    bad = [item for item in items if item not in allowed]
    if bad or not items:
        raise UsageError(f"{option}: {', '.join(bad) or 'empty'} is not one of "
                         f"{', '.join(allowed)}")
    return list(dict.fromkeys(items))


def band_argument(text):
    """--band's value (stats.normalize_band), for argparse: a bad one is its usage error."""
    from . import stats  # numpy: loaded by the scripts that take --band, not by every importer
    try:
        return stats.normalize_band(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
