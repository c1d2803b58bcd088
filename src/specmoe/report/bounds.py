"""The physical range of a quantity a table reports (TE's [0, 1]): the value where it lies inside,
else NaN with the raw value and a status saying why. One home for every table that reports a TE
(report.measured's and report.runs' te_vs_batch), below both so neither imports the other."""

from __future__ import annotations

import numpy as np

# the rule and its statuses live below the sweep, which flags its TE by it too; TE_PAST_BOUND
# and TE_NO_INTERVAL are read from here by the tables' tests
from ..measured.sweep import TE_NO_DRAFTER, TE_UNDEFINED, bound_status
from ..measured.sweep import TE_NO_INTERVAL, TE_PAST_BOUND  # noqa: F401

# the sweep's reasons a TE has no value that its numbers alone cannot show (measured.sweep)
SWEEP_REASONS = (TE_NO_DRAFTER, TE_UNDEFINED)


def bounded_te(name: str, te: float, low: float | None = None, high: float | None = None,
               status: str | None = None) -> dict:
    """A TE as a table keeps it: the value where it lies in [0, 1], else NaN with the raw value
    beside it and a status saying why (TE is a ratio of step times; outside [0, 1] a number is
    not physical, whatever produced it, and must not be plotted or read as a value).

    The status is measured.sweep.bound_status's, the one rule: a point inside whose 95%
    interval (low, high) reaches past 0 or 1, or is missing, is not identified, and so is a point
    outside whose interval reaches back inside; the interval is kept as <name>_low/_high only beside a TE that is "ok"; the raw interval is always in
    <name>_raw_low/_raw_high, so no TE column holds a number past its bound.
    `status`: the sweep's te_status, kept only where it is a reason the numbers cannot show
    (SWEEP_REASONS: no drafter series, no finite TE); any other is decided again by the rule,
    so a sweep's result from before the rule was one reads as today's."""
    return bounded(name, te, low, high, status if status in SWEEP_REASONS else None)


def bounded(name: str, x: float, low: float | None = None, high: float | None = None,
            status: str | None = None, lower: float = 0.0, upper: float = 1.0) -> dict:
    """bounded_te for a quantity whose physical range is [lower, upper] (TE's [0, 1]; a class's
    verify/decode time ratio's [1, inf)): the same flags (bound_status), past `lower` or
    `upper`; `status`, where given, decided already."""
    raw = float(x) if x is not None else float("nan")
    if status is None:
        status = bound_status(raw, low, high, lower, upper)
    ok = status == "ok"
    out = {name: raw if ok else np.nan, f"{name}_raw": raw, f"{name}_status": status}
    if low is not None:
        out.update({f"{name}_low": low if ok else np.nan, f"{name}_high": high if ok else np.nan,
                    f"{name}_raw_low": low, f"{name}_raw_high": high})
    return out
