import numpy as np
import pytest

from specmoe.routing import bootstrap, ipf
from specmoe.errors import InputError
from specmoe.routing.overlap import window_stats
from specmoe.routing.synth import SynthParams, generate
from specmoe.routing.unique import uniform_unique


@pytest.mark.parametrize("n,k,window", [(128, 8, 4), (64, 4, 6), (8, 2, 8), (256, 8, 9)])
def test_uniform_ipf_at_independence_is_closed_form(n, k, window):
    res = ipf.predict_uniform(n, k, [k / n] * (window - 1))
    assert res["converged"]
    assert abs(res["unique"] - uniform_unique(n, k, window)) < 1e-9


def test_fitted_margins_match_targets():
    q = np.array([0.02, 0.0625, 0.2, 0.35])
    ov = np.array([0.43, 0.36, 0.33, 0.31, 0.30])
    res = ipf.fit(q, ov)
    assert res.converged and res.n_clipped == 0
    positions = ov.size + 1
    bits = (np.arange(2**positions)[:, None] >> np.arange(positions)) & 1
    for e, qe in enumerate(q):
        p = res.dist[e]
        assert abs(p.sum() - 1) < 1e-12
        for i in range(positions):
            assert abs(p[bits[:, i] == 1].sum() - qe) < 1e-9
            for j in range(i + 1, positions):
                both = p[(bits[:, i] == 1) & (bits[:, j] == 1)].sum()
                assert abs(both - qe * ov[j - i - 1]) < 1e-9


def test_two_positions_are_pinned_by_the_margins():
    q, ov = np.array([0.1]), np.array([0.5])
    res = ipf.fit(q, ov)
    p11 = 0.05
    np.testing.assert_allclose(res.dist[0], [1 - 0.2 + p11, 0.1 - p11, 0.1 - p11, p11], atol=1e-12)


def test_more_overlap_fewer_unique():
    lo = ipf.predict_uniform(128, 8, [0.1, 0.1, 0.1])["unique"]
    hi = ipf.predict_uniform(128, 8, [0.5, 0.4, 0.35])["unique"]
    assert 8 < hi < lo < 32


def test_batch_prediction():
    one = ipf.predict_uniform(128, 8, [0.43, 0.36, 0.33], batch=1)["unique"]
    four = ipf.predict_uniform(128, 8, [0.43, 0.36, 0.33], batch=4)["unique"]
    p0 = 1 - one / 128
    assert abs(four - 128 * (1 - p0**4)) < 1e-9


def test_infeasible_margins_are_clipped_and_counted():
    # q = 0.8 needs P(1,1) >= 2q - 1 = 0.6, i.e. overlap >= 0.75
    res = ipf.fit(np.array([0.8, 0.1]), np.array([0.2]))
    assert res.n_clipped == 1
    assert res.converged
    res = ipf.fit(np.array([0.1]), np.array([0.3, 0.3]))
    assert res.n_clipped == 0


def test_jointly_infeasible_is_reported_not_hidden():
    # each pair table is feasible but no joint distribution has all three
    # three mutually exclusive events of probability 0.5 each
    res = ipf.fit(np.array([0.5]), np.array([0.0, 0.0]), max_iter=300)
    assert not res.converged
    assert res.n_unconverged == 1 and res.n_infeasible == 1


@pytest.mark.parametrize("ov", [[1.0, 0.0, 1.0], [0.9, 0.1, 0.9]])
def test_overlaps_that_cannot_hold_together_are_infeasible_by_linear_program(ov):
    """S0 = S1 and S1 = S2 force S0 = S2; 0.9, 0.1, 0.9 breaks the triangle inequality: `specmoe
    ipf` printed 8.0 and 11.74 unique experts for these and exited 0."""
    res = ipf.fit(np.array([8 / 128]), np.array(ov))
    assert not res.converged and res.n_infeasible == 1
    assert not ipf.feasible(8 / 128, 8 / 128 * np.array(ov))
    assert ipf.predict_uniform(128, 8, ov)["infeasible"]


@pytest.mark.parametrize("k_draft,lam", [(7, 0.95), (3, 0.99)])
def test_feasible_overlaps_near_the_boundary_are_not_called_infeasible(k_draft, lam):
    """Overlaps of an exact two-state Markov chain, ov(d) = q + (1 - q) lam^d, are feasible by
    construction; IPF stopped at its 2,000 cycles 5e-10 short and the fit was reported not
    converged ('jointly infeasible' in the pipeline's log) while its unique experts matched the
    chain's exactly."""
    q = 8 / 128
    ov = q + (1 - q) * lam ** np.arange(1, k_draft + 1)
    res = ipf.fit(np.array([q]), ov)
    assert res.n_infeasible == 0 and ipf.feasible(q, q * ov)
    # the chain's own P(never used in K + 1 tokens): start unused, stay unused K times
    stay = 1 - q * (1 - lam)  # P(unused -> unused) of the chain with stationary q
    assert res.p_zero[0] == pytest.approx((1 - q) * stay ** k_draft, rel=1e-6)
    assert res.converged or res.max_error < 1e-7


def test_skewed_margins_below_independence_still_sum_to_the_overlap():
    """Zipf loads (N = 64, k = 4) with ov(3) = 0.25 below independence (0.29): the closed-form
    lambda put cold experts' P11 below 0 and the clip raised the fitted overlap to 0.258 with 49
    tables clipped; lambda solved with the floors held meets 0.25 exactly and clips none."""
    n, k = 64, 4
    w = 1 / np.arange(1, n + 1)
    q = (k * w / w.sum())[None, :]
    ov = np.array([[0.4, 0.3, 0.25]])
    assert (q ** 2).sum() / k > 0.25
    p11 = ipf.skewed_pairs(q, ov)[0]
    np.testing.assert_allclose(p11.sum(axis=0), k * ov[0], rtol=1e-12)
    assert np.all(p11 >= np.maximum(0, 2 * q[0] - 1)[:, None]) and np.all(p11 <= q[0][:, None])
    res = ipf.fit_layers(q, ov)
    assert res.n_clipped == 0 and res.converged
    bits = (np.arange(16)[:, None] >> np.arange(4)) & 1
    fitted = [(res.dist[:, (bits[:, 0] == 1) & (bits[:, d] == 1)].sum(axis=1)).sum() / k
              for d in (1, 2, 3)]
    np.testing.assert_allclose(fitted, ov[0], atol=1e-8)
    # above independence nothing moves: the closed form, bit for bit
    up = np.array([[0.45, 0.4, 0.38]])
    lam = ((q.sum(axis=1, keepdims=True) * up - (q ** 2).sum(axis=1, keepdims=True))
           / (q * (1 - q)).sum(axis=1, keepdims=True))
    assert np.array_equal(ipf.skewed_pairs(q, up)[0],
                          q[0, :, None] ** 2 + lam * (q * (1 - q))[0, :, None])
    # the least overlap these loads allow: the hottest expert (q = 0.84) is shared >= 2q - 1
    assert ipf.skewed_floor(q[0]) == pytest.approx((2 * q[0, 0] - 1) / k)
    # below it the held margins cannot meet the overlap: counted as clipped, not fitted silently
    assert ipf.fit_layers(q, np.array([[0.4, 0.3, 0.15]])).n_clipped == n


@pytest.mark.parametrize("stick,skew", [(0.45, 0.6), (0.2, 0.0), (0.6, 1.0)])
def test_skewed_ipf_predicts_synthetic_windows(stick, skew):
    tr = generate(SynthParams(num_experts=64, top_k=4, num_layers=3, k_draft=3, skew=skew,
                              stickiness=stick, requests=60, steps=60, seed=21))
    ws = window_stats(tr, shuffle_null=False)
    pred = ipf.predict_skewed(ws.q, ws.overlap)["unique"]
    emp = float(ws.unique.mean())
    assert abs(pred - emp) / emp < 0.03


@pytest.mark.parametrize("ov,msg", [([1.2], r"\[0, 1\]"), ([], "at least one"),
                                    ([0.3] * 9, "at most 9")])
def test_bad_overlaps(ov, msg):
    with pytest.raises(InputError, match=msg):
        ipf.predict_uniform(128, 8, ov)


def test_skewed_margins_stay_feasible_for_hot_experts():
    """One expert takes 90% of tokens, overlap 0.8 (independence 0.66): q ov(1) = 0.72 < q^2 =
    0.81 says the hot expert avoids itself; the lambda form keeps every expert above
    independence, matches the measured intersection sum_e P11 = k ov(d), and equals q ov(d) for
    uniform loads."""
    q = np.array([[0.9, 0.1, 0.5, 0.5]])  # k = 2 of N = 4
    ov = np.array([[0.8, 0.75, 0.7]])
    p11 = ipf.skewed_pairs(q, ov)[0]
    np.testing.assert_allclose(p11.sum(axis=0), 2 * ov[0])
    assert np.all(p11 >= q[0, :, None] ** 2 - 1e-12) and np.all(p11 <= q[0, :, None] + 1e-12)
    assert np.any(q[0, :, None] * ov[0] < q[0, :, None] ** 2 - 1e-9)  # the study's form
    new = ipf.fit_layers(q, ov)
    assert new.n_clipped == 0 and new.converged
    uniform = np.full((1, 8), 0.25)
    np.testing.assert_allclose(ipf.skewed_pairs(uniform, ov)[0], 0.25 * np.repeat(ov, 8, axis=0))


def _overlap_json(tmp_path, seq: list[float], window: list[float], n=128, k=8, empirical=19.5):
    """A minimal overlap result (uniform loads, one layer) with the overlap along the committed
    sequence and inside windows given apart."""
    from handmade import per_request
    from specmoe.provenance import write_json

    q = np.full((1, n), k / n)
    path = tmp_path / "overlap.json"
    write_json(path, {"run": {"model": "m"},
                      "summary": {"num_experts": n, "top_k": k, "k_draft": len(window),
                                  "sequence_by_distance": seq},
                      "unique": {"empirical": empirical},
                      "per_layer": {"overlap": [window], "q": q.tolist()},
                      "per_request": per_request(seq, [window], q, k, empirical)}, {})
    return path


def run_ipf(overlap_json, out, batch_sizes) -> None:
    """Rule ipf's stage on one overlap file, as its job runs it."""
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import IpfParams
    from specmoe.stages.analysis import ipf_stage

    ipf_stage(Named({"overlap": overlap_json}), Named({"json": out}), IpfParams(batch_sizes))


def test_the_study_input_gives_its_table_20_and_this_projects_is_labelled_apart(tmp_path):
    """Like for like: fed the study's Table 17 (Qwen3-30B, along the committed sequence, steps
    1-3) the stage's uniform IPF is the study's Table 20 value (20.08, 3.0% over the measured
    19.5); the window overlaps feed this project's own estimators, each named so."""
    from specmoe.sources import published
    from specmoe.provenance import read_json
    from specmoe.stages.analysis import IPF_INPUTS

    pub = published.load("overlap_by_distance").set_index("model").loc["Qwen3-30B"]
    seq = [float(pub[f"step{d}"]) for d in range(1, 9) if f"step{d}" in pub] + [0.3] * 4
    run_ipf(_overlap_json(tmp_path, seq, [0.47, 0.40, 0.37]), tmp_path / "ipf.json", [1, 4])
    out = read_json(tmp_path / "ipf.json")
    table20 = published.load("unique_experts_ipf").set_index("model").loc["Qwen3-30B",
                                                                          "uniform_ipf"]
    assert round(out["prediction"]["uniform_sequence"], 2) == table20 == 20.08
    assert out["relative_error"]["uniform_sequence"] == pytest.approx(20.08 / 19.5 - 1, abs=1e-3)
    assert out["prediction"]["uniform_window"] < out["prediction"]["uniform_sequence"]
    assert set(out["inputs"]) == set(out["prediction"]) == set(IPF_INPUTS)
    assert "study's input" in out["inputs"]["uniform_sequence"]
    assert "this project's" in out["inputs"]["uniform_window"]
    assert "this project's" in out["inputs"]["skewed_window"]
    assert {r["batch"] for r in out["by_batch"]} == {1, 4}


def test_without_a_sequence_overlap_the_study_input_is_missing_not_made_up(tmp_path):
    from specmoe.provenance import read_json

    run_ipf(_overlap_json(tmp_path, [], [0.47, 0.40, 0.37]), tmp_path / "ipf.json", [1])
    out = read_json(tmp_path / "ipf.json")
    assert np.isnan(out["prediction"]["uniform_sequence"])
    assert np.isfinite(out["prediction"]["uniform_window"])


def _overlap_then_ipf(tmp_path, num_experts: int):
    """A synthetic trace of 24 requests (num_experts experts, 4 routed, K = 3) through the overlap
    and ipf stages at batch 1: the trace and the two stages' results."""
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import OverlapParams
    from specmoe.provenance import read_json
    from specmoe.routing.trace import write_trace
    from specmoe.stages import analysis

    tr = generate(SynthParams(num_experts=num_experts, top_k=4, num_layers=2, k_draft=3,
                              skew=0.5, stickiness=0.4, requests=24, steps=30, seed=3))
    write_trace(tmp_path / "t.parquet", tr)
    o = tmp_path / "o.json"
    analysis.overlap_stage(Named({"trace": tmp_path / "t.parquet"}), Named({"json": o}),
                           OverlapParams(batch_sizes=[1], shuffle_null=True))
    run_ipf(o, tmp_path / "i.json", [1])
    return tr, read_json(o), read_json(tmp_path / "i.json")


def test_the_ipf_error_has_an_interval_over_requests_that_refits_agree_with(tmp_path):
    """The 'within 4%' finding compared point estimates. The overlap and ipf stages now give the
    uniform IPF's error a 95% interval over requests: the measured unique experts and the IPF's
    input overlaps recomputed in each resample of requests, the prediction linearised along its
    slope. The interval holds the point and matches exact refits of the resamples' overlaps."""
    from specmoe.routing import overlap

    tr, ov, out = _overlap_then_ipf(tmp_path, 64)
    err = out["relative_error"]["uniform_sequence"]
    lo, hi = out["relative_error_interval"]["uniform_sequence"]
    assert lo < err < hi and hi - lo > 0.001
    pr = ov["per_request"]
    assert len(pr["request"]) == 24  # one unit per request, not per window or token
    # the pieces add up to the run's own numbers
    assert np.sum(pr["unique_sum"]) / np.sum(pr["full_windows"]) == pytest.approx(
        ov["unique"]["empirical"])
    # exact refits of the resamples give the same interval within a tenth of its width
    w = overlap.request_weights(24)
    ob = (w @ np.asarray(pr["sequence_sums"])) / ((w @ np.asarray(pr["sequence_pairs"])) * 4)
    meas = (w @ np.asarray(pr["unique_sum"])) / (w @ np.asarray(pr["full_windows"]))
    exact = np.array([ipf.predict_uniform(64, 4, ob[i])["unique"] for i in range(400)])
    elo, ehi = bootstrap.widen(err, *np.percentile(exact / meas[:400] - 1, [2.5, 97.5]), 24)
    assert abs(elo - lo) < 0.1 * (hi - lo) and abs(ehi - hi) < 0.1 * (hi - lo)


def test_the_error_interval_steps_one_way_at_an_overlap_of_0():
    """The slope of the interval's linearisation took central differences at ov +- 1e-4, which
    left [0, 1] at an overlap of 0 or 1 and raised InputError: the step is one-sided there."""
    rng = np.random.default_rng(0)
    r = 20
    pairs = np.full((r, 3), 100.0)
    sums = np.stack([np.zeros(r), rng.binomial(400, 0.1, r), rng.binomial(400, 0.1, r)],
                    axis=1).astype(float)
    ov = sums.sum(axis=0) / (pairs.sum(axis=0) * 4)
    assert ov[0] == 0
    pred = ipf.predict_uniform(64, 4, ov)["unique"]
    u_sum, u_n = rng.normal(30 * pred, 5, r), np.full(r, 30.0)
    w, measured = ipf.measured_resamples({"unique_sum": u_sum, "full_windows": u_n})
    lo, hi = ipf.uniform_error_interval(64, 4, ov, pred, sums, pairs, 4, w, measured)
    assert lo < pred / (u_sum.sum() / u_n.sum()) - 1 < hi


def test_the_error_interval_follows_the_shared_bootstrap_level(monkeypatch):
    """The IPF's error interval resamples the overlaps' requests, so it takes their level and
    resamples (routing.bootstrap): its percentiles were a literal 2.5/97.5 and its resamples a
    literal 2,000, and a lower shared level left it as wide as before."""
    from specmoe.routing import bootstrap

    rng = np.random.default_rng(0)
    r = 20
    pairs = np.full((r, 3), 100.0)
    sums = rng.binomial(400, 0.1, (r, 3)).astype(float)
    ov = sums.sum(axis=0) / (pairs.sum(axis=0) * 4)
    pred = ipf.predict_uniform(64, 4, ov)["unique"]
    pieces = {"unique_sum": rng.normal(30 * pred, 5, r), "full_windows": np.full(r, 30.0)}
    w, measured = ipf.measured_resamples(pieces)
    lo, hi = ipf.uniform_error_interval(64, 4, ov, pred, sums, pairs, 4, w, measured)
    monkeypatch.setattr(bootstrap, "LEVEL", 0.5)
    w, measured = ipf.measured_resamples(pieces)
    nlo, nhi = ipf.uniform_error_interval(64, 4, ov, pred, sums, pairs, 4, w, measured)
    assert 0 < nhi - nlo < 0.8 * (hi - lo)


def test_the_ipf_stage_completes_where_every_token_routes_alike(tmp_path):
    """Identical routing (every token to the same k experts) gives overlaps of 1 at every
    distance: the interval's slope stepped past 1 and the stage raised InputError. It now
    predicts k unique experts, and the interval, whose fits a step below 1 have no
    distribution, is NaN."""
    from specmoe.contracts import Named
    from specmoe.contracts.analysis import OverlapParams
    from specmoe.provenance import read_json
    from specmoe.routing.trace import write_trace
    from specmoe.stages import analysis

    tr = generate(SynthParams(num_experts=16, top_k=2, num_layers=2, k_draft=3, requests=12,
                              steps=10, seed=0))
    tr.experts[:] = np.array([3, 7], tr.experts.dtype)
    write_trace(tmp_path / "t.parquet", tr)
    o = tmp_path / "o.json"
    analysis.overlap_stage(Named({"trace": tmp_path / "t.parquet"}), Named({"json": o}),
                           OverlapParams(batch_sizes=[1], shuffle_null=True))
    run_ipf(o, tmp_path / "i.json", [1])
    out = read_json(tmp_path / "i.json")
    assert out["sequence_overlap"] == [1.0, 1.0, 1.0]
    assert out["prediction"]["uniform_sequence"] == pytest.approx(2.0)
    assert np.isnan(out["relative_error_interval"]["uniform_sequence"]).all()


def test_every_ipf_error_and_the_measured_value_have_their_interval(tmp_path):
    """Only the study's input (uniform_sequence) had an interval of its error: the window
    overlaps' uniform IPF and the skewed IPF were printed as signed numbers, and the measured
    unique experts (every error's denominator) had none. Each has one now, over the same request
    resamples, and the linearised ends agree with exact refits of the resamples."""
    from specmoe.routing import overlap

    tr, ov, out = _overlap_then_ipf(tmp_path, 32)
    assert set(out["relative_error_interval"]) == {"uniform_sequence", "uniform_window",
                                                   "skewed_window"}
    for key, (lo, hi) in out["relative_error_interval"].items():
        assert lo < out["relative_error"][key] < hi and hi - lo > 0.001, key
    elo, ehi = out["empirical_interval"]
    assert elo < out["empirical"] < ehi
    # the unique_experts table carries them all
    from specmoe.report.runs import unique_experts_row

    row = unique_experts_row({**ov, "run": {"model": "m", "drafter": "d", "k": 3,
                                            "dataset": "x"}}, out)
    assert (row["empirical_low"], row["empirical_high"]) == (elo, ehi)
    for key, (lo, hi) in out["relative_error_interval"].items():
        assert (row[f"ipf_{key}_error_pct_low"], row[f"ipf_{key}_error_pct_high"]) == (
            100 * lo, 100 * hi)
    pr = ov["per_request"]
    # the pieces add up to the run's own inputs: each layer's window overlaps and loads
    sums, pairs = np.asarray(pr["window_sums"]), np.asarray(pr["window_pairs"])
    np.testing.assert_allclose(sums.sum(axis=0) / (pairs.sum(axis=0) * 4),
                               ov["per_layer"]["overlap"], rtol=1e-12)
    loads, tokens = np.asarray(pr["loads"]), np.asarray(pr["tokens"])
    np.testing.assert_allclose(loads.sum(axis=0) / tokens.sum(), ov["per_layer"]["q"],
                               rtol=1e-12)
    # exact refits of 300 resamples give the same intervals within a tenth of their width
    w = overlap.request_weights(24)[:300]
    meas = (w @ np.asarray(pr["unique_sum"])) / (w @ np.asarray(pr["full_windows"]))
    ov_b = np.einsum("br,rld->bld", w, sums) / ((w @ pairs)[:, None, :] * 4)
    q_b = np.einsum("br,rle->ble", w, loads) / (w @ tokens)[:, None, None]
    exact = {"uniform_window": [ipf.predict_uniform(32, 4, ov_b[i].mean(axis=0))["unique"]
                                for i in range(len(w))],
             "skewed_window": [ipf.predict_skewed(q_b[i], ov_b[i])["unique"]
                               for i in range(len(w))]}
    for key, unique in exact.items():
        lo, hi = out["relative_error_interval"][key]
        xlo, xhi = bootstrap.widen(out["relative_error"][key],
                                   *np.percentile(np.asarray(unique) / meas - 1, [2.5, 97.5]), 24)
        assert abs(xlo - lo) < 0.1 * (hi - lo) and abs(xhi - hi) < 0.1 * (hi - lo), (key, lo, hi,
                                                                                   xlo, xhi)
    # the measured value's interval: its resamples' percentiles widened for 24 requests
    assert out["empirical_interval"] == pytest.approx(list(bootstrap.widen(
        out["empirical"], *np.percentile(overlap.request_weights(24) @ np.asarray(pr["unique_sum"])
                                         / (overlap.request_weights(24)
                                            @ np.asarray(pr["full_windows"])), [2.5, 97.5]),
        24)))


def test_the_ipf_error_intervals_are_widened_for_few_requests_as_the_others_are(tmp_path):
    """Every request-resampled interval (overlaps, controls, acceptance) is widened about its
    point by bootstrap.small_sample_factor (sqrt(n/(n-1)) t/z: 1.09 at 24 requests), since plain
    percentile intervals left the truth out of 8-10% of traces of 10-12 requests; the IPF's error
    and measured-value intervals were not, and were the plain percentiles of their resamples."""
    from specmoe.routing import ipf as ipf_mod

    tr, ov, out = _overlap_then_ipf(tmp_path, 32)
    pr = ov["per_request"]
    w, measured = ipf_mod.measured_resamples(pr)
    plain = ipf_mod.empirical_interval(measured)
    f = bootstrap.small_sample_factor(24)
    assert f > 1.05
    lo, hi = out["empirical_interval"]
    emp = out["empirical"]
    assert emp - lo == pytest.approx(f * (emp - plain[0]))
    assert hi - emp == pytest.approx(f * (plain[1] - emp))
    for key, (lo, hi) in out["relative_error_interval"].items():
        assert lo < out["relative_error"][key] < hi, key


def test_the_words_give_each_ipf_error_its_interval_and_a_sign_only_where_it_is_decided(
        tmp_path):
    """The window overlaps' and the skewed IPF's errors were worded as signed numbers without an
    interval ("(+5.0%)"), the measured unique experts without one: each error is given with its
    interval, "over"/"under" where the interval excludes 0, "sign undecided" where it does not,
    and no sign where it has none."""
    import pandas as pd
    from declared import tables_in

    from specmoe.report import prose

    pd.DataFrame([{
        "model": "fine", "k": 3, "dataset": "d", "empirical": 20.0, "empirical_low": 19.5,
        "empirical_high": 20.5, "uniform": 29.0,
        "ipf_uniform_sequence": 20.4, "ipf_uniform_sequence_error_pct": 2.0,
        "ipf_uniform_sequence_error_pct_low": 0.5, "ipf_uniform_sequence_error_pct_high": 3.5,
        "ipf_uniform_window": 21.0, "ipf_uniform_window_error_pct": 5.0,
        "ipf_uniform_window_error_pct_low": -1.0, "ipf_uniform_window_error_pct_high": 11.0,
        "ipf_skewed_window": 19.0, "ipf_skewed_window_error_pct": -5.0,
        "ipf_skewed_window_error_pct_low": float("nan"),
        "ipf_skewed_window_error_pct_high": float("nan")}]).to_csv(
        tmp_path / "unique_experts.csv", index=False)
    words = " ".join(prose.measured_findings(tables_in(tmp_path)))
    assert "unique experts per window 20.00 [19.50, 20.50] measured" in words
    assert "(the study's input) 20.40 (+2.0% [+0.5%, +3.5%], over)" in words
    assert "(this project's) 21.00 (+5.0% [-1.0%, +11.0%], sign undecided)" in words
    assert "skewed IPF (this project's) 19.00 (-5.0%, no interval: no sign claimed)" in words


def test_the_ipf_stage_refuses_an_overlap_result_without_its_per_request_pieces(tmp_path):
    """The overlap stage always writes its per-request pieces; an overlap file without them (an
    older or foreign one) made the IPF stage only warn and write no error interval, where one
    lacking some of the pieces raised: both now stop the job, saying to rerun the overlap
    stage."""
    from specmoe.provenance import read_json, write_json

    o = _overlap_json(tmp_path, [0.31, 0.27, 0.25], [0.47, 0.40, 0.37])
    run_ipf(o, tmp_path / "with.json", [1])  # the hand-made file with its pieces runs
    assert read_json(tmp_path / "with.json")
    ov = read_json(o)
    del ov["per_request"]
    write_json(o, ov, {})
    with pytest.raises(InputError, match=r"the overlap results have no per-request pieces "
                                         r"\(.*\): rerun the overlap stage"):
        run_ipf(o, tmp_path / "without.json", [1])


@pytest.mark.parametrize("key", ["request", "sequence_sums", "sequence_pairs", "unique_sum",
                                 "full_windows", "window_sums", "window_pairs", "loads", "tokens"])
def test_the_ipf_stage_refuses_per_request_pieces_lacking_any_key(tmp_path, key):
    """The check for the per-request pieces named four of the nine keys the overlap stage writes;
    without unique_sum (or full_windows, sequence_sums, sequence_pairs) the IPF stage stopped on
    a bare KeyError. Each missing key is now the one-line error naming it, to rerun the overlap
    stage."""
    from specmoe.provenance import read_json, write_json

    o = _overlap_json(tmp_path, [0.31, 0.27, 0.25], [0.47, 0.40, 0.37])
    ov = read_json(o)
    assert key in ov["per_request"]
    del ov["per_request"][key]
    write_json(o, ov, {})
    with pytest.raises(InputError, match=rf"^the overlap results' per-request pieces lack {key} "
                                         r"\(.*\): rerun the overlap stage$"):
        run_ipf(o, tmp_path / "without.json", [1])


def test_every_batch_extrapolation_is_the_one_batch_unique(tmp_path):
    """sum_e (1 - p0^B) is written once (unique.batch_unique): the uniform and skewed fits and
    the ipf stage's rows by batch size give exactly its value from the fits' own unused shares,
    and the IPF's result has no second copy of it (IPFResult.batch_unique, never called, is
    gone)."""
    from specmoe.provenance import read_json
    from specmoe.routing.unique import batch_unique

    assert not hasattr(ipf.IPFResult, "batch_unique")
    ov, q = [0.43, 0.36, 0.33], np.array([[0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05]])
    p0 = ipf.fit(np.array([8 / 128]), np.array(ov)).p_zero
    skew_p0 = ipf.fit_layers(q, np.array([ov])).p_zero
    for b in (1, 2, 3, 7, 64):
        assert ipf.predict_uniform(128, 8, ov, batch=b)["unique"] == 128 * batch_unique(p0, b)
        assert ipf.predict_skewed(q, [ov], batch=b)["unique"] == batch_unique(skew_p0, b).mean()
    run_ipf(_overlap_json(tmp_path, [0.45, 0.38, 0.35], ov), tmp_path / "ipf.json", [1, 3, 64])
    out = read_json(tmp_path / "ipf.json")
    pred = out["prediction"]
    for row in out["by_batch"]:
        b = row["batch"]
        for key in ("uniform_sequence", "uniform_window"):
            assert row[f"verify_ipf_{key}"] == 128 * batch_unique([1 - pred[key] / 128], b)[()]
    assert out["by_batch"][0]["verify_ipf_skewed_window"] == pred["skewed_window"]
