"""Synthetic routing traces with known structure.

The generator is the ground truth for testing the statistics and IPF, and it drives the model-free
predictions (target efficiency under uniform, skewed and temporally correlated routing).

The process runs along each request's token sequence, per layer l, as a Markov chain of top-k sets:
- Load skew: expert popularity g_e proportional to 1 / rank^skew (Zipf; skew 0 is uniform), ranks
  shuffled per layer.
- Topics: each request has a current topic, a log-affinity z_e ~ topic_spread * N(0, 1) per expert
  and layer. At every token the topic is replaced by a fresh one with probability topic_switch.
  Experts are drawn with weights g_e * exp(z_e): a topic makes its favoured experts come back for as
  long as it lasts, which is what keeps overlap above independence at long distances.
- Stickiness s_l: token t+1 keeps each of token t's experts independently with probability s_l; the
  free slots are filled by weighted sampling without replacement (Gumbel top-k) among the experts
  not kept (a dropped expert may be drawn again). Overlap at distance d is about
  s_l^d + (1 - s_l^d) R(d), where R(d), the overlap of fresh draws d tokens apart, falls from the
  topic's own overlap to the independence baseline as the topic is replaced: a fast decay to a
  slowly falling plateau, the shape of the study's curves.
- Verification windows: position 0 of a step is the last committed token; drafts 1..K continue the
  chain from it; a drafts are accepted, with probability accept_prob[j-1] + tie * (ov_j - c_j)
  (clipped to [0, 1]) for draft j (ov_j: layer-averaged overlap of positions j-1 and j), until the
  first rejection. The centre c_j is solved for on a pilot of the process's windows
  (acceptance_centres) so that, among the windows that reach draft j, it is accepted with
  probability accept_prob[j-1] on average: P(a >= j) is the product of accept_prob as without the
  tie, which only tilts acceptance towards windows that keep their experts. The accepted drafts
  are committed and the next step's position 0 (the target's own next token) continues the chain
  from the last accepted position. The committed sequence is therefore one chain, and rejected
  drafts are branches off it; but with a tie it is a selected one: its consecutive tokens are
  the drafts that won acceptance by keeping their experts, so its overlap at d = 1 lies above the
  process's (Qwen3-30B's fit at tie 3: 0.439 against 0.434, 400 requests x 48 steps; the window
  overlaps inside a step follow the process).

`fit_process` chooses skew, topic_spread and topic_switch (and takes stickiness as the published
step-1 overlap) so that the chain's overlap at d = 1..4 and its independence baseline match a
published curve (the study's Table 17); `fit_to` in the parameters does that for a study model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ..errors import InputError
from ..names import FIT_KEYS
from .trace import Trace, _experts_dtype, status_for


@dataclass
class SynthParams:
    num_experts: int = 128
    top_k: int = 8
    num_layers: int = 8
    k_draft: int = 3
    skew: float = 1.0
    stickiness: float | list[float] = 0.4
    topic_spread: float = 0.0
    topic_switch: float = 1.0
    fit_to: str | None = None
    requests: int = 32
    steps: int = 32
    accept_prob: float | list[float] = 0.7
    accept_overlap_tie: float = 0.0
    categories: list[str] = field(default_factory=lambda: ["synthetic"])
    vocab_size: int = 32000
    seed: int = 0

    def validate(self) -> None:
        """Every value one the generator can use, else an InputError that names it: a NaN or an
        infinity passed every comparison below (skew=nan was validated, then the trace failed in
        write_trace; accept_overlap_tie=nan rejected every draft), a vocabulary, seed or
        categories the generator cannot draw from failed with numpy's errors, and expert ids past
        uint16 wrapped."""
        for name in ("num_experts", "top_k", "num_layers", "k_draft", "requests", "steps",
                     "vocab_size", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise InputError(f"{name} must be an integer (got {v!r})")
        for name in ("skew", "topic_spread", "topic_switch", "accept_overlap_tie"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(v):
                raise InputError(f"{name} must be a finite number (got {v!r})")
        n, k = self.num_experts, self.top_k
        if k < 1 or n < 1:
            raise InputError(f"num_experts and top_k must be >= 1 (got {n}, {k})")
        if k > n:
            raise InputError(f"top_k={k} exceeds num_experts={n}")
        if n < 2 * k:
            raise InputError(f"the synthetic generator needs num_experts >= 2*top_k (got {n}, {k})")
        _experts_dtype(n)  # ids a trace can hold (a TraceError, itself an InputError)
        if not 1 <= self.k_draft <= 8:
            raise InputError(f"k_draft must be in 1..8 (got {self.k_draft})")
        for name in ("num_layers", "requests", "steps"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.skew < 0:
            raise InputError(f"skew must be >= 0 (got {self.skew})")
        if self.topic_spread < 0:
            raise InputError(f"topic_spread must be >= 0 (got {self.topic_spread})")
        if not 0.0 <= self.topic_switch <= 1.0:
            raise InputError(f"topic_switch must be in [0, 1] (got {self.topic_switch})")
        for s in self.layer_stickiness():
            if not 0.0 <= s <= 1.0:
                raise InputError(f"stickiness must be in [0, 1] (got {s})")
        for p in self.position_accept_prob():
            if not 0.0 <= p <= 1.0:
                raise InputError(f"accept_prob must be in [0, 1] (got {p})")
        if isinstance(self.categories, str) or not isinstance(self.categories, (list, tuple)) \
                or not all(isinstance(c, str) for c in self.categories):
            raise InputError(f"categories must be a list of names (got {self.categories!r})")
        if not self.categories:
            raise InputError("categories must not be empty")
        # token ids are drawn as int32 from 0..vocab_size-1; one token would be every token
        if not 2 <= self.vocab_size <= np.iinfo(np.int32).max + 1:
            raise InputError(f"vocab_size must be in 2..{np.iinfo(np.int32).max + 1} "
                             f"(got {self.vocab_size})")
        if self.seed < 0:
            raise InputError(f"seed must be >= 0 (got {self.seed})")

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
        both = sorted(set(FITTED) & set(d)) if d.get("fit_to") else []
        if both:
            raise InputError(f"fit_to={d['fit_to']} fits {', '.join(both)}: set them or fit_to, "
                             "not both")
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)

    def fitted(self) -> "SynthParams":
        """These parameters with the process fitted to the published curve of `fit_to` (itself if
        fit_to is not set): skew, stickiness, topic_spread and topic_switch come from the fit."""
        return self.with_fit(self.process_fit()) if self.fit_to else self

    def process_fit(self) -> dict:
        """The fit of the process to the published curve of `fit_to` (fit_process's result). It
        depends on fit_to, num_experts and top_k only (FIT_KEYS): rule synth_fit makes it once
        for every K of a model."""
        from ..sources import published

        if not self.fit_to:
            raise InputError("process_fit: no fit_to to fit the process to")
        pub = published.load("overlap_by_distance").set_index("model")
        if self.fit_to not in pub.index:
            raise InputError(f"fit_to: no published overlap curve for {self.fit_to!r} "
                             f"(known: {', '.join(pub.index)})")
        self.check_granularity()
        row = pub.loc[self.fit_to]
        fit = fit_process(self.num_experts, self.top_k,
                          [float(row[f"step{d}"]) for d in range(1, 5)], float(row["independent"]))
        return {**fit, **{k: getattr(self, k) for k in FIT_KEYS}}

    def with_fit(self, fit: dict) -> "SynthParams":
        """These parameters with a fit of the process (process_fit's result, as rule synth_fit
        wrote it): one made for another fit_to, N or k is refused in one line."""
        if not self.fit_to:
            raise InputError("a fit of the process was given, but this generator has no fit_to")
        other = {k: (fit.get(k), getattr(self, k)) for k in FIT_KEYS
                 if fit.get(k) != getattr(self, k)}
        if other:
            raise InputError("the fit of the process is of another generator: " + ", ".join(
                f"{k} {a!r} (this one: {b!r})" for k, (a, b) in other.items()))
        missing = [k for k in FITTED if not isinstance(fit.get(k), (int, float))]
        if missing:
            raise InputError(f"the fit of the process has no {', '.join(missing)}")
        # one stickiness for every layer: the published curve is a layer average
        return replace(self, fit_to=None, **{k: float(fit[k]) for k in FITTED})

    def check_granularity(self) -> None:
        """A published curve fits a generator of the study model's granularity N/k only: the
        overlap a token can share with its neighbours depends on how many of N experts it uses."""
        from ..cost.predictor import study_routing

        nk = study_routing(self.fit_to)
        if nk is not None and nk[1] * self.top_k != self.num_experts * nk[0]:
            raise InputError(f"fit_to {self.fit_to}: its curve is of {nk[0]} of {nk[1]} experts "
                             f"(N/k = {nk[1] / nk[0]:g}), this generator routes {self.top_k} of "
                             f"{self.num_experts} (N/k = {self.num_experts / self.top_k:g}); fit "
                             "a study model of the same granularity")


FITTED = ("skew", "stickiness", "topic_spread", "topic_switch")


def zipf_logw(num_experts: int, skew: float, rng: np.random.Generator) -> np.ndarray:
    """Log popularity of each expert, Zipf(skew) with the ranks shuffled, normalised, computed in
    log space: rank^-skew underflows to 0 past a skew of a few hundred, and experts of weight 0
    left fewer than k to draw (a token then routed to one expert twice)."""
    logw = rng.permutation(-skew * np.log(np.arange(1, num_experts + 1, dtype=np.float64)))
    return logw - np.logaddexp.reduce(logw)


def _weighted_topk(logw: np.ndarray, rng: np.random.Generator, k: int) -> np.ndarray:
    """k distinct experts per row of logw (rows, N), weighted without replacement, in descending
    key order; an expert whose log weight is -inf is never drawn."""
    with np.errstate(divide="ignore"):  # an exponential draw of exactly 0 gives key +inf: fine
        keys = logw - np.log(rng.standard_exponential(logw.shape))
    top = np.argpartition(-keys, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1)
    return np.take_along_axis(top, order, axis=1)


class _Chain:
    """The process of one layer for a batch of sequences: current top-k sets and topics."""

    def __init__(self, logg: np.ndarray, rows: int, k: int, stickiness: float, spread: float,
                 switch: float, rng: np.random.Generator):
        self.logg, self.s, self.spread, self.switch, self.rng = \
            logg, stickiness, spread, switch, rng
        self.topic = self._new_topics(rows)
        self.cur = _weighted_topk(self.logg + self.topic, rng, k)

    def _new_topics(self, rows: int) -> np.ndarray:
        if self.spread == 0:
            return np.zeros((rows, self.logg.size))
        return self.spread * self.rng.standard_normal((rows, self.logg.size))

    def step(self, cur: np.ndarray, topic: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The next token's sets and topics from the current ones (arrays are not changed)."""
        rows, k = cur.shape
        if self.switch > 0:
            new = self.rng.random(rows) < self.switch
            if new.any():
                topic = topic.copy()
                topic[new] = self._new_topics(int(new.sum()))
        keep = self.rng.random((rows, k)) < self.s
        # the free slots: weighted top-k among every expert not kept (a dropped one may return)
        kept_mask = np.zeros((rows, self.logg.size), bool)
        np.put_along_axis(kept_mask, cur.astype(np.int64), keep, axis=1)  # a set's ids are distinct
        cand = _weighted_topk(np.where(kept_mask, -np.inf, self.logg + topic), self.rng, k)
        n_keep = keep.sum(axis=1, keepdims=True)
        comb = np.concatenate([np.where(keep, cur, -1), cand], axis=1)
        valid = np.concatenate([keep, np.arange(k)[None, :] < (k - n_keep)], axis=1)
        order = np.argsort(~valid, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(comb, order, axis=1), topic


def generate(p: SynthParams) -> Trace:
    """Generate a trace of requests x steps windows of K+1 positions (all windows full)."""
    p = p.fitted()
    p.validate()
    rng = np.random.default_rng(p.seed)
    n, k, n_layers, kd = p.num_experts, p.top_k, p.num_layers, p.k_draft
    positions = kd + 1
    stick = p.layer_stickiness()
    chains = [_Chain(zipf_logw(n, p.skew, rng), p.requests, k, float(stick[layer]),
                     p.topic_spread, p.topic_switch, rng) for layer in range(n_layers)]
    dtype = _experts_dtype(n)
    centres = acceptance_centres(p) if p.accept_overlap_tie else None
    # windows in (request, step) order
    experts = np.empty((p.requests, p.steps, positions, n_layers, k), dtype=dtype)
    accepted = np.empty((p.requests, p.steps), np.int64)
    rows = np.arange(p.requests)
    for step in range(p.steps):
        topics = []
        for layer, ch in enumerate(chains):
            cur, topic = ch.cur, ch.topic
            experts[:, step, 0, layer] = cur
            branch = [topic]
            for j in range(1, positions):
                cur, topic = ch.step(cur, topic)
                experts[:, step, j, layer] = cur
                branch.append(topic)
            topics.append(branch)
        a = _draw_acceptance(p, experts[:, step], rng, centres)
        accepted[:, step] = a
        for layer, ch in enumerate(chains):
            # the committed sequence continues from the last accepted position
            last = experts[rows, step, a, layer].astype(np.int64)
            topic = np.stack(topics[layer])[a, rows]
            ch.cur, ch.topic = ch.step(last, topic)
    n_windows = p.requests * p.steps
    accepted = accepted.reshape(n_windows)
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


def _shared(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many experts two sets of the same shape (..., k) share, per set."""
    return (a[..., :, None] == b[..., None, :]).sum(axis=(-1, -2))


def acceptance_centres(p: SynthParams, rows: int = 4096, per_chain: int = 9,
                       seed: int = 0) -> np.ndarray:
    """The tie's centre c_j of each draft position j: among the windows that reach draft j, the
    mean of clip(accept_prob[j-1] + tie * (ov_j - c_j), 0, 1) is accept_prob[j-1]. Centred on
    the mean overlap instead, clipping near an acceptance of 1 lowered it (0.95 / 0.9 / 0.9 at
    tie 3 gave P(a >= j) 0.918 / 0.814 / 0.727 for 0.95 / 0.855 / 0.770). Solved by bisection
    over the `per_chain` windows of K + 1 consecutive tokens of each of `rows` chains per layer,
    drawn from a fixed seed, so each trace of a process is calibrated alike: P(a >= j) within
    about 0.002 of the product of accept_prob in the process's windows, and up to 0.004 below it
    in a trace, whose committed sequence the tie selects (four layers of Qwen3-30B's fit,
    accept_prob 0.8 / 0.7 / 0.65, tie 3)."""
    rng = np.random.default_rng(seed)
    kd, tie = p.k_draft, p.accept_overlap_tie
    length = kd + per_chain
    chains = (_chain_sets(p.num_experts, p.top_k, p.skew, float(s), p.topic_spread,
                          p.topic_switch, rows, length, rng) for s in p.layer_stickiness())
    ov = np.mean([_shared(sets[:-1], sets[1:]) for sets in chains], axis=0) / p.top_k
    windows = np.stack([ov[t:t + kd] for t in range(per_chain)], axis=1).reshape(kd, -1)
    reach, centres = np.ones(windows.shape[1]), np.empty(kd)
    for j, (base, ovj) in enumerate(zip(p.position_accept_prob(), windows)):
        def accept(shift):  # shift = tie * c_j, which raises acceptance as it falls
            return np.clip(base + tie * ovj - shift, 0.0, 1.0)
        lo, hi = -1.0 - abs(tie), 1.0 + abs(tie)  # lo: every draft accepted; hi: none
        for _ in range(64):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if reach @ accept(mid) > base * reach.sum() else (lo, mid)
        reach = reach * accept((lo + hi) / 2)
        centres[j] = (lo + hi) / 2 / tie
    return centres


def _draw_acceptance(p: SynthParams, windows: np.ndarray, rng: np.random.Generator,
                     centres: np.ndarray | None) -> np.ndarray:
    """Accepted-draft count of each request's window (windows: requests, K+1, layers, k);
    optionally tied to consecutive overlap, centred on `centres` (acceptance_centres)."""
    rows, positions = windows.shape[:2]
    probs = np.broadcast_to(p.position_accept_prob(), (rows, positions - 1)).copy()
    if p.accept_overlap_tie:
        ov = _shared(windows[:, :-1], windows[:, 1:]).mean(axis=-1) / p.top_k
        probs += p.accept_overlap_tie * (ov - centres)
    ok = rng.random(probs.shape) < np.clip(probs, 0.0, 1.0)
    return np.cumprod(ok, axis=1).sum(axis=1)


# --- fitting the process to a published curve ------------------------------------------------------

def _chain_sets(num_experts: int, top_k: int, skew: float, stickiness: float, spread: float,
                switch: float, rows: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """The top-k sets of `rows` chains of `length` tokens of one layer: (length, rows, k)."""
    ch = _Chain(zipf_logw(num_experts, skew, rng), rows, top_k, stickiness, spread, switch, rng)
    seq = [ch.cur]
    cur, topic = ch.cur, ch.topic
    for _ in range(length - 1):
        cur, topic = ch.step(cur, topic)
        seq.append(cur)
    return np.stack(seq)


def uniform_truth(num_experts: int, top_k: int, stickiness: float) -> dict[str, float]:
    """The true independence baseline, step-1 overlap along the committed sequence, its excess
    and temporal share of the process with uniform loads (skew 0), no topics (topic_spread 0)
    and no tie of acceptance to overlap: the baseline is k/N, and each adjacent pair of
    committed tokens is one step of the chain, which keeps m ~ Binomial(k, s) of the k experts
    and draws the k - m free slots uniformly from the N - m not kept (each dropped expert among
    them with probability (k - m) / (N - m)). What the statistics' coverage is checked against."""
    from scipy.stats import binom

    n, k = num_experts, top_k
    m = np.arange(k + 1)
    step1 = float((binom.pmf(m, k, stickiness) * (m + (k - m) ** 2 / (n - m))).sum() / k)
    ind = k / n
    return {"independent": ind, "step1": step1, "excess": step1 - ind,
            "temporal_share": (step1 - ind) / step1}


def chain_curve(num_experts: int, top_k: int, skew: float, stickiness: float, spread: float,
                switch: float, distances: int = 4, rows: int = 256, length: int = 24,
                seed: int = 0) -> tuple[np.ndarray, float]:
    """Overlap at d = 1..distances and the independence baseline of `rows` chains of `length`
    tokens of one layer, drawn from a fixed seed (common random numbers for fitting)."""
    seq = _chain_sets(num_experts, top_k, skew, stickiness, spread, switch, rows, length,
                      np.random.default_rng(seed))
    onehot = np.zeros((length, rows, num_experts), np.float32)
    for t, sets in enumerate(seq):
        np.put_along_axis(onehot[t], sets, 1.0, axis=1)
    ov = np.array([(onehot[:-d] * onehot[d:]).sum(axis=2).mean() / top_k
                   for d in range(1, distances + 1)])
    q = onehot.mean(axis=(0, 1))
    return ov, float((q ** 2).sum() / top_k)


def fit_process(num_experts: int, top_k: int, overlaps, independent: float,
                seed: int = 0) -> dict:
    """Parameters of the process whose chain matches a published overlap curve (d = 1, 2, ...)
    and independence baseline: skew, stickiness, topic_spread and topic_switch minimise the summed
    squared error of the overlaps and of the independence baseline, by Nelder-Mead from three
    starts over one fixed draw (so the fit is deterministic). Returns them with the fitted curve."""
    from scipy.optimize import minimize

    ov = np.asarray(overlaps, dtype=np.float64)
    if ov.ndim != 1 or ov.size < 2 or not np.all((ov >= 0) & (ov <= 1)):
        raise InputError(f"a published curve needs overlaps in [0, 1] at d = 1, 2, ... (got {ov})")
    if not 0 <= independent <= 1:
        raise InputError(f"independence baseline must lie in [0, 1] (got {independent})")

    def unpack(x):
        sig = 1 / (1 + np.exp(-x[[1, 3]]))
        return {"skew": float(abs(x[0])), "stickiness": float(sig[0]),
                "topic_spread": float(abs(x[2])), "topic_switch": float(sig[1])}

    def curve(par):
        return chain_curve(num_experts, top_k, par["skew"], par["stickiness"],
                           par["topic_spread"], par["topic_switch"], ov.size, seed=seed)

    def loss(x):
        got, ind = curve(unpack(x))
        return float(((got - ov) ** 2).sum() + (ind - independent) ** 2)

    best = None
    # starts: mild skew and topics; strong skew with weaker topics; strong both (the fit has
    # local minima where topics mask the skew that the independence baseline asks for)
    for x0 in ([0.5, -1.0, 1.5, -2.5], [1.5, -1.5, 1.0, -2.5], [2.5, -1.5, 1.5, -3.0]):
        res = minimize(loss, np.array(x0), method="Nelder-Mead",
                       options={"xatol": 1e-3, "fatol": 1e-8, "maxiter": 400})
        if best is None or res.fun < best.fun:
            best = res
    par = unpack(best.x)
    got, ind = curve(par)
    return {**par, "fitted_overlaps": got.tolist(), "fitted_independent": ind,
            "target_overlaps": ov.tolist(), "target_independent": float(independent)}
