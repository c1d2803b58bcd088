"""Deconfounded acceptance statistics (docs/method.md, "Deconfounded acceptance").

Acceptance falls with draft position and so does overlap, so tokens are compared within the same
draft position only: consecutive overlap overlap(S(j-1), S(j)) (layer-averaged) of accepted drafts at j
against first-rejected drafts at j.

The independent unit is the request: the drafts of one request share its prompt, its topic and
its routing, so its tokens are not independent samples. Every interval and test that decides
something is clustered by request (a request-level bootstrap of the delta with a fixed seed, and
a cluster-robust t test); the token-level tests are kept beside them, named so, as the study
reports them.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from .trace import ACCEPTED, FIRST_REJECTED, STATUS, Trace

N_BOOT = 2000     # request-level bootstrap resamples
BOOT_SEED = 0     # fixed: the same trace gives the same intervals, bit for bit
LEVEL = 0.95


def size_label(d: float) -> str:
    a = abs(d)
    if not np.isfinite(a):
        return "n/a"
    return "negligible" if a < 0.2 else "small" if a < 0.5 else "medium" if a < 0.8 else "large"


def cohens_d(x: np.ndarray, y: np.ndarray) -> float:
    """(mean x - mean y) / pooled standard deviation (ddof 1)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    nx, ny = x.size, y.size
    if nx < 2 or ny < 2:
        return float("nan")
    pooled = ((nx - 1) * x.var(ddof=1) + (ny - 1) * y.var(ddof=1)) / (nx + ny - 2)
    if pooled == 0:
        return float("nan")
    return float((x.mean() - y.mean()) / np.sqrt(pooled))


def compare(acc: np.ndarray, rej: np.ndarray, acc_req: np.ndarray | None = None,
            rej_req: np.ndarray | None = None) -> dict:
    """Accepted vs first-rejected: means, delta, n, Cohen's d, the token-level Welch t and
    Mann-Whitney U p-values (tokens taken as independent, as the study reports them) and, given
    each token's request (acc_req, rej_req), the delta's 95% interval and p-value clustered by
    request (`by_request`: request_delta_interval, cluster_robust_p)."""
    acc, rej = np.asarray(acc, float), np.asarray(rej, float)
    out = {"accepted_overlap": float(acc.mean()) if acc.size else float("nan"),
           "first_rejected_overlap": float(rej.mean()) if rej.size else float("nan"),
           "n_accepted": int(acc.size), "n_first_rejected": int(rej.size)}
    out["delta"] = out["accepted_overlap"] - out["first_rejected_overlap"]
    d = cohens_d(acc, rej)
    out["cohens_d"] = d
    if acc.size >= 2 and rej.size >= 2 and (acc.var() > 0 or rej.var() > 0):
        welch = stats.ttest_ind(acc, rej, equal_var=False)
        lo, hi = welch.confidence_interval(LEVEL)
        out["delta_low_tokens"], out["delta_high_tokens"] = float(lo), float(hi)
        out["p_tokens_welch"] = float(welch.pvalue)
        out["p_tokens_mannwhitney"] = float(stats.mannwhitneyu(acc, rej,
                                                               alternative="two-sided").pvalue)
    else:
        out["delta_low_tokens"] = out["delta_high_tokens"] = float("nan")
        out["p_tokens_welch"] = out["p_tokens_mannwhitney"] = float("nan")
    if acc_req is not None and rej_req is not None:
        out.update(by_request(acc, rej, np.asarray(acc_req), np.asarray(rej_req)))
    out["size"] = size_label(d)
    return out


def _request_sums(values: np.ndarray, req: np.ndarray, index: np.ndarray,
                  n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per request (index into the sorted request ids): summed values and token counts."""
    pos = np.searchsorted(index, req)
    return (np.bincount(pos, weights=values, minlength=n),
            np.bincount(pos, minlength=n).astype(np.float64))


def by_request(acc: np.ndarray, rej: np.ndarray, acc_req: np.ndarray,
               rej_req: np.ndarray) -> dict:
    """The accepted-minus-rejected delta with the request as the unit: n_requests, its 95%
    percentile interval over N_BOOT resamples of whole requests (fixed seed; each resample keeps
    every token of a drawn request), and the p-value of a cluster-robust t test (the delta as
    the slope of overlap on 'accepted', CR1 sandwich variance clustered by request, t with
    requests - 1 degrees of freedom)."""
    nan = float("nan")
    out = {"n_requests": 0, "delta_low_by_request": nan, "delta_high_by_request": nan,
           "p_by_request": nan}
    ids = np.unique(np.concatenate([acc_req, rej_req]))
    g = ids.size
    out["n_requests"] = int(g)
    if acc.size < 2 or rej.size < 2 or g < 3:
        return out
    sa, na = _request_sums(acc, acc_req, ids, g)
    sr, nr = _request_sums(rej, rej_req, ids, g)
    rng = np.random.default_rng(BOOT_SEED)
    w = rng.multinomial(g, np.full(g, 1.0 / g), size=N_BOOT).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (w @ sa) / (w @ na) - (w @ sr) / (w @ nr)
    tail = 100 * (1 - LEVEL) / 2
    lo, hi = np.nanpercentile(boot, [tail, 100 - tail])
    out["delta_low_by_request"], out["delta_high_by_request"] = float(lo), float(hi)
    out["p_by_request"] = cluster_robust_p(acc, rej, acc_req, rej_req)
    return out


def cluster_robust_p(acc: np.ndarray, rej: np.ndarray, acc_req: np.ndarray,
                     rej_req: np.ndarray) -> float:
    """Two-sided p of 'delta = 0' from the regression y = a + b x (x = 1 for accepted tokens),
    whose b is the delta, with the CR1 cluster-robust variance (clusters: requests) and a t
    distribution with G - 1 degrees of freedom (G requests)."""
    y = np.concatenate([acc, rej])
    x = np.concatenate([np.ones(acc.size), np.zeros(rej.size)])
    ids, cl = np.unique(np.concatenate([acc_req, rej_req]), return_inverse=True)
    g, n = ids.size, y.size
    b = acc.mean() - rej.mean()
    u = y - np.where(x == 1, acc.mean(), rej.mean())
    xtx = np.array([[n, x.sum()], [x.sum(), x.sum()]], float)
    score = np.stack([np.bincount(cl, weights=u, minlength=g),
                      np.bincount(cl, weights=x * u, minlength=g)], axis=1)  # [cluster, 2]
    bread = np.linalg.inv(xtx)
    meat = score.T @ score * (g / (g - 1)) * ((n - 1) / (n - 2))
    se = float(np.sqrt((bread @ meat @ bread)[1, 1]))
    if not se > 0:
        return float("nan")
    return float(2 * stats.t.sf(abs(b) / se, g - 1))


def by_position(consec: np.ndarray, position: np.ndarray, status: np.ndarray,
                k_draft: int, request: np.ndarray | None = None) -> list[dict]:
    """compare() of accepted and first-rejected drafts at each draft position j = 1..K, clustered
    by `request` (each row's request id) where given."""
    rows = []
    for j in range(1, k_draft + 1):
        at = position == j
        acc, rej = at & (status == ACCEPTED), at & (status == FIRST_REJECTED)
        reqs = (request[acc], request[rej]) if request is not None else (None, None)
        rows.append({"draft_position": j, **compare(consec[acc], consec[rej], *reqs)})
    return rows


def clustered_se(values: np.ndarray, request: np.ndarray) -> float:
    """Standard error of a mean over tokens with the request as the unit (the ratio estimator's
    cluster-robust error: sqrt(G/(G-1) sum_g (s_g - mean n_g)^2) / n, G requests)."""
    ids, cl = np.unique(request, return_inverse=True)
    g, n = ids.size, values.size
    if g < 2:
        return float("nan")
    resid = np.bincount(cl, weights=values - values.mean(), minlength=g)
    return float(np.sqrt(g / (g - 1) * (resid ** 2).sum()) / n)


def anchor_table(anchor: np.ndarray, position: np.ndarray, status: np.ndarray,
                 k_draft: int, request: np.ndarray | None = None) -> list[dict]:
    """overlap(S(0), S(j)) by draft position and status, with standard errors (by request where
    `request` is given, and over tokens beside it)."""
    rows = []
    for j in range(1, k_draft + 1):
        for s in range(1, len(STATUS)):
            m = (position == j) & (status == s)
            v = anchor[m]
            if v.size == 0:
                continue
            se = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")
            row = {"draft_position": j, "status": STATUS[s], "mean": float(v.mean()),
                   "se_tokens": se, "n": int(v.size)}
            if request is not None:
                row["se_by_request"] = clustered_se(v, request[m])
                row["n_requests"] = int(np.unique(request[m]).size)
            rows.append(row)
    return rows


def anchor_effects(anchor: np.ndarray, position: np.ndarray, status: np.ndarray,
                   k_draft: int, request: np.ndarray | None = None) -> list[dict]:
    """Accepted vs first-rejected anchor overlap overlap(S(0), S(j)) per draft position j (the
    effect sizes that label the anchor-overlap figure)."""
    return by_position(anchor, position, status, k_draft, request)


def heldout_split(run_dataset: str | None, slice_datasets: dict[str, str],
                  heldout: frozenset[str] | set[str] = frozenset()) -> dict[str, list[str]]:
    """Held-out datasets of a run and their slices: a run of datasets "a+b+c" has main set a and
    held-out sets b and c, and a dataset named in `heldout` (the study's Spec-Bench categories and
    Aya languages, run on their own) is held out wherever it is run; each slice (category)
    belongs to the dataset its prompts came from."""
    parts = (run_dataset or "").split("+")
    held = [d for i, d in enumerate(parts) if d and (i > 0 or d in heldout)]
    return {d: sorted(c for c, ds in slice_datasets.items() if ds == d) for d in held}


def acceptance_stats(trace: Trace, consec: np.ndarray, anchor: np.ndarray,
                     slice_column: str = "category", heldout=frozenset()) -> dict:
    """All acceptance statistics of one trace: overall, anchor (with effect sizes), per slice, and
    the median accepted-minus-first-rejected delta across the held-out datasets' slices."""
    pos, st = trace.columns["position"], trace.columns["status"]
    req = trace.columns["request"]
    kd = trace.k_draft
    out = {"by_position": by_position(consec, pos, st, kd, req),
           "anchor": anchor_table(anchor, pos, st, kd, req),
           "anchor_effects": anchor_effects(anchor, pos, st, kd, req),
           "acceptance_length": _acceptance_length(trace)}
    if slice_column in trace.columns:
        labels = trace.columns[slice_column]
        slices, drops = {}, {}
        for name in sorted(set(labels.tolist())):
            m = labels == name
            slices[name] = by_position(consec[m], pos[m], st[m], kd, req[m])
            drops[name] = anchor_drop(anchor[m], pos[m], kd)
        out["slices"] = slices
        out["slice_anchor_drop"] = drops
        split = heldout_split((trace.meta.get("run") or {}).get("dataset"),
                              trace.meta.get("slice_datasets") or {}, set(heldout))
        out["heldout"] = {
            ds: {"slices": names, "median_delta_by_position": _median_delta(slices, names, kd),
                 "median_anchor_drop": _median([drops[n] for n in names if n in drops])}
            for ds, names in split.items()}
        held = [n for names in split.values() for n in names]
        out["median_delta_by_position"] = _median_delta(slices, held, kd)
    return out


def anchor_drop(anchor: np.ndarray, position: np.ndarray, k_draft: int) -> float:
    """How far the window drifts from its committed token: mean anchor overlap overlap(S(0), S(1))
    minus mean overlap(S(0), S(K)), over every drafted position whatever its status."""
    first, last = anchor[position == 1], anchor[position == k_draft]
    first, last = first[np.isfinite(first)], last[np.isfinite(last)]
    if not first.size or not last.size:
        return float("nan")
    return float(first.mean() - last.mean())


def _median(vals: list[float]) -> float:
    vals = [v for v in vals if np.isfinite(v)]
    return float(np.median(vals)) if vals else float("nan")


def _median_delta(slices: dict, names: list[str], kd: int) -> list[float]:
    """Median over the named slices of the per-position delta (NaN without slices)."""
    out = []
    for j in range(kd):
        vals = [slices[n][j]["delta"] for n in names if n in slices]
        vals = [v for v in vals if np.isfinite(v)]
        out.append(float(np.median(vals)) if vals else float("nan"))
    return out


def _acceptance_length(trace: Trace) -> dict:
    """tau as vLLM reports it: 1 + accepted drafts / steps that drafted (a step with no drafts,
    such as a request's last, is not a drafting step); per-position acceptance rates."""
    first = trace.columns["position"] == 0
    acc = trace.columns["accepted"][first].astype(float)
    nd = trace.columns.get("n_drafts")
    nd = nd[first] if nd is not None else np.full(acc.size, trace.k_draft)
    drafting = nd > 0
    rates = [float((acc[nd >= j] >= j).mean()) if (nd >= j).any() else float("nan")
             for j in range(1, trace.k_draft + 1)]
    tau = float(acc[drafting].sum() / drafting.sum() + 1) if drafting.any() else float("nan")
    return {"tau": tau, "steps": int(drafting.sum()), "steps_without_drafts": int((~drafting).sum()),
            "position_acceptance": rates}
