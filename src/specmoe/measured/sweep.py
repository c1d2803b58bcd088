"""Speedup curves from serving sweeps (docs/method.md, "Serving sweeps"); pure, no engine.

A series measures every batch size of its schedule `repeats` times on one engine (interleaved over
the batch sizes). Per batch size B, from three series measured with the same prompts and output
length:
- TPOT(B): the mean over repeats of each repeat's mean TPOT, timed by the client (vLLM's bench, as
  in the study) or by the engine (`timing`, see TIMINGS); its standard error on the log scale from
  the spread of the repeats, pooled over the series' batch sizes (one relative noise per engine;
  degrees of freedom = repeats - 1 summed over batch sizes), plus the spread of a point's mean
  from one engine to the next (`engine_log_sd`, measured apart by bench/engine_variation.py: the
  repeats share one engine and cannot see it; its estimate's degrees of freedom
  `engine_log_sd_df`, engines - 1 per series measured), with Welch-Satterthwaite degrees of
  freedom. That spread is the machine's it was measured on (`engine_log_sd_device`): a series
  swept on another device takes none (engine_spread_on), its error the repeats' alone. A
  series measured once per batch size has no interval (series_estimates: the requests of one
  measurement share its engine steps, not independent units);
- speedup(B) = TPOT_noSD(B) / TPOT_SD(B) with a 95% interval (log scale, t quantile with
  Welch-Satterthwaite degrees of freedom);
- tau(B): mean acceptance length of the SD series' repeats (tokens per step, bonus token included),
  with its t interval over the repeats (tau_low, tau_high; none from one repeat, nor from repeats
  that agree exactly, as greedy decoding's do: vLLM counts acceptance engine-wide, so there is
  no interval over requests);
- c(B) = K * TPOT_drafter(B) / TPOT_noSD(B): the draft cost per SD step over the target's decode
  step, with the drafter timed alone (served without SD, same batch);
- TE(B) = TPOT_noSD / (tau TPOT_SD - K TPOT_drafter), with a 95% interval: each bound at the corner
  of the four inputs' own 95% intervals (tau without one at its point) where TE is smallest or
  largest (TE rises with TPOT_noSD and TPOT_drafter and falls with tau and TPOT_SD). Whether it
  is a value is decided by the one rule every table's TE is flagged by (bound_status, on [0, 1]):
  a point inside whose interval reaches past a bound (above 1, or unbounded) or is missing is "not
  identified", and so is a point outside whose interval reaches back inside; one outside with its
  interval is "not physical"; no finite TE (tau / speedup at or below c) is TE_UNDEFINED. Any of
  these leaves its TE NaN (the raw value and the interval are kept beside the status);
- the curve's shape (shape_label) and whether SD is faster or slower over it (direction_labels),
  decided by the intervals or said to be undecided.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..cost.costmodel import te_from_sweep
from ..errors import InputError
from ..routing import bootstrap

CONCAVE, PEAK_LOW, RISING = "concave", "peak at low batch", "rising"
FLAT, UNDECIDED, TOO_FEW = "flat within the margin", "undecided within the noise", "too few points"
# client: TPOT of each request as vLLM's bench client sees the stream. engine: the engine's own
# per-request TPOT histogram (timestamps taken when the engine core produces each output). They
# agree when the API server keeps up; on a 2-core CPU it does not (it shares a core with the engine
# core's busy loop), streamed chunks merge and client TPOT and TTFT stop meaning decode speed.
TIMINGS = ("client", "engine")
LEVEL = bootstrap.LEVEL  # the one level of every interval (routing.bootstrap), the defaults'


def tpot(point: dict, timing: str) -> float:
    """Mean TPOT of a point in ms, by the client or by the engine."""
    if timing == "client":
        return point["tpot_ms"]["mean"]
    if timing == "engine":
        v = (point.get("engine") or {}).get("request_time_per_output_token_ms")
        if v is None:
            raise InputError(f"batch {point['batch']}: the point has no engine-side timing")
        return v
    raise InputError(f"timing must be one of {', '.join(TIMINGS)} (got {timing!r})")


@dataclass(frozen=True)
class Estimate:
    """A positive mean with its standard error on the log scale and the degrees of freedom of
    that error (inf: known exactly; 0: no error available)."""
    mean: float
    log_se: float
    df: float

    def interval(self, level: float = LEVEL) -> tuple[float, float]:
        if not (self.df > 0 and math.isfinite(self.log_se)):
            return float("nan"), float("nan")
        t = _t(level, self.df) * self.log_se
        return self.mean * math.exp(-t), self.mean * math.exp(t)


def _t(level: float, df: float) -> float:
    return float(stats.norm.ppf(0.5 + level / 2) if math.isinf(df)
                 else stats.t.ppf(0.5 + level / 2, df))


def ratio(a: Estimate, b: Estimate, shared: float = 0.0,
          shared_df: float | None = None) -> Estimate:
    """a / b for independent estimates: log errors add in quadrature, Welch-Satterthwaite df.
    shared: a further log variance of the ratio that comes from one estimate, with `shared_df`
    degrees of freedom (None: known), e.g. the engine spread of both series, 2 engine_log_sd^2:
    one estimate, so its degrees of freedom count once, not once per series."""
    v = (a.log_se ** 2, b.log_se ** 2)
    if not all(math.isfinite(x) for x in v) or not (a.df > 0 and b.df > 0):
        return Estimate(a.mean / b.mean, float("nan"), 0.0)
    total = sum(v) + shared
    den = sum(x * x / d for x, d in zip(v, (a.df, b.df)) if x > 0 and math.isfinite(d))
    den += shared ** 2 / shared_df if shared > 0 and shared_df is not None else 0.0
    return Estimate(a.mean / b.mean, math.sqrt(total), total ** 2 / den if den else math.inf)


def repeats_by_batch(points: list[dict]) -> dict[int, list[dict]]:
    """A series' points grouped by batch size (its repeats), in the order they were measured."""
    out: dict[int, list[dict]] = {}
    for p in points:
        out.setdefault(p["batch"], []).append(p)
    return out


def series_estimates(points: list[dict], timing: str, what: str, engine_log_sd: float,
                     engine_log_sd_df: float | None = None) -> dict[int, Estimate]:
    """Each batch size's mean TPOT over its repeats, with the series' pooled log-scale error and
    the engine-to-engine spread `engine_log_sd`, estimated with `engine_log_sd_df` degrees of
    freedom (None: known)."""
    seen = set()
    for p in points:
        rep = (p["batch"], p.get("repeat", 0))
        if rep in seen:
            raise InputError(f"{what}: batch {p['batch']} repeat {rep[1]} appears twice")
        seen.add(rep)
    groups = repeats_by_batch(points)
    by_batch = {b: [tpot(p, timing) for p in pts] for b, pts in groups.items()}
    for b, xs in by_batch.items():  # one NaN would void every batch size's pooled error
        bad = [x for x in xs if not (isinstance(x, numbers.Real) and math.isfinite(x) and x > 0)]
        if bad:
            raise InputError(f"{what}: batch {b}: {timing} TPOT {bad[0]!r} ms is not a positive "
                             "number (a failed or empty measurement)")
    ss = df = 0.0
    for xs in by_batch.values():
        logs = [math.log(x) for x in xs]
        m = sum(logs) / len(logs)
        ss += sum((v - m) ** 2 for v in logs)
        df += len(logs) - 1
    out = {}
    for b, xs in by_batch.items():
        mean = sum(xs) / len(xs)
        if not df > 0:
            # measured once: no error. The requests of one measurement share its engine steps
            # (not independent units), and the client's spread is another timing than the
            # engine's: a point without repeats decides nothing
            out[b] = Estimate(mean, float("nan"), 0.0)
            continue
        var, dof = ss / df / len(xs), df
        out[b] = _with_engine(mean, var, dof, engine_log_sd, engine_log_sd_df)
    return out


def engine_spread_on(device: str | None, log_sd: float, df: float | None,
                     measured_on: str | None, what: str) -> tuple[float, float | None]:
    """The engine spread (log sd, its estimate's degrees of freedom) of a series swept on `device`
    (cpu or cuda, from its provenance): the configured one (`log_sd`, `df`) where it was measured
    on that device (`measured_on`, sweep.engine_log_sd_device), else none (0, None): one machine's
    spread from engine start to engine start says nothing of another's. A series that names no
    device is refused where a spread is configured (what: the series, for the message)."""
    if not log_sd:
        return 0.0, None
    if device is None:
        raise InputError(f"{what} names no device it was swept on (its provenance records no "
                         f"engine), so the engine spread measured on {measured_on} "
                         "(sweep.engine_log_sd) cannot be matched to it: delete it to measure "
                         "it again")
    return (log_sd, df) if device == measured_on else (0.0, None)


def _with_engine(mean: float, var: float, dof: float, engine_log_sd: float,
                 engine_df: float | None = None) -> Estimate:
    """A point's mean with its error from one engine (log variance `var`, `dof` degrees of
    freedom) and the spread from one engine to the next added (its variance estimated with
    `engine_df` degrees of freedom, None: known), Welch-Satterthwaite degrees of freedom."""
    eng = engine_log_sd ** 2
    total = var + eng
    part = (var ** 2 / dof if var > 0 else 0.0) + (
        eng ** 2 / engine_df if eng > 0 and engine_df is not None else 0.0)
    if part > 0:
        dof = total ** 2 / part
    elif total > 0:
        dof = math.inf
    return Estimate(mean, math.sqrt(total), dof)


def te_interval(tau: tuple, k: int, ar: tuple, sd: tuple, dr: tuple) -> tuple[float, float]:
    """(low, high) of TE = ar / (tau sd - k dr) over the box of the inputs' (low, high)
    intervals (NaN where one is missing; high is inf where the denominator can reach 0)."""
    if not all(math.isfinite(v) for iv in (tau, ar, sd, dr) for v in iv):
        return float("nan"), float("nan")

    def te(a_, t_, s_, d_):
        den = t_ * s_ - k * d_
        return a_ / den if den > 0 else float("inf")

    return (te(ar[0], tau[1], sd[1], dr[0]), te(ar[1], tau[0], sd[0], dr[1]))


TE_OK, TE_NO_DRAFTER = "ok", "no drafter series"
# TE = 1 / (tau / speedup - c): where tau / speedup does not exceed the draft cost c there is no
# finite positive TE (te_from_sweep gives NaN), a point beyond 1 rather than a number
TE_UNDEFINED = "not identifiable: tau / speedup does not exceed the draft cost (no finite TE)"
# a value without an interval (a point measured once, a drafter without repeats, a profile of one
# engine start) cannot show that it lies inside its range: it is not a value either
TE_NO_INTERVAL = "not identified: no 95% interval (measured once)"
TE_PAST_BOUND = "not identified: its 95% interval reaches past the physical bound"


def bound_status(x: float, low: float | None = None, high: float | None = None,
                 lower: float = 0.0, upper: float = 1.0) -> str:
    """The one rule deciding whether a quantity with the physical range [lower, upper] (TE's
    [0, 1]; a verify/decode time ratio's [1, inf)) is a value: "ok", else why not. Every table
    flags with it (report.bounds) and so does the sweep (te_status).

    A point inside whose 95% interval (low, high) reaches past a bound is "not identified"
    (TE_PAST_BOUND: the measurement cannot tell it from an impossible value), and so is one whose
    interval is missing (NaN: TE_NO_INTERVAL, nothing shows it inside); a point outside is "not
    physical" only where its interval lies wholly outside as well, else it too is not identified
    (1.13 [0.54, 2.39] says no more than 0.94 [0.28, 3.13]). Without an interval (low None) the
    point alone decides."""
    raw = float(x) if x is not None else float("nan")
    if not np.isfinite(raw):
        return "not measured"
    if not lower <= raw <= upper:
        reaches_back = (low is not None and not (np.isnan(low) or np.isnan(high))
                        and low <= upper and high >= lower)
        return TE_PAST_BOUND if reaches_back else (
            f"above {upper:g}: not physical" if raw > upper else f"below {lower:g}: not physical")
    if low is None:
        return TE_OK
    if np.isnan(low) or np.isnan(high):
        return TE_NO_INTERVAL
    return TE_OK if lower < low and high <= upper else TE_PAST_BOUND


def te_status(te: float, low: float, high: float, drafter: bool) -> str:
    """Whether a TE from the sweep is a number, by the one rule (bound_status on [0, 1]), with
    the sweep's own reasons where it has none: no drafter series to give the draft cost
    (TE_NO_DRAFTER), or no finite TE (TE_UNDEFINED: tau / speedup at or below the draft cost)."""
    if not drafter:
        return TE_NO_DRAFTER
    if math.isnan(te):
        return TE_UNDEFINED
    return bound_status(te, low, high)


def mean_interval(xs: list[float], level: float = LEVEL) -> tuple[float, float]:
    """A t interval of the mean of repeated values; none (NaN) from one value, or from values
    that agree exactly (repeats of greedy decoding do: their spread of 0 says nothing of the
    error, and an interval of zero width would claim none)."""
    m = sum(xs) / len(xs)
    if len(xs) < 2 or len(set(xs)) == 1:
        return float("nan"), float("nan")
    half = _t(level, len(xs) - 1) * stats.tstd(xs) / math.sqrt(len(xs))
    return m - half, m + half


def tau_for_te(tau: float, low, high, spread) -> tuple[float, float]:
    """A sweep point's tau interval as its TE takes it, the one rule for the sweep's TE
    (speedup_curve) and the report's (te_sweep_interval): its own interval where it has one;
    else tau at its point where its repeats agree exactly or there is one (spread 0: no
    interval, none needed); else none (NaN: a spread of NaN or None is unknown, as in a sweep
    from before tau kept its spread, and says nothing)."""
    ok = [v is not None and math.isfinite(v) for v in (low, high)]
    if all(ok):
        return low, high
    if spread is not None and spread == 0:
        return tau, tau
    return float("nan"), float("nan")


def shape_label(batches: list[int], speedups: list[Estimate], margin: float,
                level: float = LEVEL) -> str:
    """The shape of a speedup-vs-batch curve as far as its intervals decide it (shape_labels on
    one curve: points without a value left out, sorted by batch size)."""
    pts = sorted((b, s) for b, s in zip(batches, speedups) if math.isfinite(s.mean))
    if len(pts) < 2:
        return TOO_FEW
    est = [s for _, s in pts]
    return str(shape_labels(np.log([[s.mean for s in est]]), np.array([[s.log_se for s in est]]),
                            np.array([[s.df for s in est]]), margin, level)[0])


def shape_labels(log_speedup: np.ndarray, log_se: np.ndarray, df: np.ndarray, margin: float,
                 level: float = LEVEL) -> np.ndarray:
    """The shape label of many curves at once: [curve, point] arrays of each point's log speedup,
    its log-scale standard error and degrees of freedom, points in ascending batch size (the one
    implementation of the rule: shape_label and the simulation of its error rates both call it).

    Two batch sizes i, j differ ("i above j") when the interval of log(s_i / s_j) lies above 0
    and its point above log(1 + margin); i is "not above j by more than the margin" when the
    interval's upper bound is at most log(1 + margin) (an equivalence test: absence of a
    difference is never read from an undecided interval). The intervals are Bonferroni-adjusted
    for the number of pairs (a shape is a claim about the whole curve); a point known exactly
    (error 0, infinite degrees of freedom) decides by its value, and a point without an error
    (NaN, or no degrees of freedom: measured once) decides nothing. A pair's degrees of freedom
    are the smaller of its points': their errors come from the same estimates (each series'
    pooled repeat variance, the one engine spread), so they are not independent estimates that
    Welch-Satterthwaite would add. "concave": an interior batch size above both ends; "rising": the
    largest above the smallest, no smaller batch above the largest by more than the margin and
    none between them decidedly below the smallest (a dip is not a rise);
    "peak at low batch": the smallest above the largest and no larger batch above the smallest by
    more than the margin; "flat within the margin": every pair within the margin both ways; else
    "undecided within the noise". Each label's false-label rate under the configurations' noise
    is simulated (specmoe.measured.rules, bench/decision_rules.py)."""
    lm = np.asarray(log_speedup, float)
    if lm.shape[1] < 2:
        return np.full(lm.shape[0], TOO_FEW, dtype=object)
    return shapes_from_pairs(*pair_tests(lm, log_se, df, margin, level), margin)


def shapes_from_pairs(above: np.ndarray, within: np.ndarray, lo: np.ndarray,
                      margin: float) -> np.ndarray:
    """shape_labels' rule on its pair tests ([curve, i, j] arrays of "i above j", "i not above j
    by more than the margin" and the lower bound of the interval of log(s_i / s_j), at least two
    points, ascending batch size), whatever gave the pairs' intervals: pair_tests from each
    point's error, or the step model's draws (stepmodel.draw_shape, through pair_decisions)."""
    n = above.shape[1]
    out = np.full(above.shape[0], UNDECIDED, dtype=object)
    up = math.log1p(margin)
    first, last = 0, n - 1
    concave = (above[:, 1:-1, first] & above[:, 1:-1, last]).any(axis=1)
    rising = (above[:, last, first] & within[:, :last, last].all(axis=1)
              & ~above[:, first, 1:last].any(axis=1))
    peak = above[:, first, last] & within[:, 1:, first].all(axis=1)
    i, j = np.triu_indices(n, 1)
    flat = ((lo >= -up) & within)[:, i, j].all(axis=1)
    out[flat] = FLAT
    out[peak] = PEAK_LOW
    out[rising] = RISING
    out[concave] = CONCAVE
    return out


def pair_tests(log_speedup: np.ndarray, log_se: np.ndarray, df: np.ndarray, margin: float,
               level: float = LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """shape_labels' tests of every pair of points of many curves ([curve, point] arrays), each
    [curve, i, j]: "i above j", "i not above j by more than the margin" and the lower bound of
    the interval of log(s_i / s_j) (Bonferroni-adjusted for the number of pairs)."""
    lm = np.asarray(log_speedup, float)
    se, dof = np.asarray(log_se, float), np.asarray(df, float)
    q = 1 - pair_tail(lm.shape[1], level)
    diff = lm[:, :, None] - lm[:, None, :]                      # [curve, i, j]: log(s_i / s_j)
    v = se ** 2
    vsum = v[:, :, None] + v[:, None, :]
    known = np.isfinite(se) & (dof > 0)                         # a point with an error (or exact)
    ok = known[:, :, None] & known[:, None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        # the pair's degrees of freedom: shared estimates count once (t of inf df is normal)
        pair_df = np.where(ok, np.minimum(dof[:, :, None], dof[:, None, :]), 1.0)
        half = np.where(ok, stats.t.ppf(q, pair_df) * np.sqrt(np.where(ok, vsum, 0.0)), 0.0)
    return pair_decisions(diff, diff - half, diff + half, ok, margin)


def pair_tail(points: int, level: float = LEVEL) -> float:
    """Each tail's share of a pair's interval among `points` points: the level Bonferroni-adjusted
    for the number of pairs (one claim about the whole curve)."""
    return (1 - level) / max(math.comb(points, 2), 1) / 2


def pair_decisions(point: np.ndarray, lo: np.ndarray, hi: np.ndarray, ok: np.ndarray,
                   margin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pair tests from each pair's log(s_i / s_j) (its point and the ends of its adjusted
    interval; `ok`: the pair has an interval): "i above j" where the interval lies above 0 and its
    point above log(1 + margin), "i not above j by more than the margin" where its upper end is
    at most log(1 + margin); and the lower ends (shapes_from_pairs' input)."""
    up = math.log1p(margin)
    with np.errstate(invalid="ignore"):
        above = ok & (lo > 0) & (point > up)
        within = ok & (hi <= up)                                # i not above j by the margin
    return above, within, lo


def below_highest(rows: list[dict], margin: float, level: float = LEVEL) -> list[bool]:
    """For each point of one speedup curve (speedup_curve's rows), whether the point with the
    highest speedup lies above it by shape_labels' pair test: the highest point estimate is the
    largest speedup only where every other point lies below it (intervals that overlap rank
    nothing). A point without a value or an error is below nothing."""
    s = np.array([r["speedup"] for r in rows], float)
    if not np.isfinite(s).any():
        return [False] * len(rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        lm = np.log(s)
    above = pair_tests(lm[None], np.array([[r.get("speedup_log_se", np.nan) for r in rows]]),
                       np.array([[r.get("speedup_df", np.nan) for r in rows]]), margin,
                       level)[0][0]
    return [bool(x) for x in above[int(np.nanargmax(s))]]


FASTER, SLOWER, MIXED = "faster", "slower", "mixed"
NEITHER = "neither decidedly faster nor slower"


def direction_labels(log_speedup: np.ndarray, log_se: np.ndarray, df: np.ndarray,
                     level: float = LEVEL) -> np.ndarray:
    """Whether SD is faster or slower over a curve, for many curves at once ([curve, point]
    arrays as shape_labels takes): "faster" where some point's interval lies above 1 and none
    below, "slower" the reverse, "mixed" both, else "neither decidedly faster nor slower". The
    points' intervals are Bonferroni-adjusted for their number (one claim about the curve: with
    4 unadjusted 95% intervals a curve at speedup 1 is called faster or slower about 10% of the
    time); a point known exactly decides by its value, one without an error (measured once)
    decides nothing."""
    lm = np.asarray(log_speedup, float)
    se, dof = np.asarray(log_se, float), np.asarray(df, float)
    q = 0.5 + (1 - (1 - level) / lm.shape[1]) / 2
    ok = np.isfinite(se) & (dof > 0)
    with np.errstate(invalid="ignore"):
        half = np.where(ok, stats.t.ppf(q, np.where(ok, dof, 1.0)) * np.where(ok, se, 0.0), 0.0)
    up = (ok & ((lm - half) > 0)).any(axis=1)
    down = (ok & ((lm + half) < 0)).any(axis=1)
    out = np.full(lm.shape[0], NEITHER, dtype=object)
    out[up & ~down] = FASTER
    out[down & ~up] = SLOWER
    out[up & down] = MIXED
    return out


def _spread_sum(a: tuple[float, float | None], b: tuple[float, float | None]
                ) -> tuple[float, float | None]:
    """The log variance two series' engine spreads (log sd, df; df None: known) add to a ratio of
    their means, with its degrees of freedom (Welch-Satterthwaite; one estimate used for both,
    the same pair, counts its degrees of freedom once, as the speedup's does)."""
    if a == b:
        return 2 * a[0] ** 2, a[1]
    var = a[0] ** 2 + b[0] ** 2
    den = sum(sd ** 4 / df for sd, df in (a, b) if sd > 0 and df is not None)
    return var, (var ** 2 / den if den else None)


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def speedup_curve(ar: list[dict], sd: list[dict], drafter: list[dict] | None, k: int,
                  margin: float, timing: str, engine_log_sd: float,
                  engine_log_sd_df: float | None = None,
                  drafter_engine: tuple[float, float | None] | None = None) -> dict:
    """Rows per batch size present in both the SD and the no-SD series, plus the shape label.
    engine_log_sd, engine_log_sd_df: the engine spread of the SD series and its no-SD points
    (one job, one device: engine_spread_on); drafter_engine: the drafter series' (log sd, df),
    None: the same."""
    other = "engine" if timing == "client" else "client"
    spread = {"ar": (engine_log_sd, engine_log_sd_df), "sd": (engine_log_sd, engine_log_sd_df),
              "dr": drafter_engine or (engine_log_sd, engine_log_sd_df)}
    # each series' points from its repeats alone; a point's own interval adds the engine spread
    # (_with_engine), the speedup adds it once for both series (ratio's shared part)
    own = {name: series_estimates(pts, timing, what, 0.0) if pts else {}
           for name, pts, what in (("ar", ar, "no-SD series"), ("sd", sd, "SD series"),
                                   ("dr", drafter or [], "drafter series"))}
    est = {name: {b: _with_engine(e.mean, e.log_se ** 2, e.df, *spread[name])
                  if e.df > 0 else e for b, e in pts.items()} for name, pts in own.items()}
    reps = {"ar": repeats_by_batch(ar), "sd": repeats_by_batch(sd)}
    rows = []
    for b in sorted(set(est["ar"]) & set(est["sd"])):
        a_pts, s_pts = reps["ar"][b], reps["sd"][b]
        if any("sd" not in s for s in s_pts):
            raise InputError(f"SD series, batch {b}: no speculative-decoding metrics (was SD on?)")
        a, s, d = est["ar"][b], est["sd"][b], est["dr"].get(b)
        spd = ratio(own["ar"][b], own["sd"][b], 2 * engine_log_sd ** 2, engine_log_sd_df)
        lo, hi = spd.interval()
        taus = [p["sd"]["acceptance_length"] for p in s_pts]
        tau = _mean(taus)
        c = k * d.mean / a.mean if d else float("nan")
        # c's interval: the drafter's and the no-SD series' repeats, each series' engine spread
        c_lo, c_hi = ((k * v for v in ratio(own["dr"][b], own["ar"][b],
                                            *_spread_sum(spread["dr"], spread["ar"])).interval())
                      if d else (float("nan"), float("nan")))
        try:
            spd_other = _mean(tpot(p, other) for p in a_pts) / _mean(tpot(p, other) for p in s_pts)
        except InputError:
            spd_other = float("nan")
        # tau's 95% interval over the repeats (none from one repeat, nor from repeats that
        # agree exactly), kept beside it and taken by TE's (none: tau at its point)
        tau_iv = mean_interval(taus)
        te_raw = te_from_sweep(tau, spd.mean, c) if math.isfinite(c) else float("nan")
        tau_spread = max(taus) - min(taus)
        te_lo, te_hi = (te_interval(tau_for_te(tau, *tau_iv, tau_spread), k,
                                    a.interval(), s.interval(), d.interval())
                        if d else (float("nan"), float("nan")))
        status = te_status(te_raw, te_lo, te_hi, math.isfinite(c))
        ok = status == "ok"
        pos = [_mean(col) for col in zip(*(p["sd"]["per_position_acceptance"] for p in s_pts))]
        rows.append({"batch": b, "repeats": min(len(a_pts), len(s_pts)),
                     "tpot_ar_ms": a.mean, "tpot_sd_ms": s.mean,
                     f"speedup_{other}": spd_other,
                     "tpot_ar_p99_ms": _mean(p["tpot_ms"]["p99"] for p in a_pts),
                     "tpot_sd_p99_ms": _mean(p["tpot_ms"]["p99"] for p in s_pts),
                     "speedup": spd.mean, "speedup_low": lo, "speedup_high": hi,
                     "speedup_log_se": spd.log_se, "speedup_df": spd.df,
                     "tau": tau, "tau_low": tau_iv[0], "tau_high": tau_iv[1],
                     "tau_spread": tau_spread,
                     "position_acceptance": pos, "draft_cost": c,
                     "draft_cost_low": c_lo, "draft_cost_high": c_hi,
                     "te_sweep": te_raw if ok else float("nan"), "te_sweep_raw": te_raw,
                     "te_sweep_low": te_lo, "te_sweep_high": te_hi,
                     "te_sweep_status": status,
                     "throughput_ar": _mean(p["output_throughput"] for p in a_pts),
                     "throughput_sd": _mean(p["output_throughput"] for p in s_pts)})
    if not rows:
        raise InputError("the SD and no-SD series share no batch size")
    shape = shape_label([r["batch"] for r in rows],
                        [Estimate(r["speedup"], r["speedup_log_se"], r["speedup_df"])
                         for r in rows], margin)
    direction = str(direction_labels(np.log([[r["speedup"] for r in rows]]),
                                     np.array([[r["speedup_log_se"] for r in rows]]),
                                     np.array([[r["speedup_df"] for r in rows]]))[0])
    # no "best" batch size here: the highest point estimate is the largest speedup only where
    # the intervals put every other point below it (below_highest)
    return {"rows": rows, "shape": shape, "direction": direction, "margin": margin,
            "timing": timing, "engine_log_sd": engine_log_sd,
            "engine_log_sd_df": engine_log_sd_df}
