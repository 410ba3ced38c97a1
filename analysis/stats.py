"""Statistics over seeds and how an estimate is written: the one place for both.

What it is: the Student-t quantile (no SciPy needed), the half-width of a band over
repeats (95 % t confidence interval, sample std, or none), and the text of a number or of
"mean ± half-width" rounded to significant digits. Pure Python + NumPy.
What it is not: no grouping of runs (groups.py) and no drawing (figures.py).

Conventions, stated once:
- Repeats are independent seeds of one configuration; n is how many have a value.
- std is the sample standard deviation (ddof=1); with fewer than 2 values it is NaN,
  because one run says nothing about the spread.
- "ci" is the two-sided CI_LEVEL confidence interval of the mean under a normal model:
  t_{(1+CI_LEVEL)/2, n-1} * std / sqrt(n) (Student's t with n-1 degrees of freedom).
"""

import functools
import math

import numpy as np

BANDS = ("ci", "std", "none")
DEFAULT_BAND = "ci"
CI_LEVEL = 0.95


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
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
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
    if band not in BANDS:
        raise ValueError(f"band must be one of {', '.join(BANDS)}, got {band!r}")
    std = np.asarray(std, dtype=float)
    if band == "none" or n < 2:
        return np.full(std.shape, math.nan) if std.shape else math.nan
    if band == "std":
        return std if std.shape else float(std)
    factor = t_quantile(0.5 + CI_LEVEL / 2.0, n - 1) / math.sqrt(n)
    return std * factor if std.shape else float(std) * factor


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
    if band == "ci":
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
