import numpy as np
import pandas as pd
import pytest
from scipy import stats

from specmoe.routing.acceptance import acceptance_stats, cohens_d, compare, size_label
from specmoe.routing.overlap import row_overlaps
from specmoe.routing.synth import SynthParams, generate

X = np.array([0.41, 0.45, 0.39, 0.50, 0.47, 0.44, 0.43, 0.52, 0.40, 0.46])
Y = np.array([0.38, 0.36, 0.42, 0.35, 0.40, 0.37, 0.39])


def test_cohens_d_by_hand():
    sp = np.sqrt(((10 - 1) * X.var(ddof=1) + (7 - 1) * Y.var(ddof=1)) / 15)
    assert abs(cohens_d(X, Y) - (X.mean() - Y.mean()) / sp) < 1e-12


def test_pvalues_match_scipy():
    out = compare(X, Y)
    assert out["p_tokens_welch"] == pytest.approx(stats.ttest_ind(X, Y, equal_var=False).pvalue)
    assert out["p_tokens_mannwhitney"] == pytest.approx(stats.mannwhitneyu(X, Y).pvalue)
    assert out["n_accepted"] == 10 and out["n_first_rejected"] == 7
    assert out["delta"] == pytest.approx(X.mean() - Y.mean())
    assert out["size"] == "large"


@pytest.mark.parametrize("d,label", [(0.1, "negligible"), (-0.3, "small"), (0.6, "medium"),
                                     (-1.2, "large"), (float("nan"), "n/a")])
def test_size_labels(d, label):
    assert size_label(d) == label


def test_too_few_samples_give_nan():
    out = compare(np.array([0.3]), Y)
    assert np.isnan(out["cohens_d"]) and np.isnan(out["p_tokens_welch"])


def test_tied_acceptance_shows_positive_delta(small_trace):
    consec, anchor = row_overlaps(small_trace)
    res = acceptance_stats(small_trace, consec, anchor)
    assert [r["draft_position"] for r in res["by_position"]] == [1, 2, 3]
    assert res["by_position"][0]["delta"] > 0 and res["by_position"][0]["cohens_d"] > 0.2
    assert set(res["slices"]) == {"a", "b"}
    statuses = {r["status"] for r in res["anchor"]}
    assert statuses == {"accepted", "first_rejected", "after_rejection"}
    assert 1 <= res["acceptance_length"]["tau"] <= 4


def _trace(windows, k=3):
    """A hand-made trace: windows of (n_drafts, accepted), one request."""
    from specmoe.routing.trace import Trace, status_for

    pos, nd, acc, step = [], [], [], []
    for s, (n, a) in enumerate(windows):
        for j in range(n + 1):
            pos.append(j)
            nd.append(n)
            acc.append(a)
            step.append(s)
    pos, acc = np.array(pos, np.int8), np.array(acc, np.int8)
    cols = {"request": np.zeros(len(pos), np.int32), "step": np.array(step, np.int32),
            "position": pos, "n_drafts": np.array(nd, np.int8), "accepted": acc,
            "status": status_for(pos, acc)}
    return Trace(experts=np.zeros((len(pos), 1, 2), np.int64), columns=cols, num_experts=8,
                 k_draft=k)


def test_acceptance_length_counts_drafting_steps_only_as_vllm_does():
    from specmoe.routing.acceptance import _acceptance_length

    # two drafting steps with 2 accepted each, and a last step that drafted nothing: vLLM says
    # 1 + 4/2 = 3.0 (counting the empty step too would give 1 + 4/3 = 2.33)
    out = _acceptance_length(_trace([(3, 2), (3, 2), (0, 0)]))
    assert out["tau"] == pytest.approx(3.0) and out["steps"] == 2
    assert out["steps_without_drafts"] == 1


def test_median_delta_uses_the_held_out_datasets_slices_only(small_trace):
    import dataclasses

    consec, anchor = row_overlaps(small_trace)
    tr = dataclasses.replace(small_trace, meta={**small_trace.meta, "run": {"dataset": "main+held"},
                                                "slice_datasets": {"a": "main", "b": "held"}})
    res = acceptance_stats(tr, consec, anchor)
    b = [r["delta"] for r in res["slices"]["b"]]
    held = res["heldout"]["held"]   # slice a is the main set
    assert set(res["heldout"]) == {"held"}
    assert held["slices"] == ["b"] and held["median_delta_by_position"] == pytest.approx(b)
    assert held["median_anchor_drop"] == res["slice_anchor_drop"]["b"]
    # the anchor drop: anchor overlap at position 1 minus at position K, by hand
    m = (tr.columns["category"] == "b")
    pos = tr.columns["position"]
    drop = anchor[m & (pos == 1)].mean() - anchor[m & (pos == tr.k_draft)].mean()
    assert res["slice_anchor_drop"]["b"] == pytest.approx(drop)
    tr = dataclasses.replace(tr, meta={**tr.meta, "run": {"dataset": "main"}})  # no held-out set
    assert acceptance_stats(tr, consec, anchor)["heldout"] == {}


def test_acceptance_stats_bootstraps_each_held_out_dataset_once(small_trace, monkeypatch):
    """acceptance_stats reran heldout_medians (its delta and anchor-drop bootstrap) over every
    held-out slice for top-level median_delta_* fields that nothing read: with one held-out
    dataset it is called once now, for that dataset, and the result keeps no top-level
    medians."""
    import dataclasses

    from specmoe.routing import acceptance

    calls = []
    real = acceptance.heldout_medians

    def spy(cols, names, *a):
        calls.append(list(names))
        return real(cols, names, *a)

    monkeypatch.setattr(acceptance, "heldout_medians", spy)
    consec, anchor = row_overlaps(small_trace)
    tr = dataclasses.replace(small_trace, meta={**small_trace.meta, "run": {"dataset": "main+held"},
                                                "slice_datasets": {"a": "main", "b": "held"}})
    res = acceptance_stats(tr, consec, anchor)
    assert calls == [["b"]]
    assert not any(k.startswith("median_") for k in res)


def test_anchor_effects_compare_anchor_overlap_not_consecutive(small_trace):
    from specmoe.routing.trace import ACCEPTED, FIRST_REJECTED

    consec, anchor = row_overlaps(small_trace)
    res = acceptance_stats(small_trace, consec, anchor)
    pos, st = small_trace.columns["position"], small_trace.columns["status"]
    for r in res["anchor_effects"]:
        j = r["draft_position"]
        want = compare(anchor[(pos == j) & (st == ACCEPTED)], anchor[(pos == j) & (st == FIRST_REJECTED)])
        assert r["cohens_d"] == pytest.approx(want["cohens_d"], nan_ok=True)
    assert res["anchor_effects"][1]["cohens_d"] != pytest.approx(res["by_position"][1]["cohens_d"])


def test_a_held_out_dataset_run_on_its_own_is_held_out(small_trace):
    """The study runs Aya (its languages the slices) as a run of its own, not as "main+aya": a
    dataset marked held out is summarised across its slices wherever it is run; unmarked, a
    single-dataset run has no held-out set."""
    import dataclasses

    from specmoe.routing.acceptance import heldout_split

    assert heldout_split("aya", {"Swahili": "aya", "Yoruba": "aya"}, {"aya"}) == {
        "aya": ["Swahili", "Yoruba"]}
    assert heldout_split("aya", {"Swahili": "aya"}) == {}
    assert heldout_split("mt+aya", {"Swahili": "aya", "w": "mt"}, {"aya"}) == {"aya": ["Swahili"]}
    consec, anchor = row_overlaps(small_trace)
    tr = dataclasses.replace(small_trace, meta={**small_trace.meta, "run": {"dataset": "held"},
                                                "slice_datasets": {"a": "held", "b": "held"}})
    res = acceptance_stats(tr, consec, anchor, heldout={"held"})
    assert res["heldout"]["held"]["slices"] == ["a", "b"]
    assert np.isfinite(res["heldout"]["held"]["median_delta_by_position"]).any()


def test_held_out_overlap_has_the_studys_range_across_slices():
    """Table 18's row of a held-out set: the mean over its slices and the smallest and largest."""
    from specmoe.report.runs import heldout_range

    slices = [{"n_windows": 10, "overlap_by_distance": [0.4, 0.3], "independent": 0.1},
              {"n_windows": 20, "overlap_by_distance": [0.5, 0.35], "independent": 0.2}]
    r = heldout_range("aya", slices)
    assert r["slice"] == "mean of aya" and r["n_windows"] == 30
    assert (r["step1"], r["step1_min"], r["step1_max"]) == (pytest.approx(0.45), 0.4, 0.5)
    assert (r["independent_min"], r["independent_max"]) == (0.1, 0.2)


def _clustered_sample(seed: int, requests: int = 30, per_request: int = 6):
    """Overlaps whose requests differ (a request-level offset) far more than tokens within one."""
    rng = np.random.default_rng(seed)
    offset = rng.normal(0.0, 0.04, (2, requests))
    req = np.repeat(np.arange(requests), per_request)
    acc = 0.40 + offset[0, req] + rng.normal(0.0, 0.01, req.size)
    rej_req = np.repeat(np.arange(requests), 2)
    rej = 0.39 + offset[1, rej_req] + rng.normal(0.0, 0.01, rej_req.size)
    return acc, rej, req, rej_req


def test_fewer_than_min_requests_give_no_interval_by_request():
    """by_request resamples through overlap.request_weights, floor included: where the row's
    requests (both arms together) are fewer than bootstrap.MIN_REQUESTS, the delta and d keep
    their points but get no interval by request (6 requests gave finite ones), as the overlap
    statistics and the matched controls; the row is "too few" besides."""
    from specmoe.routing import bootstrap
    from specmoe.routing.acceptance import TOO_FEW

    acc, rej, ar, rr = _clustered_sample(0, requests=bootstrap.MIN_REQUESTS - 1)
    out = compare(acc, rej, ar, rr)
    assert out["n_requests"] == bootstrap.MIN_REQUESTS - 1 and out["size"] == TOO_FEW
    assert np.isfinite(out["delta"]) and np.isfinite(out["cohens_d"])
    for key in ("delta_low_by_request", "delta_high_by_request", "cohens_d_low",
                "cohens_d_high"):
        assert np.isnan(out[key]), key
    enough = compare(*_clustered_sample(0, requests=bootstrap.MIN_REQUESTS))
    assert enough["delta_low_by_request"] < enough["delta"] < enough["delta_high_by_request"]


def test_copies_of_a_requests_tokens_are_not_new_evidence():
    """Each request's tokens repeated ten times: the token-level p shrinks towards 0, while the
    interval and the p clustered by request stay where they were (a request is the unit)."""
    acc, rej, ar, rr = _clustered_sample(0)
    once = compare(acc, rej, ar, rr)
    tenfold = compare(np.tile(acc, 10), np.tile(rej, 10), np.tile(ar, 10), np.tile(rr, 10))
    assert tenfold["p_tokens_welch"] < once["p_tokens_welch"] / 10
    assert tenfold["n_requests"] == once["n_requests"] == 30
    assert tenfold["delta_low_by_request"] == pytest.approx(once["delta_low_by_request"])
    assert tenfold["delta_high_by_request"] == pytest.approx(once["delta_high_by_request"])
    assert tenfold["p_by_request"] == pytest.approx(once["p_by_request"], rel=0.02)
    lo, hi = once["delta_low_by_request"], once["delta_high_by_request"]
    assert lo < once["delta"] < hi
    # the same input gives the same interval bit for bit (fixed seed)
    again = compare(acc, rej, ar, rr)
    assert (again["delta_low_by_request"], again["delta_high_by_request"]) == (lo, hi)


def test_cluster_robust_p_by_hand():
    """The CR2 sandwich of the regression of overlap on 'accepted' and its Imbens-Kolesar degrees
    of freedom, written out with explicit matrices and a loop over requests: each cluster's
    residuals multiplied by (I - H_gg)^(-1/2), the degrees of freedom (tr B)^2 / tr(B^2) of
    B = G'G, G's column g = (I - H) E_g (I - H_gg)^(-1/2) X_g (X'X)^(-1) e_b."""
    from specmoe.routing.acceptance import cluster_robust_p

    acc, rej, ar, rr = _clustered_sample(1, requests=12, per_request=3)
    y = np.concatenate([acc, rej])
    X = np.column_stack([np.ones(y.size), np.r_[np.ones(acc.size), np.zeros(rej.size)]])
    g = np.concatenate([ar, rr])
    bread = np.linalg.inv(X.T @ X)
    H = X @ bread @ X.T
    beta = bread @ X.T @ y
    u = y - X @ beta
    M = np.eye(y.size) - H
    meat, cols = np.zeros((2, 2)), []
    for c in np.unique(g):
        m = g == c
        w, v = np.linalg.eigh(np.eye(m.sum()) - H[np.ix_(m, m)])
        a_inv_sqrt = v @ np.diag(w ** -0.5) @ v.T
        s = X[m].T @ a_inv_sqrt @ u[m]
        meat += np.outer(s, s)
        col = np.zeros(y.size)
        col[m] = a_inv_sqrt @ X[m] @ bread[:, 1]
        cols.append(M @ col)
    v = bread @ meat @ bread
    G = np.column_stack(cols)
    B = G.T @ G
    df = np.trace(B) ** 2 / np.trace(B @ B)
    want = 2 * stats.t.sf(abs(beta[1]) / np.sqrt(v[1, 1]), df)
    assert cluster_robust_p(acc, rej, ar, rr) == pytest.approx(want, rel=1e-9)
    assert beta[1] == pytest.approx(acc.mean() - rej.mean())


@pytest.mark.parametrize("accepted,rejected,shared", [(10, 10, 0), (60, 10, 0), (60, 10, 10)])
def test_the_cluster_test_keeps_its_size_at_the_smallest_admitted_design(accepted, rejected,
                                                                         shared):
    """No delta, 10 requests in the smaller arm (the fewest a row is tested with), unbalanced
    token counts, a request-level offset and skewed token noise (2,000 simulated samples, fixed
    seed): the clustered test rejects at most ~7% at nominal 5% (CR1 with G - 1 degrees of
    freedom rejected 9.7% in the 60/10 design)."""
    from specmoe.routing.acceptance import cluster_test_size
    from specmoe.routing.bootstrap import MIN_REQUESTS

    assert rejected == MIN_REQUESTS
    assert cluster_test_size(accepted, rejected, shared, trials=2000, seed=2) <= 0.07


def test_a_row_from_fewer_than_10_requests_in_an_arm_says_too_few():
    """Rejected drafts from 4 requests: no p-value and no verdict on d (their numbers stay)."""
    from specmoe.routing.acceptance import TOO_FEW

    acc, rej, ar, rr = _clustered_sample(4)
    few = rr < 4
    out = compare(acc, rej[few], ar, rr[few])
    assert out["n_requests_rejected"] == 4 and out["n_requests_accepted"] == 30
    assert out["size"] == TOO_FEW
    assert all(np.isnan(out[k]) for k in ("p_by_request", "p_tokens_welch",
                                           "p_tokens_mannwhitney"))
    assert np.isfinite(out["cohens_d"]) and np.isfinite(out["delta"])
    assert compare(acc, rej, ar, rr)["size"] != TOO_FEW


def test_a_too_few_row_shows_no_token_interval_outside_any_difference_of_overlaps():
    """Two rejected drafts (overlaps 0.25 and 0.75) beside 120 accepted ones: Welch's interval of
    the delta was [-2.99, 3.02], shown in a "too few" row although overlaps differ by at most 1."""
    from specmoe.routing.acceptance import TOO_FEW

    acc = np.random.default_rng(1).integers(0, 9, 120) / 8
    out = compare(acc, np.array([0.25, 0.75]), np.arange(120) % 30, np.array([0, 1]))
    assert out["size"] == TOO_FEW
    assert np.isnan(out["delta_low_tokens"]) and np.isnan(out["delta_high_tokens"])


@pytest.mark.parametrize("a,b", [(7 / 12, 5 / 12), (1 / 3, 1 / 6), (0.1, 0.1)])
def test_arms_without_spread_give_no_d_and_no_test(a, b):
    """Each arm constant at a value without an exact binary form: the computed variances are
    rounding (about 1e-33), and d came out as 1.8e15 with size "large", p 0.0 by request and
    8e-245 over tokens (0.1 against 0.1: "negligible" from an interval of +-1.6e-8)."""
    from specmoe.routing.acceptance import NO_SPREAD_LABEL

    out = compare(np.full(24, a), np.full(24, b), np.arange(24) % 12, np.arange(24) % 12 + 12)
    assert out["size"] == NO_SPREAD_LABEL
    for key in ("cohens_d", "cohens_d_low", "cohens_d_high", "p_by_request", "p_tokens_welch",
                "delta_low_tokens"):
        assert np.isnan(out[key]), key
    assert out["delta"] == pytest.approx(a - b)
    assert np.isnan(cohens_d(np.full(5, a), np.full(7, b)))
    # one arm with spread: d and its test stand
    spread = np.full(24, a) + np.tile([0.0, 0.125], 12)
    out = compare(spread, np.full(24, b), np.arange(24) % 12, np.arange(24) % 12 + 12)
    assert np.isfinite(out["cohens_d"]) and out["size"] != NO_SPREAD_LABEL


def test_a_position_without_rejected_drafts_says_so():
    """A synthetic generator whose acceptance reaches 1 accepts every draft: the row's rejected
    side is empty, and its label says why rather than "too few"."""
    from specmoe.routing.acceptance import NONE_ACCEPTED, NONE_REJECTED

    acc, rej, ar, rr = _clustered_sample(4)
    out = compare(acc, rej[:0], ar, rr[:0])
    assert out["size"] == NONE_REJECTED and out["n_first_rejected"] == 0
    assert np.isnan(out["first_rejected_overlap"]) and np.isnan(out["delta"])
    assert compare(acc[:0], rej, ar[:0], rr)["size"] == NONE_ACCEPTED
    assert compare(acc, rej[:0])["size"] == NONE_REJECTED  # without requests too
    tr = generate(SynthParams(num_experts=16, top_k=2, num_layers=2, k_draft=3, requests=12,
                              steps=8, accept_prob=1.0, seed=3))
    consec, anchor = row_overlaps(tr)
    rows = acceptance_stats(tr, consec, anchor)["by_position"]
    assert rows and {r["size"] for r in rows} == {NONE_REJECTED}


def test_cohens_d_has_an_interval_by_request():
    """d's 95% interval resamples whole requests: it holds d, and copies of every request's tokens
    leave it where it was (the token count is not the evidence)."""
    acc, rej, ar, rr = _clustered_sample(5)
    once = compare(acc, rej, ar, rr)
    assert once["cohens_d_low"] < once["cohens_d"] < once["cohens_d_high"]
    tenfold = compare(np.tile(acc, 10), np.tile(rej, 10), np.tile(ar, 10), np.tile(rr, 10))
    assert tenfold["cohens_d_low"] == pytest.approx(once["cohens_d_low"], abs=0.05)
    assert tenfold["cohens_d_high"] == pytest.approx(once["cohens_d_high"], abs=0.05)


def test_holm_by_hand_and_across_positions_and_slices(small_trace):
    from specmoe.routing.acceptance import holm

    got = holm([0.01, 0.04, 0.03, float("nan")])
    assert got[:3] == pytest.approx([0.03, 0.06, 0.06]) and np.isnan(got[3])
    consec, anchor = row_overlaps(small_trace)
    res = acceptance_stats(small_trace, consec, anchor)
    family = (res["by_position"] + [r for rows in res["slices"].values() for r in rows]
              + res["anchor_effects"])  # the anchor effects are tests of the run too
    assert all("p_holm" in r for r in res["anchor_effects"])
    assert [r["p_holm"] for r in family] == pytest.approx(
        holm([r["p_by_request"] for r in family]), nan_ok=True)


def test_one_token_per_request_agrees_with_the_token_level_test():
    """Where every request has one token the clustered and the token-level tests agree (about:
    the degrees of freedom and the small-sample factors differ)."""
    rng = np.random.default_rng(3)
    acc, rej = rng.normal(0.42, 0.05, 200), rng.normal(0.40, 0.05, 150)
    out = compare(acc, rej, np.arange(200), np.arange(200, 350))
    assert out["p_by_request"] == pytest.approx(out["p_tokens_welch"], rel=0.1)
    assert out["delta_low_by_request"] == pytest.approx(out["delta_low_tokens"], abs=0.003)


@pytest.mark.parametrize("low,high,label", [(0.18, 0.44, "negligible to small"),
                                            (0.25, 0.45, "small"), (-0.1, 0.3,
                                                                    "negligible to small"),
                                            (-0.9, -0.6, "medium to large")])
def test_the_size_verdict_is_its_intervals(low, high, label):
    """d = 0.30 [0.18, 0.44] (the default run's position 2) is not "small": its interval reaches
    into "negligible"."""
    from specmoe.routing.acceptance import size_range

    assert size_range(low, high) == label


def _requests_trace(per_request, k=3):
    """A trace of several requests, each a list of (drafts, accepted) windows."""
    from specmoe.routing.trace import Trace

    parts = [_trace(w, k) for w in per_request]
    cols = {c: np.concatenate([p.columns[c] for p in parts]) for c in parts[0].columns}
    cols["request"] = np.concatenate([np.full(len(p), i, np.int32) for i, p in enumerate(parts)])
    return Trace(experts=np.concatenate([p.experts for p in parts]), columns=cols, num_experts=8,
                 k_draft=k)


def test_the_acceptance_length_has_an_interval_over_requests():
    """tau was one number with no interval, and predict drew it as known exactly (tau, tau): its
    interval comes from resampling whole requests, the independent units. Half the requests
    accept every draft and half none: tau = 2.5 with a wide interval; the same requests with
    ten times the windows each (more tokens, not more requests) keep about the same width."""
    from specmoe.routing.acceptance import _acceptance_length

    few = [[(3, 3)] * 4] * 6 + [[(3, 0)] * 4] * 6
    out = _acceptance_length(_requests_trace(few))
    assert out["tau"] == pytest.approx(2.5) and out["requests"] == 12
    assert 1 <= out["tau_low"] < 2.2 and 2.8 < out["tau_high"] <= 4 and not out["tau_clipped"]
    many = _acceptance_length(_requests_trace([w * 10 for w in few]))
    assert many["tau_high"] - many["tau_low"] == pytest.approx(
        out["tau_high"] - out["tau_low"], rel=1e-9)
    # every request alike: no spread between requests, a zero-width interval at tau
    same = _acceptance_length(_requests_trace([[(3, 3), (3, 0)]] * 12))
    assert same["tau_low"] == pytest.approx(2.5) and same["tau_high"] == pytest.approx(2.5)
    # below bootstrap.MIN_REQUESTS requests: no interval
    assert np.isnan(_acceptance_length(_requests_trace(few[:4] + few[6:10]))["tau_low"])


def test_the_acceptance_length_interval_stays_inside_1_to_k_plus_1():
    """Near K + 1 the basic interval's mirrored end passes the most tau can be: it is held at
    K + 1 and flagged."""
    from specmoe.routing.acceptance import _acceptance_length

    out = _acceptance_length(_requests_trace([[(3, 3)] * 5] * 11 + [[(3, 0)] * 5]))
    assert out["tau_high"] == 4.0 and out["tau_clipped"]
    assert out["tau_low"] < out["tau"] < 4.0


def test_the_acceptance_files_provenance_names_its_settings_and_its_trace(tmp_path):
    """Rule acceptance's output depends on params.heldout (which datasets' slices are held out):
    its provenance must hash that setting and name the trace, as the overlap stage's does. It
    wrote config_hash None over the trace's own, so two files that differ only in their held-out
    sets carried one record."""
    import json
    from types import SimpleNamespace as NS

    from specmoe.provenance import provenance
    from specmoe.routing.trace import write_trace
    from specmoe.stages.analysis import acceptance_stage

    tr = generate(SynthParams(num_experts=32, top_k=2, num_layers=2, requests=12, steps=4,
                              categories=["x", "y"], seed=1))
    tr.meta["run"] = {"model": "m", "drafter": "d", "k": 3, "dataset": "a+b"}
    tr.meta["slice_datasets"] = {"x": "a", "y": "b"}
    trace_path = tmp_path / "t.parquet"
    write_trace(trace_path, tr, provenance({"m": 1}, stage="trace"))
    docs = []
    for held in ([], ["a"]):
        out = tmp_path / f"acc{len(held)}.json"
        acceptance_stage(NS(trace=str(trace_path)), NS(json=str(out)), NS(heldout=held))
        docs.append(json.loads(out.read_text()))
    assert sorted(docs[0]["heldout"]) == ["b"] and sorted(docs[1]["heldout"]) == ["a", "b"]
    hashes = [d["provenance"]["config_hash"] for d in docs]
    assert None not in hashes and hashes[0] != hashes[1]
    assert all(d["provenance"]["trace"] == str(trace_path) for d in docs)
    assert all(d["provenance"]["stage"] == "acceptance" for d in docs)


def test_anchor_overlap_has_no_standard_error_from_fewer_than_min_requests():
    """The project gives no interval below bootstrap.MIN_REQUESTS requests; the anchor table's
    clustered SE refused only one request, and a 3-request trace reported se_by_request
    0.080/0.071/0.142 (and the figure drew them as error bars). Below the floor each row's SEs
    are NaN and the row says "too few"; with enough requests they are finite."""
    from specmoe.report import figures
    from specmoe.routing import bootstrap
    from specmoe.routing.acceptance import TOO_FEW, anchor_table
    from specmoe.report.runs import anchor_rows

    tr = generate(SynthParams(num_experts=64, top_k=4, num_layers=2, requests=3, steps=6,
                              accept_prob=0.6, seed=2))
    _, anchor = row_overlaps(tr)
    c = tr.columns
    rows = anchor_table(anchor, c["position"], c["status"], tr.k_draft, c["request"])
    assert rows and all(r["n_requests"] < bootstrap.MIN_REQUESTS for r in rows)
    assert all(np.isnan(r["se_by_request"]) and np.isnan(r["se_tokens"]) for r in rows)
    assert all(r["se_status"] == TOO_FEW for r in rows)
    assert all(np.isfinite(r["mean"]) for r in rows)   # the means are kept
    # the figure draws no error bar for them
    table = pd.DataFrame(anchor_rows({"model": "m"}, {"anchor": rows})).assign(run="m")
    fn, *args = figures._anchor_frame(table)
    fig = fn(*args)
    bars = [seg for cont in fig.axes[0].containers for coll in cont.lines[2]
            for seg in coll.get_segments() if len(seg)]
    assert bars == []
    figures.plt.close(fig)
    big = generate(SynthParams(num_experts=64, top_k=4, num_layers=2, requests=30, steps=6,
                               accept_prob=0.6, seed=2))
    _, anchor = row_overlaps(big)
    c = big.columns
    rows = anchor_table(anchor, c["position"], c["status"], big.k_draft, c["request"])
    enough = [r for r in rows if r["n_requests"] >= bootstrap.MIN_REQUESTS]
    assert enough and all(np.isfinite(r["se_by_request"]) and r["se_status"] == "ok"
                          for r in enough)


def _held_out(tr, slices):
    """The trace as a run of one held-out dataset "held" whose slices are `slices`."""
    import dataclasses

    return dataclasses.replace(tr, meta={**tr.meta, "run": {"dataset": "held"},
                                         "slice_datasets": {c: "held" for c in slices}})


def test_held_out_medians_leave_out_slices_too_few_to_decide():
    """12 requests over 6 held-out slices (2 a slice): every slice row is "too few", yet the
    held-out median printed delta_pos1..3 0.035/0.023/-0.229 and an anchor drop of 0.25, with no
    interval or flag; and the slice rows dropped their intervals and labels, and counted
    first-rejected tokens in n_rejected_pos<j>. Now the medians are NaN with the reason, and
    each slice row carries its interval by request, its size label and its requests."""
    from specmoe.report.runs import heldout_acceptance_rows
    from specmoe.routing import bootstrap
    from specmoe.routing.acceptance import NONE_ACCEPTED, TOO_FEW

    cats = ["c1", "c2", "c3", "c4", "c5", "c6"]
    tr = _held_out(generate(SynthParams(num_experts=64, top_k=4, num_layers=2, requests=12,
                                        steps=8, accept_prob=0.6, categories=cats, seed=1)), cats)
    consec, anchor = row_overlaps(tr)
    res = acceptance_stats(tr, consec, anchor, heldout={"held"})
    h = res["heldout"]["held"]
    for key in ("median_delta_by_position", "median_delta_low_by_position",
                "median_delta_high_by_position"):
        assert all(np.isnan(h[key])), key
    assert all(n == 0 for n in h["median_delta_slices_by_position"])
    assert all(w.startswith("no slice decides") and TOO_FEW in w
               for w in h["median_delta_why_by_position"])
    assert np.isnan(h["median_anchor_drop"]) and np.isnan(h["median_anchor_drop_low"])
    assert TOO_FEW in h["median_anchor_drop_why"]
    rows = heldout_acceptance_rows({"model": "m"}, res)
    slices = [r for r in rows if r["slice"] in cats]
    assert len(slices) == 6
    for r in slices:
        for j in range(1, tr.k_draft + 1):
            src = res["slices"][r["slice"]][j - 1]
            # every row too few (one at position 3 has no accepted draft at all)
            assert r[f"size_pos{j}"] == src["size"] in (TOO_FEW, NONE_ACCEPTED)
            assert np.isnan(r[f"delta_pos{j}_low"]) and np.isnan(r[f"delta_pos{j}_high"])
            assert r[f"n_requests_rejected_pos{j}"] == src["n_requests_rejected"] <= 2
            assert r[f"n_first_rejected_pos{j}"] == src["n_first_rejected"]   # tokens
        assert np.isnan(r["anchor_drop_low"]) and r["anchor_drop_status"] == TOO_FEW
        assert r["n_requests"] == 2 < bootstrap.MIN_REQUESTS
    (median,) = [r for r in rows if r["slice"] == "median of held"]
    for j in range(1, tr.k_draft + 1):
        assert np.isnan(median[f"delta_pos{j}"]) and median[f"n_slices_pos{j}"] == 0
        assert median[f"size_pos{j}"].startswith("no slice decides")
    assert np.isnan(median["anchor_drop"]) and median["anchor_drop_status"].startswith(
        "no slice decides")


def test_held_out_medians_are_over_the_deciding_slices_with_an_interval_by_request():
    """Two slices of 20 requests and one of 4: the median is over the slices whose row decides
    (not "too few" nor "none ..."), and it and the anchor drop come with 95% intervals from
    resamples of whole requests that hold them."""
    from specmoe.report.runs import heldout_acceptance_rows
    from specmoe.routing.acceptance import NONE_ACCEPTED, NONE_REJECTED, TOO_FEW

    tr = generate(SynthParams(num_experts=32, top_k=4, num_layers=2, k_draft=3, requests=44,
                              steps=20, accept_prob=0.6, accept_overlap_tie=2.0,
                              categories=["a", "b"], seed=5))
    cat = tr.columns["category"].astype(object).copy()
    cat[tr.columns["request"] < 4] = "tiny"
    tr.columns["category"] = cat
    tr = _held_out(tr, ["a", "b", "tiny"])
    consec, anchor = row_overlaps(tr)
    res = acceptance_stats(tr, consec, anchor, heldout={"held"})
    h = res["heldout"]["held"]
    assert h["slices"] == ["a", "b", "tiny"]
    assert all(r["size"] == TOO_FEW for r in res["slices"]["tiny"])
    for j in range(tr.k_draft):
        deciding = [res["slices"][n][j]["delta"] for n in h["slices"]
                    if res["slices"][n][j]["size"] not in (TOO_FEW, NONE_REJECTED, NONE_ACCEPTED)]
        assert h["median_delta_slices_by_position"][j] == len(deciding)
        if deciding:
            med = h["median_delta_by_position"][j]
            assert med == pytest.approx(np.median(deciding))
            assert (h["median_delta_low_by_position"][j] <= med
                    <= h["median_delta_high_by_position"][j])
    assert h["median_delta_slices_by_position"][0] == 2   # a and b decide at position 1
    drops = res["slice_anchor_drop"]
    assert h["median_anchor_drop"] == pytest.approx(np.median([drops["a"], drops["b"]]))
    assert h["median_anchor_drop_low"] < h["median_anchor_drop"] < h["median_anchor_drop_high"]
    assert h["median_anchor_drop_slices"] == 2
    lo, hi = res["slice_anchor_drop_interval"]["a"]
    assert lo < drops["a"] < hi
    assert all(np.isnan(res["slice_anchor_drop_interval"]["tiny"]))
    rows = {r["slice"]: r for r in heldout_acceptance_rows({"model": "m"}, res)}
    assert rows["median of held"]["delta_pos1"] == h["median_delta_by_position"][0]
    assert rows["median of held"]["delta_pos1_low"] == h["median_delta_low_by_position"][0]
    assert rows["median of held"]["anchor_drop_status"] == "ok"
    assert rows["a"]["delta_pos1_low"] == res["slices"]["a"][0]["delta_low_by_request"]
    assert rows["a"]["anchor_drop_status"] == "ok" and rows["tiny"]["anchor_drop_status"] == TOO_FEW
    assert rows["median of held"]["n_requests"] == 44 and rows["tiny"]["n_requests"] == 4
    # a file of the old acceptance job has none of these: refused in one line, not read as NaN
    from specmoe.errors import InputError

    old = {k: v for k, v in res.items() if k != "slice_requests"}
    with pytest.raises(InputError, match=r"older acceptance job\): rerun rule acceptance$"):
        heldout_acceptance_rows({}, {**old, "run": {"model": "m", "drafter": "d", "k": 3,
                                                    "dataset": "held"}})
