"""The per-request pieces of a hand-made overlap result, as the overlap stage writes them
(stages.analysis.overlap_stage's "per_request"): every request alike, each holding the result's
overlaps, loads and measured unique experts, so the IPF stage reads it as it reads a stage's."""

from __future__ import annotations

import numpy as np


def per_request(seq, window, q, k: int, empirical: float, requests: int = 10,
                pairs: float = 100.0, tokens: float = 100.0, windows: float = 30.0) -> dict:
    """seq: the overlap along the committed sequence [distance], its first K kept; window: each layer's overlap inside
    windows [layer, d]; q: each layer's loads [layer, expert]; empirical: the measured unique
    experts per window."""
    seq, window, q = (np.asarray(x, dtype=float) for x in (seq, window, q))
    window = np.atleast_2d(window)
    seq = seq[:window.shape[1]]  # the stage keeps the sequence's first K distances
    r = np.ones(requests)
    return {"request": list(range(requests)),
            "sequence_sums": np.outer(r, seq * k * pairs).tolist(),
            "sequence_pairs": np.full((requests, seq.size), pairs).tolist(),
            "unique_sum": (r * empirical * windows).tolist(), "full_windows": (r * windows).tolist(),
            "window_sums": (r[:, None, None] * window * k * pairs).tolist(),
            "window_pairs": np.full((requests, window.shape[1]), pairs).tolist(),
            "loads": (r[:, None, None] * np.atleast_2d(q) * tokens).tolist(),
            "tokens": (r * tokens).tolist()}
