"""A trained target against its matched untrained control: the same statistics of the two traces
and their difference, with a paired bootstrap over requests.

The matched control's trace holds its target's windows token for token (specmoe.stages.traces.
teacher_forced_inputs): request r of one is request r of the other, read from the same prompt
and committed tokens. Each resample draws requests once and weighs both traces' requests alike,
so the difference's interval carries the pairing (what the prompts share cancels). A control whose
inputs are not its target's (it decoded its own tokens), or whose inputs loop (adjacent committed
tokens repeating the previous one: overlap along a loop measures the loop), is not comparable and
gets no difference.
"""

from __future__ import annotations

import numpy as np

from . import bootstrap
from .overlap import (SEQUENCE_DISTANCES, _percentiles, _sequence_sums, _status_pair_pass,
                      _window_pair_pass, baseline_resamples, bounded_basic_interval,
                      committed_sequences, request_loads, request_weights, status_contrast)
from .trace import ACCEPTED, COMMITTED, Trace

# A control's inputs degenerate where more than this share of adjacent committed tokens repeat
# the previous token (the untrained controls' own output: about 99%; the trained targets': 0.1-
# 0.2% in the default run).
DEGENERATE = 0.10
# Each statistic of the findings table that a control can show too (name -> what it is).
STATISTICS = {
    "seq_excess": "step 1 along the committed sequence minus the pooled independence baseline",
    "seq_decay": "overlap along the committed sequence at d = 1 minus at d = "
                 f"{SEQUENCE_DISTANCES}",
    "seq_temporal_share": "(step 1 along the sequence - independence) / step 1",
    "window_step1": "overlap of adjacent positions inside windows",
    "window_decay_within_status": "overlap(1) - overlap(2) inside windows, pairs of one "
                                  "acceptance status",
}
# The statistics measured against the independence baseline: their points against the
# bias-corrected baseline, their intervals basic ones of the plug-in's resamples
# (overlap.bounded_basic_interval); the others' percentile intervals.
AGAINST_BASELINE = ("seq_excess", "seq_temporal_share")
KEYS = ("request", "step", "position", "token_id")


def input_repeat_share(trace: Trace) -> float:
    """The share of adjacent committed tokens (one request's committed sequence) that repeat the
    previous token: how much the inputs loop."""
    rows, starts, lengths = committed_sequences(trace)
    tok = trace.columns["token_id"][rows].astype(np.int64)
    same = tok[1:] == tok[:-1]
    inside = np.ones(rows.size, bool)
    inside[starts] = False  # a sequence's first token has no previous one
    adjacent = inside[1:]
    return float(same[adjacent].mean()) if adjacent.any() else float("nan")


def matched(target: Trace, control: Trace) -> bool:
    """Does the control's trace hold its target's windows token for token?"""
    return len(target) == len(control) and all(
        k in target.columns and k in control.columns
        and np.array_equal(target.columns[k], control.columns[k]) for k in KEYS)


def _statistics(tr: Trace, ids: np.ndarray,
                w: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Each statistic of STATISTICS at the weights w [resample, request] over requests `ids`
    (a row of ones: the plug-in estimate itself), those of AGAINST_BASELINE against each row's
    plug-in independence baseline; and each statistic's point as the overlap stage reports it
    (those of AGAINST_BASELINE against the bias-corrected baseline, the others the plug-in)."""
    k, scale = tr.top_k, float(tr.num_layers * tr.top_k)
    out = {}
    rows, starts, lengths = committed_sequences(tr)
    sums, pairs = _sequence_sums(tr.experts[rows], starts, lengths, tr.num_experts,
                                 SEQUENCE_DISTANCES)
    at = np.searchsorted(ids, tr.columns["request"][rows[starts]].astype(np.int64))
    per_seq = np.zeros((ids.size, SEQUENCE_DISTANCES))
    seq_pairs = np.zeros((ids.size, SEQUENCE_DISTANCES))
    np.add.at(per_seq, at, sums.mean(axis=1))
    np.add.at(seq_pairs, at, pairs)
    req_ids, loads, tokens = request_loads(tr)
    if not np.array_equal(req_ids, ids):
        raise ValueError("the traces' requests differ")
    corrected, _, ind = baseline_resamples(w, loads, tokens, k)
    with np.errstate(invalid="ignore", divide="ignore"):
        seq = (w @ per_seq) / (w @ seq_pairs * k)
        out["seq_excess"] = seq[:, 0] - ind
        out["seq_decay"] = seq[:, 0] - seq[:, -1]
        out["seq_temporal_share"] = (seq[:, 0] - ind) / seq[:, 0]
        step1 = per_seq[:, 0].sum() / (seq_pairs[:, 0].sum() * k)
        points = {"seq_excess": float(step1 - corrected),
                  "seq_temporal_share": float((step1 - corrected) / step1)}
    wstarts, wlengths = tr.windows()
    unit = np.searchsorted(ids, tr.columns["request"][wstarts].astype(np.int64))
    experts = np.ascontiguousarray(tr.experts)
    wsums = _window_pair_pass(experts, wstarts, wlengths, tr.num_experts, tr.k_draft)[:, 0]
    wpairs = np.clip(wlengths - 1, 0, None)
    s1 = np.bincount(unit, weights=wsums, minlength=ids.size)
    p1 = np.bincount(unit, weights=wpairs, minlength=ids.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["window_step1"] = (w @ s1) / ((w @ p1) * scale)
    if tr.k_draft >= 2:
        st = tr.columns["status"]
        cls = (~((st == COMMITTED) | (st == ACCEPTED))).astype(np.int8)
        st_sums, st_pairs = _status_pair_pass(experts, wstarts, wlengths, tr.num_experts, cls, 2)

        def per_request(x):
            x = x.reshape(x.shape[0], -1).astype(np.float64)
            return np.stack([np.bincount(unit, weights=x[:, c], minlength=ids.size)
                             for c in range(x.shape[1])], axis=1)

        out["window_decay_within_status"] = status_contrast(
            w @ per_request(st_sums), w @ per_request(st_pairs), scale)
    return out, {name: points.get(name, float(v[0])) for name, v in out.items()}


def _difference(name: str, ours: np.ndarray, theirs: np.ndarray, point: float, n: int,
                ranges: tuple[tuple[float, float], tuple[float, float]] | None = None) -> dict:
    """Statistic `name`'s difference ours - theirs (each: the plug-in estimate, then its
    resamples, paired) beside its point `point` (the reported values' difference): the basic
    interval of the plug-in difference for a statistic of AGAINST_BASELINE, held within what the
    difference can be where `ranges` gives each statistic's range (ours, theirs), else the
    percentile interval, each widened about `point` for the n requests resampled
    (bootstrap.widen). Below bootstrap.MIN_REQUESTS requests the resamples are NaN: no
    interval."""
    diff = ours - theirs
    if name not in AGAINST_BASELINE:
        lo, hi = _percentiles(diff[1:], point, n)
        return {"difference": point, "difference_low": float(lo), "difference_high": float(hi),
                "difference_clipped": False}
    (a_lo, a_hi), (b_lo, b_hi) = ranges or ((-np.inf, np.inf), (-np.inf, np.inf))
    lo, hi, clipped = bounded_basic_interval(float(diff[0]), diff[1:], a_lo - b_hi, a_hi - b_lo,
                                             n=n, point=point)
    return {"difference": point, "difference_low": lo, "difference_high": hi,
            "difference_clipped": clipped}


def _excess_range(tr: Trace) -> tuple[float, float]:
    """What the excess over independence can be: step 1 in [0, 1], the baseline in [k/N, 1]
    (overlap.sequence_intervals holds its interval there too)."""
    return -1.0, 1.0 - tr.top_k / tr.num_experts


def control_contrast(target: Trace, control: Trace, n_boot: int | None = None,
                     seed: int | None = None) -> dict:
    """The matched control against its target: whether it is matched and comparable, its
    inputs' repeat share, and for each statistic the target's value, the control's and their
    difference (target - control) with an interval from a paired bootstrap over requests (at
    bootstrap.LEVEL; no interval below bootstrap.MIN_REQUESTS requests): basic for the
    statistics of AGAINST_BASELINE (`difference_clipped`: an end passed what the difference can
    be and is shown at that bound), percentile for the others."""
    is_matched = matched(target, control)
    repeat = input_repeat_share(control)
    out = {"target": (target.meta.get("run") or {}).get("model"), "matched": is_matched,
           "input_repeat_pct": 100 * repeat, "n_requests": 0, "statistics": {}}
    ids = np.unique(target.columns["request"].astype(np.int64))
    g = ids.size
    seed = bootstrap.BOOT_SEED if seed is None else seed
    # the estimate's row of ones over the overlap stage's resamples (request_weights: one draw,
    # and below bootstrap.MIN_REQUESTS requests NaN weights: no interval, no direction)
    w = np.vstack([np.ones(g), request_weights(g, n_boot, seed)])
    ours, our_points = _statistics(target, ids, w)
    # the target's temporal share (plug-in) in each resample, by prompt, and its point: another
    # target that read the same prompts as its requests draws the same resamples (same seed,
    # same requests), so two targets (and their controls) compare paired by prompt
    # (share_contrast)
    out["share_boot"] = {"prompt_ids": prompts_of(target, ids), "seed": seed,
                         "target": _rounded(ours["seq_temporal_share"]),
                         "target_point": our_points["seq_temporal_share"], "control": None,
                         "control_point": None}
    if not is_matched:
        out.update(comparable=False, why=f"read its own tokens, not its target's "
                                         f"({100 * repeat:.0f}% of adjacent committed tokens "
                                         "repeat the previous one)")
        return out
    if not repeat <= DEGENERATE:
        out.update(comparable=False, why=f"read its target's tokens, which loop: "
                                         f"{100 * repeat:.0f}% of adjacent committed tokens "
                                         "repeat the previous one")
        return out
    theirs, their_points = _statistics(control, ids, w)
    out["share_boot"].update(control=_rounded(theirs["seq_temporal_share"]),
                             control_point=their_points["seq_temporal_share"])
    ranges = {"seq_excess": (_excess_range(target), _excess_range(control))}
    for name in ours:
        point = our_points[name] - their_points[name]
        out["statistics"][name] = {"target": our_points[name], "control": their_points[name],
                                   **_difference(name, ours[name], theirs[name], point, g,
                                                 ranges.get(name))}
    out.update(comparable=True, why="", n_requests=int(g), level=bootstrap.LEVEL)
    return out


def prompts_of(tr: Trace, ids: np.ndarray) -> list[str]:
    """The prompt id of each request (sorted request ids `ids`)."""
    req = tr.columns["request"].astype(np.int64)
    _, first = np.unique(req, return_index=True)
    if "prompt_id" not in tr.columns:
        return [str(i) for i in ids]
    return [str(p) for p in np.asarray(tr.columns["prompt_id"])[first]]


def _rounded(x: np.ndarray) -> list[float]:
    """A statistic's plug-in estimate (first) and resamples, to 6 digits (an overlap file stays
    small)."""
    return [round(float(v), 6) for v in x]


def share_contrast(fine: dict, coarse: dict) -> dict:
    """Two targets' temporal shares (and their matched controls') compared paired by prompt:
    `fine`, `coarse` are the share_boot entries of control_contrast. Where both read the same
    prompts as the same requests and drew the same resamples, resample b of one is resample b of
    the other, so the difference's interval (basic, of the plug-in shares: the shares are
    measured against the independence baseline, AGAINST_BASELINE) carries the pairing (what a
    prompt does to both cancels); its point is the reported shares' difference. Returns the
    target lead (fine minus coarse), the controls' lead and the lead's excess over the controls'
    (the part of it that learned routing makes), each with its 95% interval; `paired` False (and NaN) where the prompts or resamples differ, and the excess NaN
    where either control is not comparable."""
    nan = float("nan")
    out = {key: nan for key in ("lead", "lead_low", "lead_high", "control_lead",
                                "control_lead_low", "control_lead_high", "excess", "excess_low",
                                "excess_high")}
    same = (fine.get("prompt_ids") == coarse.get("prompt_ids") and fine.get("seed") ==
            coarse.get("seed") and len(fine["target"]) == len(coarse["target"]))
    out["paired"] = bool(same)
    if not same:
        out["why"] = "the two targets did not read the same prompts as the same requests"
        return out
    if fine.get("target_point") is None or coarse.get("target_point") is None:
        out.update(paired=False, why="an overlap file from before the shares' points were kept "
                                     "(its resamples are not the plug-in's): rerun its overlap")
        return out
    out["why"] = ""
    f, c = np.asarray(fine["target"]), np.asarray(coarse["target"])
    fp, cp = fine["target_point"], coarse["target_point"]
    parts = [("lead", f, c, fp - cp)]
    if fine.get("control") is not None and coarse.get("control") is not None:
        fc, cc = np.asarray(fine["control"]), np.asarray(coarse["control"])
        fcp, ccp = fine["control_point"], coarse["control_point"]
        parts += [("control_lead", fc, cc, fcp - ccp),
                  ("excess", f - fc, c - cc, (fp - fcp) - (cp - ccp))]
    for name, a, b, point in parts:
        d = _difference("seq_temporal_share", a, b, point, len(fine["prompt_ids"]))
        out.update({name: d["difference"], f"{name}_low": d["difference_low"],
                    f"{name}_high": d["difference_high"]})
    return out
