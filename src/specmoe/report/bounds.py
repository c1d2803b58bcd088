"""The physical range of a quantity a table reports (TE's [0, 1]): the value where it lies inside,
else NaN with the raw value and a status saying why. One home for every table that reports a TE
(report.measured's and report.runs' te_vs_batch), below both so neither imports the other."""

from __future__ import annotations

import numpy as np

from ..measured.sweep import TE_NO_INTERVAL


TE_PAST_BOUND = "not identified: its 95% interval reaches past the physical bound"


def bounded_te(name: str, te: float, low: float | None = None, high: float | None = None,
               status: str | None = None) -> dict:
    """A TE as a table keeps it: the value where it lies in [0, 1], else NaN with the raw value
    beside it and a status saying why (TE is a ratio of step times; outside [0, 1] a number is
    not physical, whatever produced it, and must not be plotted or read as a value).

    Given its 95% interval (low, high): a point inside whose interval reaches past 0 or 1 is
    "not identified" (TE_PAST_BOUND: the measurement cannot tell TE from an impossible value),
    and so is one whose interval is missing (TE_NO_INTERVAL: nothing shows it inside); a point
    outside is "not physical" only where its interval lies wholly outside as well, else it too
    is not identified (1.13 [0.54, 2.39] says no more than 0.94 [0.28, 3.13]),
    and the interval is kept as <name>_low/_high only beside a TE that is "ok"; the raw interval
    is always in <name>_raw_low/_raw_high, so no TE column holds a number past its bound.
    `status`: one already decided (the sweep's te_status), "ok" or a reason."""
    return bounded(name, te, low, high, status)


def bounded(name: str, x: float, low: float | None = None, high: float | None = None,
            status: str | None = None, lower: float = 0.0, upper: float = 1.0) -> dict:
    """bounded_te for a quantity whose physical range is [lower, upper] (TE's [0, 1]; a class's
    verify/decode time ratio's [1, inf): the same flags, past `lower` or `upper`."""
    raw = float(x) if x is not None else float("nan")
    if status is None:
        status = "ok" if np.isfinite(raw) and lower <= raw <= upper else (
            "not measured" if not np.isfinite(raw) else
            f"above {upper:g}: not physical" if raw > upper else
            f"below {lower:g}: not physical")
        if status == "ok" and low is not None and (np.isnan(low) or np.isnan(high)):
            status = TE_NO_INTERVAL  # nothing shows it inside its range (one engine start)
        elif status == "ok" and low is not None and not (lower < low and high <= upper):
            status = TE_PAST_BOUND
        elif status != "ok" and np.isfinite(raw) and low is not None and np.isfinite(low) \
                and np.isfinite(high) and low <= upper and high >= lower:
            status = TE_PAST_BOUND  # outside, but its interval reaches back into its range
    ok = status == "ok"
    out = {name: raw if ok else np.nan, f"{name}_raw": raw, f"{name}_status": status}
    if low is not None:
        out.update({f"{name}_low": low if ok else np.nan, f"{name}_high": high if ok else np.nan,
                    f"{name}_raw_low": low, f"{name}_raw_high": high})
    return out
