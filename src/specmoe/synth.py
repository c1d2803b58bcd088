"""Synthetic routing traces with known structure.

The generator is the ground truth for testing the statistics and IPF, and it drives the model-free
predictions (target efficiency under uniform, skewed and temporally correlated routing).

Model, per layer l:
- Load skew: expert popularity w_e proportional to 1 / rank^skew (Zipf; skew 0 is uniform), ranks
  shuffled per layer. Position 0 of a window draws k distinct experts by weighted sampling without
  replacement (Gumbel/exponential top-k).
- Temporal stickiness s_l: window position j keeps each of position j-1's experts independently with
  probability s_l; the free slots are filled by weighted sampling among experts that position j-1 did
  not use. Hence the expected step-1 overlap is exactly s_l (needs num_experts >= 2 top_k), and
  overlap at distance d decays towards the independence baseline.
- Acceptance: draft j is accepted with probability accept_prob[j-1] + tie * (ov_j - mean ov), where
  ov_j is the layer-averaged overlap of positions j-1 and j; the step stops at the first rejection.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .errors import InputError
from .trace import Trace, status_for


@dataclass
class SynthParams:
    num_experts: int = 128
    top_k: int = 8
    num_layers: int = 8
    k_draft: int = 3
    skew: float = 1.0
    stickiness: float | list[float] = 0.4
    requests: int = 32
    steps: int = 32
    accept_prob: float | list[float] = 0.7
    accept_overlap_tie: float = 0.0
    categories: list[str] = field(default_factory=lambda: ["synthetic"])
    vocab_size: int = 32000
    seed: int = 0

    def validate(self) -> None:
        n, k = self.num_experts, self.top_k
        if k < 1 or n < 1:
            raise InputError(f"num_experts and top_k must be >= 1 (got {n}, {k})")
        if k > n:
            raise InputError(f"top_k={k} exceeds num_experts={n}")
        if n < 2 * k:
            raise InputError(f"the synthetic generator needs num_experts >= 2*top_k (got {n}, {k})")
        if not 1 <= self.k_draft <= 8:
            raise InputError(f"k_draft must be in 1..8 (got {self.k_draft})")
        for name in ("num_layers", "requests", "steps"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.skew < 0:
            raise InputError(f"skew must be >= 0 (got {self.skew})")
        for s in self.layer_stickiness():
            if not 0.0 <= s <= 1.0:
                raise InputError(f"stickiness must be in [0, 1] (got {s})")
        for p in self.position_accept_prob():
            if not 0.0 <= p <= 1.0:
                raise InputError(f"accept_prob must be in [0, 1] (got {p})")
        if not self.categories:
            raise InputError("categories must not be empty")

    def layer_stickiness(self) -> np.ndarray:
        s = np.atleast_1d(np.asarray(self.stickiness, dtype=np.float64))
        if s.size == 1:
            return np.full(self.num_layers, float(s[0]))
        if s.size != self.num_layers:
            raise InputError(f"stickiness has {s.size} values for {self.num_layers} layers")
        return s

    def position_accept_prob(self) -> np.ndarray:
        p = np.atleast_1d(np.asarray(self.accept_prob, dtype=np.float64))
        if p.size == 1:
            return np.full(self.k_draft, float(p[0]))
        if p.size < self.k_draft:
            raise InputError(f"accept_prob has {p.size} values for K={self.k_draft}")
        return p[: self.k_draft]

    @classmethod
    def from_dict(cls, d: dict) -> "SynthParams":
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise InputError(f"unknown synthetic parameter(s): {', '.join(sorted(unknown))}")
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)


def load_weights(p: SynthParams, rng: np.random.Generator) -> np.ndarray:
    """(num_layers, num_experts) popularity weights, Zipf with ranks shuffled per layer."""
    ranks = np.arange(1, p.num_experts + 1, dtype=np.float64)
    base = ranks ** (-p.skew)
    w = np.stack([rng.permutation(base) for _ in range(p.num_layers)])
    return w / w.sum(axis=1, keepdims=True)


def _weighted_topk(logw: np.ndarray, rng: np.random.Generator, rows: int, k: int,
                   exclude: np.ndarray | None = None) -> np.ndarray:
    """k distinct experts per row, weighted without replacement, in descending key order."""
    n = logw.shape[0]
    with np.errstate(divide="ignore"):  # an exponential draw of exactly 0 gives key +inf: fine
        keys = logw[None, :] - np.log(rng.standard_exponential((rows, n), dtype=np.float32))
    if exclude is not None:
        np.put_along_axis(keys, exclude.astype(np.int64), -np.inf, axis=1)
    top = np.argpartition(-keys, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1)
    return np.take_along_axis(top, order, axis=1)


def generate(p: SynthParams, chunk: int = 16384) -> Trace:
    """Generate a trace of requests x steps windows of K+1 positions (all windows full)."""
    p.validate()
    rng = np.random.default_rng(p.seed)
    n, k, n_layers, kd = p.num_experts, p.top_k, p.num_layers, p.k_draft
    positions = kd + 1
    n_windows = p.requests * p.steps
    weights = load_weights(p, rng)
    logw = np.log(weights).astype(np.float32)
    stick = p.layer_stickiness()
    dtype = np.uint8 if n <= 256 else np.uint16
    experts = np.empty((n_windows, positions, n_layers, k), dtype=dtype)

    for lo in range(0, n_windows, chunk):
        hi = min(lo + chunk, n_windows)
        rows = hi - lo
        for layer in range(n_layers):
            cur = _weighted_topk(logw[layer], rng, rows, k)
            experts[lo:hi, 0, layer] = cur
            for j in range(1, positions):
                keep = rng.random((rows, k)) < stick[layer]
                cand = _weighted_topk(logw[layer], rng, rows, k, exclude=cur)
                n_keep = keep.sum(axis=1, keepdims=True)
                comb = np.concatenate([np.where(keep, cur, -1), cand], axis=1)
                valid = np.concatenate([keep, np.arange(k)[None, :] < (k - n_keep)], axis=1)
                order = np.argsort(~valid, axis=1, kind="stable")[:, :k]
                cur = np.take_along_axis(comb, order, axis=1)
                experts[lo:hi, j, layer] = cur

    accepted = _draw_acceptance(p, experts, rng)
    # Rows in (request, step, position) order.
    req = np.repeat(np.arange(p.requests), p.steps * positions)
    step = np.tile(np.repeat(np.arange(p.steps), positions), p.requests)
    pos = np.tile(np.arange(positions), n_windows)
    acc_rows = np.repeat(accepted, positions)
    cats = np.asarray(p.categories)[np.arange(p.requests) % len(p.categories)]
    columns = {
        "request": req.astype(np.int32),
        "prompt_id": np.array([f"synth-{r}" for r in range(p.requests)])[req],
        "category": cats[req],
        "k_draft": np.full(req.size, kd, np.int8),
        "step": step.astype(np.int32),
        "position": pos.astype(np.int8),
        "n_drafts": np.full(req.size, kd, np.int8),
        "accepted": acc_rows.astype(np.int8),
        "status": status_for(pos, acc_rows),
        "token_id": rng.integers(0, p.vocab_size, req.size, dtype=np.int32),
    }
    return Trace(experts=experts.reshape(n_windows * positions, n_layers, k), columns=columns,
                 num_experts=n, k_draft=kd, meta={"generator": p.to_dict()})


def _draw_acceptance(p: SynthParams, experts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Accepted-draft count per window; optionally tied to consecutive overlap."""
    n_windows, positions = experts.shape[:2]
    base = p.position_accept_prob()
    probs = np.broadcast_to(base, (n_windows, positions - 1)).copy()
    if p.accept_overlap_tie:
        ov = np.empty((n_windows, positions - 1))
        for j in range(1, positions):
            a, b = experts[:, j - 1], experts[:, j]
            inter = (a[..., :, None] == b[..., None, :]).sum(axis=(-1, -2))
            ov[:, j - 1] = inter.mean(axis=1) / p.top_k
        probs += p.accept_overlap_tie * (ov - ov.mean(axis=0, keepdims=True))
    ok = rng.random(probs.shape) < np.clip(probs, 0.0, 1.0)
    return np.cumprod(ok, axis=1).sum(axis=1)
