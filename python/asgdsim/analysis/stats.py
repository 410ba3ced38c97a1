"""Statistics over seeds and how an estimate is written: the one place for both.

What it is: the Student-t quantile (SciPy's when installed, else our own), the band over
repeats (95 % t confidence interval of the mean, min-max of the seeds, interquartile
range, sample std, or none) clipped to the metric's range, the test that calls a group's
seeds bimodal, and the text of a number or of "mean ± half-width" rounded to significant
digits. Pure Python + NumPy (+ SciPy if present).
What it is not: no grouping of runs (groups.py) and no drawing (figures.py).

Conventions, stated once:
- Repeats are independent seeds of one configuration; n is how many have a value.
- std is the sample standard deviation (ddof=1); with fewer than 2 values it is NaN,
  because one run says nothing about the spread.
- "ci95" (alias "ci") is the two-sided CI_LEVEL confidence interval of the mean under a
  normal model: t_{(1+CI_LEVEL)/2, n-1} * std / sqrt(n) (Student's t, n-1 degrees of
  freedom). "minmax" is the seeds' smallest to largest value, "iqr" their 25th to 75th
  percentile (linear interpolation), "std" the mean +- 1 sample std.
- Every band is clipped to the metric's range (metric_range): accuracy in [0, 1], losses,
  times and counts >= 0, so a band never claims an impossible value.
- Fewer than MIN_SEEDS_FOR_CI (3) values: no band and no +-: the seeds are shown.
- Bimodal (split): with at least 3 values, sort them and cut at the largest gap between
  neighbours. The seeds are split when that gap exceeds GAP_FACTOR (10) x the larger of
  the two sides' own ranges and is at least RELATIVE_GAP (25 %) of the largest magnitude
  (so that seeds 3.58, 3.59, 4.06 s, a usual spread, or seeds equal to the last digit
  are not "split"). Example: accuracies 0.10, 0.85, 0.86 (one seed at chance): gap 0.75
  > 10 x 0.01 and > 0.25 x 0.86.
  A split group's mean is no summary of it: the table shows its seeds instead.
"""

import functools
import math

import numpy as np

BANDS = ("ci95", "minmax", "iqr", "std", "none")
BAND_ALIASES = {"ci": "ci95"}
DEFAULT_BAND = "ci95"
CI_LEVEL = 0.95
MIN_SEEDS_FOR_CI = 3
GAP_FACTOR = 10.0
RELATIVE_GAP = 0.25


@functools.lru_cache(maxsize=1)
def _scipy_t():
    """SciPy's t distribution where installed (Debian python3-scipy), else None. Imported on
    first use: scipy.stats takes about 2 s of CPU to import, which a plot.py that exits on a
    bad option, or draws without intervals, should not pay."""
    try:
        from scipy.stats import t
    except ImportError:  # pragma: no cover - depends on the machine
        return None
    return t


def normalize_band(band):
    """'ci' -> 'ci95'; ValueError naming the allowed values for anything unknown."""
    band = BAND_ALIASES.get(band, band)
    if band not in BANDS:
        raise ValueError(f"band must be one of {', '.join(BANDS)}, got {band!r}")
    return band


# ---------------------------------------------------------------- Student's t

def _beta_continued_fraction(a, b, x):
    """Continued fraction of the regularized incomplete beta function (modified Lentz),
    as in Numerical Recipes' betacf; converges fast for x < (a + 1) / (a + b + 2)."""
    tiny, eps = 1e-300, 1e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def regularized_beta(a, b, x):
    """I_x(a, b), the regularized incomplete beta function, for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df > 0 degrees of freedom."""
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.lru_cache(maxsize=256)
def t_quantile(p, df):
    """The p-quantile of Student's t with df degrees of freedom (0 < p < 1, df > 0):
    t_cdf inverted by bisection to machine precision (the CDF is monotone)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p == 0.5:
        return 0.0
    scipy_t = _scipy_t()
    if scipy_t is not None:
        # SciPy's quantile (cdflib, good to ~1e-10), polished by Newton steps on t_cdf,
        # which is exact to rounding: the closed forms of tests/analysis/test_stats.py.
        x = float(scipy_t.ppf(p, df))
        for _ in range(3):
            density = float(scipy_t.pdf(x, df))
            if not density > 0 or not math.isfinite(x):
                return _t_quantile_bisection(p, df)
            step = (t_cdf(x, df) - p) / density
            x -= step
            if abs(step) <= 1e-15 * max(abs(x), 1.0):
                break
        return x
    return _t_quantile_bisection(p, df)


def _t_quantile_bisection(p, df):
    """t_quantile without SciPy."""
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -_t_quantile_bisection(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if middle in (low, high):
            break
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)


# ---------------------------------------------------------------- bands over repeats

def sample_std(values):
    """Sample std (ddof=1) over the first axis (repeats); NaN with fewer than 2 repeats."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 0 or values.shape[0] < 2:
        shape = values.shape[1:] if values.ndim else ()
        return np.full(shape, math.nan) if shape else math.nan
    std = values.std(axis=0, ddof=1)
    return std if std.shape else float(std)


def half_width(std, n, band):
    """Half-width of the band for a mean over n repeats with sample std `std`:
    ci -> t_{(1+CI_LEVEL)/2, n-1} std / sqrt(n); std -> std; none -> NaN. NaN when n < 2."""
    band = normalize_band(band)
    std = np.asarray(std, dtype=float)
    if band in ("none", "minmax", "iqr") or n < 2:
        return np.full(std.shape, math.nan) if std.shape else math.nan
    if band == "std":
        return std if std.shape else float(std)
    factor = t_quantile(0.5 + CI_LEVEL / 2.0, n - 1) / math.sqrt(n)
    return std * factor if std.shape else float(std) * factor


# (low, high) a metric's values can take; a band is clipped to it.
METRIC_RANGES = {"test_accuracy": (0.0, 1.0), "accuracy": (0.0, 1.0)}
NONNEGATIVE = ("loss", "time", "updates", "gradients", "staleness", "epoch", "samples")


def metric_range(stem):
    """(low, high) for a metric or table stem: accuracy [0, 1]; losses, times, counts
    [0, inf); anything else unbounded."""
    stem = str(stem)
    if stem in METRIC_RANGES or stem.endswith("accuracy") and "time" not in stem:
        return (0.0, 1.0)
    if any(word in stem for word in NONNEGATIVE):
        return (0.0, math.inf)
    return (-math.inf, math.inf)


def clip_band(low, high, stem):
    """The band clipped to metric_range(stem) (arrays or numbers)."""
    floor, ceiling = metric_range(stem)
    return np.clip(low, floor, ceiling), np.clip(high, floor, ceiling)


def band_bounds(values, band, stem=None):
    """(low, high) of the band over repeats. values: 1-D (one number per seed) or 2-D
    (seeds x points, e.g. curves on a common grid). NaN where fewer than MIN_SEEDS_FOR_CI
    seeds or band 'none'; clipped to metric_range(stem) when stem is given."""
    band = normalize_band(band)
    values = np.asarray(values, dtype=float)
    n = values.shape[0] if values.ndim else 0
    shape = values.shape[1:] if values.ndim > 1 else ()
    nan = np.full(shape, math.nan) if shape else math.nan
    if band == "none" or n < MIN_SEEDS_FOR_CI:
        return nan, nan
    if band == "minmax":
        low, high = values.min(axis=0), values.max(axis=0)
    elif band == "iqr":
        low, high = np.percentile(values, 25, axis=0), np.percentile(values, 75, axis=0)
    else:
        mean = values.mean(axis=0)
        half = half_width(sample_std(values), n, band)
        low, high = mean - half, mean + half
    if stem is not None:
        low, high = clip_band(low, high, stem)
    if not shape:
        return float(low), float(high)
    return np.asarray(low, dtype=float), np.asarray(high, dtype=float)


def split_seeds(values):
    """The bimodality test (module docstring): (lower side, upper side) as sorted lists
    when the finite values split at a gap, else None."""
    values = sorted(float(v) for v in values if v is not None and math.isfinite(v))
    if len(values) < 3:
        return None
    gaps = np.diff(values)
    cut = int(np.argmax(gaps)) + 1
    lower, upper = values[:cut], values[cut:]
    spread = max(lower[-1] - lower[0], upper[-1] - upper[0])
    largest = max(abs(values[0]), abs(values[-1]))
    gap = gaps[cut - 1]
    if gap > GAP_FACTOR * spread and gap >= RELATIVE_GAP * largest and gap > 0:
        return lower, upper
    return None


def estimate(values, band=DEFAULT_BAND):
    """(mean, sample std, half-width, n) of the finite values; NaN where undefined."""
    values = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    std = float(sample_std(values))
    return float(values.mean()), std, float(half_width(std, n, band)), n


def band_description(band, short=False):
    """What a band / a '±' means, in words, for captions and headings."""
    band = normalize_band(band)
    if band == "minmax":
        return "min\u2013max of seeds" if short else "smallest to largest seed"
    if band == "iqr":
        return "IQR of seeds" if short else "25th to 75th percentile of the seeds (interquartile range)"
    if band == "ci95":
        level = f"{CI_LEVEL * 100:g}%"
        return f"{level} CI" if short else \
            f"{level} confidence interval of the mean (Student's t, n\u22121 degrees of freedom)"
    if band == "std":
        return "\u00b11 std" if short else "\u00b11 sample standard deviation (ddof=1)"
    return "no band"


# ---------------------------------------------------------------- writing numbers

SUPERSCRIPT = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")
# Plain notation for |x| in [PLAIN_LOW, PLAIN_HIGH); outside, a mantissa times a power of 10.
PLAIN_LOW, PLAIN_HIGH = 1e-3, 1e6


def power_of_ten(exponent):
    return "\u00d710" + str(exponent).translate(SUPERSCRIPT)


def format_value(value, digits=4):
    """A number with `digits` significant digits: plain notation for magnitudes in
    [1e-3, max(1e6, 10^digits)), exact integers up to 1e15 as integers, otherwise
    m.mmm×10ᵏ. NaN/None -> '—'."""
    if value is None or isinstance(value, bool):
        return "\u2014"
    value = float(value)
    if math.isnan(value):
        return "\u2014"
    if math.isinf(value):
        return "\u221e" if value > 0 else "\u2212\u221e"
    if value == 0:
        return "0"
    if value == round(value) and abs(value) < 1e15:
        return str(int(round(value)))
    magnitude = abs(value)
    if PLAIN_LOW <= magnitude < max(PLAIN_HIGH, 10.0 ** digits):
        exponent = math.floor(math.log10(magnitude))
        decimals = max(digits - 1 - exponent, 0)
        text = f"{value:.{decimals}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    exponent = math.floor(math.log10(magnitude))
    mantissa = value / 10.0 ** exponent
    if round(abs(mantissa), digits - 1) >= 10:
        exponent, mantissa = exponent + 1, mantissa / 10
    text = f"{mantissa:.{digits - 1}f}".rstrip("0").rstrip(".")
    return text + power_of_ten(exponent)


def _uncertainty_decimals(half):
    """Decimal places that keep 2 significant digits of half (never negative)."""
    exponent = math.floor(math.log10(half))
    decimals = 1 - exponent
    if round(half, decimals) >= 10.0 ** (exponent + 1):  # 0.0996 -> 0.10: one place fewer
        decimals -= 1
    return decimals


def _fixed(value, decimals):
    """value with that many decimals, without the sign of a value that rounds to zero."""
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def format_estimate(mean, half, n=2):
    """'mean ± half' with half to 2 significant digits and mean to the same decimal place
    (integer digits are never rounded away: '76 ± 104'); one shared power of ten when
    both are tiny or huge ('(3.20 ± 0.11)×10⁻⁵'). Just the mean when half is NaN or n < 2."""
    if mean is None or not math.isfinite(float(mean)):
        return format_value(mean)
    if half is None or n < 2 or not math.isfinite(float(half)):
        return format_value(mean)
    mean, half = float(mean), abs(float(half))
    # A spread below double rounding of the mean (identical values summed in another
    # order: 56.32 vs 56.320000000000007) is no spread: shown as 0, not to 17 digits.
    if half == 0 or half <= 1e-12 * abs(mean):
        return f"{format_value(mean)} \u00b1 0"
    largest = max(abs(mean), half)
    if PLAIN_LOW <= largest < PLAIN_HIGH:
        decimals = max(_uncertainty_decimals(half), 0)
        return f"{_fixed(mean, decimals)} \u00b1 {half:.{decimals}f}"
    exponent = math.floor(math.log10(largest))
    scale = 10.0 ** exponent
    decimals = max(_uncertainty_decimals(half / scale), 0)
    return (f"({_fixed(mean / scale, decimals)} \u00b1 {half / scale:.{decimals}f})"
            + power_of_ten(exponent))
