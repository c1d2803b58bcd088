"""Maximum-entropy prediction of unique experts by iterative proportional fitting (docs/method.md,
"Maximum-entropy IPF").

For one expert, x_j in {0, 1} says whether window position j (0..K) selects it. We fit the maximum
entropy distribution over the 2^(K+1) patterns whose pair tables match
  P(x_i = 1, x_j = 1) = P11(|i - j|),  P(x_i = 1) = q,
with P11(d) = q ov(d) for uniform loads and q^2 + lambda(d) q (1 - q) for measured (skewed) ones,
starting from the uniform distribution and cycling over every pair's 2x2 table. Each expert is
fitted on its own (a compiled loop, experts in parallel).
Predicted unique experts = sum_e (1 - P_e(all zeros)) (unique.batch_unique, for B windows too).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numba
import numpy as np

from ..errors import InputError
from . import bootstrap
from .unique import MAX_POSITIONS, batch_unique, check_nk

# Margins within this of their targets are held (the fit converged). IPF runs on to `tol`
# (1e-10) where it can; near the boundary of what is feasible (overlaps of 0.95 and more) it
# converges slowly and stops at max_iter a few 1e-10 short, its unique experts exact to 4
# decimals: that is not a failure to fit.
MATCHED = 1e-8


@dataclass
class IPFResult:
    p_zero: np.ndarray      # [expert] P(all positions unused)
    converged: bool
    iterations: int
    max_error: float
    n_clipped: int          # pair tables whose target was infeasible and clipped
    n_unconverged: int = 0  # experts whose margins are still off by >= MATCHED
    n_infeasible: int = 0   # of those, experts whose margins no distribution has (feasible())
    dist: np.ndarray | None = None  # [expert, pattern] fitted distribution; bit j of a pattern = x_j


def _check_overlaps(ov: np.ndarray) -> np.ndarray:
    ov = np.asarray(ov, dtype=np.float64)
    if ov.ndim == 0 or ov.shape[-1] < 1:
        raise InputError("need at least one overlap value (step distance 1)")
    if ov.shape[-1] + 1 > MAX_POSITIONS:
        raise InputError(f"{ov.shape[-1]} overlaps means a window of {ov.shape[-1] + 1} positions; "
                         f"at most {MAX_POSITIONS} (K <= 8)")
    if np.any(~np.isfinite(ov)) or np.any(ov < 0) or np.any(ov > 1):
        raise InputError(f"overlaps must lie in [0, 1] (got {np.round(ov, 4).tolist()})")
    return ov


def fit(q: np.ndarray, overlaps: np.ndarray, tol: float = 1e-10, max_iter: int = 2000) -> IPFResult:
    """Fit one max-entropy pattern distribution per expert load q_e, with pair margins
    P11(d) = q_e * ov(d) (the study's form; right for uniform loads).

    overlaps: ov(d) for d = 1..K, shape (K,) shared by all experts or (experts, K) per expert.
    """
    ov = _check_overlaps(overlaps)
    q = _check_loads(q)
    ov = np.broadcast_to(ov, (q.size, ov.shape[-1]))
    return fit_pairs(q, q[:, None] * ov, tol, max_iter)


def _check_loads(q) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64).reshape(-1)
    if np.any(~np.isfinite(q)) or np.any(q < 0) or np.any(q > 1):
        raise InputError("expert loads q_e must lie in [0, 1]")
    return q


def fit_pairs(q: np.ndarray, p11: np.ndarray, tol: float = 1e-10,
              max_iter: int = 2000) -> IPFResult:
    """Fit one max-entropy pattern distribution per expert: one-way margins q_e, two-way margins
    P(x_i = 1, x_j = 1) = p11[e, |i - j| - 1]. Infeasible pair tables are clipped and counted."""
    q = _check_loads(q)
    p11_all = np.asarray(p11, dtype=np.float64).reshape(q.size, -1)
    _check_overlaps(np.zeros(p11_all.shape[1]))  # the window size
    positions = p11_all.shape[1] + 1
    patterns = (np.arange(2**positions)[:, None] >> np.arange(positions)[None, :]) & 1
    pairs = list(combinations(range(positions), 2))

    # Target 2x2 tables (cells 00, 01, 10, 11 indexed 2*x_i + x_j) per pair and expert, clipped
    # to what each expert's load allows
    lo, hi = pair_floor(q)[:, None], q[:, None]
    held = np.clip(p11_all, lo, hi)
    clipped = ((p11_all < lo - 1e-15) | (p11_all > hi + 1e-15))[q > 0]
    targets, cells = [], []
    n_clipped = sum(int(clipped[:, j - i - 1].sum()) for i, j in pairs)
    for i, j in pairs:
        p11 = held[:, j - i - 1]
        targets.append(np.stack([1 - 2 * q + p11, q - p11, q - p11, p11], axis=1))
        cells.append((2 * patterns[:, i] + patterns[:, j]).astype(np.int64))
    dist, iters, row_err = _fit_rows(np.stack(targets, axis=1), np.stack(cells), tol, max_iter)
    err = float(row_err.max()) if q.size else 0.0
    matched = max(tol, MATCHED)
    off = np.flatnonzero(row_err >= matched)
    keys = {r: (float(q[r]), *held[r].tolist()) for r in off}
    verdicts = {key: feasible(key[0], np.array(key[1:]))  # experts of the same margins: one LP
                for key in set(keys.values())}
    n_infeasible = sum(not verdicts[key] for key in keys.values())
    return IPFResult(p_zero=dist[:, 0], converged=bool(err < matched),
                     iterations=int(iters.max()) if q.size else 0, max_error=err,
                     n_clipped=n_clipped, n_unconverged=int(off.size),
                     n_infeasible=int(n_infeasible), dist=dist)


def feasible(q: float, p11: np.ndarray) -> bool:
    """Whether some distribution over one expert's window patterns has one-way margins q and pair
    margins p11[d - 1] at distance d (an exact linear program over the 2^(K+1) patterns). Where
    IPF stops short of its margins this tells margins that cannot hold together (ov(1) = 1 at
    both steps forces ov(2) = 1; overlaps of 0.1 throughout a window of 9 tokens with k = 2 of
    N = 8 give a negative variance of the expert's count) from slow convergence near the
    boundary."""
    from scipy.optimize import linprog

    p11 = np.asarray(p11, dtype=np.float64).reshape(-1)
    positions = p11.size + 1
    patterns = ((np.arange(2**positions)[:, None] >> np.arange(positions)[None, :]) & 1
                ).astype(np.float64)
    rows = [np.ones(len(patterns))] + [patterns[:, i] for i in range(positions)]
    rows += [patterns[:, i] * patterns[:, j] for i, j in combinations(range(positions), 2)]
    want = [1.0] + [float(q)] * positions + [float(p11[j - i - 1]) for i, j in
                                              combinations(range(positions), 2)]
    res = linprog(np.zeros(len(patterns)), A_eq=np.array(rows), b_eq=np.array(want),
                  bounds=(0, None), method="highs")
    return res.status == 0


@numba.njit(cache=True, parallel=True)
def _fit_rows(targets, cells, tol, max_iter):
    """IPF for each row (expert) on its own, in parallel: cycle over the pair tables, scaling the
    patterns of each cell by target / current mass, until every cell of every table is within tol
    (its error measured before the table's update) or max_iter cycles.

    targets[row, pair, cell]; cells[pair, pattern] = the cell (2 x_i + x_j) a pattern falls in.
    Returns the fitted distributions [row, pattern], cycles used and final error per row.
    """
    rows, n_pairs = targets.shape[0], targets.shape[1]
    n_patterns = cells.shape[1]
    dist = np.empty((rows, n_patterns))
    iters = np.zeros(rows, np.int64)
    errs = np.full(rows, np.inf)
    for r in numba.prange(rows):
        d = np.full(n_patterns, 1.0 / n_patterns)
        cur = np.zeros(4)
        factor = np.zeros(4)
        for it in range(1, max_iter + 1):
            err = 0.0
            for p in range(n_pairs):
                cur[:] = 0.0
                for x in range(n_patterns):
                    cur[cells[p, x]] += d[x]
                for c in range(4):
                    t = targets[r, p, c]
                    err = max(err, abs(cur[c] - t))
                    factor[c] = t / cur[c] if cur[c] > 0 else 0.0
                for x in range(n_patterns):
                    d[x] *= factor[cells[p, x]]
            iters[r] = it
            errs[r] = err
            if err < tol:
                break
        dist[r] = d
    return dist, iters, errs


def predict_uniform(num_experts: int, top_k: int, overlaps, batch: float = 1) -> dict:
    """Uniform IPF: every expert has q = k/N; returns unique experts for a batch of B windows."""
    check_nk(num_experts, top_k)
    res = fit(np.array([top_k / num_experts]), overlaps)
    # every expert alike: the one fitted expert's unused share, N times
    return {"unique": num_experts * float(batch_unique(res.p_zero, batch)),
            "window": np.asarray(overlaps).shape[-1] + 1, "converged": res.converged,
            "infeasible": res.n_infeasible > 0, "iterations": res.iterations,
            "max_error": res.max_error, "n_clipped": res.n_clipped}


def skewed_pairs(q: np.ndarray, overlaps: np.ndarray) -> np.ndarray:
    """Pair margins that stay feasible for every load: P11_e(d) = q_e^2 + lambda(d) q_e (1 - q_e),
    lambda(d) per layer such that sum_e P11_e(d) = k ov(d) (the expected intersection of two sets
    d apart). lambda = 0 is independence and 1 a token repeating its set; for uniform loads this
    is q ov(d), the study's form, which for a hot expert (q_e > ov(d)) falls below independence.
    Below independence (lambda < 0) a cold expert's P11 reaches its floor max(0, 2 q_e - 1):
    there it is held on the floor and lambda(d) solved (by bisection on [-1, 1], where every
    expert reaches its floor at -1) so that the held margins still sum to k ov(d); the
    closed form alone left ov(d) = 0.25 fitted as 0.258 with 49 tables clipped.
    q[layer, e], overlaps[layer, d-1] -> [layer, e, d-1]."""
    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    ov = _check_overlaps(np.atleast_2d(overlaps))
    k = q.sum(axis=1, keepdims=True)
    var = q * (1 - q)
    spread = var.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        lam = np.where(spread > 0, (k * ov - (q ** 2).sum(axis=1, keepdims=True)) / spread, 0.0)
    p11 = q[:, :, None] ** 2 + lam[:, None, :] * var[:, :, None]
    floor = pair_floor(q)[:, :, None]
    short = (p11 < floor).any(axis=1)  # [layer, d]: the closed form leaves some floor
    if short.any():
        held = lambda lm: np.clip(q[:, :, None] ** 2 + lm[:, None, :] * var[:, :, None],  # noqa
                                  floor, q[:, :, None]).sum(axis=1)
        target = k * ov
        lo, hi = np.full(ov.shape, -1.0), np.minimum(lam, 1.0)
        for _ in range(64):  # the held sum rises with lambda
            mid = (lo + hi) / 2
            below = held(mid) < target
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        lam = np.where(short, (lo + hi) / 2, lam)
        p11 = np.clip(q[:, :, None] ** 2 + lam[:, None, :] * var[:, :, None], floor,
                      q[:, :, None])
    return p11


def skewed_floor(q: np.ndarray) -> float:
    """The least overlap that loads q (one layer, summing to k) allow: an expert chosen with
    probability q_e > 1/2 is chosen by both of two tokens at least 2 q_e - 1 of the time, so
    ov >= sum_e max(0, 2 q_e - 1) / k (for uniform loads max(0, 2k - N) / k)."""
    q = np.asarray(q, dtype=np.float64).reshape(-1)
    return float(pair_floor(q).sum() / q.sum())


def pair_floor(q: np.ndarray) -> np.ndarray:
    """The least P(x_i = 1, x_j = 1) of an expert used with probability q at both positions:
    max(0, 2q - 1)."""
    return np.maximum(0.0, 2 * np.asarray(q, dtype=np.float64) - 1)


def fit_layers(q: np.ndarray, overlaps: np.ndarray) -> IPFResult:
    """Fit every expert of every layer at once: q[layer, e] with that layer's overlaps[layer, d-1],
    pair margins from skewed_pairs. The result's p_zero has shape [layer, e]; a layer and
    distance whose overlap its loads cannot reach counts each of its experts' tables clipped."""
    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    ov = np.atleast_2d(np.asarray(overlaps, dtype=np.float64))
    if ov.shape[0] != q.shape[0]:
        raise InputError(f"{q.shape[0]} layers of loads but {ov.shape[0]} of overlaps")
    p11 = skewed_pairs(q, ov)
    res = fit_pairs(q.reshape(-1), p11.reshape(q.size, -1))
    # a layer's overlap below what its loads allow (skewed_floor): every expert sits on its
    # floor and the margins still exceed k ov(d); each such table counts as clipped
    k = q.sum(axis=1, keepdims=True)
    unmet = np.abs(p11.sum(axis=1) - k * ov) > 1e-9 * np.maximum(k, 1.0)
    res.n_clipped += int(unmet.sum()) * q.shape[1]
    res.p_zero = res.p_zero.reshape(q.shape)
    return res


def predict_skewed(q: np.ndarray, overlaps: np.ndarray, batch: float = 1) -> dict:
    """Skewed IPF: q[layer, e] and overlaps[layer, d-1]; summed over experts, averaged over layers."""
    res = fit_layers(q, overlaps)
    per_layer = batch_unique(res.p_zero, batch)
    return {"unique": float(per_layer.mean()), "per_layer": per_layer.tolist(),
            "converged": res.converged, "iterations": res.iterations, "n_clipped": res.n_clipped,
            "n_unconverged": res.n_unconverged, "infeasible": res.n_infeasible > 0,
            "max_error": res.max_error}


def measured_resamples(per_request: dict, n_boot: int | None = None,
                       seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The request resamples [boot, request] (overlap.request_weights: those of the overlaps' own
    intervals) and the measured unique experts per full window in each, unique_sum / full_windows
    of per_request's requests."""
    from .overlap import request_weights

    u_sum, u_n = (np.asarray(per_request[key], dtype=float)
                  for key in ("unique_sum", "full_windows"))
    w = request_weights(u_sum.size, n_boot, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        return w, (w @ u_sum) / (w @ u_n)


def empirical_interval(measured: np.ndarray) -> list[float]:
    """The interval (at bootstrap.LEVEL) of the measured unique experts per window over the
    request resamples of measured_resamples: the denominator of every IPF error."""
    return _ends(measured)


def _ends(boot: np.ndarray) -> list[float]:
    lo, hi = np.nanpercentile(boot, bootstrap.tails()) if np.isfinite(boot).any() else (np.nan,
                                                                                        np.nan)
    return [float(lo), float(hi)]


def _ends_of(x: float, lo: float, hi: float, step: float) -> np.ndarray:
    """x +- step kept inside [lo, hi]: one-sided at an end."""
    return np.clip(x + np.array([-step, step]), lo, hi)


def uniform_error_interval(num_experts: int, top_k: int, overlaps, predicted: float, sums,
                           pairs, scale: float, w: np.ndarray, measured: np.ndarray,
                           step: float = 1e-4) -> list[float]:
    """The interval (at bootstrap.LEVEL) of a uniform IPF's relative error, predicted / measured
    - 1, over requests (the independent units): its input overlaps, (w @ sums) / ((w @ pairs) *
    scale) from per-request summed intersections and pair counts [request, d] (scale: k along
    the sequence, layers * k for sums over layers inside windows), and the measured unique
    experts per window are recomputed in each resample of requests (w, measured:
    measured_resamples).

    The prediction is linearised around `predicted` (its slope in each overlap by differences of
    predict_uniform over ov +- step, kept inside [0, 1]: one-sided at an overlap of 0 or 1): a
    resample moves the overlaps by a few hundredths, over which the fit is smooth, where 2,000
    fits would cost seconds per run. Where a fit of the slope does not hold its margins (it did
    not converge, or no distribution has them: overlaps of 1 at every distance moved by a step
    at one), there is no slope and the interval is [NaN, NaN]."""
    ov = np.asarray(overlaps, dtype=float)
    sums, pairs = np.asarray(sums, dtype=float), np.asarray(pairs, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ov_boot = (w @ sums) / ((w @ pairs) * scale)   # [boot, d]
    slope = np.empty(ov.size)
    for d in range(ov.size):
        ends = _ends_of(ov[d], 0.0, 1.0, step)
        unique = []
        for x in ends:
            moved = ov.copy()
            moved[d] = x
            f = predict_uniform(num_experts, top_k, moved)
            if not f["converged"] or f["infeasible"]:
                return [float("nan"), float("nan")]
            unique.append(f["unique"])
        slope[d] = (unique[1] - unique[0]) / (ends[1] - ends[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        return _ends((predicted + (ov_boot - ov) @ slope) / measured - 1)


def skewed_error_interval(top_k: int, q: np.ndarray, overlaps: np.ndarray, predicted: float,
                          sums, pairs, loads, tokens, w: np.ndarray, measured: np.ndarray,
                          step: float = 1e-4, chunk: int = 1 << 22) -> list[float]:
    """The interval (at bootstrap.LEVEL) of the skewed IPF's relative error over requests: each
    resample of requests (w, measured: measured_resamples) recomputes its inputs, each layer's
    overlaps inside windows (w @ sums) / ((w @ pairs) * k) from per-request intersections summed
    over windows [request, layer, d] and pair counts [request, d], and each layer's loads
    (w @ loads) / (w @ tokens) from per-request expert counts [request, layer, expert] and token
    counts [request] (overlap.request_loads), and from them the pair margins (skewed_pairs).

    The prediction is linearised in each expert's margins: every expert is fitted on its own, so
    one fit with every expert's load moved by +- step (and one per distance with every pair
    margin moved) gives each expert's slopes at once (2 (K + 1) fits, each difference kept
    inside what its expert's margins allow); a resample's change of the prediction is the
    layer mean of sum_e of the slopes times its change of margins. Where a fit of a slope does
    not hold its margins the interval is [NaN, NaN]."""
    q = np.atleast_2d(np.asarray(q, dtype=float))
    ov = np.atleast_2d(np.asarray(overlaps, dtype=float))
    n_layers, n_exp = q.shape
    p11 = skewed_pairs(q, ov)                                       # [layer, e, d]
    qf, pf = q.reshape(-1), p11.reshape(q.size, -1)
    floor = pair_floor(qf)

    def p_zero(qq, pp):
        res = fit_pairs(qq, pp)
        return res.p_zero if res.converged and not res.n_infeasible else None

    slopes = []
    # a load's step keeps its expert's pair margins feasible: p11 <= q and 2 q - 1 <= p11
    q_ends = np.stack([np.maximum(qf - step, np.minimum(pf.max(axis=1), qf)),
                       np.minimum(qf + step, np.maximum((1 + pf.min(axis=1)) / 2, qf))])
    q_ends = np.clip(q_ends, 0.0, 1.0)
    ends = [p_zero(q_ends[i], pf) for i in range(2)]
    if any(e is None for e in ends):
        return [float("nan"), float("nan")]
    with np.errstate(invalid="ignore", divide="ignore"):
        slopes.append(np.where(q_ends[1] > q_ends[0],
                               (ends[1] - ends[0]) / (q_ends[1] - q_ends[0]), 0.0))
    for d in range(pf.shape[1]):
        lo = np.clip(pf[:, d] - step, floor, qf)
        hi = np.clip(pf[:, d] + step, floor, qf)
        ends = []
        for x in (lo, hi):
            moved = pf.copy()
            moved[:, d] = x
            ends.append(p_zero(qf, moved))
        if any(e is None for e in ends):
            return [float("nan"), float("nan")]
        with np.errstate(invalid="ignore", divide="ignore"):
            slopes.append(np.where(hi > lo, (ends[1] - ends[0]) / (hi - lo), 0.0))
    g_q = slopes[0].reshape(n_layers, n_exp)
    g_p = np.stack(slopes[1:], axis=-1).reshape(n_layers, n_exp, -1)  # [layer, e, d]

    sums, pairs = np.asarray(sums, dtype=float), np.asarray(pairs, dtype=float)
    loads, tokens = np.asarray(loads, dtype=float), np.asarray(tokens, dtype=float)
    n_boot = w.shape[0]
    step_b = max(1, chunk // max(1, q.size * p11.shape[-1]))
    unique = np.empty(n_boot)
    for b0 in range(0, n_boot, step_b):
        wb = w[b0:b0 + step_b]
        with np.errstate(invalid="ignore", divide="ignore"):
            ov_b = (np.einsum("br,rld->bld", wb, sums)
                    / ((wb @ pairs)[:, None, :] * top_k))               # [boot, layer, d]
            q_b = np.einsum("br,rle->ble", wb, loads) / (wb @ tokens)[:, None, None]
        ok = np.isfinite(ov_b).all(axis=(1, 2)) & np.isfinite(q_b).all(axis=(1, 2))
        change = np.full(wb.shape[0], np.nan)
        if ok.any():
            qb, ob = q_b[ok], np.clip(ov_b[ok], 0.0, 1.0)
            p11_b = skewed_pairs(qb.reshape(-1, n_exp), ob.reshape(-1, ob.shape[-1])
                                 ).reshape(qb.shape[0], n_layers, n_exp, -1)
            d_p0 = (g_q * (qb - q)).sum(axis=2) + (g_p * (p11_b - p11)).sum(axis=(2, 3))
            change[ok] = -d_p0.mean(axis=1)
        unique[b0:b0 + step_b] = predicted + change
    with np.errstate(invalid="ignore", divide="ignore"):
        return _ends(unique / measured - 1)
