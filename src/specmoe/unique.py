"""Unique experts touched by a verification window or a batch (SPEC.md, "Unique experts").

All functions take per-expert probabilities for one layer and return expected counts; average over
layers outside. An expert is unused by a batch of B independent sequences only if every sequence
leaves it unused, so unique_B = sum_e (1 - P_e(unused in one window)^B).
"""

from __future__ import annotations

import numpy as np

from .errors import InputError


def check_nk(num_experts: int, top_k: int) -> None:
    if top_k < 1 or num_experts < 1:
        raise InputError(f"k and N must be >= 1 (got k={top_k}, N={num_experts})")
    if top_k > num_experts:
        raise InputError(f"k={top_k} exceeds N={num_experts}")


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


def window_unique_table(used: np.ndarray, q: np.ndarray, num_experts: int, top_k: int,
                        k_draft: int, batch_sizes: list[int]) -> list[dict]:
    """Per batch size: unique experts of a verify step (B windows of K+1) and of a decode step (B
    tokens), empirical-window, independent-skewed and uniform; layer-averaged.

    used: [layer, e] fraction of windows that use e; q: [layer, e] load marginals.
    """
    w = k_draft + 1
    rows = []
    for b in batch_sizes:
        rows.append({
            "batch": int(b),
            "verify_empirical": float(np.mean([batch_unique(1.0 - u, b) for u in used])),
            "verify_independent": float(np.mean([independent_unique(x, w * b) for x in q])),
            "verify_uniform": uniform_unique(num_experts, top_k, w * b),
            "decode_independent": float(np.mean([independent_unique(x, b) for x in q])),
            "decode_uniform": uniform_unique(num_experts, top_k, b),
        })
    return rows
