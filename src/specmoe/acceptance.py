"""Deconfounded acceptance statistics (docs/method.md, "Deconfounded acceptance").

Acceptance falls with draft position and so does overlap, so tokens are compared within the same
draft position only: consecutive overlap overlap(S(j-1), S(j)) (layer-averaged) of accepted drafts at j
against first-rejected drafts at j.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from .trace import ACCEPTED, FIRST_REJECTED, STATUS, Trace


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


def compare(acc: np.ndarray, rej: np.ndarray) -> dict:
    """Accepted vs first-rejected: means, delta, n, Cohen's d, Welch t p, Mann-Whitney U p, label."""
    acc, rej = np.asarray(acc, float), np.asarray(rej, float)
    out = {"accepted_overlap": float(acc.mean()) if acc.size else float("nan"),
           "first_rejected_overlap": float(rej.mean()) if rej.size else float("nan"),
           "n_accepted": int(acc.size), "n_first_rejected": int(rej.size)}
    out["delta"] = out["accepted_overlap"] - out["first_rejected_overlap"]
    d = cohens_d(acc, rej)
    out["cohens_d"] = d
    if acc.size >= 2 and rej.size >= 2 and (acc.var() > 0 or rej.var() > 0):
        out["p_value"] = float(stats.ttest_ind(acc, rej, equal_var=False).pvalue)
        out["p_mannwhitney"] = float(stats.mannwhitneyu(acc, rej, alternative="two-sided").pvalue)
    else:
        out["p_value"] = out["p_mannwhitney"] = float("nan")
    out["size"] = size_label(d)
    return out


def by_position(consec: np.ndarray, position: np.ndarray, status: np.ndarray,
                k_draft: int) -> list[dict]:
    rows = []
    for j in range(1, k_draft + 1):
        at = position == j
        rows.append({"draft_position": j,
                     **compare(consec[at & (status == ACCEPTED)],
                               consec[at & (status == FIRST_REJECTED)])})
    return rows


def anchor_table(anchor: np.ndarray, position: np.ndarray, status: np.ndarray,
                 k_draft: int) -> list[dict]:
    """overlap(S(0), S(j)) by draft position and status, with standard errors."""
    rows = []
    for j in range(1, k_draft + 1):
        for s in range(1, len(STATUS)):
            v = anchor[(position == j) & (status == s)]
            if v.size == 0:
                continue
            se = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")
            rows.append({"draft_position": j, "status": STATUS[s], "mean": float(v.mean()),
                         "se": se, "n": int(v.size)})
    return rows


def anchor_effects(anchor: np.ndarray, position: np.ndarray, status: np.ndarray,
                   k_draft: int) -> list[dict]:
    """Accepted vs first-rejected anchor overlap overlap(S(0), S(j)) per draft position j (the
    effect sizes that label the anchor-overlap figure)."""
    return by_position(anchor, position, status, k_draft)


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
    kd = trace.k_draft
    out = {"by_position": by_position(consec, pos, st, kd),
           "anchor": anchor_table(anchor, pos, st, kd),
           "anchor_effects": anchor_effects(anchor, pos, st, kd),
           "acceptance_length": _acceptance_length(trace)}
    if slice_column in trace.columns:
        labels = trace.columns[slice_column]
        slices, drops = {}, {}
        for name in sorted(set(labels.tolist())):
            m = labels == name
            slices[name] = by_position(consec[m], pos[m], st[m], kd)
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
