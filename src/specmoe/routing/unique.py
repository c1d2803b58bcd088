"""Unique experts touched by a verification window or a batch (docs/method.md, "Unique experts").

All functions take per-expert probabilities for one layer and return expected counts; average over
layers outside. An expert is unused by a batch of B independent sequences only if every sequence
leaves it unused, so unique_B = sum_e (1 - P_e(unused in one window)^B).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError

# the most positions a verification window has (K + 1, K <= 8): the IPF's patterns of a window
# (2^(K+1) per expert) and the trace's K (trace.Trace.validate) are bounded here, where both read it
MAX_POSITIONS = 9


def check_nk(num_experts: int, top_k: int) -> None:
    if top_k < 1 or num_experts < 1:
        raise InputError(f"k and N must be >= 1 (got k={top_k}, N={num_experts})")
    if top_k > num_experts:
        raise InputError(f"k={top_k} exceeds N={num_experts}")


def check_overlaps(num_experts: int, top_k: int, overlaps) -> None:
    """Overlaps that k-of-N routing allows: two tokens' sets of k experts among N share at least
    max(0, 2k - N) of them, so ov(d) >= max(0, 2k - N) / k (k = N forces ov = 1)."""
    low = max(0, 2 * top_k - num_experts) / top_k
    for d, ov in enumerate(overlaps, 1):
        if ov < low - 1e-12:
            raise InputError(
                f"overlap {ov:g} at distance {d} is impossible with k = {top_k} of N = "
                f"{num_experts}: two tokens share at least 2k - N = {2 * top_k - num_experts} "
                f"experts, so ov >= {low:.4g}")


def uniform_unique(num_experts: int, top_k: int, tokens: float) -> float:
    """The prior uniform i.i.d. model: N (1 - (1 - k/N)^t) experts for t tokens."""
    check_nk(num_experts, top_k)
    return float(num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens))


def independent_unique(q: np.ndarray, tokens: float) -> float:
    """sum_e (1 - (1 - q_e)^t): skewed loads, tokens independent."""
    q = np.asarray(q, dtype=np.float64)
    return float((1.0 - (1.0 - q) ** tokens).sum())


def batch_unique(p_unused: np.ndarray, batch: float) -> np.ndarray:
    """sum_e (1 - P_e(unused in one window)^B) for B independent sequences (p_unused [..., e])."""
    p = np.asarray(p_unused, dtype=np.float64)
    return (1.0 - p**batch).sum(axis=-1)


def jackknife_bias(use: np.ndarray, windows: np.ndarray, batch: float) -> np.ndarray:
    """[layer] the leave-one-request-out jackknife's estimate of the bias of the empirical unique
    experts at batch B, (g - 1) (mean_r U_(-r) - U) over the g requests with a full window (use:
    [request, layer, e] how many of its full windows use e; windows: its full windows). U is
    convex in each expert's usage, so the plug-in estimate falls short on a small sample; a
    request's windows share its routing, so the request is the unit left out. NaN with fewer than
    two requests (no estimate)."""
    has = windows > 0
    use, windows = use[has], windows[has].astype(np.float64)
    if windows.size < 2:
        return np.full(use.shape[1], np.nan)
    total, n = use.sum(axis=0), windows.sum()
    loo = batch_unique(1.0 - (total - use) / (n - windows)[:, None, None], batch)
    return (windows.size - 1) * (loo.mean(axis=0) - batch_unique(1.0 - total / n, batch))


SAMPLE_TOLERANCE = 0.02  # sampling may move an empirical estimate by at most this share


def window_unique_table(used: np.ndarray, q: np.ndarray, num_experts: int, top_k: int,
                        k_draft: int, batch_sizes: list[int],
                        by_request: tuple[np.ndarray, np.ndarray] | None = None) -> list[dict]:
    """Per batch size: unique experts of a verify step (B windows of K+1) and of a decode step (B
    tokens), empirical-window, independent-skewed and uniform; layer-averaged.

    used: [layer, e] fraction of the sample's full windows that use e; q: [layer, e] load
    marginals; by_request: the sample by request (overlap.request_unique's [request, layer, e]
    windows using e and full windows), for how far sampling moves the empirical estimate. That
    estimate counts an expert never seen in the sample as unused; the experts seen in exactly one
    window (Q1 of n) estimate the usage that the sample missed (Good-Turing: Q1/n per window), so
    unseen experts add at most B Q1/n at batch B. It is also biased low, being convex in each
    expert's usage (jackknife_bias estimates by how much). A cell is marked unreliable when
    |bias| plus that bound exceeds SAMPLE_TOLERANCE of the estimate in a layer, or the sample
    holds fewer than B windows; `windows_needed` is the sample that would meet it (both shrink
    as 1/n).
    """
    w = k_draft + 1
    used = np.asarray(used, dtype=np.float64)
    if by_request is not None:
        use, windows = by_request
        n_windows = int(windows.sum())
        if n_windows and not np.allclose(use.sum(axis=0) / n_windows, used):
            raise InputError("window_unique_table: the sample by request is not the one of `used`")
        counts = np.rint(used * n_windows)
        q1 = (counts == 1).sum(axis=1)                # per layer
        unseen = (counts == 0).sum(axis=1)
    rows = []
    for b in batch_sizes:
        per_layer = batch_unique(1.0 - used, b)
        row = {
            "batch": int(b),
            "verify_empirical": float(per_layer.mean()),
            "verify_independent": float(np.mean([independent_unique(x, w * b) for x in q])),
            "verify_uniform": uniform_unique(num_experts, top_k, w * b),
            "decode_independent": float(np.mean([independent_unique(x, b) for x in q])),
            "decode_uniform": uniform_unique(num_experts, top_k, b),
        }
        if by_request is not None:
            missing = np.minimum(unseen, b * q1 / max(n_windows, 1))
            bias = jackknife_bias(use, windows, b)
            limit = SAMPLE_TOLERANCE * np.maximum(per_layer, 1e-12)
            off = missing + np.abs(bias)                # NaN (unreliable) without a bias
            known = b * q1 + np.nan_to_num(np.abs(bias)) * n_windows
            needed = np.where(known > 0, np.ceil(known / limit), b)
            row.update(
                verify_empirical_missing=float(missing.mean()),
                verify_empirical_bias=float(bias.mean()),
                verify_empirical_reliable=bool((off <= limit).all() and n_windows >= b),
                windows_needed=int(max(needed.max(), b)))
        rows.append(row)
    return rows
