"""A trained target against its matched untrained control (specmoe.routing.controls)."""

import dataclasses

import numpy as np
import pytest

from specmoe.routing import controls, overlap
from specmoe.routing.trace import Trace


def _with(tr: Trace, experts=None, **columns) -> Trace:
    return dataclasses.replace(tr, experts=tr.experts if experts is None else experts,
                               columns={**tr.columns, **columns}, meta={"run": {"model": "t"}})


def _shuffled_within_requests(tr: Trace, seed: int = 0) -> np.ndarray:
    """The trace's routing rows shuffled inside each request: the request's loads kept, any
    order along its sequence destroyed."""
    rng = np.random.default_rng(seed)
    req = tr.columns["request"]
    rows = np.arange(len(tr))
    for r in np.unique(req):
        at = np.flatnonzero(req == r)
        rows[at] = rng.permutation(at)
    return tr.experts[rows]


def test_the_same_routing_as_its_target_differs_by_exactly_nothing(small_trace):
    tr = _with(small_trace)
    c = controls.control_contrast(tr, _with(small_trace))
    assert c["matched"] and c["comparable"] and c["n_requests"] == 40
    for name, v in c["statistics"].items():
        assert v["difference"] == v["difference_low"] == v["difference_high"] == 0, name


def test_target_values_are_the_overlap_stages(small_trace):
    """The paired statistics of the target are the numbers the overlap stage reports."""
    tr = _with(small_trace)
    c = controls.control_contrast(tr, _with(small_trace, _shuffled_within_requests(tr)))
    _, _, seq = overlap.trace_sequence_stats(tr, overlap.SEQUENCE_DISTANCES)
    win = overlap.window_intervals(tr)
    s = c["statistics"]
    assert s["seq_excess"]["target"] == pytest.approx(seq["excess"])
    assert s["seq_decay"]["target"] == pytest.approx(seq["decay"])
    assert s["window_step1"]["target"] == pytest.approx(win["overlap"][0])
    assert s["window_decay_within_status"]["target"] == pytest.approx(win["decay_within_status"])


def test_order_along_the_sequence_separates_target_from_a_control_without_it(small_trace):
    """A control with each request's routing in random order (its loads kept) has no temporal
    overlap: the target's step-1 excess lies above it by an interval above 0, and the
    difference equals the two values' difference."""
    tr = _with(small_trace)
    c = controls.control_contrast(tr, _with(small_trace, _shuffled_within_requests(tr)))
    ex = c["statistics"]["seq_excess"]
    assert ex["difference_low"] > 0
    assert ex["difference"] == pytest.approx(ex["target"] - ex["control"])
    assert abs(ex["control"]) < ex["target"] / 3


def test_a_control_that_read_its_own_tokens_is_not_comparable(small_trace):
    tr = _with(small_trace)
    own = _with(small_trace, token_id=np.zeros(len(tr), np.int32))  # one token repeated
    c = controls.control_contrast(tr, own)
    assert not c["matched"] and not c["comparable"] and not c["statistics"]
    assert c["input_repeat_pct"] == 100 and c["why"].startswith("read its own tokens")


def test_a_control_whose_matched_inputs_loop_is_not_comparable(small_trace):
    """Matched, but the target's own committed tokens repeat: neither measures routing."""
    tok = np.full(len(small_trace), 7, np.int32)
    tr = _with(small_trace, token_id=tok)
    c = controls.control_contrast(tr, _with(small_trace, token_id=tok))
    assert c["matched"] and not c["comparable"] and "loop" in c["why"]


def test_input_repeat_share_counts_adjacent_committed_tokens_within_requests(small_trace):
    tr = _with(small_trace)
    rows, starts, lengths = overlap.committed_sequences(tr)
    tok = tr.columns["token_id"].copy()
    tok[rows] = np.arange(rows.size)  # all different ...
    second = rows[starts[lengths > 1] + 1]
    tok[second] = tok[rows[starts[lengths > 1]]]  # ... but each sequence's second = its first
    share = controls.input_repeat_share(_with(small_trace, token_id=tok))
    assert share == pytest.approx(second.size / (lengths - 1).sum())


def _partly_shuffled(tr: Trace, share: float, seed: int = 0) -> np.ndarray:
    """The trace's routing with `share` of each request's rows permuted among themselves: the
    same prompts and loads, a little less order along the sequence."""
    rng = np.random.default_rng(seed)
    req = tr.columns["request"]
    rows = np.arange(len(tr))
    for r in np.unique(req):
        at = np.flatnonzero(req == r)
        pick = rng.choice(at, max(2, int(share * at.size)), replace=False)
        rows[pick] = rng.permutation(pick)
    return tr.experts[rows]


def test_two_targets_temporal_shares_compare_paired_by_prompt(small_trace):
    """Two targets that read the same prompts, one with a little less order along its
    sequences: their shares' intervals overlap (compared apart, undecided), but paired by
    prompt (the same resamples of the same requests) the lead's interval lies above 0, and the
    lead's excess over the controls' lead (each request's routing in random order) is the lead
    less theirs."""
    from specmoe.report.prose import UNDECIDED, _share_order

    fine = _with(small_trace)
    coarse = _with(small_trace, _partly_shuffled(fine, 0.015))
    ctrl = [_with(small_trace, _shuffled_within_requests(fine, s)) for s in (1, 2)]
    cf, cc = controls.control_contrast(fine, ctrl[0]), controls.control_contrast(coarse, ctrl[1])
    res = controls.share_contrast(cf["share_boot"], cc["share_boot"])
    assert res["paired"] and res["lead_low"] > 0
    f, c = (x["statistics"]["seq_temporal_share"] for x in (cf, cc))
    assert res["lead"] == pytest.approx(f["target"] - c["target"], abs=1e-6)
    apart = [(0, s["target"], lo, hi) for s, (lo, hi) in (
        (f, _share_interval(fine)), (c, _share_interval(coarse)))]
    assert _share_order(*apart) == UNDECIDED
    assert res["excess"] == pytest.approx(res["lead"] - res["control_lead"], abs=1e-6)
    # requests that are other prompts: no pairing, no numbers
    other = dict(cc["share_boot"], prompt_ids=cc["share_boot"]["prompt_ids"][::-1])
    res = controls.share_contrast(cf["share_boot"], other)
    assert not res["paired"] and np.isnan(res["lead"]) and "same prompts" in res["why"]


def _share_interval(tr: Trace) -> tuple[float, float]:
    """The target's temporal-share interval alone, as the decomposition table gives it."""
    ov, total, ci = overlap.trace_sequence_stats(tr, overlap.SEQUENCE_DISTANCES)
    s = overlap.sequence_summary(ov, total, overlap.window_stats(tr), ci)
    return s["sequence_temporal_share_low"], s["sequence_temporal_share_high"]


def test_a_control_of_fewer_than_min_requests_has_no_interval():
    """The matched control's resamples are the overlap stage's (overlap.request_weights), floor
    included: below bootstrap.MIN_REQUESTS requests the differences keep their points but get no
    interval and with it no direction (4 requests gave finite intervals that excluded 0)."""
    from specmoe.routing import bootstrap
    from specmoe.routing.synth import SynthParams, generate

    tr = _with(generate(SynthParams(num_experts=32, top_k=4, num_layers=2, k_draft=3,
                                    stickiness=0.4, requests=bootstrap.MIN_REQUESTS - 1,
                                    steps=12, accept_prob=0.7, seed=1)))
    c = controls.control_contrast(tr, _with(tr, experts=_shuffled_within_requests(tr)))
    assert c["comparable"] and c["n_requests"] == bootstrap.MIN_REQUESTS - 1
    for name, v in c["statistics"].items():
        assert np.isfinite(v["difference"]), name
        assert np.isnan(v["difference_low"]) and np.isnan(v["difference_high"]), name


def test_a_control_draws_the_overlap_stages_resamples(small_trace):
    """One draw serves the overlap stage and its controls: the same seed gives the controls'
    resamples bit for bit what overlap.request_weights gives (the target's temporal share in each
    resample, recomputed here from those weights)."""
    tr = _with(small_trace)
    c = controls.control_contrast(tr, _with(small_trace), n_boot=50, seed=3)
    ids = np.unique(tr.columns["request"].astype(np.int64))
    w = np.vstack([np.ones(ids.size), overlap.request_weights(ids.size, 50, 3)])
    share = controls._statistics(tr, ids, w)[0]["seq_temporal_share"]
    assert c["share_boot"]["target"] == controls._rounded(share)
