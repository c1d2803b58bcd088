"""Speedup curves from serving sweeps (docs/method.md, "Serving sweeps"); pure, no engine.

Per batch size B, from three series measured with the same prompts and output length:
- speedup(B) = TPOT_noSD(B) / TPOT_SD(B), mean TPOT, timed by the client (vLLM's bench, as in the
  study) or by the engine (`timing`, see TIMINGS); both are kept beside each other;
- tau(B): mean acceptance length of the SD series (tokens per step, bonus token included);
- c(B) = K * TPOT_drafter(B) / TPOT_noSD(B): the draft cost per SD step over the target's decode step,
  with the drafter timed alone (served without SD, same batch);
- TE(B) = 1 / (tau / speedup - c) = TPOT_noSD / (tau TPOT_SD - K TPOT_drafter), with a 95%
  interval from the standard errors of the three mean TPOTs (each bound evaluated at the corner of
  the box where TE is smallest or largest, since TE rises with TPOT_noSD and TPOT_drafter and falls
  with TPOT_SD). TE is ill-conditioned when tau TPOT_SD is close to K TPOT_drafter: a point value
  above 1, or an interval whose upper bound is unbounded, is "not identifiable here" and its TE is
  NaN (the raw value is kept as te_sweep_raw);
- the curve's shape (shape_label).
"""

from __future__ import annotations

import math

from .costmodel import te_from_sweep
from .errors import InputError

CONCAVE, PEAK_LOW = "concave", "peak at low batch"
RISING, FLAT, TOO_FEW = "rising", "flat within the margin", "too few points"
SHAPES = (PEAK_LOW, CONCAVE, RISING, FLAT, TOO_FEW)
# client: TPOT of each request as vLLM's bench client sees the stream. engine: the engine's own
# per-request TPOT histogram (timestamps taken when the engine core produces each output). They
# agree when the API server keeps up; on a 2-core CPU it does not (it shares a core with the engine
# core's busy loop), streamed chunks merge and client TPOT and TTFT stop meaning decode speed.
TIMINGS = ("client", "engine")


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


def tpot_se(point: dict, timing: str) -> float:
    """Standard error of a point's mean TPOT: the client's per-request spread over sqrt(requests).
    The engine keeps means only, so engine timing borrows the client's relative error."""
    t = point.get("tpot_ms") or {}
    n = point.get("completed") or point.get("num_prompts") or 0
    if t.get("std") is None or not n or not t.get("mean"):
        return float("nan")
    se = t["std"] / math.sqrt(n)
    return se if timing == "client" else se / t["mean"] * tpot(point, timing)


def te_interval(tau: float, k: int, ar: tuple, sd: tuple, dr: tuple,
                z: float = 1.96) -> tuple[float, float]:
    """(low, high) of TE = ar / (tau sd - k dr) over the box of each mean TPOT +- z SE (NaN
    without standard errors; high is inf where the denominator can reach 0)."""
    (a, sa), (s, ss), (d, sdr) = ar, sd, dr
    if not all(math.isfinite(v) for v in (a, sa, s, ss, d, sdr)):
        return float("nan"), float("nan")

    def te(a_, s_, d_):
        den = tau * s_ - k * d_
        return a_ / den if den > 0 else float("inf")

    low = te(max(a - z * sa, 0.0), s + z * ss, max(d - z * sdr, 0.0))
    high = te(a + z * sa, max(s - z * ss, 1e-12), d + z * sdr)
    return low, high


def shape_label(batches: list[int], speedups: list[float], margin: float = 0.05) -> str:
    """The shape of a speedup-vs-batch curve, `margin` being the relative difference that counts:
    "flat within the margin" (every point within it of batch 1), "rising" (the maximum at the
    largest batch, or within the margin of it, above batch 1 by more than the margin), "concave"
    (an interior maximum above batch 1 by more than the margin, falling again after it), else "peak
    at low batch" (nothing beats the smallest batch by more than the margin)."""
    pairs = sorted((b, s) for b, s in zip(batches, speedups) if math.isfinite(s))
    if len(pairs) < 2:
        return TOO_FEW
    first, last = pairs[0][1], pairs[-1][1]
    vals = [v for _, v in pairs]
    best = max(vals)
    up = 1.0 + margin
    if best <= first * up and min(vals) >= first / up:
        return FLAT
    if best > first * up:
        return RISING if last * up >= best else CONCAVE
    return PEAK_LOW


def _by_batch(points: list[dict], what: str) -> dict[int, dict]:
    out = {}
    for p in points:
        if p["batch"] in out:
            raise InputError(f"{what}: batch {p['batch']} appears twice")
        out[p["batch"]] = p
    return out


def speedup_curve(ar: list[dict], sd: list[dict], drafter: list[dict] | None, k: int,
                  margin: float = 0.05, timing: str = "client") -> dict:
    """Rows per batch size present in both the SD and the no-SD series, plus the shape label."""
    ar_b, sd_b = _by_batch(ar, "no-SD series"), _by_batch(sd, "SD series")
    dr_b = _by_batch(drafter or [], "drafter series")
    rows = []
    for b in sorted(set(ar_b) & set(sd_b)):
        a, s = ar_b[b], sd_b[b]
        if "sd" not in s:
            raise InputError(f"SD series, batch {b}: no speculative-decoding metrics (was SD on?)")
        tpot_ar, tpot_sd = tpot(a, timing), tpot(s, timing)
        spd = tpot_ar / tpot_sd
        tau = s["sd"]["acceptance_length"]
        c = k * tpot(dr_b[b], timing) / tpot_ar if b in dr_b else float("nan")
        other = "engine" if timing == "client" else "client"
        try:
            spd_other = tpot(a, other) / tpot(s, other)
        except InputError:
            spd_other = float("nan")
        te_raw = te_from_sweep(tau, spd, c) if math.isfinite(c) else float("nan")
        lo, hi = te_interval(tau, k, (tpot_ar, tpot_se(a, timing)), (tpot_sd, tpot_se(s, timing)),
                             (tpot(dr_b[b], timing), tpot_se(dr_b[b], timing)) if b in dr_b
                             else (float("nan"), float("nan")))
        ok = math.isfinite(te_raw) and 0 < te_raw <= 1.0 and hi != float("inf")
        rows.append({"batch": b, "tpot_ar_ms": tpot_ar, "tpot_sd_ms": tpot_sd,
                     f"speedup_{other}": spd_other,
                     "tpot_ar_p99_ms": a["tpot_ms"]["p99"], "tpot_sd_p99_ms": s["tpot_ms"]["p99"],
                     "speedup": spd,
                     "tau": tau, "position_acceptance": s["sd"]["per_position_acceptance"],
                     "draft_cost": c,
                     "te_sweep": te_raw if ok else float("nan"), "te_sweep_raw": te_raw,
                     "te_sweep_low": lo, "te_sweep_high": hi,
                     "te_sweep_status": "ok" if ok else (
                         "no drafter series" if not math.isfinite(c) else "not identifiable here"),
                     "throughput_ar": a["output_throughput"],
                     "throughput_sd": s["output_throughput"]})
    if not rows:
        raise InputError("the SD and no-SD series share no batch size")
    shape = shape_label([r["batch"] for r in rows], [r["speedup"] for r in rows], margin)
    best = max(rows, key=lambda r: r["speedup"])
    return {"rows": rows, "shape": shape, "best_batch": best["batch"],
            "best_speedup": best["speedup"], "margin": margin, "timing": timing}
