"""The request-level bootstrap's settings, one place for every routing statistic that resamples
requests (the overlap's window and sequence intervals, the matched controls' contrasts, the
acceptance statistics, the IPF's error interval): a change of level, of resamples or of the
floor moves them all together. Read as `bootstrap.LEVEL` (not imported by value) where a
function uses one, so that the value in force is the one used."""

from __future__ import annotations

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
