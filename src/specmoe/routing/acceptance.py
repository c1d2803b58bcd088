"""Deconfounded acceptance statistics (docs/method.md, "Deconfounded acceptance").

Acceptance falls with draft position by construction and overlap may change with position too, so
tokens are compared within the same draft position only: consecutive overlap overlap(S(j-1), S(j))
(layer-averaged) of accepted drafts at j against first-rejected drafts at j.

The independent unit is the request: the drafts of one request share its prompt, its topic and
its routing, so its tokens are not independent samples. Every interval and test that decides
something is clustered by request (a request-level bootstrap of the delta and of Cohen's d with a
fixed seed, and a cluster-robust t test with the CR2 small-sample correction and Imbens-Kolesar
degrees of freedom, calibrated for few clusters); the token-level tests are kept beside them,
named so, as the study reports them. A row with fewer than bootstrap.MIN_REQUESTS requests in
either arm says "too few": no p-value and no size verdict; one with no draft in an arm says so
("none rejected": every draft at that position was accepted, as a synthetic generator whose
acceptance reaches 1 gives; "none accepted"). The p-values of one run's positions and slices
are Holm-corrected together (`p_holm`).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

from ..runs import dataset_parts
from . import bootstrap
from .overlap import _percentiles, bounded_basic_interval, request_weights
from .trace import ACCEPTED, FIRST_REJECTED, STATUS, Trace

# the bootstrap's resamples, seed and level and the floor of requests: bootstrap.N_BOOT,
# BOOT_SEED, LEVEL, MIN_REQUESTS (one place for every routing statistic)
TOO_FEW = "too few"
# an arm without a single draft: nothing to compare, and the label says which arm is empty
NONE_REJECTED, NONE_ACCEPTED = "none rejected", "none accepted"
# Rounding: an arm constant at a value without an exact binary form (an overlap of 7/12) has a
# computed variance of about eps^2 rather than 0, and d came out as 1e15 ("large", p = 0). A
# variance below this share of the arms' squared scale is rounding, not spread.
NO_SPREAD = 1e3 * np.finfo(float).eps
NO_SPREAD_LABEL = "no spread"  # each arm constant: d is undefined and nothing is tested


def spread_floor(*arms: np.ndarray) -> float:
    """The variance of `arms` (or of a mean or difference of their values) below which it is
    rounding, not spread (NO_SPREAD of their largest squared magnitude)."""
    scale = max((float(np.max(np.abs(a))) for a in arms if np.size(a)), default=0.0)
    return NO_SPREAD * scale * scale


def size_label(d: float) -> str:
    a = abs(d)
    if not np.isfinite(a):
        return "n/a"
    return "negligible" if a < 0.2 else "small" if a < 0.5 else "medium" if a < 0.8 else "large"


def size_range(low: float, high: float) -> str:
    """The size label of a d known only to lie in [low, high]: one label where the whole
    interval has it, else "<smallest> to <largest>" (an interval across 0.2 is neither
    negligible nor small)."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return "n/a"
    least = 0.0 if low <= 0 <= high else min(abs(low), abs(high))
    a, b = size_label(least), size_label(max(abs(low), abs(high)))
    return a if a == b else f"{a} to {b}"


def cohens_d(x: np.ndarray, y: np.ndarray) -> float:
    """(mean x - mean y) / pooled standard deviation (ddof 1)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    nx, ny = x.size, y.size
    if nx < 2 or ny < 2:
        return float("nan")
    pooled = ((nx - 1) * x.var(ddof=1) + (ny - 1) * y.var(ddof=1)) / (nx + ny - 2)
    if pooled <= spread_floor(x, y):  # neither arm spreads: d is undefined, not huge
        return float("nan")
    return float((x.mean() - y.mean()) / np.sqrt(pooled))


def compare(acc: np.ndarray, rej: np.ndarray, acc_req: np.ndarray | None = None,
            rej_req: np.ndarray | None = None) -> dict:
    """Accepted vs first-rejected: means, delta, n, Cohen's d, the token-level Welch t and
    Mann-Whitney U p-values (tokens taken as independent, as the study reports them) and, given
    each token's request (acc_req, rej_req), the delta's 95% interval and p-value clustered by
    request (`by_request`: the delta's and d's intervals, cluster_robust_p); with fewer than
    bootstrap.MIN_REQUESTS requests in either arm the row is "too few" (its p-values NaN, its
    size label "too few"), with each arm constant "no spread" (d undefined, nothing tested), and
    with no draft at all in an arm "none rejected" or "none accepted"."""
    acc, rej = np.asarray(acc, float), np.asarray(rej, float)
    out = {"accepted_overlap": float(acc.mean()) if acc.size else float("nan"),
           "first_rejected_overlap": float(rej.mean()) if rej.size else float("nan"),
           "n_accepted": int(acc.size), "n_first_rejected": int(rej.size)}
    out["delta"] = out["accepted_overlap"] - out["first_rejected_overlap"]
    d = cohens_d(acc, rej)
    out["cohens_d"] = d
    floor = spread_floor(acc, rej)
    flat = acc.size >= 2 and rej.size >= 2 and max(acc.var(), rej.var()) <= floor
    if acc.size >= 2 and rej.size >= 2 and (acc.var() > floor or rej.var() > floor):
        welch = stats.ttest_ind(acc, rej, equal_var=False)
        lo, hi = welch.confidence_interval(bootstrap.LEVEL)
        out["delta_low_tokens"], out["delta_high_tokens"] = float(lo), float(hi)
        out["p_tokens_welch"] = float(welch.pvalue)
        out["p_tokens_mannwhitney"] = float(stats.mannwhitneyu(acc, rej,
                                                               alternative="two-sided").pvalue)
    else:
        out["delta_low_tokens"] = out["delta_high_tokens"] = float("nan")
        out["p_tokens_welch"] = out["p_tokens_mannwhitney"] = float("nan")
    out["size"] = NO_SPREAD_LABEL if flat else size_label(d)
    if acc_req is not None and rej_req is not None:
        acc_req, rej_req = np.asarray(acc_req), np.asarray(rej_req)
        out["n_requests_accepted"] = int(np.unique(acc_req).size)
        out["n_requests_rejected"] = int(np.unique(rej_req).size)
        out.update(by_request(acc, rej, acc_req, rej_req))
        if np.isfinite(d) and np.isfinite(out["cohens_d_low"]):
            # the verdict of d's interval, not of its point (none where d itself is undefined)
            out["size"] = size_range(out["cohens_d_low"], out["cohens_d_high"])
        if min(out["n_requests_accepted"], out["n_requests_rejected"]) < bootstrap.MIN_REQUESTS:
            # a handful of requests decide nothing: no p-value, no verdict on d
            # nor a token-level interval (with 2 rejected tokens Welch's reached [-2.99, 3.02],
            # outside any difference of overlaps)
            for key in ("p_by_request", "p_tokens_welch", "p_tokens_mannwhitney",
                        "delta_low_tokens", "delta_high_tokens"):
                out[key] = float("nan")
            out["size"] = TOO_FEW
    if not (acc.size and rej.size):
        out["size"] = NONE_REJECTED if acc.size else NONE_ACCEPTED
    return out


def _request_sums(values: np.ndarray, req: np.ndarray, index: np.ndarray,
                  n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request (index into the sorted request ids): summed values, summed squares and token
    counts."""
    pos = np.searchsorted(index, req)
    return (np.bincount(pos, weights=values, minlength=n),
            np.bincount(pos, weights=values * values, minlength=n),
            np.bincount(pos, minlength=n).astype(np.float64))


def by_request(acc: np.ndarray, rej: np.ndarray, acc_req: np.ndarray,
               rej_req: np.ndarray) -> dict:
    """The accepted-minus-rejected delta with the request as the unit: n_requests, 95%
    percentile intervals of the delta and of Cohen's d over bootstrap.N_BOOT resamples of whole
    requests (overlap.request_weights: the overlap stage's draw, fixed seed; each resample keeps
    every token of a drawn request; no interval where the row's requests, both arms together, are
    fewer than bootstrap.MIN_REQUESTS), and the p-value of the cluster-robust test
    (cluster_robust_p)."""
    nan = float("nan")
    out = {"n_requests": 0, "delta_low_by_request": nan, "delta_high_by_request": nan,
           "cohens_d_low": nan, "cohens_d_high": nan, "p_by_request": nan}
    ids = np.unique(np.concatenate([acc_req, rej_req]))
    g = ids.size
    out["n_requests"] = int(g)
    if acc.size < 2 or rej.size < 2 or g < 3:
        return out
    sa, qa, na = _request_sums(acc, acc_req, ids, g)
    sr, qr, nr = _request_sums(rej, rej_req, ids, g)
    # the overlap stage's resamples (one draw; NaN below bootstrap.MIN_REQUESTS requests)
    w = request_weights(g)
    with np.errstate(invalid="ignore", divide="ignore"):
        (ma, va, ca), (mr, vr, cr) = ((w @ s_ / (w @ n_), w @ q_, w @ n_)
                                      for s_, q_, n_ in ((sa, qa, na), (sr, qr, nr)))
        boot = ma - mr
        # Cohen's d of each resample: the pooled variance from its summed squares (ddof 1)
        pooled = (va - ca * ma ** 2 + vr - cr * mr ** 2) / (ca + cr - 2)
        d_boot = np.where(pooled > spread_floor(acc, rej), boot / np.sqrt(pooled), np.nan)
    # NaN where no resample is finite (too few requests); widened about the plug-in for g
    lo, hi = _percentiles(boot, sa.sum() / na.sum() - sr.sum() / nr.sum(), g)
    out["delta_low_by_request"], out["delta_high_by_request"] = float(lo), float(hi)
    if np.isfinite(d_boot).any():
        dlo, dhi = _percentiles(d_boot, cohens_d(acc, rej), g)
        out["cohens_d_low"], out["cohens_d_high"] = float(dlo), float(dhi)
    out["p_by_request"] = cluster_robust_p(acc, rej, acc_req, rej_req)
    return out


def cluster_robust_p(acc: np.ndarray, rej: np.ndarray, acc_req: np.ndarray,
                     rej_req: np.ndarray) -> float:
    """Two-sided p of 'delta = 0' from the regression y = a + b x (x = 1 for accepted tokens),
    whose b is the delta, with the CR2 cluster-robust variance (Bell-McCaffrey; clusters:
    requests) and the Imbens-Kolesar degrees of freedom: the small-sample correction that keeps
    the test's size with few clusters in an arm, where CR1 with G - 1 degrees of freedom rejects
    far too often (simulated in cluster_test_size).

    In this design the hat matrix is 1/N_A on pairs of accepted tokens and 1/N_R on pairs of
    rejected ones, so CR2's (I - H_gg)^(-1/2) scales cluster g's summed accepted residuals by
    f_ga = (1 - m_ga/N_A)^(-1/2) (m_ga its accepted tokens) and its rejected ones likewise:
    V = sum_g (f_ga U_ga / N_A - f_gr U_gr / N_R)^2. The degrees of freedom are
    (tr B)^2 / tr(B^2) with B = G'G the matrix of the variance's quadratic form in the residuals
    (homoskedastic working model)."""
    ids, cl = np.unique(np.concatenate([acc_req, rej_req]), return_inverse=True)
    g = ids.size
    n_a, n_r = acc.size, rej.size
    ua, ur = acc - acc.mean(), rej - rej.mean()
    ca, cr = cl[:n_a], cl[n_a:]
    m_a = np.bincount(ca, minlength=g).astype(float)
    m_r = np.bincount(cr, minlength=g).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        f_a, f_r = 1 / np.sqrt(1 - m_a / n_a), 1 / np.sqrt(1 - m_r / n_r)
    if not (np.isfinite(f_a).all() and np.isfinite(f_r).all()):
        return float("nan")  # one request holds a whole arm: no cluster variance to estimate
    score = (f_a * np.bincount(ca, weights=ua, minlength=g) / n_a
             - f_r * np.bincount(cr, weights=ur, minlength=g) / n_r)
    se = float(np.sqrt((score ** 2).sum()))
    if not se * se > spread_floor(acc, rej):  # no spread in either arm: nothing to test
        return float("nan")
    p, q = m_a * f_a / n_a, m_r * f_r / n_r
    b = (np.diag(m_a * f_a ** 2 / n_a ** 2 + m_r * f_r ** 2 / n_r ** 2)
         - np.outer(p, p) / n_a - np.outer(q, q) / n_r)
    df = np.trace(b) ** 2 / (b * b).sum()
    return float(2 * stats.t.sf(abs(acc.mean() - rej.mean()) / se, df))


def holm(pvalues) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (NaN stays NaN, out of the family)."""
    p = np.asarray(pvalues, float)
    out = np.full(p.size, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    order = idx[np.argsort(p[idx], kind="stable")]
    m = order.size
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adj
    return out.tolist()


def cluster_test_size(requests_accepted: int = bootstrap.MIN_REQUESTS,
                      requests_rejected: int = bootstrap.MIN_REQUESTS, shared: int = 0,
                      trials: int = 2000, level: float = 0.05, seed: int = 0,
                      icc: float = 0.3) -> float:
    """The share of simulated null samples (no delta) in which cluster_robust_p rejects at
    `level`: `requests_accepted` requests with accepted tokens, `requests_rejected` with
    first-rejected ones, the first `shared` of them in both arms; a request's tokens share an
    offset (intra-request correlation `icc`), token counts vary from request to request (1-20
    accepted, 1-4 rejected: the unbalance of a draft position) and the token noise is skewed."""
    rng = np.random.default_rng(seed)
    g = requests_accepted + requests_rejected - shared
    hits = total = 0
    for _ in range(trials):
        offset = rng.normal(0.0, np.sqrt(icc), g)
        ra = np.repeat(np.arange(requests_accepted), rng.integers(1, 21, requests_accepted))
        rr_ids = np.arange(requests_accepted - shared, g)
        rr = np.repeat(rr_ids, rng.integers(1, 5, rr_ids.size))
        noise = np.sqrt(1 - icc) * (rng.exponential(1.0, ra.size + rr.size) - 1.0)
        acc, rej = offset[ra] + noise[:ra.size], offset[rr] + noise[ra.size:]
        p = cluster_robust_p(acc, rej, ra, rr)
        if np.isfinite(p):
            hits += p < level
            total += 1
    return hits / total


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
    cluster-robust error: sqrt(G/(G-1) sum_g (s_g - mean n_g)^2) / n, G requests); NaN below
    bootstrap.MIN_REQUESTS requests, where nothing is decided (3 requests gave 0.08-0.14)."""
    ids, cl = np.unique(request, return_inverse=True)
    g, n = ids.size, values.size
    if g < bootstrap.MIN_REQUESTS:
        return float("nan")
    resid = np.bincount(cl, weights=values - values.mean(), minlength=g)
    return float(np.sqrt(g / (g - 1) * (resid ** 2).sum()) / n)


def anchor_table(anchor: np.ndarray, position: np.ndarray, status: np.ndarray,
                 k_draft: int, request: np.ndarray | None = None) -> list[dict]:
    """overlap(S(0), S(j)) by draft position and status, with standard errors (by request where
    `request` is given, and over tokens beside it). Given `request`, a row of fewer than
    bootstrap.MIN_REQUESTS requests has neither (NaN; its `se_status` "too few", else "ok"): its
    tokens' error would stand for requests it does not have."""
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
                few = row["n_requests"] < bootstrap.MIN_REQUESTS
                if few:
                    row["se_tokens"] = float("nan")
                row["se_status"] = TOO_FEW if few else "ok"
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
    parts = dataset_parts(run_dataset or "")
    held = [d for i, d in enumerate(parts) if d and (i > 0 or d in heldout)]
    return {d: sorted(c for c, ds in slice_datasets.items() if ds == d) for d in held}


def acceptance_stats(trace: Trace, consec: np.ndarray, anchor: np.ndarray,
                     slice_column: str = "category", heldout=frozenset()) -> dict:
    """All acceptance statistics of one trace: overall, anchor (with effect sizes), per slice
    (with each slice's anchor drop, its interval by request and its requests), and per held-out
    dataset the medians across its slices with their intervals (heldout_medians). The
    clustered p-values of every position, overall, in each slice and of the anchor effects, are
    one family: each row's `p_holm` is its Holm-adjusted p."""
    pos, st = trace.columns["position"], trace.columns["status"]
    req = trace.columns["request"]
    kd = trace.k_draft
    out = {"by_position": by_position(consec, pos, st, kd, req),
           "anchor": anchor_table(anchor, pos, st, kd, req),
           "anchor_effects": anchor_effects(anchor, pos, st, kd, req),
           "acceptance_length": _acceptance_length(trace)}
    if slice_column in trace.columns:
        labels = trace.columns[slice_column]
        slices, drops, drop_ci, slice_req = {}, {}, {}, {}
        for name in sorted(set(labels.tolist())):
            m = labels == name
            slices[name] = by_position(consec[m], pos[m], st[m], kd, req[m])
            drops[name] = anchor_drop(anchor[m], pos[m], kd)
            ids = np.unique(req[m])
            slice_req[name] = int(ids.size)
            drop_ci[name] = [float(v) for v in _percentiles(_anchor_drop_boot(
                anchor, pos, req, m, kd, ids, request_weights(ids.size)), drops[name], ids.size)]
        out["slices"] = slices
        out["slice_anchor_drop"] = drops
        # its 95% interval over the slice's requests (NaN below bootstrap.MIN_REQUESTS)
        out["slice_anchor_drop_interval"] = drop_ci
        out["slice_requests"] = slice_req
        split = heldout_split((trace.meta.get("run") or {}).get("dataset"),
                              trace.meta.get("slice_datasets") or {}, set(heldout))
        cols = (consec, anchor, pos, st, req, labels)
        out["heldout"] = {ds: {"slices": names, **heldout_medians(cols, names, slices, drops,
                                                                  slice_req, kd)}
                          for ds, names in split.items()}
    family = (out["by_position"] + [r for rows in out.get("slices", {}).values() for r in rows]
              + out["anchor_effects"])
    for r, p in zip(family, holm([r.get("p_by_request", np.nan) for r in family])):
        r["p_holm"] = p
    return out


def anchor_drop(anchor: np.ndarray, position: np.ndarray, k_draft: int) -> float:
    """How far the window drifts from its committed token: mean anchor overlap overlap(S(0), S(1))
    minus mean overlap(S(0), S(K)), over every drafted position whatever its status."""
    first, last = anchor[position == 1], anchor[position == k_draft]
    first, last = first[np.isfinite(first)], last[np.isfinite(last)]
    if not first.size or not last.size:
        return float("nan")
    return float(first.mean() - last.mean())


# a held-out median with no slice left to take it over: why, beside the NaN
NO_SLICE = "no slice decides"
# a slice row that decides nothing, left out of its held-out dataset's median
UNDECIDED_ROWS = (TOO_FEW, NONE_REJECTED, NONE_ACCEPTED)


def _request_ratio(values: np.ndarray, rows: np.ndarray, req: np.ndarray, ids: np.ndarray,
                   w: np.ndarray) -> np.ndarray:
    """The mean of `values` over `rows` in each resample of requests `ids` (weights w, from
    overlap.request_weights): NaN where a resample draws none of its rows."""
    s, _, n = _request_sums(values[rows], req[rows], ids, ids.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w @ s) / (w @ n)


def _delta_boot(consec: np.ndarray, pos: np.ndarray, st: np.ndarray, req: np.ndarray,
                m: np.ndarray, j: int, ids: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The accepted-minus-first-rejected delta at draft position j of the rows `m` in each
    resample of requests `ids` (weights w)."""
    at = m & (pos == j)
    return (_request_ratio(consec, at & (st == ACCEPTED), req, ids, w)
            - _request_ratio(consec, at & (st == FIRST_REJECTED), req, ids, w))


def _anchor_drop_boot(anchor: np.ndarray, pos: np.ndarray, req: np.ndarray, m: np.ndarray,
                      kd: int, ids: np.ndarray, w: np.ndarray) -> np.ndarray:
    """anchor_drop of the rows `m` in each resample of requests `ids` (weights w)."""
    ok = m & np.isfinite(anchor)
    return (_request_ratio(anchor, ok & (pos == 1), req, ids, w)
            - _request_ratio(anchor, ok & (pos == kd), req, ids, w))


def _median_boot(boots: list[np.ndarray], point: float, n: int) -> tuple[float, float]:
    """The 95% percentile interval of the median over slices of their resamples (one array per
    slice, drawn from the same resampled n requests), widened about the median `point`
    (bootstrap.widen); NaN without a slice."""
    if not boots:
        return float("nan"), float("nan")
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample without any slice: NaN
        med = np.nanmedian(np.vstack(boots), axis=0)
    lo, hi = _percentiles(med, point, n)
    return float(lo), float(hi)


def _why_none(labels: list[str]) -> str:
    """Why a held-out median has no slice: the labels of the slices that decide nothing."""
    return f"{NO_SLICE} ({', '.join(sorted(set(labels)))})" if labels else f"{NO_SLICE} (none)"


def heldout_medians(cols: tuple, names: list[str], slices: dict, drops: dict,
                    slice_req: dict, kd: int) -> dict:
    """The medians across the named slices of a held-out dataset, each over the slices that
    decide it and with its 95% percentile interval over resamples of the slices' requests
    (overlap.request_weights, pooled over the slices: each resample's median of the slices'
    resampled values; NaN below bootstrap.MIN_REQUESTS requests): per draft position the
    accepted-minus-first-rejected delta over the slices whose row is neither "too few" nor
    "none ..." (a slice of two requests decides nothing, and the median of such slices printed
    deltas that nothing decided), and the anchor drop over the slices of at least
    bootstrap.MIN_REQUESTS requests. Where no slice is left the median is NaN and `*_why` says
    why (NO_SLICE and the slices' labels); the count of slices used is beside each median, and
    the requests resampled (median_requests).
    cols: (consec, anchor, position, status, request, slice label) of every row of the trace."""
    consec, anchor, pos, st, req, labels = cols
    names = [n for n in names if n in slices]
    m = np.isin(labels, names)
    ids = np.unique(req[m])
    w = request_weights(ids.size)
    out: dict = {k: [] for k in ("median_delta_by_position", "median_delta_low_by_position",
                           "median_delta_high_by_position", "median_delta_slices_by_position",
                           "median_delta_why_by_position")}
    for j in range(1, kd + 1):
        rows = {n: slices[n][j - 1] for n in names}
        keep = [n for n, r in rows.items()
                if r["size"] not in UNDECIDED_ROWS and np.isfinite(r["delta"])]
        point = float(np.median([rows[n]["delta"] for n in keep])) if keep else float("nan")
        lo, hi = _median_boot([_delta_boot(consec, pos, st, req, labels == n, j, ids, w)
                               for n in keep], point, ids.size)
        out["median_delta_by_position"].append(point)
        out["median_delta_low_by_position"].append(lo)
        out["median_delta_high_by_position"].append(hi)
        out["median_delta_slices_by_position"].append(len(keep))
        out["median_delta_why_by_position"].append(
            "" if keep else _why_none([rows[n]["size"] for n in names]))
    keep = [n for n in names
            if slice_req[n] >= bootstrap.MIN_REQUESTS and np.isfinite(drops[n])]
    point = float(np.median([drops[n] for n in keep])) if keep else float("nan")
    lo, hi = _median_boot([_anchor_drop_boot(anchor, pos, req, labels == n, kd, ids, w)
                           for n in keep], point, ids.size)
    out.update({
        "median_anchor_drop": point,
        "median_anchor_drop_low": lo, "median_anchor_drop_high": hi,
        "median_anchor_drop_slices": len(keep), "median_requests": int(ids.size),
        "median_anchor_drop_why": "" if keep else _why_none(
            [TOO_FEW if slice_req[n] < bootstrap.MIN_REQUESTS else "no anchor drop"
             for n in names])})
    return out


def _acceptance_length(trace: Trace) -> dict:
    """tau as vLLM reports it: 1 + accepted drafts / steps that drafted (a step with no drafts,
    such as a request's last, is not a drafting step); per-position acceptance rates; and tau's
    interval over requests (the independent units: a request's steps share its prompt), the
    basic interval of the ratio over bootstrap.N_BOOT resamples of whole requests, held inside
    [1, K+1] (`tau_clipped` says an end was moved); NaN below bootstrap.MIN_REQUESTS requests."""
    first = trace.columns["position"] == 0
    acc = trace.columns["accepted"][first].astype(float)
    nd = trace.columns.get("n_drafts")
    nd = nd[first] if nd is not None else np.full(acc.size, trace.k_draft)
    drafting = nd > 0
    rates = [float((acc[nd >= j] >= j).mean()) if (nd >= j).any() else float("nan")
             for j in range(1, trace.k_draft + 1)]
    tau = float(acc[drafting].sum() / drafting.sum() + 1) if drafting.any() else float("nan")
    _, req = np.unique(trace.columns["request"][first][drafting], return_inverse=True)
    acc_r = np.bincount(req, weights=acc[drafting])
    steps_r = np.bincount(req).astype(float)
    w = request_weights(steps_r.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = 1 + (w @ acc_r) / (w @ steps_r)
    lo, hi, clipped = bounded_basic_interval(tau, boot, 1.0, trace.k_draft + 1.0,
                                             n=steps_r.size)
    return {"tau": tau, "tau_low": lo, "tau_high": hi, "tau_clipped": clipped,
            "requests": int(steps_r.size), "steps": int(drafting.sum()),
            "steps_without_drafts": int((~drafting).sum()), "position_acceptance": rates}
