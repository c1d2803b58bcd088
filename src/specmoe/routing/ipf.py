"""Maximum-entropy prediction of unique experts by iterative proportional fitting (docs/method.md,
"Maximum-entropy IPF").

For one expert, x_j in {0, 1} says whether window position j (0..K) selects it. We fit the maximum
entropy distribution over the 2^(K+1) patterns whose pair tables match
  P(x_i = 1, x_j = 1) = P11(|i - j|),  P(x_i = 1) = q,
with P11(d) = q ov(d) for uniform loads and q^2 + lambda(d) q (1 - q) for measured (skewed) ones,
starting from the uniform distribution and cycling over every pair's 2x2 table. Each expert is
fitted on its own (a compiled loop, experts in parallel).
Predicted unique experts = sum_e (1 - P_e(all zeros)).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numba
import numpy as np

from ..errors import InputError
from . import bootstrap
from .unique import check_nk

MAX_POSITIONS = 9  # K <= 8
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

    @property
    def unique(self) -> float:
        return float((1.0 - self.p_zero).sum())

    def batch_unique(self, batch: float) -> float:
        return float((1.0 - self.p_zero**batch).sum())


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
    p0 = float(res.p_zero[0])
    return {"unique": num_experts * (1 - p0**batch), "window": np.asarray(overlaps).shape[-1] + 1,
            "converged": res.converged, "infeasible": res.n_infeasible > 0,
            "iterations": res.iterations, "max_error": res.max_error, "n_clipped": res.n_clipped}


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
    per_layer = (1.0 - res.p_zero**batch).sum(axis=1)
    return {"unique": float(per_layer.mean()), "per_layer": per_layer.tolist(),
            "converged": res.converged, "iterations": res.iterations, "n_clipped": res.n_clipped,
            "n_unconverged": res.n_unconverged, "infeasible": res.n_infeasible > 0,
            "max_error": res.max_error}


def sequence_error_interval(num_experts: int, top_k: int, overlaps, predicted: float,
                            per_request: dict, n_boot: int | None = None,
                            seed: int | None = None, step: float = 1e-4) -> list[float]:
    """The interval (at bootstrap.LEVEL, over bootstrap.N_BOOT resamples unless given) of the
    uniform IPF's relative error, predicted / measured - 1, over
    requests (the independent units): the IPF's input overlaps and the measured unique experts
    per window are recomputed in each resample of requests (overlap.request_weights, the
    resamples of the overlaps' own intervals) from per_request (the overlap stage's pieces:
    sequence_sums and sequence_pairs [request, d], unique_sum and full_windows [request]).

    The prediction is linearised around `predicted` (its slope in each overlap by differences of
    predict_uniform over ov +- step, kept inside [0, 1]: one-sided at an overlap of 0 or 1): a
    resample moves the overlaps by a few hundredths, over which the fit is smooth, where 2,000
    fits would cost seconds per run. Where a fit of the slope does not hold its margins (it did
    not converge, or no distribution has them: overlaps of 1 at every distance moved by a step
    at one), there is no slope and the interval is [NaN, NaN]."""
    from .overlap import request_weights

    ov = np.asarray(overlaps, dtype=float)
    sums, pairs = (np.asarray(per_request[key], dtype=float)
                   for key in ("sequence_sums", "sequence_pairs"))
    u_sum, u_n = (np.asarray(per_request[key], dtype=float)
                  for key in ("unique_sum", "full_windows"))
    w = request_weights(u_sum.size, n_boot, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        ov_boot = (w @ sums) / ((w @ pairs) * top_k)   # [boot, d]
        measured = (w @ u_sum) / (w @ u_n)
    slope = np.empty(ov.size)
    for d in range(ov.size):
        ends = np.clip(ov[d] + np.array([-step, step]), 0.0, 1.0)
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
        err = (predicted + (ov_boot - ov) @ slope) / measured - 1
    lo, hi = np.nanpercentile(err, bootstrap.tails()) if np.isfinite(err).any() else (np.nan, np.nan)
    return [float(lo), float(hi)]
