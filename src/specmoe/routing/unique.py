"""Unique experts touched by a verification window or a batch (docs/method.md, "Unique experts").

All functions take per-expert probabilities for one layer and return expected counts; average over
layers outside. An expert is unused by a batch of B independent sequences only if every sequence
leaves it unused, so unique_B = sum_e (1 - P_e(unused in one window)^B).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError


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


def batch_unique(p_unused: np.ndarray, batch: float) -> float:
    """sum_e (1 - P_e(unused in one window)^B) for B independent sequences."""
    p = np.asarray(p_unused, dtype=np.float64)
    return float((1.0 - p**batch).sum())


SAMPLE_TOLERANCE = 0.02  # unseen experts may add at most this share to an empirical estimate


def window_unique_table(used: np.ndarray, q: np.ndarray, num_experts: int, top_k: int,
                        k_draft: int, batch_sizes: list[int],
                        n_windows: int | None = None) -> list[dict]:
    """Per batch size: unique experts of a verify step (B windows of K+1) and of a decode step (B
    tokens), empirical-window, independent-skewed and uniform; layer-averaged.

    used: [layer, e] fraction of the n_windows sampled windows that use e; q: [layer, e] load
    marginals. The empirical estimate counts an expert never seen in the sample as unused; the
    experts seen in exactly one window (Q1) estimate the usage that the sample missed
    (Good-Turing: Q1/n per window), so unseen experts add at most B Q1/n to the estimate at batch
    B. A cell is marked unreliable when that bound exceeds SAMPLE_TOLERANCE of the estimate or
    the sample holds fewer than B windows; `windows_needed` is the sample that would meet it.
    """
    w = k_draft + 1
    used = np.asarray(used, dtype=np.float64)
    if n_windows:
        counts = np.rint(used * n_windows)
        q1 = (counts == 1).sum(axis=1)                # per layer
        unseen = (counts == 0).sum(axis=1)
    rows = []
    for b in batch_sizes:
        per_layer = np.array([batch_unique(1.0 - u, b) for u in used])
        row = {
            "batch": int(b),
            "verify_empirical": float(per_layer.mean()),
            "verify_independent": float(np.mean([independent_unique(x, w * b) for x in q])),
            "verify_uniform": uniform_unique(num_experts, top_k, w * b),
            "decode_independent": float(np.mean([independent_unique(x, b) for x in q])),
            "decode_uniform": uniform_unique(num_experts, top_k, b),
        }
        if n_windows:
            missing = np.minimum(unseen, b * q1 / n_windows)
            limit = SAMPLE_TOLERANCE * np.maximum(per_layer, 1e-12)
            needed = np.where(q1 > 0, np.ceil(b * q1 / limit), b)
            row.update(
                verify_empirical_missing=float(missing.mean()),
                verify_empirical_reliable=bool((missing <= limit).all() and n_windows >= b),
                windows_needed=int(max(needed.max(), b)))
        rows.append(row)
    return rows
