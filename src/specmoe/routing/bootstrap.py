"""The request-level bootstrap's settings, one place for every routing statistic that resamples
requests (the overlap's window and sequence intervals, the matched controls' contrasts, the
acceptance statistics, the IPF's error interval): a change of level, of resamples or of the
floor moves them all together. Read as `bootstrap.LEVEL` (not imported by value) where a
function uses one, so that the value in force is the one used."""

from __future__ import annotations

import math

N_BOOT = 2000      # request-level bootstrap resamples
BOOT_SEED = 0      # fixed: the same trace gives the same intervals, bit for bit
# two-sided level of every interval: the routing statistics' and the measured ones' (the sweep's
# t intervals, measured.sweep.LEVEL, its functions' default; the profiles' over starts)
LEVEL = 0.95
# requests (the independent units) below which nothing is decided: no interval of an overlap
# statistic, of a matched control's difference or of an acceptance row's delta by request (all
# drawn by overlap.request_weights, which applies it), and in either arm of an acceptance row no
# test and no verdict ("too few")
MIN_REQUESTS = 10


def tails(level: float | None = None) -> tuple[float, float]:
    """The percentiles (in %) that bound a two-sided interval at `level` (default LEVEL):
    (2.5, 97.5) at 0.95."""
    tail = 100 * (1 - (LEVEL if level is None else level)) / 2
    return tail, 100 - tail


def small_sample_factor(n: int, level: float | None = None) -> float:
    """sqrt(n / (n - 1)) t_{n-1} / z at the two-sided `level` (default LEVEL): how much wider
    than its resamples' an interval of a statistic resampled over n independent requests is
    drawn (widen). The resamples spread as the plug-in does, short by sqrt((n - 1) / n), and a
    mean of n units is t-, not normally, distributed: 1.216 at 10 requests, 1.045 at 40, 1 in
    the limit (at 10-12 requests the plain intervals left the truth out of 8-10% of simulated
    traces, the widened ones of 4-7%: bench/interval_coverage.py). NaN below 2 requests."""
    # scipy.special, not scipy.stats (whose import costs an analysis job more than its bootstrap)
    from scipy.special import ndtri, stdtrit

    if n < 2:
        return float("nan")
    p = (1 + (LEVEL if level is None else level)) / 2
    return float(math.sqrt(n / (n - 1)) * stdtrit(n - 1, p) / ndtri(p))


def widen(point, low, high, n: int):
    """An interval's ends (scalars or arrays) from resamples of n requests moved away from its
    point, each half-width (signed: an end beyond the point stays beyond it) times
    small_sample_factor(n): the one place every request-resampled interval (percentile, basic,
    BCa) is widened. NaN ends stay NaN."""
    f = small_sample_factor(n)
    return point - f * (point - low), point + f * (high - point)
